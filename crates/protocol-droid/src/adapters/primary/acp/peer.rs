//! The agent-side peer: a reader task, a writer task, and the tables that
//! join them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::error::{AcpPeerError, ClientError};
use super::inbound::{
    ClientCapabilities, Inbound, InboundNotification, InboundRequest, InvalidParams, RequestParams,
    notification_params, request_params,
};
use super::outbound::{
    CreateTerminalResult, PermissionOutcome, ReadTextFileResult, TerminalExitStatus,
    TerminalOutputResult, methods, required_capability,
};
use super::wire::{
    self, ErrorBody, ErrorFrame, Frame, NotificationFrame, Refusal, ReplyFrame, RequestFrame,
};
use crate::domain::jsonrpc::framing::{
    DEFAULT_MAX_DEPTH, FrameError, LineFramer, deeper_than, request_id, response_id,
};
use crate::domain::jsonrpc::{ErrorCode, RequestId, VERSION};

/// The default longest line: 64 MiB.
///
/// ACP sets no limit, and its messages are large by nature: a prompt embeds
/// whole files and base64 images, a `tool_call_update` carries a command's
/// output. A 16 MiB cap in one client broke session resume and a 64 KiB one
/// broke large tool updates; the Python SDK allows 50 MiB and acpx 64 MiB.
/// 64 MiB matches the most generous of those while still bounding what one
/// line can make the agent hold.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024 * 1024;

/// Limits and timeouts for one connection. Every one is bounded.
#[derive(Clone, Copy, Debug)]
pub struct AcpPeerOptions {
    /// The longest line accepted, in bytes ([`DEFAULT_MAX_LINE`]). A longer
    /// line is answered -32600 and skipped up to its newline.
    pub max_line: usize,
    /// The deepest nesting of arrays and objects accepted (64).
    pub max_depth: usize,
    /// How many inbound messages may wait for `recv_request`, and how many
    /// outbound lines for the writer (1024 each). A full queue makes its
    /// producer wait rather than drop anything.
    pub queue: usize,
    /// How long a request to the client waits for its answer (10 minutes,
    /// since a permission request waits on a person). Use
    /// [`AcpSender::send_request_within`] for a different bound.
    pub request_timeout: Duration,
}

impl Default for AcpPeerOptions {
    fn default() -> Self {
        Self {
            max_line: DEFAULT_MAX_LINE,
            max_depth: DEFAULT_MAX_DEPTH,
            queue: 1024,
            request_timeout: Duration::from_secs(600),
        }
    }
}

/// The agent-side transport for ACP.
///
/// Constructed with [`AcpAgentPeer::from_stdio`]. The peer owns two tasks,
/// the reader and the writer; dropping the peer stops both. The agent
/// process's own lifecycle is independent: the peer does not own it.
///
/// The peer receives with [`recv_request`](Self::recv_request) (`&mut self`)
/// and sends through an [`AcpSender`], which it dereferences to; clone one
/// with [`sender`](Self::sender) to answer, stream updates and call the
/// client from spawned tasks while a prompt turn runs.
///
/// Ordering: every send waits until its line has been written and flushed,
/// so "all updates before the prompt response" holds for any handler that
/// awaits its `send_notification`s before its `send_reply`.
pub struct AcpAgentPeer {
    sender: AcpSender,
    inbound: mpsc::Receiver<Inbound>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl AcpAgentPeer {
    /// Constructs an agent peer from a stdin reader and a stdout writer,
    /// with [`AcpPeerOptions::default`].
    ///
    /// The generic parameters let tests pass `tokio::io::DuplexStream`
    /// halves instead of real stdio. Must be called inside a Tokio runtime:
    /// the reader and writer tasks are spawned here.
    pub fn from_stdio<R, W>(stdin: R, stdout: W) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Self::with_options(stdin, stdout, AcpPeerOptions::default())
    }

    /// [`from_stdio`](Self::from_stdio) with explicit limits.
    pub fn with_options<R, W>(stdin: R, stdout: W, options: AcpPeerOptions) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out_tx, out_rx) = mpsc::channel(options.queue.max(1));
        let (in_tx, in_rx) = mpsc::channel(options.queue.max(1));
        let shared = Arc::new(Shared {
            outbox: out_tx,
            pending: Mutex::default(),
            next_id: AtomicI64::new(0),
            closed: AtomicBool::new(false),
            input_closed: AtomicBool::new(false),
            client_caps: Mutex::default(),
            answering: Mutex::default(),
            request_timeout: options.request_timeout,
        });
        let writer = tokio::spawn(write_lines(out_rx, stdout, Arc::clone(&shared)));
        let reader = tokio::spawn(read_lines(stdin, Arc::clone(&shared), in_tx, options));
        Self {
            sender: AcpSender { shared },
            inbound: in_rx,
            reader,
            writer,
        }
    }

    /// Awaits the next request or notification the client sent.
    ///
    /// Returns `None` once the reader task is gone: the client closed its
    /// end, or the pipe broke. A line the client left unfinished is never
    /// delivered. The application is expected to end its handler loop on
    /// `None`.
    ///
    /// Every request delivered is to be answered ([`AcpSender::send_reply`]
    /// or an error): until it is, its id is taken, and another request
    /// under it is refused (-32600) without being delivered.
    pub async fn recv_request(&mut self) -> Option<Inbound> {
        loop {
            let next = self.inbound.recv().await;
            match &next {
                None => {
                    // Every request read before the end has now been handed
                    // over and could be answered; from here on sends are
                    // refused.
                    self.sender.shared.close();
                }
                // Checked as it is handed over, not as it is read: what is
                // in flight is what the application holds unanswered.
                Some(Inbound::Request(request)) if !self.sender.shared.answering(&request.id) => {
                    self.sender.shared.refuse_reused(&request.id).await;
                    continue;
                }
                Some(_) => {}
            }
            return next;
        }
    }

    /// A cloneable handle for sending, usable from other tasks.
    #[must_use]
    pub fn sender(&self) -> AcpSender {
        self.sender.clone()
    }
}

impl core::ops::Deref for AcpAgentPeer {
    type Target = AcpSender;

    fn deref(&self) -> &AcpSender {
        &self.sender
    }
}

impl Drop for AcpAgentPeer {
    fn drop(&mut self) {
        // The tasks own the streams; aborting them drops the streams, so the
        // client sees the wire close at once. Senders still alive get
        // `Closed`.
        self.sender.shared.close();
        self.reader.abort();
        self.writer.abort();
    }
}

impl fmt::Debug for AcpAgentPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpAgentPeer")
            .field("sender", &self.sender)
            .field("queued_inbound", &self.inbound.len())
            .field("reader_running", &!self.reader.is_finished())
            .field("writer_running", &!self.writer.is_finished())
            .finish()
    }
}

/// A cloneable handle that sends to the client.
///
/// Every method waits until its line is written and flushed, and fails with
/// [`AcpPeerError::Closed`] once the client closed stdin or the peer was
/// dropped, or [`AcpPeerError::Write`] when the output broke.
#[derive(Clone)]
pub struct AcpSender {
    shared: Arc<Shared>,
}

impl fmt::Debug for AcpSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = self.shared.pending.lock().map_or(0, |p| p.len());
        f.debug_struct("AcpSender")
            .field("closed", &self.shared.is_closed())
            .field("outstanding_requests", &pending)
            .finish()
    }
}

impl AcpSender {
    /// Sends a success reply for a received request:
    /// `{"jsonrpc":"2.0","id":<id>,"result":<result>}`.
    ///
    /// The id is passed through unchanged, type included; `null` is a valid
    /// id. `result` is always written, even when it is `null`.
    ///
    /// # Errors
    ///
    /// [`AcpPeerError::InvalidId`] for an id no client could have sent,
    /// [`AcpPeerError::Closed`] or [`AcpPeerError::Write`] when the wire is
    /// gone.
    pub async fn send_reply(&self, id: Value, result: Value) -> Result<(), AcpPeerError> {
        checked_id(&id)?;
        self.shared.answered(&id);
        let frame = ReplyFrame {
            jsonrpc: VERSION,
            id: &id,
            result: &result,
        };
        self.shared.send_line(wire::line(&frame)?).await
    }

    /// Sends an error reply for a received request:
    /// `{"jsonrpc":"2.0","id":<id>,"error":{"code":<code>,"message":<message>}}`.
    ///
    /// # Errors
    ///
    /// As [`send_reply`](Self::send_reply).
    pub async fn send_error(
        &self,
        id: Value,
        code: i64,
        message: impl Into<String>,
    ) -> Result<(), AcpPeerError> {
        self.send_error_frame(&id, code, &message.into(), None)
            .await
    }

    /// [`send_error`](Self::send_error) with a `data` member.
    ///
    /// # Errors
    ///
    /// As [`send_reply`](Self::send_reply).
    pub async fn send_error_with_data(
        &self,
        id: Value,
        code: i64,
        message: impl Into<String>,
        data: Value,
    ) -> Result<(), AcpPeerError> {
        self.send_error_frame(&id, code, &message.into(), Some(&data))
            .await
    }

    /// Answers -32601 `Method not found`, with the method as `data`, as the
    /// reference SDK does. For unknown methods, unhandled extensions, and
    /// methods gated by a capability the agent did not advertise.
    ///
    /// # Errors
    ///
    /// As [`send_reply`](Self::send_reply).
    pub async fn reply_method_not_found(
        &self,
        request: &InboundRequest,
    ) -> Result<(), AcpPeerError> {
        let data = Value::String(request.method.clone());
        self.send_error_frame(
            &request.id,
            i64::from(ErrorCode::METHOD_NOT_FOUND.0),
            "Method not found",
            Some(&data),
        )
        .await
    }

    /// Answers -32602 `Invalid params` with what was wrong.
    ///
    /// # Errors
    ///
    /// As [`send_reply`](Self::send_reply).
    pub async fn reply_invalid_params(
        &self,
        id: Value,
        error: &InvalidParams,
    ) -> Result<(), AcpPeerError> {
        self.send_error_frame(
            &id,
            i64::from(ErrorCode::INVALID_PARAMS.0),
            &error.to_string(),
            None,
        )
        .await
    }

    /// Sends a notification: `{"jsonrpc":"2.0","method":..,"params":..}`,
    /// with no `id` key. `session/update` is the usual one; see
    /// [`session_update`](Self::session_update).
    ///
    /// # Errors
    ///
    /// [`AcpPeerError::Encode`] if `params` cannot be serialised,
    /// [`AcpPeerError::Closed`] or [`AcpPeerError::Write`] when the wire is
    /// gone.
    pub async fn send_notification<Params>(
        &self,
        method: &str,
        params: Params,
    ) -> Result<(), AcpPeerError>
    where
        Params: Serialize,
    {
        let frame = NotificationFrame {
            jsonrpc: VERSION,
            method,
            params,
        };
        self.shared.send_line(wire::line(&frame)?).await
    }

    /// Sends `session/update` with `{"sessionId": .., "update": ..}`.
    ///
    /// # Errors
    ///
    /// As [`send_notification`](Self::send_notification).
    pub async fn session_update(
        &self,
        session_id: &str,
        update: impl Serialize,
    ) -> Result<(), AcpPeerError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a, U> {
            session_id: &'a str,
            update: U,
        }
        self.send_notification(methods::SESSION_UPDATE, Params { session_id, update })
            .await
    }

    /// Calls a method on the client and waits for its result, for at most
    /// [`AcpPeerOptions::request_timeout`].
    ///
    /// The peer mints the id (integers from 0: JSON-RPC keeps each
    /// direction's ids apart, since an answer can only match a request its
    /// receiver sent, so a client request with the same number is no
    /// collision; and older clients parse only integer ids). The answer is
    /// routed here by id and never surfaces from `recv_request`.
    ///
    /// Dropping the returned future cancels the wait: the id is forgotten,
    /// a late answer is ignored, and the client is sent `$/cancel_request`.
    ///
    /// # Errors
    ///
    /// [`AcpPeerError::Rejected`] with the client's error;
    /// [`AcpPeerError::TimedOut`]; [`AcpPeerError::NotAdvertised`] for an
    /// `fs/*` or `terminal/*` call the client did not advertise (checked
    /// against its `initialize`); [`AcpPeerError::Closed`] when the wire
    /// closes before the answer.
    pub async fn send_request(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, AcpPeerError> {
        self.send_request_within(method, params, self.shared.request_timeout)
            .await
    }

    /// [`send_request`](Self::send_request) with its own timeout, for calls
    /// that may legitimately run long (`terminal/wait_for_exit`).
    ///
    /// # Errors
    ///
    /// As [`send_request`](Self::send_request).
    pub async fn send_request_within(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<Value, AcpPeerError> {
        if let Some(capability) = self
            .shared
            .client_caps
            .lock()
            .ok()
            .and_then(|caps| required_capability(method, &caps))
        {
            return Err(AcpPeerError::NotAdvertised {
                method: method.to_owned(),
                capability,
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let line = wire::line(&RequestFrame {
            jsonrpc: VERSION,
            id,
            method,
            params,
        })?;
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.shared.pending.lock() {
            pending.insert(id, tx);
        }
        let mut guard = Outstanding {
            id,
            shared: Arc::clone(&self.shared),
            settled: false,
        };
        if let Err(e) = self.shared.send_line(line).await {
            // Never sent, so there is nothing for the client to cancel.
            guard.settled = true;
            return Err(e);
        }
        let answer = tokio::time::timeout(timeout, rx).await;
        guard.settled = answer.is_ok();
        match answer {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(AcpPeerError::Rejected {
                method: method.to_owned(),
                error: Box::new(error),
            }),
            Ok(Err(_)) => Err(AcpPeerError::Closed),
            Err(_) => Err(AcpPeerError::TimedOut {
                method: method.to_owned(),
                after: timeout,
            }),
        }
    }

    /// `session/request_permission`: asks the user, and returns their choice.
    /// `params` is `{sessionId, toolCall, options}`.
    ///
    /// # Errors
    ///
    /// As [`send_request`](Self::send_request), and
    /// [`AcpPeerError::UnexpectedResult`] for a malformed outcome.
    pub async fn request_permission(
        &self,
        params: impl Serialize,
    ) -> Result<PermissionOutcome, AcpPeerError> {
        let method = methods::SESSION_REQUEST_PERMISSION;
        let result = self.send_request(method, params).await?;
        PermissionOutcome::from_result(&result).map_err(|reason| AcpPeerError::UnexpectedResult {
            method: method.to_owned(),
            reason,
        })
    }

    /// `fs/read_text_file` (`{sessionId, path, line?, limit?}`).
    ///
    /// # Errors
    ///
    /// As [`request_permission`](Self::request_permission).
    pub async fn read_text_file(
        &self,
        params: impl Serialize,
    ) -> Result<ReadTextFileResult, AcpPeerError> {
        self.call(methods::FS_READ_TEXT_FILE, params).await
    }

    /// `fs/write_text_file` (`{sessionId, path, content}`).
    ///
    /// # Errors
    ///
    /// As [`send_request`](Self::send_request).
    pub async fn write_text_file(&self, params: impl Serialize) -> Result<(), AcpPeerError> {
        self.send_request(methods::FS_WRITE_TEXT_FILE, params)
            .await
            .map(drop)
    }

    /// `terminal/create` (`{sessionId, command, args?, env?, cwd?,
    /// outputByteLimit?}`).
    ///
    /// # Errors
    ///
    /// As [`request_permission`](Self::request_permission).
    pub async fn create_terminal(
        &self,
        params: impl Serialize,
    ) -> Result<CreateTerminalResult, AcpPeerError> {
        self.call(methods::TERMINAL_CREATE, params).await
    }

    /// `terminal/output` (`{sessionId, terminalId}`).
    ///
    /// # Errors
    ///
    /// As [`request_permission`](Self::request_permission).
    pub async fn terminal_output(
        &self,
        params: impl Serialize,
    ) -> Result<TerminalOutputResult, AcpPeerError> {
        self.call(methods::TERMINAL_OUTPUT, params).await
    }

    /// `terminal/wait_for_exit` (`{sessionId, terminalId}`), waiting at most
    /// `timeout`: a command may run far longer than any default.
    ///
    /// # Errors
    ///
    /// As [`request_permission`](Self::request_permission).
    pub async fn wait_for_terminal_exit(
        &self,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<TerminalExitStatus, AcpPeerError> {
        let method = methods::TERMINAL_WAIT_FOR_EXIT;
        let result = self.send_request_within(method, params, timeout).await?;
        decode(method, result)
    }

    /// `terminal/kill` (`{sessionId, terminalId}`); the terminal stays valid.
    ///
    /// # Errors
    ///
    /// As [`send_request`](Self::send_request).
    pub async fn kill_terminal(&self, params: impl Serialize) -> Result<(), AcpPeerError> {
        self.send_request(methods::TERMINAL_KILL, params)
            .await
            .map(drop)
    }

    /// `terminal/release` (`{sessionId, terminalId}`); every terminal must be
    /// released.
    ///
    /// # Errors
    ///
    /// As [`send_request`](Self::send_request).
    pub async fn release_terminal(&self, params: impl Serialize) -> Result<(), AcpPeerError> {
        self.send_request(methods::TERMINAL_RELEASE, params)
            .await
            .map(drop)
    }

    /// Whether the connection is closed: the client closed its input, or
    /// the output failed (then every send fails too).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed() || self.shared.input_closed.load(Ordering::Acquire)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, AcpPeerError> {
        let result = self.send_request(method, params).await?;
        decode(method, result)
    }

    async fn send_error_frame(
        &self,
        id: &Value,
        code: i64,
        message: &str,
        data: Option<&Value>,
    ) -> Result<(), AcpPeerError> {
        checked_id(id)?;
        self.shared.answered(id);
        let frame = ErrorFrame {
            jsonrpc: VERSION,
            id,
            error: ErrorBody {
                code,
                message,
                data,
            },
        };
        self.shared.send_line(wire::line(&frame)?).await
    }
}

fn decode<T: DeserializeOwned>(method: &str, result: Value) -> Result<T, AcpPeerError> {
    serde_json::from_value(result).map_err(|e| AcpPeerError::UnexpectedResult {
        method: method.to_owned(),
        reason: e.to_string(),
    })
}

fn checked_id(id: &Value) -> Result<(), AcpPeerError> {
    if wire::is_id(id) {
        Ok(())
    } else {
        Err(AcpPeerError::InvalidId(id.clone()))
    }
}

type Waiter = oneshot::Sender<Result<Value, ClientError>>;

/// What the reader, the writer and every sender share.
struct Shared {
    outbox: mpsc::Sender<Outgoing>,
    /// The agent's requests awaiting the client's answer, by minted id.
    pending: Mutex<HashMap<i64, Waiter>>,
    next_id: AtomicI64,
    /// Set when stdin ends, the output breaks or the peer is dropped.
    closed: AtomicBool,
    /// The client closed its input. Sends still go out until the
    /// application has been handed everything read before the end (then
    /// `recv_request` answers `None` and closes): a client that half-closes
    /// after its last request still reads the answers to it.
    input_closed: AtomicBool,
    /// What the client advertised in `initialize`; nothing until then.
    client_caps: Mutex<ClientCapabilities>,
    /// The ids of the client's requests handed to the application and not
    /// yet answered, as written: a second request under one of them is
    /// refused, since the client could not tell the two answers apart.
    answering: Mutex<HashSet<String>>,
    request_timeout: Duration,
}

/// One line for the writer, and where to say how writing it went.
struct Outgoing {
    line: Vec<u8>,
    written: Option<oneshot::Sender<Result<(), AcpPeerError>>>,
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The client's input ended: no answer to the agent's own requests can
    /// arrive any more, so those fail now; replies and notifications are
    /// still written while the output lasts.
    fn input_ended(&self) {
        self.input_closed.store(true, Ordering::Release);
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }

    /// Refuses further sends and fails every waiting request: no answer can
    /// arrive any more, so they fail now rather than sit out their timeout.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }

    async fn send_line(&self, line: Vec<u8>) -> Result<(), AcpPeerError> {
        if self.is_closed() {
            return Err(AcpPeerError::Closed);
        }
        let (tx, rx) = oneshot::channel();
        let outgoing = Outgoing {
            line,
            written: Some(tx),
        };
        self.outbox
            .send(outgoing)
            .await
            .map_err(|_| AcpPeerError::Closed)?;
        rx.await.unwrap_or(Err(AcpPeerError::Closed))
    }

    /// The reader's own answers (refusals): not subject to `closed`, and
    /// nobody waits for their outcome.
    async fn send_internal(&self, line: Vec<u8>) {
        let outgoing = Outgoing {
            line,
            written: None,
        };
        if self.outbox.send(outgoing).await.is_err() {
            tracing::debug!("ACP output closed before a refusal could be written");
        }
    }

    /// Takes `id` as the client's request now being answered, unless one
    /// under that id is being answered already.
    fn answering(&self, id: &Value) -> bool {
        // A poisoned lock still holds a whole set (an insert or a removal
        // either happened or not); refusing every request would be worse.
        self.answering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_string())
    }

    /// Refuses a request under the id of one still being answered.
    async fn refuse_reused(&self, id: &Value) {
        let refusal = ErrorFrame {
            jsonrpc: VERSION,
            id,
            error: ErrorBody {
                code: i64::from(ErrorCode::INVALID_REQUEST.0),
                message: &format!("Invalid request: request id {id} is already in flight"),
                data: None,
            },
        };
        if let Ok(line) = wire::line(&refusal) {
            self.send_internal(line).await;
        }
    }

    /// The client's request `id` is answered (or about to be): its id is
    /// free again, before the answer goes, so a client that reuses it as
    /// soon as it reads the answer is not refused.
    fn answered(&self, id: &Value) {
        self.answering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id.to_string());
    }

    fn route(&self, id: &Value, outcome: Result<Value, ClientError>) {
        // Only integers are ours; `"3"` does not answer request 3, and
        // `as_i64` reads no strings.
        let waiter = id
            .as_i64()
            .and_then(|id| self.pending.lock().ok()?.remove(&id));
        match waiter {
            Some(waiter) => {
                // The caller may have stopped waiting a moment ago.
                let _delivered = waiter.send(outcome);
            }
            None => tracing::debug!("ignoring a response to {id}, which no one awaits"),
        }
    }
}

/// An agent request awaiting its answer. Dropped unanswered (timed out, or
/// the future was dropped), it forgets the id and tells the client with
/// `$/cancel_request`, so the client can stop, for example, asking its user.
struct Outstanding {
    id: i64,
    shared: Arc<Shared>,
    settled: bool,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.shared.pending.lock() {
            pending.remove(&self.id);
        }
        if self.settled || self.shared.is_closed() {
            return;
        }
        let frame = NotificationFrame {
            jsonrpc: VERSION,
            method: methods::CANCEL_REQUEST,
            params: json!({ "requestId": self.id }),
        };
        // Drop cannot wait for queue space; the cancel is advisory anyway
        // (`$/` notifications may be ignored), so a full queue skips it.
        if let Ok(line) = wire::line(&frame) {
            let queued = self.shared.outbox.try_send(Outgoing {
                line,
                written: None,
            });
            if queued.is_err() {
                tracing::debug!("could not queue $/cancel_request for {}", self.id);
            }
        }
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<Outgoing>,
    mut output: W,
    shared: Arc<Shared>,
) {
    while let Some(Outgoing { line, written }) = rx.recv().await {
        // Flushed per line: a client blocked on `readline` must see each
        // message without the agent having to exit.
        let outcome = match output.write_all(&line).await {
            Ok(()) => output.flush().await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                if let Some(written) = written {
                    let _caller_gone = written.send(Ok(()));
                }
            }
            Err(e) => {
                tracing::debug!("ACP output failed: {e}");
                shared.close();
                if let Some(written) = written {
                    let _caller_gone = written.send(Err(AcpPeerError::Write(Arc::new(e))));
                }
                // Dropping the receiver fails every queued send with
                // `Closed`.
                return;
            }
        }
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    mut input: R,
    shared: Arc<Shared>,
    inbound: mpsc::Sender<Inbound>,
    options: AcpPeerOptions,
) {
    let mut framer = LineFramer::new(options.max_line);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match input.read(&mut buffer).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("ACP input failed: {e}");
                break;
            }
        };
        for frame in framer.push(buffer.get(..read).unwrap_or_default()) {
            handle_frame(frame, &shared, &inbound, &options).await;
        }
    }
    // `framer.finish()` is deliberately not called: a last line without its
    // newline is a message the client stopped writing, and acting on half a
    // message is worse than on none.
    shared.input_ended();
}

async fn handle_frame(
    frame: Result<Vec<u8>, FrameError>,
    shared: &Shared,
    inbound: &mpsc::Sender<Inbound>,
    options: &AcpPeerOptions,
) {
    let refusal = match frame {
        Err(e) => {
            // A request too long to read is refused under its own id, so
            // that the client stops waiting for it; an answer too long to
            // read fails the request of ours it answers.
            let id = match &e {
                FrameError::LineTooLong {
                    id: Some(id),
                    method: true,
                    ..
                } => id.to_json(),
                FrameError::LineTooLong {
                    id: Some(id),
                    method: false,
                    answer: true,
                    ..
                } => {
                    unreadable_answer(shared, id, &e.to_string());
                    Value::Null
                }
                _ => Value::Null,
            };
            Refusal::new(
                ErrorCode::INVALID_REQUEST,
                format!("Invalid request: {e}"),
                id,
            )
        }
        Ok(bytes) if deeper_than(&bytes, options.max_depth) => {
            let why = format!("nested deeper than {} levels", options.max_depth);
            if let Some(id) = response_id(&bytes) {
                unreadable_answer(shared, &id, &why);
            }
            Refusal::new(
                ErrorCode::INVALID_REQUEST,
                format!("Invalid request: {why}"),
                request_id(&bytes).map_or(Value::Null, |id| id.to_json()),
            )
        }
        Ok(bytes) => match wire::parse(&bytes) {
            Err(refusal) => refusal,
            Ok(frame) => return dispatch(frame, shared, inbound).await,
        },
    };
    let frame = ErrorFrame {
        jsonrpc: VERSION,
        id: &refusal.id,
        error: ErrorBody {
            code: i64::from(refusal.code.0),
            message: &refusal.message,
            data: None,
        },
    };
    if let Ok(line) = wire::line(&frame) {
        shared.send_internal(line).await;
    }
}

/// Fails the agent's request that an unreadable line answers (too long, or
/// nested too deep), at once rather than when it times out.
fn unreadable_answer(shared: &Shared, id: &RequestId, why: &str) {
    shared.route(
        &id.to_json(),
        Err(ClientError {
            code: i64::from(ErrorCode::INTERNAL_ERROR.0),
            message: format!("the client's answer could not be read: {why}"),
            data: None,
        }),
    );
}

async fn dispatch(frame: Frame, shared: &Shared, inbound: &mpsc::Sender<Inbound>) {
    let message = match frame {
        Frame::Request { id, method, params } => {
            let params = request_params(&method, params);
            if let Ok(RequestParams::Initialize(init)) = &params {
                if let Ok(mut caps) = shared.client_caps.lock() {
                    caps.clone_from(&init.client_capabilities);
                }
            }
            Inbound::Request(Box::new(InboundRequest { id, method, params }))
        }
        Frame::Notification { method, params } => {
            let params = notification_params(&method, params);
            Inbound::Notification(InboundNotification { method, params })
        }
        Frame::Response { id, outcome } => return shared.route(&id, outcome),
        Frame::Ignored(why) => return tracing::debug!("ignoring {why}"),
    };
    if inbound.send(message).await.is_err() {
        tracing::debug!("the application stopped receiving; dropping a message");
    }
}
