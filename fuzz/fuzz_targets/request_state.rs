//! Opening a client-supplied `requestState`
//! (`protocol_droid::application::server::StateSealer`).
//!
//! The sealer holds fixed keys (`fuzz-current`, secret `[7; 32]`, and the
//! previous key `fuzz-previous`, secret `[9; 32]`), so committed seeds can be
//! genuine states and mutations of them are forgeries.
//!
//! Input, by byte 0:
//! - even: the rest is a presented state string, opened with the fixed
//!   binding below at `NOW`. Invariants: no panic; a state that opens is
//!   canonical unpadded URL-safe base64 (no second spelling of the same
//!   bytes opens) and opening it again, for another principal, method or
//!   target, or after its expiry, behaves as a genuine state must.
//! - odd: the rest is `payload JSON \0 principal \0 target \0 rest`; the
//!   payload is sealed for that binding and opened again. Invariants: the
//!   payload comes back (as JSON), another principal, target, method or
//!   params digest gets `BadSignature`, the expiry is honoured, and any one
//!   changed character makes the state refuse.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use protocol_droid::application::server::{
    MAX_SEALED_LEN, StateBinding, StateError, StateKey, StateSealer,
};
use protocol_droid::domain::canonical::request_digest;
use protocol_droid_fuzz::same_json;
use serde_json::{Map, Value, json};

const NOW: u64 = 1_800_000_000_000;
const LIFETIME: u64 = 600_000;

static SEALER: LazyLock<StateSealer> = LazyLock::new(|| {
    let current = StateKey::new("fuzz-current", [7; 32]).expect("a valid key id");
    let previous = StateKey::new("fuzz-previous", [9; 32]).expect("a valid key id");
    StateSealer::new(current)
        .with_lifetime_ms(LIFETIME)
        .with_previous(previous)
});

fn binding(principal: Option<&str>, method: &str, target: &str, params: &Value) -> StateBinding {
    let empty = Map::new();
    StateBinding {
        principal: principal.map(str::to_owned),
        method: method.to_owned(),
        target: target.to_owned(),
        digest: request_digest(params.as_object().unwrap_or(&empty)),
    }
}

/// The binding genuine seeds are sealed for.
fn fixed() -> StateBinding {
    binding(
        Some("alice"),
        "tools/call",
        "deploy",
        &json!({"name": "deploy", "arguments": {"env": "prod"}}),
    )
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn decode_b64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for byte in text.bytes() {
        let six = ALPHABET.iter().position(|c| *c == byte)?;
        acc = (acc << 6) | u32::try_from(six).ok()?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

fn encode_b64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            let at = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
            out.push(char::from(ALPHABET[at]));
        }
    }
    out
}

/// The expiry written in a well-formed state's header.
fn expiry_of(sealed: &str) -> Option<u64> {
    let bytes = decode_b64(sealed)?;
    let id_len = usize::from(*bytes.get(1)?);
    let at = 2 + id_len;
    Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// What must hold of a state that opened for `binding` at `now`.
fn check_genuine(sealed: &str, binding: &StateBinding, now: u64, payload: &Value) {
    let bytes = decode_b64(sealed).expect("an opened state is base64");
    assert_eq!(
        encode_b64(&bytes),
        sealed,
        "a non-canonical spelling of a state opened"
    );
    let expiry = expiry_of(sealed).expect("an opened state has an expiry");
    assert!(now < expiry, "an expired state opened");
    assert_eq!(
        SEALER.open(sealed, binding, expiry),
        Err(StateError::Expired),
        "a state opened at its expiry"
    );
    assert!(same_json(
        &SEALER.open(sealed, binding, now).expect("opens twice"),
        payload
    ));
    let others = [
        StateBinding {
            principal: None,
            ..binding.clone()
        },
        StateBinding {
            principal: Some(format!("{}x", binding.principal.as_deref().unwrap_or(""))),
            ..binding.clone()
        },
        StateBinding {
            method: format!("{}x", binding.method),
            ..binding.clone()
        },
        StateBinding {
            target: format!("{}x", binding.target),
            ..binding.clone()
        },
        StateBinding {
            digest: request_digest(&Map::new()),
            ..binding.clone()
        },
    ];
    for other in others.iter().filter(|o| *o != binding) {
        assert_eq!(
            SEALER.open(sealed, other, now),
            Err(StateError::BadSignature),
            "a state opened for another binding"
        );
    }
}

fn presented(text: &str) {
    let binding = fixed();
    match SEALER.open(text, &binding, NOW) {
        Ok(payload) => {
            assert!(text.len() <= MAX_SEALED_LEN);
            check_genuine(text, &binding, NOW, &payload);
        }
        Err(StateError::Malformed) => {}
        Err(StateError::UnknownKey | StateError::BadSignature | StateError::Expired) => {
            // Past the header: the text is base64 of something at least a
            // tag long.
            assert!(decode_b64(text).is_some_and(|b| b.len() >= 32 + 2 + 8));
        }
        // The error is `#[non_exhaustive]`; a refusal this model does not
        // know is a finding, not something to pass over.
        Err(other) => panic!("a refusal the model does not know: {other:?}"),
    }
}

fn sealed_round_trip(rest: &[u8]) {
    let mut parts = rest.splitn(4, |b| *b == 0);
    let payload = parts.next().unwrap_or_default();
    let Ok(payload) = serde_json::from_slice::<Value>(payload) else {
        return;
    };
    let principal = parts.next().map(String::from_utf8_lossy);
    let target = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let flip = parts.next().unwrap_or_default();
    let params = json!({"name": target, "arguments": {"p": payload}});
    let binding = binding(principal.as_deref(), "tools/call", &target, &params);
    let Ok(sealed) = SEALER.seal(&payload, &binding, NOW) else {
        // Only a state too long to open may be refused.
        assert!(payload.to_string().len() > MAX_SEALED_LEN / 2);
        return;
    };
    assert!(sealed.len() <= MAX_SEALED_LEN);
    let opened = SEALER.open(&sealed, &binding, NOW).expect("a fresh state opens");
    assert!(same_json(&opened, &payload), "the payload changed");
    check_genuine(&sealed, &binding, NOW, &payload);

    // Any one changed character is refused.
    if let Some((at, with)) = flip
        .first_chunk::<3>()
        .map(|c| (usize::from(u16::from_le_bytes([c[0], c[1]])), c[2]))
    {
        let at = at % sealed.len();
        let mut changed = sealed.clone().into_bytes();
        let replacement = ALPHABET[usize::from(with) % 64];
        if changed[at] != replacement {
            changed[at] = replacement;
            let changed = String::from_utf8(changed).expect("base64 is ASCII");
            assert!(
                SEALER.open(&changed, &binding, NOW).is_err(),
                "a state with one character changed still opened"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    if mode % 2 == 0 {
        presented(&String::from_utf8_lossy(rest));
    } else {
        sealed_round_trip(rest);
    }
});
