//! Micro-benchmarks of the paths every message takes: framing a line,
//! reading the JSON-RPC envelope (the depth check included), the
//! per-revision codecs in both directions, `resolve`, the bridge's
//! bridge's `translate` (pass-through and rebuild), the request digest, and sealing
//! and opening `requestState`.
//!
//! `cargo bench -p protocol-droid-bench` runs them; a name filter narrows
//! them (`cargo bench -p protocol-droid-bench -- codec/2026`).

use std::error::Error;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput};
use protocol_droid::application::bridge::translate;
use protocol_droid::application::server::{StateBinding, StateKey, StateSealer};
use protocol_droid::domain::canonical::request_digest;
use protocol_droid::domain::jsonrpc::framing::{DEFAULT_MAX_DEPTH, LineFramer, deeper_than};
use protocol_droid::domain::jsonrpc::parse;
use protocol_droid::domain::{
    CapabilitySet, DegradePolicy, Leg, Negotiation, ProtocolVersion, TransportKind, resolve,
};
use protocol_droid::wire::codec::{Sender, for_version};
use protocol_droid::wire::{ClientResult, ServerResult};
use serde_json::{Map, Value, json};

type Outcome = Result<(), Box<dyn Error>>;

fn main() -> Outcome {
    // Written out rather than through `criterion_group!`, whose generated
    // entry points carry no documentation and cannot return an error.
    let mut criterion = Criterion::default().configure_from_args();
    framing(&mut criterion);
    envelope(&mut criterion);
    codecs(&mut criterion)?;
    resolving(&mut criterion);
    translating(&mut criterion)?;
    digest(&mut criterion)?;
    request_state(&mut criterion)?;
    criterion.final_summary();
    Ok(())
}

/// A `tools/call` as a client writes it, with the newline that ends it.
const CALL_LINE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"hello from the benchmark\"}}}\n";

fn framing(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing");
    group.throughput(Throughput::Bytes(
        u64::try_from(CALL_LINE.len()).unwrap_or(0),
    ));
    group.bench_function("one line per read", |b| {
        let mut framer = LineFramer::default();
        b.iter(|| black_box(framer.push(black_box(CALL_LINE))));
    });
    // A read that ends mid-line, as a pipe hands over whatever it holds.
    let (head, tail) = CALL_LINE.split_at(CALL_LINE.len() / 2);
    group.bench_function("a line split over two reads", |b| {
        let mut framer = LineFramer::default();
        b.iter(|| {
            black_box(framer.push(black_box(head)));
            black_box(framer.push(black_box(tail)))
        });
    });
    let sixty_four = CALL_LINE.repeat(64);
    group.throughput(Throughput::Bytes(
        u64::try_from(sixty_four.len()).unwrap_or(0),
    ));
    group.bench_function("64 lines in one read", |b| {
        let mut framer = LineFramer::default();
        b.iter(|| black_box(framer.push(black_box(&sixty_four))));
    });
    group.finish();
}

/// What every transport does with a frame before dispatch: the nesting
/// check, then the envelope read into a request with its params.
fn envelope(c: &mut Criterion) {
    let line = CALL_LINE.strip_suffix(b"\n").unwrap_or(CALL_LINE);
    let mut group = c.benchmark_group("envelope");
    group.throughput(Throughput::Bytes(u64::try_from(line.len()).unwrap_or(0)));
    group.bench_function("depth check of a tools/call", |b| {
        b.iter(|| black_box(deeper_than(black_box(line), DEFAULT_MAX_DEPTH)));
    });
    group.bench_function("read a tools/call", |b| {
        b.iter(|| black_box(parse(black_box(line))));
    });
    // For scale: the same frame read whole into a JSON value, which is
    // what reading the envelope through a `Value` started with.
    group.bench_function("the same frame as a serde_json Value", |b| {
        b.iter(|| black_box(serde_json::from_slice::<Value>(black_box(line))));
    });
    group.finish();
}

/// One message of each kind, as its params (or result) arrive.
struct Kind {
    name: &'static str,
    sender: Sender,
    request: bool,
    method: &'static str,
    params: Value,
}

fn kinds(version: ProtocolVersion) -> Vec<Kind> {
    let mut call = json!({ "name": "echo", "arguments": { "text": "hello from the benchmark" } });
    if let (ProtocolVersion::V2026_07_28, Some(call)) = (version, call.as_object_mut()) {
        call.insert(
            "_meta".to_owned(),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
            }),
        );
    }
    vec![
        Kind {
            name: "client request tools/call",
            sender: Sender::Client,
            request: true,
            method: "tools/call",
            params: call,
        },
        Kind {
            name: "client request initialize",
            sender: Sender::Client,
            request: true,
            method: "initialize",
            params: json!({
                "protocolVersion": version.as_str(),
                "capabilities": { "sampling": {}, "roots": { "listChanged": true } },
                "clientInfo": { "name": "bench", "version": "1.0.0" },
            }),
        },
        Kind {
            name: "client notification cancelled",
            sender: Sender::Client,
            request: false,
            method: "notifications/cancelled",
            params: json!({ "requestId": 42, "reason": "the user gave up" }),
        },
        Kind {
            name: "server request sampling/createMessage",
            sender: Sender::Server,
            request: true,
            method: "sampling/createMessage",
            params: json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": "Capital of France?" } }],
                "maxTokens": 100,
            }),
        },
        Kind {
            name: "server notification progress",
            sender: Sender::Server,
            request: false,
            method: "notifications/progress",
            params: json!({ "progressToken": "t-1", "progress": 50, "total": 100, "message": "halfway" }),
        },
    ]
}

/// Decoding (params to the typed model, with the revision's method check) and
/// encoding (typed model back to params) for every kind a revision defines,
/// and a `tools/call` result both ways.
fn codecs(c: &mut Criterion) -> Outcome {
    let mut group = c.benchmark_group("codec");
    for version in ProtocolVersion::ALL {
        let codec = for_version(version);
        for kind in kinds(version) {
            let defined = if kind.request {
                codec.defines_request(kind.sender, kind.method)
            } else {
                codec.defines_notification(kind.sender, kind.method)
            };
            if !defined {
                continue;
            }
            let read = |params: Value| -> Result<Option<Value>, Box<dyn Error>> {
                let params = Some(params);
                Ok(match (kind.sender, kind.request) {
                    (Sender::Client, true) => {
                        codec.read_client_request(kind.method, params)?.params()?
                    }
                    (Sender::Client, false) => codec
                        .read_client_notification(kind.method, params)?
                        .params()?,
                    (Sender::Server, true) => {
                        codec.read_server_request(kind.method, params)?.params()?
                    }
                    (Sender::Server, false) => codec
                        .read_server_notification(kind.method, params)?
                        .params()?,
                })
            };
            // Fails here, before measuring, if the sample does not fit.
            read(kind.params.clone())?;
            let id = format!("{version}/decode {}", kind.name);
            group.bench_function(id, |b| {
                b.iter_batched(
                    || kind.params.clone(),
                    |params| match (kind.sender, kind.request) {
                        (Sender::Client, true) => {
                            drop(black_box(
                                codec.read_client_request(kind.method, Some(params)),
                            ));
                        }
                        (Sender::Client, false) => {
                            drop(black_box(
                                codec.read_client_notification(kind.method, Some(params)),
                            ));
                        }
                        (Sender::Server, true) => {
                            drop(black_box(
                                codec.read_server_request(kind.method, Some(params)),
                            ));
                        }
                        (Sender::Server, false) => {
                            drop(black_box(
                                codec.read_server_notification(kind.method, Some(params)),
                            ));
                        }
                    },
                    BatchSize::SmallInput,
                );
            });
            let id = format!("{version}/encode {}", kind.name);
            match (kind.sender, kind.request) {
                (Sender::Client, true) => {
                    let typed =
                        codec.read_client_request(kind.method, Some(kind.params.clone()))?;
                    group.bench_function(id, |b| b.iter(|| black_box(typed.params())));
                }
                (Sender::Client, false) => {
                    let typed =
                        codec.read_client_notification(kind.method, Some(kind.params.clone()))?;
                    group.bench_function(id, |b| b.iter(|| black_box(typed.params())));
                }
                (Sender::Server, true) => {
                    let typed =
                        codec.read_server_request(kind.method, Some(kind.params.clone()))?;
                    group.bench_function(id, |b| b.iter(|| black_box(typed.params())));
                }
                (Sender::Server, false) => {
                    let typed =
                        codec.read_server_notification(kind.method, Some(kind.params.clone()))?;
                    group.bench_function(id, |b| b.iter(|| black_box(typed.params())));
                }
            }
        }

        let result = tool_result();
        ServerResult::decode("tools/call", result.clone())?;
        group.bench_function(format!("{version}/decode server result tools/call"), |b| {
            b.iter_batched(
                || result.clone(),
                |result| black_box(ServerResult::decode("tools/call", result)),
                BatchSize::SmallInput,
            );
        });
        let typed = ServerResult::decode("tools/call", result.clone())?;
        group.bench_function(format!("{version}/encode server result tools/call"), |b| {
            b.iter(|| {
                let Ok(Value::Object(mut map)) = typed.encode() else {
                    return;
                };
                // Finishing is the per-revision step: `resultType` and cache
                // hints in 2026-07-28, their removal before.
                codec.finish_result(Some("tools/call"), &mut map);
                black_box(map);
            });
        });
    }
    let answer = json!({
        "role": "assistant",
        "content": { "type": "text", "text": "Paris" },
        "model": "bench-model",
        "stopReason": "endTurn",
    });
    ClientResult::decode("sampling/createMessage", answer.clone())?;
    group.bench_function("decode client result sampling/createMessage", |b| {
        b.iter_batched(
            || answer.clone(),
            |answer| black_box(ClientResult::decode("sampling/createMessage", answer)),
            BatchSize::SmallInput,
        );
    });
    group.finish();
    Ok(())
}

fn tool_result() -> Value {
    json!({
        "content": [{ "type": "text", "text": "hello from the benchmark" }],
        "isError": false,
    })
}

fn negotiation(version: ProtocolVersion) -> Negotiation {
    let caps = CapabilitySet::all_for(version);
    Negotiation {
        version,
        client_caps: caps,
        server_caps: caps,
        transport: TransportKind::StreamableHttp,
    }
}

fn resolving(c: &mut Criterion) {
    let mut group = c.benchmark_group("resolve");
    for version in ProtocolVersion::ALL {
        let negotiation = negotiation(version);
        group.bench_function(version.as_str(), |b| {
            b.iter(|| black_box(resolve(black_box(negotiation))));
        });
    }
    group.finish();
}

fn leg(version: ProtocolVersion) -> Leg {
    Leg::new(version, resolve(negotiation(version)))
}

fn translating(c: &mut Criterion) -> Outcome {
    let mut group = c.benchmark_group("bridge translator");

    // Pass-through: a reply the client can read comes back untouched.
    let plain: Map<String, Value> = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 7, "result": tool_result(),
    }))?;
    let old = leg(ProtocolVersion::V2024_11_05);
    let passed = translate(
        plain.clone(),
        ProtocolVersion::V2025_11_25,
        &old,
        DegradePolicy::strict(),
    )?;
    if !passed.report.is_empty() {
        return Err("the pass-through sample was rewritten".into());
    }
    group.bench_function("pass-through 2025-11-25 to 2024-11-05", |b| {
        b.iter_batched(
            || plain.clone(),
            |reply| {
                black_box(translate(
                    reply,
                    ProtocolVersion::V2025_11_25,
                    &old,
                    DegradePolicy::strict(),
                ))
            },
            BatchSize::SmallInput,
        );
    });

    // Rebuild: audio and structured content a 2024-11-05 client cannot read,
    // lowered because the policy allows it.
    let rich: Map<String, Value> = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 8, "result": {
            "content": [
                { "type": "text", "text": "a report" },
                { "type": "audio", "data": "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=", "mimeType": "audio/wav" },
            ],
            "structuredContent": { "temperature": 21.5 },
            "isError": false,
        },
    }))?;
    let rebuilt = translate(
        rich.clone(),
        ProtocolVersion::V2025_11_25,
        &old,
        DegradePolicy::permissive(),
    )?;
    if rebuilt.report.is_empty() {
        return Err("the rebuild sample passed through".into());
    }
    group.bench_function("rebuild 2025-11-25 to 2024-11-05", |b| {
        b.iter_batched(
            || rich.clone(),
            |reply| {
                black_box(translate(
                    reply,
                    ProtocolVersion::V2025_11_25,
                    &old,
                    DegradePolicy::permissive(),
                ))
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
    Ok(())
}

fn call_params() -> Result<Map<String, Value>, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "deploy",
        "arguments": { "environment": "production", "replicas": 3, "tags": ["a", "b"] },
        "_meta": { "progressToken": 1 },
        "requestState": "opaque",
    }))
}

fn digest(c: &mut Criterion) -> Outcome {
    let params = call_params()?;
    c.bench_function("request digest of tools/call params", |b| {
        b.iter(|| black_box(request_digest(black_box(&params))));
    });
    Ok(())
}

fn request_state(c: &mut Criterion) -> Outcome {
    let mut group = c.benchmark_group("requestState");
    let sealer = StateSealer::new(StateKey::new("bench", [7; 32])?);
    let binding = StateBinding {
        principal: Some("alice".to_owned()),
        method: "tools/call".to_owned(),
        target: "deploy".to_owned(),
        digest: request_digest(&call_params()?),
    };
    let payload = json!({ "step": 2, "answers": { "confirm": "yes" } });
    let now = 1_000;
    let sealed = sealer.seal(&payload, &binding, now)?;
    sealer.open(&sealed, &binding, now + 1)?;
    group.bench_function("seal", |b| {
        b.iter(|| black_box(sealer.seal(black_box(&payload), &binding, now)));
    });
    group.bench_function("open", |b| {
        b.iter(|| black_box(sealer.open(black_box(&sealed), &binding, now + 1)));
    });
    group.finish();
    Ok(())
}
