//! One prompt turn: the user's command, carried out against the session's
//! MCP servers and reported as `session/update`s.
//!
//! The turn is a future the caller may drop at any await (that is how
//! `session/cancel` stops it): every update is sent by awaiting it in
//! order, and the MCP request in flight is cancelled by being dropped.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use protocol_droid::adapters::primary::acp::{AcpPeerError, PermissionOutcome};
use protocol_droid::application::client::RequestOptions;
use serde_json::{Map, Value, json};

use super::command::{self, Command, HELP};
use super::mcp::{self, Connected, FoundTool};
use super::session::Session;
use crate::terminal::shown;

/// The longest command read, in bytes. Commands are short; a longer prompt
/// is a pasted document, which this agent has no use for.
pub(crate) const MAX_COMMAND_BYTES: usize = 1024 * 1024;

/// How a turn ended, as its `stopReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// `end_turn`.
    EndTurn,
    /// `cancelled`.
    Cancelled,
}

impl StopReason {
    /// The wire value.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The `toolCallId` of the tool call a turn has open, so that whoever
/// cancels the turn can close it.
pub(crate) type OpenCall = Arc<Mutex<Option<String>>>;

/// The permission options offered before a destructive call.
const ALLOW_ONCE: &str = "allow-once";
const ALLOW_ALWAYS: &str = "allow-always";
const REJECT_ONCE: &str = "reject-once";

/// Runs one turn.
///
/// # Errors
///
/// [`AcpPeerError`] when the client can no longer be told anything.
pub(crate) async fn run(
    session: &Session,
    prompt: &[Value],
    open_call: &OpenCall,
) -> Result<StopReason, AcpPeerError> {
    let mut text = String::new();
    for block in prompt {
        session.record(&json!({ "sessionUpdate": "user_message_chunk", "content": block }));
        if let Some(part) = block.get("text").and_then(Value::as_str) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(part);
        }
    }
    if text.len() > MAX_COMMAND_BYTES {
        session
            .say(format!(
                "The prompt is {} bytes long; a command is at most {MAX_COMMAND_BYTES}.",
                text.len()
            ))
            .await?;
        return Ok(StopReason::EndTurn);
    }
    let command = match command::parse(&text) {
        Ok(command) => command,
        Err(refusal) => {
            session.say(refusal.to_string()).await?;
            return Ok(StopReason::EndTurn);
        }
    };
    match command {
        Command::Help => session.say(HELP).await.map(|()| StopReason::EndTurn),
        Command::Servers => session
            .say(servers(session))
            .await
            .map(|()| StopReason::EndTurn),
        Command::Tools => list_tools(session).await.map(|()| StopReason::EndTurn),
        Command::Resources => list_resources(session).await.map(|()| StopReason::EndTurn),
        Command::Prompts => list_prompts(session).await.map(|()| StopReason::EndTurn),
        Command::Call { tool, arguments } => call(session, &tool, arguments, open_call).await,
        Command::Read { uri } => read(session, &uri).await.map(|()| StopReason::EndTurn),
        Command::Prompt { name, arguments } => get_prompt(session, &name, arguments)
            .await
            .map(|()| StopReason::EndTurn),
    }
}

fn servers(session: &Session) -> String {
    if session.servers.is_empty() && session.failed.is_empty() {
        return "This session has no MCP servers.".to_owned();
    }
    let mut text = String::new();
    for server in &session.servers {
        let state = server.client.server();
        let revision = state
            .as_ref()
            .map_or_else(|| "?".to_owned(), |s| s.version.to_string());
        let info = state
            .and_then(|s| s.server_info)
            .map(|i| format!(" ({} {})", shown(&i.name), shown(&i.version)))
            .unwrap_or_default();
        let closed = server
            .client
            .closed()
            .map(|why| format!(", closed: {}", shown(&why)))
            .unwrap_or_default();
        let _infallible = writeln!(
            text,
            "{}: connected at MCP {revision}{info}{closed}",
            server.name
        );
    }
    for failed in &session.failed {
        let _infallible = writeln!(text, "{}: not connected: {}", failed.name, failed.reason);
    }
    text
}

/// Adds a line to `text` saying `server` could not list `what`, in the
/// server's words, escaped: the error is the server's to word.
fn could_not_list(text: &mut String, server: &str, what: &str, error: &impl std::fmt::Display) {
    let why = error.to_string();
    let _infallible = writeln!(text, "{server}: could not list {what}: {}", shown(&why));
}

/// The first line of a description, for one-line listings, with what a
/// terminal or a renderer would obey escaped: the server chose it.
fn summary(description: Option<&str>) -> Cow<'_, str> {
    shown(description.and_then(|d| d.lines().next()).unwrap_or(""))
}

async fn list_tools(session: &Session) -> Result<(), AcpPeerError> {
    if session.servers.is_empty() {
        // Why none connected belongs in the answer itself: the report sent
        // after `session/new` may reach the client after this turn's reply.
        let mut text = String::from("This session has no connected MCP servers.\n");
        for failed in &session.failed {
            let _infallible = writeln!(text, "{}: not connected: {}", failed.name, failed.reason);
        }
        return session.say(text).await;
    }
    let mut text = String::new();
    for server in &session.servers {
        match server.tools(true).await {
            Ok(tools) => {
                for tool in tools.iter() {
                    let found = FoundTool {
                        server: Arc::clone(server),
                        tool: tool.clone(),
                    };
                    let asks = if found.destructive() {
                        " [asks first]"
                    } else {
                        ""
                    };
                    // The tool's name is the server's to choose: a line
                    // break in it must not write a line of its own.
                    let _infallible = writeln!(
                        text,
                        "{} - {}{asks}",
                        shown(&found.qualified()),
                        summary(tool.description.as_deref())
                    );
                }
            }
            Err(e) => {
                could_not_list(&mut text, &server.name, "tools", &e);
            }
        }
    }
    session.say(text).await
}

async fn list_resources(session: &Session) -> Result<(), AcpPeerError> {
    let mut text = String::new();
    for server in offering(session, "resources") {
        match server.client.list_all_resources().await {
            Ok(resources) => {
                for resource in resources {
                    let about = resource.description.as_deref().or(Some(&resource.name));
                    let _infallible = writeln!(
                        text,
                        "{} ({}) - {}",
                        shown(&resource.uri),
                        server.name,
                        summary(about)
                    );
                }
            }
            Err(e) => {
                could_not_list(&mut text, &server.name, "resources", &e);
            }
        }
    }
    if text.is_empty() {
        text.push_str("No server of this session lists resources.");
    }
    session.say(text).await
}

async fn list_prompts(session: &Session) -> Result<(), AcpPeerError> {
    let mut text = String::new();
    for server in offering(session, "prompts") {
        match server.client.list_all_prompts().await {
            Ok(prompts) => {
                for prompt in prompts {
                    let arguments: Vec<String> = prompt
                        .arguments
                        .iter()
                        .flatten()
                        .map(|a| shown(&a.name).into_owned())
                        .collect();
                    let arguments = if arguments.is_empty() {
                        String::new()
                    } else {
                        format!(" (arguments: {})", arguments.join(", "))
                    };
                    let _infallible = writeln!(
                        text,
                        "{}/{}{arguments} - {}",
                        server.name,
                        shown(&prompt.name),
                        summary(prompt.description.as_deref())
                    );
                }
            }
            Err(e) => {
                could_not_list(&mut text, &server.name, "prompts", &e);
            }
        }
    }
    if text.is_empty() {
        text.push_str("No server of this session offers prompts.");
    }
    session.say(text).await
}

fn offering<'a>(
    session: &'a Session,
    capability: &'a str,
) -> impl Iterator<Item = &'a Arc<Connected>> {
    session
        .servers
        .iter()
        .filter(move |server| server.offers(capability))
}

/// The tool call's `content`: each MCP content block as ACP `content`
/// (ACP's `ContentBlock` is MCP's, so blocks pass unchanged).
fn tool_content(blocks: &[Value]) -> Vec<Value> {
    blocks
        .iter()
        .map(|block| json!({ "type": "content", "content": block }))
        .collect()
}

fn text_content(text: &str) -> Vec<Value> {
    tool_content(&[json!({ "type": "text", "text": text })])
}

async fn call(
    session: &Session,
    name: &str,
    arguments: Option<Map<String, Value>>,
    open_call: &OpenCall,
) -> Result<StopReason, AcpPeerError> {
    let found = match mcp::find_tool(&session.servers, name).await {
        Ok(found) => found,
        Err(why) => {
            session.say(why).await?;
            return Ok(StopReason::EndTurn);
        }
    };
    let id = session.tool_call_id();
    // Shown to the user, and asked about: the tool's name is the server's.
    let title = shown(&found.qualified()).into_owned();
    let raw_input = Value::Object(arguments.clone().unwrap_or_default());
    session
        .emit(json!({
            "sessionUpdate": "tool_call",
            "toolCallId": id,
            "title": title,
            "kind": found.kind(),
            "status": "pending",
            "rawInput": raw_input,
        }))
        .await?;
    *open_call.lock().unwrap_or_else(PoisonError::into_inner) = Some(id.clone());
    if found.destructive() && !found.server.always_allowed(&found.tool.name) {
        let asked = session
            .sender()
            .request_permission(json!({
                "sessionId": session.id,
                "toolCall": {
                    "toolCallId": id,
                    "title": title,
                    "kind": found.kind(),
                    "status": "pending",
                    "rawInput": raw_input,
                },
                "options": [
                    { "optionId": ALLOW_ONCE, "name": "Allow", "kind": "allow_once" },
                    { "optionId": ALLOW_ALWAYS, "name": "Allow for this session", "kind": "allow_always" },
                    { "optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once" },
                ],
            }))
            .await;
        let refusal = match asked {
            Ok(PermissionOutcome::Selected { option_id }) if option_id == ALLOW_ONCE => None,
            Ok(PermissionOutcome::Selected { option_id }) if option_id == ALLOW_ALWAYS => {
                found.server.allow_always(&found.tool.name);
                None
            }
            Ok(PermissionOutcome::Selected { .. }) => Some((
                StopReason::EndTurn,
                "Not run: the call was rejected.".to_owned(),
            )),
            Ok(PermissionOutcome::Cancelled) => Some((
                StopReason::Cancelled,
                "Not run: the turn was cancelled.".to_owned(),
            )),
            Err(e) if e.is_closed() => return Err(e),
            Err(e) => Some((
                StopReason::EndTurn,
                format!("Not run: permission could not be asked: {e}"),
            )),
        };
        if let Some((stop, why)) = refusal {
            finish(session, open_call, &id, "failed", text_content(&why), None).await?;
            if stop == StopReason::EndTurn {
                session.say(format!("`{title}` was not called.")).await?;
            }
            return Ok(stop);
        }
    }
    session
        .emit(json!({ "sessionUpdate": "tool_call_update", "toolCallId": id, "status": "in_progress" }))
        .await?;
    let outcome = found
        .server
        .client
        .call_tool(&found.tool.name, arguments, &RequestOptions::default())
        .await;
    match outcome {
        Ok(reply) => {
            let failed = reply.raw.get("isError").and_then(Value::as_bool) == Some(true);
            let blocks = reply
                .raw
                .get("content")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let status = if failed { "failed" } else { "completed" };
            let structured = reply.raw.get("structuredContent").cloned();
            finish(
                session,
                open_call,
                &id,
                status,
                tool_content(blocks),
                structured,
            )
            .await?;
            let said = if failed {
                "reported an error"
            } else {
                "completed"
            };
            session.say(format!("`{title}` {said}.")).await?;
        }
        Err(e) => {
            // The server's words, shown as such.
            let e = e.to_string();
            let e = shown(&e);
            let why = format!("The call failed: {e}");
            finish(session, open_call, &id, "failed", text_content(&why), None).await?;
            session.say(format!("`{title}` failed: {e}")).await?;
        }
    }
    Ok(StopReason::EndTurn)
}

/// Closes the open tool call with its final status.
async fn finish(
    session: &Session,
    open_call: &OpenCall,
    id: &str,
    status: &str,
    content: Vec<Value>,
    raw_output: Option<Value>,
) -> Result<(), AcpPeerError> {
    let mut update = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": id,
        "status": status,
        "content": content,
    });
    if let (Some(raw), Some(map)) = (raw_output, update.as_object_mut()) {
        map.insert("rawOutput".to_owned(), raw);
    }
    // Cleared first: once the final update is on its way, a cancel must
    // not close the call a second time.
    open_call
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    session.emit(update).await
}

async fn read(session: &Session, uri: &str) -> Result<(), AcpPeerError> {
    let mut errors = String::new();
    for server in offering(session, "resources") {
        match server.client.read_resource(uri).await {
            Ok(reply) => {
                let contents = reply
                    .raw
                    .get("contents")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let mut text = String::new();
                for item in contents {
                    let at = item.get("uri").and_then(Value::as_str).unwrap_or(uri);
                    let mime = item
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("no type");
                    if let Some(body) = item.get("text").and_then(Value::as_str) {
                        let _infallible =
                            writeln!(text, "{at} ({mime}, from {}):\n{body}", server.name);
                    } else if let Some(blob) = item.get("blob").and_then(Value::as_str) {
                        let _infallible = writeln!(
                            text,
                            "{at} ({mime}, from {}): {} bytes of base64",
                            server.name,
                            blob.len()
                        );
                    }
                }
                if text.is_empty() {
                    text = format!("{uri} is empty.");
                }
                return session.say(text).await;
            }
            Err(e) => {
                let why = e.to_string();
                let _infallible = writeln!(errors, "{}: {}", server.name, shown(&why));
            }
        }
    }
    if errors.is_empty() {
        return session
            .say("No server of this session offers resources.")
            .await;
    }
    session
        .say(format!("No server could read {uri}:\n{errors}"))
        .await
}

async fn get_prompt(
    session: &Session,
    name: &str,
    arguments: Option<Map<String, Value>>,
) -> Result<(), AcpPeerError> {
    let mut candidates = Vec::new();
    for server in offering(session, "prompts") {
        let Ok(prompts) = server.client.list_all_prompts().await else {
            continue;
        };
        let qualified = name
            .strip_prefix(server.name.as_str())
            .and_then(|rest| rest.strip_prefix('/'));
        for prompt in prompts {
            if prompt.name == name || qualified == Some(prompt.name.as_str()) {
                candidates.push((Arc::clone(server), prompt.name));
            }
        }
    }
    // A qualified match wins over the same words read as a bare name; a
    // bare name several servers have stays ambiguous.
    let qualified =
        |(server, prompt): &(Arc<Connected>, String)| format!("{}/{prompt}", server.name) == name;
    if candidates.len() > 1 && candidates.iter().any(qualified) {
        candidates.retain(qualified);
    }
    let (server, prompt) = match candidates.len() {
        1 => match candidates.pop() {
            Some(found) => found,
            None => return Ok(()),
        },
        0 => {
            return session
                .say(format!("No prompt `{name}`. `prompts` lists them."))
                .await;
        }
        _ => {
            return session
                .say(format!(
                    "More than one server has the prompt `{name}`; name it SERVER/{name}."
                ))
                .await;
        }
    };
    match server.client.get_prompt(&prompt, arguments).await {
        Ok(reply) => {
            let messages = reply
                .raw
                .get("messages")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut text = String::new();
            for message in messages {
                let role = message.get("role").and_then(Value::as_str).unwrap_or("?");
                let content = message.get("content");
                let body = content
                    .and_then(|c| c.get("text").or_else(|| c.pointer("/resource/text")))
                    .and_then(Value::as_str)
                    .map_or_else(
                        || {
                            let kind = content
                                .and_then(|c| c.get("type"))
                                .and_then(Value::as_str)
                                .unwrap_or("unknown");
                            format!("[{kind} content]")
                        },
                        str::to_owned,
                    );
                let _infallible = writeln!(text, "{role}: {body}");
            }
            if text.is_empty() {
                text = format!("{name} has no messages.");
            }
            session.say(text).await
        }
        Err(e) => {
            let why = e.to_string();
            let (name, why) = (shown(name), shown(&why));
            session.say(format!("Getting `{name}` failed: {why}")).await
        }
    }
}
