//! The methods both eras share, and turning a handler's outcome into an
//! answer.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::application::server::call::{Call, CallError};
use crate::application::server::forward::{FORWARDED, is_unmodelled};
use crate::application::server::host::{Server, ToolAccess};
use crate::application::server::registry::{match_template, visible};
use crate::application::server::request_state::StateBinding;
use crate::application::server::{AuthContext, PeerSession, RequestContext};
use crate::domain::canonical::request_digest;
use crate::domain::ir::{JsonObject, ToolResult, TranslationReport};
use crate::domain::jsonrpc::{ErrorCode, ErrorObject};
use crate::domain::{DegradePolicy, Era, Feature, ProtocolVersion};
use crate::wire::codec::for_version;

use super::{Connection, SERVER_INFO_META, error, now_ms};
use crate::application::server::reply::Reply;

impl Connection {
    /// The methods both eras share.
    pub(super) async fn common(
        &self,
        method: &str,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        let era = peer.negotiated().era();
        if self.server.forwarder().is_some()
            && (FORWARDED.contains(&method) || is_unmodelled(method))
        {
            return Box::pin(self.forwarded(method, params, ctx, peer))
                .await
                .map(Reply::Value);
        }
        let registry = self.server.registry();
        let can_see = |scope: Option<&String>| visible(scope, |s| ctx.auth.has_scope(s));
        reject_cursor(&params)?;
        let answer = match method {
            "tools/list" => {
                let tools: Vec<_> = registry
                    .tools
                    .values()
                    .filter(|t| can_see(t.scope.as_ref()))
                    .filter(|t| {
                        self.server.tool_access(&peer, &ctx.auth, &t.tool.name)
                            == ToolAccess::Granted
                    })
                    .map(|t| t.tool.clone())
                    .collect();
                Ok(json!({ "tools": tools }))
            }
            "tools/call" => return self.call_tool(params, ctx, peer).await,
            "prompts/list" => {
                let prompts: Vec<_> = registry
                    .prompts
                    .values()
                    .filter(|p| can_see(p.scope.as_ref()))
                    .map(|p| p.prompt.clone())
                    .collect();
                Ok(json!({ "prompts": prompts }))
            }
            "prompts/get" => {
                let name = required_str(&params, "name")?;
                let entry = registry
                    .prompts
                    .get(name)
                    .filter(|p| can_see(p.scope.as_ref()))
                    .ok_or_else(|| unknown("prompts/get", &params, &peer))?;
                let arguments = object_member(&params, "arguments");
                let auth = ctx.auth.clone();
                let call = Call::new(*ctx, peer, arguments);
                let result = (entry.handler)(call).await;
                self.outcome(
                    result.and_then(|r| to_value(&r)),
                    "prompts/get",
                    &params,
                    &auth,
                    era,
                )
            }
            "resources/list" => {
                let resources: Vec<_> = registry
                    .resources
                    .values()
                    .filter(|r| can_see(r.scope.as_ref()))
                    .map(|r| r.resource.clone())
                    .collect();
                Ok(json!({ "resources": resources }))
            }
            "resources/templates/list" => {
                let templates: Vec<_> = registry
                    .templates
                    .values()
                    .filter(|t| can_see(t.scope.as_ref()))
                    .map(|t| t.template.clone())
                    .collect();
                Ok(json!({ "resourceTemplates": templates }))
            }
            "resources/read" => {
                let uri = required_str(&params, "uri")?.to_owned();
                let mut arguments = JsonObject::new();
                arguments.insert("uri".to_owned(), json!(uri));
                let found = match registry
                    .resources
                    .get(&uri)
                    .filter(|r| can_see(r.scope.as_ref()))
                {
                    Some(entry) => Some(Arc::clone(&entry.handler)),
                    None => registry
                        .templates
                        .values()
                        .filter(|t| can_see(t.scope.as_ref()))
                        .find_map(|t| {
                            match_template(&t.template.uri_template, &uri).map(|vars| {
                                arguments.extend(vars);
                                Arc::clone(&t.handler)
                            })
                        }),
                };
                let Some(handler) = found else {
                    // Never an empty `contents`: a missing resource is an
                    // error, with the code the client's revision expects.
                    return Err(unknown("resources/read", &params, &peer));
                };
                let auth = ctx.auth.clone();
                let call = Call::new(*ctx, peer, arguments);
                let result = handler(call)
                    .await
                    .and_then(|contents| Ok(json!({ "contents": to_value(&contents)? })));
                self.outcome(result, "resources/read", &params, &auth, era)
            }
            "completion/complete" => {
                let Some(completer) = registry.completer.clone() else {
                    return Err(error(
                        ErrorCode::METHOD_NOT_FOUND,
                        "completions are not offered",
                    ));
                };
                // Completing an argument of something the caller cannot see
                // would tell them it exists.
                let reference = params.get("ref");
                let kind = reference
                    .and_then(|r| r.get("type"))
                    .and_then(Value::as_str);
                let target = reference
                    .and_then(|r| r.get("name").or_else(|| r.get("uri")))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let visible_target = match kind {
                    Some("ref/prompt") => registry
                        .prompts
                        .get(target)
                        .is_some_and(|p| can_see(p.scope.as_ref())),
                    Some("ref/resource") => {
                        registry
                            .templates
                            .get(target)
                            .is_some_and(|t| can_see(t.scope.as_ref()))
                            || self.can_read(target, &ctx.auth)
                    }
                    _ => false,
                };
                if !visible_target {
                    return Err(unknown("completion/complete", &params, &peer));
                }
                let mut values = completer(&params);
                let total = values.len();
                values.truncate(100);
                Ok(json!({ "completion": {
                    "values": values, "total": total, "hasMore": total > 100,
                } }))
            }
            other => Err(error(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{other} is not served here"),
            )),
        };
        answer.map(Reply::Value)
    }

    pub(super) async fn call_tool(
        &self,
        mut params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        if self.server.forwarder().is_some() {
            return Box::pin(self.forwarded("tools/call", params, ctx, peer))
                .await
                .map(Reply::Value);
        }
        let name = required_str(&params, "name")?.to_owned();
        // Only the handler is taken: cloning the whole entry would copy the
        // tool's definition, input schema and all, on every call.
        let handler = self
            .server
            .registry()
            .tools
            .get(&name)
            .filter(|t| visible(t.scope.as_ref(), |s| ctx.auth.has_scope(s)))
            .map(|t| Arc::clone(&t.handler))
            .ok_or_else(|| unknown("tools/call", &params, &peer))?;
        match self.server.tool_access(&peer, &ctx.auth, &name) {
            ToolAccess::Granted => {}
            ToolAccess::Hidden => return Err(unknown("tools/call", &params, &peer)),
            ToolAccess::Refused(reason) => return Err(error(ErrorCode::INVALID_PARAMS, reason)),
        }
        let version = peer.negotiated();
        // Only a 2026-07-28 outcome reads the params again (to seal an
        // input-required round); a legacy call's arguments are moved out.
        let arguments = match version.era() {
            Era::Legacy => match params.swap_remove("arguments") {
                Some(Value::Object(arguments)) => arguments,
                _ => JsonObject::new(),
            },
            Era::Modern => object_member(&params, "arguments"),
        };
        let auth = ctx.auth.clone();
        let call = Call::new(*ctx, peer, arguments);
        let result = handler(call)
            .await
            .and_then(|value| self.write_tool_result(value, version));
        match result {
            Ok(written) => Ok(written),
            Err(e) => self
                .outcome(Err(e), "tools/call", &params, &auth, version.era())
                .map(Reply::Value),
        }
    }

    /// A tool's result lowered for `version` and finished as [`finish`]
    /// would finish it, left for the transport to write.
    fn write_tool_result(
        &self,
        value: ToolResult,
        version: ProtocolVersion,
    ) -> Result<Reply, CallError> {
        let mut report = TranslationReport::new(version);
        // The server wrote the result, so lowering it for an older client is
        // its own decision, not a bridge's: permissive.
        //
        // Written typed, a result repeating a field among its unmodelled
        // members would name it twice; it goes the JSON-object way, where
        // the unmodelled member wins, as it always did.
        if value.extra_repeats_a_field() {
            let lowered = for_version(version)
                .lower_tool_result(value, DegradePolicy::permissive(), &mut report)
                .map_err(|e| CallError::internal(e.to_string()))?;
            return Ok(finish(
                Reply::Value(lowered),
                "tools/call",
                version,
                &self.server,
            ));
        }
        // Boxed at once and lowered where it lies: moved by value through
        // each step, the result was copied several times over.
        let mut result = Box::new(value);
        for_version(version)
            .lower_tool_result_in_place(&mut result, DegradePolicy::permissive(), &mut report)
            .map_err(|e| CallError::internal(e.to_string()))?;
        if version.era() == Era::Modern {
            stamp_server_info(
                result.meta.get_or_insert_with(JsonObject::new),
                &self.server,
            );
        }
        Ok(Reply::Tool(result))
    }

    /// Hands a primitive to the server's [`Forward`](crate::application::server::Forward).
    ///
    /// Its callers box this future: it is as large as the rest of a call's
    /// state, and inline it would be moved with every call served here.
    async fn forwarded(
        &self,
        method: &str,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Value, ErrorObject> {
        let Some(forward) = self.server.forwarder().map(Arc::clone) else {
            return Err(error(ErrorCode::INTERNAL_ERROR, "nothing to forward to"));
        };
        let era = peer.negotiated().era();
        let scopes = self.server.forwarded_scopes();
        if !scopes.admits_request(method, &params, |s| ctx.auth.has_scope(s)) {
            return Err(unknown(method, &params, &peer));
        }
        let auth = ctx.auth.clone();
        let call = Call::new(*ctx, peer, object_member(&params, "arguments"));
        let result = forward.forward(method, params.clone(), call).await;
        let mut answer = self.outcome(result, method, &params, &auth, era)?;
        if !scopes.is_empty() {
            scopes.filter_list(method, &mut answer, |s| auth.has_scope(s));
        }
        Ok(answer)
    }

    /// Turns a handler's outcome into a result or an error; a request for
    /// more input becomes an `InputRequiredResult` with a sealed state.
    pub(super) fn outcome(
        &self,
        result: Result<Value, CallError>,
        method: &str,
        params: &JsonObject,
        auth: &AuthContext,
        era: Era,
    ) -> Result<Value, ErrorObject> {
        match result {
            // A legacy client has no way to read an input-required round: a
            // handler asking through `Call` never produces one there, so one
            // built by hand is a handler bug, reported as such.
            Err(CallError::InputRequired(_)) if era == Era::Legacy => Err(error(
                ErrorCode::INTERNAL_ERROR,
                "the handler asked for input in a form only 2026-07-28 clients can answer",
            )),
            Ok(value) => Ok(value),
            Err(CallError::Protocol(object)) => Err(object),
            Err(CallError::MissingCapability { required }) => Err(error(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "the request needs a client capability it did not declare",
            )
            .with_data(json!({ "requiredCapabilities": required }))),
            Err(CallError::InputRequired(asked)) => {
                let crate::application::server::call::InputRequired { requests, state } = *asked;
                let mut result = JsonObject::new();
                result.insert("resultType".to_owned(), json!("input_required"));
                result.insert("inputRequests".to_owned(), Value::Object(requests));
                if let Some(state) = state {
                    let digest = request_digest(params);
                    let binding = binding(method, params, auth, digest);
                    let sealed = self
                        .server
                        .inner
                        .sealer
                        .read()
                        .map_err(|_| {
                            error(ErrorCode::INTERNAL_ERROR, "the state key is unavailable")
                        })?
                        .seal(&state, &binding, now_ms())
                        .map_err(|e| error(ErrorCode::INTERNAL_ERROR, e.to_string()))?;
                    result.insert("requestState".to_owned(), json!(sealed));
                }
                Ok(Value::Object(result))
            }
        }
    }
}

/// What a sealed state is bound to: the caller, the method, its target and
/// the request's digest.
pub(super) fn binding(
    method: &str,
    params: &JsonObject,
    auth: &AuthContext,
    digest: crate::domain::canonical::RequestDigest,
) -> StateBinding {
    let target = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    StateBinding {
        principal: auth.principal_key(),
        method: method.to_owned(),
        target: target.to_owned(),
        digest,
    }
}

pub(super) fn finish(
    reply: Reply,
    method: &str,
    version: ProtocolVersion,
    server: &Server,
) -> Reply {
    // A tool's result was finished as it was lowered.
    let Reply::Value(Value::Object(mut map)) = reply else {
        return reply;
    };
    let codec = for_version(version);
    codec.finish_result(Some(method), &mut map);
    if version.era() == Era::Modern {
        let meta = map
            .entry("_meta")
            .or_insert_with(|| Value::Object(JsonObject::new()));
        if let Value::Object(meta) = meta {
            stamp_server_info(meta, server);
        }
    }
    Reply::Value(Value::Object(map))
}

/// Names the server in a 2026-07-28 result's `_meta`, unless the handler
/// already did.
fn stamp_server_info(meta: &mut JsonObject, server: &Server) {
    meta.entry(SERVER_INFO_META)
        .or_insert_with(|| server.server_info());
}

pub(super) fn meta_of(params: &JsonObject) -> JsonObject {
    object_member(params, "_meta")
}

pub(super) fn object_member(params: &JsonObject, key: &str) -> JsonObject {
    member(params, key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The member `key` of `params`.
///
/// Params hold a handful of members, and comparing their names is cheaper
/// than hashing the one looked for (a map hashes with `SipHash`); a larger
/// object is looked up by hash.
pub(super) fn member<'a>(params: &'a JsonObject, key: &str) -> Option<&'a Value> {
    const LINEAR: usize = 8;
    if params.len() <= LINEAR {
        params
            .iter()
            .find_map(|(name, value)| (name == key).then_some(value))
    } else {
        params.get(key)
    }
}

pub(super) fn required_str<'a>(params: &'a JsonObject, key: &str) -> Result<&'a str, ErrorObject> {
    member(params, key).and_then(Value::as_str).ok_or_else(|| {
        error(
            ErrorCode::INVALID_PARAMS,
            format!("`{key}` must be a string"),
        )
    })
}

/// Lists are served as one page, so any cursor is one this server never
/// issued.
pub(super) fn reject_cursor(params: &JsonObject) -> Result<(), ErrorObject> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(error(ErrorCode::INVALID_PARAMS, "invalid cursor")),
    }
}

pub(super) fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, CallError> {
    serde_json::to_value(value).map_err(|e| CallError::internal(e.to_string()))
}

/// The error a request naming a primitive that does not exist gets, and so
/// also one naming a primitive the caller may not see (registered or
/// forwarded): one wording, so a refusal never tells the two apart.
fn unknown(method: &str, params: &JsonObject, peer: &PeerSession) -> ErrorObject {
    let text = |key: &str| params.get(key).and_then(Value::as_str).unwrap_or_default();
    match method {
        "tools/call" => error(
            ErrorCode::INVALID_PARAMS,
            format!("unknown tool {}", text("name")),
        ),
        "prompts/get" => error(
            ErrorCode::INVALID_PARAMS,
            format!("unknown prompt {}", text("name")),
        ),
        "resources/read" => {
            let code = if peer.allows(Feature::LegacyResourceNotFound) {
                ErrorCode::RESOURCE_NOT_FOUND
            } else {
                ErrorCode::INVALID_PARAMS
            };
            error(code, format!("resource not found: {}", text("uri")))
                .with_data(json!({ "uri": text("uri") }))
        }
        // As serve mode words it for a reference it cannot see.
        _ => {
            let target = params
                .get("ref")
                .and_then(|r| r.get("name").or_else(|| r.get("uri")))
                .and_then(Value::as_str)
                .unwrap_or_default();
            error(
                ErrorCode::INVALID_PARAMS,
                format!("nothing to complete for {target}"),
            )
        }
    }
}
