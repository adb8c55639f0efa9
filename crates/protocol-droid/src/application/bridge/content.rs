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
//! # A `lift` that reads nothing is not a failure
//!
//! The same rule seen from the codec: a value this build cannot read may be
//! perfectly readable by a client newer than the bridge. Refusing it would
//! make the bridge the component that breaks forward compatibility, and the
//! client would see it as a bridge bug rather than an extension it lacks.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::domain::feature::Feature;
use crate::domain::ir::ToolResult;
use crate::domain::ir::lower::{LowerError, TranslationReport, check_expressible};
use crate::domain::{DegradePolicy, Leg, ProtocolVersion};

/// The member a successful reply carries its payload in.
const RESULT: &str = "result";

/// The member a refusal travels in; a reply has this or [`RESULT`].
const ERROR: &str = "error";

/// The `resultType` of a finished result.
const COMPLETE: &str = "complete";

/// Reads and writes a [`ToolResult`] in one revision's wire encoding.
///
/// The port is declared here, by its consumer, and implemented by the codec
/// layer, which alone knows each revision's wire types. The bridge names no
/// wire type and so could not implement it itself.
///
/// # Why `lift` answers `Option`
///
/// `None` means *this build does not read that shape*. It is a decision, not a
/// fault: the caller forwards the value untouched so that a peer who does read
/// it still receives it. A codec with no wire types at all would answer `None`
/// for everything, and the bridge would become a pass-through rather than a
/// component that breaks connections it never had to translate.
///
/// # Why the port is `Send + Sync`
///
/// A bridge holds its codec across an `await` while a reply is in flight, and
/// a serving loop drives many bridges at once; a codec bound to one thread
/// would make every one of those futures non-`Send`.
///
/// # Example
///
/// The smallest implementor there can be. The production one is
/// [`WireToolResults`](crate::adapters::secondary::codec::result::WireToolResults),
/// which dispatches to the per-revision codecs.
///
/// ```
/// use protocol_droid::application::bridge::ToolResultCodec;
/// use protocol_droid::domain::ir::{LowerError, ToolResult, TranslationReport};
/// use protocol_droid::domain::{DegradePolicy, ProtocolVersion};
/// use serde_json::Value;
///
/// /// Reads nothing, so every reply through it passes through.
/// struct ReadsNothing;
///
/// impl ToolResultCodec for ReadsNothing {
///     fn lift(&self, _version: ProtocolVersion, _wire: &Value) -> Option<ToolResult> {
///         None
///     }
///
///     fn lower(
///         &self,
///         _version: ProtocolVersion,
///         _value: ToolResult,
///         _policy: DegradePolicy,
///         _report: &mut TranslationReport,
///     ) -> Result<Value, LowerError> {
///         Ok(Value::Null)
///     }
/// }
/// ```
pub trait ToolResultCodec: Send + Sync {
    /// The [`ToolResult`] `wire` holds at `version`, or `None` when this build
    /// does not read it.
    fn lift(&self, version: ProtocolVersion, wire: &Value) -> Option<ToolResult>;

    /// Writes `value` at `version`, recording in `report` whatever had to
    /// change.
    ///
    /// The codec lowers the value itself (with
    /// [`lower_tool_result`](crate::domain::ir::lower::lower_tool_result))
    /// rather than being handed a lowered one: only the codec knows what its
    /// revision's shapes can hold, which is why the report is filled here.
    ///
    /// # Errors
    ///
    /// [`LowerError::FeatureUnavailable`] when `policy` does not authorise a
    /// needed downgrade, [`LowerError::FieldNotRepresentable`] when a field
    /// does not fit a shape `version` types.
    fn lower(
        &self,
        version: ProtocolVersion,
        value: ToolResult,
        policy: DegradePolicy,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError>;
}

/// A shared codec is a codec, so a test (or a serving loop) can keep a handle
/// on the one a [`Translator`] owns.
impl<C: ToolResultCodec> ToolResultCodec for Arc<C> {
    fn lift(&self, version: ProtocolVersion, wire: &Value) -> Option<ToolResult> {
        C::lift(self, version, wire)
    }

    fn lower(
        &self,
        version: ProtocolVersion,
        value: ToolResult,
        policy: DegradePolicy,
        report: &mut TranslationReport,
    ) -> Result<Value, LowerError> {
        C::lower(self, version, value, policy, report)
    }
}

/// A translated reply and what translating it changed.
#[derive(Debug)]
pub struct Translated {
    /// The reply to send to the client.
    pub reply: Map<String, Value>,
    /// Every change made; empty whenever the reply passed through.
    pub report: TranslationReport,
}

/// Makes replies readable by the client leg of a bridge.
#[derive(Debug)]
pub struct Translator<C> {
    codec: C,
}

impl<C: ToolResultCodec> Translator<C> {
    /// A translator reading and writing through `codec`.
    #[must_use]
    pub const fn new(codec: C) -> Self {
        Self { codec }
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
    /// use protocol_droid::application::bridge::{ToolResultCodec, Translator};
    /// use protocol_droid::domain::ir::{LowerError, ToolResult, TranslationReport};
    /// use protocol_droid::domain::{
    ///     CapabilitySet, DegradePolicy, Leg, Negotiation, ProtocolVersion, TransportKind, resolve,
    /// };
    /// use serde_json::{Map, Value, json};
    ///
    /// struct ReadsNothing;
    ///
    /// impl ToolResultCodec for ReadsNothing {
    ///     fn lift(&self, _version: ProtocolVersion, _wire: &Value) -> Option<ToolResult> {
    ///         None
    ///     }
    ///
    ///     fn lower(
    ///         &self,
    ///         _version: ProtocolVersion,
    ///         _value: ToolResult,
    ///         _policy: DegradePolicy,
    ///         _report: &mut TranslationReport,
    ///     ) -> Result<Value, LowerError> {
    ///         Ok(Value::Null)
    ///     }
    /// }
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
    /// let translator = Translator::new(ReadsNothing);
    /// let translated =
    ///     translator.translate(reply.clone(), version, &leg, DegradePolicy::strict())?;
    ///
    /// assert_eq!(translated.reply, reply);
    /// assert!(translated.report.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn translate(
        &self,
        reply: Map<String, Value>,
        from: ProtocolVersion,
        to: &Leg,
        policy: DegradePolicy,
    ) -> Result<Translated, LowerError> {
        let Some(mut lifted) = self.read(&reply, from) else {
            return Ok(Self::unchanged(reply, to));
        };

        // An absent `resultType` means `complete`, in 2026-07-28 and in every
        // revision without the field, so dropping it loses nothing; refusing it
        // would make every result of a new server unreadable to an old client.
        // Any other value has no older form and is left for the check below.
        if lifted.result_type.as_deref() == Some(COMPLETE)
            && !to.profile.allows(Feature::ToolResultType)
        {
            lifted.result_type = None;
        }

        // Nothing the client cannot read: the peer's own bytes are correct, not
        // merely convenient, and asking before lowering is what keeps the codec
        // from re-encoding a reply nobody asked it to change.
        if check_expressible(&lifted.required_features(), &to.profile, to.version).is_ok() {
            return Ok(Self::unchanged(reply, to));
        }

        let mut report = TranslationReport::new(to.version);
        let lowered = self.codec.lower(to.version, lifted, policy, &mut report)?;
        let mut reply = reply;
        // Replaces the payload that `read` found, so this never invents a
        // `result` the upstream did not send.
        reply.insert(RESULT.to_owned(), lowered);
        Ok(Translated { reply, report })
    }

    /// The tool result in `reply`, if it holds one this build reads.
    fn read(&self, reply: &Map<String, Value>, from: ProtocolVersion) -> Option<ToolResult> {
        // A refusal is the upstream's own words about a request, not a result.
        if reply.contains_key(ERROR) {
            return None;
        }
        // A scalar or array payload is not a `CallToolResult`, whatever method
        // produced it; `tools/list` is the usual case.
        let payload = reply.get(RESULT).filter(|p| p.is_object())?;
        self.codec.lift(from, payload)
    }

    fn unchanged(reply: Map<String, Value>, to: &Leg) -> Translated {
        Translated {
            reply,
            report: TranslationReport::new(to.version),
        }
    }
}

#[cfg(test)]
mod doubles {
    use core::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};

    use super::ToolResultCodec;
    use crate::domain::ir::lower::lower_tool_result;
    use crate::domain::ir::{LowerError, ToolResult, TranslationReport};
    use crate::domain::{DegradePolicy, FeatureProfile, ProtocolVersion};

    /// A codec that reads one fixed value from anything and counts each call.
    ///
    /// Atomics rather than a lock: nothing here can fail while counting, so a
    /// lock would only add a poisoning case to every assertion.
    pub(super) struct Counting {
        reads: Option<ToolResult>,
        lifts: AtomicUsize,
        lowers: AtomicUsize,
    }

    impl Counting {
        /// Reads `value` back from any reply.
        pub(super) const fn reading(value: ToolResult) -> Self {
            Self {
                reads: Some(value),
                lifts: AtomicUsize::new(0),
                lowers: AtomicUsize::new(0),
            }
        }

        /// Reads nothing, so every reply passes through.
        pub(super) const fn reading_nothing() -> Self {
            Self {
                reads: None,
                lifts: AtomicUsize::new(0),
                lowers: AtomicUsize::new(0),
            }
        }

        pub(super) fn lifts(&self) -> usize {
            self.lifts.load(Ordering::Relaxed)
        }

        /// Counts entries rather than successes: the codec is where the
        /// policy is enforced, so a refusal counts too.
        pub(super) fn lowers(&self) -> usize {
            self.lowers.load(Ordering::Relaxed)
        }
    }

    impl ToolResultCodec for Counting {
        fn lift(&self, _version: ProtocolVersion, _wire: &Value) -> Option<ToolResult> {
            self.lifts.fetch_add(1, Ordering::Relaxed);
            self.reads.clone()
        }

        fn lower(
            &self,
            _version: ProtocolVersion,
            value: ToolResult,
            policy: DegradePolicy,
            report: &mut TranslationReport,
        ) -> Result<Value, LowerError> {
            self.lowers.fetch_add(1, Ordering::Relaxed);
            let (lowered, made) = lower_tool_result(
                value,
                &FeatureProfile::empty(),
                ProtocolVersion::V2025_03_26,
                policy,
            )?;
            report.absorb(&made);
            // A marker, not the lowered value: these tests are about whether
            // the reply was rebuilt; how it reads is the codec's own subject.
            Ok(json!({ "rebuilt": true, "blocks": lowered.content.len() }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Map, Value, json};

    use super::doubles::Counting;
    use super::{ERROR, RESULT, Translator};
    use crate::domain::ir::lower::LowerError;
    use crate::domain::ir::{FeatureSet, ToolResult};
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

    fn structured() -> Result<ToolResult, TestError> {
        Ok(ToolResult::text("answer").with_structured(r#"{"a":1}"#)?)
    }

    #[test]
    fn a_reply_needing_no_translation_never_reaches_the_codec() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading(ToolResult::text("answer")));
        let sent = reply(json!({ "content": [{ "type": "text", "text": "answer" }] }));

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent.clone(),
            UPSTREAM,
            &client_leg(),
            DegradePolicy::strict(),
        )?;

        assert_eq!(translated.reply, sent, "the peer's own bytes must survive");
        assert!(translated.report.is_empty());
        assert_eq!(codec.lifts(), 1, "it looked once");
        assert_eq!(codec.lowers(), 0, "and found nothing to rebuild");
        Ok(())
    }

    #[test]
    fn a_complete_result_type_does_not_stop_an_older_client() -> Result<(), TestError> {
        let mut finished = ToolResult::text("answer");
        finished.result_type = Some("complete".to_owned());
        let codec = Arc::new(Counting::reading(finished));
        let sent = reply(json!({
            "content": [{ "type": "text", "text": "answer" }],
            "resultType": "complete",
        }));

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent.clone(),
            UPSTREAM,
            &client_leg(),
            DegradePolicy::strict(),
        )?;

        assert_eq!(translated.reply, sent);
        assert_eq!(codec.lowers(), 0);
        Ok(())
    }

    #[test]
    fn an_input_required_result_is_still_refused_for_an_older_client() {
        let mut pending = ToolResult::text("answer");
        pending.result_type = Some("input_required".to_owned());
        let sent = reply(json!({
            "content": [{ "type": "text", "text": "answer" }],
            "resultType": "input_required",
        }));

        let outcome = Translator::new(Counting::reading(pending)).translate(
            sent,
            UPSTREAM,
            &client_leg(),
            DegradePolicy::permissive(),
        );

        assert!(outcome.is_err(), "{outcome:?}");
    }

    #[test]
    fn a_shape_this_build_cannot_read_is_forwarded_untouched() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading_nothing());
        let sent =
            reply(json!({ "content": [{ "type": "annotation", "audience": ["assistant"] }] }));

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent.clone(),
            UPSTREAM,
            &client_leg(),
            DegradePolicy::strict(),
        )?;

        assert_eq!(translated.reply, sent);
        assert!(translated.report.is_empty());
        assert_eq!(codec.lifts(), 1, "the codec was asked");
        assert_eq!(codec.lowers(), 0);
        Ok(())
    }

    #[test]
    fn an_authorised_downgrade_rebuilds_the_result_and_records_it() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading(structured()?));
        let sent = reply(json!({
            "content": [{ "type": "text", "text": "answer" }],
            "structuredContent": { "a": 1 },
        }));

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent,
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::permissive(),
        )?;

        assert!(!translated.report.is_empty(), "a rebuild must be recorded");
        assert_eq!(
            translated.reply.get(RESULT),
            Some(&json!({ "rebuilt": true, "blocks": 2 }))
        );
        assert_eq!(codec.lowers(), 1);
        Ok(())
    }

    /// The translator cannot pre-check the policy: only the codec knows which
    /// features lowering has to strip, so the codec is entered and refuses.
    #[test]
    fn a_strict_policy_refuses_rather_than_writing() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading(structured()?));
        let sent = reply(json!({ "content": [], "structuredContent": { "a": 1 } }));

        let outcome = Translator::new(Arc::clone(&codec)).translate(
            sent,
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::strict(),
        );

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
        assert_eq!(codec.lowers(), 1);
        Ok(())
    }

    #[test]
    fn an_error_reply_is_never_rebuilt() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading(structured()?));
        let sent = Map::from_iter([
            ("jsonrpc".to_owned(), json!("2.0")),
            ("id".to_owned(), json!(1)),
            (
                ERROR.to_owned(),
                json!({ "code": -32601, "message": "no such tool" }),
            ),
        ]);

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent.clone(),
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::permissive(),
        )?;

        assert_eq!(translated.reply, sent);
        assert!(translated.report.is_empty());
        assert_eq!(codec.lifts(), 0, "an error envelope is not a tool result");
        Ok(())
    }

    #[test]
    fn a_non_object_payload_is_left_alone() -> Result<(), TestError> {
        let codec = Arc::new(Counting::reading(structured()?));
        let sent = reply(json!([{ "name": "echo" }]));

        let translated = Translator::new(Arc::clone(&codec)).translate(
            sent.clone(),
            UPSTREAM,
            &bare_leg(),
            DegradePolicy::permissive(),
        )?;

        assert_eq!(translated.reply, sent);
        assert_eq!(codec.lowers(), 0);
        Ok(())
    }

    #[test]
    fn a_text_result_needs_nothing_from_any_profile() {
        let required = ToolResult::text("answer").required_features();
        let available = FeatureSet::union_of(FeatureProfile::empty().iter());
        assert!(required.is_subset_of(available));
    }
}
