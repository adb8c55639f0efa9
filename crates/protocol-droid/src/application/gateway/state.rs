//! What the gateway knows, behind one lock: the catalog and the pins in
//! force, the upstreams, each session's tool set and the activations kept
//! for principals, drift reports and the watches to replay into a new
//! bridge; and how a call is authorized against it and routed.
//!
//! The gateway's runtime, its forwarding of the other primitives, its
//! discovery tools and its supervision all read and change this state; it
//! imports none of them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::catalog::{Pins, ToolCatalog, ToolSource};
use super::gate::ExecutionGate;
use super::names;
use super::principals::{Principals, digest_of, shared_session_key};
use super::session::{DropReason, DroppedActivation, SessionToolSet};
use super::shared::ActivationsRecord;
use super::trust::{Approval, TrustStore};
use super::upstream::Upstream;
use super::watches::Watches;
use crate::application::bridge::Bridge;
use crate::application::server::{AuthContext, CallError, PeerSession, ToolAccess};
use crate::domain::Refusal;
use crate::domain::SessionId;
use crate::domain::catalog::{SchemaDigest, ToolId};
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorCode;

/// How many sessions' tool sets are kept; the oldest goes first.
pub const MAX_SESSIONS: usize = 10_000;

/// How many drift reports are kept for [`Gateway::drift`](super::Gateway::drift);
/// past it, the oldest of the upstream with the most kept goes.
pub const MAX_DRIFT_REPORTS: usize = 256;

/// How sessions get their tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disclosure {
    /// Every verified tool is core for every session.
    Default,
    /// Sessions start with the discovery tools and activate the rest exactly.
    Progressive,
}

/// A change to a tool an operator should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriftReport {
    /// The tool.
    pub id: ToolId,
    /// Its digest before, if it existed.
    pub old: Option<SchemaDigest>,
    /// Its digest now, if it still exists.
    pub new: Option<SchemaDigest>,
    /// Session activations dropped because of it.
    pub dropped_activations: usize,
    /// Its definition before, as a model was shown it, when it existed and
    /// was at most [`MAX_KEPT_DEFINITION`] bytes of JSON. Shared, so a
    /// report is copied out from under the gateway's lock without it.
    pub old_definition: Option<Arc<JsonObject>>,
    /// Its definition now, on the same terms.
    pub new_definition: Option<Arc<JsonObject>>,
}

/// The largest definition a drift report keeps, in bytes of JSON: the
/// reports are kept [`MAX_DRIFT_REPORTS`] at a time, and a definition is
/// the upstream's to make as large as it likes.
pub const MAX_KEPT_DEFINITION: usize = 16 * 1024;

pub(super) struct State {
    /// Shared, so a search ranks a snapshot without holding the lock every
    /// session's lists and calls wait on; changed copy-on-write.
    pub(super) catalog: Arc<ToolCatalog>,
    /// The pins in force, derived from the three below ([`State::repin`]).
    pub(super) pins: Pins,
    /// The configuration's pins.
    pub(super) configured: Pins,
    /// What was trusted on first use, by upstreams trusted that way.
    pub(super) first_use: Pins,
    /// The upstreams whose first use has been taken (in this process, or
    /// recorded in the store), even those that showed nothing then.
    pub(super) first_used: BTreeSet<String>,
    /// The operator's approvals on the running gateway; each holds while
    /// the configuration pins its tool as it did when it was made.
    pub(super) approved: BTreeMap<ToolId, Approval>,
    pub(super) upstreams: BTreeMap<String, Upstream>,
    /// The scope a caller needs to see and call a tool, by id.
    pub(super) scopes: BTreeMap<ToolId, String>,
    /// The rules among [`Self::scopes`] that are on their way out (a
    /// reload no longer wants them, and drops them once its upstreams are
    /// up): in force until then, but not taken for a typo when their
    /// upstream no longer lists the tool they name.
    pub(super) retiring: BTreeSet<ToolId>,
    pub(super) sessions: BTreeMap<SessionId, SessionToolSet>,
    /// Why each session lost the activations it lost, so a call to one is
    /// refused by naming the reason rather than as an unknown tool.
    pub(super) lost: BTreeMap<SessionId, BTreeMap<ToolId, String>>,
    pub(super) drift: VecDeque<DriftReport>,
    /// How many of [`Self::drift`] each upstream has.
    pub(super) drift_kept: HashMap<String, usize>,
    /// Where first-use trust and approvals are kept beyond this process.
    pub(super) trust_store: Option<Arc<dyn TrustStore>>,
    /// What sessions watch upstream, for a bridge opened anew.
    pub(super) watches: Watches,
    /// The session standing for each authenticated 2026-07-28 principal,
    /// whose activations it keeps across requests.
    pub(super) principals: Principals,
    /// When shared with other instances: the version of each approval
    /// held, so that an older one read or told late is passed over.
    pub(super) approval_versions: BTreeMap<ToolId, u64>,
    /// When shared: the newest record of each principal's activations
    /// known, by the principal's digest, to take when the principal comes.
    pub(super) shared_activations: HashMap<String, ActivationsRecord>,
    /// When shared: each upstream's first use the store did not take yet,
    /// claimed again at every reading of the store.
    pub(super) unclaimed: BTreeMap<String, BTreeMap<ToolId, SchemaDigest>>,
}

/// How many lost activations are remembered per session.
const MAX_LOST: usize = 256;

impl State {
    /// The session's set, built on first use and rebuilt (carrying what
    /// still matches) when the catalog moved on.
    fn session_set(&mut self, session: SessionId, disclosure: Disclosure) -> &SessionToolSet {
        let stale = self
            .sessions
            .get(&session)
            .is_none_or(|set| set.is_stale(&self.catalog));
        if stale {
            let next = match self.sessions.get(&session) {
                Some(set) => {
                    let (next, dropped) = set
                        .rebuilt_for_catalog(&self.catalog, disclosure == Disclosure::Progressive);
                    report_dropped(session, &dropped);
                    self.remember_lost(session, &dropped);
                    next
                }
                None => {
                    // The server's sessions are bounded here; principals'
                    // by `principals`. Theirs are numbered from the top, so
                    // the first entry is always the server's oldest.
                    let served = self.sessions.len().saturating_sub(self.principals.len());
                    if served >= MAX_SESSIONS {
                        if let Some((old, _)) = self.sessions.pop_first() {
                            self.lost.remove(&old);
                        }
                    }
                    fresh_set(session, &self.catalog, disclosure)
                }
            };
            self.sessions.insert(session, next);
        }
        self.sessions
            .entry(session)
            .or_insert_with(|| fresh_set(session, &self.catalog, disclosure))
    }

    fn remember_lost(&mut self, session: SessionId, dropped: &[DroppedActivation]) {
        if dropped.is_empty() {
            return;
        }
        let lost = self.lost.entry(session).or_default();
        for d in dropped {
            let id = &d.activation.id;
            let why = match &d.reason {
                DropReason::Removed => format!("{id} is no longer offered by its upstream"),
                DropReason::Drifted { pinned, current } => format!(
                    "{id} changed after it was activated (digest {pinned}, now {current}); \
                     its activation was dropped and it must be approved and activated again"
                ),
                DropReason::Untrusted { pinned, current } => format!(
                    "{id} was {pinned} when activated and is {current} now; its activation was dropped"
                ),
                DropReason::OtherSession => continue,
            };
            if lost.len() >= MAX_LOST {
                lost.pop_first();
            }
            lost.insert(id.clone(), why);
        }
    }

    /// The set serving `peer` and `caller`: its session's, kept and rebuilt,
    /// when the session outlives the request; for a 2026-07-28 request over
    /// HTTP, which is its own session, the set its authenticated principal
    /// keeps across requests (progressive mode), or else a fresh core that
    /// keeps nothing.
    pub(super) fn set_for(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
    ) -> SessionToolSet {
        match self.keeping_session(peer, caller, disclosure) {
            Some(session) => self.session_set(session, disclosure).clone(),
            None => fresh_set(peer.session(), &self.catalog, disclosure),
        }
    }

    /// Runs `f` with the set serving `peer` and `caller`, as
    /// [`Self::set_for`] finds it, without copying a kept set: what every
    /// call and every visibility check reads.
    pub(super) fn with_set<R>(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
        f: impl FnOnce(&Self, &SessionToolSet) -> R,
    ) -> R {
        match self.keeping_session(peer, caller, disclosure) {
            Some(session) => {
                let _built = self.session_set(session, disclosure);
                match self.sessions.get(&session) {
                    Some(set) => f(self, set),
                    None => f(self, &fresh_set(session, &self.catalog, disclosure)),
                }
            }
            None => {
                let set = fresh_set(peer.session(), &self.catalog, disclosure);
                f(self, &set)
            }
        }
    }

    /// The session whose set outlives this request: the peer's own when it
    /// lasts, else the authenticated principal's (in progressive mode, where
    /// there is anything to keep), else none. Anonymous 2026-07-28 callers
    /// share no set: they would see each other's activations.
    pub(super) fn keeping_session(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
    ) -> Option<SessionId> {
        if peer.is_lasting() {
            return Some(peer.session());
        }
        if disclosure != Disclosure::Progressive {
            return None;
        }
        // A token naming neither subject nor client cannot tell two callers
        // apart: they would share activations.
        let claims = caller.claims()?;
        if claims.sub.is_none() && claims.client_id.is_none() {
            return None;
        }
        // By digest: what is kept of a principal, here and in a shared
        // store, never names it.
        let key = digest_of(&caller.principal_key()?);
        let known = self.principals.get(&key).is_some();
        let (session, forgotten) = self.principals.session_for(&key, Instant::now());
        for session in forgotten {
            self.forget_session(session);
        }
        // New here: what another instance shared of it, if anything.
        let shared = self
            .shared_activations
            .get(&key)
            .filter(|record| {
                !known && record.expires_at_ms > crate::application::server::tasks::now_ms()
            })
            .cloned();
        if let Some(record) = shared {
            self.apply_record(session, &record, disclosure);
            self.principals
                .set_shared_version(&key, record.expires_at_ms);
        }
        Some(session)
    }

    /// Holds the legacy session `session`, shared among instances as
    /// `name`, under a key of its own, so that its activations are shared
    /// as a principal's are (`Gateway::share_activations`) and taken from
    /// the other instances: those already shared are taken now, so the
    /// request that brought the session here finds them.
    pub(super) fn hold_shared(&mut self, session: SessionId, name: &str, disclosure: Disclosure) {
        let key = shared_session_key(name);
        self.principals.hold(&key, session);
        let shared = self
            .shared_activations
            .get(&key)
            .filter(|record| record.expires_at_ms > crate::application::server::tasks::now_ms())
            .cloned();
        if let Some(record) = shared {
            self.apply_record(session, &record, disclosure);
            self.principals
                .set_shared_version(&key, record.expires_at_ms);
        }
    }

    pub(super) fn forget_session(&mut self, session: SessionId) {
        self.principals.release(session);
        self.sessions.remove(&session);
        self.lost.remove(&session);
        self.watches.forget(session);
    }

    /// What the server may do with `id` for `peer` and `caller`.
    pub(super) fn access(
        &mut self,
        peer: &PeerSession,
        caller: &AuthContext,
        disclosure: Disclosure,
        id: &ToolId,
    ) -> ToolAccess {
        self.with_set(peer, caller, disclosure, |state, set| {
            if set.is_core(id) || set.activation(id).is_some() {
                return ToolAccess::Granted;
            }
            match state.lost.get(set.session()).and_then(|lost| lost.get(id)) {
                Some(why) => ToolAccess::Refused(why.clone()),
                None => match state.held_back(id, disclosure) {
                    Some(why) => ToolAccess::Refused(why),
                    None => ToolAccess::Hidden,
                },
            }
        })
    }

    /// Why `id` is refused, when every trusted tool is core and `id` drifted
    /// from the digest it was trusted at: sessions were shown it while it
    /// matched, and are told it is held back rather than that it is
    /// unknown, which a model would take for the tool gone. A tool never
    /// trusted was shown to no session and stays unnamed; progressive
    /// sessions learn only what they activated.
    fn held_back(&self, id: &ToolId, disclosure: Disclosure) -> Option<String> {
        if disclosure != Disclosure::Default {
            return None;
        }
        let record = self.catalog.get(id)?;
        let pinned = self.pins.get(id)?;
        if record.provenance.is_verified() || *pinned == record.digest {
            return None;
        }
        let current = &record.digest;
        Some(format!(
            "{id} changed since it was trusted (digest {pinned}, now {current}); \
             it is held back until an operator approves it"
        ))
    }

    /// Rebuilds every session's set against the catalog as it is now:
    /// the sessions whose list changed, and how many activations each tool
    /// lost.
    pub(super) fn rebuild_sessions(
        &mut self,
        disclosure: Disclosure,
    ) -> (Vec<SessionId>, HashMap<ToolId, usize>) {
        let sessions: Vec<SessionId> = self.sessions.keys().copied().collect();
        let mut dropped_by_tool: HashMap<ToolId, usize> = HashMap::new();
        let mut touched = Vec::new();
        for session in sessions {
            let Some(set) = self.sessions.get(&session) else {
                continue;
            };
            let (next, dropped) =
                set.rebuilt_for_catalog(&self.catalog, disclosure == Disclosure::Progressive);
            if !set.visible().eq(next.visible()) || !dropped.is_empty() {
                touched.push(session);
            }
            report_dropped(session, &dropped);
            self.remember_lost(session, &dropped);
            for d in &dropped {
                *dropped_by_tool.entry(d.activation.id.clone()).or_default() += 1;
            }
            self.sessions.insert(session, next);
        }
        (touched, dropped_by_tool)
    }

    pub(super) fn record_drift(&mut self, report: DriftReport) {
        keep_fairly(
            &mut self.drift,
            &mut self.drift_kept,
            report,
            MAX_DRIFT_REPORTS,
        );
    }
}

/// Adds `report` to `drift`, which holds at most `bound`: past it, the
/// oldest report of the upstream that has the most goes. So an upstream
/// that changes its tools without end crowds out only its own reports,
/// never another upstream's change (which the operator must see to
/// approve) while that one has fewer kept.
fn keep_fairly(
    drift: &mut VecDeque<DriftReport>,
    kept: &mut HashMap<String, usize>,
    report: DriftReport,
    bound: usize,
) {
    fn upstream(report: &DriftReport) -> &str {
        names::split_name(report.id.as_str()).map_or("", |(upstream, _)| upstream)
    }
    if drift.len() >= bound.max(1) {
        // Counted as reports come and go, so this costs a look at each
        // upstream and a walk to its oldest report, under the lock every
        // session waits on, however many reports one listing brings.
        let most = kept
            .iter()
            .max_by_key(|(_, count)| **count)
            .map(|(name, _)| name.clone());
        let oldest = most
            .as_deref()
            .and_then(|most| drift.iter().position(|report| upstream(report) == most));
        if let Some(gone) = oldest.and_then(|at| drift.remove(at)) {
            forget(kept, upstream(&gone));
        }
    }
    *kept.entry(upstream(&report).to_owned()).or_default() += 1;
    drift.push_back(report);
}

/// One report fewer of `upstream` kept.
fn forget(kept: &mut HashMap<String, usize>, upstream: &str) {
    if let Some(count) = kept.get_mut(upstream) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            kept.remove(upstream);
        }
    }
}

/// A new set for `session`: the core `disclosure` gives, no activations.
pub(super) fn fresh_set(
    session: SessionId,
    catalog: &ToolCatalog,
    disclosure: Disclosure,
) -> SessionToolSet {
    match disclosure {
        Disclosure::Default => SessionToolSet::default_core_for_catalog(session, catalog),
        Disclosure::Progressive => SessionToolSet::progressive_core_for_catalog(session, catalog),
    }
}

fn report_dropped(session: SessionId, dropped: &[DroppedActivation]) {
    for d in dropped {
        tracing::warn!(
            %session,
            tool = %d.activation.id,
            reason = ?d.reason,
            "activation dropped"
        );
    }
}

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where an authorized call goes: the upstream's connection, and the name
/// the upstream knows the tool by.
pub(super) struct Route {
    pub(super) bridge: Bridge,
    pub(super) name: String,
    pub(super) upstream: String,
    /// What the upstream's resource URIs are prefixed with.
    pub(super) prefix: String,
}

impl State {
    /// Authorizes `id` for `set` through the gate and finds its upstream.
    pub(super) fn route(&self, set: &SessionToolSet, id: &ToolId) -> Result<Route, CallError> {
        let record =
            ExecutionGate::authorize(set, &self.catalog, id).map_err(|e| refused(e.to_string()))?;
        let ToolSource::Upstream(upstream) = &record.source else {
            return Err(refused(format!("{id} has no upstream")));
        };
        let linked = self
            .upstreams
            .get(upstream)
            .ok_or_else(|| refused(format!("upstream {upstream} is gone")))?;
        let (bridge, policy) = linked.carrier(upstream).map_err(CallError::internal)?;
        let name = policy.upstream_name(record.source_name()).to_owned();
        Ok(Route {
            bridge,
            name,
            upstream: upstream.clone(),
            prefix: linked.prefix.clone(),
        })
    }
}

/// An upstream's error, as a session is to read it: a failure on the
/// gateway's side names the upstream, which is worth saying when a session
/// has many. Errors that speak of the gateway's own link (a 2026-07-28
/// server's `-32020` or `-32022`) are already this side's failure: the
/// bridge carrying the request maps them (`bridge::call::upstream_error`).
pub(super) fn link_error(upstream: &str, error: CallError) -> CallError {
    match error {
        CallError::Protocol(mut error) if error.code == ErrorCode::INTERNAL_ERROR => {
            error.message = format!("upstream {upstream}: {}", error.message);
            CallError::Protocol(error)
        }
        other => other,
    }
}

/// A refusal of the caller's request, by name (`-32602`).
pub(super) fn refused(message: String) -> CallError {
    Refusal::invalid_params(message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: &str) -> DriftReport {
        DriftReport {
            id: ToolId::new(id),
            old: None,
            new: None,
            dropped_activations: 0,
            old_definition: None,
            new_definition: None,
        }
    }

    #[test]
    fn an_upstream_changing_without_end_crowds_out_only_its_own_reports() {
        let mut drift = VecDeque::new();
        let mut kept = HashMap::new();
        for n in 0..8 {
            keep_fairly(&mut drift, &mut kept, report(&format!("flood/t{n}")), 8);
        }
        for tool in ["victim/a", "victim/b"] {
            keep_fairly(&mut drift, &mut kept, report(tool), 8);
        }
        for n in 8..1000 {
            keep_fairly(&mut drift, &mut kept, report(&format!("flood/t{n}")), 8);
        }
        assert_eq!(drift.len(), 8);
        assert_eq!(kept.get("victim"), Some(&2));
        assert_eq!(kept.get("flood"), Some(&6));
        let kept: Vec<&str> = drift.iter().map(|r| r.id.as_str()).collect();
        assert!(
            kept.contains(&"victim/a") && kept.contains(&"victim/b"),
            "{kept:?}"
        );
        // The flood keeps its newest.
        assert_eq!(kept.last(), Some(&"flood/t999"));
    }
}
