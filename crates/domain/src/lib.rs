//! The sans-IO core of protocol-droid.
//!
//! This crate decides; it never does. It holds what every MCP revision means
//! and what a negotiation between two peers allows, and it reads no socket,
//! spawns no task and reads no clock. Time, where a decision needs it, is an
//! argument. That is what lets the same decisions be tested without a network,
//! fuzzed as message sequences and shared by the server, the client, the bridge
//! and the gateway that `protocol-droid` builds on top of it.
//!
//! # The main loop, in one example
//!
//! A connection settles a [`ProtocolVersion`], the two sides declare their
//! capabilities, and [`resolve`] turns that into a [`FeatureProfile`]. Every
//! later decision asks the profile, never the version string.
//!
//! ```
//! use protocol_droid_domain::feature::Feature;
//! use protocol_droid_domain::ir::ToolResult;
//! use protocol_droid_domain::ir::lower::lower_tool_result;
//! use protocol_droid_domain::{
//!     CapabilitySet, DegradePolicy, Negotiation, ProtocolVersion, TransportKind, resolve,
//! };
//!
//! let version = ProtocolVersion::V2025_03_26;
//! let caps = CapabilitySet::all_for(version);
//! let profile = resolve(Negotiation {
//!     version,
//!     client_caps: caps,
//!     server_caps: caps,
//!     transport: TransportKind::Stdio,
//! });
//!
//! // Structured tool output arrived in 2025-06-18, so this client cannot read it.
//! assert!(!profile.allows(Feature::ToolStructuredOutput));
//!
//! let result = ToolResult::text("22.5 degrees").with_structured(r#"{"celsius":22.5}"#)?;
//! let (lowered, report) =
//!     lower_tool_result(result, &profile, version, DegradePolicy::permissive())?;
//!
//! assert!(lowered.structured_content.is_none());
//! assert_eq!(report.downgrades().len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What this crate does not do
//!
//! No I/O, no async, no clock reads, no randomness. Anything that needs those
//! lives in `protocol-droid`, which re-exports this crate as
//! `protocol_droid::domain`.

pub mod canonical;
pub mod capability;
pub mod catalog;
pub mod feature;
pub mod ir;
pub mod jsonrpc;
pub mod logging;
pub mod negotiation;
pub mod policy;
pub mod refusal;
pub mod session;
pub mod transport;
pub mod version;

pub use capability::{Capability, CapabilitySet};
pub use feature::{Feature, FeatureProfile, FeatureSet};
pub use logging::LoggingLevel;
pub use negotiation::{Leg, Negotiation, resolve};
pub use policy::DegradePolicy;
pub use refusal::{Blame, Refusal, Unknown};
pub use session::SessionId;
pub use transport::TransportKind;
pub use version::{Era, ProtocolVersion, UnsupportedVersion, WireVersion};
