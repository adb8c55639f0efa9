//! Sealing the `requestState` of a multi round-trip request (SEP-2322).
//!
//! A server that answers `tools/call`, `prompts/get` or `resources/read` with
//! an `InputRequiredResult` may hand the client a `requestState` string, and
//! the client echoes it in the retry. Whatever comes back is attacker
//! controlled, and a handler that lets it steer authorisation or business
//! logic must integrity-protect it and refuse it when verification fails.
//! The specification further recommends binding the state to the
//! authenticated principal, a short expiry and the originating request
//! (method and a digest of its salient params). [`StateSealer`] does all of
//! that in one place, so no handler has to get it right on its own.
//!
//! # Format
//!
//! The sealed string is URL-safe base64 without padding of
//!
//! ```text
//! envelope = version (1 byte, = 2)
//!            key id length (1 byte) ‖ key id (UTF-8)
//!            expiry (u64, milliseconds, big-endian)
//!            nonce (8 bytes, random)
//!            payload (compact JSON, to the end of the envelope)
//! sealed   = envelope ‖ HMAC-SHA256(key, label ‖ len(envelope) ‖ envelope ‖ binding)
//! ```
//!
//! The [`StateBinding`] enters the tag but is not stored: the retry's own
//! principal, method, target and digest are supplied when the state is
//! opened, so a state minted for anyone or anything else fails verification
//! without the binding ever being readable. Every variable-length field in
//! the tagged input is length-prefixed, so no two different (envelope,
//! binding) pairs tag the same bytes.
//!
//! The header is read without parsing any JSON, the tag is checked next, and
//! only then are the expiry and the payload believed: nothing a forger wrote
//! is interpreted before the tag says it was not forged.
//!
//! # What it does not do
//!
//! - **Confidentiality.** The payload is signed, not encrypted: a client can
//!   read it. Keep secrets out of it, or keep them server-side and seal a
//!   reference.
//! - **Single use, on its own.** A state opens as often as it is presented
//!   until it expires. The dispatcher adds one rule on top, through
//!   [`Rounds`]: a state is answered once. Presented again with the same
//!   `inputResponses` (a retry after a lost answer) it is served again;
//!   presented with other `inputResponses` it is refused, so a client cannot
//!   try answer after answer against one question. Presented with no
//!   answers it is only asked again, and answers nothing.
//! - **Clocks.** Time is an argument, so expiry is tested deterministically.

use core::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::domain::canonical::RequestDigest;
use crate::domain::jsonrpc::ErrorCode;

/// How long a sealed state opens for unless [`StateSealer::with_lifetime_ms`]
/// says otherwise: ten minutes.
///
/// Long enough for a person to answer an elicitation, short enough that a
/// leaked state is not a standing credential.
pub const DEFAULT_LIFETIME_MS: u64 = 10 * 60 * 1000;

/// The longest sealed string [`StateSealer::open`] will decode, in bytes.
///
/// Checked before decoding, so a peer cannot make the server allocate and
/// hash more than this per retry. [`StateSealer::seal`] refuses to mint
/// anything longer, so every state it issues can be opened.
pub const MAX_SEALED_LEN: usize = 64 * 1024;

/// The longest key id, in bytes.
///
/// Every sealed state carries its key id in clear; a short id keeps that
/// overhead small and fits the one-byte length in the header.
pub const MAX_KEY_ID_LEN: usize = 64;

/// How many previous keys a sealer keeps for opening.
///
/// Rotation adds one each time; without a bound a long-running server that
/// rotates on a schedule would try ever more keys and never forget a retired
/// one. A state lives for minutes and keys rotate far less often, so a
/// handful covers every state still worth opening.
pub const MAX_PREVIOUS_KEYS: usize = 4;

const FORMAT_VERSION: u8 = 2;

/// The envelope of a round ([`StateSealer::seal_round`]): its payload is
/// the handler's state together with the keys the round asked. A version
/// of its own, so that a build that seals only [`FORMAT_VERSION`] refuses
/// it rather than hand the wrapper to a handler as its state.
const ROUND_FORMAT_VERSION: u8 = 3;

/// The nonce's length: it makes every sealed state distinct, even two
/// sealed in the same millisecond with the same payload for the same
/// request, so that each round can be told from every other.
const NONCE_LEN: usize = 8;
pub(crate) const TAG_LEN: usize = 32;
const SECRET_LEN: usize = 32;
/// Domain separation: a tag made for any other purpose with the same key
/// cannot be passed off as a state's.
const MAC_LABEL: &[u8] = b"protocol-droid/requestState/v1\0";

type HmacSha256 = Hmac<Sha256>;

/// A named HMAC key.
///
/// The id travels in clear in every sealed state, so the sealer can pick the
/// key that made it after a rotation. The secret never leaves: `Debug` prints
/// the id only.
#[derive(Clone)]
pub struct StateKey {
    id: String,
    secret: [u8; SECRET_LEN],
}

impl StateKey {
    /// A key named `id` with the given secret.
    ///
    /// # Errors
    ///
    /// [`KeyError::BadId`] unless `id` is 1 to [`MAX_KEY_ID_LEN`] bytes.
    pub fn new(id: impl Into<String>, secret: [u8; SECRET_LEN]) -> Result<Self, KeyError> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_KEY_ID_LEN {
            return Err(KeyError::BadId { len: id.len() });
        }
        Ok(Self { id, secret })
    }

    /// A key with a random secret and a random id, from the operating system.
    ///
    /// The id is random too so that two servers that each generate a key
    /// never share an id: a state from one then fails as
    /// [`StateError::UnknownKey`] at the other rather than as a bad signature.
    ///
    /// # Errors
    ///
    /// [`KeyError::Entropy`] if the operating system has no randomness to
    /// give.
    pub fn generate() -> Result<Self, KeyError> {
        let mut secret = [0_u8; SECRET_LEN];
        getrandom::fill(&mut secret).map_err(KeyError::Entropy)?;
        let mut id = [0_u8; 8];
        getrandom::fill(&mut id).map_err(KeyError::Entropy)?;
        let id = id
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<String>();
        Self::new(format!("k{id}"), secret)
    }

    /// The key's id, as it appears in the states it seals.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret, for the key ring that stores it; never for a log.
    pub(crate) const fn secret(&self) -> &[u8; SECRET_LEN] {
        &self.secret
    }

    /// A MAC keyed with this key's secret.
    fn mac(&self) -> HmacSha256 {
        // HMAC pads a key shorter than the hash's 64-byte block with zeros
        // (RFC 2104, section 2), so keying with the zero-padded block is the
        // same function as keying with the 32 bytes. Doing the padding here
        // makes the construction infallible instead of a `Result` that can
        // never be `Err`.
        let mut block = [0_u8; 64];
        block
            .iter_mut()
            .zip(self.secret)
            .for_each(|(slot, byte)| *slot = byte);
        <HmacSha256 as Mac>::new(&block.into())
    }
}

impl fmt::Debug for StateKey {
    /// The id only: a secret in a log line is a secret published.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a [`StateKey`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The id is empty or longer than [`MAX_KEY_ID_LEN`] bytes.
    #[error("a state key id is 1 to {MAX_KEY_ID_LEN} bytes long, not {len}")]
    BadId {
        /// The rejected id's length in bytes.
        len: usize,
    },
    /// The operating system could not supply random bytes.
    #[error("no randomness for a state key: {0}")]
    Entropy(getrandom::Error),
}

/// What a state is bound to: who asked, for what.
///
/// Not stored in the sealed string. [`StateSealer::open`] is given the
/// retry's own binding, and the tag only verifies if it equals the one the
/// state was sealed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBinding {
    /// Who asked: the authenticated principal; for an anonymous caller the
    /// network it called from (an IPv6 address's /64); `None` only when no
    /// address is known (a stdio client, a router served without peer
    /// addresses).
    ///
    /// `None` and `Some("")` are different bindings.
    pub principal: Option<String>,
    /// The request's method, such as `tools/call`.
    pub method: String,
    /// What the method acts on: a tool or prompt name, a resource URI.
    pub target: String,
    /// The digest of the request's params, which a retry must repeat.
    pub digest: RequestDigest,
}

/// Seals and opens `requestState` strings.
///
/// Seals with the current key; opens with the current key or any of the
/// previous ones still listed, so that [`rotate`](Self::rotate) does not
/// strand the states already in clients' hands.
///
/// ```
/// use protocol_droid::application::server::{StateBinding, StateSealer, StateKey};
/// use protocol_droid::domain::canonical::request_digest;
/// use serde_json::json;
///
/// let sealer = StateSealer::new(StateKey::new("2026-05", [7; 32])?);
/// let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
/// let binding = StateBinding {
///     principal: Some("alice".into()),
///     method: "tools/call".into(),
///     target: "deploy".into(),
///     digest: request_digest(params.as_object().ok_or("params")?),
/// };
///
/// let sealed = sealer.seal(&json!({"step": 2}), &binding, 1_000)?;
/// assert_eq!(sealer.open(&sealed, &binding, 2_000)?, json!({"step": 2}));
///
/// let mallory = StateBinding { principal: Some("mallory".into()), ..binding };
/// assert!(sealer.open(&sealed, &mallory, 2_000).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct StateSealer {
    current: StateKey,
    previous: Vec<StateKey>,
    lifetime_ms: u64,
}

impl StateSealer {
    /// A sealer using `current`, with no previous keys and the
    /// [`DEFAULT_LIFETIME_MS`].
    #[must_use]
    pub const fn new(current: StateKey) -> Self {
        Self {
            current,
            previous: Vec::new(),
            lifetime_ms: DEFAULT_LIFETIME_MS,
        }
    }

    /// A sealer with a freshly [generated](StateKey::generate) key.
    ///
    /// Right for a single process: its states stop opening when it restarts,
    /// which costs a client one more round trip. Servers behind a load
    /// balancer need a shared key through [`Self::new`].
    ///
    /// # Errors
    ///
    /// [`KeyError::Entropy`] if the operating system has no randomness.
    pub fn generate() -> Result<Self, KeyError> {
        StateKey::generate().map(Self::new)
    }

    /// This sealer, minting states that open for `lifetime_ms`.
    #[must_use]
    pub const fn with_lifetime_ms(mut self, lifetime_ms: u64) -> Self {
        self.lifetime_ms = lifetime_ms;
        self
    }

    /// This sealer, also opening states sealed with `key`.
    ///
    /// For a server starting up while states sealed by the key it replaces
    /// are still live. Ignored when [`MAX_PREVIOUS_KEYS`] are already listed
    /// or the id is already known: an id names one key, and the first one
    /// given keeps it.
    #[must_use]
    pub fn with_previous(mut self, key: StateKey) -> Self {
        if self.find(&key.id).is_none() && self.previous.len() < MAX_PREVIOUS_KEYS {
            self.previous.push(key);
        }
        self
    }

    /// Seals with `next` from now on, keeping the current key for opening.
    ///
    /// The retired key goes to the front of the previous keys, and the oldest
    /// beyond [`MAX_PREVIOUS_KEYS`] is forgotten. A previous key with the same
    /// id as `next` is dropped, since the id now names `next`.
    pub fn rotate(&mut self, next: StateKey) {
        self.previous.retain(|key| key.id != next.id);
        let retired = core::mem::replace(&mut self.current, next);
        if retired.id != self.current.id {
            self.previous.insert(0, retired);
        }
        self.previous.truncate(MAX_PREVIOUS_KEYS);
    }

    /// The id of the key new states are sealed with.
    #[must_use]
    pub fn current_key_id(&self) -> &str {
        &self.current.id
    }

    /// How long a state sealed now stays open, in milliseconds.
    #[must_use]
    pub const fn lifetime_ms(&self) -> u64 {
        self.lifetime_ms
    }

    /// Seals `payload`, bound to `binding`, open until `now_ms` plus the
    /// lifetime.
    ///
    /// # Errors
    ///
    /// [`SealError::TooLarge`] if the result would be longer than
    /// [`MAX_SEALED_LEN`]: refused here rather than minted and then refused
    /// by [`Self::open`] on the retry, which would strand the client.
    pub fn seal(
        &self,
        payload: &Value,
        binding: &StateBinding,
        now_ms: u64,
    ) -> Result<String, SealError> {
        self.seal_bounded(FORMAT_VERSION, &payload.to_string(), binding, now_ms)
    }

    /// Seals a round of a multi round-trip request: the handler's `state`
    /// and the keys of the questions the round `asked`, which
    /// [`Self::open_round`] answers in [`Opened::asked`].
    ///
    /// # Errors
    ///
    /// As [`Self::seal`].
    pub fn seal_round(
        &self,
        state: &Value,
        asked: &[&str],
        binding: &StateBinding,
        now_ms: u64,
    ) -> Result<String, SealError> {
        let round = serde_json::json!({ "asked": asked, "state": state });
        self.seal_bounded(ROUND_FORMAT_VERSION, &round.to_string(), binding, now_ms)
    }

    fn seal_bounded(
        &self,
        version: u8,
        payload: &str,
        binding: &StateBinding,
        now_ms: u64,
    ) -> Result<String, SealError> {
        let sealed = self.seal_unbounded(version, payload, binding, now_ms);
        if sealed.len() > MAX_SEALED_LEN {
            return Err(SealError::TooLarge {
                len: sealed.len(),
                max: MAX_SEALED_LEN,
            });
        }
        Ok(sealed)
    }

    /// Opens a state presented with a retry whose own binding is `binding`.
    ///
    /// # Errors
    ///
    /// Every error is one the server answers with `-32602`
    /// ([`StateError::code`]):
    ///
    /// - [`StateError::Malformed`]: longer than [`MAX_SEALED_LEN`], not
    ///   base64, or not an envelope this version writes;
    /// - [`StateError::UnknownKey`]: sealed with a key this sealer does not
    ///   hold (another server's, or one rotated out);
    /// - [`StateError::BadSignature`]: altered, or sealed for another
    ///   principal, method, target or params;
    /// - [`StateError::Expired`]: genuine, but `now_ms` is at or past its
    ///   expiry.
    pub fn open(
        &self,
        sealed: &str,
        binding: &StateBinding,
        now_ms: u64,
    ) -> Result<Value, StateError> {
        self.open_round(sealed, binding, now_ms)
            .map(|opened| opened.payload)
    }

    /// [`Self::open`], also answering what identifies the state and when it
    /// expires: what `Rounds` records.
    ///
    /// # Errors
    ///
    /// As [`Self::open`].
    pub fn open_round(
        &self,
        sealed: &str,
        binding: &StateBinding,
        now_ms: u64,
    ) -> Result<Opened, StateError> {
        if sealed.len() > MAX_SEALED_LEN {
            return Err(StateError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(sealed)
            .map_err(|_| StateError::Malformed)?;
        let tag_at = bytes
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(StateError::Malformed)?;
        let (envelope, tag) = bytes
            .split_at_checked(tag_at)
            .ok_or(StateError::Malformed)?;
        let header = Header::read(envelope)?;
        let key = self.find(header.key_id).ok_or(StateError::UnknownKey)?;
        authenticate(key, envelope, binding)
            .verify_slice(tag)
            .map_err(|_| StateError::BadSignature)?;
        // Believed only now that the tag has vouched for them.
        if now_ms >= header.expires_at_ms {
            return Err(StateError::Expired);
        }
        // Only a payload this code sealed gets here, so this failing means a
        // key was used by something else; refusing is still the safe answer.
        let payload: Value =
            serde_json::from_slice(header.payload).map_err(|_| StateError::Malformed)?;
        let (payload, asked) = if header.version == ROUND_FORMAT_VERSION {
            let Value::Object(mut round) = payload else {
                return Err(StateError::Malformed);
            };
            let asked = match round.remove("asked") {
                Some(Value::Array(keys)) => keys
                    .into_iter()
                    .map(|key| match key {
                        Value::String(key) => Ok(key),
                        _ => Err(StateError::Malformed),
                    })
                    .collect::<Result<Vec<String>, StateError>>()?,
                _ => return Err(StateError::Malformed),
            };
            (round.remove("state").unwrap_or(Value::Null), Some(asked))
        } else {
            (payload, None)
        };
        let mut id = [0u8; TAG_LEN];
        id.copy_from_slice(tag);
        Ok(Opened {
            payload,
            asked,
            id,
            expires_at_ms: header.expires_at_ms,
        })
    }

    fn seal_unbounded(
        &self,
        version: u8,
        payload: &str,
        binding: &StateBinding,
        now_ms: u64,
    ) -> String {
        let key = &self.current;
        let mut sealed =
            Vec::with_capacity(2 + key.id.len() + 8 + NONCE_LEN + payload.len() + TAG_LEN);
        sealed.push(version);
        // `StateKey::new` holds ids to MAX_KEY_ID_LEN, which fits a byte.
        sealed.push(u8::try_from(key.id.len()).unwrap_or(u8::MAX));
        sealed.extend_from_slice(key.id.as_bytes());
        sealed.extend_from_slice(&now_ms.saturating_add(self.lifetime_ms).to_be_bytes());
        sealed.extend_from_slice(&nonce());
        sealed.extend_from_slice(payload.as_bytes());
        let tag = authenticate(key, &sealed, binding).finalize().into_bytes();
        sealed.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(sealed)
    }

    /// The key named `id`: the current one first, then the previous ones.
    fn find(&self, id: &str) -> Option<&StateKey> {
        core::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id == id)
    }
}

/// A state that opened.
#[derive(Clone, Debug, PartialEq)]
pub struct Opened {
    /// What was sealed: for a round, the handler's state.
    pub payload: Value,
    /// For a round ([`StateSealer::seal_round`]), the keys of the questions
    /// it asked; `None` for any other state.
    pub asked: Option<Vec<String>>,
    /// Its tag: what tells this state from every other.
    pub id: [u8; TAG_LEN],
    /// When it stops opening, in the sealer's milliseconds.
    pub expires_at_ms: u64,
}

/// Which states have been answered, and with what: one answer per round.
///
/// Bounded: at most `capacity` states are remembered, each until it
/// expires. When full, the state closest to its expiry is forgotten first;
/// it may then be answered again, but only by the principal it is bound to,
/// so a flood weakens the rule for nobody but the principals it evicts, and
/// only towards themselves.
#[derive(Debug)]
pub(crate) struct Rounds {
    capacity: usize,
    answered: std::collections::HashMap<[u8; TAG_LEN], (u64, [u8; 32])>,
    by_expiry: std::collections::BTreeSet<(u64, [u8; TAG_LEN])>,
}

/// Whether a round of a multi round-trip request is served: what a
/// [`RoundLedger`](super::RoundLedger) decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// First answer to this state: serve it.
    First,
    /// The same answer again (a retry): serve it again.
    Retry,
    /// Another answer to a state already answered: refuse it.
    Conflict,
}

impl Rounds {
    /// A record of at most `capacity` answered states.
    #[must_use]
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            answered: std::collections::HashMap::new(),
            by_expiry: std::collections::BTreeSet::new(),
        }
    }

    /// Records that `state` is answered with `responses` (a digest of the
    /// retry's `inputResponses`), unless it was answered otherwise before.
    pub(crate) fn answer(&mut self, state: &Opened, responses: [u8; 32], now_ms: u64) -> Round {
        while let Some(&(expiry, id)) = self.by_expiry.first() {
            if expiry > now_ms {
                break;
            }
            self.by_expiry.pop_first();
            self.answered.remove(&id);
        }
        if let Some((_, earlier)) = self.answered.get(&state.id) {
            return if *earlier == responses {
                Round::Retry
            } else {
                Round::Conflict
            };
        }
        if self.capacity == 0 {
            return Round::First;
        }
        if self.answered.len() >= self.capacity {
            if let Some((_, id)) = self.by_expiry.pop_first() {
                self.answered.remove(&id);
            }
        }
        self.answered
            .insert(state.id, (state.expires_at_ms, responses));
        self.by_expiry.insert((state.expires_at_ms, state.id));
        Round::First
    }

    /// How many answered states are remembered.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.answered.len()
    }
}

/// Why a state could not be sealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The sealed string would be longer than [`MAX_SEALED_LEN`].
    #[error("a sealed requestState of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The length the sealed string would have had.
        len: usize,
        /// The limit it exceeded.
        max: usize,
    },
}

/// Why a presented `requestState` was refused.
///
/// All four are the client's doing (or an attacker's), and all are answered
/// the same way on the wire; the variants exist for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Too long, not base64, or not an envelope this server writes.
    #[error("requestState is malformed")]
    Malformed,
    /// Sealed with a key this server does not hold.
    #[error("requestState was sealed with an unknown key")]
    UnknownKey,
    /// Altered, or sealed for another principal, method, target or params.
    #[error("requestState failed verification")]
    BadSignature,
    /// Genuine but past its expiry.
    #[error("requestState has expired")]
    Expired,
}

impl StateError {
    /// The JSON-RPC code a server answers with: always `-32602`.
    ///
    /// The state is part of the request's params, and a params member that
    /// does not verify is invalid params; SEP-2322 sends protocol errors in a
    /// retry as ordinary JSON-RPC errors.
    #[must_use]
    pub const fn code(self) -> ErrorCode {
        ErrorCode::INVALID_PARAMS
    }
}

/// The clear-text front of an envelope.
struct Header<'a> {
    version: u8,
    key_id: &'a str,
    expires_at_ms: u64,
    payload: &'a [u8],
}

impl<'a> Header<'a> {
    fn read(envelope: &'a [u8]) -> Result<Self, StateError> {
        let [version, id_len, rest @ ..] = envelope else {
            return Err(StateError::Malformed);
        };
        if *version != FORMAT_VERSION && *version != ROUND_FORMAT_VERSION {
            return Err(StateError::Malformed);
        }
        let (key_id, rest) = rest
            .split_at_checked(usize::from(*id_len))
            .ok_or(StateError::Malformed)?;
        let (expiry, rest) = rest.split_first_chunk::<8>().ok_or(StateError::Malformed)?;
        let (_nonce, payload) = rest
            .split_first_chunk::<NONCE_LEN>()
            .ok_or(StateError::Malformed)?;
        Ok(Self {
            version: *version,
            key_id: core::str::from_utf8(key_id).map_err(|_| StateError::Malformed)?,
            expires_at_ms: u64::from_be_bytes(*expiry),
            payload,
        })
    }
}

/// A fresh nonce: random, or, should the operating system have no
/// randomness to give, from a counter, which is as unique within this
/// process (uniqueness is all the nonce is for; the tag vouches for it).
fn nonce() -> [u8; NONCE_LEN] {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut nonce = [0u8; NONCE_LEN];
    if getrandom::fill(&mut nonce).is_err() {
        nonce = COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_be_bytes();
    }
    nonce
}

/// The MAC over an envelope and the binding it is sealed for.
fn authenticate(key: &StateKey, envelope: &[u8], binding: &StateBinding) -> HmacSha256 {
    let mut mac = key.mac();
    mac.update(MAC_LABEL);
    update_field(&mut mac, envelope);
    match &binding.principal {
        None => mac.update(&[0]),
        Some(principal) => {
            mac.update(&[1]);
            update_field(&mut mac, principal.as_bytes());
        }
    }
    update_field(&mut mac, binding.method.as_bytes());
    update_field(&mut mac, binding.target.as_bytes());
    mac.update(binding.digest.as_bytes());
    mac
}

/// Feeds `bytes` with its length in front, so adjacent fields cannot trade
/// bytes with each other.
fn update_field(mac: &mut HmacSha256, bytes: &[u8]) {
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    mac.update(&len.to_be_bytes());
    mac.update(bytes);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_round_record_is_bounded_and_forgets_what_expired() {
        let opened = |n: u8, expires_at_ms: u64| Opened {
            payload: Value::Null,
            asked: None,
            id: [n; TAG_LEN],
            expires_at_ms,
        };
        let mut rounds = Rounds::new(2);
        assert_eq!(rounds.answer(&opened(1, 100), [1; 32], 0), Round::First);
        assert_eq!(rounds.answer(&opened(1, 100), [1; 32], 1), Round::Retry);
        assert_eq!(rounds.answer(&opened(1, 100), [2; 32], 1), Round::Conflict);
        assert_eq!(rounds.answer(&opened(2, 200), [1; 32], 2), Round::First);
        // Full: the one nearest its expiry makes room.
        assert_eq!(rounds.answer(&opened(3, 300), [1; 32], 3), Round::First);
        assert_eq!(rounds.len(), 2);
        // Past their expiry, states are forgotten (and no longer open).
        assert_eq!(rounds.answer(&opened(4, 400), [1; 32], 350), Round::First);
        assert_eq!(rounds.len(), 1);
    }

    use serde_json::json;

    use super::*;
    use crate::domain::canonical::request_digest;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const NOW: u64 = 1_000_000;

    fn key(id: &str, fill: u8) -> Result<StateKey, KeyError> {
        StateKey::new(id, [fill; SECRET_LEN])
    }

    fn sealer() -> Result<StateSealer, KeyError> {
        Ok(StateSealer::new(key("k1", 0x11)?))
    }

    fn binding() -> StateBinding {
        let params = json!({"name": "transfer", "arguments": {"amount": 10}});
        StateBinding {
            principal: Some("alice".to_owned()),
            method: "tools/call".to_owned(),
            target: "transfer".to_owned(),
            digest: request_digest(params.as_object().unwrap_or(&serde_json::Map::new())),
        }
    }

    fn payload() -> Value {
        json!({"step": 2, "approved": ["alice"], "note": "é/\u{1f600}"})
    }

    fn decode(sealed: &str) -> Result<Vec<u8>, base64::DecodeError> {
        URL_SAFE_NO_PAD.decode(sealed)
    }

    /// The offset of the first payload byte in a state sealed with key `k1`.
    const PAYLOAD_AT: usize = 2 + 2 + 8;

    #[test]
    fn a_sealed_state_opens_with_the_binding_it_was_sealed_for() -> TestResult {
        let sealer = sealer()?;
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        assert_eq!(sealer.open(&sealed, &binding(), NOW + 1)?, payload());
        Ok(())
    }

    #[test]
    fn a_sealed_state_is_url_safe_text_needing_no_escaping() -> TestResult {
        let sealed = sealer()?.seal(&payload(), &binding(), NOW)?;
        assert!(
            sealed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{sealed}"
        );
        Ok(())
    }

    #[test]
    fn a_tampered_payload_byte_fails_verification() -> TestResult {
        let sealer = sealer()?;
        let mut bytes = decode(&sealer.seal(&json!({"amount": 10}), &binding(), NOW)?)?;
        // `{"amount":10}`: turn the 1 into a 9, which is still valid JSON, so
        // only the tag can catch it.
        let digit = bytes
            .iter()
            .skip(PAYLOAD_AT)
            .position(|b| *b == b'1')
            .ok_or("no digit in the payload")?;
        if let Some(byte) = bytes.get_mut(PAYLOAD_AT + digit) {
            *byte = b'9';
        }
        let forged = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(
            sealer.open(&forged, &binding(), NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn every_single_byte_change_is_refused() -> TestResult {
        let sealer = sealer()?;
        let bytes = decode(&sealer.seal(&json!({"a": 1}), &binding(), NOW)?)?;
        for i in 0..bytes.len() {
            let mut forged = bytes.clone();
            if let Some(byte) = forged.get_mut(i) {
                *byte ^= 0x01;
            }
            let result = sealer.open(&URL_SAFE_NO_PAD.encode(&forged), &binding(), NOW);
            assert!(result.is_err(), "flipping byte {i} went unnoticed");
        }
        Ok(())
    }

    #[test]
    fn an_edited_expiry_is_refused_rather_than_extending_the_state() -> TestResult {
        let sealer = sealer()?;
        let mut bytes = decode(&sealer.seal(&payload(), &binding(), NOW)?)?;
        // The expiry's high byte sits just before the payload: push it into
        // the far future.
        if let Some(byte) = bytes.get_mut(PAYLOAD_AT - 8) {
            *byte = 0x7f;
        }
        let forged = URL_SAFE_NO_PAD.encode(&bytes);
        let later = NOW + DEFAULT_LIFETIME_MS + 1;
        assert_eq!(
            sealer.open(&forged, &binding(), later),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn a_state_sealed_for_another_principal_fails_verification() -> TestResult {
        let sealer = sealer()?;
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        for principal in [Some("mallory".to_owned()), None, Some(String::new())] {
            let other = StateBinding {
                principal: principal.clone(),
                ..binding()
            };
            assert_eq!(
                sealer.open(&sealed, &other, NOW),
                Err(StateError::BadSignature),
                "{principal:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_anonymous_state_is_not_one_for_the_empty_principal() -> TestResult {
        let sealer = sealer()?;
        let anonymous = StateBinding {
            principal: None,
            ..binding()
        };
        let sealed = sealer.seal(&payload(), &anonymous, NOW)?;
        assert_eq!(sealer.open(&sealed, &anonymous, NOW)?, payload());
        let empty = StateBinding {
            principal: Some(String::new()),
            ..binding()
        };
        assert_eq!(
            sealer.open(&sealed, &empty, NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn a_state_sealed_for_another_method_fails_verification() -> TestResult {
        let sealer = sealer()?;
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        let other = StateBinding {
            method: "prompts/get".to_owned(),
            ..binding()
        };
        assert_eq!(
            sealer.open(&sealed, &other, NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn a_state_sealed_for_another_target_fails_verification() -> TestResult {
        let sealer = sealer()?;
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        let other = StateBinding {
            target: "delete_everything".to_owned(),
            ..binding()
        };
        assert_eq!(
            sealer.open(&sealed, &other, NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn a_state_sealed_for_other_params_fails_verification() -> TestResult {
        let sealer = sealer()?;
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        let params = json!({"name": "transfer", "arguments": {"amount": 1_000_000}});
        let other = StateBinding {
            digest: request_digest(params.as_object().ok_or("params")?),
            ..binding()
        };
        assert_eq!(
            sealer.open(&sealed, &other, NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn fields_of_the_binding_cannot_trade_bytes() -> TestResult {
        // Without length prefixes, method "tools/callx" + target "y" and
        // method "tools/call" + target "xy" would tag the same bytes.
        let sealer = sealer()?;
        let a = StateBinding {
            method: "tools/callx".to_owned(),
            target: "y".to_owned(),
            ..binding()
        };
        let b = StateBinding {
            method: "tools/call".to_owned(),
            target: "xy".to_owned(),
            ..binding()
        };
        let sealed = sealer.seal(&payload(), &a, NOW)?;
        assert_eq!(sealer.open(&sealed, &b, NOW), Err(StateError::BadSignature));
        Ok(())
    }

    #[test]
    fn a_state_opens_until_its_expiry_and_not_at_it() -> TestResult {
        let sealer = sealer()?.with_lifetime_ms(5_000);
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        assert_eq!(sealer.open(&sealed, &binding(), NOW + 4_999)?, payload());
        assert_eq!(
            sealer.open(&sealed, &binding(), NOW + 5_000),
            Err(StateError::Expired)
        );
        Ok(())
    }

    #[test]
    fn the_default_lifetime_is_ten_minutes() -> TestResult {
        let sealer = sealer()?;
        assert_eq!(sealer.lifetime_ms(), 600_000);
        let sealed = sealer.seal(&payload(), &binding(), NOW)?;
        assert!(sealer.open(&sealed, &binding(), NOW + 599_999).is_ok());
        assert_eq!(
            sealer.open(&sealed, &binding(), NOW + 600_000),
            Err(StateError::Expired)
        );
        Ok(())
    }

    #[test]
    fn a_state_sealed_before_a_rotation_still_opens_after_it() -> TestResult {
        let mut sealer = sealer()?;
        let before = sealer.seal(&payload(), &binding(), NOW)?;
        sealer.rotate(key("k2", 0x22)?);
        assert_eq!(sealer.current_key_id(), "k2");
        assert_eq!(sealer.open(&before, &binding(), NOW)?, payload());
        let after = sealer.seal(&payload(), &binding(), NOW)?;
        // The new state names the new key: a sealer holding only the old one
        // does not know it.
        assert_eq!(
            StateSealer::new(key("k1", 0x11)?).open(&after, &binding(), NOW),
            Err(StateError::UnknownKey)
        );
        Ok(())
    }

    #[test]
    fn a_listed_previous_key_opens_what_it_sealed() -> TestResult {
        let old = StateSealer::new(key("old", 0x33)?);
        let sealed = old.seal(&payload(), &binding(), NOW)?;
        let sealer = sealer()?.with_previous(key("old", 0x33)?);
        assert_eq!(sealer.open(&sealed, &binding(), NOW)?, payload());
        Ok(())
    }

    #[test]
    fn a_key_rotated_past_the_bound_is_forgotten() -> TestResult {
        let mut sealer = sealer()?;
        let first = sealer.seal(&payload(), &binding(), NOW)?;
        for n in 0..MAX_PREVIOUS_KEYS {
            sealer.rotate(key(&format!("r{n}"), 0x40)?);
        }
        // k1 is now the oldest of MAX_PREVIOUS_KEYS previous keys: still held.
        assert_eq!(sealer.open(&first, &binding(), NOW)?, payload());
        sealer.rotate(key("last", 0x50)?);
        assert_eq!(
            sealer.open(&first, &binding(), NOW),
            Err(StateError::UnknownKey)
        );
        Ok(())
    }

    #[test]
    fn rotating_to_a_reused_id_replaces_the_old_key_of_that_id() -> TestResult {
        let mut sealer = sealer()?;
        sealer.rotate(key("k2", 0x22)?);
        sealer.rotate(key("k1", 0x99)?);
        let old = StateSealer::new(key("k1", 0x11)?).seal(&payload(), &binding(), NOW)?;
        // "k1" names the new secret now, so the old one's states no longer
        // verify; they are not opened with whichever "k1" happens to be first.
        assert_eq!(
            sealer.open(&old, &binding(), NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn a_state_from_an_unknown_key_id_is_refused_as_such() -> TestResult {
        let foreign = StateSealer::new(key("elsewhere", 0x11)?);
        let sealed = foreign.seal(&payload(), &binding(), NOW)?;
        assert_eq!(
            sealer()?.open(&sealed, &binding(), NOW),
            Err(StateError::UnknownKey)
        );
        Ok(())
    }

    #[test]
    fn a_known_key_id_with_another_secret_fails_verification() -> TestResult {
        let impostor = StateSealer::new(key("k1", 0xee)?);
        let sealed = impostor.seal(&payload(), &binding(), NOW)?;
        assert_eq!(
            sealer()?.open(&sealed, &binding(), NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    /// A round opens with the keys it asked, and its payload is the
    /// handler's state alone; a state sealed as before opens as it did,
    /// naming none.
    #[test]
    fn a_round_opens_with_the_keys_it_asked() -> TestResult {
        let sealer = sealer()?;
        let round = sealer.seal_round(&payload(), &["sure", "name"], &binding(), NOW)?;
        let opened = sealer.open_round(&round, &binding(), NOW)?;
        assert_eq!(opened.payload, payload());
        assert_eq!(
            opened.asked,
            Some(vec!["sure".to_owned(), "name".to_owned()])
        );
        assert_eq!(sealer.open(&round, &binding(), NOW)?, payload());
        let plain = sealer.seal(&payload(), &binding(), NOW)?;
        let opened = sealer.open_round(&plain, &binding(), NOW)?;
        assert_eq!((opened.payload, opened.asked), (payload(), None));
        // A round whose wrapper is not one is refused, not read as a state.
        let forged = sealer.seal_bounded(ROUND_FORMAT_VERSION, "[1]", &binding(), NOW)?;
        assert_eq!(
            sealer.open(&forged, &binding(), NOW),
            Err(StateError::Malformed)
        );
        Ok(())
    }

    #[test]
    fn garbage_is_malformed() -> TestResult {
        let sealer = sealer()?;
        let short = URL_SAFE_NO_PAD.encode([1_u8; TAG_LEN]);
        let wrong_version = {
            let mut bytes = decode(&sealer.seal(&payload(), &binding(), NOW)?)?;
            if let Some(version) = bytes.first_mut() {
                *version = ROUND_FORMAT_VERSION + 1;
            }
            URL_SAFE_NO_PAD.encode(bytes)
        };
        let overlong_id =
            URL_SAFE_NO_PAD.encode([[FORMAT_VERSION, 200].as_slice(), &[0; 40]].concat());
        for garbage in [
            "",
            "not base64!",
            "eyJzdGVwIjoyfQ==",
            "AAAA",
            &short,
            &wrong_version,
            &overlong_id,
        ] {
            assert_eq!(
                sealer.open(garbage, &binding(), NOW),
                Err(StateError::Malformed),
                "{garbage:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_oversized_state_is_refused_even_when_genuine() -> TestResult {
        let sealer = sealer()?;
        let big = json!("x".repeat(MAX_SEALED_LEN));
        let sealed = sealer.seal_unbounded(FORMAT_VERSION, &big.to_string(), &binding(), NOW);
        assert!(sealed.len() > MAX_SEALED_LEN);
        assert_eq!(
            sealer.open(&sealed, &binding(), NOW),
            Err(StateError::Malformed)
        );
        Ok(())
    }

    #[test]
    fn sealing_refuses_a_state_that_could_never_be_opened() -> TestResult {
        let sealer = sealer()?;
        let big = json!("x".repeat(MAX_SEALED_LEN));
        assert!(matches!(
            sealer.seal(&big, &binding(), NOW),
            Err(SealError::TooLarge {
                max: MAX_SEALED_LEN,
                ..
            })
        ));
        // Just under the limit is sealed and opens.
        let fits = json!("x".repeat(MAX_SEALED_LEN / 2));
        let sealed = sealer.seal(&fits, &binding(), NOW)?;
        assert_eq!(sealer.open(&sealed, &binding(), NOW)?, fits);
        Ok(())
    }

    #[test]
    fn debug_of_a_key_prints_no_secret() -> TestResult {
        let key = key("visible-id", 0xab)?;
        let sealer = StateSealer::new(key.clone()).with_previous(StateKey::new("p", [0xab; 32])?);
        for printed in [
            format!("{key:?}"),
            format!("{sealer:?}"),
            format!("{key:#?}"),
        ] {
            assert!(printed.contains("visible-id"), "{printed}");
            assert!(printed.contains("redacted"), "{printed}");
            assert!(!printed.contains("171"), "decimal secret in {printed}");
            assert!(
                !printed.to_lowercase().contains("ab, ab"),
                "hex secret in {printed}"
            );
            assert!(
                !printed.to_lowercase().contains("abab"),
                "hex secret in {printed}"
            );
        }
        Ok(())
    }

    #[test]
    fn key_ids_must_fit_the_header() {
        assert!(matches!(
            StateKey::new("", [0; 32]),
            Err(KeyError::BadId { len: 0 })
        ));
        assert!(StateKey::new("x".repeat(MAX_KEY_ID_LEN), [0; 32]).is_ok());
        assert!(matches!(
            StateKey::new("x".repeat(MAX_KEY_ID_LEN + 1), [0; 32]),
            Err(KeyError::BadId { .. })
        ));
    }

    #[test]
    fn generated_sealers_do_not_open_each_others_states() -> TestResult {
        let a = StateSealer::generate()?;
        let b = StateSealer::generate()?;
        assert_ne!(a.current_key_id(), b.current_key_id());
        let sealed = a.seal(&payload(), &binding(), NOW)?;
        assert_eq!(a.open(&sealed, &binding(), NOW)?, payload());
        assert_eq!(
            b.open(&sealed, &binding(), NOW),
            Err(StateError::UnknownKey)
        );
        // Same id, fresh secret: the secret is random, not derived from the id.
        let c = StateSealer::new(StateKey::new(a.current_key_id(), [0; 32])?);
        assert_eq!(
            c.open(&sealed, &binding(), NOW),
            Err(StateError::BadSignature)
        );
        Ok(())
    }

    #[test]
    fn every_refusal_is_answered_with_invalid_params() {
        for error in [
            StateError::Malformed,
            StateError::UnknownKey,
            StateError::BadSignature,
            StateError::Expired,
        ] {
            assert_eq!(error.code(), ErrorCode(-32602), "{error}");
        }
    }

    #[test]
    fn the_padded_key_is_the_same_hmac_as_the_plain_32_byte_key() -> TestResult {
        let key = key("k", 0x5a)?;
        let mut plain = HmacSha256::new_from_slice(&[0x5a; 32]).map_err(|e| e.to_string())?;
        let mut padded = key.mac();
        plain.update(b"message");
        padded.update(b"message");
        assert_eq!(
            plain.finalize().into_bytes(),
            padded.finalize().into_bytes()
        );
        Ok(())
    }
}
