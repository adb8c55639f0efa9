//! Translating a `tools/call` reply for a client at another revision.
//!
//! # Only a tool result needs translating
//!
//! The JSON-RPC envelope (`jsonrpc`, `id`, `result`, `error`) reads the same
//! in every revision, so carrying a message across is lossless until its
//! payload is something the revisions model differently. `CallToolResult` is
//! the first such payload, and the side that decides whether it can be read is
//! the client, because the client is who fails to read it.
//!
//! # A reply nobody had to change is the peer's own bytes
//!
//! Re-encoding every reply (lift, lower, write back) looks thorough and is a
//! bug. A revision's wire types refuse shapes they do not model, so a server
//! newer than this build would have its replies refused by a bridge that had
//! no reason to touch them. An unmodelled directive is forwarded, not
//! interpreted: the reply is rebuilt only once a downgrade has been authorised,
//! and everything else (a result the client reads already, a shape this build
//! does not read, a reply that is not a result) comes back as it arrived, with
//! an empty report.
//!
//! # A result this build cannot read is not a failure
//!
//! The same rule seen from the codec: a value this build cannot read may be
//! perfectly readable by a client newer than the bridge. Refusing it would
//! make the bridge the component that breaks forward compatibility, and the
//! client would see it as a bridge bug rather than an extension it lacks.

use serde_json::{Map, Value};

use crate::application::client::Answer;
use crate::domain::feature::Feature;
use crate::domain::ir::lower::{LowerError, TranslationReport, check_expressible};
use crate::domain::ir::{ToolResult, WithoutMeta};
use crate::domain::{DegradePolicy, Leg, ProtocolVersion};
use crate::wire::codec::for_version;
use crate::wire::meta;

/// The member a successful reply carries its payload in.
const RESULT: &str = "result";

/// The member a refusal travels in; a reply has this or [`RESULT`].
const ERROR: &str = "error";

/// The `resultType` of a finished result.
const COMPLETE: &str = "complete";

/// A translated reply and what translating it changed.
#[derive(Debug)]
pub struct Translated {
    /// The reply to send to the client.
    pub reply: Map<String, Value>,
    /// Every change made; empty whenever the reply passed through.
    pub report: TranslationReport,
}

/// Makes `reply`, written at `from`, readable by the leg `to`.
///
/// Hands the reply back untouched, with an empty report, whenever there is
/// nothing to decide, which is the common case (see the module docs for
/// why rebuilding it anyway would be a bug).
///
/// # Errors
///
/// [`LowerError`] when the reply needs a downgrade `policy` does not
/// authorise, or one no policy can (a result asking for input), or when
/// the codec cannot write the lowered value at `to`. The caller answers
/// the client with an error rather than forwarding what it cannot read.
///
/// # Examples
///
/// A reply the client reads already comes back exactly as it arrived.
///
/// ```
/// use protocol_droid::application::bridge::translate;
/// use protocol_droid::domain::{
///     CapabilitySet, DegradePolicy, Leg, Negotiation, ProtocolVersion, TransportKind, resolve,
/// };
/// use serde_json::{Map, Value, json};
///
/// let version = ProtocolVersion::V2025_03_26;
/// let caps = CapabilitySet::all_for(version);
/// let leg = Leg::new(
///     version,
///     resolve(Negotiation {
///         version,
///         client_caps: caps,
///         server_caps: caps,
///         transport: TransportKind::Stdio,
///     }),
/// );
///
/// let reply: Map<String, Value> = serde_json::from_value(json!({
///     "jsonrpc": "2.0",
///     "id": 1,
///     "result": { "content": [{ "type": "text", "text": "hi" }] },
/// }))?;
///
/// let translated = translate(
///     reply.clone(),
///     ProtocolVersion::V2026_07_28,
///     &leg,
///     DegradePolicy::strict(),
/// )?;
///
/// assert_eq!(translated.reply, reply);
/// assert!(translated.report.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn translate(
    reply: Map<String, Value>,
    from: ProtocolVersion,
    to: &Leg,
    policy: DegradePolicy,
) -> Result<Translated, LowerError> {
    let Some(mut lifted) = read(&reply, from) else {
        return Ok(unchanged(reply, to));
    };

    // Nothing the client cannot read: the peer's own bytes are correct, not
    // merely convenient, and asking before lowering is what keeps the codec
    // from re-encoding a reply nobody asked it to change.
    if readable_as_is(&mut lifted, to) {
        return Ok(unchanged(reply, to));
    }

    let mut report = TranslationReport::new(to.version);
    let lowered = for_version(to.version).lower_tool_result(lifted, policy, &mut report)?;
    let mut reply = reply;
    // Replaces the payload that `read` found, so this never invents a
    // `result` the upstream did not send.
    reply.insert(RESULT.to_owned(), lowered);
    Ok(Translated { reply, report })
}

/// A `tools/call` result read into the model and made readable by the leg
/// `to`, deciding as [`translate`] decides: for a caller that needs the
/// result typed (the gateway hands it to its own server), so that it is
/// read once rather than translated as JSON and read again. Reading is the
/// same at every revision; what `to` cannot express is lowered as `policy`
/// authorises, each change noted in `report`.
///
/// The upstream's name for itself (`io.modelcontextprotocol/serverInfo` in
/// `_meta`) is left out as the result is read, not built and dropped: the
/// caller answers its own client as itself.
///
/// `Ok(Err(why))` when `result` is not a tool result this build reads.
///
/// # Errors
///
/// As [`translate`].
pub(crate) fn lift_tool_result(
    result: Answer,
    to: &Leg,
    policy: DegradePolicy,
    report: &mut TranslationReport,
) -> Result<Result<ToolResult, serde_json::Error>, LowerError> {
    let mut lifted = match result.read_seed(WithoutMeta(meta::SERVER_INFO)) {
        Ok(lifted) => lifted,
        Err(unreadable) => return Ok(Err(unreadable)),
    };
    if !readable_as_is(&mut lifted, to) {
        for_version(to.version).lower_tool_result_in_place(&mut lifted, policy, report)?;
    }
    Ok(Ok(lifted))
}

/// Whether `to` reads `lifted` as it is, once a `resultType` of `complete`
/// that `to` has no field for is dropped.
fn readable_as_is(lifted: &mut ToolResult, to: &Leg) -> bool {
    // An absent `resultType` means `complete`, in 2026-07-28 and in every
    // revision without the field, so dropping it loses nothing; refusing it
    // would make every result of a new server unreadable to an old client.
    // Any other value has no older form and is left for the check.
    if lifted.result_type.as_deref() == Some(COMPLETE)
        && !to.profile.allows(Feature::ToolResultType)
    {
        lifted.result_type = None;
    }
    check_expressible(&lifted.required_features(), &to.profile, to.version).is_ok()
}

/// The tool result in `reply`, if it holds one this build reads.
fn read(reply: &Map<String, Value>, from: ProtocolVersion) -> Option<ToolResult> {
    // A refusal is the upstream's own words about a request, not a result.
    if reply.contains_key(ERROR) {
        return None;
    }
    // A scalar or array payload is not a `CallToolResult`, whatever method
    // produced it; `tools/list` is the usual case.
    let payload = reply.get(RESULT).filter(|p| p.is_object())?;
    for_version(from).lift_tool_result(payload)
}

fn unchanged(reply: Map<String, Value>, to: &Leg) -> Translated {
    Translated {
        reply,
        report: TranslationReport::new(to.version),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::{ERROR, RESULT, lift_tool_result, translate};
    use crate::application::client::Answer;
    use crate::domain::ir::lower::LowerError;
    use crate::domain::ir::{FeatureSet, ToolResult, TranslationReport};
    use crate::domain::{
        CapabilitySet, DegradePolicy, Feature, FeatureProfile, Leg, Negotiation, ProtocolVersion,
        TransportKind, resolve,
    };

    type TestError = Box<dyn std::error::Error>;

    const UPSTREAM: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// A client leg with everything 2025-03-26 can express.
    fn client_leg() -> Leg {
        let version = ProtocolVersion::V2025_03_26;
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

    /// A client leg that can express nothing but plain text.
    fn bare_leg() -> Leg {
        Leg::new(ProtocolVersion::V2024_11_05, FeatureProfile::empty())
    }

    fn reply(payload: Value) -> Map<String, Value> {
        Map::from_iter([
            ("jsonrpc".to_owned(), json!("2.0")),
            ("id".to_owned(), json!(1)),
            (RESULT.to_owned(), payload),
        ])
    }

    /// A member order no codec writes: a rebuilt reply would come back in
    /// the codec's order, so comparing the serialized text tells whether the
    /// peer's own bytes survived.
    fn same_text(left: &Map<String, Value>, right: &Map<String, Value>) -> Result<bool, TestError> {
        Ok(serde_json::to_string(left)? == serde_json::to_string(right)?)
    }

    #[test]
    fn a_reply_needing_no_translation_is_the_peers_own() -> Result<(), TestError> {
        let sent = reply(json!({
            "isError": false,
            "_meta": { "note": "kept" },
            "content": [{ "text": "answer", "type": "text" }],
        }));

        let translated = translate(
            sent.clone(),
            UPSTREAM,
            &client_leg(),
            DegradePolicy::strict(),
        )?;

        assert!(
            same_text(&translated.reply, &sent)?,
            "the peer's own bytes must survive"
        );
        assert!(translated.report.is_empty());
        Ok(())
    }

    #[test]
    fn a_complete_result_type_does_not_stop_an_older_client() -> Result<(), TestError> {
        let sent = reply(json!({
            "resultType": "complete",
            "content": [{ "text": "answer", "type": "text" }],
        }));

        let translated = translate(
            sent.clone(),
            UPSTREAM,
            &client_leg(),
            DegradePolicy::strict(),
        )?;

        assert!(same_text(&translated.reply, &sent)?);
        assert!(translated.report.is_empty());
        Ok(())
    }

    /// Read typed, a result decides as [`translate`] does: as it is when
    /// the client reads it, lowered (and reported) when the policy allows,
    /// refused when it does not, and not a result when it does not read.
    #[test]
    fn a_result_read_typed_is_lowered_refused_or_kept_as_translate_decides() -> Result<(), TestError>
    {
        let audio = json!({
            "resultType": "complete",
            "content": [
                { "type": "text", "text": "answer" },
                { "type": "audio", "data": "AAAA", "mimeType": "audio/wav" },
            ],
        });
        let mut report = TranslationReport::new(ProtocolVersion::V2025_03_26);
        // As the stdio transport delivers it: text, read once.
        let as_written = Answer::Raw(serde_json::value::RawValue::from_string(audio.to_string())?);
        let kept = lift_tool_result(
            as_written,
            &client_leg(),
            DegradePolicy::strict(),
            &mut report,
        )??;
        assert_eq!(kept.content.len(), 2, "{kept:?}");
        assert_eq!(kept.result_type, None, "2025-03-26 has no resultType");
        assert!(report.is_empty());

        let mut report = TranslationReport::new(ProtocolVersion::V2024_11_05);
        let refused = lift_tool_result(
            Answer::Parsed(audio.clone()),
            &bare_leg(),
            DegradePolicy::strict(),
            &mut report,
        );
        assert!(refused.is_err(), "{refused:?}");

        let lowered = lift_tool_result(
            Answer::Parsed(audio),
            &bare_leg(),
            DegradePolicy::permissive(),
            &mut report,
        )??;
        assert!(
            !lowered.required_features().contains(Feature::AudioContent),
            "{lowered:?}"
        );
        assert!(!report.is_empty(), "a downgrade is reported");

        let unreadable = lift_tool_result(
            Answer::Raw(serde_json::value::RawValue::from_string(
                r#"{"content":"not blocks"}"#.to_owned(),
            )?),
            &client_leg(),
            DegradePolicy::permissive(),
            &mut TranslationReport::new(ProtocolVersion::V2025_03_26),
        )?;
        assert!(unreadable.is_err(), "{unreadable:?}");
        Ok(())
    }

    #[test]
    fn an_input_required_result_is_still_refused_for_an_older_client() {
        let sent = reply(json!({
            "content": [{ "type": "text", "text": "answer" }],
            "resultType": "input_required",
        }));

        let outcome = translate(sent, UPSTREAM, &client_leg(), DegradePolicy::permissive());

        assert!(outcome.is_err(), "{outcome:?}");
    }

    #[test]
    fn a_shape_this_build_cannot_read_is_forwarded_untouched() -> Result<(), TestError> {
        let sent =
            reply(json!({ "content": [{ "type": "annotation", "audience": ["assistant"] }] }));

        let translated = translate(sent.clone(), UPSTREAM, &bare_leg(), DegradePolicy::strict())?;

        assert!(same_text(&translated.reply, &sent)?);
        assert!(translated.report.is_empty());
        Ok(())
    }

    #[test]
    fn a_result_this_build_cannot_read_is_forwarded_even_when_it_needs_lowering()
    -> Result<(), TestError> {
        // A text block whose text is not a string does not read as a
        // `CallToolResult`; its structured content would otherwise be
        // lowered away for a bare client.
        let sent = reply(json!({
            "content": [{ "type": "text", "text": 42 }],
            "structuredContent": { "a": 1 },
        }));

        let translated = translate(sent.clone(), UPSTREAM, &bare_leg(), DegradePolicy::strict())?;

        assert!(same_text(&translated.reply, &sent)?);
        assert!(translated.report.is_empty());
        Ok(())
    }

    #[test]
    fn an_authorised_downgrade_rebuilds_the_result_and_records_it() -> Result<(), TestError> {
        let sent = reply(json!({
            "content": [{ "type": "text", "text": "answer" }],
            "structuredContent": { "a": 1 },
        }));

        let translated = translate(sent, UPSTREAM, &bare_leg(), DegradePolicy::permissive())?;

        assert_eq!(
            translated.report.features().iter().collect::<Vec<_>>(),
            [Feature::ToolStructuredOutput]
        );
        let result = translated.reply.get(RESULT).ok_or("a result")?;
        assert!(result.get("structuredContent").is_none(), "{result}");
        assert_eq!(
            result.pointer("/content/0"),
            Some(&json!({ "type": "text", "text": "answer" }))
        );
        Ok(())
    }

    #[test]
    fn a_strict_policy_refuses_rather_than_writing() {
        let sent = reply(json!({ "content": [], "structuredContent": { "a": 1 } }));

        let outcome = translate(sent, UPSTREAM, &bare_leg(), DegradePolicy::strict());

        assert!(
            matches!(
                outcome,
                Err(LowerError::FeatureUnavailable {
                    feature: Feature::ToolStructuredOutput,
                    ..
                })
            ),
            "expected the named feature to be refused, got {outcome:?}"
        );
    }

    #[test]
    fn an_error_reply_is_never_rebuilt() -> Result<(), TestError> {
        let sent = Map::from_iter([
            ("jsonrpc".to_owned(), json!("2.0")),
            ("id".to_owned(), json!(1)),
            (
                ERROR.to_owned(),
                json!({ "message": "no such tool", "code": -32601 }),
            ),
        ]);

        let translated = translate(
            sent.clone(),
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::permissive(),
        )?;

        assert!(same_text(&translated.reply, &sent)?);
        assert!(translated.report.is_empty());
        Ok(())
    }

    #[test]
    fn a_non_object_payload_is_left_alone() -> Result<(), TestError> {
        let sent = reply(json!([{ "structuredContent": { "a": 1 }, "content": [] }]));

        let translated = translate(
            sent.clone(),
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::permissive(),
        )?;

        assert!(same_text(&translated.reply, &sent)?);
        assert!(translated.report.is_empty());
        Ok(())
    }

    #[test]
    fn a_text_result_needs_nothing_from_any_profile() {
        let required = ToolResult::text("answer").required_features();
        let available = FeatureSet::union_of(FeatureProfile::empty().iter());
        assert!(required.is_subset_of(available));
    }
}
