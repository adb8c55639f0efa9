//! The ACP agent-side peer, over in-memory pipes.
//!
//! `scenarios` runs the fifteen conformance scenarios of `spec/acp/ACP.md`
//! §12 against a small reference agent (`agent`) built only on the public
//! peer API, so each scenario shows the peer gives an agent what it needs.
//! `peer` covers what the peer alone guarantees: bad input, closing, large
//! lines, and requests from the agent to the client.

// `value["key"]` reads a JSON value and yields `null` when absent, which the
// assertions then catch; it cannot panic.
#![allow(clippy::indexing_slicing)]

#[path = "acp/agent.rs"]
mod agent;
#[path = "acp/peer.rs"]
mod peer;
#[path = "acp/scenarios.rs"]
mod scenarios;
#[path = "acp/support.rs"]
mod support;
