//! MCP for every published revision: server, client, bridge and gateway.
//!
//! The crate is laid out as ports and adapters, and the tree says so:
//!
//! - [`domain`]: the sans-IO core (revisions, features, negotiation, the
//!   revision-neutral model, JSON-RPC). Pure and synchronous; a crate of its
//!   own so the compiler keeps it that way.
//! - [`wire`]: the MCP message model and the per-revision codecs, also
//!   sans-IO and a crate of its own.
//! - [`application`]: the use cases. Each declares the ports it needs as
//!   traits and names no socket; it imports the domain, the wire model and
//!   its own ports, never an adapter (`scripts/check-layers.sh` fails the
//!   test command if it does).
//! - `adapters`: what drives the application (`primary`: transports) and
//!   what the application drives (`secondary`: upstream connections, child
//!   processes, TLS, the OAuth client, token validators).
//! - [`prelude`]: what a server author imports.
//!
//! A reply crossing a revision boundary shows the layers at work: the codec
//! reads it into the domain's model, the domain decides what the far side
//! can express, and the bridge refuses or rewrites accordingly.
//!
//! ```
//! use protocol_droid::application::bridge::translate;
//! use protocol_droid::domain::{
//!     CapabilitySet, DegradePolicy, Leg, Negotiation, ProtocolVersion, TransportKind, resolve,
//! };
//! use serde_json::{Map, Value, json};
//!
//! // A 2025-03-26 client, which has never heard of structured output.
//! let version = ProtocolVersion::V2025_03_26;
//! let caps = CapabilitySet::all_for(version);
//! let client = Leg::new(version, resolve(Negotiation {
//!     version,
//!     client_caps: caps,
//!     server_caps: caps,
//!     transport: TransportKind::Stdio,
//! }));
//!
//! let reply: Map<String, Value> = serde_json::from_value(json!({
//!     "jsonrpc": "2.0", "id": 1,
//!     "result": {
//!         "resultType": "complete",
//!         "content": [{ "type": "text", "text": "22.5" }],
//!         "structuredContent": { "celsius": 22.5 },
//!     },
//! }))?;
//!
//! let translated = translate(
//!     reply,
//!     ProtocolVersion::V2026_07_28,
//!     &client,
//!     DegradePolicy::permissive(),
//! )?;
//!
//! assert_eq!(translated.report.downgrades().len(), 1);
//! assert!(translated.reply["result"].get("structuredContent").is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod adapters;
pub mod application;

pub use protocol_droid_domain as domain;
pub use protocol_droid_wire as wire;

/// The JSON Schema derive that typed tools read their schemas from, so a
/// server author need not pick a version of it: derive with
/// `#[derive(JsonSchema)]` and, without a direct `schemars` dependency,
/// `#[schemars(crate = "protocol_droid::schemars")]`.
pub use schemars;

pub mod prelude;

/// The README and the long-form docs, compiled as doc tests so the Rust in
/// them cannot drift from the library.
#[cfg(doctest)]
mod long_form {
    #[doc = include_str!("../../../README.md")]
    struct Readme;
    #[doc = include_str!("../../../docs/architecture.md")]
    struct Architecture;
    #[doc = include_str!("../../../docs/acp.md")]
    struct Acp;
    #[doc = include_str!("../../../docs/auth.md")]
    struct Auth;
    #[doc = include_str!("../../../docs/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../../../docs/bridge.md")]
    struct Bridge;
    #[doc = include_str!("../../../docs/client.md")]
    struct Client;
    #[doc = include_str!("../../../docs/conformance.md")]
    struct Conformance;
    #[doc = include_str!("../../../docs/fuzzing.md")]
    struct Fuzzing;
    #[doc = include_str!("../../../docs/gateway.md")]
    struct Gateway;
    #[doc = include_str!("../../../docs/security.md")]
    struct Security;
    #[doc = include_str!("../../../docs/tasks.md")]
    struct Tasks;
}
