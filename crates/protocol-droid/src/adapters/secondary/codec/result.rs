//! The bridge's [`ToolResultCodec`] port, implemented over every revision.

use serde_json::Value;

use super::for_version;
use crate::application::bridge::ToolResultCodec;
use crate::domain::ir::{LowerError, ToolResult, TranslationReport};
use crate::domain::{DegradePolicy, ProtocolVersion};

/// Reads and writes tool results at whichever revision is asked, by
/// dispatching to that revision's codec.
#[derive(Clone, Copy, Debug, Default)]
pub struct WireToolResults;

impl ToolResultCodec for WireToolResults {
    fn lift(&self, version: ProtocolVersion, wire: &Value) -> Option<ToolResult> {
        for_version(version).lift_tool_result(wire)
    }

    fn lower(
        &self,
        version: ProtocolVersion,
        value: ToolResult,
        policy: DegradePolicy,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError> {
        for_version(version).lower_tool_result(value, policy, report)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::Feature;

    type TestError = Box<dyn std::error::Error>;

    #[test]
    fn a_modern_result_is_written_with_its_result_type() -> Result<(), TestError> {
        let mut report = TranslationReport::new(ProtocolVersion::V2026_07_28);
        let written = WireToolResults.lower(
            ProtocolVersion::V2026_07_28,
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
        let value = WireToolResults
            .lift(ProtocolVersion::V2026_07_28, &wire)
            .ok_or("the result should be readable")?;
        let mut report = TranslationReport::new(ProtocolVersion::V2024_11_05);
        let written = WireToolResults.lower(
            ProtocolVersion::V2024_11_05,
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
    fn a_malformed_server_info_cannot_be_written_at_2026() {
        let mut value = ToolResult::text("hi");
        value.meta = Some(serde_json::Map::from_iter([(
            "io.modelcontextprotocol/serverInfo".to_owned(),
            json!("just a string"),
        )]));
        let mut report = TranslationReport::new(ProtocolVersion::V2026_07_28);
        let outcome = WireToolResults.lower(
            ProtocolVersion::V2026_07_28,
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
            WireToolResults.lift(ProtocolVersion::V2025_06_18, &wire),
            None
        );
    }
}
