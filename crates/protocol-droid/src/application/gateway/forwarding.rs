//! Everything but tools, carried to the upstream that owns it: the gateway
//! as its server's [`Forward`] for prompts, resources, resource templates
//! and completions.
//!
//! Tools stay in the server's registry, where each session sees its own
//! set; the rest is the same for every session and lives upstream. Each
//! request goes through the owning upstream's bridge, on behalf of the
//! session that sent it, so whatever the bridge carries (the session's own
//! connection to a legacy upstream, input rounds, translation between
//! revisions) it carries here too. Names are the gateway's (`names`): a
//! request is routed by them and the upstream's own names are restored
//! before it goes up; what comes back is renamed on the way down.
//!
//! A list spans the upstreams in name order, one upstream page per page;
//! the cursor names the upstream and carries that upstream's own cursor, so
//! paging never lists an upstream twice and an upstream that joins or
//! leaves between pages moves nothing already paged past.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::names;
use super::state::{Disclosure, State, link_error, lock};
use super::upstream::Upstream;
use crate::application::bridge::Bridge;
use crate::application::observe::{SharedObserver, upstream_call};
use crate::application::server::{Call, CallError, Forward, SERVER_INFO_META, every_capability};
use crate::domain::ir::{ContentBlock, JsonObject, ResourceContents};
use crate::domain::jsonrpc::ErrorCode;
use crate::domain::{Capability, ProtocolVersion, Refusal, SessionId, Unknown};

/// The gateway's state, as its server's forwarder reads it, and what it
/// reports each upstream's answers to.
pub(super) struct Forwarding {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) observer: SharedObserver,
    /// How tools are disclosed: what a session's set is built with.
    pub(super) disclosure: Disclosure,
}

/// The list methods, each with the member its items are in and the
/// capability an upstream offers them under.
const LISTS: [(&str, &str, &str); 3] = [
    ("prompts/list", "prompts", "prompts"),
    ("resources/list", "resources", "resources"),
    ("resources/templates/list", "resourceTemplates", "resources"),
];

/// How many upstream pages one list request asks for before it answers
/// with what it has (an empty page, and where to go on): an upstream that
/// answers empty pages with a next cursor forever must not hold it.
const MAX_EMPTY_PAGES: usize = 16;

/// Where a list continues: an upstream, and its own cursor there.
#[derive(Debug, PartialEq, Eq)]
struct Position {
    upstream: String,
    cursor: Option<String>,
}

impl Position {
    fn encode(&self) -> String {
        let json = json!({ "u": self.upstream, "c": self.cursor });
        URL_SAFE_NO_PAD.encode(json.to_string())
    }

    fn decode(cursor: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
        let json: Value = serde_json::from_slice(&bytes).ok()?;
        let upstream = json.get("u")?.as_str()?.to_owned();
        let cursor = match json.get("c")? {
            Value::Null => None,
            Value::String(c) => Some(c.clone()),
            _ => return None,
        };
        Some(Self { upstream, cursor })
    }
}

/// One upstream a request can go to: its name, URI prefix and bridge.
struct Target {
    name: String,
    prefix: String,
    bridge: Bridge,
}

/// Why a request naming an upstream's item has nowhere to go.
enum Absent {
    /// No upstream of that name or prefix, or one that does not offer what
    /// is asked: the item is unknown.
    Unknown,
    /// The upstream is configured but not up now: said as a tool call to
    /// it is, so a client does not take a passing outage for the item gone.
    Unavailable(String),
}

impl Absent {
    /// The refusal: `unknown` for an item nobody has, else the outage.
    fn refusal(self, unknown: impl FnOnce() -> CallError) -> CallError {
        match self {
            Self::Unknown => unknown(),
            Self::Unavailable(why) => CallError::internal(why),
        }
    }
}

impl State {
    /// The upstream `name` as a target, if it is up and offers `capability`.
    fn target(&self, name: &str, capability: &str) -> Result<Target, Absent> {
        let u = self.upstreams.get(name).ok_or(Absent::Unknown)?;
        let bridge = u.usable(name).map_err(Absent::Unavailable)?;
        let upstream = bridge.upstream();
        let offers = serde_json::to_value(&upstream.capabilities)
            .ok()
            .is_some_and(|caps| caps.get(capability).is_some())
            // 2024-11-05 had completions but no capability saying so.
            || (capability == "completions" && !Capability::Completions.exists_at(upstream.version));
        if !offers {
            return Err(Absent::Unknown);
        }
        Ok(Target {
            name: name.to_owned(),
            prefix: u.prefix.clone(),
            bridge,
        })
    }

    /// The upstreams that are up and offer `capability`, in name order,
    /// from `from` on (inclusive).
    fn targets(&self, capability: &str, from: Option<&str>) -> Vec<Target> {
        self.upstreams
            .keys()
            .filter(|name| from.is_none_or(|from| name.as_str() >= from))
            .filter_map(|name| self.target(name, capability).ok())
            .collect()
    }

    /// The upstream whose URIs carry `prefix`, if it is up and offers
    /// `capability`.
    fn target_prefixed(&self, prefix: &str, capability: &str) -> Result<Target, Absent> {
        let (name, _) = self
            .upstreams
            .iter()
            .find(|(_, u)| u.prefix == prefix)
            .ok_or(Absent::Unknown)?;
        self.target(name, capability)
    }
}

impl Forwarding {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Forwards `method` with `params` to `target` for `call`, reporting
    /// how it went.
    async fn upstream(
        &self,
        target: &Target,
        method: &str,
        params: JsonObject,
        call: &Call,
    ) -> Result<Value, CallError> {
        // Boxed: carried inline, the bridge's future would be held twice
        // over in this one, and copied whole at every move.
        let forwarded = Box::pin(target.bridge.forward_call(method, params, call));
        let mut answer = upstream_call(&*self.observer, &target.name, method, forwarded).await?;
        if let Value::Object(result) = &mut answer {
            let emptied = match result.get_mut("_meta") {
                Some(Value::Object(meta)) => unname_upstream(meta),
                _ => false,
            };
            if emptied {
                result.shift_remove("_meta");
            }
        }
        Ok(answer)
    }

    async fn list(&self, method: &str, params: JsonObject, call: Call) -> Result<Value, CallError> {
        let Some(&(_, member, capability)) = LISTS.iter().find(|(m, _, _)| *m == method) else {
            return Err(Refusal::method_not_found(method.to_owned()).into());
        };
        let position = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(
                Position::decode(cursor)
                    .ok_or_else(|| CallError::invalid_params("invalid cursor"))?,
            ),
            Some(_) => return Err(CallError::invalid_params("the cursor must be a string")),
        };
        let targets = self
            .state()
            .targets(capability, position.as_ref().map(|p| p.upstream.as_str()));
        // An upstream that left since the cursor was issued: the list goes
        // on with the next one, from its start.
        let mut cursor = position
            .filter(|p| targets.first().is_some_and(|t| t.name == p.upstream))
            .and_then(|p| p.cursor);
        let mut items = Vec::new();
        let mut next = None;
        let mut at = 0;
        let mut pages = 0;
        // Pages on past upstream pages with nothing on them, so a session
        // is not handed empty pages, but only so far.
        while items.is_empty() && pages < MAX_EMPTY_PAGES {
            let Some(target) = targets.get(at) else {
                break;
            };
            pages += 1;
            let mut page = JsonObject::new();
            if let Some(cursor) = cursor.take() {
                page.insert("cursor".to_owned(), Value::String(cursor));
            }
            match self.upstream(target, method, page, &call).await {
                Ok(listed) => {
                    for mut item in listed
                        .get(member)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                    {
                        rename_item(member, target, &mut item);
                        items.push(item);
                    }
                    cursor = listed
                        .get("nextCursor")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                // One upstream failing its list leaves the others' items
                // listed; the operator reads why.
                Err(error) => {
                    tracing::warn!(upstream = %target.name, method, ?error, "an upstream list failed");
                    cursor = None;
                }
            }
            if cursor.is_none() {
                at += 1;
            }
            next = targets.get(at).map(|t| Position {
                upstream: t.name.clone(),
                cursor: cursor.clone(),
            });
        }
        let mut result = JsonObject::new();
        result.insert(member.to_owned(), Value::Array(items));
        if let Some(next) = next {
            result.insert("nextCursor".to_owned(), Value::String(next.encode()));
        }
        Ok(Value::Object(result))
    }

    async fn get_prompt(&self, mut params: JsonObject, call: Call) -> Result<Value, CallError> {
        let outer = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let unknown = || CallError::from(Refusal::from(Unknown::Prompt(outer.clone())));
        let (_, inner) = names::split_name(&outer).ok_or_else(unknown)?;
        let target = self
            .owner("prompts/get", &params)
            .map_err(|absent| absent.refusal(unknown))?;
        params.insert("name".to_owned(), Value::String(inner.to_owned()));
        let mut result = match self.upstream(&target, "prompts/get", params, &call).await {
            Ok(result) => result,
            Err(refused)
                if self
                    .none_there(&refused, &target, &[&PROMPTS], inner, &call)
                    .await =>
            {
                return Err(unknown());
            }
            Err(e) => return Err(link_error(&target.name, e)),
        };
        if let Some(messages) = result.get_mut("messages").and_then(Value::as_array_mut) {
            for message in messages {
                if let Some(content) = message.get_mut("content") {
                    rename_content(&target.prefix, content);
                }
            }
        }
        Ok(result)
    }

    async fn read(&self, mut params: JsonObject, call: Call) -> Result<Value, CallError> {
        let outer = params
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let at = call.peer().negotiated();
        let unknown = || {
            CallError::from(Refusal::from(Unknown::Resource {
                uri: outer.clone(),
                at,
            }))
        };
        let (_, inner) = names::split_uri(&outer).ok_or_else(unknown)?;
        let target = self
            .owner("resources/read", &params)
            .map_err(|absent| absent.refusal(unknown))?;
        params.insert("uri".to_owned(), Value::String(inner.to_owned()));
        let mut result = self
            .upstream(&target, "resources/read", params, &call)
            .await
            .map_err(|e| match e {
                // The upstream's "not found" names its own URI, and its code
                // follows the revision the gateway speaks to it: the client
                // hears of the URI it asked for, at its own revision's code,
                // as when no upstream has the prefix. Both codes are taken,
                // a legacy upstream's and a 2026-07-28 one's (whose only
                // params here are the URI the gateway wrote).
                CallError::Protocol(error)
                    if [ErrorCode::RESOURCE_NOT_FOUND, ErrorCode::INVALID_PARAMS]
                        .contains(&error.code) =>
                {
                    unknown()
                }
                other => link_error(&target.name, other),
            })?;
        if let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) {
            for content in contents {
                rename_uri(&target.prefix, content, "uri");
            }
        }
        Ok(result)
    }

    async fn complete(&self, mut params: JsonObject, call: Call) -> Result<Value, CallError> {
        let owner = self.owner("completion/complete", &params);
        let Some(Value::Object(reference)) = params.get_mut("ref") else {
            return Err(CallError::invalid_params("completion/complete needs a ref"));
        };
        // A prompt is completed by its name, a template by its URI; either
        // names its upstream the way the gateway listed it.
        let key = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => "name",
            Some("ref/resource") => "uri",
            _ => return Err(CallError::invalid_params("unknown completion ref type")),
        };
        let outer = reference
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let split = if key == "name" {
            names::split_name(outer)
        } else {
            names::split_uri(outer)
        };
        // The owner was found by the same split: a name it cannot split
        // has none.
        let (target, inner) = owner
            .and_then(|target| Ok((target, split.ok_or(Absent::Unknown)?.1)))
            .map_err(|absent| absent.refusal(|| nothing_to_complete(outer)))?;
        let (outer, inner) = (outer.to_owned(), inner.to_owned());
        reference.insert(key.to_owned(), Value::String(inner.clone()));
        let lists: &[&Listing] = if key == "name" {
            &[&PROMPTS]
        } else {
            &[&TEMPLATES, &RESOURCES]
        };
        match self
            .upstream(&target, "completion/complete", params, &call)
            .await
        {
            Ok(result) => Ok(result),
            Err(refused)
                if self
                    .none_there(&refused, &target, lists, &inner, &call)
                    .await =>
            {
                Err(nothing_to_complete(&outer))
            }
            Err(e) => Err(link_error(&target.name, e)),
        }
    }

    /// Whether `refused`, the upstream's answer to a request naming `inner`,
    /// means there is no such item: a `-32602` while none of `listings` of
    /// that upstream lists `inner`. Then the client is told in the
    /// gateway's words, under its name for the item, which is also what a
    /// caller who may not see an item is told: the upstream's own words
    /// (its name for the item) would tell the two apart.
    async fn none_there(
        &self,
        refused: &CallError,
        target: &Target,
        listings: &[&Listing],
        inner: &str,
        call: &Call,
    ) -> bool {
        if !matches!(refused, CallError::Protocol(e) if e.code == ErrorCode::INVALID_PARAMS) {
            return false;
        }
        for listing in listings {
            if self.listed(target, listing, inner, call).await {
                return false;
            }
        }
        true
    }

    /// Whether `target` lists `inner` in `listing`, page after page (at most
    /// [`LISTED_PAGES`]). A list that fails, or runs longer, says nothing
    /// either way and counts as listed, so the upstream's refusal stands.
    async fn listed(&self, target: &Target, listing: &Listing, inner: &str, call: &Call) -> bool {
        let mut cursor: Option<String> = None;
        for _ in 0..LISTED_PAGES {
            let mut params = JsonObject::new();
            if let Some(cursor) = cursor.take() {
                params.insert("cursor".to_owned(), Value::String(cursor));
            }
            let Ok(page) = self.upstream(target, listing.method, params, call).await else {
                return true;
            };
            let items = page.get(listing.member).and_then(Value::as_array);
            if items.is_some_and(|items| {
                items
                    .iter()
                    .any(|item| item.get(listing.key).and_then(Value::as_str) == Some(inner))
            }) {
                return true;
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return false,
            }
        }
        true
    }
}

/// A list an upstream answers, and where an item's name is in it.
struct Listing {
    method: &'static str,
    member: &'static str,
    key: &'static str,
}

const PROMPTS: Listing = Listing {
    method: "prompts/list",
    member: "prompts",
    key: "name",
};

const TEMPLATES: Listing = Listing {
    method: "resources/templates/list",
    member: "resourceTemplates",
    key: "uriTemplate",
};

const RESOURCES: Listing = Listing {
    method: "resources/list",
    member: "resources",
    key: "uri",
};

/// How many pages of an upstream's list are read to learn whether it has an
/// item: enough for any real server, and a bound on one refusal's cost.
const LISTED_PAGES: usize = 20;

fn nothing_to_complete(outer: &str) -> CallError {
    Refusal::from(Unknown::CompletionTarget(outer.to_owned())).into()
}

/// Gives a listed item the gateway's name for it.
fn rename_item(member: &str, target: &Target, item: &mut Value) {
    match member {
        "prompts" => {
            if let Some(Value::String(name)) = item.get_mut("name") {
                *name = names::outer_name(&target.name, name);
            }
        }
        "resources" => rename_uri(&target.prefix, item, "uri"),
        _ => rename_uri(&target.prefix, item, "uriTemplate"),
    }
}

/// Prefixes the URI in `object`'s member `key`.
fn rename_uri(prefix: &str, object: &mut Value, key: &str) {
    if let Some(Value::String(uri)) = object.get_mut(key) {
        *uri = names::outer_uri(prefix, uri);
    }
}

/// Gives the resources a content block (or an array of them) refers to
/// the gateway's URIs, so a client can read what it was pointed at.
pub(super) fn rename_content(prefix: &str, content: &mut Value) {
    match content {
        Value::Array(blocks) => {
            for block in blocks {
                rename_content(prefix, block);
            }
        }
        Value::Object(block) => match block.get("type").and_then(Value::as_str) {
            Some("resource_link") => {
                if let Some(Value::String(uri)) = block.get_mut("uri") {
                    *uri = names::outer_uri(prefix, uri);
                }
            }
            Some("resource") => {
                if let Some(resource) = block.get_mut("resource") {
                    rename_uri(prefix, resource, "uri");
                }
            }
            _ => {}
        },
        _ => {}
    }
}

/// Takes the upstream's name for itself out of a result's `_meta`: the
/// server answering the session is the gateway, which names itself there
/// for a 2026-07-28 client, and a legacy client is told no server's.
/// Whether `_meta` is left empty by it, and so is better gone.
pub(super) fn unname_upstream(meta: &mut JsonObject) -> bool {
    meta.shift_remove(SERVER_INFO_META).is_some() && meta.is_empty()
}

/// [`rename_content`] for a tool result's blocks read into the model.
pub(super) fn rename_blocks(prefix: &str, blocks: &mut [ContentBlock]) {
    for block in blocks {
        match block {
            ContentBlock::ResourceLink(link) => link.uri = names::outer_uri(prefix, &link.uri),
            ContentBlock::Resource(embedded) => match &mut embedded.resource {
                ResourceContents::Text { uri, .. } | ResourceContents::Blob { uri, .. } => {
                    *uri = names::outer_uri(prefix, uri);
                }
            },
            _ => {}
        }
    }
}

impl Forwarding {
    /// The upstream of the item `method` with `params` names, as a target,
    /// or why there is none: the one routing of `prompts/get`,
    /// `resources/read` and `completion/complete`, which the outage answer
    /// for a hidden or unlisted item (a tool too) follows as well.
    fn owner(&self, method: &str, params: &JsonObject) -> Result<Target, Absent> {
        let text = |object: &JsonObject, key: &str| {
            object.get(key).and_then(Value::as_str).map(str::to_owned)
        };
        let by_name = |name: Option<String>, capability: &str| {
            let name = name.ok_or(Absent::Unknown)?;
            let (upstream, _) = names::split_name(&name).ok_or(Absent::Unknown)?;
            self.state().target(upstream, capability)
        };
        let by_uri = |uri: Option<String>, capability: &str| {
            let uri = uri.ok_or(Absent::Unknown)?;
            let (prefix, _) = names::split_uri(&uri).ok_or(Absent::Unknown)?;
            self.state().target_prefixed(prefix, capability)
        };
        match method {
            // Only asked of names the registry does not serve the caller
            // (a tool's call goes through the registry, not here).
            "tools/call" => by_name(text(params, "name"), "tools"),
            "prompts/get" => by_name(text(params, "name"), "prompts"),
            "resources/read" => by_uri(text(params, "uri"), "resources"),
            "completion/complete" => {
                let Some(Value::Object(reference)) = params.get("ref") else {
                    return Err(Absent::Unknown);
                };
                match reference.get("type").and_then(Value::as_str) {
                    Some("ref/prompt") => by_name(text(reference, "name"), "completions"),
                    Some("ref/resource") => by_uri(text(reference, "uri"), "completions"),
                    _ => Err(Absent::Unknown),
                }
            }
            _ => Err(Absent::Unknown),
        }
    }
}

impl Forward for Forwarding {
    fn unavailable(&self, method: &str, params: &JsonObject) -> Option<String> {
        match self.owner(method, params) {
            Err(Absent::Unavailable(why)) => Some(why),
            _ => None,
        }
    }

    fn serves(&self, method: &str) -> bool {
        // Tools are the registry's: each session sees its own set.
        !method.starts_with("tools/")
    }

    fn forward<'a>(
        &'a self,
        method: &'a str,
        params: JsonObject,
        call: Call,
    ) -> BoxFuture<'a, Result<Value, CallError>> {
        Box::pin(async move {
            match method {
                "prompts/get" => self.get_prompt(params, call).await,
                "resources/read" => self.read(params, call).await,
                "completion/complete" => self.complete(params, call).await,
                _ if LISTS.iter().any(|(m, _, _)| *m == method) => {
                    self.list(method, params, call).await
                }
                // An extension's method: no upstream can be told apart as
                // the one to answer it.
                _ => Err(Refusal::method_not_found(format!(
                    "{method} is not a method of {} that this gateway can route",
                    call.peer.negotiated()
                ))
                .into()),
            }
        })
    }

    fn capabilities(&self, version: ProtocolVersion) -> Option<JsonObject> {
        // Upstreams come and go while sessions last, so every list the
        // gateway can carry is declared, changing as they do.
        Some(every_capability(version, true))
    }

    fn subscription(&self, session: SessionId, uri: &str, subscribed: bool) {
        let Some((prefix, inner)) = names::split_uri(uri) else {
            return;
        };
        // Recorded and passed on under one lock, so a bridge that comes up
        // meanwhile is told either here or by its replay, never by both or
        // neither; an upstream that is down now is told when it is back.
        let mut state = self.state();
        state.watches.listen(session, uri, subscribed);
        if let Ok(target) = state.target_prefixed(prefix, "resources") {
            target.bridge.watch(session, inner, subscribed);
        }
    }

    fn session_subscription(
        &self,
        session: SessionId,
        declared: &JsonObject,
        uri: &str,
        subscribed: bool,
    ) {
        let Some((prefix, inner)) = names::split_uri(uri) else {
            return;
        };
        // As above: one lock, so the session's end, a replay and this are
        // seen by the bridge in the order they happened.
        let mut state = self.state();
        state
            .watches
            .subscription(session, declared, uri, subscribed);
        if let Ok(target) = state.target_prefixed(prefix, "resources") {
            target
                .bridge
                .watch_for_session(session, declared, inner, subscribed);
        }
    }

    fn watches_for_session(&self, session: SessionId, uri: &str) -> bool {
        let Some((prefix, inner)) = names::split_uri(uri) else {
            return false;
        };
        // The upstream's bridge alone, let go of the gateway's lock before
        // it is asked: this runs for every session at every update.
        let bridge = self
            .state()
            .upstreams
            .values()
            .find(|u| u.prefix == prefix)
            .and_then(|u| u.current_bridge().cloned());
        bridge.is_some_and(|bridge| bridge.watches_for_session(session, inner))
    }

    fn session_shared(&self, session: SessionId, name: &str) {
        self.state().hold_shared(session, name, self.disclosure);
    }

    fn session_closed(&self, session: SessionId) {
        let mut state = self.state();
        state.forget_session(session);
        for bridge in state.upstreams.values().flat_map(Upstream::bridges) {
            bridge.end_session(session);
        }
    }

    fn roots_changed(&self, session: SessionId) {
        let state = self.state();
        for bridge in state.upstreams.values().flat_map(Upstream::bridges) {
            bridge.roots_changed(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let position = Position {
            upstream: "everything".to_owned(),
            cursor: Some("abc".to_owned()),
        };
        assert_eq!(Position::decode(&position.encode()), Some(position));
        let start = Position {
            upstream: "b".to_owned(),
            cursor: None,
        };
        assert_eq!(Position::decode(&start.encode()), Some(start));
        assert_eq!(Position::decode("not a cursor"), None);
        let wrong = URL_SAFE_NO_PAD.encode(r#"{"u":"a","c":7}"#);
        assert_eq!(Position::decode(&wrong), None);
    }

    #[test]
    fn content_pointing_at_resources_gets_the_gateway_uris() -> Result<(), serde_json::Error> {
        let original = json!([
            {"type": "text", "text": "see"},
            {"type": "resource_link", "uri": "test://a", "name": "a"},
            {"type": "resource", "resource": {"uri": "test://b", "text": "b"}},
            {"type": "resource", "resource": {"uri": "test://c", "blob": "Yw=="}},
        ]);
        let renamed = json!([
            {"type": "text", "text": "see"},
            {"type": "resource_link", "uri": "everything+test://a", "name": "a"},
            {"type": "resource", "resource": {"uri": "everything+test://b", "text": "b"}},
            {"type": "resource", "resource": {"uri": "everything+test://c", "blob": "Yw=="}},
        ]);
        let mut content = original.clone();
        rename_content("everything", &mut content);
        assert_eq!(content, renamed);
        // Read into the model, a tool result's blocks are renamed alike.
        let mut blocks: Vec<ContentBlock> = serde_json::from_value(original)?;
        rename_blocks("everything", &mut blocks);
        assert_eq!(serde_json::to_value(&blocks)?, renamed);
        Ok(())
    }
}
