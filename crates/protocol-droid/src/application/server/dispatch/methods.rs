//! The methods both eras share, and turning a handler's outcome into an
//! answer.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::application::server::call::{Call, CallError};
use crate::application::server::forward::FORWARDED;
use crate::application::server::host::ToolAccess;
use crate::application::server::rate::caller_key;
use crate::application::server::registry::{match_template, visible};
use crate::application::server::request_state::StateBinding;
use crate::application::server::scopes::Named;
use crate::application::server::{AuthContext, PeerSession, RequestContext};
use crate::domain::canonical::request_digest;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{Capability, Era, Refusal, Unknown};

use super::finish::write_tool_result;
use super::request::{ClientRequest, CompletionTarget, Listing};
use super::tasks::{forwarded_work, task_plan};
use super::{Connection, now_ms};
use crate::application::server::reply::Reply;
use crate::domain::ir::member;

impl Connection {
    /// The methods both eras share.
    pub(super) async fn common(
        &self,
        method: &str,
        request: ClientRequest,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        let version = peer.negotiated();
        let era = version.era();
        if self.server.forwarder().is_some_and(|f| f.serves(method))
            && (FORWARDED.contains(&method) || request == ClientRequest::Unmodelled)
        {
            return Box::pin(self.forwarded(method, &request, params, ctx, peer))
                .await
                .map(Reply::Value);
        }
        let registry = self.server.registry();
        let can_see = |scope: Option<&String>| visible(scope, |s| ctx.auth.has_scope(s));
        let answer = match &request {
            ClientRequest::List(listing) => {
                // Lists are served as one page, so any cursor is one this
                // server never issued.
                if member(&params, "cursor").is_some_and(|c| !c.is_null()) {
                    return Err(Refusal::invalid_params("invalid cursor").into());
                }
                Ok(self.list(*listing, &peer, &ctx.auth))
            }
            ClientRequest::CallTool { name } => {
                return self.call_tool(name, params, ctx, peer).await;
            }
            ClientRequest::GetPrompt { name } => {
                let entry = registry
                    .prompts
                    .get(name)
                    .filter(|p| can_see(p.scope.as_ref()))
                    .ok_or_else(|| request.unknown(version))?;
                let arguments = object_member(&params, "arguments");
                let auth = ctx.auth.clone();
                let remote = ctx.remote_addr;
                let call = Call::new(*ctx, peer, arguments);
                let result = (entry.handler)(call).await;
                self.outcome(
                    result.and_then(|r| to_value(&r)),
                    "prompts/get",
                    &params,
                    &auth,
                    remote,
                    era,
                )
            }
            ClientRequest::ReadResource { uri } => {
                let mut arguments = JsonObject::new();
                arguments.insert("uri".to_owned(), json!(uri));
                let found = match registry
                    .resources
                    .get(uri)
                    .filter(|r| can_see(r.scope.as_ref()))
                {
                    Some(entry) => Some(Arc::clone(&entry.handler)),
                    None => registry
                        .templates
                        .values()
                        .filter(|t| can_see(t.scope.as_ref()))
                        .find_map(|t| {
                            match_template(&t.template.uri_template, uri).map(|vars| {
                                arguments.extend(vars);
                                Arc::clone(&t.handler)
                            })
                        }),
                };
                // Never an empty `contents`: a missing resource is an error,
                // with the code the client's revision expects.
                let handler = found.ok_or_else(|| request.unknown(version))?;
                let auth = ctx.auth.clone();
                let remote = ctx.remote_addr;
                let call = Call::new(*ctx, peer, arguments);
                let result = handler(call)
                    .await
                    .and_then(|contents| Ok(json!({ "contents": to_value(&contents)? })));
                self.outcome(result, "resources/read", &params, &auth, remote, era)
            }
            ClientRequest::Complete(target) => {
                let Some(completer) = registry.completer.clone() else {
                    return Err(Refusal::method_not_found("completions are not offered").into());
                };
                // Completing an argument of something the caller cannot see
                // would tell them it exists.
                let visible_target = match target {
                    CompletionTarget::Prompt(name) => registry
                        .prompts
                        .get(name)
                        .is_some_and(|p| can_see(p.scope.as_ref())),
                    CompletionTarget::Resource(uri) => {
                        registry
                            .templates
                            .get(uri)
                            .is_some_and(|t| can_see(t.scope.as_ref()))
                            || self.can_read(uri, &ctx.auth)
                    }
                };
                if !visible_target {
                    return Err(request.unknown(version).into());
                }
                let mut values = completer(&params);
                let total = values.len();
                values.truncate(100);
                Ok(json!({ "completion": {
                    "values": values, "total": total, "hasMore": total > 100,
                } }))
            }
            _ => Err(Refusal::method_not_found(format!("{method} is not served here")).into()),
        };
        answer.map(Reply::Value)
    }

    /// One of the four lists, holding what `auth` may see.
    fn list(&self, listing: Listing, peer: &PeerSession, auth: &AuthContext) -> Value {
        let registry = self.server.registry();
        let can_see = |scope: Option<&String>| visible(scope, |s| auth.has_scope(s));
        // What a caller may see of one registry table, in its order.
        fn seen<'a, E: 'a, T: Clone + 'a>(
            entries: impl Iterator<Item = &'a E>,
            admits: impl Fn(&E) -> bool,
            item: impl Fn(&E) -> &T,
        ) -> Vec<T> {
            entries
                .filter(|e| admits(e))
                .map(|e| item(e).clone())
                .collect()
        }
        match listing {
            Listing::Tools => {
                let mut tools = seen(
                    registry.tools.values(),
                    |t| {
                        can_see(t.scope.as_ref())
                            && self.server.tool_access(peer, auth, &t.tool.name)
                                == ToolAccess::Granted
                    },
                    |t| &t.tool,
                );
                // `execution.taskSupport` is 2025-11-25's alone: 2026-07-28
                // servers decide per call, and earlier revisions have no
                // tasks.
                if !Capability::ServerTasks.exists_at(peer.negotiated()) {
                    for tool in &mut tools {
                        tool.execution = None;
                    }
                }
                json!({ "tools": tools })
            }
            Listing::Prompts => json!({ "prompts": seen(
                registry.prompts.values(),
                |p| can_see(p.scope.as_ref()),
                |p| &p.prompt,
            ) }),
            Listing::Resources => json!({ "resources": seen(
                registry.resources.values(),
                |r| can_see(r.scope.as_ref()),
                |r| &r.resource,
            ) }),
            Listing::ResourceTemplates => json!({ "resourceTemplates": seen(
                registry.templates.values(),
                |t| can_see(t.scope.as_ref()),
                |t| &t.template,
            ) }),
        }
    }

    /// `tools/call` of the tool `name`, whose arguments are in `params`.
    pub(super) async fn call_tool(
        &self,
        name: &str,
        mut params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Reply, ErrorObject> {
        let version = peer.negotiated();
        // A name the caller is not served is unknown, unless its upstream
        // (a gateway's) is down: then every name under it, listed or not,
        // hidden or not, is told of the outage, so a client does not take
        // a passing outage for the tool gone, and learns nothing more.
        let unknown =
            || self.not_served("tools/call", &params, Unknown::Tool(name.to_owned()).into());
        // Only the handler is taken: cloning the whole entry would copy the
        // tool's definition, input schema and all, on every call.
        let (handler, support, after_input) = self
            .server
            .registry()
            .tools
            .get(name)
            .filter(|t| visible(t.scope.as_ref(), |s| ctx.auth.has_scope(s)))
            .map(|t| (Arc::clone(&t.handler), t.task_support(), t.task_after_input))
            .ok_or_else(unknown)?;
        match self.server.tool_access(&peer, &ctx.auth, name) {
            ToolAccess::Granted => {}
            // Whoever hides it may know more in a moment (a gateway
            // instance not yet told of an activation made elsewhere).
            ToolAccess::Hidden => {
                if !Box::pin(self.server.tool_caught_up(&peer, &ctx.auth, name)).await {
                    return Err(unknown().into());
                }
            }
            ToolAccess::Refused(reason) => return Err(Refusal::invalid_params(reason).into()),
        }
        self.server.admit_tool(&ctx, name, true)?;
        let plan = task_plan(name, support, after_input, &params, &peer)?;
        // Only a 2026-07-28 outcome reads the params again (to seal an
        // input-required round); a legacy call's arguments are moved out.
        let arguments = match version.era() {
            Era::Legacy => match params.swap_remove("arguments") {
                Some(Value::Object(arguments)) => arguments,
                _ => JsonObject::new(),
            },
            Era::Modern => object_member(&params, "arguments"),
        };
        if let Some(plan) = plan {
            return Box::pin(self.call_tool_as_task(handler, plan, arguments, &params, ctx, peer))
                .await;
        }
        let auth = ctx.auth.clone();
        let remote = ctx.remote_addr;
        let call = Call::new(*ctx, peer, arguments);
        let result = handler(call)
            .await
            .and_then(|value| write_tool_result(&self.server, value, version));
        match result {
            Ok(written) => Ok(written),
            Err(e) => self
                .outcome(Err(e), "tools/call", &params, &auth, remote, version.era())
                .map(Reply::Value),
        }
    }

    /// What a caller is told of a name it is not served (hidden from it, or
    /// not there): the outage, when the forwarder's upstream for the name
    /// is down, so that the answer tells hidden from missing no more than
    /// when it is up; else `unknown`.
    fn not_served(&self, method: &str, params: &JsonObject, unknown: Refusal) -> Refusal {
        match self
            .server
            .forwarder()
            .and_then(|forward| forward.unavailable(method, params))
        {
            Some(why) => Refusal::internal(why),
            None => unknown,
        }
    }

    /// Hands a primitive to the server's [`Forward`](crate::application::server::Forward).
    ///
    /// Its callers box this future: it is as large as the rest of a call's
    /// state, and inline it would be moved with every call served here.
    async fn forwarded(
        &self,
        method: &str,
        request: &ClientRequest,
        params: JsonObject,
        ctx: Box<RequestContext>,
        peer: PeerSession,
    ) -> Result<Value, ErrorObject> {
        let Some(forward) = self.server.forwarder().map(Arc::clone) else {
            return Err(Refusal::internal("nothing to forward to").into());
        };
        let version = peer.negotiated();
        let scopes = self.server.forwarded_scopes();
        if let Some(named) = request.named() {
            if !scopes.admits(named, |s| ctx.auth.has_scope(s)) {
                // Hidden: answered as a name that is not there, which is
                // told of an outage of its upstream as well.
                return Err(self
                    .not_served(method, &params, request.unknown(version))
                    .into());
            }
            // A bridge's tools are its upstream's: counted as the server's
            // own would be, once the caller may call them at all.
            if let Named::Tool(tool) = named {
                let known = forward.knows_tool(tool);
                self.server.admit_tool(&ctx, tool, known)?;
                // A task is this server's own, whatever the upstream speaks:
                // the forwarded call is its work.
                let support = forward.task_support(tool).await;
                let follows = forward.task_follows_upstream();
                if let Some(plan) = task_plan(tool, support, follows, &params, &peer)? {
                    let call = Call::new(*ctx, peer, object_member(&params, "arguments")).tasked();
                    let auth = call.caller().clone();
                    let remote = call.ctx.remote_addr;
                    let work = forwarded_work(Arc::clone(&forward), params.clone(), call.clone());
                    return match self.run_task(plan, call, work).await {
                        Ok(reply) => Ok(reply.into_value()),
                        Err(e) => {
                            self.outcome(Err(e), method, &params, &auth, remote, version.era())
                        }
                    };
                }
            }
        }
        let auth = ctx.auth.clone();
        let remote = ctx.remote_addr;
        let call = Call::new(*ctx, peer, object_member(&params, "arguments"));
        let result = forward.forward(method, params.clone(), call).await;
        let mut answer = self.outcome(result, method, &params, &auth, remote, version.era())?;
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
        remote: Option<SocketAddr>,
        era: Era,
    ) -> Result<Value, ErrorObject> {
        match result {
            // A legacy client has no way to read an input-required round: a
            // handler asking through `Call` never produces one there, so one
            // built by hand is a handler bug, reported as such.
            Err(CallError::InputRequired(_)) if era == Era::Legacy => Err(Refusal::internal(
                "the handler asked for input in a form only 2026-07-28 clients can answer",
            )
            .into()),
            Ok(value) => Ok(value),
            Err(CallError::Protocol(object)) => Err(object),
            Err(CallError::MissingCapability { required }) => {
                Err(Refusal::MissingCapability { required }.into())
            }
            Err(CallError::InputRequired(asked)) => {
                let crate::application::server::call::InputRequired { requests, state } = *asked;
                let mut result = JsonObject::new();
                result.insert("resultType".to_owned(), json!("input_required"));
                result.insert("inputRequests".to_owned(), Value::Object(requests));
                if let Some(state) = state {
                    let digest = request_digest(params);
                    let binding = binding(method, params, auth, remote, digest);
                    // Sealed with the keys this round asks, so that a retry
                    // answering none of them spends no round.
                    let asked: Vec<&str> = match result.get("inputRequests") {
                        Some(Value::Object(requests)) => {
                            requests.keys().map(String::as_str).collect()
                        }
                        _ => Vec::new(),
                    };
                    let sealed = self
                        .server
                        .inner
                        .sealer
                        .read()
                        .map_err(|_| Refusal::internal("the state key is unavailable"))?
                        .seal_round(&state, &asked, &binding, now_ms())
                        .map_err(|e| Refusal::internal(e.to_string()))?;
                    result.insert("requestState".to_owned(), json!(sealed));
                }
                Ok(Value::Object(result))
            }
        }
    }
}

/// What a sealed state is bound to: the caller (its principal, or for an
/// anonymous one the network it calls from, so that another anonymous
/// client cannot answer its round), the method, its target and the
/// request's digest.
pub(super) fn binding(
    method: &str,
    params: &JsonObject,
    auth: &AuthContext,
    remote: Option<SocketAddr>,
    digest: crate::domain::canonical::RequestDigest,
) -> StateBinding {
    let target = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    StateBinding {
        principal: caller_key(auth, remote),
        method: method.to_owned(),
        target: target.to_owned(),
        digest,
    }
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

pub(super) fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, CallError> {
    serde_json::to_value(value).map_err(|e| CallError::internal(e.to_string()))
}
