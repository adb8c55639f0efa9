//! The per-revision codecs, checked against each revision's official schema.
//!
//! The schemas under `tests/vectors` are the specification's own
//! `schema.json` files. What a codec writes must validate against its own
//! revision's definition; the method tables must list exactly the methods the
//! schema's unions list.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what walking a schema wants.
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use protocol_droid::domain::ir::{LowerError, ToolResult, TranslationReport};
use protocol_droid::domain::{DegradePolicy, Feature, ProtocolVersion};
use protocol_droid::wire::codec::{Kind, ReadError, Sender, for_version};
use serde_json::{Value, json};

type TestError = Box<dyn std::error::Error>;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn schema(version: ProtocolVersion) -> Result<Value, TestError> {
    let path = vectors().join(version.as_str()).join("schema.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// The name of the map holding a schema's definitions: `definitions` in the
/// draft-07 schemas of 2024-11-05 to 2025-06-18, `$defs` after.
fn defs_key(schema: &Value) -> &'static str {
    if schema.get("$defs").is_some() {
        "$defs"
    } else {
        "definitions"
    }
}

/// Validation errors of `value` against `def` in `version`'s schema.
fn violations(
    version: ProtocolVersion,
    def: &str,
    value: &Value,
) -> Result<Vec<String>, TestError> {
    let mut root = schema(version)?;
    let pointer = format!("#/{}/{def}", defs_key(&root));
    let Some(map) = root.as_object_mut() else {
        return Err("a schema is an object".into());
    };
    map.insert("$ref".to_owned(), Value::String(pointer));
    let validator = jsonschema::validator_for(&root).map_err(|e| e.to_string())?;
    Ok(validator
        .iter_errors(value)
        .map(|e| format!("{def} at {version}: {e} (at {})", e.instance_path))
        .collect())
}

/// The methods a schema's union (`ClientRequest`, ...) lists.
fn union_methods(schema: &Value, union: &str) -> BTreeSet<String> {
    let defs = &schema[defs_key(schema)];
    let def = &defs[union];
    // A union of one is generated inline (2026-07-28's `ClientNotification`
    // is the cancellation notification itself), a longer one as `anyOf`.
    let members: Vec<&Value> = match def.get("anyOf").and_then(Value::as_array) {
        Some(members) => members.iter().collect(),
        None => vec![def],
    };
    members
        .into_iter()
        .map(|member| match member.get("$ref").and_then(Value::as_str) {
            Some(reference) => reference
                .rsplit('/')
                .next()
                .map_or(&Value::Null, |n| &defs[n]),
            None => member,
        })
        .filter_map(|def| def["properties"]["method"]["const"].as_str())
        .map(str::to_owned)
        .collect()
}

fn table(methods: &[&str]) -> BTreeSet<String> {
    methods.iter().map(|m| (*m).to_owned()).collect()
}

#[test]
fn each_codec_defines_exactly_the_methods_its_schema_lists() -> Result<(), TestError> {
    let mut wrong = Vec::new();
    for version in ProtocolVersion::ALL {
        let schema = schema(version)?;
        let codec = for_version(version);
        for (union, sender, kind) in [
            ("ClientRequest", Sender::Client, Kind::Request),
            ("ClientNotification", Sender::Client, Kind::Notification),
            ("ServerRequest", Sender::Server, Kind::Request),
            ("ServerNotification", Sender::Server, Kind::Notification),
        ] {
            let ours: Vec<&str> = codec.methods(sender, kind).collect();
            let ours = ours.as_slice();
            let theirs = union_methods(&schema, union);
            if theirs != table(ours) {
                wrong.push(format!(
                    "{version} {union}: schema {theirs:?}, codec {ours:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    Ok(())
}

#[test]
fn request_tables_answer_by_direction() {
    let modern = for_version(ProtocolVersion::V2026_07_28);
    assert!(modern.defines_request(Sender::Client, "server/discover"));
    assert!(!modern.defines_request(Sender::Client, "initialize"));
    assert!(!modern.defines_request(Sender::Server, "sampling/createMessage"));
    let legacy = for_version(ProtocolVersion::V2025_06_18);
    assert!(legacy.defines_request(Sender::Server, "elicitation/create"));
    assert!(legacy.defines_notification(Sender::Client, "notifications/initialized"));
}

/// A result using everything any revision can put in a tool result.
fn everything() -> Result<ToolResult, TestError> {
    Ok(serde_json::from_value(json!({
        "content": [
            { "type": "text", "text": "hello",
              "annotations": { "audience": ["user"], "priority": 0.5,
                               "lastModified": "2025-06-18T12:00:00Z" },
              "_meta": { "example.com/trace": "t1" } },
            { "type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png" },
            { "type": "audio", "data": "UklGRg==", "mimeType": "audio/wav" },
            { "type": "resource_link", "uri": "file:///notes.md", "name": "notes",
              "title": "Notes", "mimeType": "text/markdown",
              "icons": [{ "src": "https://example.com/i.png", "mimeType": "image/png" }] },
            { "type": "resource",
              "resource": { "uri": "file:///data.bin", "blob": "AAEC",
                            "mimeType": "application/octet-stream",
                            "_meta": { "example.com/k": 1 } } },
        ],
        "structuredContent": { "celsius": 22.5, "ok": true },
        "isError": false,
        "resultType": "complete",
    }))?)
}

fn lowered(
    version: ProtocolVersion,
    value: ToolResult,
) -> Result<(Value, TranslationReport), LowerError> {
    let mut report = TranslationReport::new(version);
    let written =
        for_version(version).lower_tool_result(value, DegradePolicy::permissive(), &mut report)?;
    Ok((written, report))
}

#[test]
fn a_tool_result_written_for_each_revision_validates_against_that_revision() -> Result<(), TestError>
{
    let mut problems = Vec::new();
    for version in ProtocolVersion::ALL {
        let (written, _) = lowered(version, everything()?)?;
        problems.extend(violations(version, "CallToolResult", &written)?);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// The check above is only worth something if the schemas do reject what an
/// older revision cannot hold: written without lowering, the same value is
/// invalid at 2024-11-05.
#[test]
fn the_unlowered_value_is_rejected_by_the_oldest_schema() -> Result<(), TestError> {
    let raw = serde_json::to_value(everything()?)?;
    assert!(!violations(ProtocolVersion::V2024_11_05, "CallToolResult", &raw)?.is_empty());
    Ok(())
}

#[test]
fn lowering_everything_to_2024_reports_each_lost_feature() -> Result<(), TestError> {
    let (_, report) = lowered(ProtocolVersion::V2024_11_05, everything()?)?;
    let lost = report.features();
    for feature in [
        Feature::AudioContent,
        Feature::ResourceLinkContent,
        Feature::ToolStructuredOutput,
        Feature::EntityMeta,
        Feature::AnnotationsLastModified,
    ] {
        assert!(
            lost.contains(feature),
            "{feature:?} missing from {report:?}"
        );
    }
    let (_, modern) = lowered(ProtocolVersion::V2026_07_28, everything()?)?;
    assert!(modern.is_empty(), "{modern:?}");
    Ok(())
}

#[test]
fn every_official_tool_result_example_lowers_validly_to_every_revision() -> Result<(), TestError> {
    let dir = vectors().join("2026-07-28/examples/CallToolResult");
    let mut problems = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let wire: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        let value = for_version(ProtocolVersion::V2026_07_28)
            .lift_tool_result(&wire)
            .ok_or_else(|| format!("{} did not lift", path.display()))?;
        seen += 1;
        for version in ProtocolVersion::ALL {
            let (written, _) = lowered(version, value.clone())?;
            problems.extend(violations(version, "CallToolResult", &written)?);
        }
    }
    assert!(seen >= 4, "expected the official examples, found {seen}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

#[test]
fn a_modern_list_result_is_finished_with_its_required_members() -> Result<(), TestError> {
    let path = vectors().join("2026-07-28/examples/ListToolsResult");
    let file = std::fs::read_dir(path)?
        .next()
        .ok_or("no ListToolsResult example")??;
    let mut result: Value = serde_json::from_str(&std::fs::read_to_string(file.path())?)?;
    let map = result.as_object_mut().ok_or("a result is an object")?;
    for member in ["resultType", "ttlMs", "cacheScope"] {
        map.remove(member);
    }
    let bare = Value::Object(map.clone());
    assert!(
        !violations(ProtocolVersion::V2026_07_28, "ListToolsResult", &bare)?.is_empty(),
        "the schema must require what finishing adds"
    );
    for_version(ProtocolVersion::V2026_07_28).finish_result(Some("tools/list"), map);
    let finished = Value::Object(map.clone());
    let problems = violations(ProtocolVersion::V2026_07_28, "ListToolsResult", &finished)?;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(finished["cacheScope"], json!("private"));

    for_version(ProtocolVersion::V2025_06_18).finish_result(Some("tools/list"), map);
    assert!(map.get("resultType").is_none() && map.get("ttlMs").is_none());
    Ok(())
}

#[test]
fn each_codec_reads_only_its_own_revision_s_methods() {
    let init = Some(json!({
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": { "name": "c", "version": "1" },
    }));
    let legacy = for_version(ProtocolVersion::V2025_06_18);
    let modern = for_version(ProtocolVersion::V2026_07_28);
    assert!(
        legacy
            .read_client_request("initialize", init.clone())
            .is_ok()
    );
    assert!(matches!(
        modern.read_client_request("initialize", init),
        Err(ReadError::UnknownMethod { .. })
    ));
    assert!(matches!(
        legacy.read_client_request("server/discover", None),
        Err(ReadError::UnknownMethod { .. })
    ));
    assert!(matches!(
        modern.read_server_request("roots/list", None),
        Err(ReadError::UnknownMethod { .. })
    ));
}

#[test]
fn params_of_the_wrong_type_are_invalid_params_not_unknown_methods() {
    let legacy = for_version(ProtocolVersion::V2025_03_26);
    let outcome = legacy.read_client_request("tools/call", Some(json!({ "name": 42 })));
    assert!(
        matches!(outcome, Err(ReadError::InvalidParams { .. })),
        "{outcome:?}"
    );
}
