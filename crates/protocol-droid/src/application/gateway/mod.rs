//! The gateway: many upstream servers, one catalog, and per session exactly
//! the tools that session was given.
//!
//! [`ToolCatalog`] holds every tool with its digest and provenance;
//! [`SessionToolSet`] is what one session may see and call, pinned per tool;
//! [`ExecutionGate`] checks both on every call, so a tool whose definition
//! changed after it was approved (a rug pull) is refused by name.
//! Upstreams are added with a connector, so the gateway can reopen them
//! (`upstream`), and a [`ToolPolicy`] says which of their tools are offered.
//! Each upstream is reached through a [`Bridge`](crate::application::bridge::Bridge):
//! tool calls, and everything else it offers (`forwarding`, under the
//! gateway's names, `names`), go through it on behalf of the calling
//! session. What an operator sees of it (`overview`, besides the status
//! `supervise` keeps) is read through the [`Gateway`] too.

mod catalog;
mod discovery;
mod forwarding;
mod gate;
mod names;
mod overview;
mod pins;
mod policy;
mod principals;
mod refresh;
mod runtime;
mod session;
mod shared;
mod sharing;
mod state;
mod supervise;
mod trust;
mod upstream;
mod watches;

pub use catalog::{
    CatalogChange, Pins, Replaced, ToolCatalog, ToolRecord, ToolRole, ToolSource, Upsert,
};
pub use discovery::{ACTIVATE_TOOLS, CALL_TOOL, DEACTIVATE_TOOLS, SEARCH_TOOLS};
pub use gate::{ExecutionGate, GateError};
pub use names::prefix_for as uri_prefix;
pub use names::{MAX_TOOL_NAME, MAX_UPSTREAM_NAME, invisible, readable_name};
pub use overview::{
    MAX_LISTED_PRIMITIVES, MAX_LISTED_SESSIONS, SessionOverview, UpstreamPrimitives, UpstreamReport,
};
pub use pins::{ApproveError, Approved};
pub use policy::{PolicyError, ToolPolicy};
pub use principals::{MAX_PRINCIPALS, PRINCIPAL_IDLE};
pub use refresh::MAX_UPSTREAM_TOOLS;
pub use runtime::{Gateway, ScopeRuleError, WeakGateway};
pub use session::{
    ActivatedTool, ActivationError, BulkActivationError, CorePin, DropReason, DroppedActivation,
    ExactRevocationError, SessionActivationGrant, SessionToolSet, SessionToolSetError,
};
pub use shared::{GatewayStore, SharedGateway, Versioned};
pub use state::{Disclosure, DriftReport, MAX_DRIFT_REPORTS, MAX_KEPT_DEFINITION, MAX_SESSIONS};
pub use trust::{Approval, Trust, TrustStore, TrustStoreError};
pub use upstream::{
    DEFAULT_TIMEOUT, UpstreamCounts, UpstreamError, UpstreamHealth, UpstreamOptions, UpstreamStatus,
};

#[cfg(test)]
mod tests;
