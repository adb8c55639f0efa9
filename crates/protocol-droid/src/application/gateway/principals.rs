//! Who keeps activations when there is no session to keep them: the
//! authenticated principals of 2026-07-28 requests over HTTP, each stood
//! for by a session of its own. Legacy sessions shared among instances are
//! held here too, under keys of their own, so that their activations are
//! shared the same way (see [`Principals::hold`]).
//!
//! Bounded twice: a principal idle past its lifetime is forgotten, and past
//! the most principals kept the least recently used goes. The time is given
//! to every call rather than read here, so the rules are tested with a
//! clock the test moves.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::domain::SessionId;

/// How many principals' activations are kept; the least recently used goes
/// first.
pub const MAX_PRINCIPALS: usize = 10_000;

/// How long a principal's activations outlive its last request.
pub const PRINCIPAL_IDLE: Duration = Duration::from_secs(3600);

/// What a principal is kept under: the SHA-256 of its key, in hex, so
/// that neither this process's tables nor a shared store name it.
pub(super) fn digest_of(principal_key: &str) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    sha2::Sha256::digest(principal_key.as_bytes()).iter().fold(
        String::with_capacity(64),
        |mut out, byte| {
            let _infallible = write!(out, "{byte:02x}");
            out
        },
    )
}

/// What the activations of the legacy session shared as `name` (its
/// `Mcp-Session-Id`) are kept under: a digest as a principal's, of text no
/// principal's key can be (those hold two separators).
pub(super) fn shared_session_key(name: &str) -> String {
    digest_of(&format!("session\u{1f}{name}"))
}

/// The principals kept, by key, and the legacy sessions shared among
/// instances, held under keys of their own (see [`Principals::hold`]).
#[derive(Debug)]
pub(super) struct Principals {
    kept: HashMap<String, Kept>,
    /// How many of `kept` are held legacy sessions, outside the bounds.
    held: usize,
    /// Each principal by the session standing for it.
    by_session: HashMap<SessionId, String>,
    /// Each principal by when it was last used (and a counter, so two uses
    /// at one instant stay two entries): the order of forgetting.
    by_use: BTreeMap<(Instant, u64), String>,
    uses: u64,
    /// Sessions standing for principals are numbered down from the top of
    /// the range, so never one the server numbered (it counts up from 0).
    issued: u64,
    max: usize,
    idle: Duration,
}

#[derive(Debug)]
struct Kept {
    session: SessionId,
    /// When it was last used; `None` for a held legacy session.
    used: Option<(Instant, u64)>,
    /// When the shared record of its activations taken or written last
    /// lapses: a newer record lapses later, so an older one arriving late
    /// is passed over.
    shared: u64,
}

impl Principals {
    pub(super) fn new(max: usize, idle: Duration) -> Self {
        Self {
            kept: HashMap::new(),
            held: 0,
            by_session: HashMap::new(),
            by_use: BTreeMap::new(),
            uses: 0,
            issued: 0,
            max: max.max(1),
            idle,
        }
    }

    /// How many principals are kept.
    pub(super) fn len(&self) -> usize {
        self.kept.len().saturating_sub(self.held)
    }

    /// Stands `session`, a legacy session shared among instances, for
    /// `key` (see [`shared_session_key`]), so that its activations are
    /// shared as a principal's are. Held outside the bounds above until
    /// [`Self::release`]d, when the session ends here: the transport bounds
    /// sessions, and a live session's set must not be forgotten for being
    /// idle here while its requests land elsewhere. A later copy of the
    /// same session here takes the key over (only the copy entering the
    /// transport's table is held, so a later one means the earlier is
    /// going); the earlier one's release then leaves it be.
    pub(super) fn hold(&mut self, key: &str, session: SessionId) {
        if self.by_session.contains_key(&session) {
            return;
        }
        if let Some(kept) = self.kept.get_mut(key) {
            // A principal's key is never a held session's.
            if kept.used.is_none() {
                self.by_session.remove(&kept.session);
                kept.session = session;
                self.by_session.insert(session, key.to_owned());
            }
            return;
        }
        self.kept.insert(
            key.to_owned(),
            Kept {
                session,
                used: None,
                shared: 0,
            },
        );
        self.by_session.insert(session, key.to_owned());
        self.held += 1;
    }

    /// The sessions in use whose shared activations lapse before
    /// `before_ms` (those with none shared are not among them): every held
    /// legacy session, and each principal used here at `used_since` or
    /// later (`None`: at any time).
    pub(super) fn lapsing(&self, before_ms: u64, used_since: Option<Instant>) -> Vec<SessionId> {
        self.kept
            .values()
            .filter(|kept| kept.shared > 0 && kept.shared < before_ms)
            .filter(|kept| match (kept.used, used_since) {
                (None, _) | (Some(_), None) => true,
                (Some((used, _)), Some(since)) => used >= since,
            })
            .map(|kept| kept.session)
            .collect()
    }

    /// Lets go of `session`, held by [`Self::hold`]; nothing for a session
    /// standing for a principal, which its bounds forget.
    pub(super) fn release(&mut self, session: SessionId) {
        let Some(key) = self.by_session.get(&session) else {
            return;
        };
        if self.kept.get(key).is_some_and(|kept| kept.used.is_none()) {
            self.kept.remove(key);
            self.by_session.remove(&session);
            self.held = self.held.saturating_sub(1);
        }
    }

    /// The session standing for `principal`, if it is kept; not a use.
    pub(super) fn get(&self, principal: &str) -> Option<SessionId> {
        self.kept.get(principal).map(|kept| kept.session)
    }

    /// How long a principal outlives its last request.
    pub(super) const fn idle(&self) -> Duration {
        self.idle
    }

    /// The principal `session` stands for, if it stands for one.
    pub(super) fn key_of(&self, session: SessionId) -> Option<&str> {
        self.by_session.get(&session).map(String::as_str)
    }

    /// When the shared record of `principal`'s activations last taken or
    /// written lapses (0: none).
    pub(super) fn shared_version(&self, principal: &str) -> u64 {
        self.kept.get(principal).map_or(0, |kept| kept.shared)
    }

    /// Notes the shared record of `principal`'s activations taken or
    /// written, which lapses at `version`.
    pub(super) fn set_shared_version(&mut self, principal: &str, version: u64) {
        if let Some(kept) = self.kept.get_mut(principal) {
            kept.shared = version;
        }
    }

    /// The session standing for `principal` at `now`, made or renewed; and
    /// the sessions of the principals forgotten to make room or because
    /// they idled too long, whose sets the caller drops.
    pub(super) fn session_for(
        &mut self,
        principal: &str,
        now: Instant,
    ) -> (SessionId, Vec<SessionId>) {
        let mut forgotten = Vec::new();
        // The idle ones first, oldest first, stopping at the first that is not.
        while let Some((&(used, n), _)) = self.by_use.first_key_value() {
            if now.saturating_duration_since(used) <= self.idle {
                break;
            }
            if let Some(key) = self.by_use.remove(&(used, n)) {
                if let Some(kept) = self.kept.remove(&key) {
                    self.by_session.remove(&kept.session);
                    forgotten.push(kept.session);
                }
            }
        }
        self.uses = self.uses.wrapping_add(1);
        let stamp = (now, self.uses);
        if let Some(kept) = self.kept.get_mut(principal) {
            // A held session is not a principal's, and is never renewed.
            if let Some(used) = kept.used {
                self.by_use.remove(&used);
                kept.used = Some(stamp);
                self.by_use.insert(stamp, principal.to_owned());
            }
            return (kept.session, forgotten);
        }
        while self.kept.len().saturating_sub(self.held) >= self.max {
            let Some((_, key)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(kept) = self.kept.remove(&key) {
                self.by_session.remove(&kept.session);
                forgotten.push(kept.session);
            }
        }
        self.issued = self.issued.wrapping_add(1);
        let session = SessionId::new(u64::MAX - self.issued);
        self.kept.insert(
            principal.to_owned(),
            Kept {
                session,
                used: Some(stamp),
                shared: 0,
            },
        );
        self.by_session.insert(session, principal.to_owned());
        self.by_use.insert(stamp, principal.to_owned());
        (session, forgotten)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_keeps_its_session_while_it_is_used() {
        let start = Instant::now();
        let mut principals = Principals::new(10, Duration::from_secs(60));
        let (alice, none) = principals.session_for("alice", start);
        assert!(none.is_empty());
        let (again, _) = principals.session_for("alice", start + Duration::from_secs(50));
        assert_eq!(again, alice);
        // Used at 50 s, so still kept at 100 s.
        let (still, _) = principals.session_for("alice", start + Duration::from_secs(100));
        assert_eq!(still, alice);
        let (bob, _) = principals.session_for("bob", start + Duration::from_secs(100));
        assert_ne!(bob, alice);
    }

    #[test]
    fn an_idle_principal_is_forgotten_and_starts_afresh() {
        let start = Instant::now();
        let mut principals = Principals::new(10, Duration::from_secs(60));
        let (alice, _) = principals.session_for("alice", start);
        let (bob, forgotten) = principals.session_for("bob", start + Duration::from_secs(61));
        assert_eq!(forgotten, [alice], "alice idled past her lifetime");
        assert_eq!(principals.len(), 1);
        let (alice_again, _) = principals.session_for("alice", start + Duration::from_secs(62));
        assert_ne!(alice_again, alice, "a fresh session, not the old one");
        assert_ne!(alice_again, bob);
    }

    #[test]
    fn past_the_bound_the_least_recently_used_goes() {
        let start = Instant::now();
        let mut principals = Principals::new(2, Duration::from_secs(3600));
        let (a, _) = principals.session_for("a", start);
        let (b, _) = principals.session_for("b", start + Duration::from_secs(1));
        // `a` is used again, so `b` is now the least recently used.
        principals.session_for("a", start + Duration::from_secs(2));
        let (_, forgotten) = principals.session_for("c", start + Duration::from_secs(3));
        assert_eq!(forgotten, [b]);
        assert_eq!(principals.len(), 2);
        let (still_a, _) = principals.session_for("a", start + Duration::from_secs(4));
        assert_eq!(still_a, a);
    }

    #[test]
    fn a_principals_shared_activations_are_renewed_only_while_it_is_used() {
        let start = Instant::now();
        let mut principals = Principals::new(10, Duration::from_secs(3600));
        let (alice, _) = principals.session_for("alice", start);
        let (bob, _) = principals.session_for("bob", start + Duration::from_secs(600));
        principals.set_shared_version("alice", 5_000);
        principals.set_shared_version("bob", 5_000);
        let since = |secs| Some(start + Duration::from_secs(secs));
        let mut both = principals.lapsing(5_001, since(0));
        both.sort();
        let mut expected = vec![alice, bob];
        expected.sort();
        assert_eq!(both, expected);
        // Alice was last used before the time asked about; Bob after it.
        assert_eq!(principals.lapsing(5_001, since(300)), [bob]);
        assert!(principals.lapsing(5_001, since(900)).is_empty());
        // Nothing lapses before the time given.
        assert!(principals.lapsing(5_000, since(0)).is_empty());
        // A use renews the principal's place in the question too.
        principals.session_for("alice", start + Duration::from_secs(1_000));
        assert_eq!(principals.lapsing(5_001, since(900)), [alice]);
    }

    #[test]
    fn a_held_session_is_outside_the_bounds_until_released() {
        let start = Instant::now();
        let mut principals = Principals::new(1, Duration::from_secs(60));
        let legacy = SessionId::new(7);
        let key = shared_session_key("abc");
        principals.hold(&key, legacy);
        assert_eq!(principals.get(&key), Some(legacy));
        assert_eq!(principals.key_of(legacy), Some(key.as_str()));
        // Its activations are written again before they lapse; none
        // shared, none to write.
        assert!(principals.lapsing(u64::MAX, None).is_empty());
        principals.set_shared_version(&key, 1_000);
        assert_eq!(principals.lapsing(1_001, None), [legacy]);
        assert!(principals.lapsing(1_000, None).is_empty());
        // Neither the bound of one principal nor idleness forgets it.
        let (_, forgotten) = principals.session_for("alice", start);
        assert!(forgotten.is_empty(), "{forgotten:?}");
        let (_, forgotten) = principals.session_for("bob", start + Duration::from_secs(120));
        assert_eq!(forgotten.len(), 1, "alice, idle and past the bound");
        assert_eq!(principals.get(&key), Some(legacy));
        assert_eq!(
            principals.len(),
            1,
            "bob; the held session is not a principal"
        );
        // A later copy of the session here takes the key over; the earlier
        // copy's release then leaves it be.
        let later = SessionId::new(8);
        principals.hold(&key, later);
        principals.release(legacy);
        assert_eq!(principals.get(&key), Some(later));
        assert_eq!(principals.key_of(legacy), None);
        let legacy = later;
        // A principal's session is not released; the held one is.
        let bob = principals.get("bob");
        principals.release(bob.unwrap_or(legacy));
        principals.release(legacy);
        assert_eq!(principals.get(&key), None);
        assert_eq!(principals.key_of(legacy), None);
        assert!(principals.get("bob").is_some());
    }

    #[test]
    fn principal_sessions_are_numbered_from_the_top() {
        let mut principals = Principals::new(2, Duration::from_secs(1));
        let (first, _) = principals.session_for("a", Instant::now());
        assert!(first.get() > u64::MAX / 2, "{first:?}");
    }
}
