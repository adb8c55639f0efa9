//! The stdio transport: newline-delimited JSON-RPC on a pair of byte streams.
//!
//! One reader task cuts the input into bounded lines and answers what it can
//! at once (malformed frames, responses to the server's own requests,
//! cancellations); every request runs in its own task, so a slow tool never
//! holds up another request; one writer task owns the output, so frames never
//! interleave. Nothing but protocol messages is written to the output: logs
//! go to stderr through `tracing`.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::{AbortHandle, JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::application::server::reply::response_bytes;
use crate::application::server::{CallbackExchange, DynFrameSink, ExchangeError, RequestContext};
use crate::application::server::{Connection, Reply, Server};
use crate::application::squelch::Squelch;
use crate::domain::Refusal;
use crate::domain::jsonrpc::framing::{
    DEFAULT_MAX_DEPTH, DEFAULT_MAX_LINE, FrameError, LineFramer, deeper_than, request_id,
    response_id,
};
use crate::domain::jsonrpc::{
    EnvelopeError, ErrorCode, ErrorObject, Incoming, Message, Notification, Request, RequestId,
    Response, ResponseId, parse,
};
use crate::domain::{Feature, TransportKind};

/// Limits for one stdio connection. Every one is bounded by default.
#[derive(Clone, Copy, Debug)]
pub struct StdioOptions {
    /// The longest line accepted, in bytes (16 MiB by default).
    pub max_line: usize,
    /// The deepest nesting of arrays and objects accepted (64 by default).
    pub max_depth: usize,
    /// How many outgoing frames may wait for the writer (1024 by default).
    pub queue: usize,
    /// How many requests may be unanswered at once, running or with their
    /// answer not yet queued for the writer (256 by default). Past that the
    /// requests read wait in order, and once as many again wait the reader
    /// stops reading: the pipe is the client's flow control, and each such
    /// request is answered in turn rather than refused. Until then answers
    /// and notifications are still read while requests wait, so a running
    /// call waiting on the client's answer to a question is not stuck behind
    /// them; a client that pipelines more than twice this many requests
    /// while the server waits on its answers stalls its own calls until they
    /// time out. A batch is answered as one array, so those of its requests
    /// that find the table full are refused.
    pub max_in_flight: usize,
    /// How long a server-initiated request waits for the client (60 s).
    pub exchange_timeout: Duration,
    /// How long in-flight requests may finish after the input ends (5 s).
    pub drain: Duration,
}

impl Default for StdioOptions {
    fn default() -> Self {
        Self {
            max_line: DEFAULT_MAX_LINE,
            max_depth: DEFAULT_MAX_DEPTH,
            queue: 1024,
            max_in_flight: 256,
            exchange_timeout: Duration::from_secs(60),
            drain: Duration::from_secs(5),
        }
    }
}

/// Frames waiting to be written: each one serialised, newline included, by
/// the task that produced it, so the one writer only copies bytes. Counts
/// the notifications it dropped, which the connection's end says in all:
/// the warning at each drop is said at most once in ten seconds.
#[derive(Clone, Debug)]
struct Outbox(mpsc::Sender<Vec<u8>>, Arc<AtomicU64>);

impl Outbox {
    /// Queues a notification, or drops it, loudly, when the client has
    /// fallen `queue` frames behind: a notification is never worth stalling
    /// the handler that produced it.
    fn message(&self, message: Message) -> bool {
        let Some(frame) = encoded(&message.into_value()) else {
            return false;
        };
        let queued = self.0.try_send(frame).is_ok();
        if !queued {
            self.1.fetch_add(1, Ordering::Relaxed);
            static DROPPED: Squelch = Squelch::new(Duration::from_secs(10));
            if let Some(also) = DROPPED.admit() {
                tracing::warn!(
                    dropped_before = also,
                    "output queue full or closed; a notification was dropped"
                );
            }
        }
        queued
    }

    /// Answers are never dropped for want of queue space: the request's
    /// task waits for the writer instead.
    async fn answer(&self, value: Value) {
        if let Some(frame) = encoded(&value) {
            self.send(frame).await;
        }
    }

    /// Queues a frame already serialised, waiting for room.
    async fn send(&self, frame: Vec<u8>) {
        if self.0.send(frame).await.is_err() {
            tracing::debug!("output closed before an answer could be written");
        }
    }
}

impl DynFrameSink for Outbox {
    fn send(&self, message: Message) -> bool {
        self.message(message)
    }
}

type Pending = Arc<Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>>>;

/// Server-initiated requests over the same streams, answered by the reader.
#[derive(Debug)]
struct StdioExchange {
    outbox: Outbox,
    pending: Pending,
    next: AtomicU64,
    timeout: Duration,
}

impl CallbackExchange for StdioExchange {
    async fn exchange(&self, method: &str, params: Value) -> Result<Value, ExchangeError> {
        // A prefix no client would use, so our ids never collide with the
        // client's own in a log.
        let id = RequestId::String(format!(
            "droid-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        let mut guard = Outstanding {
            id: id.clone(),
            pending: Arc::clone(&self.pending),
            outbox: self.outbox.clone(),
            settled: false,
        };
        let request = Message::Request(Request {
            id,
            method: method.to_owned(),
            params: Some(params),
        });
        self.outbox.answer(request.into_value()).await;
        let outcome = tokio::time::timeout(self.timeout, rx).await;
        guard.settled = outcome.is_ok();
        match outcome {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(ExchangeError::Peer(error)),
            Ok(Err(_)) => Err(ExchangeError::Closed),
            Err(_) => Err(ExchangeError::TimedOut),
        }
    }
}

/// A server-initiated request awaiting its answer.
///
/// Dropped unanswered (timed out, or the tool call that asked was
/// cancelled), it tells the client with `notifications/cancelled`, so the
/// client can stop asking its user a question nobody is waiting for.
struct Outstanding {
    id: RequestId,
    pending: Pending,
    outbox: Outbox,
    settled: bool,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&self.id);
        }
        if !self.settled {
            let _queued = self.outbox.message(Message::Notification(Notification {
                method: "notifications/cancelled".to_owned(),
                params: Some(serde_json::json!({
                    "requestId": self.id.to_json(),
                    "reason": "the server stopped waiting for this answer",
                })),
            }));
        }
    }
}

/// The input half of [`process_streams`].
pub type ProcessInput = Box<dyn AsyncRead + Unpin + Send>;

/// The output half of [`process_streams`].
pub type ProcessOutput = Box<dyn AsyncWrite + Unpin + Send>;

/// This process's stdin and stdout, to [`serve`] on.
///
/// When both are pipes, which is how an MCP client starts a server, they
/// are opened again through `/proc/self/fd` as non-blocking pipes that
/// tokio's reactor drives. tokio's own `stdin()` and `stdout()` run every
/// read, write and flush on a blocking thread, and that hand-off was most
/// of a stdio round trip. The new open file descriptions keep `O_NONBLOCK`
/// to themselves: file descriptors 0 and 1, and any child that inherits
/// them, stay as they were. Anything else (a terminal, a file, a system
/// without `/proc`) gets tokio's handles.
///
/// Must be called within a tokio runtime.
#[must_use]
pub fn process_streams() -> (ProcessInput, ProcessOutput) {
    #[cfg(target_os = "linux")]
    {
        use tokio::net::unix::pipe;
        // `OpenOptions` refuses anything that is not a FIFO.
        let input = pipe::OpenOptions::new().open_receiver("/proc/self/fd/0");
        let output = pipe::OpenOptions::new().open_sender("/proc/self/fd/1");
        if let (Ok(input), Ok(output)) = (input, output) {
            return (Box::new(input), Box::new(output));
        }
    }
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
}

/// Serves `server` on this process's stdin and stdout
/// ([`process_streams`]) until stdin ends, as [`serve`] does.
///
/// ```no_run
/// use protocol_droid::prelude::*;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let server = Server::builder("hello", "1.0.0").build()?;
///     serve_process(server, StdioOptions::default()).await?;
///     Ok(())
/// }
/// ```
///
/// The connection runs as a task of the runtime rather than on the thread
/// that awaits this: a request spawned from a worker goes to that worker's
/// own queue, where one spawned from a `block_on` thread is handed across
/// threads and wakes a sleeping worker, on every request.
///
/// # Errors
///
/// As [`serve`]; a panic in the connection's task is reported as an error
/// rather than propagated.
pub async fn serve_process(server: Server, options: StdioOptions) -> std::io::Result<()> {
    let (input, output) = process_streams();
    match tokio::spawn(serve(server, input, output, options)).await {
        Ok(served) => served,
        Err(failed) => Err(std::io::Error::other(failed)),
    }
}

/// Serves `server` on `input` and `output` until the input ends.
///
/// # Errors
///
/// An I/O error reading the input. Malformed input is never an error here:
/// it is answered on the output and the connection goes on.
pub async fn serve<R, W>(
    server: Server,
    mut input: R,
    output: W,
    options: StdioOptions,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(options.queue.max(1));
    let outbox = Outbox(tx, Arc::default());
    let writer = tokio::spawn(write_frames(rx, output));
    let pending: Pending = Arc::default();
    let exchange = Arc::new(StdioExchange {
        outbox: outbox.clone(),
        pending: Arc::clone(&pending),
        next: AtomicU64::new(1),
        timeout: options.exchange_timeout,
    });
    let stop = CancellationToken::new();
    let connection = Arc::new(
        server
            .connect(TransportKind::Stdio, exchange, Arc::new(outbox.clone()))
            .stopping_on(stop.clone()),
    );
    let notifier = tokio::spawn(forward_changes(
        server.clone(),
        Arc::clone(&connection),
        outbox.clone(),
    ));

    let mut reader = Reader {
        connection,
        stop,
        outbox: outbox.clone(),
        pending,
        tasks: TaskTracker::new(),
        in_flight: InFlight::default(),
        unanswered: Arc::default(),
        notifier,
        waiting: VecDeque::new(),
        freed: Arc::new(Notify::new()),
        options,
    };
    let mut framer = LineFramer::new(options.max_line);
    let mut buffer = vec![0u8; 64 * 1024];
    let read_error = loop {
        reader.start_waiting().await;
        // With as many requests waiting as may run, the next bytes are left
        // in the pipe until one finishes.
        let reading = reader.waiting.len() <= options.max_in_flight;
        let freed = Arc::clone(&reader.freed);
        let read = tokio::select! {
            read = input.read(&mut buffer), if reading => match read {
                Ok(0) => break None,
                Ok(n) => n,
                Err(e) => break Some(e),
            },
            () = freed.notified(), if !reader.waiting.is_empty() => continue,
        };
        for frame in framer.push(buffer.get(..read).unwrap_or_default()) {
            reader.frame(frame).await;
        }
    };
    // A last line without its newline is served, or refused if too long.
    if let Some(last) = framer.finish() {
        reader.frame(last).await;
    }
    reader.run_waiting().await;
    // No answer can arrive any more: questions still waiting fail at once
    // rather than sitting out their timeout.
    if let Ok(mut pending) = reader.pending.lock() {
        pending.clear();
    }
    reader.drain().await;
    reader.connection.close();
    drop(reader);
    let dropped = outbox.1.load(Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "notifications were dropped in all, the client not reading its output (or it closed)"
        );
    }
    drop(outbox);
    // The writer ends once every sender is gone; a handler that handed its
    // session to a detached task may still hold one, so it gets a deadline.
    let mut writer = writer;
    match tokio::time::timeout(options.drain, &mut writer).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => tracing::warn!("the stdio writer ended abnormally"),
        Err(_) => {
            tracing::warn!("output still held after the drain; closing it");
            writer.abort();
        }
    }
    read_error.map_or(Ok(()), Err)
}

/// How long, once the drain is over, the requests still running have to
/// write the error they are answered with.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// How many bytes of frames the writer gathers into one write at most.
const WRITE_BATCH: usize = 64 * 1024;

async fn write_frames<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Vec<u8>>, mut output: W) {
    let mut batch = Vec::with_capacity(8 * 1024);
    while let Some(frame) = rx.recv().await {
        batch.clear();
        batch.extend_from_slice(&frame);
        // Frames already waiting go out in the same write and flush. A client
        // pipelining requests gets its answers in bursts, and each write is
        // a system call (and, on tokio's own stdout, a hand-off to a
        // blocking thread), so one write per burst rather than per frame
        // is much of stdio's throughput. Nothing waits for more to arrive:
        // a lone answer is written at once.
        while batch.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        if output.write_all(&batch).await.is_err() || output.flush().await.is_err() {
            tracing::debug!("output closed; dropping the rest");
            return;
        }
    }
}

/// The answer to request `id` as one frame.
fn response_frame(id: &RequestId, outcome: &Result<Reply, ErrorObject>) -> Vec<u8> {
    let mut frame = response_bytes(id, outcome);
    frame.push(b'\n');
    frame
}

/// `message` serialised, with its newline. A value that cannot be written
/// (a map with a non-string key, which no `Value` has) is dropped loudly
/// rather than sent half-written.
fn encoded(message: &impl serde::Serialize) -> Option<Vec<u8>> {
    let mut frame = Vec::with_capacity(256);
    match serde_json::to_writer(&mut frame, message) {
        Ok(()) => {
            frame.push(b'\n');
            Some(frame)
        }
        Err(e) => {
            tracing::error!("a frame could not be serialised and was dropped: {e}");
            None
        }
    }
}

/// Tells a legacy session about changes to what is offered, and what is
/// for it alone.
async fn forward_changes(server: Server, connection: Arc<Connection>, outbox: Outbox) {
    let mut feed = server.change_feed(connection.session());
    while let Some(change) = feed.next().await {
        if let Some(message) = connection.legacy_notification(&change) {
            let _queued = outbox.message(message);
        }
    }
}

struct Reader {
    connection: Arc<Connection>,
    /// Cancelled when the drain is over: the requests still running are
    /// answered with an error saying so.
    stop: CancellationToken,
    outbox: Outbox,
    pending: Pending,
    /// The tasks that wait for a handler and write its answer. Tracked
    /// rather than joined: only the drain at the end waits for them.
    tasks: TaskTracker,
    /// Requests still running. A task removes itself before it answers, so
    /// a client that sends its next request on reading the answer never
    /// finds the old id still "in flight".
    in_flight: InFlight,
    /// Requests started whose answers are not yet queued for the writer:
    /// bounded by `max_in_flight`, so that a client that stops reading
    /// stops the reading of its requests too, rather than piling up answers
    /// waiting for room (the in-flight table lets a request go before its
    /// answer is queued, for the reason above).
    unanswered: Arc<AtomicUsize>,
    /// The task telling the session of changes to what is offered.
    notifier: JoinHandle<()>,
    /// Requests read while the in-flight table was full, in order; at most
    /// `max_in_flight` of them, then reading stops.
    waiting: VecDeque<Request>,
    /// Signalled whenever a request leaves the in-flight table or its answer
    /// is queued.
    freed: Arc<Notify>,
    options: StdioOptions,
}

/// Why [`Reader::start`] did not start a request.
enum NotStarted {
    /// The table is full: the request is handed back to wait its turn.
    Full(Request),
    /// It must not run at all (its id is already in flight).
    Refused(String),
}

/// Ids are the client's, but a table of at most `max_in_flight` entries
/// bounds what colliding ones could cost, so a fast hasher is safe here.
type InFlight = Arc<Mutex<HashMap<RequestId, AbortHandle, foldhash::fast::RandomState>>>;

impl Reader {
    async fn frame(&mut self, frame: Result<Vec<u8>, FrameError>) {
        let bytes = match frame {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!("{e}");
                // A request too long to read is refused under its own id, so
                // that its sender stops waiting for it; an answer too long
                // to read fails the request of ours it answers.
                let id = match &e {
                    FrameError::LineTooLong {
                        id: Some(id),
                        method: true,
                        ..
                    } => ResponseId::Id(id.clone()),
                    FrameError::LineTooLong {
                        id: Some(id),
                        method: false,
                        answer: true,
                        ..
                    } => {
                        self.unreadable_answer(id.clone(), &e.to_string());
                        ResponseId::Null
                    }
                    _ => ResponseId::Null,
                };
                return self
                    .refuse_as(id, ErrorCode::INVALID_REQUEST, e.to_string())
                    .await;
            }
        };
        if deeper_than(&bytes, self.options.max_depth) {
            let message = format!(
                "message nested deeper than {} levels",
                self.options.max_depth
            );
            if let Some(id) = response_id(&bytes) {
                self.unreadable_answer(id, &message);
            }
            let id = request_id(&bytes).map_or(ResponseId::Null, ResponseId::Id);
            return self
                .refuse_as(id, ErrorCode::INVALID_REQUEST, message)
                .await;
        }
        match parse(&bytes) {
            Err(e) => {
                // An answer that is no answer fails the request of ours it
                // names at once, as an unreadable one does; the refusal
                // names no id, which is the client's to use for its own.
                self.no_answer(&e);
                self.outbox.answer(refusal(&e)).await;
            }
            Ok(Incoming::Single(message)) => {
                if let Some(answer) = self.message(message).await {
                    self.outbox.answer(answer.into_value()).await;
                }
            }
            // Boxed: a batch is rare, and inline it would make every
            // message's future larger than the message alone needs.
            Ok(Incoming::Batch(items)) => Box::pin(self.batch(items)).await,
        }
    }

    async fn refuse_as(&self, id: ResponseId, code: ErrorCode, message: String) {
        let response = Response {
            id,
            outcome: Err(ErrorObject::new(code, message)),
        };
        self.outbox
            .answer(Message::Response(response).into_value())
            .await;
    }

    /// Fails the request of ours that `error` names, if it refuses an
    /// answer that is no answer (see [`EnvelopeError::answer`]).
    fn no_answer(&self, error: &EnvelopeError) {
        if let Some(id) = error.answered() {
            // One client's flood of them is said once per interval.
            static NO_ANSWER: Squelch = Squelch::new(Duration::from_secs(10));
            if let Some(also) = NO_ANSWER.admit() {
                tracing::warn!(
                    id = %id.clipped(64),
                    passed_over_before = also,
                    "an answer that is no answer fails the request it names"
                );
            }
            self.unreadable_answer(id.clone(), &error.message);
        }
    }

    /// Fails the request of ours that an unreadable line answers (too long,
    /// nested too deep, or no answer), at once rather than when it times
    /// out. The client is refused as for any unreadable line.
    fn unreadable_answer(&self, id: RequestId, why: &str) {
        self.response(Response {
            id: ResponseId::Id(id),
            outcome: Err(ErrorObject::unreadable_answer(why)),
        });
    }

    /// Handles one message; answers at once only what needs no handler.
    async fn message(&mut self, message: Message) -> Option<Message> {
        match message {
            // Served before the next frame is read, so a request pipelined
            // right behind the handshake finds the session in place.
            Message::Request(request) if request.method == "initialize" => {
                let id = request.id.clone();
                let outcome = self
                    .connection
                    .handle(request, RequestContext::default())
                    .await;
                Some(Message::Response(Response {
                    id: ResponseId::Id(id),
                    outcome,
                }))
            }
            Message::Request(request) => self.request(request),
            Message::Notification(notification) => {
                self.notification(&notification);
                None
            }
            Message::Response(response) => {
                self.response(response);
                None
            }
        }
    }

    /// A request: started if a slot is free and none waits before it, else
    /// queued behind those that do.
    fn request(&mut self, request: Request) -> Option<Message> {
        if !self.waiting.is_empty() {
            self.waiting.push_back(request);
            return None;
        }
        self.run(request)
    }

    /// Starts the requests that wait, in order, while slots are free.
    async fn start_waiting(&mut self) {
        while let Some(request) = self.waiting.pop_front() {
            if let Some(refusal) = self.run(request) {
                self.outbox.answer(refusal.into_value()).await;
            }
            // Put back at the front by `run` when the table is full.
            if self.waiting.front().is_some() && self.full() {
                return;
            }
        }
    }

    /// Once the input ended: the requests still waiting run as slots free,
    /// until the drain deadline; any left then are answered with an error
    /// rather than dropped.
    async fn run_waiting(&mut self) {
        let deadline = tokio::time::Instant::now() + self.options.drain;
        while !self.waiting.is_empty() {
            self.start_waiting().await;
            if self.waiting.is_empty() {
                break;
            }
            let freed = Arc::clone(&self.freed);
            if tokio::time::timeout_at(deadline, freed.notified())
                .await
                .is_err()
            {
                break;
            }
        }
        for request in std::mem::take(&mut self.waiting) {
            let why = "the input ended before this request could run".to_owned();
            self.outbox
                .answer(refused(request.id, why).into_value())
                .await;
        }
    }

    /// Starts `request`, or puts it first in line when the table is full.
    fn run(&mut self, request: Request) -> Option<Message> {
        let id = request.id.clone();
        let work = match self.start(request) {
            Ok(work) => work,
            // With no slot at all nothing could ever run: refused at once.
            Err(NotStarted::Full(request)) if self.options.max_in_flight > 0 => {
                self.waiting.push_front(request);
                return None;
            }
            Err(NotStarted::Full(_)) => {
                return Some(refused(
                    id,
                    "no request may run on this connection".to_owned(),
                ));
            }
            Err(NotStarted::Refused(why)) => return Some(refused(id, why)),
        };
        let outbox = self.outbox.clone();
        let table = Arc::clone(&self.in_flight);
        let freed = Arc::clone(&self.freed);
        let unanswered = Arc::clone(&self.unanswered);
        // The handler runs in a task of its own, and a second task waits for
        // it and writes the answer: a panicking handler still gets its
        // request an answer, and a cancelled one (its task aborted) gets
        // none. Two tasks cost more instructions than one with
        // `catch_unwind`, but the handler's task is the one another worker
        // can steal, and with one request outstanding that keeps the answer
        // measurably sooner (docs/benchmarks.md).
        drop(self.tasks.spawn(async move {
            let task = work.id();
            let outcome = finished(work.await);
            settle(&table, &id, task, &freed);
            // The outcome is written and dropped before the wait for the
            // writer, so this task's state never holds it.
            if let Some(frame) = outcome.map(|o| response_frame(&id, &o)) {
                outbox.send(frame).await;
            }
            answered(&unanswered, 1, &freed);
        }));
        None
    }

    /// Whether as many requests are unanswered as may be.
    fn full(&self) -> bool {
        self.unanswered.load(Ordering::Acquire) >= self.options.max_in_flight
    }

    /// Starts `request`'s handler and enters it in the in-flight table, or
    /// says why not: its id is already in flight (JSON-RPC ids are unique
    /// among a peer's outstanding requests, and running a duplicate would
    /// run the tool twice), or too many requests are.
    fn start(
        &self,
        request: Request,
    ) -> Result<JoinHandle<Result<Reply, ErrorObject>>, NotStarted> {
        let Ok(mut in_flight) = self.in_flight.lock() else {
            return Err(NotStarted::Refused(
                "the in-flight table is unavailable".to_owned(),
            ));
        };
        let full = self.full();
        let Entry::Vacant(slot) = in_flight.entry(request.id.clone()) else {
            return Err(NotStarted::Refused(format!(
                "request id {} is already in flight",
                request.id
            )));
        };
        if full {
            return Err(NotStarted::Full(request));
        }
        let work = serve_one(Arc::clone(&self.connection), request);
        slot.insert(work.abort_handle());
        self.unanswered.fetch_add(1, Ordering::AcqRel);
        Ok(work)
    }

    fn notification(&mut self, notification: &Notification) {
        match notification.method.as_str() {
            "notifications/cancelled" => {
                let id = notification
                    .params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(RequestId::from_json);
                // Cancelling is racy by design: a request already answered
                // is simply not found. One still waiting never runs.
                if let Some(id) = &id {
                    self.waiting.retain(|request| request.id != *id);
                }
                let handle = id.and_then(|id| self.in_flight.lock().ok()?.remove(&id));
                if let Some(handle) = handle {
                    handle.abort();
                    self.freed.notify_one();
                }
            }
            "notifications/roots/list_changed" => self.connection.roots_changed(),
            "notifications/initialized" => {}
            other => tracing::debug!("ignoring notification {}", other.escape_debug()),
        }
    }

    fn response(&self, response: Response) {
        // A client's flood of either is said once per interval.
        static UNWAITED: Squelch = Squelch::new(Duration::from_secs(10));
        let Some(id) = response.id.request_id() else {
            if let Some(also) = UNWAITED.admit() {
                tracing::warn!(
                    passed_over_before = also,
                    "the client sent an error without an id, or an answer to no request"
                );
            }
            return;
        };
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(id));
        match waiter {
            Some(waiter) => {
                let _delivered = waiter.send(response.outcome);
            }
            None => {
                if let Some(also) = UNWAITED.admit() {
                    tracing::warn!(
                        id = %id.clipped(64),
                        passed_over_before = also,
                        "a response to a request this server never sent was dropped"
                    );
                }
            }
        }
    }

    /// A 2025-03-26 batch: each element is served concurrently, and the
    /// answers go back together as one array, from a task of its own so the
    /// reader keeps reading (a batched call may be waiting on a question the
    /// client answers on the next line).
    async fn batch(&mut self, items: Vec<Result<Message, EnvelopeError>>) {
        let batching = self
            .connection
            .negotiated()
            .is_some_and(|v| Feature::Batching.exists_at(v));
        if !batching || items.len() > self.options.max_in_flight {
            let why = if batching {
                format!(
                    "a batch may hold at most {} messages",
                    self.options.max_in_flight
                )
            } else {
                "JSON-RPC batches are only part of 2025-03-26".to_owned()
            };
            return self.refuse_batch(items, &why).await;
        }
        let mut answers = Vec::new();
        let mut running = Vec::new();
        for item in items {
            match item {
                Err(e) => {
                    self.no_answer(&e);
                    answers.push(refusal(&e));
                }
                Ok(Message::Request(request)) if request.method == "initialize" => {
                    let why = "initialize must not be part of a batch".to_owned();
                    answers.push(refused(request.id, why).into_value());
                }
                // Entered in the in-flight table like any request: a
                // duplicate id is refused, and each can be cancelled.
                Ok(Message::Request(request)) => {
                    let id = request.id.clone();
                    match self.start(request) {
                        Ok(work) => running.push((id, work)),
                        Err(NotStarted::Refused(why)) => {
                            answers.push(refused(id, why).into_value());
                        }
                        // A batch is answered as one array, so its requests
                        // cannot wait their turn one by one.
                        Err(NotStarted::Full(_)) => {
                            let why = format!(
                                "more than {} requests in flight",
                                self.options.max_in_flight
                            );
                            answers.push(refused(id, why).into_value());
                        }
                    }
                }
                Ok(other) => {
                    if let Some(answer) = self.message(other).await {
                        answers.push(answer.into_value());
                    }
                }
            }
        }
        let outbox = self.outbox.clone();
        let table = Arc::clone(&self.in_flight);
        let freed = Arc::clone(&self.freed);
        let unanswered = Arc::clone(&self.unanswered);
        let started = running.len();
        drop(self.tasks.spawn(async move {
            for (id, work) in running {
                let task = work.id();
                let outcome = finished(work.await);
                settle(&table, &id, task, &freed);
                if let Some(outcome) = outcome {
                    let response = Response {
                        id: ResponseId::Id(id),
                        outcome: outcome.map(Reply::into_value),
                    };
                    answers.push(Message::Response(response).into_value());
                }
            }
            // A batch of notifications only gets no answer at all.
            if !answers.is_empty() {
                outbox.answer(Value::Array(answers)).await;
            }
            answered(&unanswered, started, &freed);
        }));
    }

    /// Refuses the batch `items` for `why`: none of its requests starts, and
    /// each is refused under its own id, so that its sender stops waiting
    /// for it. What is no request starts nothing and is taken as it would be
    /// alone (an answer to a question of ours, a cancellation), rather than
    /// dropped unread.
    async fn refuse_batch(&mut self, items: Vec<Result<Message, EnvelopeError>>, why: &str) {
        let mut answers = Vec::new();
        for item in items {
            match item {
                Err(e) => {
                    self.no_answer(&e);
                    answers.push(refusal(&e));
                }
                Ok(Message::Request(request)) => {
                    answers.push(refused(request.id, why.to_owned()).into_value());
                }
                Ok(other) => {
                    if let Some(answer) = self.message(other).await {
                        answers.push(answer.into_value());
                    }
                }
            }
        }
        if !answers.is_empty() {
            self.outbox.answer(Value::Array(answers)).await;
        }
    }

    /// Lets in-flight requests finish, for a while, once the input ended.
    ///
    /// Past the deadline the requests still running are answered with an
    /// error saying the server stopped, given [`LAST_WORDS`] to write it;
    /// then the handlers left are stopped, the tasks waiting on them end
    /// with nothing to write, and any still waiting for room in the output
    /// end when the writer is closed.
    async fn drain(&mut self) {
        self.tasks.close();
        if tokio::time::timeout(self.options.drain, self.tasks.wait())
            .await
            .is_err()
        {
            self.stop.cancel();
            if tokio::time::timeout(LAST_WORDS, self.tasks.wait())
                .await
                .is_ok()
            {
                return;
            }
            if let Ok(mut in_flight) = self.in_flight.lock() {
                for (_, handle) in in_flight.drain() {
                    handle.abort();
                }
            }
        }
    }
}

/// The connection's end: its change notifier stops, and so do handlers
/// still running, which only a connection dropped before its drain (its
/// `serve` future cancelled) has; the tasks waiting on them then end with
/// nothing to write, and with every sender gone the writer ends too.
impl Drop for Reader {
    fn drop(&mut self) {
        self.notifier.abort();
        if let Ok(mut in_flight) = self.in_flight.lock() {
            for (_, handle) in in_flight.drain() {
                handle.abort();
            }
        }
    }
}

/// An invalid-request answer to `id`.
fn refused(id: RequestId, why: String) -> Message {
    Message::Response(Response {
        id: ResponseId::Id(id),
        outcome: Err(Refusal::invalid_request(why).into()),
    })
}

/// Counts `count` answers as queued (or never to be written), and wakes a
/// reader waiting for room.
fn answered(unanswered: &AtomicUsize, count: usize, freed: &Notify) {
    unanswered.fetch_sub(count, Ordering::AcqRel);
    freed.notify_one();
}

/// Takes a finished request out of the in-flight table, if its entry is
/// still `task`'s: after a cancel, the id may already belong to a newer
/// request.
fn settle(table: &InFlight, id: &RequestId, task: tokio::task::Id, freed: &Notify) {
    if let Ok(mut table) = table.lock() {
        if table.get(id).is_some_and(|entry| entry.id() == task) {
            table.remove(id);
        }
    }
    // A permit is stored if the reader is not waiting yet, so a slot freed
    // between its check and its wait is not missed.
    freed.notify_one();
}

/// Runs one request in a task of its own, so a panic in a handler is
/// caught there rather than taking the answer with it. Boxed, so that
/// spawning it and storing its output move a pointer rather than the whole
/// state of the dispatch future.
fn serve_one(
    connection: Arc<Connection>,
    request: Request,
) -> JoinHandle<Result<Reply, ErrorObject>> {
    tokio::spawn(Box::pin(async move {
        connection.answer(request, RequestContext::default()).await
    }))
}

/// What a request task's end means for its answer: its outcome, an internal
/// error if the handler panicked, or nothing at all if it was cancelled.
fn finished(
    joined: Result<Result<Reply, ErrorObject>, JoinError>,
) -> Option<Result<Reply, ErrorObject>> {
    match joined {
        Ok(outcome) => Some(outcome),
        Err(e) if e.is_panic() => {
            tracing::error!("a request handler panicked");
            Some(Err(Refusal::internal("the handler failed").into()))
        }
        Err(_) => None,
    }
}

fn refusal(error: &EnvelopeError) -> Value {
    Message::Response(error.to_response()).into_value()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::ir::ToolResult;

    /// The frame as the envelope's own serialisation would write it.
    fn expected(id: &RequestId, outcome: Result<Value, ErrorObject>) -> Option<Vec<u8>> {
        let message = Message::Response(Response {
            id: ResponseId::Id(id.clone()),
            outcome,
        });
        encoded(&message.into_value())
    }

    #[test]
    fn an_answer_frame_reads_as_the_response_it_answers() {
        let ids = [
            RequestId::Number(-7),
            RequestId::String("a \"quoted\" id\n é".to_owned()),
        ];
        let error = ErrorObject::new(ErrorCode::INVALID_PARAMS, "bad \"name\"")
            .with_data(json!({"uri": "file:///x"}));
        let tool = ToolResult::text("hé\tllo");
        let tool_value = serde_json::to_value(&tool).ok();
        for id in &ids {
            let cases = [
                (
                    Ok(Reply::Value(json!({"a": [1, null]}))),
                    Ok(json!({"a": [1, null]})),
                ),
                (
                    Ok(Reply::Tool(Box::new(tool.clone()))),
                    tool_value.clone().ok_or(error.clone()),
                ),
                (Err(error.clone()), Err(error.clone())),
            ];
            for (outcome, value) in cases {
                let frame = response_frame(id, &outcome);
                assert_eq!(Some(frame), expected(id, value));
            }
        }
    }
}
