//! `droid call`: one request to any MCP server, for a person at a terminal.
//!
//! The target is a URL, or a command line after `--` that is started as a
//! stdio server. The client probes the era and settles a revision as it
//! always does; `--revision` pins one. Output is readable by default (tool
//! names, text content) and the raw `result` with `--json`.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use protocol_droid::adapters::secondary::authorizer::{Authorizer, StaticToken};
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::adapters::secondary::http::HttpOptions;
use protocol_droid::adapters::secondary::tls::Trust;
use protocol_droid::application::client::{
    Client, ClientOptions, RequestOptions, TaskOptions, TaskUpdate,
};
use protocol_droid::domain::ProtocolVersion;
use serde_json::Value;
use tokio::signal::unix::{SignalKind, signal};

use crate::terminal::{shown, shown_json, shown_lines};

/// What `droid call` was asked.
#[derive(Debug)]
pub(crate) struct CallArgs {
    /// The URL, or the command line that starts a stdio server.
    pub(crate) target: Target,
    /// The method, e.g. `tools/list`.
    pub(crate) method: String,
    /// The params, as JSON text.
    pub(crate) params: Option<String>,
    /// Pins the client to one revision.
    pub(crate) revision: Option<String>,
    /// Prints the raw result.
    pub(crate) json: bool,
    /// A bearer token for an HTTP server.
    pub(crate) token: Option<String>,
    /// The certificate authorities an `https` server is checked against.
    pub(crate) trust: Trust,
    /// Runs a `tools/call` as a task, when the server runs tasks.
    pub(crate) task: bool,
}

/// Reads the positional arguments: `URL METHOD [PARAMS]`, or
/// `METHOD [PARAMS] -- COMMAND [ARGS...]`.
pub(crate) fn target_and_method(
    positional: Vec<String>,
    command: Vec<String>,
) -> anyhow::Result<(Target, String, Option<String>)> {
    let mut positional = positional.into_iter();
    if command.is_empty() {
        let url = positional.next().context("a target URL is required")?;
        let method = positional.next().context("a method is required")?;
        let params = positional.next();
        if positional.next().is_some() {
            bail!("too many arguments: URL METHOD [JSON_PARAMS]");
        }
        return Ok((Target::url(&url)?, method, params));
    }
    let method = positional.next().context("a method is required")?;
    let params = positional.next();
    if positional.next().is_some() {
        bail!("too many arguments: METHOD [JSON_PARAMS] -- COMMAND [ARGS...]");
    }
    Ok((Target::command(command)?, method, params))
}

/// Runs one call and prints its answer; the status of a task to `status`
/// as it changes.
pub(crate) async fn run(
    args: CallArgs,
    out: &mut impl Write,
    status: &mut impl Write,
) -> anyhow::Result<bool> {
    let params: Option<Value> = args
        .params
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .context("JSON_PARAMS is not JSON")?;
    let mut client = ClientOptions::default();
    if let Some(revision) = &args.revision {
        client.revisions = vec![revision.parse::<ProtocolVersion>().context("--revision")?];
    }
    let options = ConnectOptions {
        client,
        authorizer: args.token.map(|t| {
            let token: Arc<dyn Authorizer> = Arc::new(StaticToken::new(t));
            token
        }),
        http: HttpOptions {
            trust: args.trust,
            ..HttpOptions::default()
        },
    };
    // A stdio server leads a process group of its own, which a terminal's
    // signal no longer reaches: interrupted, the call ends it itself.
    let caught = |kind| signal(kind).context("catching SIGINT and SIGTERM");
    let mut interrupt = caught(SignalKind::interrupt())?;
    let mut terminate = caught(SignalKind::terminate())?;
    let interrupted = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    };
    tokio::pin!(interrupted);
    // Dropped unfinished, a connection kills the server it started.
    let client = tokio::select! {
        client = connect(&args.target, options) => {
            client.with_context(|| format!("connecting to {}", args.target))?
        }
        () = &mut interrupted => bail!("interrupted"),
    };
    let answer = if args.task && args.method == "tools/call" {
        as_task(&client, params, status, interrupted).await
    } else {
        let request = RequestOptions::default();
        tokio::select! {
            answer = client.request(&args.method, params, &request) => {
                answer.map_err(anyhow::Error::from)
            }
            () = &mut interrupted => Err(anyhow::anyhow!("interrupted")),
        }
    };
    // Printed before the connection closes: a server slow to end its
    // session holds the exit, not the answer.
    let version = client.version();
    let printed = answer
        .with_context(|| format!("{} failed", args.method))
        .and_then(|result| {
            if args.json {
                let written = serde_json::to_string_pretty(&result)?;
                writeln!(out, "{}", shown_json(&written))?;
            } else {
                if let Some(version) = version {
                    writeln!(out, "# {} at {version}", args.target)?;
                }
                print_readable(&args.method, &result, out)?;
            }
            // Shown as it came (above), then failed: a script must not take
            // a malformed answer for the tool's success.
            if args.method == "tools/call" && !is_tool_result(&result) {
                bail!("the answer to tools/call is not a tool result: it has no `content` list");
            }
            Ok(result.get("isError").and_then(Value::as_bool) != Some(true))
        });
    out.flush()?;
    client.close().await;
    printed
}

/// Calls a tool as a task, writing each change of its status to `status`;
/// interrupted (Ctrl-C), the task is cancelled before the call gives up.
async fn as_task(
    client: &Client,
    params: Option<Value>,
    status: &mut impl Write,
    mut interrupted: core::pin::Pin<&mut impl Future<Output = ()>>,
) -> anyhow::Result<Value> {
    let params = params
        .and_then(|p| p.as_object().cloned())
        .unwrap_or_default();
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .context("tools/call needs a `name`")?
        .to_owned();
    let arguments = params.get("arguments").and_then(Value::as_object).cloned();
    let (heard, mut updates) = tokio::sync::mpsc::unbounded_channel::<TaskUpdate>();
    let options = TaskOptions {
        on_status: Some(Arc::new(move |update: &TaskUpdate| {
            let _listening = heard.send(update.clone());
        })),
        ..TaskOptions::default()
    };
    let call = client.call_tool_as_task(&name, arguments, &options);
    tokio::pin!(call);
    let mut task = None;
    loop {
        tokio::select! {
            reply = &mut call => {
                // Whatever was heard before the end, in order.
                while let Ok(update) = updates.try_recv() {
                    say(status, &update)?;
                }
                return Ok(reply?.raw);
            }
            Some(update) = updates.recv() => {
                say(status, &update)?;
                task = Some(update.task_id);
            }
            () = &mut interrupted => {
                if let Some(id) = &task {
                    // The server named the task: shown escaped, as all it
                    // writes.
                    let named = shown(id);
                    client.cancel_task(id).await.with_context(|| format!("cancelling task {named}"))?;
                    writeln!(status, "task {named}: cancelled")?;
                }
                bail!("interrupted");
            }
        }
    }
}

/// One line of a task's status: its id and message as the server wrote
/// them, escaped where a terminal would obey them.
fn say(status: &mut impl Write, update: &TaskUpdate) -> std::io::Result<()> {
    let word = serde_json::to_value(update.status)
        .ok()
        .and_then(|s| s.as_str().map(str::to_owned))
        .unwrap_or_default();
    let id = shown(&update.task_id);
    match &update.message {
        Some(message) => writeln!(status, "task {id}: {word} ({})", shown(message)),
        None => writeln!(status, "task {id}: {word}"),
    }
}

/// Whether `result` has what every revision's `CallToolResult` requires: a
/// `content` list; or is a task made for the call, when the params asked
/// for one by hand (`--task` reads the task's result itself).
fn is_tool_result(result: &Value) -> bool {
    result.get("content").is_some_and(Value::is_array)
        || result.get("task").is_some_and(Value::is_object)
        || result.get("resultType").and_then(Value::as_str) == Some("task")
}

/// A person's view of common answers (what the server wrote escaped where
/// a terminal would obey it); anything else as indented JSON.
fn print_readable(method: &str, result: &Value, out: &mut impl Write) -> std::io::Result<()> {
    let list = |key: &str, id: &str| {
        result.get(key).and_then(Value::as_array).map(|items| {
            items
                .iter()
                .map(|item| {
                    let name = shown(item.get(id).and_then(Value::as_str).unwrap_or("?"));
                    let about = item
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .lines()
                        .next()
                        .unwrap_or("");
                    format!("{name:<32} {}", shown(about))
                })
                .collect::<Vec<_>>()
        })
    };
    let lines = match method {
        "tools/list" => list("tools", "name"),
        "prompts/list" => list("prompts", "name"),
        "resources/list" => list("resources", "uri"),
        "resources/templates/list" => list("resourceTemplates", "uriTemplate"),
        "tools/call" => result
            .get("content")
            .and_then(Value::as_array)
            .map(|blocks| {
                blocks
                    .iter()
                    .map(|block| match block.get("text").and_then(Value::as_str) {
                        Some(text) => shown_lines(text),
                        None => format!(
                            "[{} block]",
                            block
                                .get("type")
                                .and_then(Value::as_str)
                                .unwrap_or("unknown")
                        ),
                    })
                    .collect()
            }),
        _ => None,
    };
    match lines {
        Some(lines) => {
            for line in lines {
                writeln!(out, "{line}")?;
            }
        }
        None => writeln!(
            out,
            "{}",
            shown_json(&serde_json::to_string_pretty(result).unwrap_or_default())
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use protocol_droid::wire::tasks::TaskStatus;

    use super::*;

    /// A task's id and status message are the server's words: a terminal
    /// sequence in either is shown escaped, never obeyed.
    #[test]
    fn a_tasks_status_line_escapes_what_the_server_wrote() -> std::io::Result<()> {
        let update = TaskUpdate {
            task_id: "t\u{1b}]0;title\u{7}".to_owned(),
            status: TaskStatus::Working,
            message: Some("m\u{1b}[2J\u{202e}".to_owned()),
        };
        let mut line = Vec::new();
        say(&mut line, &update)?;
        let line = String::from_utf8_lossy(&line);
        assert!(!line.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{line:?}");
        assert!(
            line.starts_with(r"task t\u{1b}]0;title\u{7}: working (m\u{1b}[2J\u{202e})"),
            "{line:?}"
        );
        Ok(())
    }
}
