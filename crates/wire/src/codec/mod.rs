//! The per-revision codecs.
//!
//! The message model ([`crate`]) is shared by every revision; [`methods`]
//! holds every method of every revision as one table (introduced, removed,
//! by sender and kind), a [`RevisionCodec`] reads it for one revision, and
//! [`for_version`] picks one. No code outside this module compares version
//! strings.

pub mod methods;
mod revision;

pub use methods::{Kind, METHODS, MethodRow, Sender};
pub use revision::{CACHEABLE_METHODS, ReadError, RevisionCodec};

use protocol_droid_domain::ProtocolVersion;

static V2024_11_05: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2024_11_05,
};
static V2025_03_26: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2025_03_26,
};
static V2025_06_18: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2025_06_18,
};
static V2025_11_25: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2025_11_25,
};
static V2026_07_28: RevisionCodec = RevisionCodec {
    version: ProtocolVersion::V2026_07_28,
};

/// The codec of `version`.
#[must_use]
pub fn for_version(version: ProtocolVersion) -> &'static RevisionCodec {
    match version {
        ProtocolVersion::V2024_11_05 => &V2024_11_05,
        ProtocolVersion::V2025_03_26 => &V2025_03_26,
        ProtocolVersion::V2025_06_18 => &V2025_06_18,
        ProtocolVersion::V2025_11_25 => &V2025_11_25,
        ProtocolVersion::V2026_07_28 => &V2026_07_28,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use protocol_droid_domain::ir::{LowerError, ToolResult, TranslationReport};
    use protocol_droid_domain::{DegradePolicy, Feature, ProtocolVersion};

    use super::for_version;

    type TestError = Box<dyn std::error::Error>;

    #[test]
    fn a_modern_result_is_written_with_its_result_type() -> Result<(), TestError> {
        let mut report = TranslationReport::new(ProtocolVersion::V2026_07_28);
        let written = for_version(ProtocolVersion::V2026_07_28).lower_tool_result(
            ToolResult::text("hi"),
            DegradePolicy::strict(),
            &mut report,
        )?;
        assert_eq!(
            written,
            json!({ "content": [{ "type": "text", "text": "hi" }], "resultType": "complete" })
        );
        Ok(())
    }

    #[test]
    fn audio_for_2024_is_described_in_text_and_reported() -> Result<(), TestError> {
        let wire = json!({
            "content": [{ "type": "audio", "data": "AAAA", "mimeType": "audio/ogg" }],
            "resultType": "complete",
        });
        let value = for_version(ProtocolVersion::V2026_07_28)
            .lift_tool_result(&wire)
            .ok_or("the result should be readable")?;
        let mut report = TranslationReport::new(ProtocolVersion::V2024_11_05);
        let written = for_version(ProtocolVersion::V2024_11_05).lower_tool_result(
            value,
            DegradePolicy::permissive(),
            &mut report,
        )?;
        assert_eq!(
            written,
            json!({ "content": [{ "type": "text", "text": "[audio: audio/ogg, 3 bytes]" }] })
        );
        assert_eq!(
            report.features().iter().collect::<Vec<_>>(),
            [Feature::AudioContent]
        );
        Ok(())
    }

    #[test]
    fn a_legacy_result_loses_the_servers_name_and_keeps_the_rest_of_its_meta()
    -> Result<(), TestError> {
        let named =
            json!({ "io.modelcontextprotocol/serverInfo": { "name": "s", "version": "1" } });
        let mut both = named.clone();
        if let Some(meta) = both.as_object_mut() {
            meta.insert("progress".to_owned(), json!(3));
        }
        let legacy = for_version(ProtocolVersion::V2025_11_25);
        for (meta, left) in [(&named, None), (&both, Some(json!({ "progress": 3 })))] {
            let mut result = json!({ "tools": [], "resultType": "complete", "_meta": meta });
            let map = result.as_object_mut().ok_or("an object")?;
            legacy.finish_result(Some("tools/list"), map);
            assert_eq!(map.get("_meta"), left.as_ref(), "{meta}");
            assert!(map.get("resultType").is_none());

            let mut value = ToolResult::text("hi");
            value.meta = meta.as_object().cloned();
            let mut report = TranslationReport::new(ProtocolVersion::V2025_11_25);
            let written = legacy.lower_tool_result(value, DegradePolicy::strict(), &mut report)?;
            assert_eq!(written.get("_meta"), left.as_ref(), "{meta}");
        }
        Ok(())
    }

    #[test]
    fn a_malformed_server_info_cannot_be_written_at_2026() {
        let mut value = ToolResult::text("hi");
        value.meta = Some(serde_json::Map::from_iter([(
            "io.modelcontextprotocol/serverInfo".to_owned(),
            json!("just a string"),
        )]));
        let mut report = TranslationReport::new(ProtocolVersion::V2026_07_28);
        let outcome = for_version(ProtocolVersion::V2026_07_28).lower_tool_result(
            value,
            DegradePolicy::permissive(),
            &mut report,
        );
        assert!(
            matches!(outcome, Err(LowerError::FieldNotRepresentable { .. })),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_known_block_with_a_wrong_member_is_not_read() {
        let wire = json!({ "content": [{ "type": "text", "text": 42 }] });
        assert_eq!(
            for_version(ProtocolVersion::V2025_06_18).lift_tool_result(&wire),
            None
        );
    }
}
