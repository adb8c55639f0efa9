//! The `requestState` keys that several instances share, and when they
//! rotate.
//!
//! A state sealed by one instance must open on every other, so behind a
//! load balancer the keys live in the shared store as one [`KeyRing`]. Each
//! instance reads the ring often ([`RotationPolicy::refresh_ms`]) and seals
//! with the newest key already in force; whichever instance first sees a
//! rotation due writes the next ring, compare-and-swap, so two instances
//! racing to rotate add one key, not two.
//!
//! # Rotation without a gap
//!
//! A new key is added to the ring [`RotationPolicy::lead_ms`] before it is
//! used, longer than an instance waits between reads: by the time any
//! instance seals with it, every instance has read it and opens what it
//! seals. The key it replaces stays in the ring, opening what it sealed,
//! for [`RotationPolicy::keep_ms`] after its successor came into force,
//! which is a state's whole lifetime; then it is dropped, and a state it
//! sealed is refused as sealed by an unknown key.
//!
//! Pure data and decisions: time is an argument, and the store that keeps
//! the ring is a port ([`KeyRingStore`](super::shared::KeyRingStore)).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::request_state::{
    DEFAULT_LIFETIME_MS, KeyError, MAX_PREVIOUS_KEYS, StateKey, StateSealer,
};

/// When the shared keys rotate, and how often an instance reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationPolicy {
    /// How long a key seals new states before the next takes over
    /// (24 hours).
    pub rotate_every_ms: u64,
    /// How long before it seals anything a key is published (60 s). More
    /// than `refresh_ms`, so every instance knows a key before any uses it.
    pub lead_ms: u64,
    /// How long a replaced key still opens what it sealed (a state's
    /// lifetime, 10 min). A server sharing its keys keeps each at least
    /// its own states' lifetime, and one read (`refresh_ms`) more, however
    /// this is set.
    pub keep_ms: u64,
    /// How often an instance reads the ring (10 s).
    pub refresh_ms: u64,
}

impl Default for RotationPolicy {
    fn default() -> Self {
        Self {
            rotate_every_ms: 24 * 60 * 60 * 1000,
            lead_ms: 60 * 1000,
            keep_ms: DEFAULT_LIFETIME_MS,
            refresh_ms: 10 * 1000,
        }
    }
}

/// The keys every instance seals and opens `requestState` with, oldest
/// first.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRing {
    keys: Vec<RingKey>,
}

/// One key of the ring, and from when it seals.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RingKey {
    id: String,
    /// Base64 of the 32-byte secret.
    secret: String,
    /// From when (milliseconds since the Unix epoch) it seals new states.
    from_ms: u64,
}

/// Why a stored ring could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The stored text is not a ring.
    #[error("the stored key ring is not readable: {0}")]
    Malformed(String),
    /// A key could not be made or named.
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl core::fmt::Debug for KeyRing {
    /// Ids and times only: the secrets never reach a log.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|key| (&key.id, key.from_ms)))
            .finish()
    }
}

impl KeyRing {
    /// A ring of one fresh key, sealing from `now_ms`: the first instance
    /// to find no ring writes this one.
    ///
    /// # Errors
    ///
    /// [`KeyError::Entropy`] if the system has no randomness to give.
    pub fn first(now_ms: u64) -> Result<Self, KeyError> {
        Ok(Self {
            keys: vec![RingKey::fresh(now_ms)?],
        })
    }

    /// The ring that should replace this one at `now_ms`, if any: a new
    /// key published `lead_ms` ahead once the newest has sealed for
    /// `rotate_every_ms`, and keys replaced more than `keep_ms` ago dropped.
    ///
    /// # Errors
    ///
    /// [`KeyError::Entropy`] if a new key is due and the system has no
    /// randomness to give.
    pub fn next(&self, now_ms: u64, policy: &RotationPolicy) -> Result<Option<Self>, KeyError> {
        let mut keys = self.keys.clone();
        let newest_from = keys.last().map_or(0, |key| key.from_ms);
        let mut changed = false;
        if keys.is_empty() || newest_from.saturating_add(policy.rotate_every_ms) <= now_ms {
            keys.push(RingKey::fresh(now_ms.saturating_add(policy.lead_ms))?);
            changed = true;
        }
        // A key is replaced when the one after it comes into force; it
        // opens for `keep_ms` more. The newest is never dropped.
        let replaced_at: Vec<u64> = keys.iter().skip(1).map(|key| key.from_ms).collect();
        let before = keys.len();
        let mut index = 0;
        keys.retain(|_| {
            let keep = replaced_at
                .get(index)
                .is_none_or(|at| at.saturating_add(policy.keep_ms) > now_ms);
            index += 1;
            keep
        });
        // However the policy is set, a ring never grows past what a sealer
        // holds: the newest keys win.
        let most = MAX_PREVIOUS_KEYS + 1;
        if keys.len() > most {
            keys.drain(..keys.len() - most);
        }
        changed |= keys.len() != before;
        Ok(changed.then_some(Self { keys }))
    }

    /// The sealer for `now_ms`: sealing with the newest key in force,
    /// opening with every key of the ring (one published ahead too, for an
    /// instance whose clock runs a little fast), states living
    /// `lifetime_ms`.
    ///
    /// # Errors
    ///
    /// [`RingError`] when the ring is empty or holds a key that is not one.
    pub fn sealer(&self, now_ms: u64, lifetime_ms: u64) -> Result<StateSealer, RingError> {
        let mut keys = self
            .keys
            .iter()
            .map(|key| Ok((key.from_ms, key.key()?)))
            .collect::<Result<Vec<_>, RingError>>()?;
        // The newest key in force, or the oldest when none is yet (a ring
        // read from a clock far behind the writer's).
        let current = keys
            .iter()
            .rposition(|(from, _)| *from <= now_ms)
            .unwrap_or(0);
        if current >= keys.len() {
            return Err(RingError::Malformed("the ring holds no key".to_owned()));
        }
        let (_, key) = keys.remove(current);
        let mut sealer = StateSealer::new(key).with_lifetime_ms(lifetime_ms);
        for (_, key) in keys.into_iter().rev() {
            sealer = sealer.with_previous(key);
        }
        Ok(sealer)
    }

    /// This ring with `known`'s keys put back, when the two have no key in
    /// common: then this one was written afresh by an instance that found
    /// the store empty (a Redis restarted without persistence, with an
    /// instance starting before the others read the loss), and dropping
    /// the keys `known` holds would refuse every state sealed before. The
    /// joined ring is trimmed as at `now_ms` under `policy`
    /// ([`next`](Self::next)). `None` when they share a key (a ring rotated
    /// and trimmed in turn, whose dropped keys stay dropped), or when every
    /// key put back has lapsed anyway (an instance cut off from the store
    /// for days).
    ///
    /// # Errors
    ///
    /// [`KeyError::Entropy`] if a rotation is due and the system has no
    /// randomness to give.
    pub fn rejoined(
        &self,
        known: &Self,
        now_ms: u64,
        policy: &RotationPolicy,
    ) -> Result<Option<Self>, KeyError> {
        let own = |ring: &Self| ring.ids().any(|id| known.ids().any(|k| k == id));
        if own(self) {
            return Ok(None);
        }
        let mut keys: Vec<RingKey> = known.keys.iter().chain(&self.keys).cloned().collect();
        // Stable: a tie keeps the store's key last, so it seals.
        keys.sort_by_key(|key| key.from_ms);
        let joined = Self { keys };
        let joined = joined.next(now_ms, policy)?.unwrap_or(joined);
        Ok(own(&joined).then_some(joined))
    }

    /// The ids of the ring's keys, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|key| key.id.as_str())
    }

    /// The ring as the store keeps it.
    #[must_use]
    pub fn encode(&self) -> String {
        // A struct of strings and integers always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A ring the store kept.
    ///
    /// # Errors
    ///
    /// [`RingError::Malformed`] unless `text` is a ring of valid keys.
    pub fn decode(text: &str) -> Result<Self, RingError> {
        let ring: Self =
            serde_json::from_str(text).map_err(|e| RingError::Malformed(e.to_string()))?;
        if ring.keys.is_empty() {
            return Err(RingError::Malformed("the ring holds no key".to_owned()));
        }
        for key in &ring.keys {
            key.key()?;
        }
        Ok(ring)
    }
}

impl RingKey {
    fn fresh(from_ms: u64) -> Result<Self, KeyError> {
        let key = StateKey::generate()?;
        Ok(Self {
            id: key.id().to_owned(),
            secret: STANDARD.encode(key.secret()),
            from_ms,
        })
    }

    fn key(&self) -> Result<StateKey, RingError> {
        let bytes = STANDARD
            .decode(&self.secret)
            .map_err(|e| RingError::Malformed(format!("key {}: {e}", self.id)))?;
        let secret: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| {
            RingError::Malformed(format!("key {}: {} bytes, not 32", self.id, bytes.len()))
        })?;
        Ok(StateKey::new(self.id.clone(), secret)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::server::request_state::{StateBinding, StateError};
    use crate::domain::canonical::request_digest;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const HOUR: u64 = 60 * 60 * 1000;

    fn policy() -> RotationPolicy {
        RotationPolicy {
            rotate_every_ms: HOUR,
            lead_ms: 60_000,
            keep_ms: 600_000,
            refresh_ms: 10_000,
        }
    }

    fn binding() -> StateBinding {
        StateBinding {
            principal: None,
            method: "tools/call".to_owned(),
            target: "t".to_owned(),
            digest: request_digest(&serde_json::Map::new()),
        }
    }

    fn seal(ring: &KeyRing, now_ms: u64) -> Result<String, Box<dyn std::error::Error>> {
        Ok(ring
            .sealer(now_ms, 600_000)?
            .seal(&serde_json::json!({"n": 1}), &binding(), now_ms)?)
    }

    fn opens(ring: &KeyRing, sealed: &str, now_ms: u64) -> Result<bool, RingError> {
        Ok(ring
            .sealer(now_ms, 600_000)?
            .open(sealed, &binding(), now_ms)
            .is_ok())
    }

    #[test]
    fn two_instances_reading_one_ring_open_each_others_states() -> TestResult {
        let stored = KeyRing::first(0)?.encode();
        let a = KeyRing::decode(&stored)?;
        let b = KeyRing::decode(&stored)?;
        assert!(opens(&b, &seal(&a, 1_000)?, 2_000)?);
        Ok(())
    }

    #[test]
    fn only_a_ring_written_afresh_gets_the_known_keys_back() -> TestResult {
        let known = KeyRing::first(0)?;
        // Rotated from the known ring, it shares a key: nothing to put back.
        let rotated = known.next(HOUR, &policy())?.ok_or("a rotation is due")?;
        assert!(rotated.rejoined(&known, HOUR, &policy())?.is_none());
        // Written afresh: the known key is put back and opens what it
        // sealed; the fresh key, the newest, seals.
        let fresh = KeyRing::first(HOUR)?;
        let joined = fresh
            .rejoined(&known, HOUR, &policy())?
            .ok_or("the known key was not put back")?;
        assert_eq!(joined.ids().count(), 2);
        assert!(opens(&joined, &seal(&known, HOUR - 1)?, HOUR)?);
        assert_eq!(
            joined.sealer(HOUR, 600_000)?.current_key_id(),
            fresh.sealer(HOUR, 600_000)?.current_key_id()
        );
        Ok(())
    }

    #[test]
    fn nothing_is_due_before_the_newest_key_has_sealed_its_term() -> TestResult {
        let ring = KeyRing::first(0)?;
        assert!(ring.next(HOUR - 1, &policy())?.is_none());
        Ok(())
    }

    #[test]
    fn a_new_key_is_published_ahead_and_seals_only_once_in_force() -> TestResult {
        let ring = KeyRing::first(0)?;
        let old: Vec<String> = ring.ids().map(str::to_owned).collect();
        let next = ring.next(HOUR, &policy())?.ok_or("a rotation is due")?;
        assert_eq!(next.ids().count(), 2);
        // Published, not yet used: what is sealed now is sealed with the old
        // key, and the new one already opens on every instance.
        let sealer = next.sealer(HOUR + 59_999, 600_000)?;
        assert_eq!(
            Some(sealer.current_key_id().to_owned()),
            old.first().cloned()
        );
        let sealer = next.sealer(HOUR + 60_000, 600_000)?;
        assert_ne!(
            Some(sealer.current_key_id().to_owned()),
            old.first().cloned()
        );
        Ok(())
    }

    #[test]
    fn a_replaced_key_opens_for_a_state_lifetime_and_then_is_dropped() -> TestResult {
        let ring = KeyRing::first(0)?;
        let sealed = seal(&ring, HOUR)?;
        let rotated = ring.next(HOUR, &policy())?.ok_or("a rotation is due")?;
        let in_force = HOUR + 60_000;
        // Still kept, and still opening, until `keep_ms` after the
        // successor came into force.
        assert!(rotated.next(in_force + 599_999, &policy())?.is_none());
        assert!(opens(&rotated, &sealed, in_force + 1)?);
        let retired = rotated
            .next(in_force + 600_000, &policy())?
            .ok_or("the old key is due to go")?;
        assert_eq!(retired.ids().count(), 1);
        let refused =
            retired
                .sealer(in_force + 600_000, HOUR)?
                .open(&sealed, &binding(), in_force + 600_000);
        assert!(matches!(refused, Err(StateError::UnknownKey)));
        Ok(())
    }

    #[test]
    fn a_ring_never_holds_more_keys_than_a_sealer() -> TestResult {
        let churn = RotationPolicy {
            rotate_every_ms: 1,
            lead_ms: 0,
            keep_ms: u64::MAX,
            refresh_ms: 1,
        };
        let mut ring = KeyRing::first(0)?;
        for now in 1..20 {
            if let Some(next) = ring.next(now, &churn)? {
                ring = next;
            }
        }
        assert_eq!(ring.ids().count(), MAX_PREVIOUS_KEYS + 1);
        Ok(())
    }

    #[test]
    fn what_is_not_a_ring_is_refused_and_no_secret_is_printed() -> TestResult {
        assert!(KeyRing::decode("{}").is_err());
        assert!(KeyRing::decode(r#"{"keys":[]}"#).is_err());
        assert!(KeyRing::decode(r#"{"keys":[{"id":"k","secret":"AAAA","from_ms":0}]}"#).is_err());
        let ring = KeyRing::first(0)?;
        let stored = ring.encode();
        let secret = stored
            .split("\"secret\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .ok_or("a secret is stored")?;
        assert!(!format!("{ring:?}").contains(secret));
        Ok(())
    }
}
