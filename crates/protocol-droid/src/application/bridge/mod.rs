//! Connecting a client and a server that speak different revisions, or
//! different transports.
//!
//! The bridge is a full server toward its client and a full client toward
//! its server; it terminates negotiation on both legs and translates only
//! where the two revisions disagree.
//!
//! - [`translate`] decides, per tool result, whether the client can read
//!   what the server said, and rewrites it only when a
//!   [`DegradePolicy`](crate::domain::DegradePolicy) authorises the loss.
//! - `lower`: the same decision for everything else a reply carries
//!   (definitions, prompt messages, resource contents) and for the
//!   questions a server asks the client.
//! - `upstream`: one connection to the server, which connection a request
//!   goes through, and where the server's own requests and notifications
//!   go; `pool`: the connections held, leased, bounded and reaped;
//!   `share`: each session's bounded share of the connection a stateless
//!   upstream shares among all of them.
//! - `call`: one request carried upstream and its answer brought back;
//!   `exchange`: the input rounds of such a call, including the multi
//!   round-trip synthesis in front of a legacy server; `remote`: the
//!   retry of a call parked at another instance, carried there.
//! - `watch`: resource subscriptions shared across downstream sessions;
//!   `subscriptions`: a legacy session's own, on its own connection.
//! - [`Observer`] (`observer`): who hears what the upstream announces (the
//!   bridge's own server, or a gateway that renames it).
//! - `tools`: what the bridge remembers of the upstream's tools;
//!   `listing`: its listings of them, one at a time.
//! - `reports`: translating a reply and keeping the report of each
//!   downgrade.
//! - [`Bridge`] (`runtime`): construction and what it answers about itself;
//!   `forwarding`: the [`Forward`](crate::application::server::Forward) its
//!   server serves through.

mod call;
mod content;
mod exchange;
mod forwarding;
mod listing;
mod lower;
mod observer;
mod pool;
mod remote;
mod reports;
mod runtime;
mod share;
mod starts;
mod subscriptions;
mod tools;
mod upstream;
mod watch;

pub use content::{Translated, translate};
pub use exchange::{MAX_PARKED, MAX_PARKED_PER_CALLER};
pub use lower::feature_named;
pub use observer::Observer;
pub use remote::ParkedCalls;
pub use runtime::{Bridge, BridgeError, BridgeOptions, MAX_REPORTS, REPORT_META, Report};
pub use upstream::{Connector, ConnectorError};

/// 128 random bits as hex: parked-call handles and URL elicitation ids, which
/// must mean nothing to anyone who did not receive them. `None` when the
/// system has no entropy to give.
fn random_hex() -> Option<String> {
    crate::application::random::secret_hex()
}
