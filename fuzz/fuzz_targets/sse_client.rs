//! The client's reading of a server's SSE stream
//! (`protocol_droid::adapters::secondary::http`): `LegacySse::connect` and
//! its reader (2024-11-05 HTTP+SSE), and the response stream a
//! `StreamableHttp` request is answered with. Both parse with
//! `eventsource-stream` behind the project's `bounded_events`; what is
//! fuzzed here is the project's use of the events.
//!
//! The stream comes from a real, minimal HTTP server on 127.0.0.1 started
//! by the target (the only public way in: both take a `reqwest::Response`).
//!
//! Input: byte 0 even = HTTP+SSE (the body is the whole `GET /sse` stream),
//! odd = Streamable HTTP (the body answers `POST /mcp` carrying request 1;
//! the target appends a final event holding the answer). The rest is the
//! event stream.
//!
//! Invariants, against a direct model of the WHATWG event-stream rules:
//! - HTTP+SSE: `connect` succeeds only if the first event is `endpoint`,
//!   and then the endpoint is on the server's own origin; the messages and
//!   malformed reports delivered afterwards are exactly those of the
//!   model's `message` events, in order; the link reports `Closed` last.
//! - Streamable HTTP: the messages delivered are the model's events with
//!   data, in order, up to and including the first response to request 1,
//!   and nothing else; a stream holding the answer is always answered,
//!   whatever bytes come before it.
//! - Bytes that are not UTF-8 are decoded as the rules say, each invalid
//!   sequence one U+FFFD, and never stop the stream being read.
//! - A malformed report never carries more than 200 characters.
//!
//! Faults found and fixed (fuzz/regressions/sse_client): a stream that
//! starts with a UTF-8 BOM panicked inside `eventsource-stream` 0.2.3, which
//! slices the BOM off as one byte; the transports now remove it first. A
//! stream starting with two marks then panicked the same way on the second
//! (`second-bom`); a comment line now stands before it. A stream whose last
//! event ended on a lone CR, followed only by a UTF-8 sequence it never
//! finished, lost that event (`cr-ends-the-stream-before-a-cut-sequence`):
//! the end of a stream now hands on the cut sequence as U+FFFD, and an LF
//! after a final CR. That last change found the model wrong
//! (`a-final-cr-ends-the-empty-line-that-closes-an-event`): it read a
//! stream's very last CR as ending no line, as if more might follow; the
//! rules end a line there, so the event that empty line closes is
//! dispatched.
//! `PD_FUZZ_KNOWN_ISSUES` containing `sse-bom` still skips such streams, for
//! bisecting.
#![no_main]

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use protocol_droid::adapters::secondary::connect::Target;
use protocol_droid::adapters::secondary::http::{HttpOptions, LegacySse, StreamableHttp};
use protocol_droid::application::client::{Inbound, Link as _, Outgoing, inbound_queue};
use protocol_droid::domain::jsonrpc::RequestId;
use serde_json::{Value, json};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

/// The body the next request is answered with.
static BODY: LazyLock<Arc<Mutex<Vec<u8>>>> = LazyLock::new(Arc::default);

/// The port of the server, started once.
static PORT: LazyLock<u16> = LazyLock::new(|| {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("an address").port();
    let body = Arc::clone(&BODY);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let body = body.lock().map(|b| b.clone()).unwrap_or_default();
            let _ = serve(stream, &body);
        }
    });
    port
});

const ANSWER: &[u8] = b"\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";

fn serve(mut stream: TcpStream, body: &[u8]) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while request.len() < head_end + length {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let mut response = Vec::new();
    if head.starts_with("get /sse ") {
        response.extend_from_slice(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        response.extend_from_slice(body);
    } else if head.starts_with("post /mcp ") {
        response.extend_from_slice(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        response.extend_from_slice(body);
        response.extend_from_slice(ANSWER);
    } else {
        response.extend_from_slice(
            b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    }
    stream.write_all(&response)?;
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Write)?;
    // Let the client read to the end before the socket goes.
    let _ = stream.read(&mut buf);
    Ok(())
}

/// One dispatched event: its type and data.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    kind: String,
    data: String,
}

/// The event-stream rules (WHATWG HTML, "Interpreting an event stream"), as
/// far as a stream that ends can show them: the bytes are decoded as UTF-8
/// with each invalid sequence replaced by U+FFFD, a leading BOM is
/// dropped, lines end at CRLF, LF or CR, and an event not closed by an empty
/// line before the end is not dispatched. A CR that is the very last byte
/// ends its line like any other: once the stream has ended, no LF can
/// follow it.
fn model(body: &[u8]) -> Vec<Event> {
    let decoded = String::from_utf8_lossy(body);
    let text = decoded.strip_prefix('\u{feff}').unwrap_or(&decoded);
    let mut events = Vec::new();
    let (mut kind, mut data) = (String::new(), String::new());
    let mut rest = text;
    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                let kind = if kind.is_empty() { "message".to_owned() } else { kind.clone() };
                events.push(Event {
                    kind,
                    data: core::mem::take(&mut data),
                });
            }
            kind.clear();
            data.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => kind = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            _ => {}
        }
    }
    events
}

/// What a client is handed for one event's data.
#[derive(Debug, PartialEq)]
enum Delivered {
    Message(Value),
    Malformed(String),
}

fn delivered(data: &str) -> Delivered {
    match serde_json::from_str::<Value>(data) {
        Ok(value) => Delivered::Message(value),
        Err(_) => Delivered::Malformed(data.chars().take(200).collect()),
    }
}

/// The `host:port` of an absolute `http` URL, without user info.
fn authority(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("http://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    Some(authority.rsplit_once('@').map_or(authority, |(_, host)| host))
}

async fn legacy(port: u16, body: &[u8]) {
    let events = model(body);
    let url = match Target::url(&format!("http://127.0.0.1:{port}/sse")) {
        Ok(Target::Url(url)) => url,
        _ => panic!("the server URL is a URL"),
    };
    let (tx, mut rx) = inbound_queue();
    let connected = tokio::time::timeout(
        Duration::from_secs(30),
        LegacySse::connect(url, tx, None, &HttpOptions::default()),
    )
    .await
    .expect("connect never returned");
    let Ok(link) = connected else {
        return;
    };
    assert_eq!(
        events.first().map(|e| e.kind.as_str()),
        Some("endpoint"),
        "connected without an endpoint event first"
    );
    let shown = format!("{link:?}");
    let endpoint = shown
        .split_once("endpoint: \"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(url, _)| url)
        .expect("the link shows its endpoint");
    assert_eq!(
        authority(endpoint),
        Some(format!("127.0.0.1:{port}").as_str()),
        "the endpoint {endpoint} is not on the server's origin"
    );
    let expected: Vec<Delivered> = events
        .iter()
        .skip(1)
        .filter(|e| e.kind == "message")
        .map(|e| delivered(&e.data))
        .collect();
    let mut seen = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the stream was not read to its end");
        match next.expect("the link reports Closed before it goes") {
            Inbound::Message(value) => seen.push(Delivered::Message(value)),
            Inbound::Malformed(text) => {
                assert!(text.chars().count() <= 200);
                seen.push(Delivered::Malformed(text));
            }
            Inbound::Closed(_) => break,
            Inbound::Failed { .. } => panic!("nothing was sent, so nothing can fail"),
            Inbound::Answer { .. } => panic!("this link delivers whole messages"),
            Inbound::SessionEnded => panic!("only a Streamable HTTP stream can end a session"),
            Inbound::TooLarge { .. } => panic!("only a stdio line is refused for its length"),
        }
    }
    assert_eq!(seen, expected, "the messages delivered differ from the stream's");
    drop(link);
}

async fn streamable(port: u16, body: &[u8]) {
    let mut stream = body.to_vec();
    stream.extend_from_slice(ANSWER);
    let events = model(&stream);
    let url = match Target::url(&format!("http://127.0.0.1:{port}/mcp")) {
        Ok(Target::Url(url)) => url,
        _ => panic!("the server URL is a URL"),
    };
    let (tx, mut rx) = inbound_queue();
    let link = StreamableHttp::new(url, tx, None, HttpOptions::default()).expect("a client");
    let id = RequestId::Number(1);
    link.send(Outgoing::new(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})))
        .await
        .expect("a request is handed to its task");

    let mut expected = Vec::new();
    let mut holds_answer = false;
    for event in &events {
        if event.data.trim().is_empty() {
            continue;
        }
        let item = delivered(&event.data);
        let answers = matches!(&item, Delivered::Message(m)
            if m.get("method").is_none()
                && m.get("id").and_then(RequestId::from_json).as_ref() == Some(&id));
        expected.push(item);
        if answers {
            holds_answer = true;
            break;
        }
    }

    // A stream without the answer is resumed after the server's `retry`,
    // which may be long; only one holding it is waited for to the end.
    let patience = if holds_answer { Duration::from_secs(30) } else { Duration::from_secs(2) };
    let mut seen = Vec::new();
    let mut failed = false;
    let outcome = tokio::time::timeout(patience, async {
        while let Some(item) = rx.recv().await {
            match item {
                Inbound::Message(value) => {
                    let answers = value.get("method").is_none()
                        && value.get("id").and_then(RequestId::from_json).as_ref() == Some(&id);
                    seen.push(Delivered::Message(value));
                    if answers {
                        return;
                    }
                }
                Inbound::Malformed(text) => {
                    assert!(text.chars().count() <= 200);
                    seen.push(Delivered::Malformed(text));
                }
                Inbound::Failed { id: failed_id, .. } => {
                    assert_eq!(failed_id, id);
                    failed = true;
                    return;
                }
                Inbound::Answer { .. } => panic!("this link delivers whole messages"),
                // Said only of a GET stream, which a link that never
                // initialized does not open.
                Inbound::SessionEnded => panic!("no session was begun, so none can end"),
                Inbound::TooLarge { .. } => panic!("only a stdio line is refused for its length"),
                Inbound::Closed(_) => return,
            }
        }
    })
    .await;
    link.cancel(&id);
    if holds_answer {
        assert!(outcome.is_ok(), "a stream holding the answer was not answered");
        assert!(!failed, "a stream holding the answer failed");
    }
    assert_eq!(seen, expected, "the messages delivered differ from the stream's");
}

static SKIP_BOM: LazyLock<bool> = LazyLock::new(|| {
    std::env::var("PD_FUZZ_KNOWN_ISSUES").is_ok_and(|v| v.split(',').any(|i| i == "sse-bom"))
});

fuzz_target!(|data: &[u8]| {
    let [mode, body @ ..] = data else {
        return;
    };
    if *SKIP_BOM && body.starts_with(b"\xef\xbb\xbf") {
        return;
    }
    let port = *PORT;
    if let Ok(mut slot) = BODY.lock() {
        slot.clear();
        slot.extend_from_slice(body);
    }
    if mode % 2 == 0 {
        RUNTIME.block_on(legacy(port, body));
    } else {
        RUNTIME.block_on(streamable(port, body));
    }
});
