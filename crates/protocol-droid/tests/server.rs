//! The server runtime over stdio, driven as a client would drive it.
//!
//! Each test runs a small server on an in-memory pipe and speaks
//! newline-delimited JSON-RPC to it. Timeouts here only stop a broken test
//! from hanging; nothing asserts how long anything took.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use protocol_droid::adapters::primary::stdio::{self, StdioOptions};
use protocol_droid::application::server::{
    AuthClaims, AuthContext, NoExchange, NullSink, RequestContext,
};
use protocol_droid::application::server::{Call, CallError, Server, ToolSpec};
use protocol_droid::domain::ir::{ResourceContents, ToolResult};
use protocol_droid::domain::jsonrpc::{Request, RequestId};
use protocol_droid::domain::{LoggingLevel, TransportKind};
use protocol_droid::wire::prompts::Prompt;
use protocol_droid::wire::resources::{Resource, ResourceTemplate};
use protocol_droid_test_support::LineClient;
use serde_json::{Value, json};
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::Notify;

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::{MODERN, TestError, add_ask_tool, add_sampler_tool};

/// A test server: a few tools whose behaviour the tests observe.
fn server(calls: &Arc<AtomicUsize>, gate: &Arc<Notify>) -> Result<Server, TestError> {
    let server = Server::builder("test-server", "1.0.0").build()?;
    server.add_tool(
        ToolSpec::new("echo", "Echoes its text argument."),
        |call: Call| async move {
            Ok(ToolResult::text(
                call.arg_str("text").unwrap_or_default().to_owned(),
            ))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "restated",
            "Restates modelled members among its extra ones.",
        ),
        |_| async {
            let mut result = ToolResult::text("typed");
            result.is_error = Some(false);
            result.meta = Some(
                json!({ "typed": true })
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
            result.extra.insert("isError".to_owned(), json!(true));
            result
                .extra
                .insert("_meta".to_owned(), json!({ "note": "from extra" }));
            Ok(result)
        },
    );
    let counter = Arc::clone(calls);
    server.add_tool(ToolSpec::new("count", "Counts its calls."), move |_| {
        let counter = Arc::clone(&counter);
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(ToolResult::text(format!("call {n}")))
        }
    });
    let gate = Arc::clone(gate);
    server.add_tool(ToolSpec::new("wait", "Answers once released."), move |_| {
        let gate = Arc::clone(&gate);
        async move {
            gate.notified().await;
            Ok(ToolResult::text("released"))
        }
    });
    add_ask_tool(&server, "Who are you?");
    server.add_tool(
        ToolSpec::new("stateful", "Keeps state across rounds."),
        |call: Call| async move {
            if call.state().is_none() {
                call.keep_state(json!({ "secret": "kept" }));
            }
            let form = json!({ "message": "Go?",
                "requestedSchema": { "type": "object", "properties": {} } });
            let _answer = call.elicit("go", form).await?;
            let kept = call
                .state()
                .and_then(|s| s.get("secret").cloned())
                .unwrap_or(Value::Null);
            Ok(ToolResult::text(format!("state {kept}")))
        },
    );
    server.add_tool(
        ToolSpec::new("two_steps", "Asks `go`, then `again`, one round each."),
        |call: Call| async move {
            let form = json!({ "message": "Go?",
                "requestedSchema": { "type": "object", "properties": {} } });
            call.keep_state(json!({ "step": 1 }));
            let first = call.elicit("go", form.clone()).await?;
            let second = call.elicit("again", form).await?;
            Ok(ToolResult::text(format!(
                "{} then {}",
                first["action"], second["action"]
            )))
        },
    );
    server.add_tool(
        ToolSpec::new("chatty", "Logs at info."),
        |call: Call| async move {
            call.log(LoggingLevel::Info, json!("working"));
            Ok(ToolResult::text("done"))
        },
    );
    server.add_tool(
        ToolSpec::new("whoami", "Reports the request's era fields."),
        |call: Call| async move {
            let ctx = &call.ctx;
            Ok(ToolResult::text(
                json!({
                    "version": ctx.protocol_version.map(|v| v.as_str()),
                    "client": ctx.client_info.as_ref().and_then(|c| c.get("name")).cloned(),
                    "initMeta": *ctx.init_meta,
                    "logLevel": ctx.log_level,
                    "caps": *ctx.client_capabilities,
                    "session": call.peer.session().get(),
                })
                .to_string(),
            ))
        },
    );
    add_sampler_tool(&server);
    server.add_tool(ToolSpec::new("boom", "Panics."), |_| async { explode() });
    server.add_tool(ToolSpec::new("relay", "Three rounds; state kept in the first only."), |call: Call| async move {
        if call.state().is_none() {
            call.keep_state(json!({ "origin": "round one" }));
        }
        let form = json!({ "message": "?", "requestedSchema": { "type": "object", "properties": {} } });
        let answered = |key: &str| call.ctx.input_responses.contains_key(key);
        if answered("b") {
            let origin = call.state().and_then(|s| s.get("origin").cloned()).unwrap_or(Value::Null);
            return Ok(ToolResult::text(format!("origin {origin}")));
        }
        let key = if answered("a") { "b" } else { "a" };
        call.elicit(key, form).await?;
        Ok(ToolResult::text("unreachable in 2026-07-28"))
    });
    server.add_tool(
        ToolSpec::new("progress", "Reports progress."),
        |call: Call| async move {
            call.progress(1.0, Some(2.0), Some("half"));
            call.progress(2.0, Some(2.0), None);
            Ok(ToolResult::text("done"))
        },
    );
    let failures = Arc::clone(calls);
    server.add_tool(
        ToolSpec::new("refuse", "Counts, then refuses its arguments."),
        move |_| {
            let failures = Arc::clone(&failures);
            async move {
                failures.fetch_add(1, Ordering::SeqCst);
                Err(CallError::invalid_params("these arguments are refused"))
            }
        },
    );
    let resource = |uri: &str| -> Result<Resource, TestError> {
        Ok(serde_json::from_value(
            json!({ "uri": uri, "name": uri, "mimeType": "text/plain" }),
        )?)
    };
    server.add_resource(resource("test://doc")?, None, |call: Call| async move {
        let uri = call.arg_str("uri").unwrap_or_default().to_owned();
        contents(&uri, "public text")
    });
    server.add_resource(
        resource("secret://doc")?,
        Some("admin".to_owned()),
        |_| async { contents("secret://doc", "secret text") },
    );
    let template: ResourceTemplate =
        serde_json::from_value(json!({ "uriTemplate": "test://t/{id}", "name": "t" }))?;
    server.add_template(template, None, |call: Call| async move {
        let uri = call.arg_str("uri").unwrap_or_default().to_owned();
        let id = call.arg_str("id").unwrap_or_default().to_owned();
        contents(&uri, &format!("item {id}"))
    });
    let prompt = |name: &str| -> Result<Prompt, TestError> {
        Ok(serde_json::from_value(
            json!({ "name": name, "description": "d",
            "arguments": [{ "name": "who", "required": true }] }),
        )?)
    };
    server.add_prompt(prompt("greet")?, None, |call: Call| async move {
        let who = call.arg_str("who").unwrap_or_default().to_owned();
        serde_json::from_value(json!({ "messages": [{ "role": "user",
            "content": { "type": "text", "text": format!("hello {who}") } }] }))
        .map_err(|e| CallError::internal(e.to_string()))
    });
    server.add_prompt(prompt("vault")?, Some("admin".to_owned()), |_| async {
        serde_json::from_value(json!({ "messages": [] }))
            .map_err(|e| CallError::internal(e.to_string()))
    });
    server.set_completer(|params| {
        let prefix = params["argument"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ["alice", "bob", "alfred"]
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .map(str::to_owned)
            .collect()
    });
    server.add_tool(
        ToolSpec::new("admin", "Needs a scope.").scope("admin"),
        |_| async { Ok(ToolResult::text("secret")) },
    );
    Ok(server)
}

/// A handler that panics, as a buggy one would.
#[allow(clippy::panic)] // The panic is the point.
fn explode() -> Result<ToolResult, CallError> {
    panic!("this handler panics on purpose")
}

fn contents(uri: &str, text: &str) -> Result<Vec<ResourceContents>, CallError> {
    serde_json::from_value(json!([{ "uri": uri, "mimeType": "text/plain", "text": text }]))
        .map_err(|e| CallError::internal(e.to_string()))
}

/// A client end of a stdio connection.
struct Client {
    lines: LineClient<WriteHalf<DuplexStream>, ReadHalf<DuplexStream>>,
}

impl Client {
    /// Writes `bytes` and the newline that ends a message.
    async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), TestError> {
        let mut line = bytes.to_vec();
        line.push(b'\n');
        self.lines.send_raw(&line).await
    }

    async fn send(&mut self, message: Value) -> Result<(), TestError> {
        self.lines.send_json(&message).await
    }

    async fn next(&mut self) -> Result<Value, TestError> {
        self.lines.recv_json().await
    }

    /// The next line, as the server wrote it.
    async fn next_line(&mut self) -> Result<String, TestError> {
        self.lines.recv_line().await
    }

    /// The next message that is not a notification.
    async fn next_reply(&mut self) -> Result<Value, TestError> {
        loop {
            let message = self.next().await?;
            if message.get("id").is_some() {
                return Ok(message);
            }
        }
    }

    async fn request(&mut self, id: i64, method: &str, params: Value) -> Result<Value, TestError> {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await?;
        self.next_reply().await
    }

    /// A `tools/call` with `params`, and its answer.
    async fn call_tool(&mut self, id: i64, params: Value) -> Result<Value, TestError> {
        self.request(id, "tools/call", params).await
    }

    /// Sends a `tools/call` with `params` and leaves what follows unread,
    /// for a test that reads it message by message.
    async fn start_call(&mut self, id: i64, params: Value) -> Result<(), TestError> {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }))
            .await
    }

    /// Answers the server's request `id` with `result`.
    async fn answer(&mut self, id: &Value, result: Value) -> Result<(), TestError> {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
            .await
    }

    /// Sends `notifications/cancelled` with `params`.
    async fn cancel(&mut self, params: Value) -> Result<(), TestError> {
        self.send(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": params }),
        )
        .await
    }

    async fn initialize(&mut self, version: &str, capabilities: Value) -> Result<Value, TestError> {
        let reply = self
            .request(0, "initialize", initialize(version, &capabilities))
            .await?;
        self.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await?;
        Ok(reply)
    }
}

/// `params` as a 2026-07-28 request carries them, from a client that
/// declares no capabilities.
fn modern(mut params: Value) -> Value {
    params["_meta"] = modern_meta(json!({}));
    params
}

fn modern_meta(capabilities: Value) -> Value {
    let mut meta = json!({ "io.modelcontextprotocol/protocolVersion": MODERN });
    meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    meta
}

struct Harness {
    client: Client,
    calls: Arc<AtomicUsize>,
    gate: Arc<Notify>,
    server: Server,
}

impl Harness {
    /// Calls `ask` as request 1 and reads the `elicitation/create` it sends
    /// the client.
    async fn ask(&mut self) -> Result<Value, TestError> {
        self.client.start_call(1, json!({ "name": "ask" })).await?;
        let asked = self.client.next().await?;
        assert_eq!(asked["method"], json!("elicitation/create"));
        Ok(asked)
    }
}

fn start_with(options: StdioOptions) -> Result<Harness, TestError> {
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let server = server(&calls, &gate)?;
    let client = connect(&server, options);
    Ok(Harness {
        client,
        calls,
        gate,
        server,
    })
}

/// A harness with `options`, after a handshake at `version` declaring
/// elicitation, whose `ask` tool has put its question (returned).
async fn asked_with(options: StdioOptions, version: &str) -> Result<(Harness, Value), TestError> {
    let mut h = start_with(options)?;
    h.client
        .initialize(version, json!({ "elicitation": {} }))
        .await?;
    let asked = h.ask().await?;
    Ok((h, asked))
}

/// [`asked_with`], with lines cut at 512 bytes, at 2025-11-25.
async fn asked_on_short_lines() -> Result<(Harness, Value), TestError> {
    let options = StdioOptions {
        max_line: 512,
        ..StdioOptions::default()
    };
    asked_with(options, "2025-11-25").await
}

fn start() -> Result<Harness, TestError> {
    start_with(StdioOptions::default())
}

/// The params of an `initialize` at `version`, declaring `capabilities`.
fn initialize(version: &str, capabilities: &Value) -> Value {
    json!({ "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": { "name": "t", "version": "1" } })
}

/// A harness whose client has completed the handshake at `version`,
/// declaring `capabilities`.
async fn start_at(version: &str, capabilities: Value) -> Result<Harness, TestError> {
    let mut h = start()?;
    h.client.initialize(version, capabilities).await?;
    Ok(h)
}

fn connect(server: &Server, options: StdioOptions) -> Client {
    serve(server, options).1
}

/// Serves `server` on a new in-memory pipe: the serving task and the
/// client's end.
fn serve(
    server: &Server,
    options: StdioOptions,
) -> (tokio::task::JoinHandle<std::io::Result<()>>, Client) {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (server_read, server_write) = tokio::io::split(server_end);
    let serving = tokio::spawn(stdio::serve(
        server.clone(),
        server_read,
        server_write,
        options,
    ));
    let (client_read, writer) = tokio::io::split(client_end);
    let client = Client {
        lines: LineClient::new(writer, client_read),
    };
    (serving, client)
}

fn code(reply: &Value) -> Option<i64> {
    reply["error"]["code"].as_i64()
}

mod bad_input {
    use super::*;

    /// What a session keeps for its lifetime is bounded in bytes, not only
    /// in count: its subscribed URIs and its `initialize` params.
    #[tokio::test]
    async fn what_a_session_keeps_is_bounded_in_bytes() -> Result<(), TestError> {
        let mut h = start_at("2025-11-25", json!({})).await?;
        let long = |n: i64| format!("test://t/{n}{}", "x".repeat(60_000));
        for n in 0..4 {
            let reply = h
                .client
                .request(10 + n, "resources/subscribe", json!({ "uri": long(n) }))
                .await?;
            assert_eq!(reply["result"], json!({}), "{n}: {reply}");
        }
        let refused = h
            .client
            .request(20, "resources/subscribe", json!({ "uri": long(4) }))
            .await?;
        assert_eq!(code(&refused), Some(-32602), "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("KiB of subscribed resource URIs")),
            "{refused}"
        );
        // Room made is room to use.
        let reply = h
            .client
            .request(21, "resources/unsubscribe", json!({ "uri": long(0) }))
            .await?;
        assert_eq!(reply["result"], json!({}), "{reply}");
        let reply = h
            .client
            .request(22, "resources/subscribe", json!({ "uri": long(4) }))
            .await?;
        assert_eq!(reply["result"], json!({}), "{reply}");

        let mut other = connect(&h.server, StdioOptions::default());
        let mut hello = initialize("2025-11-25", &json!({}));
        hello["clientInfo"]["name"] = json!("n".repeat(300_000));
        let refused = other.request(1, "initialize", hello).await?;
        assert_eq!(code(&refused), Some(-32602), "{refused}");
        let reply = other.initialize("2025-11-25", json!({})).await?;
        assert_eq!(reply["result"]["protocolVersion"], json!("2025-11-25"));
        Ok(())
    }

    #[tokio::test]
    async fn malformed_json_is_a_parse_error_and_the_connection_survives() -> Result<(), TestError>
    {
        let mut h = start()?;
        h.client
            .send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 1,")
            .await?;
        let reply = h.client.next().await?;
        assert_eq!(code(&reply), Some(-32700));
        assert_eq!(reply["id"], Value::Null);
        let pong = h.client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["result"], json!({}));
        Ok(())
    }

    #[tokio::test]
    async fn invalid_utf8_is_a_parse_error() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}")
            .await?;
        assert_eq!(code(&h.client.next().await?), Some(-32700));
        Ok(())
    }

    #[tokio::test]
    async fn a_non_object_message_is_an_invalid_request() -> Result<(), TestError> {
        let mut h = start()?;
        h.client.send_raw(b"42").await?;
        assert_eq!(code(&h.client.next().await?), Some(-32600));
        Ok(())
    }

    #[tokio::test]
    async fn a_request_without_a_method_is_answered_at_its_id() -> Result<(), TestError> {
        let mut h = start()?;
        h.client.send(json!({ "jsonrpc": "2.0", "id": 9 })).await?;
        let reply = h.client.next().await?;
        assert_eq!(code(&reply), Some(-32600));
        assert_eq!(reply["id"], json!(9));
        Ok(())
    }

    #[tokio::test]
    async fn a_request_before_initialize_is_refused() -> Result<(), TestError> {
        let mut h = start()?;
        let reply = h.client.request(1, "tools/list", json!({})).await?;
        assert_eq!(code(&reply), Some(-32600));
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_method_is_method_not_found() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let reply = h.client.request(1, "tools/frobnicate", json!({})).await?;
        assert_eq!(code(&reply), Some(-32601));
        Ok(())
    }

    #[tokio::test]
    async fn wrong_param_types_are_invalid_params() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let reply = h.client.call_tool(1, json!({ "name": 42 })).await?;
        assert_eq!(code(&reply), Some(-32602));
        let reply = h.client.call_tool(2, json!([1, 2])).await?;
        assert_eq!(code(&reply), Some(-32602));
        Ok(())
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_refused_and_serving_goes_on() -> Result<(), TestError> {
        let mut h = start_with(StdioOptions {
            max_line: 256,
            ..StdioOptions::default()
        })?;
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
            "x".repeat(1000)
        );
        h.client.send_raw(long.as_bytes()).await?;
        let reply = h.client.next().await?;
        assert_eq!(code(&reply), Some(-32600));
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("256")
        );
        // Under its own id, so its sender stops waiting for it.
        assert_eq!(reply["id"], json!(1));
        // Read whole whatever the order of its members; a response or a
        // notification that is too long is no request to answer.
        let long = format!(
            "{{\"params\":{{\"pad\":\"{}\"}},\"method\":\"ping\",\"id\":\"last\",\"jsonrpc\":\"2.0\"}}",
            "x".repeat(1000)
        );
        h.client.send_raw(long.as_bytes()).await?;
        assert_eq!(h.client.next().await?["id"], json!("last"));
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{{\"pad\":\"{}\"}}}}",
            "x".repeat(1000)
        );
        h.client.send_raw(long.as_bytes()).await?;
        assert_eq!(h.client.next().await?["id"], Value::Null);
        let pong = h.client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["id"], json!(2));
        Ok(())
    }

    #[tokio::test]
    async fn deep_nesting_is_refused_before_parsing() -> Result<(), TestError> {
        let mut h = start()?;
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        h.client.send_raw(deep.as_bytes()).await?;
        assert_eq!(code(&h.client.next().await?), Some(-32600));
        // A request nested too deep is refused under its own id, so that
        // its sender stops waiting for it.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{}{}}}}}}}"#,
            "[".repeat(100),
            "]".repeat(100)
        );
        h.client.send_raw(deep.as_bytes()).await?;
        let refusal = h.client.next().await?;
        assert_eq!((code(&refusal), &refusal["id"]), (Some(-32600), &json!(9)));
        let pong = h.client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["result"], json!({}));
        Ok(())
    }

    #[tokio::test]
    async fn an_answer_too_long_too_deep_or_malformed_fails_the_question_at_once()
    -> Result<(), TestError> {
        let too_long = |id: &Value| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"action":"accept","content":{{"pad":"{}"}}}}}}"#,
                "x".repeat(1000)
            )
        };
        let too_deep = |id: &Value| {
            format!(
                r#"{{"jsonrpc":"2.0","result":{{"action":"accept","content":{{"a":{}{}}}}},"id":{id}}}"#,
                "[".repeat(100),
                "]".repeat(100)
            )
        };
        // Read, but neither a result nor an error.
        let malformed = |id: &Value| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"action":"accept"}},"error":{{"code":1,"message":"x"}}}}"#
            )
        };
        let cases: [&dyn Fn(&Value) -> String; 3] = [&too_long, &too_deep, &malformed];
        for unreadable in cases {
            let (mut h, asked) = asked_on_short_lines().await?;
            h.client
                .send_raw(unreadable(&asked["id"]).as_bytes())
                .await?;
            // The client is told its line could not be read, as before, and
            // the call that asked goes on with the failure now, not when the
            // question times out (a minute, past the harness's patience);
            // in either order.
            let (first, second) = (h.client.next_reply().await?, h.client.next_reply().await?);
            let (refusal, reply) = if first["id"].is_null() {
                (first, second)
            } else {
                (second, first)
            };
            assert_eq!(
                (code(&refusal), &refusal["id"]),
                (Some(-32600), &Value::Null)
            );
            assert_eq!(reply["id"], json!(1), "{reply}");
            assert!(reply.to_string().contains("could not be read"), "{reply}");
        }
        Ok(())
    }

    /// An answer that is JSON-RPC but not what the question asked for (an
    /// elicitation result whose `action` is none of the three, or with no
    /// `action`) fails the call, saying so, rather than reaching the
    /// handler as if it were one.
    #[tokio::test]
    async fn an_answer_that_is_no_elicitation_result_fails_the_call() -> Result<(), TestError> {
        for answer in [
            json!({ "action": "maybe", "content": 5 }),
            json!({}),
            json!({ "action": "accept", "content": "Ada" }),
        ] {
            let (mut h, asked) = asked_with(StdioOptions::default(), "2025-11-25").await?;
            h.client.answer(&asked["id"], answer.clone()).await?;
            let reply = h.client.next_reply().await?;
            assert_eq!(reply["id"], json!(1), "{reply}");
            let said = reply.to_string();
            assert!(
                said.contains("answer to elicitation/create is malformed"),
                "{answer}: {reply}"
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_line_too_long_that_is_no_answer_leaves_the_question_waiting() -> Result<(), TestError>
    {
        let (mut h, asked) = asked_on_short_lines().await?;
        // The question's id, but neither a result nor an error: no answer.
        let id = &asked["id"];
        let pad = "x".repeat(1000);
        let not_an_answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"params":{{"pad":"{pad}"}}}}"#);
        h.client.send_raw(not_an_answer.as_bytes()).await?;
        let refusal = h.client.next().await?;
        assert_eq!(
            (code(&refusal), &refusal["id"]),
            (Some(-32600), &Value::Null)
        );
        // The question still waits for its answer, and takes it.
        h.client
            .answer(
                id,
                json!({ "action": "accept", "content": { "name": "Ada" } }),
            )
            .await?;
        let reply = h.client.next_reply().await?;
        assert_eq!(
            reply["result"]["content"][0]["text"],
            json!("hello Ada"),
            "{reply}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_response_to_a_request_never_sent_is_dropped_quietly() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .send(json!({ "jsonrpc": "2.0", "id": "never-sent", "result": {} }))
            .await?;
        let pong = h.client.request(3, "ping", json!({})).await?;
        assert_eq!(
            pong["id"],
            json!(3),
            "the stray response produced no output of its own"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_duplicate_in_flight_id_is_refused_and_the_first_still_answers()
    -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
                           "params": { "name": "wait" } });
        h.client.send(call.clone()).await?;
        h.client.send(call).await?;
        let refusal = h.client.next_reply().await?;
        assert_eq!(code(&refusal), Some(-32600));
        h.gate.notify_one();
        let answer = h.client.next_reply().await?;
        assert_eq!(answer["id"], json!(5));
        assert_eq!(answer["result"]["content"][0]["text"], json!("released"));
        Ok(())
    }
}

mod legacy {
    use super::*;

    #[tokio::test]
    async fn a_second_initialize_is_refused_and_the_first_stands() -> Result<(), TestError> {
        let mut h = start_at("2025-03-26", json!({})).await?;
        let again = h
            .client
            .request(5, "initialize", initialize("2025-11-25", &json!({})))
            .await?;
        assert_eq!(code(&again), Some(-32600));
        let seen = reported(&h.client.call_tool(6, json!({ "name": "whoami" })).await?)?;
        assert_eq!(seen["version"], json!("2025-03-26"));
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_connection_stops_its_handlers_and_closes_its_output()
    -> Result<(), TestError> {
        let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let server = server(&calls, &gate)?;
        let (serving, mut client) = serve(&server, StdioOptions::default());
        client.initialize("2025-11-25", json!({})).await?;
        client.start_call(1, json!({ "name": "wait" })).await?;
        // Answered only once the call before it has started.
        let pong = client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["id"], json!(2));
        serving.abort();
        assert!(serving.await.is_err_and(|e| e.is_cancelled()));
        // Released now, a handler still running would answer.
        gate.notify_one();
        assert!(
            client.lines.at_eof().await?,
            "the output should close unanswered"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_result_restating_a_modelled_member_writes_it_once() -> Result<(), TestError> {
        let mut h = start_at("2025-11-25", json!({})).await?;
        let legacy = json!({ "name": "restated" });
        let modern = modern(json!({ "name": "restated" }));
        for (id, params) in [(1, legacy), (2, modern)] {
            h.client.start_call(id, params).await?;
            let line = h.client.next_line().await?;
            for member in ["\"_meta\"", "\"isError\""] {
                assert_eq!(line.matches(member).count(), 1, "{member} in {line}");
            }
            let reply: Value = serde_json::from_str(&line)?;
            let result = &reply["result"];
            // As a JSON object built from the result: the unmodelled member wins.
            assert_eq!(result["isError"], json!(true), "{line}");
            assert_eq!(result["_meta"]["note"], json!("from extra"), "{line}");
            assert!(result["_meta"].get("typed").is_none(), "{line}");
            let named = result["_meta"]
                .get("io.modelcontextprotocol/serverInfo")
                .is_some();
            assert_eq!(named, id == 2, "server info only in 2026-07-28: {line}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_reserved_meta_key_does_not_make_a_legacy_request_modern() -> Result<(), TestError> {
        let mut h = start_at("2025-11-25", json!({})).await?;
        let reply = h
            .client
            .call_tool(
                1,
                json!({ "name": "echo", "arguments": { "text": "x" },
                "_meta": { "io.modelcontextprotocol/related-task": { "taskId": "t1" } } }),
            )
            .await?;
        assert_eq!(reply["result"]["content"][0]["text"], json!("x"), "{reply}");
        assert!(
            reply["result"].get("resultType").is_none(),
            "served as legacy"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_panicking_handler_is_an_internal_error_and_serving_goes_on() -> Result<(), TestError>
    {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let reply = h.client.call_tool(1, json!({ "name": "boom" })).await?;
        assert_eq!(code(&reply), Some(-32603));
        let again = h
            .client
            .call_tool(1, json!({ "name": "echo", "arguments": { "text": "ok" } }))
            .await?;
        assert_eq!(
            again["result"]["content"][0]["text"],
            json!("ok"),
            "the id is free again"
        );
        Ok(())
    }

    /// Outside 2025-03-26 a batch runs nothing, but each of its requests is
    /// refused under its own id, so that its sender stops waiting for it;
    /// an answer inside it still reaches the question it answers.
    #[tokio::test]
    async fn a_batch_is_only_for_2025_03_26() -> Result<(), TestError> {
        let (mut h, asked) = asked_with(StdioOptions::default(), "2025-06-18").await?;
        let answer = json!({ "jsonrpc": "2.0", "id": asked["id"].clone(),
            "result": { "action": "accept", "content": { "name": "Ada" } } });
        h.client
            .send(json!([
                { "jsonrpc": "2.0", "id": 2, "method": "ping" },
                { "jsonrpc": "2.0", "id": "x", "method": "tools/call",
                  "params": { "name": "count" } },
                answer,
            ]))
            .await?;
        let mut refusals = None;
        let mut reply = None;
        while refusals.is_none() || reply.is_none() {
            let next = h.client.next().await?;
            if next.is_array() {
                refusals = Some(next);
            } else {
                reply = Some(next);
            }
        }
        let refusals = refusals.unwrap_or_default();
        let refused: Vec<(&Value, Option<i64>)> = refusals
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (&r["id"], code(r)))
            .collect();
        assert_eq!(
            refused,
            [(&json!(2), Some(-32600)), (&json!("x"), Some(-32600))],
            "{refusals}"
        );
        assert_eq!(h.calls.load(Ordering::SeqCst), 0, "nothing ran");
        let reply = reply.unwrap_or_default();
        assert_eq!(reply["id"], json!(1), "{reply}");
        assert_eq!(reply["result"]["content"][0]["text"], json!("hello Ada"));
        Ok(())
    }

    #[tokio::test]
    async fn a_batched_call_can_ask_the_client_a_question() -> Result<(), TestError> {
        let mut h = start_at("2025-03-26", json!({ "sampling": {} })).await?;
        // 2025-03-26 has no elicitation; sampling is the question it can ask.
        h.client
            .send(json!([
                { "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "sampler" } },
                { "jsonrpc": "2.0", "id": 2, "method": "ping" },
            ]))
            .await?;
        let asked = h.client.next().await?;
        assert_eq!(asked["method"], json!("sampling/createMessage"), "{asked}");
        h.client
            .answer(
                &asked["id"],
                json!({ "role": "assistant", "model": "m",
                        "content": { "type": "text", "text": "42" } }),
            )
            .await?;
        let answers = h.client.next().await?;
        let texts: Vec<Value> = answers
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["result"]["content"][0]["text"].clone())
                    .collect()
            })
            .unwrap_or_default();
        assert!(texts.contains(&json!("model said 42")), "{answers}");
        Ok(())
    }

    #[tokio::test]
    async fn resources_prompts_and_completions_are_served() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let client = &mut h.client;
        let read = client
            .request(1, "resources/read", json!({ "uri": "test://doc" }))
            .await?;
        assert_eq!(read["result"]["contents"][0]["text"], json!("public text"));
        let missing = client
            .request(2, "resources/read", json!({ "uri": "secret://doc" }))
            .await?;
        assert_eq!(
            code(&missing),
            Some(-32002),
            "legacy code, and a scoped resource is missing to the anonymous"
        );
        let prompt = client
            .request(
                3,
                "prompts/get",
                json!({ "name": "greet", "arguments": { "who": "ada" } }),
            )
            .await?;
        assert_eq!(
            prompt["result"]["messages"][0]["content"]["text"],
            json!("hello ada")
        );
        let hidden = client
            .request(4, "prompts/get", json!({ "name": "vault" }))
            .await?;
        assert_eq!(code(&hidden), Some(-32602));
        let complete = |prompt: &str, value: &str| {
            json!({ "ref": { "type": "ref/prompt", "name": prompt },
                    "argument": { "name": "who", "value": value } })
        };
        let completion = client
            .request(5, "completion/complete", complete("greet", "al"))
            .await?;
        assert_eq!(
            completion["result"]["completion"]["values"],
            json!(["alice", "alfred"])
        );
        let probing = client
            .request(6, "completion/complete", complete("vault", ""))
            .await?;
        assert_eq!(
            code(&probing),
            Some(-32602),
            "an invisible prompt is not completed"
        );
        let subscribe = client
            .request(7, "resources/subscribe", json!({ "uri": "secret://doc" }))
            .await?;
        assert_eq!(code(&subscribe), Some(-32602), "nor watched");
        Ok(())
    }

    #[tokio::test]
    async fn initialize_echoes_a_supported_version_and_offers_the_newest_otherwise()
    -> Result<(), TestError> {
        let mut h = start()?;
        let reply = h.client.initialize("2025-03-26", json!({})).await?;
        assert_eq!(reply["result"]["protocolVersion"], json!("2025-03-26"));
        let mut other = connect(&h.server, StdioOptions::default());
        let reply = other.initialize("2024-10-07", json!({})).await?;
        assert_eq!(reply["result"]["protocolVersion"], json!("2025-11-25"));
        Ok(())
    }

    #[tokio::test]
    async fn a_slow_tool_does_not_hold_up_other_requests() -> Result<(), TestError> {
        let mut h = start_at("2025-11-25", json!({})).await?;
        h.client.start_call(1, json!({ "name": "wait" })).await?;
        // Answered while `wait` still waits: the server did not serialise.
        let echo = h
            .client
            .call_tool(2, json!({ "name": "echo", "arguments": { "text": "hi" } }))
            .await?;
        assert_eq!(echo["id"], json!(2));
        h.gate.notify_one();
        assert_eq!(h.client.next_reply().await?["id"], json!(1));
        Ok(())
    }

    #[tokio::test]
    async fn elicitation_is_a_server_request_answered_inline() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({ "elicitation": {} })).await?;
        let asked = h.ask().await?;
        h.client
            .answer(
                &asked["id"],
                json!({ "action": "accept", "content": { "name": "ada" } }),
            )
            .await?;
        let reply = h.client.next_reply().await?;
        assert_eq!(reply["result"]["content"][0]["text"], json!("hello ada"));
        Ok(())
    }

    #[tokio::test]
    async fn an_undeclared_capability_is_refused_before_anything_is_sent() -> Result<(), TestError>
    {
        let mut h = start_at("2025-06-18", json!({})).await?;
        h.client.start_call(1, json!({ "name": "ask" })).await?;

        // The very next message is the refusal: no elicitation/create (or
        // anything else) went to a client that never declared elicitation.
        // -32021 is a 2026-07-28 code a 2025-06-18 client does not know; it
        // gets an internal error that names what was missing.
        let reply = h.client.next().await?;
        assert_eq!(reply["id"], json!(1), "{reply}");
        assert_eq!(code(&reply), Some(-32603), "{reply}");
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Elicitation was not negotiated"),
            "{reply}"
        );
        let pong = h.client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["id"], json!(2), "nothing was left queued: {pong}");
        Ok(())
    }

    #[tokio::test]
    async fn state_kept_before_a_question_is_there_after_its_answer() -> Result<(), TestError> {
        let mut h = start_at("2025-11-25", json!({ "elicitation": {} })).await?;
        h.client
            .start_call(1, json!({ "name": "stateful" }))
            .await?;
        let asked = h.client.next().await?;
        h.client
            .answer(&asked["id"], json!({ "action": "accept", "content": {} }))
            .await?;
        let reply = h.client.next_reply().await?;
        assert_eq!(
            reply["result"]["content"][0]["text"],
            json!("state \"kept\"")
        );
        Ok(())
    }

    #[tokio::test]
    async fn log_records_flow_only_after_set_level() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let quiet = h.client.call_tool(1, json!({ "name": "chatty" })).await?;
        assert_eq!(quiet["id"], json!(1));
        h.client
            .request(2, "logging/setLevel", json!({ "level": "debug" }))
            .await?;
        h.client.start_call(3, json!({ "name": "chatty" })).await?;
        let log = h.client.next().await?;
        assert_eq!(log["method"], json!("notifications/message"));
        assert_eq!(log["params"]["level"], json!("info"));
        assert_eq!(h.client.next().await?["id"], json!(3));
        Ok(())
    }

    #[tokio::test]
    async fn a_removed_tool_is_announced_to_the_session() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        assert!(h.server.remove_tool("echo"));
        let note = h.client.next().await?;
        assert_eq!(note["method"], json!("notifications/tools/list_changed"));
        let tools = h.client.request(1, "tools/list", json!({})).await?;
        let names: Vec<&str> = tools["result"]["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        assert!(!names.contains(&"echo"));
        Ok(())
    }

    #[tokio::test]
    async fn a_2025_03_26_batch_is_answered_as_a_batch() -> Result<(), TestError> {
        let mut h = start_at("2025-03-26", json!({})).await?;
        h.client
            .send(json!([
                { "jsonrpc": "2.0", "id": 1, "method": "ping" },
                { "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "echo", "arguments": { "text": "b" } } },
            ]))
            .await?;
        let answers = h.client.next().await?;
        let ids: Vec<i64> = answers
            .as_array()
            .map(|a| a.iter().filter_map(|r| r["id"].as_i64()).collect())
            .unwrap_or_default();
        assert_eq!(ids.len(), 2, "{answers}");
        assert!(ids.contains(&1) && ids.contains(&2));
        Ok(())
    }

    /// Batched requests are in flight like any other: a repeated id is
    /// refused rather than run twice.
    #[tokio::test]
    async fn a_batch_repeating_an_id_runs_it_once() -> Result<(), TestError> {
        let mut h = start_at("2025-03-26", json!({})).await?;
        let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": { "name": "count" } });
        h.client.send(json!([call, call])).await?;
        let answers = h.client.next().await?;
        let answers = answers.as_array().ok_or("not a batch answer")?;
        assert_eq!(answers.len(), 2, "{answers:?}");
        let refused = answers.iter().filter(|a| code(a) == Some(-32600)).count();
        assert_eq!(refused, 1, "{answers:?}");
        assert_eq!(h.calls.load(Ordering::SeqCst), 1);
        Ok(())
    }

    #[tokio::test]
    async fn results_for_a_legacy_client_carry_no_2026_members() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let list = h.client.request(1, "tools/list", json!({})).await?;
        let result = list["result"]
            .as_object()
            .ok_or_else(|| format!("no result in {list}"))?;
        // A tools/list result at 2025-06-18 holds its tools and at most a
        // cursor and _meta; nothing of 2026-07-28 leaks in.
        let mut members: Vec<&str> = result.keys().map(String::as_str).collect();
        members.sort_unstable();
        assert_eq!(members, ["tools"], "{list}");
        let call = h.client.call_tool(2, json!({ "name": "count" })).await?;
        let result = call["result"]
            .as_object()
            .ok_or_else(|| format!("no result in {call}"))?;
        for member in [
            "resultType",
            "ttlMs",
            "cacheScope",
            "inputRequests",
            "requestState",
        ] {
            assert!(!result.contains_key(member), "{member} in {call}");
        }
        assert!(result.contains_key("content"), "{call}");
        Ok(())
    }
}

/// What `whoami` reported, read back from its text.
fn reported(reply: &Value) -> Result<Value, TestError> {
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .ok_or_else(|| format!("no text in {reply}"))?;
    Ok(serde_json::from_str(text)?)
}

mod context {
    use super::*;

    #[tokio::test]
    async fn legacy_era_fields_are_settled_once_by_the_handshake() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .request(0, "initialize", json!({ "protocolVersion": "2025-06-18",
                "capabilities": { "roots": {} }, "clientInfo": { "name": "legacy-client", "version": "1" },
                "_meta": { "example.com/tenant": "t1" } }))
            .await?;
        h.client
            .request(1, "logging/setLevel", json!({ "level": "warning" }))
            .await?;
        let seen = reported(&h.client.call_tool(2, json!({ "name": "whoami" })).await?)?;
        assert_eq!(seen["version"], json!("2025-06-18"));
        assert_eq!(seen["client"], json!("legacy-client"));
        assert_eq!(seen["initMeta"], json!({ "example.com/tenant": "t1" }));
        assert_eq!(seen["logLevel"], json!("warning"));
        assert_eq!(seen["caps"], json!({ "roots": {} }));
        Ok(())
    }

    #[tokio::test]
    async fn modern_era_fields_are_rebuilt_per_request_and_never_inherited() -> Result<(), TestError>
    {
        let mut h = start()?;
        let mut first = modern_meta(json!({ "sampling": {} }));
        first["io.modelcontextprotocol/clientInfo"] = json!({ "name": "first", "version": "1" });
        first["io.modelcontextprotocol/logLevel"] = json!("debug");
        let seen = reported(
            &h.client
                .call_tool(1, json!({ "name": "whoami", "_meta": first }))
                .await?,
        )?;
        assert_eq!(seen["client"], json!("first"));
        assert_eq!(seen["logLevel"], json!("debug"));
        assert_eq!(seen["caps"], json!({ "sampling": {} }));

        let seen = reported(
            &h.client
                .call_tool(2, modern(json!({ "name": "whoami" })))
                .await?,
        )?;
        assert_eq!(seen["version"], json!(MODERN));
        assert_eq!(seen["client"], Value::Null, "client info is not inherited");
        assert_eq!(
            seen["logLevel"],
            Value::Null,
            "the log level is not inherited"
        );
        assert_eq!(seen["caps"], json!({}), "capabilities are not inherited");
        Ok(())
    }

    #[tokio::test]
    async fn every_connection_is_a_session_of_its_own() -> Result<(), TestError> {
        let mut h = start()?;
        let mut other = connect(&h.server, StdioOptions::default());
        h.client.initialize("2025-06-18", json!({})).await?;
        other.initialize("2025-06-18", json!({})).await?;
        let mine = reported(&h.client.call_tool(1, json!({ "name": "whoami" })).await?)?;
        let theirs = reported(&other.call_tool(1, json!({ "name": "whoami" })).await?)?;
        assert_ne!(mine["session"], theirs["session"]);
        Ok(())
    }
}

mod cancellation {
    use super::*;

    #[tokio::test]
    async fn cancelling_a_call_withdraws_the_question_it_was_waiting_on() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({ "elicitation": {} })).await?;
        let asked = h.ask().await?;
        h.client
            .cancel(json!({ "requestId": 1, "reason": "user gave up" }))
            .await?;
        let withdrawn = h.client.next().await?;
        assert_eq!(withdrawn["method"], json!("notifications/cancelled"));
        assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
        // The cancelled call is not answered; the connection goes on.
        let pong = h.client.request(2, "ping", json!({})).await?;
        assert_eq!(pong["id"], json!(2));
        Ok(())
    }

    #[tokio::test]
    async fn an_unanswered_question_times_out_withdrawn_and_the_call_fails() -> Result<(), TestError>
    {
        let options = StdioOptions {
            exchange_timeout: Duration::from_millis(20),
            ..StdioOptions::default()
        };
        let (mut h, asked) = asked_with(options, "2025-06-18").await?;
        let withdrawn = h.client.next().await?;
        assert_eq!(withdrawn["method"], json!("notifications/cancelled"));
        assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
        let failed = h.client.next().await?;
        assert_eq!(failed["id"], json!(1));
        assert_eq!(code(&failed), Some(-32603), "{failed}");
        assert_eq!(
            failed["error"]["message"],
            json!("the client did not answer in time"),
            "{failed}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_call_leaves_its_id_free_for_a_fresh_call() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        h.client.start_call(4, json!({ "name": "wait" })).await?;
        h.client.cancel(json!({ "requestId": 4 })).await?;
        // Not refused as in flight or replayed: the cancelled call left nothing.
        h.gate.notify_one();
        let again = h.client.call_tool(4, json!({ "name": "count" })).await?;
        assert_eq!(again["result"]["content"][0]["text"], json!("call 1"));
        Ok(())
    }
}

mod idempotency {
    //! Replay is for the transports whose session outlives a connection
    //! (Streamable HTTP, HTTP+SSE): a client that lost an answer retries on
    //! a new connection of the same session. These tests drive such a
    //! session's `Connection` directly. A stdio session ends with its pipe,
    //! so no retry can reach it and nothing is recorded there.
    use super::*;

    /// A legacy session as Streamable HTTP holds it.
    struct Session(protocol_droid::application::server::Connection);

    impl Session {
        async fn open(server: &Server) -> Result<Self, TestError> {
            let connection = server.connect(
                TransportKind::StreamableHttp,
                Arc::new(NoExchange),
                Arc::new(NullSink),
            );
            let params = json!({ "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": { "name": "t", "version": "1" } });
            connection
                .handle(request(0, "initialize", params), RequestContext::default())
                .await
                .map_err(|e| e.message)?;
            Ok(Self(connection))
        }

        /// A `tools/call`, answered as the JSON-RPC member it would travel in.
        async fn call(&self, id: i64, params: Value) -> Value {
            let outcome = self
                .0
                .handle(request(id, "tools/call", params), RequestContext::default())
                .await;
            match outcome {
                Ok(result) => json!({ "result": result }),
                Err(error) => json!({ "error": error.to_json() }),
            }
        }

        /// A call and its retry: the same id and params, one after the other.
        async fn call_and_retry(&self, id: i64, params: &Value) -> (Value, Value) {
            let first = self.call(id, params.clone()).await;
            (first, self.call(id, params.clone()).await)
        }
    }

    fn request(id: i64, method: &str, params: Value) -> Request {
        Request {
            id: RequestId::Number(id),
            method: method.to_owned(),
            params: Some(params),
        }
    }

    /// A rate limit's refusal asks for a retry later, so it is not recorded:
    /// the retry, once the caller's allowance has refilled, runs the call
    /// rather than replaying the refusal.
    #[tokio::test]
    async fn a_rate_limit_refusal_is_not_replayed() -> Result<(), TestError> {
        let limits = protocol_droid::application::server::RateLimits {
            per_tool: protocol_droid::application::server::Rate::new(1, Duration::from_secs(2)),
            ..Default::default()
        };
        let server = Server::builder("limited", "1.0.0")
            .rate_limits(limits)
            .build()?;
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        server.add_tool(ToolSpec::new("count", "Counts."), move |_| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok(ToolResult::text(n.to_string())) }
        });
        let session = Session::open(&server).await?;
        let first = session.call(1, json!({ "name": "count" })).await;
        assert!(first.get("result").is_some(), "{first}");
        let refused = session.call(2, json!({ "name": "count" })).await;
        assert_eq!(code(&refused), Some(-31429), "{refused}");
        // Past the two seconds in which one call is allowed (long enough
        // that the refused call cannot miss its refusal on a busy machine).
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let retried = session.call(2, json!({ "name": "count" })).await;
        assert!(retried.get("result").is_some(), "{retried}");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_refusal_is_recorded_and_replayed_too() -> Result<(), TestError> {
        let h = start()?;
        let session = Session::open(&h.server).await?;
        let (first, retry) = session
            .call_and_retry(3, &json!({ "name": "refuse" }))
            .await;
        assert_eq!(code(&first), Some(-32602));
        assert_eq!(first["error"], retry["error"]);
        assert_eq!(
            h.calls.load(Ordering::SeqCst),
            1,
            "the retry was answered from the record"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_retried_call_replays_its_answer_within_its_session() -> Result<(), TestError> {
        let h = start()?;
        let session = Session::open(&h.server).await?;
        let (first, retry) = session.call_and_retry(7, &json!({ "name": "count" })).await;
        assert_eq!(first["result"], retry["result"]);
        assert_eq!(
            h.calls.load(Ordering::SeqCst),
            1,
            "the retry did not run the tool again"
        );
        let reused = session.call(7, json!({ "name": "echo" })).await;
        assert_eq!(
            code(&reused),
            Some(-32600),
            "a reused id for another call is no retry"
        );
        Ok(())
    }

    /// Two sessions using the same request id and params must each run:
    /// this fails if sessions share a key space (the `with_session` hazard).
    #[tokio::test]
    async fn a_recorded_answer_never_crosses_sessions() -> Result<(), TestError> {
        let h = start()?;
        let mine = Session::open(&h.server).await?;
        let other = Session::open(&h.server).await?;
        let first = mine.call(7, json!({ "name": "count" })).await;
        let theirs = other.call(7, json!({ "name": "count" })).await;
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        assert_ne!(first["result"], theirs["result"]);
        Ok(())
    }

    /// On stdio a finished call leaves nothing behind: the same id and
    /// params run again, because no retry could have needed the record.
    #[tokio::test]
    async fn stdio_records_nothing_for_replay() -> Result<(), TestError> {
        let mut h = start_at("2025-06-18", json!({})).await?;
        let first = h.client.call_tool(7, json!({ "name": "count" })).await?;
        let again = h.client.call_tool(7, json!({ "name": "count" })).await?;
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        assert_ne!(first["result"], again["result"]);
        Ok(())
    }
}

mod modern {
    use super::*;

    /// The `_meta` of a client that can be asked questions.
    fn askable() -> Value {
        modern_meta(json!({ "elicitation": {} }))
    }

    /// Calls `stateful` as request 1 from a client that can be asked, and
    /// the `requestState` its first round (a question for the client)
    /// carries.
    async fn first_round_state(client: &mut Client) -> Result<String, TestError> {
        first_round_state_of(client, "stateful").await
    }

    /// The `requestState` of `tool`'s first round.
    async fn first_round_state_of(client: &mut Client, tool: &str) -> Result<String, TestError> {
        let first = client
            .call_tool(1, json!({ "name": tool, "_meta": askable() }))
            .await?;
        let state = first["result"]["requestState"]
            .as_str()
            .ok_or("no requestState")?;
        Ok(state.to_owned())
    }

    /// The params of a retry calling `tool` with `action` as the answer to
    /// `stateful`'s question `go`, carrying `state`.
    fn go_answered(tool: &str, state: &str, action: &str) -> Value {
        json!({ "name": tool, "_meta": askable(), "requestState": state,
                "inputResponses": { "go": { "action": action, "content": {} } } })
    }

    #[tokio::test]
    async fn an_unknown_log_level_is_invalid_params() -> Result<(), TestError> {
        let mut h = start()?;
        let mut meta = modern_meta(json!({}));
        meta["io.modelcontextprotocol/logLevel"] = json!("chatty");
        let reply = h
            .client
            .call_tool(1, json!({ "name": "echo", "_meta": meta }))
            .await?;
        assert_eq!(code(&reply), Some(-32602));
        Ok(())
    }

    #[tokio::test]
    async fn state_kept_in_the_first_round_reaches_the_third() -> Result<(), TestError> {
        let mut h = start()?;
        let meta = modern_meta(json!({ "elicitation": {} }));
        let call = |id: i64, responses: Value, state: Value| {
            let mut params =
                json!({ "name": "relay", "_meta": meta.clone(), "inputResponses": responses });
            if !state.is_null() {
                params["requestState"] = state;
            }
            (id, params)
        };
        let accept = json!({ "action": "accept", "content": {} });
        let (id, params) = call(1, json!({}), Value::Null);
        let one = h.client.call_tool(id, params).await?;
        let (id, params) = call(
            2,
            json!({ "a": accept }),
            one["result"]["requestState"].clone(),
        );
        let two = h.client.call_tool(id, params).await?;
        assert_eq!(two["result"]["resultType"], json!("input_required"));
        assert!(
            two["result"]["requestState"].is_string(),
            "round two must carry the state on: {two}"
        );
        let (id, params) = call(
            3,
            json!({ "b": accept }),
            two["result"]["requestState"].clone(),
        );
        let three = h.client.call_tool(id, params).await?;
        assert_eq!(
            three["result"]["content"][0]["text"],
            json!("origin \"round one\"")
        );
        Ok(())
    }

    #[tokio::test]
    async fn progress_goes_to_a_request_with_a_token_and_before_its_answer() -> Result<(), TestError>
    {
        let mut h = start()?;
        let mut meta = modern_meta(json!({}));
        meta["progressToken"] = json!("p-1");
        h.client
            .start_call(1, json!({ "name": "progress", "_meta": meta }))
            .await?;
        let first = h.client.next().await?;
        assert_eq!(first["method"], json!("notifications/progress"));
        assert_eq!(first["params"]["progressToken"], json!("p-1"));
        assert_eq!(first["params"]["message"], json!("half"));
        assert_eq!(h.client.next().await?["params"]["progress"], json!(2.0));
        assert_eq!(h.client.next().await?["id"], json!(1));
        let quiet = h
            .client
            .call_tool(2, modern(json!({ "name": "progress" })))
            .await?;
        assert_eq!(
            quiet["id"],
            json!(2),
            "no token, no progress before the answer"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_missing_resource_is_invalid_params_never_empty_contents() -> Result<(), TestError> {
        let mut h = start()?;
        let read = |uri: &str| modern(json!({ "uri": uri }));
        let missing = h
            .client
            .request(1, "resources/read", read("test://nothing"))
            .await?;
        assert_eq!(code(&missing), Some(-32602));
        assert_eq!(missing["error"]["data"]["uri"], json!("test://nothing"));
        let item = h
            .client
            .request(2, "resources/read", read("test://t/42"))
            .await?;
        assert_eq!(item["result"]["contents"][0]["text"], json!("item 42"));
        assert_eq!(item["result"]["cacheScope"], json!("private"));
        Ok(())
    }

    #[tokio::test]
    async fn a_listen_stream_watches_only_resources_the_caller_may_read() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .send(json!({ "jsonrpc": "2.0", "id": "w", "method": "subscriptions/listen",
                "params": { "_meta": modern_meta(json!({})),
                            "notifications": { "resourceSubscriptions": ["test://doc", "secret://doc"] } } }))
            .await?;
        let ack = h.client.next().await?;
        assert_eq!(
            ack["params"]["notifications"]["resourceSubscriptions"],
            json!(["test://doc"])
        );
        h.server.resource_updated("secret://doc");
        h.server.resource_updated("test://doc");
        let note = h.client.next().await?;
        assert_eq!(note["method"], json!("notifications/resources/updated"));
        assert_eq!(note["params"]["uri"], json!("test://doc"));
        Ok(())
    }

    #[tokio::test]
    async fn discover_answers_without_a_handshake() -> Result<(), TestError> {
        let mut h = start()?;
        let reply = h
            .client
            .request(1, "server/discover", modern(json!({})))
            .await?;
        let result = &reply["result"];
        assert_eq!(result["resultType"], json!("complete"));
        assert!(
            result["supportedVersions"]
                .as_array()
                .is_some_and(|v| v.contains(&json!(MODERN)))
        );
        assert_eq!(
            result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            json!("test-server")
        );
        assert!(result.get("ttlMs").is_some() && result.get("cacheScope").is_some());
        Ok(())
    }

    #[tokio::test]
    async fn missing_meta_keys_are_invalid_params() -> Result<(), TestError> {
        let mut h = start()?;
        let reply = h.client.request(1, "server/discover", json!({})).await?;
        assert_eq!(code(&reply), Some(-32602));
        let reply = h
            .client
            .request(
                2,
                "tools/list",
                json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN } }),
            )
            .await?;
        assert_eq!(code(&reply), Some(-32602));
        Ok(())
    }

    #[tokio::test]
    async fn an_unsupported_version_names_what_is_supported() -> Result<(), TestError> {
        let mut h = start()?;
        let meta = json!({ "io.modelcontextprotocol/protocolVersion": "2099-01-01",
                           "io.modelcontextprotocol/clientCapabilities": {} });
        let reply = h
            .client
            .request(1, "tools/list", json!({ "_meta": meta }))
            .await?;
        assert_eq!(code(&reply), Some(-32022));
        assert_eq!(reply["error"]["data"]["requested"], json!("2099-01-01"));
        assert_eq!(
            reply["error"]["data"]["supported"],
            json!([
                MODERN,
                "2025-11-25",
                "2025-06-18",
                "2025-03-26",
                "2024-11-05"
            ]),
            "every revision offered, newest first, so a dual-era client may fall back"
        );
        Ok(())
    }

    #[tokio::test]
    async fn removed_methods_are_not_found() -> Result<(), TestError> {
        let mut h = start()?;
        for (id, method) in [
            (1, "ping"),
            (2, "logging/setLevel"),
            (3, "resources/subscribe"),
        ] {
            let reply = h.client.request(id, method, modern(json!({}))).await?;
            assert_eq!(code(&reply), Some(-32601), "{method}: {reply}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_question_becomes_an_input_required_round_and_the_retry_completes()
    -> Result<(), TestError> {
        let mut h = start()?;
        let meta = modern_meta(json!({ "elicitation": {} }));
        let first = h
            .client
            .call_tool(1, json!({ "name": "ask", "_meta": meta }))
            .await?;
        assert_eq!(first["result"]["resultType"], json!("input_required"));
        assert_eq!(
            first["result"]["inputRequests"]["who"]["method"],
            json!("elicitation/create")
        );
        let retry = h.client
            .call_tool(2, json!({ "name": "ask", "_meta": meta,
                "inputResponses": { "who": { "action": "accept", "content": { "name": "ada" } } } }))
            .await?;
        assert_eq!(retry["result"]["resultType"], json!("complete"));
        assert_eq!(retry["result"]["content"][0]["text"], json!("hello ada"));
        Ok(())
    }

    #[tokio::test]
    async fn input_responses_that_are_not_an_object_are_invalid_params() -> Result<(), TestError> {
        let mut h = start()?;
        let meta = modern_meta(json!({ "elicitation": {} }));
        for (id, responses) in [(1, json!([1])), (2, json!("who")), (3, json!(7))] {
            let reply = h
                .client
                .call_tool(
                    id,
                    json!({ "name": "ask", "_meta": meta, "inputResponses": responses }),
                )
                .await?;
            assert_eq!(code(&reply), Some(-32602), "{responses}: {reply}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn an_undeclared_capability_is_missing_required_client_capability()
    -> Result<(), TestError> {
        let mut h = start()?;
        let reply = h
            .client
            .call_tool(1, modern(json!({ "name": "ask" })))
            .await?;
        assert_eq!(code(&reply), Some(-32021));
        assert_eq!(
            reply["error"]["data"]["requiredCapabilities"],
            json!({ "elicitation": {} })
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_round_is_answered_once_and_retried_only_with_the_same_answers()
    -> Result<(), TestError> {
        let mut h = start()?;
        let state = first_round_state(&mut h.client).await?;
        // Retries that answer nothing are asked again and spend no round,
        // answers to questions never asked being no answers.
        let mut unanswered = go_answered("stateful", &state, "accept");
        let never_asked = json!({ "zzz": { "action": "accept", "content": {} } });
        for (id, nothing) in [
            (20, Value::Null),
            (21, json!({})),
            (22, never_asked.clone()),
        ] {
            unanswered["inputResponses"] = nothing;
            let asked = h.client.call_tool(id, unanswered.clone()).await?;
            assert_eq!(
                asked["result"]["resultType"],
                json!("input_required"),
                "{asked}"
            );
        }
        let retry = |action: &str| go_answered("stateful", &state, action);
        let answered = h.client.call_tool(2, retry("accept")).await?;
        assert!(answered.get("result").is_some(), "{answered}");
        // The same answers again: a retry after a lost answer, served;
        // with an answer to a question never asked beside them too.
        let again = h.client.call_tool(3, retry("accept")).await?;
        assert!(again.get("result").is_some(), "{again}");
        let mut with_more = retry("accept");
        if let (Some(answers), Some(more)) = (
            with_more["inputResponses"].as_object_mut(),
            never_asked.as_object(),
        ) {
            answers.extend(more.clone());
        }
        let again = h.client.call_tool(5, with_more).await?;
        assert!(again.get("result").is_some(), "{again}");
        // Other answers to the same question: refused.
        let other = h.client.call_tool(4, retry("decline")).await?;
        assert_eq!(code(&other), Some(-32602), "{other}");
        assert!(
            other["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("already answered")),
            "{other}"
        );
        Ok(())
    }

    /// A 2026-07-28 answer that is no elicitation result is the client's
    /// error, part of its own request: -32602, naming what is wrong.
    #[tokio::test]
    async fn a_malformed_answer_in_input_responses_is_invalid_params() -> Result<(), TestError> {
        let mut h = start()?;
        let state = first_round_state(&mut h.client).await?;
        let refused = h
            .client
            .call_tool(2, go_answered("stateful", &state, "maybe"))
            .await?;
        assert_eq!(code(&refused), Some(-32602), "{refused}");
        assert!(refused.to_string().contains("is malformed"), "{refused}");
        Ok(())
    }

    /// An answer to a question its round never asked is not the round's:
    /// the handler does not see it, so a retry cannot carry the round's
    /// answers again beside an answer to what is asked later.
    #[tokio::test]
    async fn an_answer_the_round_never_asked_does_not_reach_the_handler() -> Result<(), TestError> {
        let mut h = start()?;
        let state = first_round_state_of(&mut h.client, "two_steps").await?;
        let answer = json!({ "action": "accept", "content": {} });
        let retry = json!({ "name": "two_steps", "_meta": askable(), "requestState": state,
            "inputResponses": { "go": answer, "again": { "action": "decline" } } });
        let second = h.client.call_tool(2, retry).await?;
        // `again` was not this round's question: asked now, not taken.
        assert_eq!(
            second["result"]["resultType"],
            json!("input_required"),
            "{second}"
        );
        let asked = second["result"]["inputRequests"]
            .as_object()
            .map(|a| a.keys().cloned().collect::<Vec<_>>());
        assert_eq!(asked, Some(vec!["again".to_owned()]), "{second}");
        Ok(())
    }

    #[tokio::test]
    async fn request_state_survives_the_round_trip_and_a_forgery_is_refused()
    -> Result<(), TestError> {
        let mut h = start()?;
        let state = first_round_state(&mut h.client).await?;
        let answered = |tool: &str, state: &str| go_answered(tool, state, "accept");
        let retry = h.client.call_tool(2, answered("stateful", &state)).await?;
        assert_eq!(
            retry["result"]["content"][0]["text"],
            json!("state \"kept\"")
        );

        // Flip one bit of the payload itself, between the header and the
        // tag, so what refuses it is the signature and nothing earlier.
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut bytes = engine.decode(&state)?;
        let at = bytes.len().checked_sub(33).ok_or("state too short")?;
        if let Some(byte) = bytes.get_mut(at) {
            *byte ^= 0x01;
        }
        let forged = engine.encode(bytes);
        let refused = h.client.call_tool(3, answered("stateful", &forged)).await?;
        assert_eq!(code(&refused), Some(-32602));

        // Bound to the request: the same state on another tool is refused.
        let moved = h.client.call_tool(4, answered("ask", &state)).await?;
        assert_eq!(code(&moved), Some(-32602));
        Ok(())
    }

    #[tokio::test]
    async fn logs_go_only_to_a_request_that_asked_for_them() -> Result<(), TestError> {
        let mut h = start()?;
        let quiet = h
            .client
            .call_tool(1, modern(json!({ "name": "chatty" })))
            .await?;
        assert_eq!(quiet["id"], json!(1));
        let mut meta = modern_meta(json!({}));
        meta["io.modelcontextprotocol/logLevel"] = json!("info");
        h.client
            .start_call(2, json!({ "name": "chatty", "_meta": meta }))
            .await?;
        assert_eq!(
            h.client.next().await?["method"],
            json!("notifications/message")
        );
        assert_eq!(h.client.next().await?["id"], json!(2));
        Ok(())
    }

    /// A listen's filter is required and checked: one that is missing or
    /// malformed is refused (-32602) rather than read as asking for less
    /// than was written.
    #[tokio::test]
    async fn a_listen_without_a_well_formed_filter_is_refused() -> Result<(), TestError> {
        let mut h = start()?;
        let filters = [
            None,
            Some(json!("x")),
            Some(json!({ "toolsListChanged": "yes" })),
            Some(json!({ "resourceSubscriptions": "test://static-text" })),
            Some(json!({ "toolsListChanged": true, "resourceSubscriptions": [1, { "a": 2 }] })),
            Some(json!({ "taskIds": [7] })),
        ];
        for (n, filter) in filters.into_iter().enumerate() {
            let mut params = json!({ "_meta": modern_meta(json!({})) });
            if let Some(filter) = &filter {
                params["notifications"] = filter.clone();
            }
            let id = i64::try_from(n)?;
            let refused = h.client.request(id, "subscriptions/listen", params).await?;
            assert_eq!(code(&refused), Some(-32602), "{filter:?}: {refused}");
        }
        // A member this revision does not name is passed over.
        h.client
            .send(
                json!({ "jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen",
                "params": { "_meta": modern_meta(json!({})),
                            "notifications": { "toolsListChanged": true, "later": 1 } } }),
            )
            .await?;
        let ack = h.client.next().await?;
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "toolsListChanged": true }),
            "{ack}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_listen_stream_is_acknowledged_then_tagged_with_its_id() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .send(
                json!({ "jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                "params": { "_meta": modern_meta(json!({})),
                            "notifications": { "toolsListChanged": true } } }),
            )
            .await?;
        let ack = h.client.next().await?;
        assert_eq!(
            ack["method"],
            json!("notifications/subscriptions/acknowledged")
        );
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "toolsListChanged": true })
        );
        h.server.prompts_changed();
        h.server.tools_changed();
        let note = h.client.next().await?;
        assert_eq!(
            note["method"],
            json!("notifications/tools/list_changed"),
            "prompt changes were not asked for"
        );
        assert_eq!(
            note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            json!("sub-1")
        );
        h.client.cancel(json!({ "requestId": "sub-1" })).await?;
        let pong = h.client.request(9, "tools/list", modern(json!({}))).await?;
        assert_eq!(pong["id"], json!(9));
        Ok(())
    }

    #[tokio::test]
    async fn a_burst_of_changes_is_told_once_per_list() -> Result<(), TestError> {
        let mut h = start()?;
        h.client
            .send(
                json!({ "jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                "params": { "_meta": modern_meta(json!({})),
                            "notifications": { "toolsListChanged": true,
                                               "promptsListChanged": true } } }),
            )
            .await?;
        let ack = h.client.next().await?;
        assert_eq!(
            ack["method"],
            json!("notifications/subscriptions/acknowledged")
        );
        // On this one-thread runtime the listen runs only once the burst
        // is over, so it finds all of it waiting.
        for _ in 0..100 {
            h.server.tools_changed();
            h.server.prompts_changed();
        }
        let mut told = Vec::new();
        for id in [9, 10] {
            if id == 10 {
                h.client.cancel(json!({ "requestId": "sub-1" })).await?;
            }
            h.client
                .send(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list",
                              "params": modern(json!({})) }))
                .await?;
            loop {
                let message = h.client.next().await?;
                if message["id"] == json!(id) {
                    break;
                }
                told.push(message["method"].clone());
            }
        }
        assert_eq!(
            told,
            [
                json!("notifications/tools/list_changed"),
                json!("notifications/prompts/list_changed")
            ]
        );
        Ok(())
    }
}

mod visibility {
    use super::*;

    fn request(id: i64, method: &str, params: Value) -> Request {
        Request {
            id: RequestId::Number(id),
            method: method.to_owned(),
            params: Some(params),
        }
    }

    fn with_auth(auth: AuthContext) -> RequestContext {
        RequestContext {
            auth,
            ..RequestContext::default()
        }
    }

    #[tokio::test]
    async fn a_scoped_tool_is_invisible_and_uncallable_without_its_scope() -> Result<(), TestError>
    {
        let h = start()?;
        let connection = h.server.connect(
            TransportKind::Stdio,
            Arc::new(NoExchange),
            Arc::new(NullSink),
        );
        let meta = modern_meta(json!({}));
        let names = |result: &Value| -> Vec<String> {
            result["tools"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(|t| t["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };

        let anonymous = connection
            .handle(
                request(1, "tools/list", json!({ "_meta": meta })),
                RequestContext::default(),
            )
            .await
            .map_err(|e| e.message)?;
        assert!(!names(&anonymous).contains(&"admin".to_owned()));
        let refused = connection
            .handle(
                request(2, "tools/call", json!({ "name": "admin", "_meta": meta })),
                RequestContext::default(),
            )
            .await;
        assert!(refused.is_err_and(|e| e.code.0 == -32602));

        let admin = AuthContext::principal(AuthClaims {
            sub: Some("root".to_owned()),
            scopes: vec!["admin".to_owned()],
            ..AuthClaims::default()
        });
        let listed = connection
            .handle(
                request(3, "tools/list", json!({ "_meta": meta })),
                with_auth(admin.clone()),
            )
            .await
            .map_err(|e| e.message)?;
        assert!(names(&listed).contains(&"admin".to_owned()));
        let called = connection
            .handle(
                request(4, "tools/call", json!({ "name": "admin", "_meta": meta })),
                with_auth(admin),
            )
            .await
            .map_err(|e| e.message)?;
        assert_eq!(called["content"][0]["text"], json!("secret"));
        Ok(())
    }

    fn person(sub: Option<&str>, client: &str) -> AuthContext {
        AuthContext::principal(AuthClaims {
            sub: sub.map(str::to_owned),
            client_id: Some(client.to_owned()),
            ..AuthClaims::default()
        })
    }

    /// A state sealed for one caller is refused for another, including a
    /// principal with no `sub` (who must not bind like nobody at all).
    #[tokio::test]
    async fn a_request_state_is_bound_to_the_caller_who_received_it() -> Result<(), TestError> {
        let h = start()?;
        let connection = h.server.connect(
            TransportKind::Stdio,
            Arc::new(NoExchange),
            Arc::new(NullSink),
        );
        let meta = modern_meta(json!({ "elicitation": {} }));
        let alice = person(Some("alice"), "app");
        let first = connection
            .handle(
                request(
                    1,
                    "tools/call",
                    json!({ "name": "stateful", "_meta": meta }),
                ),
                with_auth(alice.clone()),
            )
            .await
            .map_err(|e| e.message)?;
        let state = first["requestState"].clone();
        let retry = |auth: AuthContext| {
            let params = json!({ "name": "stateful", "_meta": meta, "requestState": state,
                "inputResponses": { "go": { "action": "accept", "content": {} } } });
            connection.handle(request(2, "tools/call", params), with_auth(auth))
        };
        for stranger in [
            person(Some("bob"), "app"),
            person(None, "app"),
            AuthContext::anonymous(),
        ] {
            let refused = retry(stranger).await;
            assert!(refused.is_err_and(|e| e.code.0 == -32602));
        }
        let accepted = retry(alice).await.map_err(|e| e.message)?;
        assert_eq!(accepted["content"][0]["text"], json!("state \"kept\""));
        Ok(())
    }
}

/// On stdio the pipe is the client's flow control: a burst past the
/// in-flight cap waits in the pipe and is answered in full, never refused.
mod backpressure {
    use super::*;

    /// A harness taking at most `max_in_flight` requests at once, its
    /// client initialized at 2025-06-18 declaring `capabilities`.
    async fn capped(max_in_flight: usize, capabilities: Value) -> Result<Harness, TestError> {
        let mut h = start_with(StdioOptions {
            max_in_flight,
            ..StdioOptions::default()
        })?;
        h.client.initialize("2025-06-18", capabilities).await?;
        Ok(h)
    }

    #[tokio::test]
    async fn a_burst_past_the_in_flight_cap_is_answered_in_full() -> Result<(), TestError> {
        let mut h = capped(4, json!({})).await?;
        // 4 held calls fill the table; 60 more are pipelined behind them.
        for id in 1..=4 {
            h.client.start_call(id, json!({ "name": "wait" })).await?;
        }
        for id in 5..=64 {
            h.client.start_call(id, json!({ "name": "count" })).await?;
        }
        // Nothing past the cap is refused while the held calls run ...
        tokio::time::sleep(Duration::from_millis(100)).await;
        // ... and once they are released every request is answered.
        for _ in 0..4 {
            h.gate.notify_one();
        }
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 64 {
            let reply = h.client.next_reply().await?;
            assert!(reply.get("result").is_some(), "refused: {reply}");
            answered.insert(reply["id"].as_i64().ok_or("no id")?);
        }
        assert_eq!(answered.len(), 64);
        Ok(())
    }

    /// A batch holds at most the in-flight cap: one larger runs nothing, and
    /// each of its requests is refused under its own id rather than left
    /// unanswered.
    #[tokio::test]
    async fn a_batch_past_the_in_flight_cap_refuses_each_request() -> Result<(), TestError> {
        let mut h = start_with(StdioOptions {
            max_in_flight: 2,
            ..StdioOptions::default()
        })?;
        h.client.initialize("2025-03-26", json!({})).await?;
        let batch: Vec<Value> = (1..=3)
            .map(|id| {
                json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": { "name": "count" } })
            })
            .collect();
        h.client.send(Value::Array(batch)).await?;
        let answers = h.client.next().await?;
        let refused: Vec<(&Value, Option<i64>)> = answers
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (&r["id"], code(r)))
            .collect();
        let expected: Vec<(Value, Option<i64>)> =
            (1..=3).map(|id| (json!(id), Some(-32600))).collect();
        assert_eq!(
            refused,
            expected.iter().map(|(id, c)| (id, *c)).collect::<Vec<_>>(),
            "{answers}"
        );
        assert_eq!(h.calls.load(Ordering::SeqCst), 0, "nothing ran");
        // Within the cap a batch runs.
        let batch: Vec<Value> = (4..=5)
            .map(|id| {
                json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                              "params": { "name": "count" } })
            })
            .collect();
        h.client.send(Value::Array(batch)).await?;
        let answers = h.client.next().await?;
        assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_stops_the_reading_of_its_requests() -> Result<(), TestError>
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const SENT: usize = 2_000;
        let calls = Arc::new(AtomicUsize::new(0));
        let server = server(&calls, &Arc::new(Notify::new()))?;
        // A pipe of 4 KiB each way: a few dozen answers fill it.
        let (client_end, server_end) = tokio::io::duplex(4096);
        let (server_read, server_write) = tokio::io::split(server_end);
        let options = StdioOptions {
            max_in_flight: 4,
            queue: 8,
            ..StdioOptions::default()
        };
        let _serving = tokio::spawn(stdio::serve(server, server_read, server_write, options));
        let (mut client_read, mut client_write) = tokio::io::split(client_end);
        let _writing = tokio::spawn(async move {
            let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n".to_vec();
            for id in 1..=SENT {
                input.extend_from_slice(
                    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"count\"}}}}\n").as_bytes(),
                );
            }
            client_write.write_all(&input).await
        });
        // Nothing is read until the count of calls run stops moving.
        let mut last = usize::MAX;
        let mut still = 0;
        while still < 5 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = calls.load(Ordering::SeqCst);
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        // What ran is what the pipe, the queue and the caps hold, not
        // everything sent: the rest waits in the client's pipe.
        assert!(last < 500, "{last} of {SENT} calls ran with nobody reading");
        // Once read, every request is answered.
        let mut read = Vec::new();
        let mut buffer = vec![0_u8; 64 * 1024];
        while read.iter().filter(|b| **b == b'\n').count() < SENT + 1 {
            let n = client_read.read(&mut buffer).await?;
            if n == 0 {
                break;
            }
            read.extend_from_slice(buffer.get(..n).unwrap_or_default());
        }
        assert_eq!(calls.load(Ordering::SeqCst), SENT);
        Ok(())
    }

    #[tokio::test]
    async fn answers_to_questions_are_read_while_requests_wait() -> Result<(), TestError> {
        let mut h = capped(2, json!({ "elicitation": {} })).await?;
        // Two calls that each ask the client, then as many queued behind
        // them as may wait: the client's answers must still get through to
        // the first two.
        for id in 1..=2 {
            h.client.start_call(id, json!({ "name": "ask" })).await?;
        }
        for id in 3..=4 {
            h.client.start_call(id, json!({ "name": "count" })).await?;
        }
        let mut results = 0;
        while results < 4 {
            let message = h.client.next().await?;
            if message["method"] == json!("elicitation/create") {
                h.client
                    .answer(
                        &message["id"],
                        json!({ "action": "accept", "content": { "name": "Ada" } }),
                    )
                    .await?;
            } else if message.get("id").is_some() {
                assert!(message.get("result").is_some(), "{message}");
                results += 1;
            }
        }
        Ok(())
    }
}

/// A tool whose argument type is named once: its schema, its decoding and
/// its structured output all come from Rust types.
mod typed_tools {
    use protocol_droid::prelude::{JsonSchema, Structured};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    struct Divide {
        /// The dividend.
        a: i64,
        /// The divisor.
        b: i64,
    }

    #[derive(Serialize, JsonSchema)]
    struct Quotient {
        quotient: i64,
        remainder: i64,
    }

    fn divider(runs: &Arc<AtomicUsize>) -> Result<Server, TestError> {
        let server = Server::builder("typed", "1.0.0").build()?;
        let runs = Arc::clone(runs);
        server.add_typed_tool(
            ToolSpec::new("divide", "Divides a by b"),
            move |Divide { a, b }, _call| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    if b == 0 {
                        return Err(CallError::invalid_params("b must not be zero"));
                    }
                    Ok(Structured(Quotient {
                        quotient: a / b,
                        remainder: a % b,
                    }))
                }
            },
        );
        Ok(server)
    }

    async fn call(client: &mut Client, id: i64, arguments: Value) -> Result<Value, TestError> {
        client
            .call_tool(id, json!({ "name": "divide", "arguments": arguments }))
            .await
    }

    #[tokio::test]
    async fn the_schemas_a_client_is_shown_are_the_types_the_handler_reads() -> Result<(), TestError>
    {
        let server = divider(&Arc::default())?;
        let mut client = connect(&server, StdioOptions::default());
        client.initialize("2025-06-18", json!({})).await?;

        let listed = client.request(1, "tools/list", json!({})).await?;
        let tool = &listed["result"]["tools"][0];
        assert_eq!(tool["inputSchema"]["required"], json!(["a", "b"]));
        assert_eq!(
            tool["inputSchema"]["properties"]["a"]["type"],
            json!("integer")
        );
        assert_eq!(
            tool["inputSchema"]["properties"]["b"]["description"],
            json!("The divisor.")
        );
        assert_eq!(
            tool["outputSchema"]["required"],
            json!(["quotient", "remainder"])
        );
        assert!(tool["inputSchema"].get("title").is_none());
        Ok(())
    }

    #[tokio::test]
    async fn arguments_are_read_into_the_type_and_the_output_is_structured() -> Result<(), TestError>
    {
        let runs = Arc::new(AtomicUsize::new(0));
        let server = divider(&runs)?;
        let mut client = connect(&server, StdioOptions::default());
        client.initialize("2025-06-18", json!({})).await?;

        let reply = call(&mut client, 1, json!({ "a": 17, "b": 5 })).await?;
        let result = &reply["result"];
        assert_eq!(
            result["structuredContent"],
            json!({ "quotient": 3, "remainder": 2 })
        );
        // A client that reads no structured output gets the same as text.
        let text = result["content"][0]["text"]
            .as_str()
            .ok_or("a text block")?;
        assert_eq!(
            serde_json::from_str::<Value>(text)?,
            result["structuredContent"]
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        Ok(())
    }

    #[tokio::test]
    async fn arguments_that_do_not_fit_are_a_tool_error_and_never_reach_the_handler()
    -> Result<(), TestError> {
        let runs = Arc::new(AtomicUsize::new(0));
        let server = divider(&runs)?;
        let mut client = connect(&server, StdioOptions::default());
        client.initialize("2025-06-18", json!({})).await?;

        let reply = call(&mut client, 1, json!({ "a": "seventeen", "b": 5 })).await?;
        assert_eq!(reply["result"]["isError"], json!(true), "{reply}");
        let said = reply["result"]["content"][0]["text"]
            .as_str()
            .ok_or("text")?;
        assert!(said.contains("invalid arguments"), "{said}");
        let missing = call(&mut client, 2, json!({ "a": 17 })).await?;
        assert_eq!(missing["result"]["isError"], json!(true), "{missing}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler never ran");

        // The handler's own refusal is still the protocol error it chose.
        let refused = call(&mut client, 3, json!({ "a": 1, "b": 0 })).await?;
        assert_eq!(code(&refused), Some(-32602), "{refused}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        Ok(())
    }

    #[derive(Deserialize, JsonSchema)]
    struct Contact {
        /// Your name.
        name: String,
        /// Your age, if you will say.
        age: Option<u8>,
    }

    #[tokio::test]
    async fn a_typed_form_is_asked_with_a_flat_schema_and_read_back_typed() -> Result<(), TestError>
    {
        use protocol_droid::prelude::Elicited;

        let server = Server::builder("typed", "1.0.0").build()?;
        server.add_tool(
            ToolSpec::new("greet", "Asks a name"),
            |call: Call| async move {
                Ok(
                    match call
                        .elicit_form::<Contact>("contact", "Who are you?")
                        .await?
                    {
                        Elicited::Accepted(Contact { name, age }) => {
                            ToolResult::text(format!("hello {name}, {}", age.unwrap_or_default()))
                        }
                        Elicited::Declined => ToolResult::text("declined"),
                        Elicited::Cancelled => ToolResult::text("cancelled"),
                    },
                )
            },
        );
        let mut client = connect(&server, StdioOptions::default());
        client
            .initialize("2025-06-18", json!({ "elicitation": {} }))
            .await?;
        client
            .start_call(1, json!({ "name": "greet", "arguments": {} }))
            .await?;

        let asked = client.next().await?;
        assert_eq!(asked["method"], json!("elicitation/create"), "{asked}");
        let schema = &asked["params"]["requestedSchema"];
        assert_eq!(schema["type"], json!("object"));
        assert_eq!(schema["required"], json!(["name"]));
        assert_eq!(
            schema["properties"]["age"]["type"],
            json!("integer"),
            "{schema}"
        );
        assert!(schema.get("$schema").is_none(), "{schema}");
        client
            .answer(
                &asked["id"],
                json!({ "action": "accept", "content": { "name": "Ada", "age": 36 } }),
            )
            .await?;

        let reply = client.next_reply().await?;
        assert_eq!(
            reply["result"]["content"][0]["text"],
            json!("hello Ada, 36"),
            "{reply}"
        );
        Ok(())
    }

    #[derive(Deserialize, JsonSchema)]
    struct Review {
        /// The code to review.
        code: String,
        /// What to look for.
        focus: Option<String>,
    }

    #[tokio::test]
    async fn a_text_resource_and_a_typed_prompt_are_as_short_as_a_tool() -> Result<(), TestError> {
        use protocol_droid::prelude::{PromptSpec, ResourceSpec};

        let server = Server::builder("typed", "1.0.0").build()?;
        let readme = ResourceSpec::new("notes://readme", "readme").mime_type("text/markdown");
        server.add_text_resource(readme, |_call| async { Ok("# Notes".to_owned()) });
        server.add_typed_prompt(
            PromptSpec::new("review", "Reviews code"),
            |Review { code, focus }, _call| async move {
                Ok(format!("Review {code} for {}", focus.unwrap_or_default()))
            },
        );
        let mut client = connect(&server, StdioOptions::default());
        client.initialize("2025-06-18", json!({})).await?;

        let read = client
            .request(1, "resources/read", json!({ "uri": "notes://readme" }))
            .await?;
        assert_eq!(
            read["result"]["contents"],
            json!([{ "uri": "notes://readme", "mimeType": "text/markdown", "text": "# Notes" }]),
            "{read}"
        );

        let listed = client.request(2, "prompts/list", json!({})).await?;
        assert_eq!(
            listed["result"]["prompts"][0]["arguments"],
            json!([
                { "name": "code", "description": "The code to review.", "required": true },
                { "name": "focus", "description": "What to look for.", "required": false },
            ]),
            "{listed}"
        );

        let got = client
            .request(
                3,
                "prompts/get",
                json!({ "name": "review", "arguments": { "code": "x = 1", "focus": "style" } }),
            )
            .await?;
        assert_eq!(
            got["result"]["messages"],
            json!([{ "role": "user", "content": { "type": "text", "text": "Review x = 1 for style" } }]),
            "{got}"
        );

        let missing = client
            .request(
                4,
                "prompts/get",
                json!({ "name": "review", "arguments": {} }),
            )
            .await?;
        assert_eq!(code(&missing), Some(-32602), "{missing}");
        Ok(())
    }
}

/// A tool the visibility hook hides is asked about once more, after the
/// catch-up hook has had its look, before the call is refused: what a
/// gateway instance not yet told of an activation made elsewhere relies on.
#[tokio::test]
async fn a_hidden_tool_is_granted_once_the_catch_up_hook_learns_of_it() -> Result<(), TestError> {
    use protocol_droid::application::server::{ToolAccess, ToolCatchUp, ToolVisibility};
    use std::sync::atomic::AtomicBool;

    let given = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&given);
    let visibility: ToolVisibility = Arc::new(move |_, _, _| {
        if seen.load(Ordering::SeqCst) {
            ToolAccess::Granted
        } else {
            ToolAccess::Hidden
        }
    });
    let server = Server::builder("catch-up", "1")
        .tool_visibility(visibility)
        .build()?;
    server.add_tool(ToolSpec::new("late", "Given elsewhere."), |_| async {
        Ok(ToolResult::text("served"))
    });
    let mut client = connect(&server, StdioOptions::default());
    client.initialize("2025-11-25", json!({})).await?;
    let call = json!({ "name": "late", "arguments": {} });

    // No hook: hidden is refused as unknown.
    let refused = client.call_tool(1, call.clone()).await?;
    assert_eq!(code(&refused), Some(-32602), "{refused}");

    // A hook that learns nothing: still refused, and it was asked.
    let asked = Arc::new(AtomicUsize::new(0));
    let (counted, learns) = (Arc::clone(&asked), Arc::clone(&given));
    let learning = Arc::new(AtomicBool::new(false));
    let learned = Arc::clone(&learning);
    let catch_up: ToolCatchUp = Arc::new(move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        let (learns, learned) = (Arc::clone(&learns), learned.load(Ordering::SeqCst));
        Box::pin(async move {
            if learned {
                learns.store(true, Ordering::SeqCst);
            }
            learned
        })
    });
    assert!(server.catch_up_tools_with(catch_up));
    let refused = client.call_tool(2, call.clone()).await?;
    assert_eq!(code(&refused), Some(-32602), "{refused}");
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // A hook that learns the tool was given: the same call is served.
    learning.store(true, Ordering::SeqCst);
    let served = client.call_tool(3, call).await?;
    assert_eq!(
        served["result"]["content"][0]["text"],
        json!("served"),
        "{served}"
    );
    Ok(())
}
