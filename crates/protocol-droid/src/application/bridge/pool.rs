//! The bridge's upstream connections: one per legacy downstream session,
//! one shared with a stateless upstream, exclusively leased ones for the
//! stateless callers of a legacy upstream, bounded and reaped when idle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::runtime::Bridge;
use super::share::{Holder, Seat};
use super::upstream::{
    Affinity, Lease, Upstream, UpstreamHandler, capabilities_key, full_capabilities,
    legacy_capabilities, lock,
};
use crate::application::server::rate::Caller;
use crate::application::server::{Call, CallError, DynExchange};
use crate::domain::{Era, TransportKind};
use crate::wire::ClientCapabilities;

impl Bridge {
    /// Closes idle connections and expired parked requests every so often,
    /// for as long as the bridge lives.
    pub(super) fn spawn_reaper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let every =
            (self.inner.options.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let now = Instant::now();
                lock(&inner.lot.flights).expire(now);
                let mut idle: Vec<Arc<Upstream>> = Vec::new();
                let mut resubscribe = Vec::new();
                {
                    let mut upstreams = lock(&inner.upstreams);
                    for (affinity, pool) in upstreams.iter_mut() {
                        if matches!(affinity, Affinity::Shared | Affinity::Kept) {
                            continue;
                        }
                        pool.retain(|u| {
                            // A connection whose server went away is
                            // dropped even while a subscription holds it;
                            // its session subscribes again on a new one.
                            if u.client.closed().is_some() {
                                u.ended();
                                if let Affinity::Session(session) = affinity {
                                    if !lock(&u.subscribed).is_empty() {
                                        resubscribe.push(*session);
                                    }
                                }
                                idle.push(Arc::clone(u));
                                return false;
                            }
                            let stale = u.is_idle()
                                && (u.kept_from_others()
                                    || now.duration_since(*lock(&u.last_used))
                                        > inner.options.idle);
                            if stale {
                                u.closing();
                                idle.push(Arc::clone(u));
                            }
                            !stale
                        });
                    }
                    upstreams.retain(|_, pool| !pool.is_empty());
                }
                {
                    let watches = lock(&inner.session_watches);
                    for session in resubscribe {
                        if let Some(watch) = watches.get(&session) {
                            watch.wake.notify_one();
                        }
                    }
                }
                for upstream in idle {
                    upstream.client.close().await;
                }
            }
        });
    }

    /// Which connections `call` may use.
    pub(super) fn affinity(&self, call: &Call) -> Affinity {
        if self.inner.upstream.version.era() == Era::Modern {
            Affinity::Shared
        } else if call.peer.negotiated().era() == Era::Legacy {
            Affinity::Session(call.session())
        } else {
            let declared = legacy_capabilities(&call.ctx.client_capabilities);
            Affinity::Caller(Caller::of(&call.ctx), capabilities_key(&declared))
        }
    }

    /// A connection for `call`: the affinity's one, or, for a stateless
    /// caller of a legacy upstream, one leased to this request alone, opened
    /// when none is free.
    pub(super) async fn lease_for(&self, call: &Call) -> Result<Lease, CallError> {
        let affinity = self.affinity(call);
        // Taken before the lease, so a request waiting for its session's
        // turn holds nothing of the connection's meanwhile.
        let seat = match (&affinity, Holder::of(call)) {
            (Affinity::Shared, Some(holder)) => {
                let patience = self.inner.options.request_timeout;
                let shares = &self.inner.shares;
                shares
                    .take(Some(holder.clone()), patience)
                    .await?
                    .map(|share| Seat::new(shares, holder, patience, share))
            }
            _ => None,
        };
        // A legacy session's connection declares what that client declared;
        // any other declares everything the bridge can ask a client for.
        // Worked out only for a connection that is opened.
        let declares = matches!(affinity, Affinity::Session(_) | Affinity::Caller(..));
        let capabilities = || {
            if declares {
                legacy_capabilities(&call.ctx.client_capabilities)
            } else {
                full_capabilities()
            }
        };
        let exchange = call.peer.exchange();
        // A stdio client has its connections to itself; a stateless caller
        // over HTTP may be several clients (anonymous ones from one address,
        // one principal's several).
        let shared = matches!(affinity, Affinity::Caller(..))
            && call.peer.transport() != TransportKind::Stdio;
        let lease = self
            .lease_reaching(affinity, capabilities, Some(exchange), shared)
            .await?
            .within(seat);
        // A legacy session's own connection reaches its client between
        // requests through the session (one opened for its subscriptions
        // learns how here).
        lease.upstream.handler.reach_client(exchange);
        Ok(lease)
    }

    /// A connection of `affinity`, opened declaring `capabilities` when none
    /// is free.
    pub(super) async fn lease(
        &self,
        affinity: Affinity,
        capabilities: impl FnOnce() -> ClientCapabilities,
    ) -> Result<Lease, CallError> {
        self.lease_reaching(affinity, capabilities, None, false)
            .await
    }

    /// [`Self::lease`]; a connection opened for a legacy session reaches
    /// its client through `exchange` from its handshake on, as a server
    /// may ask its roots at once. One opened `shared` by a stateless
    /// caller's several clients is marked so
    /// ([`UpstreamHandler::shared_by_callers`]).
    async fn lease_reaching(
        &self,
        affinity: Affinity,
        capabilities: impl FnOnce() -> ClientCapabilities,
        exchange: Option<&Arc<dyn DynExchange>>,
        shared: bool,
    ) -> Result<Lease, CallError> {
        let exclusive = matches!(affinity, Affinity::Caller(..));
        if let Some(found) = self.free(&affinity, exclusive)? {
            return Ok(found);
        }
        let _one = self.inner.opening.lock().await;
        if lock(&self.inner.ended).is_some() {
            return Err(CallError::internal(
                "the upstream connection ended, and the bridge does not restart it",
            ));
        }
        if let Some(found) = self.free(&affinity, exclusive)? {
            return Ok(found);
        }
        if let Affinity::Caller(caller, _) = &affinity {
            let held: usize = lock(&self.inner.upstreams)
                .iter()
                .filter(|(a, _)| matches!(a, Affinity::Caller(c, _) if c == caller))
                .map(|(_, pool)| pool.len())
                .sum();
            // At its share, the caller's own idle connection (one declaring
            // other capabilities, which this request cannot use) gives way:
            // else a burst under one capability set would hold the caller
            // out of every other until the idle ones are reaped.
            if held >= self.inner.options.max_upstreams_per_caller
                && !self.evict_where(|a| matches!(a, Affinity::Caller(c, _) if c == caller))
            {
                return Err(CallError::internal(
                    "this caller holds as many upstream connections as it may; try again later",
                ));
            }
        }
        // After the caller's own share: a connection of its own it gave up
        // makes room in all too, and no one else's is closed for a request
        // its own share then refuses.
        if self.connections() >= self.inner.options.max_upstreams && !self.evict_one() {
            return Err(CallError::internal(
                "the bridge has as many upstream connections open as it may; try again later",
            ));
        }
        let session = match affinity {
            Affinity::Session(session) => Some(session),
            _ => None,
        };
        let observer = lock(&self.inner.observer).clone();
        let mut handler = UpstreamHandler::new(capabilities(), observer, session);
        if shared {
            handler = handler.shared_by_callers();
        }
        let handler = Arc::new(handler);
        if let Some(exchange) = exchange {
            handler.reach_client(exchange);
        }
        handler.on_tools_changed(self.relist_hook());
        let wait = lock(&self.inner.starts).wait(Instant::now())?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let client = (self.inner.connector)(handler.clone()).await.map_err(|e| {
            lock(&self.inner.starts).failed(Instant::now());
            tracing::warn!(target: "droid::bridge", error = %e, "the upstream could not be reached");
            CallError::internal("the upstream could not be reached; the log says why")
        })?;
        let upstream = Arc::new(Upstream::new(
            client,
            handler,
            Arc::clone(&self.inner.starts),
        ));
        let lease = if exclusive {
            upstream
                .try_lease()
                .ok_or_else(|| CallError::internal("a new connection was taken"))?
        } else {
            upstream.share()
        };
        {
            // Checked under the lock `close` drains under: a bridge closed
            // while this connection opened takes nothing more in.
            let mut upstreams = lock(&self.inner.upstreams);
            if lock(&self.inner.ended).is_none() {
                upstreams.entry(affinity).or_default().push(upstream);
                return Ok(lease);
            }
        }
        drop(lease);
        upstream.client.close().await;
        Err(CallError::internal(
            "the upstream connection ended, and the bridge does not restart it",
        ))
    }

    /// Closes the least recently used connection no request uses (a retired
    /// one first), to make room; false when every connection is in use.
    pub(super) fn evict_one(&self) -> bool {
        self.evict_where(|_| true)
    }

    /// [`Self::evict_one`] among the connections whose affinity `among`
    /// takes.
    fn evict_where(&self, among: impl Fn(&Affinity) -> bool) -> bool {
        let victim = {
            let mut upstreams = lock(&self.inner.upstreams);
            let found = upstreams
                .iter()
                .filter(|(affinity, _)| !matches!(affinity, Affinity::Shared | Affinity::Kept))
                .filter(|(affinity, _)| among(affinity))
                .flat_map(|(affinity, pool)| pool.iter().map(move |u| (affinity.clone(), u)))
                .filter(|(_, u)| u.is_idle())
                .min_by_key(|(_, u)| {
                    let retired = u.kept_from_others();
                    (!retired, *lock(&u.last_used))
                })
                .map(|(affinity, u)| (affinity, Arc::clone(u)));
            let Some((affinity, victim)) = found else {
                return false;
            };
            if let Some(pool) = upstreams.get_mut(&affinity) {
                pool.retain(|u| !Arc::ptr_eq(u, &victim));
                if pool.is_empty() {
                    upstreams.remove(&affinity);
                }
            }
            victim
        };
        tokio::spawn(async move { victim.client.close().await });
        true
    }

    /// An open connection of `affinity` free for this request; those whose
    /// server went away are forgotten, and refused when restarting is off.
    pub(super) fn free(
        &self,
        affinity: &Affinity,
        exclusive: bool,
    ) -> Result<Option<Lease>, CallError> {
        let mut upstreams = lock(&self.inner.upstreams);
        let Some(pool) = upstreams.get_mut(affinity) else {
            return Ok(None);
        };
        let mut ended = None;
        let mut retired = Vec::new();
        pool.retain(|u| {
            if let Some(reason) = u.client.closed() {
                u.ended();
                ended = Some(reason);
                return false;
            }
            // A connection kept from other requests is closed once free.
            if u.kept_from_others() && u.is_idle() {
                retired.push(Arc::clone(u));
                return false;
            }
            true
        });
        for upstream in retired {
            tokio::spawn(async move { upstream.client.close().await });
        }
        if let Some(reason) = ended {
            tracing::warn!(target: "droid::bridge", %reason, "an upstream connection ended");
            if !self.inner.options.restart {
                *lock(&self.inner.ended) = Some(reason);
            }
        }
        if lock(&self.inner.ended).is_some() {
            return Err(CallError::internal(
                "the upstream connection ended, and the bridge does not restart it",
            ));
        }
        Ok(if exclusive {
            pool.iter().find_map(Upstream::try_lease)
        } else {
            pool.iter()
                .find(|u| !u.kept_from_others())
                .map(Upstream::share)
        })
    }
}
