//! Writing what the upstream said in a form the downstream client's revision
//! can read: definitions in lists, prompt messages, resource contents, and
//! the questions a server asks the client.
//!
//! Tool results have their own translator ([`translate`](super::translate)),
//! because their lowering lives in the codecs. Everything here is a matter of
//! members a revision does not define, or of a content block it has no
//! variant for, so it works on JSON directly and leaves alone every member
//! it has no rule for: what this build does not model is forwarded.
//!
//! Every rule asks the leg's profile first. A member the client can read is
//! never touched, so a reply between two peers at the same revision comes
//! back as it was. A member the client cannot read is dropped or rewritten
//! only when the [`DegradePolicy`] authorises losing that feature, and each
//! loss is recorded in the [`TranslationReport`]; otherwise the request is
//! refused with a [`LowerError`] naming the feature.

use serde_json::{Map, Value, json};

use crate::application::server::CallError;
use crate::domain::Refusal;
use crate::domain::ir::{LowerError, TranslationReport, audio_description};
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{DegradePolicy, Feature, Leg};
use crate::wire::tools::TaskSupport;

/// One translation toward a leg, under a policy, recording into a report.
pub(super) struct Lowering<'a> {
    pub(super) leg: &'a Leg,
    pub(super) policy: DegradePolicy,
    pub(super) report: &'a mut TranslationReport,
}

impl Lowering<'_> {
    /// Whether `feature` must go, and may: `Ok(false)` when the client reads
    /// it, `Ok(true)` when it is to be dropped, an error when the policy
    /// refuses.
    fn must_drop(&mut self, feature: Feature, detail: &str) -> Result<bool, LowerError> {
        if self.leg.profile.allows(feature) {
            return Ok(false);
        }
        if !self.policy.permits(feature) {
            return Err(LowerError::FeatureUnavailable {
                feature,
                version: self.leg.version,
            });
        }
        self.report.record(feature, detail);
        Ok(true)
    }

    /// Removes `member` from `object` when the client cannot read `feature`.
    fn strip(
        &mut self,
        object: &mut Map<String, Value>,
        member: &str,
        feature: Feature,
        what: &str,
    ) -> Result<(), LowerError> {
        if object.contains_key(member)
            && self.must_drop(feature, &format!("dropped `{member}` from {what}"))?
        {
            object.remove(member);
        }
        Ok(())
    }

    /// The members every listed entity may carry (tools, prompts,
    /// resources, templates): `title`, `icons`, `_meta`, and the
    /// annotations' `lastModified`.
    fn entity(&mut self, entity: &mut Map<String, Value>, what: &str) -> Result<(), LowerError> {
        self.strip(entity, "icons", Feature::Icons, what)?;
        self.strip(entity, "_meta", Feature::EntityMeta, what)?;
        if let Some(Value::Object(annotations)) = entity.get_mut("annotations") {
            self.strip(
                annotations,
                "lastModified",
                Feature::AnnotationsLastModified,
                what,
            )?;
        }
        if entity.contains_key("title")
            && self.must_drop(Feature::Titles, &format!("dropped `title` from {what}"))?
        {
            entity.remove("title");
        }
        Ok(())
    }

    /// A prompt's arguments, which have a `title` where prompts do.
    fn prompt_arguments(&mut self, arguments: &mut [Value], what: &str) -> Result<(), LowerError> {
        for argument in arguments {
            let Value::Object(argument) = argument else {
                continue;
            };
            if argument.contains_key("title") {
                let name = argument.get("name").and_then(Value::as_str).unwrap_or("?");
                let note = format!("dropped `title` from argument {name} of {what}");
                if self.must_drop(Feature::Titles, &note)? {
                    argument.remove("title");
                }
            }
        }
        Ok(())
    }

    /// A tool definition.
    fn tool(&mut self, tool: &mut Map<String, Value>) -> Result<(), LowerError> {
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let what = format!("tool {name}");
        // A 2025-03-26 client reads a tool's title from its annotations, so
        // the title survives there before the member goes.
        if !self.leg.profile.allows(Feature::Titles)
            && self.leg.profile.allows(Feature::ToolAnnotations)
        {
            if let Some(title) = tool.get("title").cloned() {
                let annotations = tool
                    .entry("annotations")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(annotations) = annotations {
                    annotations.entry("title").or_insert(title);
                }
            }
        }
        self.entity(tool, &what)?;
        self.strip(tool, "outputSchema", Feature::ToolOutputSchema, &what)?;
        self.strip(tool, "annotations", Feature::ToolAnnotations, &what)?;
        // Revisions before 2025-11-25 name no schema dialect, and their
        // clients usually assume draft-07: a schema using 2020-12 keywords
        // says so itself, which loses nothing.
        if !Feature::JsonSchema2020Default.exists_at(self.leg.version) {
            for member in ["inputSchema", "outputSchema"] {
                if let Some(Value::Object(schema)) = tool.get_mut(member) {
                    if !schema.contains_key("$schema") && uses_2020_12(schema) {
                        schema.insert("$schema".to_owned(), json!(DIALECT_2020_12));
                    }
                }
            }
        }
        // A 2025-11-25 client reads `taskSupport` to ask for a task, which
        // the bridge runs itself (docs/tasks.md), as it runs it through the
        // bridge; no other revision has the field.
        if !Feature::Tasks.exists_at(self.leg.version) {
            tool.remove("execution");
        } else if let Some(Value::Object(execution)) = tool.get_mut("execution") {
            let support = execution
                .get("taskSupport")
                .cloned()
                .and_then(|s| serde_json::from_value::<TaskSupport>(s).ok());
            if let Some(support) = support {
                execution.insert(
                    "taskSupport".to_owned(),
                    json!(support.through_intermediary()),
                );
            }
        }
        Ok(())
    }

    /// A content block, as prompts and tool results carry them.
    fn content(&mut self, block: &mut Value, what: &str) -> Result<(), LowerError> {
        let Value::Object(object) = block else {
            return Ok(());
        };
        match object.get("type").and_then(Value::as_str) {
            Some("audio")
                if self.must_drop(
                    Feature::AudioContent,
                    &format!("audio in {what} became a text description"),
                )? =>
            {
                let mime = object
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or("audio");
                let data = object.get("data").and_then(Value::as_str).unwrap_or("");
                *block = json!({ "type": "text", "text": audio_description(mime, data) });
                return Ok(());
            }
            Some("resource_link")
                if self.must_drop(
                    Feature::ResourceLinkContent,
                    &format!("a resource link in {what} became text"),
                )? =>
            {
                let field = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or("");
                let mut text = format!("[resource: {}]", field("uri"));
                for key in ["title", "name", "mimeType", "description"] {
                    let value = field(key);
                    if !value.is_empty() {
                        text.push_str(&format!(" {key}: {value}"));
                    }
                }
                *block = json!({ "type": "text", "text": text });
                return Ok(());
            }
            _ => {}
        }
        if let Value::Object(object) = block {
            self.entity(object, what)?;
            if let Some(Value::Object(resource)) = object.get_mut("resource") {
                self.strip(resource, "_meta", Feature::EntityMeta, what)?;
            }
        }
        Ok(())
    }

    /// The result of a forwarded method, in place.
    pub(super) fn result(&mut self, method: &str, result: &mut Value) -> Result<(), LowerError> {
        let Value::Object(result) = result else {
            return Ok(());
        };
        let each = |member: &str, result: &mut Map<String, Value>| {
            result
                .get_mut(member)
                .and_then(Value::as_array_mut)
                .map(std::mem::take)
                .unwrap_or_default()
        };
        match method {
            "tools/list" => {
                let mut tools = each("tools", result);
                for tool in &mut tools {
                    if let Value::Object(tool) = tool {
                        self.tool(tool)?;
                    }
                }
                result.insert("tools".to_owned(), Value::Array(tools));
            }
            "prompts/list" | "resources/list" | "resources/templates/list" => {
                let member = match method {
                    "prompts/list" => "prompts",
                    "resources/list" => "resources",
                    _ => "resourceTemplates",
                };
                if !result.contains_key(member) {
                    return Ok(());
                }
                let mut entries = each(member, result);
                for entry in &mut entries {
                    if let Value::Object(entry) = entry {
                        let what = format!(
                            "{member} entry {}",
                            entry
                                .get("name")
                                .or_else(|| entry.get("uri"))
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                        );
                        self.entity(entry, &what)?;
                        if let Some(Value::Array(arguments)) = entry.get_mut("arguments") {
                            self.prompt_arguments(arguments, &what)?;
                        }
                    }
                }
                result.insert(member.to_owned(), Value::Array(entries));
            }
            "prompts/get" => {
                if let Some(Value::Array(messages)) = result.get_mut("messages") {
                    for message in messages {
                        if let Some(content) = message.get_mut("content") {
                            self.content(content, "a prompt message")?;
                        }
                    }
                }
            }
            "resources/read" => {
                if let Some(Value::Array(contents)) = result.get_mut("contents") {
                    for entry in contents {
                        if let Value::Object(entry) = entry {
                            self.strip(entry, "_meta", Feature::EntityMeta, "resource contents")?;
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A question the upstream asks (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`), in place, before it goes to
    /// the downstream client.
    pub(super) fn question(&mut self, method: &str, params: &mut Value) -> Result<(), LowerError> {
        let Value::Object(params) = params else {
            return Ok(());
        };
        // The revisions give the params of these requests no `_meta` a
        // client acts on, and 2026-07-28 embeds them without one.
        if method != "roots/list" {
            params.remove("_meta");
        }
        params.remove("task");
        match method {
            "elicitation/create" => self.elicitation(params),
            "sampling/createMessage" => self.sampling(params),
            _ => Ok(()),
        }
    }

    /// Elicitation: the URL mode's `elicitationId` as the client's revision
    /// has it, and schemas with the enum forms and `default` of 2025-11-25
    /// in the forms 2025-06-18 has (multi-select has none).
    fn elicitation(&mut self, params: &mut Map<String, Value>) -> Result<(), LowerError> {
        if params.get("mode").and_then(Value::as_str) == Some("url") {
            if self.leg.profile.allows(Feature::UrlElicitationCompletion) {
                // 2025-11-25 requires one; a 2026-07-28 server has none to give.
                if !params.contains_key("elicitationId") {
                    let id =
                        super::random_hex().ok_or_else(|| LowerError::FieldNotRepresentable {
                            field: "elicitationId".to_owned(),
                            version: self.leg.version,
                            reason: "no entropy to mint an id".to_owned(),
                        })?;
                    params.insert("elicitationId".to_owned(), json!(id));
                }
            } else {
                // The upstream's bookkeeping; later revisions have no such id.
                params.remove("elicitationId");
            }
            return Ok(());
        }
        if self.leg.profile.allows(Feature::ElicitationEnumVariants) {
            return Ok(());
        }
        let Some(Value::Object(properties)) = params
            .get_mut("requestedSchema")
            .and_then(|s| s.get_mut("properties"))
        else {
            return Ok(());
        };
        for (name, schema) in properties.iter_mut() {
            let Value::Object(schema) = schema else {
                continue;
            };
            if schema.get("type").and_then(Value::as_str) == Some("array") {
                // Multi-select has no older form at all.
                return Err(LowerError::FeatureUnavailable {
                    feature: Feature::ElicitationEnumVariants,
                    version: self.leg.version,
                });
            }
            if let Some(Value::Array(variants)) = schema.get("oneOf").cloned() {
                if self.must_drop(
                    Feature::ElicitationEnumVariants,
                    &format!("titled enum `{name}` became enum and enumNames"),
                )? {
                    let pick = |k: &str| -> Vec<Value> {
                        variants.iter().filter_map(|v| v.get(k).cloned()).collect()
                    };
                    schema.remove("oneOf");
                    schema.insert("enum".to_owned(), Value::Array(pick("const")));
                    schema.insert("enumNames".to_owned(), Value::Array(pick("title")));
                }
            }
            if schema.contains_key("default")
                && self.must_drop(
                    Feature::ElicitationEnumVariants,
                    &format!("dropped the default of `{name}`"),
                )?
            {
                schema.remove("default");
            }
        }
        Ok(())
    }

    /// Sampling: one-block arrays unwrapped; tools refused, as the older
    /// revisions have no tool use in sampling.
    fn sampling(&mut self, params: &mut Map<String, Value>) -> Result<(), LowerError> {
        let context = params.get("includeContext").and_then(Value::as_str);
        if context.is_some_and(|c| c != "none")
            && self.must_drop(
                Feature::SamplingIncludeContext,
                "includeContext became none: the client did not declare sampling.context",
            )?
        {
            params.insert("includeContext".to_owned(), json!("none"));
        }
        if params.contains_key("tools") && !self.leg.profile.allows(Feature::SamplingTools) {
            return Err(LowerError::FeatureUnavailable {
                feature: Feature::SamplingTools,
                version: self.leg.version,
            });
        }
        if self.leg.profile.allows(Feature::SamplingArrayContent) {
            return Ok(());
        }
        let Some(Value::Array(messages)) = params.get_mut("messages") else {
            return Ok(());
        };
        for message in messages {
            let Some(content) = message.get_mut("content") else {
                continue;
            };
            let Value::Array(blocks) = content else {
                continue;
            };
            if blocks.len() != 1 {
                return Err(LowerError::FeatureUnavailable {
                    feature: Feature::SamplingArrayContent,
                    version: self.leg.version,
                });
            }
            let block = blocks.remove(0);
            *content = block;
            self.report.record(
                Feature::SamplingArrayContent,
                "a one-block content array became the block",
            );
        }
        Ok(())
    }
}

/// The JSON Schema 2020-12 meta-schema.
const DIALECT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Keywords only JSON Schema 2020-12 (or 2019-09) has.
const KEYWORDS_2020_12: [&str; 9] = [
    "$defs",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "dependentRequired",
    "dependentSchemas",
];

/// Whether `schema` uses a 2020-12 keyword anywhere, to a bounded depth.
fn uses_2020_12(schema: &Map<String, Value>) -> bool {
    fn walk(value: &Value, depth: usize) -> bool {
        if depth > 32 {
            return false;
        }
        match value {
            Value::Object(map) => {
                map.keys().any(|k| KEYWORDS_2020_12.contains(&k.as_str()))
                    || map.values().any(|v| walk(v, depth + 1))
            }
            Value::Array(items) => items.iter().any(|v| walk(v, depth + 1)),
            _ => false,
        }
    }
    schema
        .keys()
        .any(|k| KEYWORDS_2020_12.contains(&k.as_str()))
        || schema.values().any(|v| walk(v, 1))
}

/// The feature named `name`, as config and flags spell it: the variant's
/// name in any case, with or without `-` and `_` (`titles`,
/// `tool-output-schema`, `AudioContent`).
#[must_use]
pub fn feature_named(name: &str) -> Option<Feature> {
    let wanted: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    Feature::ALL
        .into_iter()
        .find(|f| format!("{f:?}").to_ascii_lowercase() == wanted)
}

/// A translation the policy refused (of a reply or of a question the server
/// asks), as the error the client or server receives: it names the feature
/// and the revision.
pub(super) fn refusal(error: &LowerError) -> CallError {
    let data = match error {
        LowerError::FeatureUnavailable { feature, version } => json!({
            "feature": format!("{feature:?}"),
            "revision": version.as_str(),
        }),
        LowerError::FieldNotRepresentable { field, version, .. } => json!({
            "field": field,
            "revision": version.as_str(),
        }),
    };
    CallError::Protocol(
        ErrorObject::from(Refusal::internal(format!(
            "the bridge's degrade policy refuses to carry this message: {error}"
        )))
        .with_data(data),
    )
}

#[cfg(test)]
mod tests {
    // Indexing a `Value` yields `Null` for a missing member; it never panics.
    #![allow(clippy::indexing_slicing)]

    use serde_json::json;

    use super::{Lowering, feature_named};
    use crate::domain::ir::{LowerError, TranslationReport};
    use crate::domain::{
        CapabilitySet, DegradePolicy, Feature, Leg, Negotiation, ProtocolVersion, TransportKind,
        resolve,
    };

    fn leg(version: ProtocolVersion) -> Leg {
        let caps = CapabilitySet::all_for(version);
        Leg::new(
            version,
            resolve(Negotiation {
                version,
                client_caps: caps,
                server_caps: caps,
                transport: TransportKind::Stdio,
            }),
        )
    }

    fn lower(
        version: ProtocolVersion,
        policy: DegradePolicy,
        method: &str,
        mut value: serde_json::Value,
    ) -> Result<(serde_json::Value, TranslationReport), LowerError> {
        let leg = leg(version);
        let mut report = TranslationReport::new(version);
        Lowering {
            leg: &leg,
            policy,
            report: &mut report,
        }
        .result(method, &mut value)?;
        Ok((value, report))
    }

    #[test]
    fn a_list_the_client_reads_is_left_exactly_as_it_was() -> Result<(), LowerError> {
        let list = json!({ "tools": [{ "name": "a", "title": "A", "icons": [],
            "inputSchema": { "type": "object" }, "outputSchema": { "type": "object" } }] });
        let (out, report) = lower(
            ProtocolVersion::V2025_11_25,
            DegradePolicy::strict(),
            "tools/list",
            list.clone(),
        )?;
        assert_eq!(out, list);
        assert!(report.is_empty());
        Ok(())
    }

    #[test]
    fn a_title_moves_into_the_annotations_for_2025_03_26() -> Result<(), LowerError> {
        let list = json!({ "tools": [{ "name": "a", "title": "A", "inputSchema": {} }] });
        let (out, report) = lower(
            ProtocolVersion::V2025_03_26,
            DegradePolicy::permissive(),
            "tools/list",
            list,
        )?;
        assert_eq!(out["tools"][0]["annotations"]["title"], "A");
        assert!(out["tools"][0].get("title").is_none());
        assert!(report.features().contains(Feature::Titles));
        Ok(())
    }

    #[test]
    fn multi_select_is_refused_under_any_policy() {
        let leg = leg(ProtocolVersion::V2025_06_18);
        let mut report = TranslationReport::new(leg.version);
        let mut params = json!({ "message": "m", "requestedSchema": { "type": "object",
            "properties": { "x": { "type": "array", "items": { "enum": ["a"] } } } } });
        let outcome = Lowering {
            leg: &leg,
            policy: DegradePolicy::permissive(),
            report: &mut report,
        }
        .question("elicitation/create", &mut params);
        assert!(matches!(
            outcome,
            Err(LowerError::FeatureUnavailable {
                feature: Feature::ElicitationEnumVariants,
                ..
            })
        ));
    }

    #[test]
    fn features_are_found_by_the_names_people_write() {
        assert_eq!(feature_named("titles"), Some(Feature::Titles));
        assert_eq!(
            feature_named("tool-output-schema"),
            Some(Feature::ToolOutputSchema)
        );
        assert_eq!(feature_named("AudioContent"), Some(Feature::AudioContent));
        assert_eq!(feature_named("nonsense"), None);
    }
}
