//! The gateway's upstreams: how each is reached, kept reachable, and
//! reported on.
//!
//! An upstream is added with a [`Connector`], not a connection, so the
//! gateway can open it again: an upstream that cannot be reached at start
//! does not stop the others, one that dies is reopened, and both are retried
//! with a backoff for as long as the gateway runs. While an upstream is down
//! its tools stay in the catalog (their pins are what they were) and a call
//! to one is answered at once with why the upstream is down, never left to
//! hang.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::policy::ToolPolicy;
use super::trust::Trust;
use crate::application::bridge::{
    Bridge, BridgeError, BridgeOptions, Connector, ConnectorError, Observer,
};
use crate::application::client::{Client, ClientError};
use crate::domain::ProtocolVersion;
use crate::domain::catalog::ToolId;

/// How the gateway treats one upstream.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamOptions {
    /// How its tools earn trust.
    pub trust: Trust,
    /// Which of its tools are offered, under which names.
    pub tools: ToolPolicy,
    /// How long a connection attempt, a listing or a call may take.
    pub timeout: Duration,
    /// How requests are carried to it: the degrade policy, the bounds on
    /// its connections. Its request timeout is [`Self::timeout`].
    pub bridge: BridgeOptions,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        Self {
            trust: Trust::Pinned,
            tools: ToolPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            bridge: BridgeOptions::default(),
        }
    }
}

/// How long an upstream may take to connect, list or answer a call, unless
/// its options say otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The first wait before reconnecting; it doubles after each failure.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest wait between reconnection attempts.
pub(super) const LAST_RETRY: Duration = Duration::from_secs(30);

/// How long a connection must last before the upstream counts as well
/// again: one that ends sooner is a failed attempt, and the next retry
/// waits longer.
pub(super) const STABLE_FOR: Duration = LAST_RETRY;

/// Whether an upstream can be used now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamHealth {
    /// The first attempt is under way.
    Connecting,
    /// Connected, speaking `version`.
    Up {
        /// The revision settled with it.
        version: ProtocolVersion,
    },
    /// Not usable; the gateway keeps trying.
    Down {
        /// Why the last attempt failed, or the connection ended.
        reason: String,
        /// Failed attempts since it was last up.
        attempts: u32,
    },
}

impl fmt::Display for UpstreamHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connecting => f.write_str("connecting"),
            Self::Up { version } => write!(f, "up ({version})"),
            Self::Down { reason, attempts } => {
                write!(f, "down after {attempts} attempt(s): {reason}")
            }
        }
    }
}

/// How many upstreams are in each state: what a readiness probe reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamCounts {
    /// Connected.
    pub up: usize,
    /// On their first attempt.
    pub connecting: usize,
    /// Not usable; being retried.
    pub down: usize,
}

/// One upstream as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamStatus {
    /// Its name: the namespace of its tools.
    pub name: String,
    /// Whether it can be used now.
    pub health: UpstreamHealth,
    /// How many of its tools the catalog holds.
    pub tools: usize,
}

/// Why an upstream could not be brought up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The connector failed, or the upstream settled no revision.
    #[error("upstream {upstream:?}: connecting failed: {source}")]
    Connect {
        /// The upstream.
        upstream: String,
        /// What the connector said, or why the connection was no use.
        source: ConnectorError,
    },
    /// Connecting or listing took longer than the upstream's timeout.
    #[error("upstream {upstream:?}: no answer within {} ms", .after.as_millis())]
    TimedOut {
        /// The upstream.
        upstream: String,
        /// The limit.
        after: Duration,
    },
    /// Its tools could not be listed.
    #[error("upstream {upstream:?}: listing its tools failed: {source}")]
    List {
        /// The upstream.
        upstream: String,
        /// The client's error.
        source: ClientError,
    },
    /// A scope rule names a tool the upstream does not list: a typo
    /// would leave the tool it meant open to every caller, so the upstream
    /// is not served until the rule is mended.
    #[error(
        "upstream {upstream:?}: the scope rule for {rule:?} names no tool it lists; \
         it is not served until the rule is mended"
    )]
    ScopeRule {
        /// The upstream.
        upstream: String,
        /// The rule's tool id.
        rule: ToolId,
    },
    /// The name is taken, holds a `/`, is not readable as it is (see
    /// [`readable_name`](super::readable_name)), or names its resources as
    /// another upstream's do.
    #[error(
        "upstream name {0:?} is taken, has a '/', is empty, longer than 64 characters, holds a control or invisible character or white space at an end, or names its resources as another's"
    )]
    Name(String),
}

/// Hands out [`Upstream::generation`]s.
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An upstream as the gateway holds it.
pub(super) struct Upstream {
    pub(super) connector: Connector,
    pub(super) options: UpstreamOptions,
    /// The live connection the catalog is listed on, while there is one:
    /// the one its bridge keeps.
    pub(super) client: Option<Client>,
    /// What carries sessions' requests to it, while it is connected.
    pub(super) bridge: Option<Bridge>,
    /// What its resource URIs are prefixed with ([`super::names`]).
    pub(super) prefix: String,
    pub(super) health: UpstreamHealth,
    /// Whether a reconnection loop is running for it.
    pub(super) reconnecting: bool,
    /// Tells this upstream from an earlier one of the same name (removed,
    /// or replaced by a reloaded configuration).
    pub(super) generation: u64,
    /// Whether a listing of its tools is running, and whether another was
    /// asked for meanwhile.
    pub(super) refreshing: bool,
    pub(super) refresh_again: bool,
    /// Failed attempts (and connections that ended soon after they came
    /// up) since it was last up for [`STABLE_FOR`]: how long the next
    /// retry waits.
    pub(super) failures: u32,
    /// When its connection came up.
    pub(super) up_since: Option<std::time::Instant>,
    /// Listings started, and the number of the latest one applied.
    pub(super) listings: u64,
    pub(super) applied: u64,
    /// The connection of the upstream this one replaces (a reload changed
    /// its settings), which carries its calls until this one's first
    /// listing is applied: until then the catalog is the one that
    /// connection listed.
    pub(super) predecessor: Option<Predecessor>,
}

/// What still serves an upstream a reload is replacing: its connection
/// while it was up, with the settings it was listed under.
#[derive(Clone)]
pub(super) struct Predecessor {
    /// The generation of the upstream it served: what its announcements
    /// are told by.
    pub(super) generation: u64,
    client: Client,
    pub(super) bridge: Bridge,
    version: ProtocolVersion,
    /// The policy its tools were listed under: a call routed to it names
    /// the tool as that policy does.
    pub(super) tools: ToolPolicy,
    /// How long a call on it may take: its connections close once the
    /// calls on them end, within this.
    pub(super) patience: Duration,
}

impl Predecessor {
    /// Whether its connection is still open.
    pub(super) fn open(&self) -> bool {
        self.client.closed().is_none()
    }

    /// Closes it once the calls on it have ended, within its patience (a
    /// moment past its timeout, so that a call that times out is answered,
    /// and cancelled upstream, before its connection goes). Requests must
    /// no longer reach it.
    pub(super) fn retire(self) {
        retire(self.bridge, self.patience);
    }
}

/// Closes `bridge` once the calls on it have ended, within a moment past
/// `timeout`, on a task of its own. A call whose upstream reports progress
/// is not waited for past it here: an upstream stopped or replaced goes
/// within its `timeout`, rather than running on beside its replacement.
pub(super) fn retire(bridge: Bridge, timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        bridge
            .close_when_done(timeout.saturating_add(Duration::from_secs(1)))
            .await;
    });
}

impl Upstream {
    pub(super) fn new(connector: Connector, options: UpstreamOptions, prefix: String) -> Self {
        Self {
            connector,
            options,
            client: None,
            bridge: None,
            prefix,
            health: UpstreamHealth::Connecting,
            reconnecting: false,
            generation: NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            refreshing: false,
            refresh_again: false,
            failures: 0,
            up_since: None,
            listings: 0,
            applied: 0,
            predecessor: None,
        }
    }

    /// The predecessor still serving for it, while its connection is open.
    fn open_predecessor(&self) -> Option<&Predecessor> {
        self.predecessor.as_ref().filter(|p| p.open())
    }

    /// What carries its calls while it is replaced: its connection, if it
    /// is up, or what carried them for it.
    pub(super) fn serving(&self) -> Option<Predecessor> {
        if let Some(predecessor) = self.open_predecessor() {
            return Some(predecessor.clone());
        }
        match (&self.client, &self.bridge, &self.health) {
            (Some(client), Some(bridge), UpstreamHealth::Up { version })
                if client.closed().is_none() =>
            {
                Some(Predecessor {
                    generation: self.generation,
                    client: client.clone(),
                    bridge: bridge.clone(),
                    version: *version,
                    tools: self.options.tools.clone(),
                    patience: self.options.timeout,
                })
            }
            _ => None,
        }
    }

    /// Its health as an operator and a readiness probe see it: while a
    /// replacement comes up, that of the connection still serving.
    pub(super) fn health(&self) -> UpstreamHealth {
        match self.open_predecessor() {
            Some(predecessor) => UpstreamHealth::Up {
                version: predecessor.version,
            },
            None => self.health.clone(),
        }
    }

    /// The bridges carrying its sessions' requests: its own, and while it
    /// is replaced, its predecessor's.
    pub(super) fn bridges(&self) -> impl Iterator<Item = &Bridge> {
        self.bridge
            .iter()
            .chain(self.predecessor.as_ref().map(|p| &p.bridge))
    }

    /// The policy its tools in the catalog were listed under: its
    /// predecessor's until its own first listing replaces them.
    pub(super) fn listed_under(&self) -> &ToolPolicy {
        self.predecessor
            .as_ref()
            .map_or(&self.options.tools, |p| &p.tools)
    }

    /// The bridge its sessions are served through now: while it is
    /// replaced, its predecessor's.
    pub(super) fn current_bridge(&self) -> Option<&Bridge> {
        match self.open_predecessor() {
            Some(predecessor) => Some(&predecessor.bridge),
            None => self.bridge.as_ref(),
        }
    }

    /// Whether announcements made for `generation` are this upstream's:
    /// its own, or those of the predecessor still serving for it.
    pub(super) fn hears(&self, generation: u64) -> bool {
        self.generation == generation
            || self
                .predecessor
                .as_ref()
                .is_some_and(|p| p.generation == generation)
    }

    /// The connection to call through (while it is replaced, its
    /// predecessor's), or what a caller is told instead.
    /// Why the upstream is down (a server's last words, a URL, a TLS
    /// detail) is the operator's to read in `status` and the log, not
    /// every caller's.
    pub(super) fn usable(&self, name: &str) -> Result<Bridge, String> {
        self.carrier(name).map(|(bridge, _)| bridge)
    }

    /// [`Self::usable`], with the policy that names the tools of what it
    /// answers (a predecessor's calls go out under the names its own
    /// listing was made with), both read at once.
    pub(super) fn carrier(&self, name: &str) -> Result<(Bridge, &ToolPolicy), String> {
        if let Some(predecessor) = self.open_predecessor() {
            return Ok((predecessor.bridge.clone(), &predecessor.tools));
        }
        match (&self.client, &self.bridge, &self.health) {
            (Some(client), Some(bridge), UpstreamHealth::Up { .. })
                if client.closed().is_none() =>
            {
                Ok((bridge.clone(), &self.options.tools))
            }
            (_, _, UpstreamHealth::Connecting) => Err(format!(
                "upstream {name} is unavailable; the gateway is connecting"
            )),
            _ => Err(format!(
                "upstream {name} is unavailable; the gateway is reconnecting"
            )),
        }
    }
}

/// The wait before attempt `attempt` (counted from 1) to reconnect.
pub(super) fn backoff(attempt: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1_u32 << attempt.saturating_sub(1).min(16))
        .min(LAST_RETRY)
}

/// Connects a bridge to the upstream `name` through `connector` within its
/// timeout, telling `observer` what the upstream announces.
pub(super) async fn open(
    name: &str,
    connector: &Connector,
    options: &UpstreamOptions,
    observer: Arc<dyn Observer>,
) -> Result<Bridge, UpstreamError> {
    let timeout = options.timeout;
    let bridge = BridgeOptions {
        request_timeout: timeout,
        // The gateway lists the upstream's tools on every change, and hands
        // the bridge each listing (`refresh`).
        lists_tools: false,
        ..options.bridge.clone()
    };
    let connecting = Bridge::connect_observed(Arc::clone(connector), bridge, observer);
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(bridge)) => Ok(bridge),
        // The connector's own words, which name the cause (a missing
        // command, a refused connection).
        Ok(Err(BridgeError::Connect(source))) => Err(UpstreamError::Connect {
            upstream: name.to_owned(),
            source,
        }),
        Ok(Err(other)) => Err(UpstreamError::Connect {
            upstream: name.to_owned(),
            source: Box::new(other),
        }),
        Err(_) => Err(UpstreamError::TimedOut {
            upstream: name.to_owned(),
            after: timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_ceiling() {
        assert_eq!(backoff(1), FIRST_RETRY);
        assert_eq!(backoff(2), FIRST_RETRY * 2);
        assert_eq!(backoff(3), FIRST_RETRY * 4);
        assert_eq!(backoff(40), LAST_RETRY);
    }
}
