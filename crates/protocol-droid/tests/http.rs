//! The HTTP transports, driven over loopback as a client would drive them.
//!
//! Timeouts only stop a broken test from hanging; nothing asserts how long
//! anything took.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::time::Duration;

use protocol_droid::adapters::primary::http::{HttpOptions, HttpServer};
use protocol_droid::application::server::{Call, Server, ToolSpec};
use protocol_droid::domain::ir::ToolResult;
use serde_json::{Value, json};

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::{
    BOTH, LEGACY, MODERN, PATIENCE, Serving, TestError, add_ask_tool, add_sampler_tool,
    client_from, headers, initialize, legacy_session,
};

/// Counts the slow tool's completions: a cancelled call never completes.
static FINISHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Set by the `held` tool once it runs; it answers when `RELEASED` is told.
/// `held_too` is the same with its own pair, for another test.
static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RELEASED: tokio::sync::Notify = tokio::sync::Notify::const_new();
static HELD_TOO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RELEASED_TOO: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Waits until the tool setting `flag` runs, within [`PATIENCE`]; past it,
/// lets the tool go (`release`), so the test ends rather than hangs.
async fn held(
    flag: &std::sync::atomic::AtomicBool,
    release: &tokio::sync::Notify,
) -> Result<(), TestError> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !flag.load(std::sync::atomic::Ordering::SeqCst) {
        if tokio::time::Instant::now() > deadline {
            release.notify_one();
            return Err("the held tool never ran".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn server() -> Result<Server, TestError> {
    let server = Server::builder("http-test", "1.0.0").build()?;
    server.add_tool(
        ToolSpec::new("slow", "Reports progress, then takes its time."),
        |call: Call| async move {
            call.progress(0.0, None, None);
            tokio::time::sleep(Duration::from_millis(300)).await;
            FINISHED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(ToolResult::text("finished"))
        },
    );
    for (name, flag, release) in [
        ("held", &HELD, &RELEASED),
        ("held_too", &HELD_TOO, &RELEASED_TOO),
    ] {
        server.add_tool(
            ToolSpec::new(name, "Answers when the test says so."),
            move |_call: Call| async move {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                release.notified().await;
                Ok(ToolResult::text("released"))
            },
        );
    }
    server.add_tool(
        ToolSpec::new("park", "Holds its request open for a while."),
        |_call: Call| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok(ToolResult::text("parked"))
        },
    );
    server.add_tool(
        ToolSpec::new("echo", "Echoes its text."),
        |call: Call| async move {
            Ok(ToolResult::text(
                call.arg_str("text").unwrap_or_default().to_owned(),
            ))
        },
    );
    add_ask_tool(&server, "Who?");
    server.add_tool(
        ToolSpec::new("progress", "Reports progress."),
        |call: Call| async move {
            call.progress(1.0, Some(1.0), None);
            Ok(ToolResult::text("done"))
        },
    );
    add_sampler_tool(&server);
    server.add_tool(
        ToolSpec::new("polled", "Releases its stream, then answers."),
        |call: Call| async move {
            call.release_stream();
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(ToolResult::text("after the reconnect"))
        },
    );
    Ok(server)
}

struct Running {
    http: HttpServer,
    server: Server,
    base: String,
    client: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_with(options: HttpOptions) -> Result<Running, TestError> {
    let server = server()?;
    let Serving {
        http,
        base,
        client,
        stop,
    } = Serving::start(server.clone(), options).await?;
    Ok(Running {
        http,
        server,
        base,
        client,
        _stop: stop,
    })
}

async fn start() -> Result<Running, TestError> {
    start_with(HttpOptions::default()).await
}

/// The test server with the default options changed by `tune`.
async fn start_tuned(tune: impl FnOnce(&mut HttpOptions)) -> Result<Running, TestError> {
    let mut options = HttpOptions::default();
    tune(&mut options);
    start_with(options).await
}

impl Running {
    /// The head of the answer to `request`, sent as it is on a connection
    /// of its own (what an HTTP client library would not send: a request
    /// with no `Accept`, say), lower-cased. Read up to the blank line that
    /// ends it, so an answer that is a stream never ending still has one.
    async fn raw_head(&self, request: &str) -> Result<String, TestError> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let address = self.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut head = Vec::new();
        let mut byte = [0_u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let read = tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await??;
            if read == 0 {
                break;
            }
            head.extend_from_slice(&byte);
        }
        Ok(String::from_utf8_lossy(&head).to_ascii_lowercase())
    }

    /// POSTs `body` to `path` with exactly `headers`, none added.
    async fn post_raw(
        &self,
        path: &str,
        headers: &[(&'static str, &str)],
        body: String,
    ) -> Result<reqwest::Response, TestError> {
        Ok(self
            .client
            .post(format!("{}{path}", self.base))
            .headers(support::headers(headers)?)
            .body(body)
            .send()
            .await?)
    }

    /// POSTs `body` to `/mcp` as a client does (JSON, accepting JSON or
    /// events), with `extra` headers besides.
    async fn post(
        &self,
        extra: &[(&'static str, &str)],
        body: &str,
    ) -> Result<reqwest::Response, TestError> {
        let mut all = vec![("content-type", "application/json"), ("accept", BOTH)];
        all.extend_from_slice(extra);
        self.post_raw("/mcp", &all, body.to_owned()).await
    }

    /// POSTs `body` to `path`, another endpoint than `/mcp`, as a client
    /// does.
    async fn post_to(&self, path: &str, body: &Value) -> Result<reqwest::Response, TestError> {
        let json = [("content-type", "application/json"), ("accept", BOTH)];
        self.post_raw(path, &json, body.to_string()).await
    }

    /// The status a `method` request (id 1, no params) is answered with,
    /// posted with `extra` headers.
    async fn status_of(
        &self,
        method: &str,
        extra: &[(&'static str, &str)],
    ) -> Result<reqwest::StatusCode, TestError> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method });
        Ok(self.post(extra, &body.to_string()).await?.status())
    }

    /// GETs the event stream of `/mcp`, with `extra` headers besides the
    /// `Accept`.
    async fn stream(&self, extra: &[(&'static str, &str)]) -> Result<reqwest::Response, TestError> {
        let mut all = vec![("accept", "text/event-stream")];
        all.extend_from_slice(extra);
        Ok(self
            .client
            .get(format!("{}/mcp", self.base))
            .headers(headers(&all)?)
            .send()
            .await?)
    }

    async fn initialize(&self, version: &str, capabilities: Value) -> Result<String, TestError> {
        let body = initialize(0, version, &capabilities);
        let response = self.post(&[], &body.to_string()).await?;
        assert_eq!(response.status(), 200);
        let id = response
            .headers()
            .get("mcp-session-id")
            .ok_or("no session id")?
            .to_str()?
            .to_owned();
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII: {id}"
        );
        Ok(id)
    }

    async fn modern(
        &self,
        id: i64,
        method: &str,
        params: Value,
        name: Option<&str>,
    ) -> Result<reqwest::Response, TestError> {
        // Added to any `_meta` the caller gave (a progress token, say).
        let mut params = params;
        let meta = &mut params["_meta"];
        meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut extra = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(name) = name {
            extra.push(("mcp-name", name));
        }
        self.post(&extra, &body.to_string()).await
    }
}

/// A `tools/call` request with `params`.
fn tool_call(id: i64, params: &Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string()
}

/// A `notifications/cancelled` for request `id`.
fn cancelled(id: i64) -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id } })
}

/// Reads server-sent events off a streaming response.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

#[derive(Debug, Default)]
struct Sse {
    id: Option<String>,
    retry: Option<String>,
    data: Option<String>,
}

impl Events {
    fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next event, or `None` when the stream ends.
    async fn next(&mut self) -> Result<Option<Sse>, TestError> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if block.starts_with(':') {
                    continue;
                }
                let mut event = Sse::default();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        event.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("retry: ") {
                        event.retry = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        event.data = Some(v.to_owned());
                    }
                }
                return Ok(Some(event));
            }
            match tokio::time::timeout(PATIENCE, self.response.chunk()).await?? {
                Some(chunk) => self.buffer.push_str(std::str::from_utf8(&chunk)?),
                None => return Ok(None),
            }
        }
    }

    async fn next_json(&mut self) -> Result<Value, TestError> {
        loop {
            let event = self.next().await?.ok_or("the stream ended")?;
            if let Some(data) = event.data.filter(|d| !d.is_empty()) {
                return Ok(serde_json::from_str(&data)?);
            }
        }
    }
}

mod bad_input {
    use super::*;

    /// A request nested deeper than the parser goes is refused under its
    /// own id, as on stdio.
    #[tokio::test]
    async fn a_request_nested_too_deeply_is_refused_under_its_id() -> Result<(), TestError> {
        let s = start().await?;
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":{}1{}}}}}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let response = s.post(&[], &deep).await?;
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], json!(-32600), "{body}");
        assert_eq!(body["id"], json!(41), "{body}");
        Ok(())
    }

    #[tokio::test]
    async fn malformed_json_is_a_parse_error_with_400() -> Result<(), TestError> {
        let s = start().await?;
        let response = s.post(&[], "{\"jsonrpc\":").await?;
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], json!(-32700));
        assert_eq!(body["id"], Value::Null);
        Ok(())
    }

    #[tokio::test]
    async fn a_body_that_is_not_json_by_content_type_is_415() -> Result<(), TestError> {
        let s = start().await?;
        let plain = [("content-type", "text/plain"), ("accept", BOTH)];
        let response = s.post_raw("/mcp", &plain, "{}".to_owned()).await?;
        assert_eq!(response.status(), 415);
        // JSON is UTF-8: a body said to be in another charset is not read
        // as if it were.
        let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }).to_string();
        for charset in ["latin1", "\"utf-16\""] {
            let latin = format!("application/json; charset={charset}");
            let response = s.post(&[("content-type", latin.as_str())], &ping).await?;
            assert_eq!(response.status(), 415, "{charset}");
        }
        let utf8 = [("content-type", "application/json; charset=UTF-8")];
        assert_ne!(s.post(&utf8, &ping).await?.status(), 415);
        Ok(())
    }

    #[tokio::test]
    async fn an_encoded_body_is_415_rather_than_a_parse_error() -> Result<(), TestError> {
        let s = start().await?;
        let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" }).to_string();
        let gzip = [("content-encoding", "gzip")];
        assert_eq!(s.post(&gzip, &ping).await?.status(), 415);
        let identity = [("content-encoding", "identity")];
        assert_ne!(s.post(&identity, &ping).await?.status(), 415);
        Ok(())
    }

    #[tokio::test]
    async fn an_accept_naming_neither_json_nor_events_is_406_and_none_accepts_all()
    -> Result<(), TestError> {
        let s = start().await?;
        let html = [
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ];
        let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
        let response = s.post_raw("/mcp", &html, ping.to_string()).await?;
        assert_eq!(response.status(), 406);
        // No Accept at all accepts anything (RFC 9110 §12.5.1): answered.
        // Sent by hand, since an HTTP client library adds `Accept: */*`.
        let body =
            json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": { "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        } } })
            .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/list\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let head = s.raw_head(&request).await?;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        Ok(())
    }

    #[tokio::test]
    async fn an_oversized_body_is_413() -> Result<(), TestError> {
        let s = start_tuned(|o| o.max_body = 1024).await?;
        let padding = "x".repeat(4096);
        let body =
            json!({ "jsonrpc": "2.0", "id": 1, "method": "ping", "params": { "pad": padding } });
        let response = s.post(&[], &body.to_string()).await?;
        assert_eq!(response.status(), 413);
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_session_is_404() -> Result<(), TestError> {
        let s = start().await?;
        let unknown = [("mcp-session-id", "no-such-session")];
        assert_eq!(s.status_of("ping", &unknown).await?, 404);
        Ok(())
    }

    #[tokio::test]
    async fn a_request_without_a_session_after_the_handshake_is_400() -> Result<(), TestError> {
        let s = start().await?;
        let legacy = [("mcp-protocol-version", LEGACY)];
        assert_eq!(s.status_of("tools/list", &legacy).await?, 400);
        Ok(())
    }

    /// A 2026-07-28 `tools/call` of `echo`, numbered `id`, as JSON text.
    fn modern_echo(id: u64) -> String {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": { "text": "x" },
            "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                       "io.modelcontextprotocol/clientCapabilities": {} } } })
        .to_string()
    }

    #[tokio::test]
    async fn headers_that_disagree_with_the_body_are_header_mismatch() -> Result<(), TestError> {
        let s = start().await?;
        let body = modern_echo(1);
        for extra in [
            vec![
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/list"),
                ("mcp-name", "echo"),
            ],
            vec![
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "other"),
            ],
            vec![
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
            ],
            vec![
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "=?base64?!!!?="),
            ],
        ] {
            let response = s.post(&extra, &body).await?;
            assert_eq!(response.status(), 400, "{extra:?}");
            let reply: Value = response.json().await?;
            assert_eq!(reply["error"]["code"], json!(-32020), "{extra:?}");
            assert_eq!(reply["id"], json!(1), "the error names the request");
            // Said as it is: a value that is there but unreadable is not
            // called missing.
            let message = reply["error"]["message"].as_str().unwrap_or_default();
            let sent_name = extra.iter().any(|(name, _)| *name == "mcp-name");
            assert_eq!(!message.contains("required"), sent_name, "{message}");
        }
        // A header that is there but not text is said to be so, not missing.
        let mut headers = headers(&[
            ("content-type", "application/json"),
            ("accept", BOTH),
            ("mcp-protocol-version", MODERN),
        ])?;
        headers.insert(
            "mcp-method",
            reqwest::header::HeaderValue::from_bytes(b"tools/c\xe9ll")?,
        );
        let reply: Value = s
            .client
            .post(format!("{}/mcp", s.base))
            .headers(headers)
            .body(body.clone())
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(reply["error"]["code"], json!(-32020), "{reply}");
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("Mcp-Method is not visible ASCII"),
            "{message}"
        );
        Ok(())
    }

    /// An MCP header (or `Content-Type`) sent twice is refused whichever
    /// copy agrees with the body: a proxy may read the other one, and route
    /// or allow by it.
    #[tokio::test]
    async fn an_mcp_header_sent_twice_is_refused() -> Result<(), TestError> {
        let s = start().await?;
        let body = modern_echo(7);
        let agreeing = [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ];
        for (name, other) in [
            ("mcp-name", "add"),
            ("mcp-method", "tools/list"),
            ("mcp-protocol-version", LEGACY),
        ] {
            for other_first in [false, true] {
                let mut headers =
                    headers(&[("content-type", "application/json"), ("accept", BOTH)])?;
                for (header, value) in agreeing {
                    if header == name && other_first {
                        headers.append(name, other.parse()?);
                    }
                    headers.append(header, value.parse()?);
                    if header == name && !other_first {
                        headers.append(name, other.parse()?);
                    }
                }
                let response = s
                    .client
                    .post(format!("{}/mcp", s.base))
                    .headers(headers)
                    .body(body.clone())
                    .send()
                    .await?;
                assert_eq!(response.status(), 400, "{name}: {other}");
                let reply: Value = response.json().await?;
                assert_eq!(reply["id"], json!(7), "{reply}");
                let message = reply["error"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(name), "{message}");
            }
        }
        // Two Content-Types: which says how the body reads is not sure.
        let mut typed = headers(&[("accept", BOTH)])?;
        for (header, value) in agreeing {
            typed.append(header, value.parse()?);
        }
        typed.append("content-type", "application/json".parse()?);
        typed.append("content-type", "text/plain".parse()?);
        let response = s
            .client
            .post(format!("{}/mcp", s.base))
            .headers(typed)
            .body(body.clone())
            .send()
            .await?;
        assert_eq!(response.status(), 400);
        let reply: Value = response.json().await?;
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("content-type"), "{reply}");
        // A session named twice, on a stream's GET as on a POST.
        let mut twice = headers(&[("accept", "text/event-stream")])?;
        twice.append("mcp-session-id", "one".parse()?);
        twice.append("mcp-session-id", "two".parse()?);
        let response = s
            .client
            .get(format!("{}/mcp", s.base))
            .headers(twice)
            .send()
            .await?;
        assert_eq!(response.status(), 400);
        Ok(())
    }

    #[tokio::test]
    async fn a_foreign_host_or_origin_is_403() -> Result<(), TestError> {
        let s = start().await?;
        let foreign_host = [("host", "evil.example.com")];
        assert_eq!(s.status_of("ping", &foreign_host).await?, 403);
        let foreign_origin = [("origin", "http://evil.example.com")];
        assert_eq!(s.status_of("ping", &foreign_origin).await?, 403);
        let local_origin = [("origin", "http://localhost:5173")];
        assert_ne!(s.status_of("ping", &local_origin).await?, 403);
        Ok(())
    }

    /// The status line of `head` (a request without a body) sent as it is.
    async fn raw_status(s: &Running, head: &str) -> Result<String, TestError> {
        let reply = s.raw_head(head).await?;
        Ok(reply.lines().next().unwrap_or_default().to_owned())
    }

    #[tokio::test]
    async fn two_hosts_or_origins_or_a_foreign_absolute_target_are_refused() -> Result<(), TestError>
    {
        let s = start().await?;
        let get = |target: &str, headers: &str| {
            format!(
                "GET {target} HTTP/1.1\r\n{headers}Accept: text/event-stream\r\nConnection: close\r\n\r\n"
            )
        };
        // Whichever comes first, two of either header leave no one answer.
        for headers in [
            "Host: 127.0.0.1\r\nHost: evil.example.com\r\n",
            "Host: evil.example.com\r\nHost: 127.0.0.1\r\n",
            "Host: 127.0.0.1\r\nOrigin: http://localhost\r\nOrigin: http://evil.example.com\r\n",
        ] {
            let status = raw_status(&s, &get("/healthz", headers)).await?;
            assert!(status.contains(" 400 "), "{headers:?}: {status}");
        }
        // An absolute-form target's authority stands in for Host.
        let status = raw_status(
            &s,
            &get("http://evil.example.com/healthz", "Host: 127.0.0.1\r\n"),
        )
        .await?;
        assert!(status.contains(" 403 "), "{status}");
        let status = raw_status(&s, &get("/healthz", "Host: 127.0.0.1\r\n")).await?;
        assert!(status.contains(" 200 "), "{status}");
        Ok(())
    }
}

mod legacy {
    use super::*;

    #[tokio::test]
    async fn a_session_answers_until_deleted_and_then_is_404() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let body = tool_call(1, &json!({ "name": "echo", "arguments": { "text": "hi" } }));
        let pair = legacy_session(&session);
        let reply: Value = s.post(&pair, &body).await?.json().await?;
        assert_eq!(reply["result"]["content"][0]["text"], json!("hi"));
        let deleted = s
            .client
            .delete(format!("{}/mcp", s.base))
            .headers(headers(&[("mcp-session-id", session.as_str())])?)
            .send()
            .await?;
        assert_eq!(deleted.status(), 200);
        assert_eq!(s.post(&pair, &body).await?.status(), 404);
        Ok(())
    }

    #[tokio::test]
    async fn a_question_rides_the_calls_stream_and_the_answer_comes_back_by_post()
    -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({ "elicitation": {} })).await?;
        let pair = legacy_session(&session);
        let call = tool_call(7, &json!({ "name": "ask" }));
        let response = s.post(&pair, &call).await?;
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        let mut events = Events::new(response);
        let asked = events.next_json().await?;
        assert_eq!(asked["method"], json!("elicitation/create"));
        let answer = json!({ "jsonrpc": "2.0", "id": asked["id"].clone(),
            "result": { "action": "accept", "content": { "name": "ada" } } });
        assert_eq!(s.post(&pair, &answer.to_string()).await?.status(), 202);
        let reply = events.next_json().await?;
        assert_eq!(reply["id"], json!(7));
        assert_eq!(reply["result"]["content"][0]["text"], json!("hello ada"));
        Ok(())
    }

    /// An answer the server cannot read (neither a result nor an error,
    /// nested too deep, or so inside a 2025-03-26 batch) fails the question
    /// it names at once, as on stdio, rather than leave the call waiting
    /// until the question times out; the POST is refused under no id, the
    /// id being the server's own.
    #[tokio::test]
    async fn an_unreadable_answer_fails_its_question_at_once() -> Result<(), TestError> {
        let malformed = |id: &Value| {
            json!({ "jsonrpc": "2.0", "id": id.clone(),
                "result": { "action": "accept" }, "error": { "code": 1, "message": "x" } })
            .to_string()
        };
        let too_deep = |id: &Value| {
            format!(
                r#"{{"jsonrpc":"2.0","result":{{"action":"accept","content":{{"a":{}{}}}}},"id":{id}}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
        };
        let batched = |id: &Value| format!("[{}]", malformed(id));
        // An answer made for the question's id.
        type Answer<'a> = &'a dyn Fn(&Value) -> String;
        // Each refused with 400, but a batch's answer is the batch's array.
        let cases: [(&str, Answer<'_>, u16); 3] = [
            ("2025-11-25", &malformed, 400),
            ("2025-11-25", &too_deep, 400),
            ("2025-03-26", &batched, 200),
        ];
        for (revision, unreadable, expected) in cases {
            let s = start().await?;
            let session = s.initialize(revision, json!({ "sampling": {} })).await?;
            let pair = [("mcp-session-id", session.as_str())];
            let call = tool_call(7, &json!({ "name": "sampler" }));
            let mut events = Events::new(s.post(&pair, &call).await?);
            let asked = events.next_json().await?;
            assert_eq!(asked["method"], json!("sampling/createMessage"), "{asked}");
            let refused = s.post(&pair, &unreadable(&asked["id"])).await?;
            let status = refused.status();
            let refusal: Value = refused.json().await?;
            let refusal = refusal
                .as_array()
                .and_then(|a| a.first())
                .unwrap_or(&refusal);
            assert_eq!(
                (status.as_u16(), &refusal["id"]),
                (expected, &Value::Null),
                "{revision}: {refusal}"
            );
            let reply = events.next_json().await?;
            assert_eq!(reply["id"], json!(7), "{revision}: {reply}");
            assert!(
                reply.to_string().contains("could not be read"),
                "{revision}: {reply}"
            );
        }
        Ok(())
    }

    /// A message goes on one stream only: a resume takes its stream over
    /// from the response it was opened for, and a later resume from an
    /// earlier one, so the answer reaches the latest resume alone and the
    /// others end without it.
    #[tokio::test]
    async fn the_latest_resume_of_a_stream_alone_carries_what_follows() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({ "elicitation": {} })).await?;
        let pair = legacy_session(&session);
        let mut original = Events::new(
            s.post(&pair, &tool_call(7, &json!({ "name": "ask" })))
                .await?,
        );
        // The question (after the priming event), with the id a resume
        // starts after.
        let mut asked = original.next().await?.ok_or("no question")?;
        while asked.data.as_deref().is_none_or(str::is_empty) {
            asked = original.next().await?.ok_or("no question")?;
        }
        let last = asked.id.ok_or("no event id")?;
        let question: Value = serde_json::from_str(asked.data.as_deref().unwrap_or_default())?;
        assert_eq!(question["method"], json!("elicitation/create"));
        let resuming = [
            ("mcp-session-id", session.as_str()),
            ("last-event-id", last.as_str()),
        ];
        // Each taken over once its response has come.
        let mut earlier = Events::new(s.stream(&resuming).await?);
        let mut latest = Events::new(s.stream(&resuming).await?);
        let answer = json!({ "jsonrpc": "2.0", "id": question["id"].clone(),
            "result": { "action": "accept", "content": { "name": "ada" } } });
        assert_eq!(s.post(&pair, &answer.to_string()).await?.status(), 202);
        let reply = latest.next_json().await?;
        assert_eq!(reply["id"], json!(7), "{reply}");
        assert_eq!(reply["result"]["content"][0]["text"], json!("hello ada"));
        for (name, events) in [
            ("the response", &mut original),
            ("the earlier resume", &mut earlier),
        ] {
            while let Some(event) = events.next().await? {
                assert!(
                    !event
                        .data
                        .as_deref()
                        .unwrap_or_default()
                        .contains("hello ada"),
                    "{name} carried the answer too"
                );
            }
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_released_stream_is_resumed_with_last_event_id() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let reply = polled_then_resumed(&s, &session, 9).await?;
        assert_eq!(reply["id"], json!(9));
        assert_eq!(
            reply["result"]["content"][0]["text"],
            json!("after the reconnect")
        );
        Ok(())
    }

    /// What one opener's sessions keep for resumption is bounded together:
    /// past that share a session's notifications are not kept (its live
    /// stream carried them), but its answers are, since a stream released
    /// for polling, or dropped, reaches them only by a resume.
    #[tokio::test]
    async fn past_the_openers_replay_share_notifications_go_and_answers_stay()
    -> Result<(), TestError> {
        let s = start_tuned(|options| options.replay_bytes_per_opener = 64).await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let pair = legacy_session(&session);
        // Read live: a progress notification, then the answer.
        let call = tool_call(
            8,
            &json!({ "name": "slow", "_meta": { "progressToken": "t" } }),
        );
        let mut events = Events::new(s.post(&pair, &call).await?);
        // The priming event (an id and empty data) names the stream.
        let priming = events.next().await?.ok_or("no priming event")?;
        let progress = events.next_json().await?;
        assert_eq!(progress["method"], json!("notifications/progress"));
        let answer = events.next_json().await?;
        assert_eq!(answer["id"], json!(8), "{answer}");
        let id = priming.id.ok_or("no event id")?;
        let (stream, _) = id.split_once('-').ok_or("an id without its stream")?;
        let replayed = Events::new(
            s.stream(&[
                ("mcp-session-id", session.as_str()),
                ("last-event-id", &format!("{stream}-0")),
            ])
            .await?,
        )
        .next_json()
        .await?;
        assert_eq!(
            replayed["id"],
            json!(8),
            "the notification was kept: {replayed}"
        );
        // Released for polling: the answer is there to resume to.
        let reply = polled_then_resumed(&s, &session, 9).await?;
        assert_eq!(reply["id"], json!(9), "{reply}");
        Ok(())
    }

    /// Calls `polled` as request `id` in `session`: its stream is primed
    /// (an id, a retry and empty data) and released; the first message a
    /// GET resuming from the priming event's id receives.
    async fn polled_then_resumed(s: &Running, session: &str, id: i64) -> Result<Value, TestError> {
        let call = tool_call(id, &json!({ "name": "polled" }));
        let mut events = Events::new(s.post(&legacy_session(session), &call).await?);
        let priming = events.next().await?.ok_or("no priming event")?;
        assert_eq!(priming.data.as_deref(), Some(""), "an id and empty data");
        assert!(priming.retry.is_some());
        let last = priming.id.ok_or("no event id")?;
        assert!(
            events.next().await?.is_none(),
            "the server closed the stream"
        );
        let resumed = s
            .stream(&[
                ("mcp-session-id", session),
                ("last-event-id", last.as_str()),
            ])
            .await?;
        Events::new(resumed).next_json().await
    }

    #[tokio::test]
    async fn list_changes_reach_the_sessions_own_stream() -> Result<(), TestError> {
        let s = start().await?;
        let (_events, note) = listening_session(&s).await?;
        assert_eq!(note["method"], json!("notifications/tools/list_changed"));
        Ok(())
    }

    /// A GET with no Accept at all takes anything: its session's stream is
    /// opened. Sent by hand, since an HTTP client library adds
    /// `Accept: */*`.
    #[tokio::test]
    async fn a_get_naming_no_accept_opens_the_sessions_stream() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let request = format!(
            "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nMcp-Session-Id: {session}\r\n\
             MCP-Protocol-Version: {LEGACY}\r\n\r\n"
        );
        let head = s.raw_head(&request).await?;
        assert!(
            head.starts_with("http/1.1 200") && head.contains("content-type: text/event-stream"),
            "{head}"
        );
        Ok(())
    }

    /// A legacy session with its GET stream open: the stream, and the first
    /// tool list change heard on it.
    async fn listening_session(s: &Running) -> Result<(Events, Value), TestError> {
        let session = s.initialize(LEGACY, json!({})).await?;
        let stream = s.stream(&[("mcp-session-id", session.as_str())]).await?;
        assert_eq!(stream.status(), 200);
        let mut events = Events::new(stream);
        // The GET may still be on its way: announce until it is heard.
        let announcer = {
            let server = s.server.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    server.tools_changed();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let note = events.next_json().await;
        announcer.abort();
        Ok((events, note?))
    }

    /// A change a full stream cannot take is owed, not dropped: when no
    /// later change comes to repeat it, the client still hears it once it
    /// reads again.
    #[tokio::test]
    async fn a_list_change_a_full_stream_could_not_take_is_said_once_there_is_room()
    -> Result<(), TestError> {
        let s = start().await?;
        let (mut events, _heard) = listening_session(&s).await?;
        // Unread, the stream fills: its queues, then the socket's buffers.
        // Fewer a round than the server's backlog of changes, so the session
        // hears each.
        for _ in 0..1_000 {
            for _ in 0..250 {
                s.server.tools_changed();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        s.server.prompts_changed();
        let mut read = 0_usize;
        loop {
            let note = tokio::time::timeout(Duration::from_secs(10), events.next_json())
                .await
                .map_err(|_| format!("no prompt list change after {read} notifications"))??;
            read += 1;
            if note["method"] == json!("notifications/prompts/list_changed") {
                break;
            }
            assert_eq!(note["method"], json!("notifications/tools/list_changed"));
        }
        // Fewer than were announced: the stream was full, so the prompt
        // list's change came through being owed, not through room.
        assert!(read < 250_000, "the stream never filled ({read} read)");
        Ok(())
    }

    #[tokio::test]
    async fn resuming_a_stream_that_never_existed_ends_at_once() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let resumed = s
            .stream(&[
                ("mcp-session-id", session.as_str()),
                ("last-event-id", "999-0"),
            ])
            .await?;
        assert!(
            Events::new(resumed).next().await?.is_none(),
            "nothing to replay, nothing to wait for"
        );
        // One that names no event, as text or not even as text, is refused
        // rather than read as no Last-Event-ID at all.
        for unreadable in [&b"999"[..], b"\xff\xfe"] {
            let mut asked = headers(&[
                ("accept", "text/event-stream"),
                ("mcp-session-id", session.as_str()),
            ])?;
            asked.insert(
                "last-event-id",
                reqwest::header::HeaderValue::from_bytes(unreadable)?,
            );
            let refused = s
                .client
                .get(format!("{}/mcp", s.base))
                .headers(asked)
                .send()
                .await?;
            assert_eq!(refused.status(), 400, "{unreadable:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_question_to_a_client_that_takes_json_only_fails_at_once() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({ "elicitation": {} })).await?;
        let call = tool_call(6, &json!({ "name": "ask" }));
        let json_only = [
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-session-id", session.as_str()),
        ];
        let response = s.post_raw("/mcp", &json_only, call).await?;
        // Not the 60 s exchange timeout: with no stream to ask on, asking
        // fails straight away (this client's PATIENCE is 10 s).
        let reply: Value = response.json().await?;
        assert_eq!(reply["id"], json!(6), "{reply}");
        assert_eq!(reply["error"]["code"], json!(-32603), "{reply}");
        assert_eq!(
            reply["error"]["message"],
            json!("this connection cannot carry server-initiated requests"),
            "{reply}"
        );
        Ok(())
    }

    /// A client that takes only an event stream is answered with one, the
    /// handshake too.
    #[tokio::test]
    async fn a_handshake_is_an_event_when_only_events_are_taken() -> Result<(), TestError> {
        let s = start().await?;
        let body = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": { "protocolVersion": LEGACY, "capabilities": {},
                        "clientInfo": { "name": "t", "version": "1" } } });
        let headers = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ];
        let response = s.post_raw("/mcp", &headers, body.to_string()).await?;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        let text = response.text().await?;
        assert!(text.contains("\"protocolVersion\""), "{text}");
        Ok(())
    }

    #[tokio::test]
    async fn a_failed_handshake_names_no_session() -> Result<(), TestError> {
        let s = start().await?;
        let body = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": { "protocolVersion": LEGACY } });
        let response = s.post(&[], &body.to_string()).await?;
        assert!(response.headers().get("mcp-session-id").is_none());
        assert_eq!(s.http.open_sessions(), 0);
        Ok(())
    }

    /// An unknown revision, and a known one that is not what the session
    /// negotiated, are both refused.
    #[tokio::test]
    async fn a_revision_header_other_than_the_sessions_is_400() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        for sent in ["1999-01-01", "2025-03-26"] {
            let pair = [
                ("mcp-session-id", session.as_str()),
                ("mcp-protocol-version", sent),
            ];
            assert_eq!(s.status_of("ping", &pair).await?, 400, "{sent}");
        }
        let pair = legacy_session(&session);
        assert_eq!(
            s.status_of("ping", &pair).await?,
            200,
            "its own revision passes"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_stream_without_polling_is_not_released_early() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-06-18", json!({})).await?;
        let pair = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        let call = tool_call(3, &json!({ "name": "polled" }));
        let reply: Value = s.post(&pair, &call).await?.json().await?;
        assert_eq!(
            reply["result"]["content"][0]["text"],
            json!("after the reconnect"),
            "2025-06-18 has no SSE polling: the answer comes on the open request"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_2025_03_26_batch_is_answered_as_an_array() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-03-26", json!({})).await?;
        let batch = json!([
            { "jsonrpc": "2.0", "id": 1, "method": "ping" },
            { "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "echo", "arguments": { "text": "b" } } },
        ]);
        let reply: Value = s
            .post(&[("mcp-session-id", session.as_str())], &batch.to_string())
            .await?
            .json()
            .await?;
        assert_eq!(reply.as_array().map(Vec::len), Some(2), "{reply}");
        Ok(())
    }

    /// What a batched call says before its answer (progress, a question to
    /// the client) rides the batch's own response, as an event stream that
    /// ends with the answers, as for a call sent alone.
    #[tokio::test]
    async fn a_batched_calls_progress_and_questions_ride_the_batchs_stream() -> Result<(), TestError>
    {
        let s = start().await?;
        let session = s
            .initialize("2025-03-26", json!({ "sampling": {} }))
            .await?;
        let pair = [("mcp-session-id", session.as_str())];
        let batch = json!([
            { "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "progress", "_meta": { "progressToken": "batched" } } },
            { "jsonrpc": "2.0", "id": 2, "method": "ping" },
        ]);
        let response = s.post(&pair, &batch.to_string()).await?;
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert_eq!(kind.as_deref(), Some("text/event-stream"));
        let mut events = Events::new(response);
        let said = events.next_json().await?;
        assert_eq!(said["method"], json!("notifications/progress"), "{said}");
        assert_eq!(said["params"]["progressToken"], json!("batched"), "{said}");
        let answers = events.next_json().await?;
        let ids: Vec<&Value> = answers
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| &a["id"])
            .collect();
        assert_eq!(ids, [&json!(1), &json!(2)], "{answers}");
        assert_eq!(answers[0]["result"]["content"][0]["text"], json!("done"));
        assert!(
            events.next().await?.is_none(),
            "the stream ends with the answers"
        );

        // A client that takes only JSON gets the answers as JSON all the same.
        let json_only = [
            ("mcp-session-id", session.as_str()),
            ("content-type", "application/json"),
            ("accept", "application/json"),
        ];
        let response = s.post_raw("/mcp", &json_only, batch.to_string()).await?;
        assert_eq!(response.status(), 200);
        let answers: Value = response.json().await?;
        assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");

        // A question (2025-03-26 can only sample): asked on the batch's
        // stream, answered by a POST.
        let batch = json!([
            { "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": "sampler" } },
        ]);
        let mut events = Events::new(s.post(&pair, &batch.to_string()).await?);
        let asked = events.next_json().await?;
        assert_eq!(asked["method"], json!("sampling/createMessage"), "{asked}");
        let answer = json!({ "jsonrpc": "2.0", "id": asked["id"].clone(),
            "result": { "role": "assistant", "model": "m",
                        "content": { "type": "text", "text": "42" } } });
        assert_eq!(s.post(&pair, &answer.to_string()).await?.status(), 202);
        let answers = events.next_json().await?;
        assert_eq!(
            answers[0]["result"]["content"][0]["text"],
            json!("model said 42"),
            "{answers}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_2026_request_in_a_batch_is_refused_and_the_rest_answered() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-03-26", json!({})).await?;
        let batch = json!([
            { "jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {
                "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                           "io.modelcontextprotocol/clientCapabilities": {} } } },
            { "jsonrpc": "2.0", "id": 2, "method": "ping" },
        ]);
        let reply: Value = s
            .post(&[("mcp-session-id", session.as_str())], &batch.to_string())
            .await?
            .json()
            .await?;
        let answers = reply.as_array().ok_or("an array")?;
        let by_id = |id: i64| answers.iter().find(|a| a["id"] == json!(id));
        let discover = by_id(1).ok_or("no answer to 1")?;
        assert_eq!(discover["error"]["code"], json!(-32600), "{reply}");
        assert!(
            by_id(2).is_some_and(|a| a.get("result").is_some()),
            "{reply}"
        );
        Ok(())
    }

    /// A burst of sessions opened and abandoned leaves nothing behind once
    /// the idle timeout has passed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ten_thousand_abandoned_sessions_are_all_reaped() -> Result<(), TestError> {
        let s = start_tuned(|o| o.idle_timeout = Duration::from_millis(300)).await?;
        let before = resident_kib();
        let mut opened = 0;
        for _ in 0..100 {
            let batch: Vec<_> = (0..100).map(|_| s.initialize(LEGACY, json!({}))).collect();
            for outcome in one_by_one(batch).await {
                outcome?;
                opened += 1;
            }
        }
        assert_eq!(opened, 10_000);
        let peak = resident_kib();
        assert!(s.http.open_sessions() > 0, "the burst was still open");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while s.http.open_sessions() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} sessions left",
                s.http.open_sessions()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let after = resident_kib();
        report(&format!(
            "resident memory: {before} KiB before, {peak} KiB at the peak, {after} KiB after reaping"
        ));
        Ok(())
    }
}

/// Awaits every future, one after another.
async fn one_by_one<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(futures.len());
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    for handle in handles {
        out.push(handle.await);
    }
    out
}

/// Reports a measured figure: printed, not asserted on.
#[allow(clippy::print_stderr)]
fn report(figure: &str) {
    eprintln!("{figure}");
}

/// This process's resident set, from procfs; 0 where there is none.
fn resident_kib() -> u64 {
    protocol_droid_test_support::resident_kib(std::process::id())
}

mod health {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use protocol_droid::adapters::primary::http::Readiness;

    use super::*;

    /// `/healthz` answers while the server serves; `/readyz` follows the
    /// readiness check it was given, with its reason when not ready.
    #[tokio::test]
    async fn probes_say_alive_and_follow_the_readiness_check() -> Result<(), TestError> {
        let ready = Arc::new(AtomicBool::new(false));
        let check = Arc::clone(&ready);
        let s = start_tuned(|options| {
            options.readiness = Some(Readiness::new(move || {
                if check.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("warming up".to_owned())
                }
            }));
        })
        .await?;
        let get = |path: &str| {
            let request = s.client.get(format!("{}{path}", s.base));
            async move {
                let response = request.send().await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await?;
                Ok::<_, TestError>((status, body))
            }
        };
        assert_eq!(get("/healthz").await?, (200, json!({ "status": "alive" })));
        assert_eq!(
            get("/readyz").await?,
            (
                503,
                json!({ "status": "not ready", "reason": "warming up" })
            )
        );
        ready.store(true, Ordering::SeqCst);
        assert_eq!(get("/readyz").await?, (200, json!({ "status": "ready" })));
        Ok(())
    }

    /// Without a check a server is ready once it listens.
    #[tokio::test]
    async fn a_server_without_a_check_is_ready() -> Result<(), TestError> {
        let s = start().await?;
        let response = s.client.get(format!("{}/readyz", s.base)).send().await?;
        assert_eq!(response.status(), 200);
        Ok(())
    }
}

mod shutdown {
    use super::*;

    /// An open event stream does not hold a shutdown open for ever.
    #[tokio::test]
    async fn shutting_down_ends_sessions_and_their_streams() -> Result<(), TestError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let http = HttpServer::new(server()?, HttpOptions::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(http.clone().serve(listener, async {
            let _ = stopped.await;
        }));
        let s = Running {
            http,
            server: server()?,
            base,
            client: reqwest::Client::builder().timeout(PATIENCE).build()?,
            _stop: tokio::sync::oneshot::channel().0,
        };
        let session = s.initialize(LEGACY, json!({})).await?;
        let stream = s.stream(&[("mcp-session-id", session.as_str())]).await?;
        let _ = stop.send(());
        tokio::time::timeout(PATIENCE, serving).await???;
        assert!(
            Events::new(stream).next().await?.is_none(),
            "the session stream was closed"
        );
        assert_eq!(s.http.open_sessions(), 0);
        Ok(())
    }
}

mod modern {
    use super::*;

    #[tokio::test]
    async fn errors_carry_the_statuses_the_revision_gives_them() -> Result<(), TestError> {
        let s = start().await?;
        let unknown = s.modern(1, "tools/frobnicate", json!({}), None).await?;
        assert_eq!(unknown.status(), 404);
        let removed = s.modern(2, "initialize", json!({}), None).await?;
        assert_eq!(removed.status(), 404);
        let body =
            json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {} }).to_string();
        let no_meta = s
            .post(
                &[
                    ("mcp-protocol-version", MODERN),
                    ("mcp-method", "tools/list"),
                ],
                &body,
            )
            .await?;
        assert_eq!(no_meta.status(), 400);
        let reply: Value = no_meta.json().await?;
        assert_eq!(reply["error"]["code"], json!(-32602));
        Ok(())
    }

    #[tokio::test]
    async fn a_2026_request_inside_a_session_is_checked_as_one() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let in_session = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", LEGACY),
        ];
        // Served statelessly whatever session it names, so its headers are
        // held to its body: here the revision, the method and the name all
        // disagree with it.
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": { "text": "x" },
            "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                       "io.modelcontextprotocol/clientCapabilities": {} } } });
        let mut extra = in_session.to_vec();
        extra.extend([("mcp-method", "tools/list"), ("mcp-name", "other")]);
        let response = s.post(&extra, &call.to_string()).await?;
        assert_eq!(response.status(), 400);
        let reply: Value = response.json().await?;
        assert_eq!(reply["error"]["code"], json!(-32020), "{reply}");
        // A method only 2026-07-28 has, without its `_meta`: that
        // revision's refusal, with its status.
        let discover = json!({ "jsonrpc": "2.0", "id": 2, "method": "server/discover" });
        let mut extra = in_session.to_vec();
        extra.push(("mcp-method", "server/discover"));
        let response = s.post(&extra, &discover.to_string()).await?;
        assert_eq!(response.status(), 400);
        let reply: Value = response.json().await?;
        assert_eq!(reply["error"]["code"], json!(-32602), "{reply}");
        // The session itself still answers as before.
        let ping = json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" });
        let response = s.post(&in_session, &ping.to_string()).await?;
        assert_eq!(response.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn a_listen_for_a_client_that_takes_no_event_stream_is_406_and_one_naming_none_streams()
    -> Result<(), TestError> {
        let s = start().await?;
        let listen = json!({ "jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
            "params": { "notifications": { "toolsListChanged": true },
                "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                           "io.modelcontextprotocol/clientCapabilities": {} } } });
        let headers = [
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "subscriptions/listen"),
        ];
        // Answered at once: as JSON, a listen would never end.
        let response = s.post_raw("/mcp", &headers, listen.to_string()).await?;
        assert_eq!(response.status(), 406);
        let reply: Value = response.json().await?;
        assert_eq!(reply["id"], json!("L"), "{reply}");
        // A client that names no Accept at all takes anything: its listen
        // is answered with the stream. Sent by hand, since an HTTP client
        // library adds `Accept: */*`.
        let body = listen.to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             MCP-Protocol-Version: {MODERN}\r\nMcp-Method: subscriptions/listen\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let head = s.raw_head(&request).await?;
        assert!(
            head.starts_with("http/1.1 200") && head.contains("content-type: text/event-stream"),
            "{head}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_client_that_takes_only_event_streams_gets_its_answer_as_one() -> Result<(), TestError>
    {
        let s = start().await?;
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": { "text": "streamed" },
            "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                       "io.modelcontextprotocol/clientCapabilities": {} } } });
        for accept in [
            "text/event-stream",
            "application/json;q=0, text/event-stream",
        ] {
            let headers = [
                ("content-type", "application/json"),
                ("accept", accept),
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
            ];
            let response = s.post_raw("/mcp", &headers, call.to_string()).await?;
            let kind = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(kind.starts_with("text/event-stream"), "{accept}: {kind}");
            let reply = Events::new(response).next_json().await?;
            assert_eq!(
                reply["result"]["content"][0]["text"],
                json!("streamed"),
                "{reply}"
            );
        }
        // A refusal keeps the status the revision gives it.
        let unknown = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "nope", "arguments": {},
            "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                       "io.modelcontextprotocol/clientCapabilities": {} } } });
        let headers = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
            ("mcp-name", "nope"),
        ];
        let response = s.post_raw("/mcp", &headers, unknown.to_string()).await?;
        assert_eq!(response.status(), 400);
        Ok(())
    }

    #[tokio::test]
    async fn get_and_delete_are_not_part_of_the_revision() -> Result<(), TestError> {
        let s = start().await?;
        let get = s.stream(&[("mcp-protocol-version", MODERN)]).await?;
        assert_eq!(get.status(), 405);
        let delete = s.client.delete(format!("{}/mcp", s.base)).send().await?;
        assert_eq!(delete.status(), 405);
        Ok(())
    }

    #[tokio::test]
    async fn progress_streams_before_the_result_and_no_session_is_minted() -> Result<(), TestError>
    {
        let s = start().await?;
        let params = json!({ "name": "progress", "_meta": { "progressToken": "p" } });
        let response = s.modern(4, "tools/call", params, Some("progress")).await?;
        assert!(response.headers().get("mcp-session-id").is_none());
        let mut events = Events::new(response);
        assert_eq!(
            events.next_json().await?["method"],
            json!("notifications/progress")
        );
        let reply = events.next_json().await?;
        assert_eq!(reply["result"]["resultType"], json!("complete"));
        assert_eq!(
            s.http.open_sessions(),
            0,
            "stateless requests leave no session"
        );
        Ok(())
    }
}

mod cancellation {
    use super::*;

    /// A legacy client that cancels gets no answer for what it cancelled.
    #[tokio::test]
    async fn a_cancelled_legacy_call_ends_its_stream_unanswered() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({ "elicitation": {} })).await?;
        let pair = legacy_session(&session);
        let call = tool_call(5, &json!({ "name": "ask" }));
        let mut events = Events::new(s.post(&pair, &call).await?);
        assert_eq!(
            events.next_json().await?["method"],
            json!("elicitation/create")
        );
        let cancel = cancelled(5).to_string();
        assert_eq!(s.post(&pair, &cancel).await?.status(), 202);
        while let Some(event) = events.next().await? {
            let data: Value = serde_json::from_str(event.data.as_deref().unwrap_or("null"))?;
            assert_ne!(
                data["id"],
                json!(5),
                "a cancelled call was answered: {data}"
            );
        }
        Ok(())
    }

    /// 2026-07-28 has no cancel message on HTTP: closing the stream is the
    /// cancellation, and the handler must stop.
    #[tokio::test]
    async fn closing_a_modern_stream_cancels_its_request() -> Result<(), TestError> {
        let s = start().await?;
        let params = json!({ "name": "slow", "_meta": { "progressToken": 1 } });
        let response = s.modern(1, "tools/call", params, Some("slow")).await?;
        let mut events = Events::new(response);
        assert_eq!(
            events.next_json().await?["method"],
            json!("notifications/progress")
        );
        drop(events);
        // Long enough for an uncancelled call to have finished twice over.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(FINISHED.load(std::sync::atomic::Ordering::SeqCst), 0);
        Ok(())
    }
}

/// Opens a 2024-11-05 stream: the events, and the endpoint its first event
/// names.
async fn open_sse(s: &Running) -> Result<(Events, String), TestError> {
    let stream = s
        .client
        .get(format!("{}/sse", s.base))
        .headers(headers(&[("accept", "text/event-stream")])?)
        .send()
        .await?;
    let mut events = Events::new(stream);
    let endpoint = events
        .next()
        .await?
        .and_then(|e| e.data)
        .ok_or("no endpoint event")?;
    Ok((events, endpoint))
}

mod sse_2024 {
    use super::*;

    #[tokio::test]
    async fn a_server_offering_only_the_stateless_era_opens_no_stream() -> Result<(), TestError> {
        use protocol_droid::domain::ProtocolVersion;
        let server = Server::builder("modern-only", "1.0.0")
            .revisions([ProtocolVersion::V2026_07_28])
            .build()?;
        let serving = Serving::start(server, HttpOptions::default()).await?;
        let refused = serving
            .client
            .get(format!("{}/sse", serving.base))
            .headers(headers(&[("accept", "text/event-stream")])?)
            .send()
            .await?;
        assert_eq!(refused.status(), 404);
        assert_eq!(serving.http.open_sessions(), 0);
        Ok(())
    }

    #[tokio::test]
    async fn a_client_leaving_its_stream_ends_its_session() -> Result<(), TestError> {
        let s = start().await?;
        let (events, _endpoint) = open_sse(&s).await?;
        assert_eq!(s.http.open_sessions(), 1);
        drop(events);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while s.http.open_sessions() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the session outlived its stream"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_session_id_is_only_good_on_its_own_transport() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize(LEGACY, json!({})).await?;
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
        let posted = s
            .post_to(&format!("/messages?sessionId={session}"), &body)
            .await?;
        assert_eq!(posted.status(), 404);
        Ok(())
    }

    /// An answer the server cannot read fails the question it names at
    /// once on this transport too, and its POST is refused under no id.
    #[tokio::test]
    async fn an_unreadable_answer_fails_its_question_at_once() -> Result<(), TestError> {
        let s = start().await?;
        let (mut events, endpoint) = open_sse(&s).await?;
        let body = initialize(1, "2024-11-05", &json!({ "sampling": {} }));
        assert_eq!(s.post_to(&endpoint, &body).await?.status(), 202);
        let _initialized = events.next_json().await?;
        let done = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        assert_eq!(s.post_to(&endpoint, &done).await?.status(), 202);
        let call = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": { "name": "sampler" } });
        assert_eq!(s.post_to(&endpoint, &call).await?.status(), 202);
        let asked = events.next_json().await?;
        assert_eq!(asked["method"], json!("sampling/createMessage"), "{asked}");
        let malformed = json!({ "jsonrpc": "2.0", "id": asked["id"].clone(),
            "result": {}, "error": { "code": 1, "message": "x" } });
        let refused = s.post_to(&endpoint, &malformed).await?;
        assert_eq!(refused.status(), 400);
        let refusal: Value = refused.json().await?;
        assert_eq!(refusal["id"], Value::Null, "{refusal}");
        let reply = events.next_json().await?;
        assert_eq!(reply["id"], json!(7), "{reply}");
        assert!(reply.to_string().contains("could not be read"), "{reply}");
        Ok(())
    }

    #[tokio::test]
    async fn the_endpoint_event_comes_first_and_answers_ride_the_stream() -> Result<(), TestError> {
        let s = start().await?;
        let (mut events, endpoint) = open_sse(&s).await?;
        assert!(endpoint.starts_with("/messages?sessionId="), "{endpoint}");
        let body = initialize(1, "2024-11-05", &json!({}));
        let posted = s.post_to(&endpoint, &body).await?;
        assert_eq!(posted.status(), 202);
        let reply = events.next_json().await?;
        assert_eq!(reply["result"]["protocolVersion"], json!("2024-11-05"));
        Ok(())
    }
}

/// HTTPS on both sides: the server terminates TLS with a chain made in the
/// test, and the library's client checks it against the roots it is given.
mod tls {
    use super::*;
    use crate::support::pki::{Authority, Leaf, Validity};
    use protocol_droid::adapters::primary::http::ServerTls;
    use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
    use protocol_droid::adapters::secondary::http::HttpOptions as ClientHttp;
    use protocol_droid::adapters::secondary::tls::Trust;
    use protocol_droid::application::client::RequestOptions;

    /// Serves the test server over TLS with `leaf`; the URL names `host`.
    async fn serve_tls(leaf: &Leaf, host: &str) -> Result<Running, TestError> {
        let tls = ServerTls::from_pem(leaf.cert.as_bytes(), leaf.key.as_bytes())?;
        let mut running = start_tuned(|o| o.tls = Some(tls)).await?;
        let port = running
            .base
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        running.base = format!("https://{host}:{port}");
        Ok(running)
    }

    /// Lists the tools at `url` trusting `trust`; the error's whole chain as
    /// text when it fails.
    async fn list_tools(url: &str, trust: Trust) -> Result<Vec<String>, String> {
        let options = ConnectOptions {
            http: ClientHttp {
                trust,
                ..ClientHttp::default()
            },
            ..ConnectOptions::default()
        };
        let target = Target::url(url).map_err(|e| e.to_string())?;
        let client = connect(&target, options).await.map_err(|error| {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        })?;
        let listed = client
            .request("tools/list", None, &RequestOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        client.close().await;
        Ok(listed["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect())
    }

    #[tokio::test]
    async fn a_chain_from_a_named_authority_is_trusted() -> Result<(), TestError> {
        let ca = Authority::new("test ca")?;
        let leaf = ca.leaf(&["127.0.0.1", "localhost"], Validity::Current)?;
        for host in ["127.0.0.1", "localhost"] {
            let s = serve_tls(&leaf, host).await?;
            let trust = Trust::with_ca_pem(ca.pem.as_bytes())?;
            let tools = list_tools(&format!("{}/mcp", s.base), trust).await?;
            assert!(tools.contains(&"echo".to_owned()), "{host}: {tools:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_authority_is_refused_by_name() -> Result<(), TestError> {
        let ca = Authority::new("test ca")?;
        let s = serve_tls(&ca.leaf(&["127.0.0.1"], Validity::Current)?, "127.0.0.1").await?;
        let url = format!("{}/mcp", s.base);
        let error = list_tools(&url, Trust::default())
            .await
            .err()
            .ok_or("a chain from an unknown CA was accepted")?;
        assert!(error.contains("unknown issuer"), "{error}");
        assert!(error.contains(&url), "the message names the URL: {error}");
        // Another authority's root does not vouch for it either.
        let other = Authority::new("other ca")?;
        let error = list_tools(&url, Trust::with_ca_pem(other.pem.as_bytes())?)
            .await
            .err()
            .ok_or("a chain was accepted under another CA")?;
        assert!(error.contains("unknown issuer"), "{error}");
        Ok(())
    }

    /// Why the client refused a server presenting a leaf for `names`,
    /// made as `validity` says, under a CA it trusts.
    async fn refusal(names: &[&str], validity: Validity) -> Result<String, TestError> {
        let ca = Authority::new("test ca")?;
        let s = serve_tls(&ca.leaf(names, validity)?, "127.0.0.1").await?;
        let trust = Trust::with_ca_pem(ca.pem.as_bytes())?;
        Ok(list_tools(&format!("{}/mcp", s.base), trust)
            .await
            .err()
            .ok_or("the certificate was accepted")?)
    }

    #[tokio::test]
    async fn a_certificate_for_another_name_is_refused_by_name() -> Result<(), TestError> {
        let error = refusal(&["mcp.example.test"], Validity::Current).await?;
        assert!(error.contains("not valid for this host name"), "{error}");
        Ok(())
    }

    #[tokio::test]
    async fn an_expired_certificate_is_refused_by_name() -> Result<(), TestError> {
        let error = refusal(&["127.0.0.1"], Validity::Expired).await?;
        assert!(error.contains("has expired"), "{error}");
        Ok(())
    }

    /// What `openssl req -x509` makes by default: a self-signed certificate
    /// marked as an authority, served as the server's own. Even trusted, it
    /// is refused, and the message says what to serve instead.
    #[tokio::test]
    async fn a_ca_certificate_served_as_the_servers_own_is_refused_by_name() -> Result<(), TestError>
    {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key)?;
        let leaf = Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        let s = serve_tls(&leaf, "127.0.0.1").await?;
        let trust = Trust::with_ca_pem(leaf.cert.as_bytes())?;
        let error = list_tools(&format!("{}/mcp", s.base), trust)
            .await
            .err()
            .ok_or("a CA certificate was accepted as a server's")?;
        assert!(error.contains("is a CA certificate"), "{error}");
        assert!(error.contains("without CA:TRUE"), "{error}");
        Ok(())
    }

    #[tokio::test]
    async fn plain_http_to_a_tls_listener_gets_no_answer() -> Result<(), TestError> {
        let ca = Authority::new("test ca")?;
        let s = serve_tls(&ca.leaf(&["127.0.0.1"], Validity::Current)?, "127.0.0.1").await?;
        let plain = s.base.replace("https://", "http://");
        let sent = s
            .client
            .post(format!("{plain}/mcp"))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await;
        assert!(sent.is_err(), "a plain request was answered: {sent:?}");
        Ok(())
    }

    /// A chain file with the CA first is the usual mistake behind a key
    /// that fits no certificate: the refusal says which must come first.
    #[test]
    fn a_chain_with_the_ca_first_is_refused_saying_the_leaf_comes_first() -> Result<(), TestError> {
        let ca = Authority::new("test ca")?;
        let leaf = ca.leaf(&["127.0.0.1"], Validity::Current)?;
        let backwards = format!("{}{}", ca.pem, leaf.cert);
        let refused = ServerTls::from_pem(backwards.as_bytes(), leaf.key.as_bytes())
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(refused.contains("the leaf comes first"), "{refused}");
        let forwards = format!("{}{}", leaf.cert, ca.pem);
        assert!(ServerTls::from_pem(forwards.as_bytes(), leaf.key.as_bytes()).is_ok());
        Ok(())
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        assert!(Trust::with_ca_pem(b"not pem at all").is_err());
        assert!(ServerTls::from_pem(b"", b"").is_err());
    }
}

/// Clients that send slowly, or not at all, hold nothing for long and take
/// nothing from anyone else.
mod slow_clients {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    /// Reads until the server closes the connection; what it sent first.
    async fn until_closed(stream: &mut TcpStream) -> Result<String, TestError> {
        let mut reply = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut reply)).await??;
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }

    fn address(s: &Running) -> String {
        s.base.trim_start_matches("http://").to_owned()
    }

    #[tokio::test]
    async fn a_half_sent_request_head_is_closed_at_the_header_deadline() -> Result<(), TestError> {
        let s = start_tuned(|o| o.header_timeout = Duration::from_millis(200)).await?;
        let mut stream = TcpStream::connect(address(&s)).await?;
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await?;
        // The head never ends; the server must not wait for it for ever.
        let reply = until_closed(&mut stream).await?;
        assert!(!reply.contains("200 OK"), "{reply}");
        Ok(())
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_answered_408() -> Result<(), TestError> {
        let s = start_tuned(|o| o.body_timeout = Duration::from_millis(200)).await?;
        let mut stream = TcpStream::connect(address(&s)).await?;
        stream
            .write_all(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
            )
            .await?;
        let reply = until_closed(&mut stream).await?;
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        Ok(())
    }

    #[tokio::test]
    async fn a_body_announced_past_the_limit_is_413_before_it_is_sent() -> Result<(), TestError> {
        // A body deadline far past the test's patience: only an answer
        // given without waiting for the body comes back.
        let s = start_tuned(|o| {
            o.max_body = 1024;
            o.body_timeout = Duration::from_secs(3600);
        })
        .await?;
        let mut stream = TcpStream::connect(address(&s)).await?;
        stream
            .write_all(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Accept: application/json, text/event-stream\r\nContent-Length: 4096\r\n\r\n",
            )
            .await?;
        let reply = until_closed(&mut stream).await?;
        assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
        Ok(())
    }

    /// Bodies being read are charged to their address and to everyone: a
    /// slow body holding its address's share gets that address 429 (and
    /// no one else anything), and holding the share of all gets everyone
    /// 503; its bytes are given back when it goes.
    #[tokio::test]
    async fn bodies_being_read_take_their_address_share_then_everyones() -> Result<(), TestError> {
        let mut s = start_tuned(|o| {
            o.body_timeout = Duration::from_secs(3600);
            // The budgets are never below one body of the largest size.
            o.max_body = 64 * 1024;
            o.body_bytes_in_flight_per_address = 64 * 1024;
            o.body_bytes_in_flight = 96 * 1024;
        })
        .await?;
        let padded = |bytes: usize| json!({ "pad": "x".repeat(bytes) });
        let to = address(&s).parse::<std::net::SocketAddr>()?;
        // `bytes` of a 60,000-byte body sent from `from`, the rest never.
        let slow = |from: [u8; 4], bytes: usize| async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::from((from, 0)))?;
            let mut stream = socket.connect(to).await?;
            stream
                .write_all(
                    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                      Accept: application/json, text/event-stream\r\nContent-Length: 60000\r\n\r\n",
                )
                .await?;
            stream.write_all(&vec![b' '; bytes]).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, TestError>(stream)
        };
        let held = slow([127, 0, 0, 1], 50_000).await?;
        let refused = s.modern(1, "tools/list", padded(20_000), None).await?;
        assert_eq!(refused.status(), 429);
        assert!(refused.headers().contains_key("retry-after"));
        // Another address has its own share.
        let mine = std::mem::replace(&mut s.client, client_from("127.0.0.2")?);
        let served = s.modern(2, "tools/list", padded(20_000), None).await?;
        assert_eq!(served.status(), 200);
        // With a third address's slow body, more is held than every
        // address together may.
        let other = slow([127, 0, 0, 3], 30_000).await?;
        let refused = s.modern(3, "tools/list", padded(20_000), None).await?;
        assert_eq!(refused.status(), 503);
        // Gone, they give their bytes back.
        drop((held, other));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let served = s.modern(4, "tools/list", padded(20_000), None).await?;
        assert_eq!(served.status(), 200);
        s.client = mine;
        let served = s.modern(5, "tools/list", padded(20_000), None).await?;
        assert_eq!(served.status(), 200);
        Ok(())
    }

    /// A body stays charged to its address until its request is answered,
    /// not only while it is read: slow requests with large bodies take
    /// their address's share, on either transport (on the 2024-11-05 one,
    /// the 202 comes long before the answer).
    #[tokio::test]
    async fn a_body_stays_counted_until_its_request_is_answered() -> Result<(), TestError> {
        let s = start_tuned(|o| {
            o.max_body = 64 * 1024;
            o.body_bytes_in_flight_per_address = 64 * 1024;
            o.body_bytes_in_flight = 1024 * 1024;
        })
        .await?;
        let padded = || json!({ "pad": "x".repeat(40_000) });
        let held_call = json!({ "name": "held", "arguments": padded() });
        HELD.store(false, std::sync::atomic::Ordering::SeqCst);
        let waiting = s.modern(1, "tools/call", held_call.clone(), Some("held"));
        let meanwhile = async {
            held(&HELD, &RELEASED).await?;
            let refused = s.modern(2, "tools/list", padded(), None).await;
            RELEASED.notify_one();
            refused
        };
        let (waited, refused) = tokio::join!(waiting, meanwhile);
        assert_eq!(refused?.status(), 429);
        let waited = waited?;
        assert_eq!(waited.status(), 200);
        let _answer = waited.text().await?;
        // Answered, its bytes are given back.
        let served = s.modern(3, "tools/list", padded(), None).await?;
        assert_eq!(served.status(), 200);

        let (mut events, endpoint) = open_sse(&s).await?;
        let accepted = s
            .post_to(&endpoint, &initialize(4, "2024-11-05", &json!({})))
            .await?;
        assert_eq!(accepted.status(), 202);
        HELD.store(false, std::sync::atomic::Ordering::SeqCst);
        let call =
            json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": held_call });
        let accepted = s.post_to(&endpoint, &call).await?;
        assert_eq!(accepted.status(), 202);
        held(&HELD, &RELEASED).await?;
        let list = json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": padded() });
        let refused = s.post_to(&endpoint, &list).await?;
        RELEASED.notify_one();
        assert_eq!(refused.status(), 429);
        // Its answer on the stream, the call's bytes are given back.
        while events.next_json().await?["id"] != json!(5) {}
        let accepted = s.post_to(&endpoint, &list).await?;
        assert_eq!(accepted.status(), 202);
        Ok(())
    }

    /// What a request holds after its body is read counts against its own
    /// address only: a request served long (a stream, a slow tool) takes
    /// nothing from another address, however large the bodies.
    #[tokio::test]
    async fn a_request_being_served_holds_only_its_addresss_share() -> Result<(), TestError> {
        let s = start_tuned(|o| {
            o.max_body = 64 * 1024;
            o.body_bytes_in_flight_per_address = 64 * 1024;
            o.body_bytes_in_flight = 64 * 1024;
        })
        .await?;
        let padded = || json!({ "pad": "x".repeat(40_000) });
        HELD_TOO.store(false, std::sync::atomic::Ordering::SeqCst);
        let call = json!({ "name": "held_too", "arguments": padded() });
        let waiting = s.modern(1, "tools/call", call, Some("held_too"));
        let other = client_from("127.0.0.2")?;
        let meanwhile = async {
            held(&HELD_TOO, &RELEASED_TOO).await?;
            let mut request = other
                .post(format!("{}/mcp", s.base))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", MODERN)
                .header("mcp-method", "tools/list");
            let body = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {
                "pad": "x".repeat(40_000),
                "_meta": { "io.modelcontextprotocol/protocolVersion": MODERN,
                           "io.modelcontextprotocol/clientCapabilities": {} } } });
            request = request.body(body.to_string());
            let sent = request.send().await;
            RELEASED_TOO.notify_one();
            Ok::<_, TestError>(sent?)
        };
        let (waited, served) = tokio::join!(waiting, meanwhile);
        assert_eq!(served?.status(), 200);
        assert_eq!(waited?.status(), 200);
        Ok(())
    }

    /// A budget set below the largest body would refuse such a body for
    /// ever: it is never less than one.
    #[tokio::test]
    async fn a_body_as_large_as_allowed_always_fits_the_budget() -> Result<(), TestError> {
        let s = start_tuned(|o| {
            o.max_body = 3 * 1024 * 1024;
            o.body_bytes_in_flight_per_address = 1024 * 1024;
            o.body_bytes_in_flight = 2 * 1024 * 1024;
        })
        .await?;
        let padded = json!({ "pad": "x".repeat(5 * 1024 * 1024 / 2) });
        let served = s.modern(1, "tools/list", padded, None).await?;
        assert_eq!(served.status(), 200);
        Ok(())
    }

    #[tokio::test]
    async fn connections_past_one_address_share_are_closed_and_others_are_served()
    -> Result<(), TestError> {
        let mut s = start_tuned(|o| o.max_connections_per_address = 16).await?;
        // 64 connections from 127.0.0.1, each with half a request head.
        let mut held = Vec::new();
        for _ in 0..64 {
            let mut stream = TcpStream::connect(address(&s)).await?;
            stream.write_all(b"POST /mcp HTTP/1.1\r\n").await?;
            held.push(stream);
        }
        // Those past the share were closed at once, unread.
        let mut closed = 0;
        for stream in &mut held {
            let mut byte = [0_u8; 1];
            let read = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte));
            if let Ok(Ok(0) | Err(_)) = read.await {
                closed += 1;
            }
        }
        assert_eq!(closed, 64 - 16, "connections closed past the share");
        // Another address is still served while these are held.
        let mine = std::mem::replace(&mut s.client, client_from("127.0.0.2")?);
        let answer = s.modern(1, "tools/list", json!({}), None).await?;
        assert_eq!(answer.status(), 200);
        // And a slot given back is a slot someone else can take.
        s.client = mine;
        held.clear();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = s.modern(2, "tools/list", json!({}), None).await?;
        assert_eq!(answer.status(), 200);
        Ok(())
    }
}

/// What one client does takes nothing from another: in-flight shares,
/// batches, session quotas and streams nobody reads are all bounded per
/// session or per caller.
mod one_client_takes_nothing {
    use super::*;

    fn call(id: usize, name: &str, arguments: Value) -> Value {
        let mut params = json!({ "name": name });
        params["arguments"] = arguments;
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
    }

    impl Running {
        async fn in_session(
            &self,
            session: &str,
            body: &Value,
        ) -> Result<reqwest::Response, TestError> {
            self.post(
                &[
                    ("mcp-session-id", session),
                    ("mcp-protocol-version", "2025-03-26"),
                ],
                &body.to_string(),
            )
            .await
        }

        /// POSTs `body` in `session`, cancels its request `id` while it
        /// runs, and checks what the POST is answered with: an event stream
        /// that ends empty, at once.
        async fn cancelled_while_posted(
            &self,
            session: &str,
            body: &Value,
            id: i64,
        ) -> Result<(), TestError> {
            let posting = {
                let s = self.from("127.0.0.1")?;
                let (session, body) = (session.to_owned(), body.clone());
                tokio::spawn(async move {
                    let response = s.in_session(&session, &body).await?;
                    let kind = response.headers().get("content-type").cloned();
                    Ok::<_, TestError>((response.status(), kind, response.text().await?))
                })
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                self.in_session(session, &cancelled(id)).await?.status(),
                202
            );
            let (status, kind, text) = tokio::time::timeout(Duration::from_secs(1), posting)
                .await
                .map_err(|_| "the cancelled request was not answered at once")???;
            assert_eq!(status, 200, "{text}");
            assert_eq!(
                kind.as_ref().and_then(|k| k.to_str().ok()),
                Some("text/event-stream")
            );
            assert_eq!(text, "", "a cancelled call was answered");
            Ok(())
        }

        /// A client of the same server from another loopback address.
        fn from(&self, address: &str) -> Result<Self, TestError> {
            Ok(Self {
                http: self.http.clone(),
                server: self.server.clone(),
                base: self.base.clone(),
                client: client_from(address)?,
                _stop: tokio::sync::oneshot::channel().0,
            })
        }
    }

    #[tokio::test]
    async fn a_batch_larger_than_the_in_flight_share_is_refused_whole() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-03-26", json!({})).await?;
        let batch: Vec<Value> = (0..257)
            .map(|id| json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }))
            .collect();
        let response = s.in_session(&session, &Value::Array(batch)).await?;
        assert_eq!(response.status(), 413);
        let batch: Vec<Value> = (0..256)
            .map(|id| json!({ "jsonrpc": "2.0", "id": id, "method": "ping" }))
            .collect();
        let response = s.in_session(&session, &Value::Array(batch)).await?;
        assert_eq!(response.status(), 200);
        let answers: Value = response.json().await?;
        assert_eq!(answers.as_array().map(Vec::len), Some(256));
        Ok(())
    }

    #[tokio::test]
    async fn a_batched_request_is_in_flight_like_any_other() -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-03-26", json!({})).await?;
        // A repeated id in one batch is refused, not run twice.
        let batch = json!([
            call(1, "echo", json!({ "text": "a" })),
            call(1, "park", json!({}))
        ]);
        let answers: Value = s.in_session(&session, &batch).await?.json().await?;
        let refused = answers
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| {
                a["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("already in flight"))
            })
            .count();
        assert_eq!(refused, 1, "{answers}");
        // A batched call can be cancelled: it is answered with nothing, in
        // an event stream that ends empty (a batch holding a request is
        // answered with a stream or JSON, never 202).
        let batch = json!([call(7, "park", json!({}))]);
        s.cancelled_while_posted(&session, &batch, 7).await?;
        Ok(())
    }

    /// A request cancelled before it said anything ends its POST's event
    /// stream empty: the POST of a request is answered with a stream or
    /// JSON, and `202` is for notifications and responses.
    #[tokio::test]
    async fn a_request_cancelled_before_it_says_anything_gets_an_empty_stream()
    -> Result<(), TestError> {
        let s = start().await?;
        let session = s.initialize("2025-03-26", json!({})).await?;
        s.cancelled_while_posted(&session, &call(8, "park", json!({})), 8)
            .await?;
        Ok(())
    }

    #[tokio::test]
    async fn sessions_filling_their_shares_with_slow_calls_take_nothing_from_another()
    -> Result<(), TestError> {
        let s = start().await?;
        // 16 sessions, 256 slow calls each: 4 096 in flight, as one client
        // could start them.
        let mut attackers = Vec::new();
        for _ in 0..16 {
            let session = s.initialize("2025-03-26", json!({})).await?;
            let attacker = s.from("127.0.0.1")?;
            attackers.push(tokio::spawn(async move {
                let batch: Vec<Value> = (0..256).map(|id| call(id, "park", json!({}))).collect();
                attacker
                    .in_session(&session, &Value::Array(batch))
                    .await
                    .map(|r| r.status())
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Another client, a legacy session of its own and a stateless call.
        let other = s.from("127.0.0.2")?;
        let session = other.initialize("2025-03-26", json!({})).await?;
        let answer: Value = other
            .in_session(&session, &call(1, "echo", json!({ "text": "still here" })))
            .await?
            .json()
            .await?;
        assert_eq!(
            answer["result"]["content"][0]["text"],
            json!("still here"),
            "{answer}"
        );
        let modern = other
            .modern(
                2,
                "tools/call",
                json!({ "name": "echo", "arguments": { "text": "and here" } }),
                Some("echo"),
            )
            .await?;
        assert_eq!(modern.status(), 200);
        for attacker in attackers {
            assert_eq!(attacker.await??, 200);
        }
        Ok(())
    }

    #[tokio::test]
    async fn one_address_holds_only_its_share_of_sessions() -> Result<(), TestError> {
        let s = start_tuned(|o| o.max_sessions_per_address = 3).await?;
        let mut mine = Vec::new();
        for _ in 0..3 {
            mine.push(s.initialize(LEGACY, json!({})).await?);
        }
        let body = initialize(0, LEGACY, &json!({}));
        let refused = s.post(&[], &body.to_string()).await?;
        assert_eq!(refused.status(), 429);
        // Another address is not refused for it.
        s.from("127.0.0.2")?.initialize(LEGACY, json!({})).await?;
        // A session ended is a share given back.
        let ended = s
            .client
            .delete(format!("{}/mcp", s.base))
            .header("mcp-session-id", &mine[0])
            .header("mcp-protocol-version", LEGACY)
            .send()
            .await?;
        assert!(ended.status().is_success(), "{}", ended.status());
        s.initialize(LEGACY, json!({})).await?;
        Ok(())
    }

    /// Opens a 2024-11-05 session; its stream and the endpoint to post to.
    async fn sse_session(s: &Running) -> Result<(Events, String), TestError> {
        let (mut events, url) = open_sse(s).await?;
        let initialize = initialize("init", "2024-11-05", &json!({}));
        assert_eq!(post_message(s, &url, &initialize).await?, 202);
        let reply = events.next_json().await?;
        assert_eq!(reply["id"], json!("init"), "{reply}");
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        assert_eq!(post_message(s, &url, &initialized).await?, 202);
        Ok((events, url))
    }

    async fn post_message(s: &Running, url: &str, body: &Value) -> Result<u16, TestError> {
        Ok(s.post_to(url, body).await?.status().as_u16())
    }

    #[tokio::test]
    async fn the_2024_transport_caps_in_flight_and_honours_cancellation() -> Result<(), TestError> {
        let s = start().await?;
        let (mut events, url) = sse_session(&s).await?;
        for id in 0..256 {
            assert_eq!(
                post_message(&s, &url, &call(id, "park", json!({}))).await?,
                202
            );
        }
        // Past the share: refused, and the refusal comes on the stream, where
        // a 2024-11-05 client reads every answer.
        assert_eq!(
            post_message(&s, &url, &call(256, "park", json!({}))).await?,
            202
        );
        assert_eq!(post_message(&s, &url, &cancelled(3)).await?, 202);
        let mut answered = std::collections::BTreeSet::new();
        let mut refused = None;
        while answered.len() < 255 || refused.is_none() {
            let answer = events.next_json().await?;
            let id = answer["id"].as_u64().ok_or("an answer without an id")?;
            if answer.get("error").is_some() {
                refused = Some((id, answer["error"]["message"].clone()));
            } else {
                answered.insert(id);
            }
        }
        assert!(!answered.contains(&3), "the cancelled call was answered");
        let (id, message) = refused.ok_or("no refusal")?;
        assert_eq!(id, 256);
        assert!(
            message.as_str().is_some_and(|m| m.contains("in flight")),
            "{message}"
        );
        Ok(())
    }

    /// The 2024-11-05 endpoint names one session; a POST naming two is
    /// refused, not delivered to whichever a reader takes.
    #[tokio::test]
    async fn a_2024_post_naming_two_sessions_is_refused() -> Result<(), TestError> {
        let s = start().await?;
        let (_events, url) = sse_session(&s).await?;
        let ping = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
        assert_eq!(post_message(&s, &url, &ping).await?, 202);
        let twice = format!("{url}&sessionId=another");
        assert_eq!(post_message(&s, &twice, &ping).await?, 400);
        assert_eq!(post_message(&s, "/messages", &ping).await?, 400);
        Ok(())
    }

    /// Answers a stream has not taken are bounded in bytes: past the lane's
    /// 4 MiB an answer waits in its request's in-flight place, and while one
    /// waits the session takes no new request. A client posting without
    /// reading is refused long before its in-flight share is taken, not
    /// after hundreds of answers have piled up behind its stream.
    #[tokio::test]
    async fn answers_behind_a_2024_stream_nobody_reads_are_bounded_in_bytes()
    -> Result<(), TestError> {
        let s = start().await?;
        let (events, url) = sse_session(&s).await?;
        let text = "z".repeat(128 * 1024);
        let mut accepted = 0_usize;
        let mut statuses = Vec::new();
        while accepted < 1_000 {
            let bodies: Vec<Value> = (accepted..accepted + 16)
                .map(|id| call(id, "echo", json!({ "text": text })))
                .collect();
            let posts = bodies.iter().map(|body| post_message(&s, &url, body));
            statuses = futures_util::future::join_all(posts).await;
            accepted += statuses.iter().filter(|s| matches!(s, Ok(202))).count();
            if statuses.iter().any(|s| !matches!(s, Ok(202))) {
                break;
            }
        }
        let refused = statuses.into_iter().find(|s| !matches!(s, Ok(202)));
        let refused = refused.ok_or("nothing was refused")??;
        assert_eq!(refused, 429, "after {accepted} accepted");
        // 32 in the lane, what the socket's buffers took, and those taken
        // before an answer waited (about 80 in all); with answers queued by
        // count, not bytes, about 770.
        assert!(accepted < 256, "{accepted} answers were let pile up");
        drop(events);
        Ok(())
    }

    #[tokio::test]
    async fn a_2024_stream_nobody_reads_ends_its_session() -> Result<(), TestError> {
        let s = start_tuned(|o| o.stall_timeout = Duration::from_millis(300)).await?;
        let (events, url) = sse_session(&s).await?;
        let text = "z".repeat(32 * 1024);
        // Answers pile up behind a stream that is never read, until the
        // server gives up on it and ends the session.
        let mut ended = false;
        for round in 0..40 {
            let bodies: Vec<Value> = (0..64)
                .map(|n| call(round * 64 + n, "echo", json!({ "text": text })))
                .collect();
            let posts: Vec<_> = bodies
                .iter()
                .map(|body| post_message(&s, &url, body))
                .collect();
            let statuses = futures_util::future::join_all(posts).await;
            if statuses.iter().any(|status| matches!(status, Ok(404))) {
                ended = true;
                break;
            }
        }
        assert!(ended, "a session whose stream is never read lived on");
        assert_eq!(
            post_message(
                &s,
                &url,
                &json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" })
            )
            .await?,
            404
        );
        drop(events);
        Ok(())
    }
}
