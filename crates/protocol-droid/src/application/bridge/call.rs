//! Carrying one request upstream: the params as the upstream's revision
//! wants them, the call driven across input rounds and tasks, what the
//! upstream relays on the way, and its errors as the client reads them.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::exchange::{
    Flight, Owner, Rounds, Start, no_longer_waiting, parked_at, parked_handle, progress_to,
};
use super::lower::refusal;
use super::remote::{Elsewhere, Route};
use super::runtime::Bridge;
use super::upstream::{RELAY_BACKLOG, Relay, Upstream, lock};
use crate::application::client::{Answer, ClientError, LinkError, RequestOptions};
use crate::application::observe::{TRACEPARENT_META, TRACESTATE_META, TraceContext};
use crate::application::server::LOG_LEVEL_META;
use crate::application::server::dispatch::{
    CLIENT_CAPABILITIES_META, CLIENT_INFO_META, PROTOCOL_VERSION_META,
};
use crate::application::server::{Call, CallError, Question};
use crate::domain::ir::{JsonObject, ToolResult, TranslationReport, take_member};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{Era, Feature, Leg, ProtocolVersion};

/// The `_meta` keys of a request the bridge speaks for itself upstream: the
/// 2026-07-28 envelope, and the progress token (the bridge's own client
/// mints one per upstream request).
pub(super) const REQUEST_META_KEYS: [&str; 5] = [
    PROTOCOL_VERSION_META,
    CLIENT_CAPABILITIES_META,
    CLIENT_INFO_META,
    LOG_LEVEL_META,
    "progressToken",
];

/// Sends a relayed notification on `call`'s stream.
pub(super) fn emit(call: &Call, relayed: Relay) {
    match relayed {
        Relay::Progress {
            progress,
            total,
            message,
        } => call.progress(progress, total, message.as_deref()),
        Relay::Log {
            level,
            logger,
            data,
        } => call.forward_log(level, logger, data),
    }
}

/// The params to send upstream: the client's own, without what the bridge
/// says for itself (the 2026-07-28 `_meta` keys, the input round members).
/// Toward a 2026-07-28 server each request also gets the client's
/// capabilities, identity and log level ([`Rounds::modern`] adds them).
pub(super) fn upstream_params(
    method: &str,
    mut params: JsonObject,
    upstream: ProtocolVersion,
) -> JsonObject {
    // Taken only where present: most requests have none of these, and
    // looking a name up in a map hashes it.
    take_member(&mut params, "inputResponses");
    take_member(&mut params, "requestState");
    // The bridge offers no tasks; a task asked for anyway is not passed on.
    take_member(&mut params, "task");
    // A completion's context (2025-06-18) means nothing to an older server;
    // its completions are simply less precise without it.
    if method == "completion/complete" && !Feature::CompletionContext.exists_at(upstream) {
        take_member(&mut params, "context");
    }
    let mut meta = match take_member(&mut params, "_meta") {
        Some(Value::Object(meta)) => meta,
        _ => JsonObject::new(),
    };
    for key in REQUEST_META_KEYS {
        take_member(&mut meta, key);
    }
    if !meta.is_empty() {
        params.insert("_meta".to_owned(), Value::Object(meta));
    }
    params
}

/// The key the state of a URL round travels under.
pub(super) const URL_ASKED: &str = "urlAsked";

/// A 2025-11-25 server's `-32042` (URL elicitation required), for a
/// 2026-07-28 client: an input round asking the URLs, whose retry sends the
/// request upstream again. A retry the server still refuses gets the
/// server's error.
pub(super) async fn url_round(call: &Call, error: ErrorObject) -> CallError {
    let retried = call.state().is_some_and(|s| s.get(URL_ASKED).is_some());
    let elicitations = error
        .data
        .as_ref()
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if retried || elicitations.is_empty() {
        return CallError::Protocol(error);
    }
    let questions = elicitations
        .into_iter()
        .enumerate()
        .map(|(i, mut params)| {
            // The id is the upstream's bookkeeping; 2026-07-28 has none.
            if let Value::Object(params) = &mut params {
                params.remove("elicitationId");
            }
            Question::Elicit {
                key: format!("url{i}"),
                params,
            }
        })
        .collect();
    call.keep_state(json!({ URL_ASKED: true }));
    // The answers are not read here (the server's error stands), so not
    // checked either: a forwarder passes its client's answers as given.
    match call.ask_all_unchecked(questions).await {
        Err(round @ CallError::InputRequired(_)) => round,
        Err(other) => other,
        // Answers already in hand mean this is the retry; the server's
        // error stands.
        Ok(_) => CallError::Protocol(error),
    }
}

/// An upstream failure of `method` as the client is to read it.
pub(super) fn upstream_error(
    error: ClientError,
    method: &str,
    leg: &Leg,
    upstream: ProtocolVersion,
) -> CallError {
    match error {
        ClientError::Server(mut object) => {
            // A missing resource is `-32602` from 2026-07-28 on; on another
            // method the code is the server's own, passed on as it is.
            if object.code == ErrorCode::RESOURCE_NOT_FOUND
                && method == "resources/read"
                && !leg.profile.allows(Feature::LegacyResourceNotFound)
            {
                object.code = ErrorCode::INVALID_PARAMS;
            }
            // Only a 2026-07-28 server gives them that meaning; to an older
            // one they are codes of its own.
            if upstream.era() == Era::Modern && LINK_CODES.contains(&object.code) {
                tracing::warn!(target: "droid::bridge", code = object.code.0, message = %object.message, "the upstream refused the bridge's request");
                return CallError::internal(format!(
                    "the upstream refused the bridge's request: {}",
                    object.message
                ));
            }
            CallError::Protocol(object)
        }
        // The detail names the upstream (its URL, its command): logged,
        // not told to the client.
        ClientError::Timeout { method, millis } => {
            tracing::warn!(target: "droid::bridge", method, millis, "the upstream did not answer in time");
            CallError::internal(format!(
                "the upstream gave no answer to {method} within {millis} ms; the request was cancelled"
            ))
        }
        // The limit is this side's own, and worth the client's knowing.
        ClientError::Link(LinkError::TooLarge { limit }) => {
            tracing::warn!(target: "droid::bridge", limit, "the upstream's answer was too large");
            CallError::internal(format!(
                "the upstream's answer ran past the {limit}-byte limit and was discarded"
            ))
        }
        other => {
            tracing::warn!(target: "droid::bridge", error = %other, "the upstream failed");
            CallError::internal("the upstream failed; the log says why")
        }
    }
}

/// The 2026-07-28 codes that speak of a request's own headers or revision:
/// from the server, they are about the bridge's request upstream, never its
/// client's, so the client hears of a failure on this side instead.
const LINK_CODES: [ErrorCode; 2] = [
    ErrorCode::HEADER_MISMATCH,
    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
];

/// Where the retry of a parked call finds it.
enum Resumption {
    /// Parked here.
    Here(Flight),
    /// Parked at another instance, where the retry is carried.
    Elsewhere(Elsewhere),
}

impl Bridge {
    /// Gives the upstream request the trace context to continue: the one
    /// the client sent, or (with a tracer) the bridge's own span as the
    /// parent. Whatever the params held under those keys is replaced, so
    /// the upstream never sees two.
    fn carry_trace(&self, params: &mut JsonObject, call: &Call) {
        let incoming = TraceContext::from_meta(&call.ctx.request_meta);
        let observer = &self.inner.options.observer;
        let outgoing = observer.outgoing_trace(incoming.as_ref());
        match (params.get_mut("_meta"), outgoing) {
            (Some(Value::Object(meta)), outgoing) => {
                meta.remove(TRACEPARENT_META);
                meta.remove(TRACESTATE_META);
                if let Some(trace) = outgoing {
                    trace.write_into(meta);
                }
                if meta.is_empty() {
                    params.remove("_meta");
                }
            }
            (None, Some(trace)) => {
                let mut meta = JsonObject::new();
                trace.write_into(&mut meta);
                params.insert("_meta".to_owned(), Value::Object(meta));
            }
            // Nothing to carry, and nothing to clear.
            _ => {}
        }
    }

    /// Carries one request for `method` upstream on behalf of `call` (its
    /// session's connection, its input rounds, its progress and log lines)
    /// and translates the answer for `call`'s client.
    pub(crate) async fn forward_call(
        &self,
        method: &str,
        params: JsonObject,
        call: &Call,
    ) -> Result<Value, CallError> {
        let (answer, leg, mut report) = self.carry(method, params, call).await?;
        let result = answer.into_value().map_err(|e| {
            tracing::warn!(target: "droid::bridge", method, error = %e, "an unreadable answer");
            CallError::internal("the upstream's answer could not be read; the log says why")
        })?;
        // A result that carries something (a tool's, a prompt's, a list)
        // is an object: anything else is not an answer to pass on as one.
        // An empty result (`logging/setLevel`, a subscription) carries
        // nothing to lose, and an extension's method is its own to say.
        let defined = matches!(
            method.split_once('/').map(|(family, _)| family),
            Some("tools" | "prompts" | "resources" | "completion" | "tasks")
        ) && !matches!(method, "resources/subscribe" | "resources/unsubscribe");
        if defined && !result.is_object() {
            return Err(CallError::internal(format!(
                "the upstream answered {method} with something that is not a result"
            )));
        }
        let mut value = self
            .translate(
                method,
                result,
                self.inner.upstream.version,
                &leg,
                &mut report,
            )
            .inspect_err(|e| {
                tracing::warn!(target: "droid::bridge", method, error = %e, "translation refused");
            })
            .map_err(|e| refusal(&e))?;
        if !report.is_empty() {
            self.record(method, &report, &mut value);
        }
        Ok(value)
    }

    /// Carries a `tools/call` as [`forward_call`](Self::forward_call) does,
    /// and reads its result into the model once: for a caller that needs it
    /// typed (the gateway), rather than translated as JSON and read again.
    /// The upstream's `serverInfo` is left out of the result's `_meta`: the
    /// caller answers as itself. `Ok(Err(why))` when the upstream answered
    /// something that is not a tool result.
    pub(crate) async fn forward_tool_call(
        &self,
        params: JsonObject,
        call: &Call,
    ) -> Result<Result<ToolResult, serde_json::Error>, CallError> {
        const METHOD: &str = "tools/call";
        let (result, leg, mut report) = self.carry(METHOD, params, call).await?;
        let read = self
            .translate_tool_result(result, &leg, &mut report)
            .inspect_err(|e| {
                tracing::warn!(target: "droid::bridge", method = METHOD, error = %e, "translation refused");
            })
            .map_err(|e| refusal(&e))?;
        match read {
            Ok(mut result) => {
                if !report.is_empty() {
                    self.record_typed(METHOD, &report, &mut result);
                }
                Ok(Ok(result))
            }
            Err(unreadable) => {
                // The questions lowered on the way are still worth keeping.
                if !report.is_empty() {
                    self.keep(METHOD, &report);
                }
                Ok(Err(unreadable))
            }
        }
    }

    /// Carries one request for `method` upstream on behalf of `call`: its
    /// answer as the upstream wrote it, the client's leg, and the report
    /// the translation of its questions began.
    async fn carry(
        &self,
        method: &str,
        params: JsonObject,
        call: &Call,
    ) -> Result<(Answer, Leg, TranslationReport), CallError> {
        let version = self.inner.upstream.version;
        // A retry of a round parked in front of a legacy server continues
        // on the connection its request is open on.
        let owner = Owner::of(call, method, &params);
        let state = call.state();
        let parked = match parked_handle(state.as_ref()) {
            Some(handle) if version.era() == Era::Legacy => {
                Some(self.resumption(handle, parked_at(state.as_ref()), &owner)?)
            }
            _ => None,
        };
        let lease = match parked {
            Some(_) => None,
            None => Some(self.lease_for(call).await?),
        };
        let leg = Leg::new(call.peer.negotiated(), call.peer.profile());
        let mut params = upstream_params(method, params, version);
        self.carry_trace(&mut params, call);
        // What is awaited only now and then is boxed, here and below, so
        // that this future, moved whole at every step up to the runtime,
        // stays small.
        if let Some(lease) = lease.as_ref().filter(|_| version.era() == Era::Legacy) {
            Box::pin(self.settle_level(&lease.upstream, call)).await;
        }
        let as_task = match lease.as_ref() {
            Some(_) if method == "tools/call" => self.runs_as_task(&params).await,
            _ => false,
        };
        let (relay, mut relayed) = tokio::sync::mpsc::channel(RELAY_BACKLOG);
        let relay = Arc::new(Mutex::new(relay));
        // A call whose server reports progress is waited for as long as it
        // does (within the ceiling): the long tools are the ones that do.
        let mut options = RequestOptions {
            timeout: Some(self.inner.options.request_timeout),
            reset_timeout_on_progress: true,
            ..RequestOptions::default()
        };
        if call.ctx.progress_token().is_some() {
            // Pointed at the relay by the round loop, which knows which
            // task serves the request now.
            options.on_progress = Some(progress_to(Arc::clone(&relay)));
        }
        let mut report = TranslationReport::new(leg.version);
        let outcome = {
            let mut rounds = Rounds {
                parking: &self.inner.lot.flights,
                leg: &leg,
                policy: self.inner.options.policy,
                report: &mut report,
                max_rounds: self.inner.options.max_rounds,
                park_for: self.inner.options.park_for,
                options,
                relay,
                owner,
                as_task,
                here: self.inner.route.get().map(Route::instance),
            };
            let work = async {
                match (parked, lease) {
                    (Some(Resumption::Here(flight)), _) => {
                        Box::pin(rounds.legacy(call, method, params, Start::Parked(flight)))
                            .await
                            .map(|outcome| outcome.map(Answer::Parsed))
                    }
                    (Some(Resumption::Elsewhere(elsewhere)), _) => {
                        Box::pin(rounds.resume_elsewhere(call, elsewhere))
                            .await
                            .map(|outcome| outcome.map(Answer::Parsed))
                    }
                    (None, Some(lease)) if version.era() == Era::Modern => {
                        rounds.modern(call, method, params, &lease).await
                    }
                    (None, Some(lease)) => rounds
                        .legacy(call, method, params, Start::New(lease))
                        .await
                        .map(|outcome| outcome.map(Answer::Parsed)),
                    (None, None) => Err(CallError::internal("no upstream connection")),
                }
            };
            tokio::pin!(work);
            // Notifications are sent from this task, the request's own, in
            // the order they came, and all of them before the answer.
            let outcome = loop {
                tokio::select! {
                    biased;
                    Some(relayed) = relayed.recv() => emit(call, relayed),
                    outcome = &mut work => break outcome,
                }
            };
            while let Ok(late) = relayed.try_recv() {
                emit(call, late);
            }
            outcome
        };
        let result = match outcome? {
            Ok(result) => result,
            Err(ClientError::Server(error))
                if error.code == ErrorCode::URL_ELICITATION_REQUIRED
                    && leg.version.era() == Era::Modern =>
            {
                return Err(Box::pin(url_round(call, error)).await);
            }
            Err(error) => return Err(upstream_error(error, method, &leg, version)),
        };
        Ok((result, leg, report))
    }

    /// Where the retry of the flight parked under `handle` (at the
    /// instance `at`, if its state named one) for `owner` starts: the
    /// flight itself when it is parked here, its holder when that is
    /// another instance sharing this one's keys.
    fn resumption(
        &self,
        handle: String,
        at: Option<&str>,
        owner: &Owner,
    ) -> Result<Resumption, CallError> {
        if let (Some(route), Some(at)) = (self.inner.route.get(), at) {
            if at != route.instance() {
                return Ok(Resumption::Elsewhere(Elsewhere {
                    route: route.clone(),
                    at: at.to_owned(),
                    handle,
                }));
            }
        }
        lock(&self.inner.lot.flights)
            .take(&handle, owner)
            .map(Resumption::Here)
            .ok_or_else(no_longer_waiting)
    }

    /// Whether the tool `params` call only runs as a task upstream: a tool
    /// list of the upstream says so, listed when none is known yet.
    pub(super) async fn runs_as_task(&self, params: &JsonObject) -> bool {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return false;
        };
        let support = match self.known_task_support(name) {
            Some(support) => support,
            None => Box::pin(self.task_support(name)).await,
        };
        support == crate::wire::tools::TaskSupport::Required
    }

    /// Sets a legacy upstream's session log level to what the request
    /// asked for, when it differs from what was last set.
    pub(super) async fn settle_level(&self, upstream: &Upstream, call: &Call) {
        let Some(level) = call.ctx.log_level else {
            return;
        };
        if self.inner.upstream.capabilities.logging.is_none() {
            return;
        }
        if *lock(&upstream.handler.level) == Some(level) {
            return;
        }
        match upstream.client.set_logging_level(level).await {
            Ok(()) => *lock(&upstream.handler.level) = Some(level),
            Err(error) => {
                tracing::debug!(target: "droid::bridge", %error, "the upstream refused the log level");
            }
        }
    }
}
