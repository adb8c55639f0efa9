//! Tasks over Streamable HTTP, in both eras' forms: a task outlives the
//! connection that made it, cancelling one stops its handler, one past its
//! TTL is gone, the library's client polls one to its end, and a listener
//! hears the tasks it names change.
//!
//! Timeouts only stop a broken test from hanging; nothing asserts how long
//! anything took.

// Indexing a `serde_json::Value` yields `Null` for a missing member and never
// panics, which is what reading replies wants.
#![allow(clippy::indexing_slicing)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use protocol_droid::adapters::primary::http::HttpOptions;
use protocol_droid::adapters::secondary::connect::{ConnectOptions, Target, connect};
use protocol_droid::application::client::{ClientHandler, RequestOptions, TaskOptions, TaskUpdate};
use protocol_droid::application::server::{
    Call, MemoryTaskStore, Question, Server, StoreBounds, TaskLimits, TaskRecord, TaskStore,
    TaskStoreError, ToolSpec,
};
use protocol_droid::domain::ProtocolVersion;
use protocol_droid::domain::ir::ToolResult;
use protocol_droid::domain::jsonrpc::{ErrorCode, ErrorObject};
use protocol_droid::wire::tasks::TaskStatus;
use protocol_droid::wire::tools::TaskSupport;
use serde_json::{Value, json};

#[allow(dead_code)] // Each test binary uses its own part of it.
mod support;

use support::{BOTH, LEGACY, MODERN, PATIENCE, Serving, TestError, initialize, legacy_session};

const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Counts a handler's ends: dropped (stopped) or finished.
#[derive(Default)]
struct Ends {
    stopped: AtomicUsize,
    finished: AtomicUsize,
}

/// Counts a drop into `Ends::stopped` unless the handler finished first.
struct StopGuard(Arc<Ends>, bool);

impl Drop for StopGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.stopped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn server(ends: &Arc<Ends>, limits: TaskLimits) -> Result<Server, TestError> {
    let server = Server::builder("tasks-test", "1.0.0")
        .task_limits(limits)
        .build()?;
    server.add_tool(
        ToolSpec::new("brief", "Works for a moment, then answers.")
            .task_support(TaskSupport::Optional),
        |call: Call| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let who = call.arg_str("who").unwrap_or("nobody").to_owned();
            Ok(ToolResult::text(format!("done for {who}")))
        },
    );
    server.add_tool(
        ToolSpec::new("confirm", "Asks to confirm, then says what it did.")
            .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let answer = call
                .elicit(
                    "sure",
                    json!({ "message": "Sure?", "requestedSchema": { "type": "object",
                        "properties": { "confirm": { "type": "boolean" } } } }),
                )
                .await?;
            let confirmed = answer["content"]["confirm"] == json!(true);
            Ok(ToolResult::text(if confirmed {
                "confirmed"
            } else {
                "declined"
            }))
        },
    );
    server.add_tool(
        ToolSpec::new(
            "impatient",
            "Asks, stops waiting after a moment, and works on.",
        )
        .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let asking = call.elicit(
                "sure",
                json!({ "message": "Sure?", "requestedSchema": { "type": "object",
                    "properties": { "confirm": { "type": "boolean" } } } }),
            );
            let gave_up = tokio::time::timeout(Duration::from_millis(300), asking)
                .await
                .is_err();
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok(ToolResult::text(if gave_up {
                "gave up asking"
            } else {
                "was answered"
            }))
        },
    );
    let counted = Arc::clone(ends);
    server.add_tool(
        ToolSpec::new("endless", "Works until it is stopped.").task_support(TaskSupport::Required),
        move |_call: Call| {
            let ends = Arc::clone(&counted);
            async move {
                let mut guard = StopGuard(Arc::clone(&ends), false);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                guard.1 = true;
                ends.finished.fetch_add(1, Ordering::SeqCst);
                Ok(ToolResult::text("finished"))
            }
        },
    );
    Ok(server)
}

struct Running {
    serving: Serving,
    ends: Arc<Ends>,
}

async fn start(limits: TaskLimits) -> Result<Running, TestError> {
    let ends = Arc::new(Ends::default());
    let serving = Serving::start(server(&ends, limits)?, HttpOptions::default()).await?;
    Ok(Running { serving, ends })
}

/// The JSON-RPC answer in a response, whether sent as JSON or as events.
async fn answer(response: reqwest::Response) -> Result<Value, TestError> {
    let events = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    let body = response.text().await?;
    if !events {
        return Ok(serde_json::from_str(&body)?);
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .ok_or_else(|| format!("no answer among the events: {body}").into())
}

impl Running {
    async fn post(
        &self,
        client: &reqwest::Client,
        headers: &[(&'static str, &str)],
        body: &Value,
    ) -> Result<Value, TestError> {
        let mut all = vec![("content-type", "application/json"), ("accept", BOTH)];
        all.extend_from_slice(headers);
        let response = client
            .post(format!("{}/mcp", self.serving.base))
            .headers(support::headers(&all)?)
            .body(body.to_string())
            .send()
            .await?;
        answer(response).await
    }

    /// A 2025-11-25 session, opened on `client`.
    async fn open(&self, client: &reqwest::Client) -> Result<String, TestError> {
        self.open_with(client, &json!({})).await
    }

    /// A 2025-11-25 session declaring `capabilities`, opened on `client`.
    async fn open_with(
        &self,
        client: &reqwest::Client,
        capabilities: &Value,
    ) -> Result<String, TestError> {
        let response = client
            .post(format!("{}/mcp", self.serving.base))
            .headers(support::headers(&[
                ("content-type", "application/json"),
                ("accept", BOTH),
            ])?)
            .body(initialize(0, LEGACY, capabilities).to_string())
            .send()
            .await?;
        let session = response
            .headers()
            .get("mcp-session-id")
            .ok_or("no session id")?
            .to_str()?
            .to_owned();
        Ok(session)
    }

    /// `method` with `params` in the 2025-11-25 session `session`.
    async fn legacy(
        &self,
        client: &reqwest::Client,
        session: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, TestError> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        self.post(client, &legacy_session(session), &body).await
    }

    /// `method` with `params` as a 2026-07-28 request declaring the tasks
    /// extension, named `name` in its routing header.
    async fn modern(
        &self,
        client: &reqwest::Client,
        method: &str,
        mut params: Value,
        name: &str,
    ) -> Result<Value, TestError> {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {
                "elicitation": {}, "extensions": { EXTENSION: {} } },
        });
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let headers = [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", method),
            ("mcp-name", name),
        ];
        self.post(client, &headers, &body).await
    }

    /// Waits (up to [`PATIENCE`]) until `n` handlers have been stopped.
    async fn stopped(&self, n: usize) -> Result<(), TestError> {
        let counted = || async { Ok(json!(self.ends.stopped.load(Ordering::SeqCst))) };
        self.until(counted, |stopped| *stopped == json!(n)).await?;
        Ok(())
    }

    /// Waits until the task `get` reads is `input_required`, then until it
    /// no longer is; the task as it then reads.
    async fn asked_then_not<F, Fut>(&self, get: F) -> Result<Value, TestError>
    where
        F: FnMut() -> Fut + Copy,
        Fut: Future<Output = Result<Value, TestError>>,
    {
        let asking = |got: &Value| got["result"]["status"] == "input_required";
        self.until(get, asking).await?;
        self.until(get, |got| !asking(got)).await
    }

    /// Waits (up to [`PATIENCE`]) until `done` holds of what `poll` answers.
    async fn until<F, Fut>(
        &self,
        mut poll: F,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, TestError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Value, TestError>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let seen = poll().await?;
            if done(&seen) {
                return Ok(seen);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("still not there: {seen}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The `taskId` of a task as an answer shows it.
fn task_id(task: &Value) -> Result<String, TestError> {
    Ok(task["taskId"].as_str().ok_or("no taskId")?.to_owned())
}

fn fresh_client() -> Result<reqwest::Client, TestError> {
    Ok(reqwest::Client::builder().timeout(PATIENCE).build()?)
}

/// A TTL that is not a number of milliseconds is refused, not replaced
/// with the default; one written as a float is taken, rounded up.
#[tokio::test]
async fn a_malformed_task_ttl_is_refused() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    // A session each: the requests share an id.
    let brief_with = async |ttl: &Value| -> Result<Value, TestError> {
        let session = s.open(&client).await?;
        let call =
            json!({ "name": "brief", "arguments": { "who": "ada" }, "task": { "ttl": ttl } });
        s.legacy(&client, &session, "tools/call", call).await
    };
    for ttl in [json!(-1), json!(-0.5), json!("99")] {
        let refused = brief_with(&ttl).await?;
        assert_eq!(refused["error"]["code"], -32602, "{ttl}: {refused}");
    }
    let created = brief_with(&json!(59_999.5)).await?;
    assert_eq!(created["result"]["task"]["ttl"], 60_000, "{created}");
    Ok(())
}

/// A 2025-11-25 task outlives the connection that asked for it: read, with
/// its result, over a new connection in the same session. Without a token
/// it is that session's alone: another session is answered as for an id
/// that does not exist.
#[tokio::test]
async fn a_legacy_tasks_result_outlives_its_connection_in_its_session() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let first = fresh_client()?;
    let session = s.open(&first).await?;
    let created = s
        .legacy(
            &first,
            &session,
            "tools/call",
            json!({ "name": "brief", "arguments": { "who": "ada" }, "task": { "ttl": 60_000 } }),
        )
        .await?;
    let task = &created["result"]["task"];
    let id = task_id(task)?;
    assert_eq!(task["status"], "working", "{created}");
    assert_eq!(task["ttl"], 60_000);
    // The connection goes; the session stays.
    drop(first);

    let second = fresh_client()?;
    // `tasks/result` waits for the end, then answers the call's result,
    // tied to its task.
    let result = s
        .legacy(&second, &session, "tasks/result", json!({ "taskId": id }))
        .await?;
    assert_eq!(
        result["result"]["content"][0]["text"], "done for ada",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
    let got = s
        .legacy(&second, &session, "tasks/get", json!({ "taskId": id }))
        .await?;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    let listed = s.legacy(&second, &session, "tasks/list", json!({})).await?;
    let ids: Vec<&Value> = listed["result"]["tasks"]
        .as_array()
        .ok_or("no tasks")?
        .iter()
        .map(|t| &t["taskId"])
        .collect();
    assert_eq!(ids, vec![&json!(id)], "{listed}");
    // An ended task cannot be cancelled in 2025-11-25.
    let cancel = s
        .legacy(&second, &session, "tasks/cancel", json!({ "taskId": id }))
        .await?;
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");
    // Another session, from the same address, finds nothing.
    let other = s.open(&second).await?;
    let theirs = s
        .legacy(&second, &other, "tasks/get", json!({ "taskId": id }))
        .await?;
    let none = s
        .legacy(
            &second,
            &other,
            "tasks/get",
            json!({ "taskId": "000000000000nothing" }),
        )
        .await?;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    assert_eq!(
        theirs["error"]["message"]
            .as_str()
            .map(|m| m.replace(&id, "ID")),
        none["error"]["message"]
            .as_str()
            .map(|m| m.replace("000000000000nothing", "ID")),
    );
    let listed = s.legacy(&second, &other, "tasks/list", json!({})).await?;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    // A cursor is a task id, the last of the page before: anything else is
    // no cursor this server gave, refused as the other lists refuse one.
    for forged in ["AAAA", "", "../..", &"f".repeat(10_000)] {
        let listed = s
            .legacy(&second, &session, "tasks/list", json!({ "cursor": forged }))
            .await?;
        assert_eq!(listed["error"]["code"], -32602, "{forged:.8}: {listed}");
    }
    let after = s
        .legacy(&second, &session, "tasks/list", json!({ "cursor": id }))
        .await?;
    assert_eq!(after["result"]["tasks"], json!([]), "{after}");
    Ok(())
}

/// Starts a `confirm` task in a new 2025-11-25 session that can be asked
/// (and keeps no GET stream), and waits until it is `input_required`: its
/// question has found no stream and waits, the task does not fail.
async fn waiting_confirmation(
    s: &Running,
    client: &reqwest::Client,
    capabilities: &Value,
) -> Result<(String, String), TestError> {
    let session = s.open_with(client, capabilities).await?;
    let created = s
        .legacy(
            client,
            &session,
            "tools/call",
            json!({ "name": "confirm", "arguments": {}, "task": { "ttl": 60_000 } }),
        )
        .await?;
    let id = task_id(&created["result"]["task"])?;
    s.until(
        || s.legacy(client, &session, "tasks/get", json!({ "taskId": id })),
        |got| got["result"]["status"] != "working",
    )
    .await
    .and_then(|got| {
        if got["result"]["status"] == "input_required" {
            Ok(())
        } else {
            Err(format!("the task did not wait for its answer: {got}").into())
        }
    })?;
    Ok((session, id))
}

/// The JSON-RPC messages of an event stream, read as they come.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next message (a priming event, which carries none, is passed).
    async fn next(&mut self) -> Result<Value, TestError> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if !data.is_empty() {
                    return Ok(serde_json::from_str(&data)?);
                }
                continue;
            }
            let chunk = self.response.chunk().await?.ok_or("the stream ended")?;
            self.buffer.push_str(std::str::from_utf8(&chunk)?);
        }
    }

    /// Reads on to the next message of `method` (passing the task's status
    /// notifications and anything else).
    async fn next_of(&mut self, method: &str) -> Result<Value, TestError> {
        loop {
            let message = self.next().await?;
            if message["method"] == method {
                return Ok(message);
            }
        }
    }

    /// Reads on to the answer to the request `id`.
    async fn answer_to(&mut self, id: i64) -> Result<Value, TestError> {
        loop {
            let message = self.next().await?;
            if message["id"] == json!(id) {
                return Ok(message);
            }
        }
    }
}

impl Running {
    /// Posts `body` in the 2025-11-25 session `session`, the response
    /// unread.
    async fn send_legacy(
        &self,
        client: &reqwest::Client,
        session: &str,
        body: &Value,
    ) -> Result<reqwest::Response, TestError> {
        let mut all = vec![("content-type", "application/json"), ("accept", BOTH)];
        all.extend_from_slice(&legacy_session(session));
        Ok(client
            .post(format!("{}/mcp", self.serving.base))
            .headers(support::headers(&all)?)
            .body(body.to_string())
            .send()
            .await?)
    }

    /// Calls `tasks/result` for `task` as request `id`, its stream read as
    /// it comes.
    async fn wait_on(
        &self,
        client: &reqwest::Client,
        session: &str,
        task: &str,
        id: i64,
    ) -> Result<Events, TestError> {
        let waiting = json!({ "jsonrpc": "2.0", "id": id, "method": "tasks/result",
            "params": { "taskId": task } });
        Ok(Events::new(
            self.send_legacy(client, session, &waiting).await?,
        ))
    }

    /// Answers the question `question` with a confirmation, and checks that
    /// the answer was taken.
    async fn confirm(
        &self,
        client: &reqwest::Client,
        session: &str,
        question: &Value,
    ) -> Result<(), TestError> {
        let answer = json!({ "action": "accept", "content": { "confirm": true } });
        self.reply(client, session, question, answer).await
    }

    /// Answers the server's request `request` with `result`, and checks
    /// that the answer was taken.
    async fn reply(
        &self,
        client: &reqwest::Client,
        session: &str,
        request: &Value,
        result: Value,
    ) -> Result<(), TestError> {
        let answer = json!({ "jsonrpc": "2.0", "id": request["id"], "result": result });
        let posted = self.send_legacy(client, session, &answer).await?;
        assert_eq!(posted.status(), 202);
        Ok(())
    }
}

/// A 2025-11-25 task's question, asked while its client keeps no GET
/// stream, waits for the client's `tasks/result` and travels on that
/// request's stream, tagged with its task; once answered, the task's
/// result ends the same stream.
#[tokio::test]
async fn a_legacy_tasks_question_travels_on_its_tasks_result_stream() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let (session, id) = waiting_confirmation(&s, &client, &json!({ "elicitation": {} })).await?;
    let mut events = s.wait_on(&client, &session, &id, 7).await?;
    let question = events.next_of("elicitation/create").await?;
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id),
        "{question}"
    );
    s.confirm(&client, &session, &question).await?;
    let result = events.answer_to(7).await?;
    assert_eq!(
        result["result"]["content"][0]["text"], "confirmed",
        "{result}"
    );
    Ok(())
}

/// A client that runs elicitation as a task of its own is asked, from the
/// server's task, with a `task`; the server then polls the client's task and
/// fetches its answer, every request on the `tasks/result` stream the client
/// waits on (it keeps no GET stream), none of them tagged as the server's.
#[tokio::test]
async fn a_task_asks_a_client_that_runs_questions_as_tasks_through_its_task()
-> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let capabilities = json!({ "elicitation": {},
        "tasks": { "requests": { "elicitation": { "create": {} } } } });
    let (session, id) = waiting_confirmation(&s, &client, &capabilities).await?;
    let mut events = s.wait_on(&client, &session, &id, 7).await?;
    let question = events.next_of("elicitation/create").await?;
    assert!(
        question["params"]["task"]["ttl"].as_u64() > Some(0),
        "{question}"
    );
    let theirs = json!({ "taskId": "client-1", "status": "working", "ttl": 60_000,
        "pollInterval": 50, "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:00Z" });
    s.reply(&client, &session, &question, json!({ "task": theirs }))
        .await?;
    let poll = events.next().await?;
    assert_eq!(poll["method"], "tasks/get", "{poll}");
    assert_eq!(poll["params"], json!({ "taskId": "client-1" }));
    let mut ended = theirs.clone();
    ended["status"] = json!("completed");
    s.reply(&client, &session, &poll, ended).await?;
    let fetch = events.next().await?;
    assert_eq!(fetch["method"], "tasks/result", "{fetch}");
    assert_eq!(fetch["params"], json!({ "taskId": "client-1" }));
    let answer = json!({ "action": "accept", "content": { "confirm": true },
        "_meta": { "io.modelcontextprotocol/related-task": { "taskId": "client-1" } } });
    s.reply(&client, &session, &fetch, answer).await?;
    let result = events.answer_to(7).await?;
    assert_eq!(
        result["result"]["content"][0]["text"], "confirmed",
        "{result}"
    );
    Ok(())
}

/// A `tasks/result` refused (its id is one already in flight) takes none
/// of the task's held questions with it: the next one made gets them.
#[tokio::test]
async fn a_refused_tasks_result_leaves_the_held_questions_held() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let (session, id) = waiting_confirmation(&s, &client, &json!({ "elicitation": {} })).await?;
    // A long `tasks/result` of another task holds request id 9 in flight.
    let endless = json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "endless", "arguments": {}, "task": { "ttl": 60_000 } } });
    let other = answer(s.send_legacy(&client, &session, &endless).await?).await?;
    let other = task_id(&other["result"]["task"])?;
    let holding = json!({ "jsonrpc": "2.0", "id": 9, "method": "tasks/result",
        "params": { "taskId": other } });
    let post = client
        .post(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&[
            ("content-type", "application/json"),
            ("accept", BOTH),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", LEGACY),
        ])?)
        .body(holding.to_string());
    // Answered only when its task ends, which it never does.
    let _holding = tokio::spawn(post.send());
    // Until id 9 is in flight, a request with it is served (and harmless).
    let in_flight = |answer: &Value| {
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("already in flight"))
    };
    let probe = json!({ "jsonrpc": "2.0", "id": 9, "method": "tasks/get",
        "params": { "taskId": other } });
    s.until(
        || async { answer(s.send_legacy(&client, &session, &probe).await?).await },
        in_flight,
    )
    .await?;
    let refused = json!({ "jsonrpc": "2.0", "id": 9, "method": "tasks/result",
        "params": { "taskId": id } });
    let refusal = answer(s.send_legacy(&client, &session, &refused).await?).await?;
    assert!(in_flight(&refusal), "{refusal}");
    let mut events = s.wait_on(&client, &session, &id, 10).await?;
    let question = events.next_of("elicitation/create").await?;
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
    Ok(())
}

/// A question its handler stops waiting for leaves the task, in both eras:
/// the task works again, rather than staying `input_required` for a
/// question nobody waits on.
#[tokio::test]
async fn a_question_given_up_on_leaves_its_task() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let impatient = json!({ "name": "impatient", "arguments": {} });
    let created = s
        .modern(&client, "tools/call", impatient.clone(), "impatient")
        .await?;
    let id = task_id(&created["result"])?;
    let get = || s.modern(&client, "tasks/get", json!({ "taskId": id }), &id);
    let back = s.asked_then_not(get).await?;
    assert_eq!(back["result"]["status"], "working", "{back}");
    assert_eq!(back["result"].get("inputRequests"), None, "{back}");

    // At 2025-11-25 the question goes out on the GET stream, and is
    // called off there once given up on.
    let session = s.open_with(&client, &json!({ "elicitation": {} })).await?;
    let mut all = vec![("accept", "text/event-stream")];
    all.extend_from_slice(&legacy_session(&session));
    let standing = client
        .get(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&all)?)
        .send()
        .await?;
    let mut events = Events::new(standing);
    let mut legacy = impatient;
    legacy["task"] = json!({ "ttl": 60_000 });
    let created = s.legacy(&client, &session, "tools/call", legacy).await?;
    let id = task_id(&created["result"]["task"])?;
    let question = events.next_of("elicitation/create").await?;
    let called_off = events.next_of("notifications/cancelled").await?;
    assert_eq!(called_off["params"]["requestId"], question["id"]);
    assert_eq!(
        called_off["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );
    let get = || s.legacy(&client, &session, "tasks/get", json!({ "taskId": id }));
    let back = s
        .until(get, |got| got["result"]["status"] != "input_required")
        .await?;
    assert_eq!(back["result"]["status"], "working", "{back}");
    Ok(())
}

/// A task's question held for want of a stream goes to the session's GET
/// stream when the client opens one.
#[tokio::test]
async fn a_held_task_question_goes_to_a_get_stream_opened_later() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let (session, id) = waiting_confirmation(&s, &client, &json!({ "elicitation": {} })).await?;
    let mut all = vec![("accept", "text/event-stream")];
    all.extend_from_slice(&legacy_session(&session));
    let standing = client
        .get(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&all)?)
        .send()
        .await?;
    let mut events = Events::new(standing);
    let question = events.next_of("elicitation/create").await?;
    s.confirm(&client, &session, &question).await?;
    let done = s
        .until(
            || s.legacy(&client, &session, "tasks/get", json!({ "taskId": id })),
            |got| got["result"]["status"] == "completed",
        )
        .await?;
    assert_eq!(done["result"]["status"], "completed");
    Ok(())
}

/// A 2026-07-28 task made over one connection is polled to its result from
/// another: the extension's result is inlined on `tasks/get`.
#[tokio::test]
async fn a_modern_tasks_result_is_polled_from_another_connection() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let created = s
        .modern(
            &fresh_client()?,
            "tools/call",
            json!({ "name": "brief", "arguments": { "who": "grace" } }),
            "brief",
        )
        .await?;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = task_id(&created["result"])?;
    let poller = fresh_client()?;
    let done = s
        .until(
            || s.modern(&poller, "tasks/get", json!({ "taskId": id }), &id),
            |got| got["result"]["status"] == "completed",
        )
        .await?;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "done for grace",
        "{done}"
    );
    // Without the extension the same tool runs in the request.
    let body = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "brief", "arguments": { "who": "plain" }, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {} } } });
    let headers = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "brief"),
    ];
    let plain = s.post(&poller, &headers, &body).await?;
    assert_eq!(
        plain["result"]["content"][0]["text"], "done for plain",
        "{plain}"
    );
    assert_eq!(plain["result"].get("taskId"), None);
    Ok(())
}

/// `tasks/cancel` stops the handler (its future is dropped, never finished)
/// and the task reads `cancelled`, in both eras.
#[tokio::test]
async fn cancelling_a_task_stops_its_handler() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let created = s
        .modern(
            &client,
            "tools/call",
            json!({ "name": "endless" }),
            "endless",
        )
        .await?;
    let id = task_id(&created["result"])?;
    let ack = s
        .modern(&client, "tasks/cancel", json!({ "taskId": id }), &id)
        .await?;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(
        ack["result"].get("status"),
        None,
        "an empty acknowledgement"
    );
    let got = s
        .modern(&client, "tasks/get", json!({ "taskId": id }), &id)
        .await?;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    s.stopped(1).await?;

    let session = s.open(&client).await?;
    let created = s
        .legacy(
            &client,
            &session,
            "tools/call",
            json!({ "name": "endless", "task": {} }),
        )
        .await?;
    let id = task_id(&created["result"]["task"])?;
    let cancelled = s
        .legacy(&client, &session, "tasks/cancel", json!({ "taskId": id }))
        .await?;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    s.stopped(2).await?;
    assert_eq!(s.ends.finished.load(Ordering::SeqCst), 0);
    Ok(())
}

/// A task is gone once its TTL has passed: unknown to `tasks/get`, and its
/// handler, had it still been running, stopped.
#[tokio::test]
async fn a_task_past_its_ttl_is_gone_and_its_handler_stopped() -> Result<(), TestError> {
    let s = start(TaskLimits {
        max_ttl_ms: 300,
        ..TaskLimits::default()
    })
    .await?;
    let client = fresh_client()?;
    let created = s
        .modern(
            &client,
            "tools/call",
            json!({ "name": "endless" }),
            "endless",
        )
        .await?;
    assert_eq!(created["result"]["ttlMs"], 300, "{created}");
    let id = task_id(&created["result"])?;
    let gone = s
        .until(
            || s.modern(&client, "tasks/get", json!({ "taskId": id }), &id),
            |got| got.get("error").is_some(),
        )
        .await?;
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    s.stopped(1).await?;
    // The 2025-11-25 form asks for its TTL, and is cut to the longest.
    let session = s.open(&client).await?;
    let created = s
        .legacy(
            &client,
            &session,
            "tools/call",
            json!({ "name": "brief", "task": { "ttl": 3_600_000 } }),
        )
        .await?;
    assert_eq!(created["result"]["task"]["ttl"], 300, "{created}");
    Ok(())
}

/// Anonymous 2025-11-25 sessions are each a caller of their own, but the
/// sessions one address opens share one bound on running tasks: many
/// sessions (or sessions deleted with their tasks still running) from one
/// address cannot fill the store's room for running tasks for everyone.
#[tokio::test]
async fn one_addresss_anonymous_sessions_share_a_bound_on_running_tasks() -> Result<(), TestError> {
    let s = start(TaskLimits {
        running_per_owner: 2,
        running_per_network: 3,
        ..TaskLimits::default()
    })
    .await?;
    let client = fresh_client()?;
    let endless = json!({ "name": "endless", "task": { "ttl": 60_000 } });
    let mut refusals = Vec::new();
    for _ in 0..3 {
        let session = s.open(&client).await?;
        // Ids of their own: the same id again would be a retry, answered
        // with the first's record.
        for id in 1..=2 {
            let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": endless });
            let created = s.post(&client, &legacy_session(&session), &body).await?;
            if created.get("error").is_some() {
                refusals.push(created);
            }
        }
    }
    // Three ran (two in the first session, one in the second); the rest
    // were refused as the caller's own bound is, saying which bound.
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    for refused in &refusals {
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("from one address"), "{refused}");
    }
    // Another address is not held back by them.
    let elsewhere = reqwest::Client::builder()
        .timeout(PATIENCE)
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()?;
    let session = s.open(&elsewhere).await?;
    let created = s
        .legacy(&elsewhere, &session, "tools/call", endless.clone())
        .await?;
    assert_eq!(created["result"]["task"]["status"], "working", "{created}");
    Ok(())
}

/// An anonymous 2025-11-25 session's tasks are its alone: once the
/// session ends (here, `DELETE`) nobody can read or cancel them, so they
/// stop with it, and their places are given back to their network.
#[tokio::test]
async fn an_anonymous_sessions_tasks_stop_when_it_ends() -> Result<(), TestError> {
    let s = start(TaskLimits {
        running_per_network: 2,
        ..TaskLimits::default()
    })
    .await?;
    let client = fresh_client()?;
    let endless = json!({ "name": "endless", "task": { "ttl": 60_000 } });
    let session = s.open(&client).await?;
    for id in 1..=2 {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": endless });
        let created = s.post(&client, &legacy_session(&session), &body).await?;
        assert_eq!(created["result"]["task"]["status"], "working", "{created}");
    }
    let ended = client
        .delete(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&legacy_session(&session))?)
        .send()
        .await?;
    assert!(ended.status().is_success(), "{}", ended.status());
    s.stopped(2).await?;
    // The network's places are free again.
    let next = s.open(&client).await?;
    let created = s.legacy(&client, &next, "tools/call", endless).await?;
    assert_eq!(created["result"]["task"]["status"], "working", "{created}");
    Ok(())
}

/// An anonymous 2025-11-25 session's tasks leave nothing behind once it
/// ends: their results are forgotten with it rather than kept unread until
/// their TTL. And a result larger than one caller's share of the store is
/// not kept: its task fails, saying so.
#[tokio::test]
async fn an_ended_sessions_results_are_forgotten_and_one_too_large_is_not_kept()
-> Result<(), TestError> {
    let store = Arc::new(MemoryTaskStore::with_bounds(StoreBounds {
        bytes_per_owner: 64 * 1024,
        ..StoreBounds::default()
    }));
    let shared: Arc<dyn TaskStore> = store.clone();
    let server = Server::builder("tasks-test", "1.0.0")
        .task_store(shared)
        .build()?;
    server.add_tool(
        ToolSpec::new("bulky", "Answers with as many bytes as asked.")
            .task_support(TaskSupport::Optional),
        |call: Call| async move {
            let size = call.arguments.get("size").and_then(Value::as_u64);
            let size = size.and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
            Ok(ToolResult::text("x".repeat(size)))
        },
    );
    let s = Running {
        serving: Serving::start(server, HttpOptions::default()).await?,
        ends: Arc::default(),
    };
    let client = fresh_client()?;
    let session = s.open(&client).await?;
    let mut ended = Vec::new();
    for (n, size) in [10_000, 10_000, 100_000].into_iter().enumerate() {
        // Each call its own id: a repeated one would be taken for a retry.
        let call = json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "bulky", "arguments": { "size": size }, "task": { "ttl": 600_000 } } });
        let created = s.post(&client, &legacy_session(&session), &call).await?;
        let id = task_id(&created["result"]["task"]).map_err(|e| format!("{e}: {created}"))?;
        let result = json!({ "taskId": id });
        ended.push(s.legacy(&client, &session, "tasks/result", result).await?);
    }
    for kept in &ended[..2] {
        let text = kept["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(text.len(), 10_000, "{kept}");
    }
    let refused = ended[2]["error"]["message"].as_str().unwrap_or_default();
    assert!(refused.contains("more than the 65536"), "{}", ended[2]);
    let (tasks, bytes) = store.usage();
    assert!(
        tasks == 3 && bytes > 20_000 && bytes < 30_000,
        "{tasks} tasks, {bytes} bytes"
    );
    let deleted = client
        .delete(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&legacy_session(&session))?)
        .send()
        .await?;
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let usage = || async { Ok(json!(store.usage())) };
    s.until(usage, |held| *held == json!([0, 0])).await?;
    Ok(())
}

/// Answers every question with a confirmation.
#[derive(Debug)]
struct Confirming;

impl ClientHandler for Confirming {
    fn capabilities(&self) -> protocol_droid::wire::ClientCapabilities {
        serde_json::from_value(json!({ "elicitation": {} })).unwrap_or_default()
    }

    fn elicit(
        &self,
        _params: protocol_droid::wire::ElicitRequestParams,
    ) -> BoxFuture<'_, Result<protocol_droid::wire::ElicitResult, ErrorObject>> {
        Box::pin(async {
            serde_json::from_value(json!({ "action": "accept", "content": { "confirm": true } }))
                .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        })
    }
}

/// The library's client runs a tool as a task in either form, answering
/// the task's question through its handler (a request of the task's own in
/// 2025-11-25, `tasks/update` in 2026-07-28) and hearing its status change;
/// and cancels one.
#[tokio::test]
async fn the_client_polls_a_task_to_its_end_in_either_form() -> Result<(), TestError> {
    let s = start(TaskLimits::default()).await?;
    for version in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let mut options = ConnectOptions::default();
        options.client.revisions = vec![version];
        options.client.handler = Arc::new(Confirming);
        let target = Target::Url(format!("{}/mcp", s.serving.base).parse()?);
        let client = tokio::time::timeout(PATIENCE, connect(&target, options)).await??;
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hearing = Arc::clone(&heard);
        let task = TaskOptions {
            on_status: Some(Arc::new(move |update: &TaskUpdate| {
                if let Ok(mut heard) = hearing.lock() {
                    heard.push(update.status);
                }
            })),
            ..TaskOptions::default()
        };
        let reply = client.call_tool_as_task("confirm", None, &task).await?;
        assert_eq!(
            reply.raw["content"][0]["text"], "confirmed",
            "{version}: {}",
            reply.raw
        );
        let heard = heard.lock().map(|h| h.clone()).unwrap_or_default();
        assert_eq!(
            heard.first(),
            Some(&TaskStatus::Working),
            "{version}: {heard:?}"
        );
        if version == ProtocolVersion::V2026_07_28 {
            // The question waits on the client, which sees it by polling.
            assert!(heard.contains(&TaskStatus::InputRequired), "{heard:?}");
            assert_eq!(heard.last(), Some(&TaskStatus::Completed), "{heard:?}");
        }
        client.close().await;
    }
    Ok(())
}

/// Answers a confirmation after a while, as a person would, running it as a
/// task of the client's own when the server asks for one.
#[derive(Debug, Default)]
struct SlowToConfirm {
    asked: AtomicUsize,
}

impl ClientHandler for SlowToConfirm {
    fn capabilities(&self) -> protocol_droid::wire::ClientCapabilities {
        serde_json::from_value(
            json!({ "elicitation": {}, "tasks": { "list": {}, "cancel": {},
            "requests": { "elicitation": { "create": {} } } } }),
        )
        .unwrap_or_default()
    }

    fn elicit(
        &self,
        _params: protocol_droid::wire::ElicitRequestParams,
    ) -> BoxFuture<'_, Result<protocol_droid::wire::ElicitResult, ErrorObject>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            serde_json::from_value(json!({ "action": "accept", "content": { "confirm": true } }))
                .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        })
    }
}

/// The library's client runs a 2025-11-25 server's question as a task of
/// its own when its handler declares it: a person slower than the server
/// waits for any one answer (here a second, against 300 ms) is waited for
/// through the task, each poll a short round trip, and the call goes on
/// with the answer. Without the task the question times out.
#[tokio::test]
async fn the_client_runs_a_question_as_its_own_task_when_it_declares_it() -> Result<(), TestError> {
    let ends = Arc::new(Ends::default());
    let options = HttpOptions {
        exchange_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let serving = Serving::start(server(&ends, TaskLimits::default())?, options).await?;
    let handler = Arc::new(SlowToConfirm::default());
    let mut options = ConnectOptions::default();
    options.client.revisions = vec![ProtocolVersion::V2025_11_25];
    options.client.handler = handler.clone();
    let target = Target::Url(format!("{}/mcp", serving.base).parse()?);
    let client = tokio::time::timeout(PATIENCE, connect(&target, options)).await??;
    let reply = tokio::time::timeout(
        PATIENCE,
        client.call_tool("confirm", None, &RequestOptions::default()),
    )
    .await??;
    assert_eq!(
        reply.raw["content"][0]["text"], "confirmed",
        "{}",
        reply.raw
    );
    assert_eq!(handler.asked.load(Ordering::SeqCst), 1, "asked once");
    client.close().await;
    Ok(())
}

/// A 2026-07-28 listener naming a task in `taskIds` hears its changes as
/// `notifications/tasks`, to its end; an id that is not the caller's (here,
/// one that does not exist) is not honoured.
#[tokio::test]
async fn a_listener_hears_the_tasks_it_names_change() -> Result<(), TestError> {
    use futures_util::StreamExt as _;
    let s = start(TaskLimits::default()).await?;
    let client = fresh_client()?;
    let created = s
        .modern(
            &client,
            "tools/call",
            json!({ "name": "confirm" }),
            "confirm",
        )
        .await?;
    let id = task_id(&created["result"])?;
    let listen = json!({ "jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {
        "notifications": { "taskIds": [id, "000000000000nobody"] },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": { "extensions": { EXTENSION: {} } },
        } } });
    let headers = [
        ("content-type", "application/json"),
        ("accept", BOTH),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "subscriptions/listen"),
    ];
    let response = client
        .post(format!("{}/mcp", s.serving.base))
        .headers(support::headers(&headers)?)
        .body(listen.to_string())
        .send()
        .await?;
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let mut statuses = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut answered = false;
    while statuses.last() != Some(&json!("completed")) {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await?
            .ok_or("the listen stream ended")?
            .map_err(|e| format!("{e}; seen: {seen}"))?;
        seen.push_str(&String::from_utf8_lossy(&chunk));
        let events: Vec<Value> = seen
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect();
        if let Some(ack) = events
            .iter()
            .find(|e| e["method"] == "notifications/subscriptions/acknowledged")
        {
            assert_eq!(
                ack["params"]["notifications"]["taskIds"],
                json!([id]),
                "{ack}"
            );
            if !answered {
                answered = true;
                let update = s
                    .modern(
                        &client,
                        "tasks/update",
                        json!({ "taskId": id, "inputResponses": {
                            "sure": { "action": "accept", "content": { "confirm": true } } } }),
                        &id,
                    )
                    .await?;
                assert_eq!(update["result"]["resultType"], "complete", "{update}");
            }
        }
        statuses = events
            .iter()
            .filter(|e| e["method"] == "notifications/tasks")
            .map(|e| e["params"]["status"].clone())
            .collect();
    }
    let events: Vec<Value> = seen
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect();
    let done = events
        .iter()
        .rfind(|e| e["method"] == "notifications/tasks")
        .ok_or("no task notification")?;
    assert_eq!(done["params"]["taskId"], json!(id));
    assert_eq!(
        done["params"]["result"]["content"][0]["text"], "confirmed",
        "{done}"
    );
    Ok(())
}

/// The task store in memory, recording how many questions each write that
/// leaves a task `input_required` holds.
#[derive(Debug, Default)]
struct Recording {
    store: MemoryTaskStore,
    parked: std::sync::Mutex<Vec<usize>>,
}

impl Recording {
    fn parked(&self) -> Vec<usize> {
        self.parked.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

impl TaskStore for Recording {
    fn create(&self, record: TaskRecord, now_ms: u64) -> BoxFuture<'_, Result<(), TaskStoreError>> {
        self.store.create(record, now_ms)
    }

    fn get<'a>(
        &'a self,
        owner: &'a str,
        id: &'a str,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, TaskStoreError>> {
        self.store.get(owner, id, now_ms)
    }

    fn update(&self, record: TaskRecord) -> BoxFuture<'_, Result<bool, TaskStoreError>> {
        if record.status == TaskStatus::InputRequired {
            if let Ok(mut parked) = self.parked.lock() {
                parked.push(record.input_requests.len());
            }
        }
        self.store.update(record)
    }

    fn list<'a>(
        &'a self,
        owner: &'a str,
        after: Option<&'a str>,
        limit: usize,
        now_ms: u64,
    ) -> BoxFuture<'a, Result<(Vec<TaskRecord>, bool), TaskStoreError>> {
        self.store.list(owner, after, limit, now_ms)
    }

    fn expire(&self, now_ms: u64) -> BoxFuture<'_, Vec<String>> {
        self.store.expire(now_ms)
    }

    fn forget_owner<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<(), TaskStoreError>> {
        self.store.forget_owner(owner)
    }
}

/// A 2026-07-28 task whose handler asks two questions at once parks both
/// in one write of its record: no `tasks/get` can read one without the
/// other (a client answering what it read would answer half, and the task
/// would ask again).
#[tokio::test]
async fn questions_asked_together_are_parked_together() -> Result<(), TestError> {
    let store = Arc::new(Recording::default());
    let shared: Arc<dyn TaskStore> = store.clone();
    let server = Server::builder("tasks-test", "1.0.0")
        .task_store(shared)
        .build()?;
    server.add_tool(
        ToolSpec::new("pair", "Asks two names at once.").task_support(TaskSupport::Optional),
        |call: Call| async move {
            let form = json!({ "message": "Name?", "requestedSchema": { "type": "object",
                "properties": { "name": { "type": "string" } } } });
            let question = |key: &str| Question::Elicit {
                key: key.to_owned(),
                params: form.clone(),
            };
            let answers = call
                .ask_all(vec![question("first"), question("second")])
                .await?;
            let names: Vec<&str> = answers
                .iter()
                .filter_map(|a| a["content"]["name"].as_str())
                .collect();
            Ok(ToolResult::text(names.join(" and ")))
        },
    );
    let s = Running {
        serving: Serving::start(server, HttpOptions::default()).await?,
        ends: Arc::default(),
    };
    let client = fresh_client()?;
    let created = s
        .modern(&client, "tools/call", json!({ "name": "pair" }), "pair")
        .await?;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = task_id(&created["result"])?;
    let get = || s.modern(&client, "tasks/get", json!({ "taskId": id }), &id);
    let asked = s
        .until(get, |got| got["result"]["status"] == "input_required")
        .await?;
    let keys = asked["result"]["inputRequests"]
        .as_object()
        .map(|asked| asked.keys().cloned().collect::<Vec<_>>());
    assert_eq!(
        keys,
        Some(vec!["first".to_owned(), "second".to_owned()]),
        "{asked}"
    );
    assert_eq!(store.parked(), vec![2], "each write's questions");
    let answer = |name: &str| json!({ "action": "accept", "content": { "name": name } });
    let update = s
        .modern(
            &client,
            "tasks/update",
            json!({ "taskId": id, "inputResponses": {
                "first": answer("ada"), "second": answer("grace") } }),
            &id,
        )
        .await?;
    assert!(update.get("result").is_some(), "{update}");
    let done = s
        .until(get, |got| got["result"]["status"] == "completed")
        .await?;
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "ada and grace",
        "{done}"
    );
    Ok(())
}

/// A server whose task says it works long after the time it keeps it for
/// (and asks to be polled without pause) is not polled forever: the client
/// gives up on the task, saying why, and cancels it.
#[tokio::test]
async fn the_client_stops_following_a_task_past_its_ttl() -> Result<(), TestError> {
    use protocol_droid::adapters::secondary::child::ChildOptions;
    use protocol_droid::application::client::{ClientError, ClientOptions};

    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_server.py");
    let record = std::env::temp_dir().join(format!("droid-task-forever-{}", std::process::id()));
    let _fresh = std::fs::remove_file(&record);
    let mut child = ChildOptions::new("python3", [script.into_os_string(), "task-forever".into()]);
    child
        .env
        .push(("BAD_SERVER_RECORD".into(), record.as_os_str().to_owned()));
    let options = ConnectOptions {
        client: ClientOptions {
            revisions: vec![ProtocolVersion::V2025_11_25],
            ..ClientOptions::default()
        },
        ..ConnectOptions::default()
    };
    let client =
        tokio::time::timeout(PATIENCE, connect(&Target::Command(child), options)).await??;
    // Its ttl of a second, and the longest wait between polls, past.
    let followed = tokio::time::timeout(
        Duration::from_secs(30),
        client.call_tool_as_task("anything", None, &TaskOptions::default()),
    )
    .await?;
    match followed {
        Err(ClientError::InvalidResult { detail, .. }) => {
            assert!(detail.contains("no longer followed"), "{detail}");
        }
        other => return Err(format!("the task was not given up on: {other:?}").into()),
    }
    // Cancelled as it was left, so it does not run on unseen.
    let heard = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(heard.contains("cancelled forever"), "{heard}");
    Ok(())
}
