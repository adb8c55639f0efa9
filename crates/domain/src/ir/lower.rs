//! Writing a value for a peer that can express less than the value says.
//!
//! [`check_expressible`] asks whether anything needs deciding at all; when it
//! does, [`lower_tool_result`] makes the decisions the [`DegradePolicy`]
//! authorises, records each one in a [`TranslationReport`], and refuses with a
//! [`LowerError`] the moment it meets one it may not make. It never returns a
//! half-lowered value: either every missing feature was dealt with, or the
//! caller gets an error and still owns nothing changed.
//!
//! The downgrades follow the bridge section of the revision digest: structured
//! output becomes a text block holding its JSON, a resource link and audio
//! become text describing them, and metadata an older revision has no place
//! for is dropped.

use core::fmt;

use serde_json::{Map, Value};

use super::content::{Annotations, ContentBlock, TextContent};
use super::tool_result::ToolResult;
use crate::feature::{Feature, FeatureProfile, FeatureSet};
use crate::policy::DegradePolicy;
use crate::version::ProtocolVersion;

/// Why a value could not be written for a peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// The value needs a feature the peer lacks, and either the policy does
    /// not authorise losing it or it has no lossy form at all.
    #[error("{feature:?} is not available at {version} and may not be downgraded")]
    FeatureUnavailable {
        /// What the value needs.
        feature: Feature,
        /// The revision that lacks it.
        version: ProtocolVersion,
    },
    /// A field's value does not fit the shape the revision types it as.
    #[error("`{field}` cannot be written at {version}: {reason}")]
    FieldNotRepresentable {
        /// Where in the value the field is.
        field: String,
        /// The revision that cannot hold it.
        version: ProtocolVersion,
        /// What is wrong with it.
        reason: String,
    },
}

/// One thing a translation changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Downgrade {
    /// The feature the target lacked.
    pub feature: Feature,
    /// What was done about it, for a person reading the report.
    pub detail: String,
}

impl fmt::Display for Downgrade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.feature, self.detail)
    }
}

/// Every change one translation made, in the order it made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranslationReport {
    target: ProtocolVersion,
    downgrades: Vec<Downgrade>,
}

impl TranslationReport {
    /// An empty report for a translation toward `target`.
    #[must_use]
    pub const fn new(target: ProtocolVersion) -> Self {
        Self {
            target,
            downgrades: Vec::new(),
        }
    }

    /// The revision the translation wrote for.
    #[must_use]
    pub const fn target(&self) -> ProtocolVersion {
        self.target
    }

    /// Whether nothing was changed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.downgrades.is_empty()
    }

    /// The changes, in order.
    #[must_use]
    pub fn downgrades(&self) -> &[Downgrade] {
        &self.downgrades
    }

    /// The features that were lost, each once.
    #[must_use]
    pub fn features(&self) -> FeatureSet {
        self.downgrades.iter().map(|d| d.feature).collect()
    }

    /// Records a change.
    pub fn record(&mut self, feature: Feature, detail: impl Into<String>) {
        self.downgrades.push(Downgrade {
            feature,
            detail: detail.into(),
        });
    }

    /// Appends everything `other` recorded.
    pub fn absorb(&mut self, other: &Self) {
        self.downgrades.extend(other.downgrades.iter().cloned());
    }
}

/// Whether a value needing `required` can be written, unchanged, for a peer
/// allowing `profile` at `version`.
///
/// # Errors
///
/// [`LowerError::FeatureUnavailable`] naming the first feature, in declaration
/// order, that `profile` lacks.
pub fn check_expressible(
    required: &FeatureSet,
    profile: &FeatureProfile,
    version: ProtocolVersion,
) -> Result<(), LowerError> {
    match required.missing_from(*profile).iter().next() {
        None => Ok(()),
        Some(feature) => Err(LowerError::FeatureUnavailable { feature, version }),
    }
}

/// Lowers `value` so that a peer allowing `profile` at `version` can read it.
///
/// A value the profile can already express comes back unchanged with an empty
/// report. Otherwise each missing feature is downgraded if `policy` permits it
/// and the feature has a lossy form; a `resultType` of `complete` is dropped
/// silently because an absent `resultType` means exactly that.
///
/// # Errors
///
/// [`LowerError::FeatureUnavailable`] for the first missing feature the policy
/// does not authorise, or that no policy can authorise (a result asking for
/// input, a task, sampling tool blocks).
pub fn lower_tool_result(
    mut value: ToolResult,
    profile: &FeatureProfile,
    version: ProtocolVersion,
    policy: DegradePolicy,
) -> Result<(ToolResult, TranslationReport), LowerError> {
    let report = lower_tool_result_in_place(&mut value, profile, version, policy)?;
    Ok((value, report))
}

/// [`lower_tool_result`] on a value where it lies, for a caller that keeps
/// it there (a result is a few hundred bytes, moved on every call).
///
/// # Errors
///
/// As [`lower_tool_result`]; a refused value is left exactly as it was.
pub fn lower_tool_result_in_place(
    value: &mut ToolResult,
    profile: &FeatureProfile,
    version: ProtocolVersion,
    policy: DegradePolicy,
) -> Result<TranslationReport, LowerError> {
    let refuse = |feature| LowerError::FeatureUnavailable { feature, version };
    let needs = value.required_features();

    let drop_result_type = value.result_type.is_some() && !profile.allows(Feature::ToolResultType);
    if drop_result_type && !value.is_complete() {
        // An interim result has no form an older client could act on.
        let feature = [Feature::MultiRoundTrip, Feature::TasksExtension]
            .into_iter()
            .find(|f| needs.contains(*f))
            .unwrap_or(Feature::ToolResultType);
        return Err(refuse(feature));
    }

    // `resultType` is settled above: allowed, or a `complete` to drop. Every
    // other missing feature is decided before anything changes, so a refusal
    // never leaves a half-lowered value behind.
    let missing = needs
        .missing_from(*profile)
        .without(Feature::ToolResultType);
    // Structured content a client cannot read, whose serialisation a text
    // block already carries (as the revisions that added it ask servers to
    // write it), is dropped without loss: no policy has to allow that.
    let lossless = |feature: Feature| {
        matches!(
            feature,
            Feature::ToolStructuredOutput | Feature::StructuredContentAnyJson
        ) && !profile.allows(Feature::ToolStructuredOutput)
            && structured_in_text(value)
    };
    if let Some(feature) = missing
        .iter()
        .find(|f| !has_lossy_form(*f) || (!policy.permits(*f) && !lossless(*f)))
    {
        return Err(refuse(feature));
    }
    if drop_result_type {
        value.result_type = None;
    }

    let mut report = TranslationReport::new(version);
    if !missing.is_empty() {
        lower_structured(value, profile, &mut report);
        value.content = core::mem::take(&mut value.content)
            .into_iter()
            .map(|block| lower_block(block, profile, &mut report))
            .collect();
    }
    Ok(report)
}

/// Whether losing `feature` from a tool result leaves something a client can
/// still read. Tool blocks belong in sampling, not here, and a result asking
/// for input or deferring to a task means nothing once flattened.
const fn has_lossy_form(feature: Feature) -> bool {
    !matches!(
        feature,
        Feature::SamplingTools | Feature::MultiRoundTrip | Feature::TasksExtension
    )
}

fn lower_structured(
    value: &mut ToolResult,
    profile: &FeatureProfile,
    report: &mut TranslationReport,
) {
    let Some(structured) = value.structured_content.take() else {
        return;
    };
    if profile.allows(Feature::ToolStructuredOutput) {
        if structured.is_object() || profile.allows(Feature::StructuredContentAnyJson) {
            value.structured_content = Some(structured);
        } else {
            let mut wrapped = Map::new();
            wrapped.insert("value".to_owned(), structured);
            value.structured_content = Some(Value::Object(wrapped));
            report.record(
                Feature::StructuredContentAnyJson,
                "non-object structured content wrapped as {\"value\": ...}",
            );
        }
        return;
    }
    let present = text_holds(&value.content, &structured);
    if !present {
        value
            .content
            .push(ContentBlock::text(structured.to_string()));
    }
    report.record(
        Feature::ToolStructuredOutput,
        if present {
            "structured content dropped; its text serialisation was already present"
        } else {
            "structured content dropped and appended as a text block"
        },
    );
}

/// Whether `value`'s structured content is also one of its text blocks.
fn structured_in_text(value: &ToolResult) -> bool {
    value
        .structured_content
        .as_ref()
        .is_some_and(|structured| text_holds(&value.content, structured))
}

/// Whether a text block of `content` is a serialisation of `structured`.
fn text_holds(content: &[ContentBlock], structured: &Value) -> bool {
    let serialised = structured.to_string();
    content.iter().any(|block| match block {
        ContentBlock::Text(text) => text.text == serialised || same_json(&text.text, structured),
        _ => false,
    })
}

/// Whether `text` is a JSON serialisation of `value`, whatever its spacing.
fn same_json(text: &str, value: &Value) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|parsed| &parsed == value)
}

fn lower_block(
    block: ContentBlock,
    profile: &FeatureProfile,
    report: &mut TranslationReport,
) -> ContentBlock {
    let mut block = match block {
        ContentBlock::Audio(audio) if !profile.allows(Feature::AudioContent) => {
            let text = audio_description(&audio.mime_type, &audio.data);
            report.record(
                Feature::AudioContent,
                "audio block replaced by a description",
            );
            ContentBlock::Text(TextContent {
                text,
                annotations: audio.annotations,
                meta: audio.meta,
                extra: Map::new(),
            })
        }
        ContentBlock::ResourceLink(link) if !profile.allows(Feature::ResourceLinkContent) => {
            let mut text = format!("[resource: {}", link.title.as_deref().unwrap_or(&link.name));
            text.push_str(&format!(" <{}>", link.uri));
            if let Some(mime) = &link.mime_type {
                text.push_str(&format!(" ({mime})"));
            }
            if let Some(description) = &link.description {
                text.push_str(&format!(": {description}"));
            }
            text.push(']');
            report.record(
                Feature::ResourceLinkContent,
                format!("resource link to {} replaced by text", link.uri),
            );
            ContentBlock::Text(TextContent {
                text,
                annotations: link.annotations,
                meta: link.meta,
                extra: Map::new(),
            })
        }
        ContentBlock::ResourceLink(mut link)
            if link.icons.is_some() && !profile.allows(Feature::Icons) =>
        {
            link.icons = None;
            report.record(
                Feature::Icons,
                format!("icons dropped from the link to {}", link.uri),
            );
            ContentBlock::ResourceLink(link)
        }
        other => other,
    };

    if !profile.allows(Feature::AnnotationsLastModified) {
        if let Some(Some(Annotations { last_modified, .. })) = block.annotations_mut() {
            if last_modified.take().is_some() {
                report.record(
                    Feature::AnnotationsLastModified,
                    format!("lastModified dropped from a {} block", block.kind()),
                );
            }
        }
    }
    if !profile.allows(Feature::EntityMeta) {
        let kind = block.kind().to_owned();
        if let ContentBlock::Resource(embedded) = &mut block {
            if embedded.resource.take_meta() {
                report.record(
                    Feature::EntityMeta,
                    "_meta dropped from embedded resource contents",
                );
            }
        }
        if let Some(meta) = block.meta_mut() {
            if meta.take().is_some() {
                report.record(
                    Feature::EntityMeta,
                    format!("_meta dropped from a {kind} block"),
                );
            }
        }
    }
    block
}

/// The text an audio block of `mime_type` holding the base64 `data`
/// becomes for a revision without audio: its type and size, as
/// `[audio: audio/wav, 4 bytes]`.
#[must_use]
pub fn audio_description(mime_type: &str, data: &str) -> String {
    format!("[audio: {mime_type}, {} bytes]", decoded_len(data))
}

/// The number of bytes `base64` decodes to, without decoding it.
fn decoded_len(base64: &str) -> usize {
    let trimmed = base64.trim_end_matches('=');
    trimmed.len() / 4 * 3 + (trimmed.len() % 4).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ir::content::{AudioContent, ResourceLink};
    use crate::ir::tool_result::RESULT_TYPE_COMPLETE;

    type TestError = Box<dyn std::error::Error>;

    const V24: ProtocolVersion = ProtocolVersion::V2024_11_05;

    fn audio() -> ContentBlock {
        ContentBlock::Audio(AudioContent {
            data: "AAAAAA==".to_owned(),
            mime_type: "audio/wav".to_owned(),
            annotations: None,
            meta: None,
            extra: Map::new(),
        })
    }

    fn link() -> ContentBlock {
        ContentBlock::ResourceLink(ResourceLink {
            uri: "file:///notes.md".to_owned(),
            name: "notes".to_owned(),
            title: Some("Notes".to_owned()),
            description: Some("meeting notes".to_owned()),
            mime_type: Some("text/markdown".to_owned()),
            size: None,
            icons: None,
            annotations: None,
            meta: None,
            extra: Map::new(),
        })
    }

    #[test]
    fn base64_lengths_are_counted_without_decoding() {
        assert_eq!(decoded_len(""), 0);
        assert_eq!(decoded_len("AAAA"), 3);
        assert_eq!(decoded_len("AAAAAA=="), 4);
        assert_eq!(decoded_len("AAAAAAA="), 5);
    }

    #[test]
    fn audio_becomes_a_description_of_itself() -> Result<(), TestError> {
        let value = ToolResult::from_content(vec![audio()]);
        let (lowered, report) = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::permissive(),
        )?;
        assert_eq!(
            lowered.content,
            [ContentBlock::text("[audio: audio/wav, 4 bytes]")]
        );
        assert_eq!(
            report.features(),
            FeatureSet::empty().with(Feature::AudioContent)
        );
        Ok(())
    }

    #[test]
    fn a_resource_link_becomes_text_naming_where_it_points() -> Result<(), TestError> {
        let value = ToolResult::from_content(vec![link()]);
        let (lowered, report) = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::permissive(),
        )?;
        let [ContentBlock::Text(text)] = lowered.content.as_slice() else {
            return Err(format!("expected one text block, got {:?}", lowered.content).into());
        };
        assert!(text.text.contains("file:///notes.md"), "{}", text.text);
        assert!(text.text.contains("Notes"), "{}", text.text);
        assert_eq!(report.downgrades().len(), 1);
        Ok(())
    }

    #[test]
    fn structured_output_is_not_duplicated_when_its_text_is_already_there() -> Result<(), TestError>
    {
        let value = ToolResult::text(r#"{"a": 1}"#).with_structured(r#"{"a":1}"#)?;
        let (lowered, report) = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::permissive(),
        )?;
        assert_eq!(lowered.content.len(), 1);
        assert_eq!(lowered.structured_content, None);
        assert_eq!(report.downgrades().len(), 1);
        Ok(())
    }

    #[test]
    fn non_object_structured_output_is_wrapped_for_a_revision_that_needs_an_object()
    -> Result<(), TestError> {
        let profile = FeatureProfile::empty().with(Feature::ToolStructuredOutput);
        let value = ToolResult::text("[1,2]").with_structured_value(json!([1, 2]));
        let (lowered, report) = lower_tool_result(
            value,
            &profile,
            ProtocolVersion::V2025_11_25,
            DegradePolicy::permissive(),
        )?;
        assert_eq!(lowered.structured_content, Some(json!({ "value": [1, 2] })));
        assert_eq!(
            report.features(),
            FeatureSet::empty().with(Feature::StructuredContentAnyJson)
        );
        Ok(())
    }

    #[test]
    fn structured_output_already_in_text_is_dropped_even_under_a_strict_policy()
    -> Result<(), TestError> {
        let value = ToolResult::text(r#"{"a": 1}"#).with_structured(r#"{"a":1}"#)?;
        let (lowered, _report) = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::strict(),
        )?;
        assert_eq!(lowered.content.len(), 1);
        assert_eq!(lowered.structured_content, None);
        // Without its text, dropping it would lose it: refused.
        let value = ToolResult::text("a").with_structured(r#"{"a":1}"#)?;
        let outcome = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::strict(),
        );
        assert_eq!(
            outcome.err(),
            Some(LowerError::FeatureUnavailable {
                feature: Feature::ToolStructuredOutput,
                version: V24
            })
        );
        Ok(())
    }

    #[test]
    fn a_refusal_names_the_feature_and_the_revision() {
        let value = ToolResult::from_content(vec![ContentBlock::text("a"), audio()]);
        let outcome = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::strict(),
        );
        assert_eq!(
            outcome.err(),
            Some(LowerError::FeatureUnavailable {
                feature: Feature::AudioContent,
                version: V24
            })
        );
    }

    #[test]
    fn a_per_feature_policy_authorises_only_what_it_names() {
        let value = ToolResult::from_content(vec![audio(), link()]);
        let policy = DegradePolicy::strict().allowing(Feature::AudioContent);
        let outcome = lower_tool_result(value, &FeatureProfile::empty(), V24, policy);
        assert_eq!(
            outcome.err(),
            Some(LowerError::FeatureUnavailable {
                feature: Feature::ResourceLinkContent,
                version: V24
            })
        );
    }

    #[test]
    fn an_interim_result_is_refused_whatever_the_policy() {
        let mut value = ToolResult::text("wait");
        value.result_type = Some("input_required".to_owned());
        let outcome = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::permissive(),
        );
        assert_eq!(
            outcome.err(),
            Some(LowerError::FeatureUnavailable {
                feature: Feature::MultiRoundTrip,
                version: V24
            })
        );
    }

    #[test]
    fn a_complete_result_type_is_dropped_without_a_report() -> Result<(), TestError> {
        let mut value = ToolResult::text("done");
        value.result_type = Some(RESULT_TYPE_COMPLETE.to_owned());
        let (lowered, report) = lower_tool_result(
            value,
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::strict(),
        )?;
        assert_eq!(lowered.result_type, None);
        assert!(report.is_empty());
        Ok(())
    }

    #[test]
    fn block_metadata_and_last_modified_are_dropped_and_reported() -> Result<(), TestError> {
        let block: ContentBlock = serde_json::from_value(json!({
            "type": "text", "text": "x",
            "annotations": { "priority": 1, "lastModified": "2025-01-01T00:00:00Z" },
            "_meta": { "k": "v" },
        }))?;
        let (lowered, report) = lower_tool_result(
            ToolResult::from_content(vec![block]),
            &FeatureProfile::empty(),
            V24,
            DegradePolicy::permissive(),
        )?;
        assert_eq!(
            serde_json::to_value(&lowered.content)?,
            json!([{ "type": "text", "text": "x", "annotations": { "priority": 1 } }])
        );
        assert_eq!(report.downgrades().len(), 2);
        Ok(())
    }
}
