//! What sessions watch upstream, kept by the gateway: a bridge opened anew
//! (the upstream reconnected, or a reload replaced it) knows nothing of the
//! subscriptions made through the one before, so it is told them again.
//!
//! Bounded by what the server bounds: the sessions it keeps, the
//! subscriptions each may hold, the resources a listen may watch. A
//! session's entry goes when the session ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::names;
use crate::domain::SessionId;
use crate::domain::ir::JsonObject;

/// Every session's watches, by the gateway's URIs.
#[derive(Debug, Default)]
pub(super) struct Watches(HashMap<SessionId, Watching>);

#[derive(Debug, Default)]
struct Watching {
    /// What the session's client declared (a legacy session's).
    declared: JsonObject,
    /// Its `resources/subscribe`s.
    subscribed: BTreeSet<String>,
    /// What its listens watch, counted: two listens may watch one.
    listened: BTreeMap<String, usize>,
}

/// One watch to tell a new bridge of, by the upstream's own URI.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Replay {
    /// A legacy session's subscription, made on its own connection.
    Subscribed {
        session: SessionId,
        declared: JsonObject,
        uri: String,
    },
    /// A listen watching a resource (once per listen watching it).
    Listened { session: SessionId, uri: String },
}

impl Watches {
    /// A legacy session subscribed to `uri` (or, unless `subscribed`, no
    /// longer).
    pub(super) fn subscription(
        &mut self,
        session: SessionId,
        declared: &JsonObject,
        uri: &str,
        subscribed: bool,
    ) {
        let watching = self.0.entry(session).or_default();
        watching.declared.clone_from(declared);
        if subscribed {
            watching.subscribed.insert(uri.to_owned());
        } else {
            watching.subscribed.remove(uri);
        }
        self.tidy(session);
    }

    /// A listen of `session` watches `uri` (or, unless `watching`, no
    /// longer).
    pub(super) fn listen(&mut self, session: SessionId, uri: &str, watching: bool) {
        let listened = &mut self.0.entry(session).or_default().listened;
        if watching {
            *listened.entry(uri.to_owned()).or_default() += 1;
        } else if let Some(count) = listened.get_mut(uri) {
            *count -= 1;
            if *count == 0 {
                listened.remove(uri);
            }
        }
        self.tidy(session);
    }

    /// The session ended.
    pub(super) fn forget(&mut self, session: SessionId) {
        self.0.remove(&session);
    }

    /// Every watch of a resource of the upstream with `prefix`.
    pub(super) fn replay(&self, prefix: &str) -> Vec<Replay> {
        let inner = |uri: &str| {
            names::split_uri(uri)
                .filter(|(p, _)| *p == prefix)
                .map(|(_, inner)| inner.to_owned())
        };
        let mut replay = Vec::new();
        for (session, watching) in &self.0 {
            for uri in watching.subscribed.iter().filter_map(|u| inner(u)) {
                replay.push(Replay::Subscribed {
                    session: *session,
                    declared: watching.declared.clone(),
                    uri,
                });
            }
            for (uri, count) in &watching.listened {
                if let Some(uri) = inner(uri) {
                    for _ in 0..*count {
                        replay.push(Replay::Listened {
                            session: *session,
                            uri: uri.clone(),
                        });
                    }
                }
            }
        }
        replay
    }

    fn tidy(&mut self, session: SessionId) {
        if self
            .0
            .get(&session)
            .is_some_and(|w| w.subscribed.is_empty() && w.listened.is_empty())
        {
            self.0.remove(&session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_bridge_is_told_what_is_watched_of_its_upstream_only() {
        let (a, b) = (SessionId::new(1), SessionId::new(2));
        let mut watches = Watches::default();
        let declared = JsonObject::new();
        watches.subscription(a, &declared, "ev+demo://1", true);
        watches.subscription(a, &declared, "other+demo://1", true);
        watches.listen(b, "ev+demo://2", true);
        watches.listen(b, "ev+demo://2", true);
        watches.listen(b, "ev+demo://2", false);
        let replay = watches.replay("ev");
        assert_eq!(replay.len(), 2, "{replay:?}");
        assert!(replay.contains(&Replay::Subscribed {
            session: a,
            declared: declared.clone(),
            uri: "demo://1".to_owned()
        }));
        assert!(replay.contains(&Replay::Listened {
            session: b,
            uri: "demo://2".to_owned()
        }));
        watches.subscription(a, &declared, "ev+demo://1", false);
        watches.forget(b);
        assert!(watches.replay("ev").is_empty());
        assert_eq!(watches.replay("other").len(), 1);
    }
}
