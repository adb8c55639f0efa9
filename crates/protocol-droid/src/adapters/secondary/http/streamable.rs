//! The Streamable HTTP client transport, for both eras.
//!
//! Each request is one POST whose answer is either a JSON body or an SSE
//! stream carrying the server's requests and notifications before the
//! response. A stream that ends before the response is resumed with a GET
//! carrying `Last-Event-ID`, after the `retry` delay the server asked for. In
//! the legacy era the session id from `initialize` is repeated on every
//! request, a GET stream carries what the server sends unprompted, a `404`
//! means the session is gone, and `close` ends the session with DELETE.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Response, StatusCode};
use serde_json::Value;
use tokio::task::{AbortHandle, JoinHandle};
use url::Url;

use super::super::authorizer::{Authorizer, Challenge};
use super::super::tls::{Trust, describe};
use super::credentials::Credentials;
use crate::application::client::headers::encode;
use crate::application::client::{Inbound, InboundTx, Link, LinkError, Outgoing};
use crate::application::gateway::invisible;
use crate::domain::jsonrpc::{self, RequestId};

/// The largest JSON response body read.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

/// How often a broken response stream is resumed before the request fails.
const MAX_RESUMES: u32 = 5;

/// How often one request answers a challenge before giving up; the
/// authorizer bounds its own attempts too.
const MAX_CHALLENGES: u32 = 4;

/// How long a POST of a notification or an answer may wait for its `202`.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long closing waits for the server to answer the session's `DELETE`.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The wait before resuming when the server named none.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// The ceiling on a server-requested `retry`, so a hostile value cannot park
/// a request.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The floor under a server-requested `retry`, so that a stream answering
/// `retry: 0` and ending at once is not opened again as fast as the server
/// can end it.
const MIN_RETRY: Duration = Duration::from_millis(250);

/// How the transport behaves.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Extra headers sent with every request.
    pub headers: HeaderMap,
    /// Whether to open the GET stream after a legacy `initialize`.
    pub listen: bool,
    /// The connect timeout of the underlying client.
    pub connect_timeout: Duration,
    /// The certificate authorities an `https` server is checked against.
    pub trust: Trust,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            headers: HeaderMap::new(),
            listen: true,
            connect_timeout: Duration::from_secs(10),
            trust: Trust::default(),
        }
    }
}

impl HttpOptions {
    /// Adds a header sent with every request, kept out of debug output
    /// (configured headers often carry keys).
    ///
    /// # Errors
    ///
    /// When `name` or `value` cannot be an HTTP header.
    pub fn add_header(&mut self, name: &str, value: &str) -> Result<(), InvalidHeader> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| InvalidHeader(format!("{name:?} is not a header name")))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| InvalidHeader(format!("the value of {name} is not a header value")))?;
        value.set_sensitive(true);
        self.headers.append(name, value);
        Ok(())
    }
}

/// A header that cannot be sent; says which, never the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidHeader(String);

#[derive(Debug, Default)]
struct State {
    session: Option<String>,
    version: Option<String>,
}

struct Shared {
    http: reqwest::Client,
    url: Url,
    inbound: InboundTx,
    authorizer: Option<Arc<dyn Authorizer>>,
    options: HttpOptions,
    /// What is taken out of a server's answers before they are quoted.
    credentials: Credentials,
    state: Mutex<State>,
    /// The task carrying each request in flight, so a cancelled request's
    /// stream can be dropped.
    in_flight: Mutex<HashMap<RequestId, AbortHandle>>,
}

/// The Streamable HTTP transport.
pub struct StreamableHttp {
    shared: Arc<Shared>,
    listener: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for StreamableHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamableHttp")
            .field("url", &self.shared.url.as_str())
            .finish_non_exhaustive()
    }
}

impl StreamableHttp {
    /// A transport to the MCP endpoint at `url`, delivering to `inbound`.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be built.
    pub fn new(
        url: Url,
        inbound: InboundTx,
        authorizer: Option<Arc<dyn Authorizer>>,
        options: HttpOptions,
    ) -> Result<Self, LinkError> {
        let http = options
            .trust
            .client_builder()
            .map_err(|e| LinkError::Io(e.to_string()))?
            .connect_timeout(options.connect_timeout)
            // Redirects would carry the bearer token to another origin.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| LinkError::Io(e.to_string()))?;
        Ok(Self {
            shared: Arc::new(Shared {
                http,
                credentials: Credentials::new(&options.headers, &url),
                url,
                inbound,
                authorizer,
                options,
                state: Mutex::new(State::default()),
                in_flight: Mutex::new(HashMap::new()),
            }),
            listener: Mutex::new(None),
        })
    }

    /// The session id the server assigned, if any.
    #[must_use]
    pub fn session_id(&self) -> Option<String> {
        self.shared.state().session.clone()
    }
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The headers every request carries.
    async fn base_headers(&self) -> Result<HeaderMap, LinkError> {
        let mut headers = self.options.headers.clone();
        let (session, version) = {
            let state = self.state();
            (state.session.clone(), state.version.clone())
        };
        if let Some(session) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
            headers.insert("mcp-session-id", session);
        }
        if let Some(version) = version.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert("mcp-protocol-version", version);
        }
        if let Some(authorizer) = &self.authorizer {
            let value = authorizer
                .authorization()
                .await
                .map_err(|e| LinkError::Unauthorized(e.to_string()))?;
            if let Some(value) = value {
                self.credentials.given(&value);
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(header::AUTHORIZATION, value);
                }
            }
        }
        Ok(headers)
    }

    /// Sends one HTTP request, answering authorization challenges.
    async fn exchange(
        &self,
        method: Method,
        extra: &HeaderMap,
        body: Option<&[u8]>,
    ) -> Result<Response, LinkError> {
        // The session is the one the answer to `initialize` names (as the
        // revisions assign it); a session id on any other answer (a
        // `server/discover` probe's, a call's) is not taken up.
        let initializing = extra
            .get("mcp-method")
            .is_some_and(|method| method == "initialize");
        let mut challenges = 0;
        loop {
            let mut headers = self.base_headers().await?;
            headers.extend(extra.clone());
            let mut request = self
                .http
                .request(method.clone(), self.url.clone())
                .headers(headers);
            if let Some(body) = body {
                request = request.body(body.to_vec());
            }
            let response = request
                .send()
                .await
                .map_err(|e| LinkError::Io(describe(&e)))?;
            if let Some(session) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .filter(|_| initializing)
            {
                self.state().session = Some(session.to_owned());
            }
            if !cure(
                self.authorizer.as_deref(),
                &response,
                &self.url,
                &mut challenges,
            )
            .await?
            {
                return Ok(response);
            }
        }
    }

    async fn deliver(&self, mut item: Inbound) -> bool {
        if let Inbound::Message(message) = &mut item {
            self.credentials.redact_errors(message);
        }
        self.inbound.send(item).await.is_ok()
    }

    /// Carries one request to its answer.
    async fn post_request(self: Arc<Self>, id: RequestId, body: Vec<u8>, extra: HeaderMap) {
        let outcome = self.post_request_inner(&id, &body, &extra).await;
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        if let Err(error) = outcome {
            self.deliver(Inbound::Failed { id, error }).await;
        }
    }

    async fn post_request_inner(
        &self,
        id: &RequestId,
        body: &[u8],
        extra: &HeaderMap,
    ) -> Result<(), LinkError> {
        let had_session = self.state().session.is_some();
        let response = self.exchange(Method::POST, extra, Some(body)).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && had_session {
            self.state().session = None;
            return Err(LinkError::SessionExpired);
        }
        if !status.is_success() {
            let bytes = read_limited(response).await.unwrap_or_default();
            // The revision says 404 for a session the server no longer
            // knows; servers built on the TypeScript SDK's examples (its
            // reference server among them) answer 400, "No valid session
            // ID provided". A 400 naming the session is taken the same
            // way, so a restarted server is met with a new handshake.
            if status == StatusCode::BAD_REQUEST && had_session && names_session(&bytes) {
                self.state().session = None;
                return Err(LinkError::SessionExpired);
            }
            return self.refusal(id, status, &bytes).await;
        }
        if is_event_stream(&response) {
            return self.pump_until_answered(id, response).await;
        }
        let bytes = read_limited(response).await?;
        if bytes.is_empty() {
            return Err(LinkError::Http {
                status: status.as_u16(),
                body: "an empty answer to a request".to_owned(),
            });
        }
        // A JSON body is the answer to this request: one that holds none
        // (a page of HTML, a notification, another id) fails it now rather
        // than leaving it to its timeout.
        if self.deliver_body(&bytes, id).await {
            Ok(())
        } else {
            Err(LinkError::Http {
                status: status.as_u16(),
                body: format!(
                    "no response to this request in the answer: {}",
                    excerpt(&bytes, &self.credentials)
                ),
            })
        }
    }

    /// A non-success answer to a request: its JSON-RPC error when it carries
    /// one (given the request's id when the server could not), else the
    /// status.
    async fn refusal(
        &self,
        id: &RequestId,
        status: StatusCode,
        bytes: &[u8],
    ) -> Result<(), LinkError> {
        let status = status.as_u16();
        if let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(bytes) {
            // A JSON-RPC error is an object with a code; `{"error":
            // "invalid_token"}`, as OAuth resource servers answer, is a
            // refusal of the HTTP request, told with its status.
            let jsonrpc = message
                .get("error")
                .and_then(Value::as_object)
                .is_some_and(|error| error.contains_key("code"));
            if jsonrpc {
                if message.get("id").is_none_or(Value::is_null) {
                    message.insert("id".to_owned(), id.to_json());
                }
                self.deliver(Inbound::Message(Value::Object(message))).await;
                return Ok(());
            }
        }
        Err(LinkError::Http {
            status,
            body: excerpt(bytes, &self.credentials),
        })
    }

    /// Delivers the messages of a JSON body; whether one of them answers
    /// `id`.
    async fn deliver_body(&self, bytes: &[u8], id: &RequestId) -> bool {
        let answers = |message: &Value| {
            message.get("id").and_then(RequestId::from_json).as_ref() == Some(id)
                && (message.get("result").is_some() || message.get("error").is_some())
        };
        match jsonrpc::value_from_slice(bytes) {
            Ok(Value::Array(batch)) => {
                let answered = batch.iter().any(answers);
                for message in batch {
                    self.deliver(Inbound::Message(message)).await;
                }
                answered
            }
            Ok(Value::Object(mut message)) => {
                // An error the server could not give an id is this
                // request's, as in a refusal's body.
                if message.contains_key("error") && message.get("id").is_none_or(Value::is_null) {
                    message.insert("id".to_owned(), id.to_json());
                }
                let message = Value::Object(message);
                let answered = answers(&message);
                self.deliver(Inbound::Message(message)).await;
                answered
            }
            // Said in the request's failure; nothing to deliver.
            Ok(_) | Err(_) => false,
        }
    }

    /// Reads an SSE stream until the response to `id` has passed, resuming
    /// it with GET and `Last-Event-ID` when it ends early.
    async fn pump_until_answered(
        &self,
        id: &RequestId,
        response: Response,
    ) -> Result<(), LinkError> {
        let mut cursor = Cursor::default();
        if self.pump(response, Some(id), &mut cursor).await {
            return Ok(());
        }
        for _ in 0..MAX_RESUMES {
            // An event past the bound comes again on a resumed stream: the
            // request fails now, saying so.
            if let Some(broke) = cursor
                .broke
                .as_deref()
                .filter(|b| b.contains(super::event_bytes::TOO_LONG))
            {
                return Err(LinkError::Io(format!(
                    "the response stream broke before the response: {broke}"
                )));
            }
            let Some(last) = cursor.last_event_id.clone() else {
                break;
            };
            tokio::time::sleep(cursor.retry).await;
            let mut extra = HeaderMap::new();
            extra.insert(
                header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
            if let Ok(value) = HeaderValue::from_str(&last) {
                extra.insert("last-event-id", value);
            }
            let response = self.exchange(Method::GET, &extra, None).await?;
            if !response.status().is_success() || !is_event_stream(&response) {
                return Err(LinkError::Http {
                    status: response.status().as_u16(),
                    body: "resuming the response stream was refused".to_owned(),
                });
            }
            if self.pump(response, Some(id), &mut cursor).await {
                return Ok(());
            }
        }
        Err(LinkError::Io(match cursor.broke {
            Some(broke) => format!("the response stream broke before the response: {broke}"),
            None => "the response stream ended before the response".to_owned(),
        }))
    }

    /// Delivers a stream's messages; true once the response to `until` has
    /// been delivered.
    async fn pump(
        &self,
        response: Response,
        until: Option<&RequestId>,
        cursor: &mut Cursor,
    ) -> bool {
        let mut events = super::event_bytes::bounded_events(response, MAX_BODY).eventsource();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::debug!(%error, "the event stream broke");
                    cursor.broke = Some(error.to_string());
                    return false;
                }
            };
            if !event.id.is_empty() {
                cursor.last_event_id = Some(event.id.clone());
            }
            if let Some(retry) = event.retry {
                cursor.retry = retry.clamp(MIN_RETRY, MAX_RETRY);
            }
            if event.data.trim().is_empty() {
                continue;
            }
            let answered = match jsonrpc::value_from_str(&event.data) {
                Ok(message) => {
                    let is_answer = message.get("method").is_none()
                        && until.is_some_and(|id| {
                            message.get("id").and_then(RequestId::from_json).as_ref() == Some(id)
                        });
                    if !self.deliver(Inbound::Message(message)).await {
                        return true;
                    }
                    is_answer
                }
                Err(_) => {
                    self.deliver(Inbound::Malformed(event.data.chars().take(200).collect()))
                        .await;
                    false
                }
            };
            if answered {
                return true;
            }
        }
        false
    }

    /// Opens the standalone GET stream of a legacy session. `None` when the
    /// server offers no such stream (`405`) or refused it.
    async fn open_listen(&self, cursor: &Cursor) -> Result<Option<Response>, LinkError> {
        let mut extra = HeaderMap::new();
        extra.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        if let Some(value) = cursor
            .last_event_id
            .as_deref()
            .and_then(|l| HeaderValue::from_str(l).ok())
        {
            extra.insert("last-event-id", value);
        }
        let had_session = self.state().session.is_some();
        let response = self.exchange(Method::GET, &extra, None).await?;
        let status = response.status();
        if status.is_success() && is_event_stream(&response) {
            return Ok(Some(response));
        }
        // The session unknown to the server (`404`, or a `400` naming it, as
        // `post_request_inner` reads them): said, and the session left for
        // the request path to replace, which does so once, in order. Only
        // the caller knows whether this is news: a server that never had a
        // GET stream may answer its absence with `404` too.
        if had_session && status == StatusCode::NOT_FOUND {
            return Err(LinkError::SessionExpired);
        }
        if had_session && status == StatusCode::BAD_REQUEST {
            let bytes = read_limited(response).await.unwrap_or_default();
            if names_session(&bytes) {
                return Err(LinkError::SessionExpired);
            }
            tracing::debug!(%status, "the GET stream was refused");
            return Ok(None);
        }
        if status != StatusCode::METHOD_NOT_ALLOWED {
            tracing::debug!(status = %response.status(), "the GET stream was refused");
        }
        Ok(None)
    }

    /// Reads the standalone GET stream, reopening it when it ends while the
    /// session lives. `first` is the stream already opened, if any.
    ///
    /// A server that cannot be reached at all at each of the attempts to
    /// reopen it is gone (stopped, restarted elsewhere): the connection is
    /// closed, so that whoever keeps it (a gateway, a bridge) knows, says
    /// so, and connects again, rather than taking it for alive while every
    /// request fails.
    async fn listen(self: Arc<Self>, first: Option<Response>) {
        let mut cursor = Cursor::default();
        let mut next = first;
        let mut failures = 0_u32;
        let mut unreachable = None;
        // Whether a stream was open on this session: only then is a `404`
        // news of the session's end.
        let mut streamed = false;
        while failures < MAX_RESUMES {
            let response = match next.take() {
                Some(response) => response,
                None => match self.open_listen(&cursor).await {
                    Ok(Some(response)) => response,
                    // The session this stream was open on is gone (the server
                    // restarted): the client is told, and the stream ends; a
                    // new session opens a new one.
                    Err(LinkError::SessionExpired) if streamed => {
                        self.deliver(Inbound::SessionEnded).await;
                        return;
                    }
                    // Only a server not reached at all: a refusal (an HTTP
                    // status, credentials not had) is the server's or the
                    // operator's word, not its absence.
                    Err(error @ LinkError::Io(_)) => {
                        failures += 1;
                        if failures == 1 || unreachable.is_some() {
                            unreachable = Some(error);
                        }
                        tokio::time::sleep(cursor.retry).await;
                        continue;
                    }
                    Ok(None) | Err(_) => {
                        failures += 1;
                        unreachable = None;
                        tokio::time::sleep(cursor.retry).await;
                        continue;
                    }
                },
            };
            failures = 0;
            unreachable = None;
            streamed = true;
            self.pump(response, None, &mut cursor).await;
            if self.inbound.is_closed() {
                return;
            }
            tokio::time::sleep(cursor.retry).await;
        }
        if let Some(error) = unreachable {
            tracing::debug!(%error, "the server could not be reached to reopen the GET stream");
            let reason = "the server could not be reached to reopen its stream".to_owned();
            let _ = self.inbound.send(Inbound::Closed(Some(reason))).await;
        }
    }
}

/// Where a stream stood, for resuming it.
#[derive(Debug)]
struct Cursor {
    last_event_id: Option<String>,
    retry: Duration,
    /// Why the stream last broke, if it broke rather than ended: what the
    /// request's failure says when the stream cannot be resumed.
    broke: Option<String>,
}

impl Default for Cursor {
    fn default() -> Self {
        Self {
            last_event_id: None,
            retry: DEFAULT_RETRY,
            broke: None,
        }
    }
}

/// Whether a refusal's body says the session is not known: a JSON-RPC
/// error about no request (a null or absent id: the server refused before
/// reading one), or a short line of plain text (the Python SDK's answer),
/// whose words speak of the session as missing, invalid, unknown or
/// expired. Anything else (an error about the request itself, a proxy's
/// page) is the request's refusal, not the session's end.
fn names_session(body: &[u8]) -> bool {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(message)) => {
            if !message.get("id").is_none_or(Value::is_null) {
                return false;
            }
            match message
                .get("error")
                .and_then(|error| error.get("message"))
                .and_then(Value::as_str)
            {
                Some(text) => text.to_owned(),
                None => return false,
            }
        }
        Ok(_) => return false,
        Err(_) => match std::str::from_utf8(body) {
            Ok(text) if text.len() <= SHORT_REFUSAL && !text.trim_start().starts_with('<') => {
                text.to_owned()
            }
            _ => return false,
        },
    };
    let text = text.to_ascii_lowercase();
    text.contains("session")
        && [
            "no valid",
            "not found",
            "invalid",
            "unknown",
            "expired",
            "missing",
        ]
        .iter()
        .any(|said| text.contains(said))
}

/// The longest plain-text refusal read as words about the session.
const SHORT_REFUSAL: usize = 1024;

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// How much of an error's body is shown, in bytes.
const SHOWN: usize = 300;

/// How much of an error's body is read for its excerpt: credentials are
/// taken out of this much before it is cut.
const READ_FOR_EXCERPT: usize = 16 * 1024;

/// The start of an error's body, for a message that is logged and shown:
/// every credential the transport sends taken out (servers echo request
/// headers in error pages), at most 300 bytes, and what a terminal would
/// obey in it (controls, a line break that would forge a log line of its
/// own, direction marks) escaped. The server chose every byte of it.
pub(super) fn excerpt(body: &[u8], credentials: &Credentials) -> String {
    // Credentials out first, over more than is shown, so that one cut at
    // the end of the excerpt is not shown in part.
    let read = String::from_utf8_lossy(
        body.get(..body.len().min(READ_FOR_EXCERPT))
            .unwrap_or_default(),
    );
    let redacted = credentials.redact(&read);
    let mut end = redacted.len().min(SHOWN);
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    let text = redacted.get(..end).unwrap_or_default();
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || invisible(c) {
            shown.extend(c.escape_debug());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// Reads a body, refusing one past [`MAX_BODY`].
pub(super) async fn read_limited(response: Response) -> Result<Vec<u8>, LinkError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| LinkError::Io(e.to_string()))?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(LinkError::TooLarge { limit: MAX_BODY });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The routing headers of a message: `Mcp-Method`, `Mcp-Name` and the
/// `Mcp-Param-*` hints.
fn routing_headers(message: &Outgoing) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    let Some(method) = message.message.get("method").and_then(Value::as_str) else {
        return headers;
    };
    if let Ok(value) = HeaderValue::from_str(method) {
        headers.insert("mcp-method", value);
    }
    let params = message.message.get("params");
    let name = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        // The tasks extension routes by task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => params.and_then(|p| p.get("taskId")),
        _ => None,
    };
    if let Some(value) = name
        .and_then(Value::as_str)
        .and_then(|n| HeaderValue::from_str(&encode(n)).ok())
    {
        headers.insert("mcp-name", value);
    }
    for (name, value) in &message.hints.param_headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    headers
}

impl Link for StreamableHttp {
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<(), LinkError>> {
        Box::pin(async move {
            let body = serde_json::to_vec(&message.message)
                .map_err(|e| LinkError::Io(format!("unwritable message: {e}")))?;
            let extra = routing_headers(&message);
            if let Some(id) = message.request_id() {
                // The answer may take long and carry the server's own
                // requests first; it is read on a task of its own.
                // The task waits until it is registered, so its own removal
                // when it ends can never come before the registration.
                let (registered, go) = tokio::sync::oneshot::channel::<()>();
                let shared = Arc::clone(&self.shared);
                let key = id.clone();
                let task = tokio::spawn(async move {
                    if go.await.is_ok() {
                        shared.post_request(key, body, extra).await;
                    }
                });
                self.shared
                    .in_flight
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id, task.abort_handle());
                let _started = registered.send(());
                return Ok(());
            }
            // A notification or an answer is acknowledged at once; a server
            // that never does, or never finishes the body of its refusal,
            // must not hold the caller.
            let acknowledged = async {
                let response = self
                    .shared
                    .exchange(Method::POST, &extra, Some(&body))
                    .await?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let body = read_limited(response).await.unwrap_or_default();
                Err(LinkError::Http {
                    status: status.as_u16(),
                    body: excerpt(&body, &self.shared.credentials),
                })
            };
            tokio::time::timeout(ACK_TIMEOUT, acknowledged)
                .await
                .map_err(|_| LinkError::Io(format!("no acknowledgement within {ACK_TIMEOUT:?}")))?
        })
    }

    fn set_protocol_version(&self, version: Option<&str>) {
        self.shared.state().version = version.map(str::to_owned);
    }

    fn is_stream(&self) -> bool {
        false
    }

    fn cancel(&self, id: &RequestId) {
        let task = self
            .shared
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(task) = task {
            // Dropping the response closes its stream: the server's signal.
            task.abort();
        }
    }

    fn open_listen_channel(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if !self.shared.options.listen || self.shared.state().session.is_none() {
                return;
            }
            // The stream is established before this returns, so a request sent
            // next cannot overtake it: a server that answers on whichever
            // stream is open would otherwise race the two.
            let cursor = Cursor::default();
            let opening = self.shared.open_listen(&cursor);
            let first = match tokio::time::timeout(ACK_TIMEOUT, opening).await {
                Ok(Ok(Some(response))) => Some(response),
                // Right after the handshake, a `404` is a server without a
                // GET stream, not the end of the session it just began.
                Ok(Ok(None) | Err(LinkError::SessionExpired)) => return,
                Ok(Err(error)) => {
                    // Transient, perhaps: the listener retries on its own.
                    tracing::debug!(%error, "the GET stream could not be opened");
                    None
                }
                Err(_) => {
                    tracing::debug!("the GET stream sent no headers in time");
                    return;
                }
            };
            let task = tokio::spawn(Arc::clone(&self.shared).listen(first));
            if let Some(old) = self
                .listener
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replace(task)
            {
                old.abort();
            }
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stop_streams();
            if self.shared.state().session.is_some() {
                // Ending the session frees it on the server at once rather
                // than when it idles out; a refusal changes nothing here, and
                // a server that does not answer holds the close only so long.
                let deleted = tokio::time::timeout(
                    CLOSE_TIMEOUT,
                    self.shared
                        .exchange(Method::DELETE, &HeaderMap::new(), None),
                )
                .await;
                match deleted {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => tracing::debug!(%error, "DELETE of the session failed"),
                    Err(_) => tracing::debug!("DELETE of the session went unanswered"),
                }
                self.shared.state().session = None;
            }
            // A request sent while the DELETE was on its way is ended too.
            self.stop_streams();
            let _ = self.shared.inbound.send(Inbound::Closed(None)).await;
        })
    }
}

impl StreamableHttp {
    /// Ends every stream this connection reads: the GET stream, and each
    /// request's answer still being read (a `subscriptions/listen` never
    /// ends on its own). Each holds an HTTP connection to the server, which
    /// must not outlive the connection it belongs to.
    fn stop_streams(&self) {
        if let Some(task) = self
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        let requests: Vec<AbortHandle> = self
            .shared
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, task)| task)
            .collect();
        for task in requests {
            task.abort();
        }
    }
}

impl Drop for StreamableHttp {
    fn drop(&mut self) {
        self.stop_streams();
    }
}

/// Answers `response` when it is a refusal credentials might cure (`401`,
/// or `403` for a scope) and there is an `authorizer` to ask: `Ok(true)`
/// to send the request again, `Ok(false)` to take the response as it is.
/// `challenges` counts the refusals answered for one request, at most
/// [`MAX_CHALLENGES`] (so at most one send more than that).
pub(super) async fn cure(
    authorizer: Option<&dyn Authorizer>,
    response: &Response,
    resource: &Url,
    challenges: &mut u32,
) -> Result<bool, LinkError> {
    let status = response.status();
    let www = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let curable = status == StatusCode::UNAUTHORIZED
        || (status == StatusCode::FORBIDDEN
            && www
                .as_deref()
                .is_some_and(|w| w.contains("insufficient_scope")));
    let Some(authorizer) = authorizer.filter(|_| curable) else {
        return Ok(false);
    };
    if *challenges >= MAX_CHALLENGES {
        return Err(LinkError::Unauthorized(format!(
            "still {status} after {challenges} authorizations"
        )));
    }
    *challenges += 1;
    let challenge = Challenge {
        status: status.as_u16(),
        resource: super::super::tls::without_credentials(resource),
        www_authenticate: www,
    };
    authorizer
        .challenged(&challenge)
        .await
        .map_err(|e| LinkError::Unauthorized(e.to_string()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::{Credentials, excerpt, names_session};

    /// An error body is the server's: what a terminal or a log reader
    /// would take for its own (an escape sequence, a line break starting a
    /// forged log line, a direction override) is escaped, and it is cut.
    #[test]
    fn an_error_body_is_shown_escaped_and_cut() {
        let body = "oops\u{1b}]0;PWNED\u{7}\n2026-12-06T00:00:00Z WARN droid: forged\u{202e}";
        let none = Credentials::default();
        let shown = excerpt(body.as_bytes(), &none);
        assert_eq!(
            shown,
            r"oops\u{1b}]0;PWNED\u{7}\n2026-12-06T00:00:00Z WARN droid: forged\u{202e}"
        );
        assert!(excerpt(&[b'a'; 1000], &none).len() == 300);
    }

    #[test]
    fn only_a_refusal_saying_the_session_is_not_known_ends_it() {
        for ended in [
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"}}"#,
            // The Python SDK's, as plain text.
            "Bad Request: No valid session ID provided",
        ] {
            assert!(names_session(ended.as_bytes()), "{ended}");
        }
        for other in [
            // About the request, which the server read.
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid session_id argument"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Unsupported protocol version"}}"#,
            "<html>session gateway: invalid request</html>",
        ] {
            assert!(!names_session(other.as_bytes()), "{other}");
        }
    }
}
