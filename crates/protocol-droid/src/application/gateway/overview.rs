//! What an operator's page shows of a running gateway besides its
//! upstreams and catalog: the live sessions with their tools, and the
//! recent translations of upstream replies.

use super::runtime::Gateway;
use super::state::lock;
use crate::application::bridge::Report;
use crate::domain::SessionId;
use crate::domain::catalog::ToolId;

/// The most sessions [`Gateway::sessions`] lists: a page shows the first
/// of them, and a gateway may hold many thousands.
pub const MAX_LISTED_SESSIONS: usize = 256;

/// One session as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOverview {
    /// The session.
    pub session: SessionId,
    /// The tools it was given when it began (its core set).
    pub core: Vec<ToolId>,
    /// The tools it activated since, in id order.
    pub activated: Vec<ToolId>,
}

/// A translation of one upstream's reply for an older client.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamReport {
    /// The upstream whose reply was translated.
    pub upstream: String,
    /// What was translated, and what was lost.
    pub report: Report,
}

impl Gateway {
    /// The live sessions (at most [`MAX_LISTED_SESSIONS`], in id order)
    /// with their core and activated tools.
    #[must_use]
    pub fn sessions(&self) -> Vec<SessionOverview> {
        let state = lock(&self.inner.state);
        state
            .sessions
            .iter()
            .take(MAX_LISTED_SESSIONS)
            .map(|(session, set)| SessionOverview {
                session: *session,
                core: set.core_ids().cloned().collect(),
                activated: set.activated().map(|a| a.id.clone()).collect(),
            })
            .collect()
    }

    /// The translations each upstream's replies recently took, upstream by
    /// upstream, each upstream's oldest first.
    #[must_use]
    pub fn reports(&self) -> Vec<UpstreamReport> {
        // The bridges are copied out first: reading their reports takes
        // their own lock, not to be held under the gateway's.
        let bridges: Vec<_> = lock(&self.inner.state)
            .upstreams
            .iter()
            .filter_map(|(name, upstream)| Some((name.clone(), upstream.bridge.clone()?)))
            .collect();
        bridges
            .into_iter()
            .flat_map(|(upstream, bridge)| {
                bridge
                    .reports()
                    .into_iter()
                    .map(move |report| UpstreamReport {
                        upstream: upstream.clone(),
                        report,
                    })
            })
            .collect()
    }
}
