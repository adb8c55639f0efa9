//! Canonical JSON, and the request digest built on it.
//!
//! A multi round-trip retry (SEP-2322) must repeat the original request, and
//! the server checks that by comparing digests of the two requests' params.
//! Two peers, or one peer twice, may write the same params with members in a
//! different order, so the digest is taken over a canonical form rather than
//! over the bytes that arrived.
//!
//! # The canonical form
//!
//! It follows RFC 8785 (JCS) where `serde_json` lets it:
//!
//! - no whitespace;
//! - object members sorted by the UTF-16 code units of their keys, as JCS
//!   sorts them (this differs from byte order only for keys holding
//!   characters above U+FFFF next to ones in U+E000..=U+FFFF, and it is the
//!   order a JavaScript peer computing the same form would use);
//! - strings escaped minimally: `"` and `\`, the short escapes `\b \f \n \r
//!   \t`, `\u00xx` in lower-case hex for the other control characters, and
//!   everything else, including `/` and non-ASCII, written as itself;
//! - numbers exactly as `serde_json` writes them.
//!
//! The last point is where it departs from JCS, which writes numbers as
//! ECMAScript does. `serde_json` keeps `1.0` apart from `1` and writes `1e21`
//! where ECMAScript writes `1e+21`, so a peer that re-encodes a float
//! differently between a request and its retry produces another digest. A
//! retry is the same client sending the same params again, so this costs
//! nothing in practice, and it spares the domain a float formatter of its own.
//!
//! Nesting is followed recursively. Values read by `serde_json` are at most 128
//! levels deep, which bounds the recursion for anything that came off the
//! wire.

use core::cmp::Ordering;
use core::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Params members that belong to one attempt rather than to the request.
///
/// `_meta` carries per-attempt hints (a progress token, a log level);
/// `inputResponses` and `requestState` are what a retry adds. Leaving them
/// out is what lets a retry digest the same as the request it repeats.
const EXCLUDED_MEMBERS: [&str; 3] = ["_meta", "inputResponses", "requestState"];

/// The canonical serialization of `value`: see the [module docs](self).
///
/// Equal values give equal bytes whatever order their object members were
/// written in.
///
/// ```
/// use protocol_droid_domain::canonical::canonical_json;
/// use serde_json::json;
///
/// let bytes = canonical_json(&json!({"b": [1, "x"], "a": {"d": null, "c": true}}));
/// assert_eq!(bytes, br#"{"a":{"c":true,"d":null},"b":[1,"x"]}"#);
/// ```
#[must_use]
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(value, &mut out);
    out
}

/// The digest of a request's params, less the members a retry adds.
///
/// SHA-256 over the [`canonical_json`] of `params` with the top-level
/// `_meta`, `inputResponses` and `requestState` members removed. Those are
/// removed only at the top level: an argument that happens to be called
/// `_meta` is part of the call.
///
/// ```
/// use protocol_droid_domain::canonical::request_digest;
/// use serde_json::json;
///
/// let params = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
/// let first = params(json!({"name": "add", "arguments": {"a": 1, "b": 2}}));
/// let retry = params(json!({
///     "arguments": {"b": 2, "a": 1},
///     "name": "add",
///     "requestState": "opaque",
///     "inputResponses": {"confirm": {"action": "accept"}},
/// }));
/// assert_eq!(request_digest(&first), request_digest(&retry));
/// ```
#[must_use]
pub fn request_digest(params: &Map<String, Value>) -> RequestDigest {
    let mut out = Vec::with_capacity(256);
    write_object(
        params
            .iter()
            .filter(|(key, _)| !EXCLUDED_MEMBERS.contains(&key.as_str())),
        &mut out,
    );
    RequestDigest(Sha256::digest(&out).into())
}

/// A SHA-256 digest of a request's salient params: see [`request_digest`].
///
/// Not a secret, so compared in the ordinary way. Displayed as lower-case hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestDigest([u8; 32]);

impl RequestDigest {
    /// The digest's 32 bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for RequestDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for RequestDigest {
    /// Hex rather than a list of 32 numbers, so it can be compared with a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestDigest({self})")
    }
}

fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(map.iter(), out),
    }
}

fn write_object<'a>(members: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    let mut members: Vec<_> = members.collect();
    // Keys in a map are unique, so the order is total and stability is moot.
    members.sort_unstable_by(|(a, _), (b, _)| utf16_order(a, b));
    out.push(b'{');
    for (i, (key, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(key, out);
        out.push(b':');
        write_value(value, out);
    }
    out.push(b'}');
}

/// JCS's member order: by UTF-16 code unit, not by byte or by code point.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    // Most strings need no escape at all, and are copied whole.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    for ch in s.chars() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{00}'..='\u{1f}' => {
                let code = u32::from(ch);
                out.extend_from_slice(b"\\u00");
                for nibble in [code >> 4, code & 0xf] {
                    // A nibble is below 16, so the lookup always finds a digit.
                    if let Some(digit) = usize::try_from(nibble).ok().and_then(|n| HEX.get(n)) {
                        out.push(*digit);
                    }
                }
            }
            _ => {
                let mut buf = [0_u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn canonical(value: &Value) -> String {
        String::from_utf8_lossy(&canonical_json(value)).into_owned()
    }

    #[test]
    fn member_order_does_not_change_the_canonical_form() -> Result<(), serde_json::Error> {
        // Parsed from text so that `preserve_order` keeps the two orders apart;
        // a `json!` literal would be sorted by neither.
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[{"q":1,"p":2}]}}"#)?;
        let b: Value = serde_json::from_str(r#"{"a":{"x":[{"p":2,"q":1}],"y":2},"b":1}"#)?;
        assert_ne!(
            a.to_string(),
            b.to_string(),
            "the inputs must differ in order"
        );
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical(&a), r#"{"a":{"x":[{"p":2,"q":1}],"y":2},"b":1}"#);
        Ok(())
    }

    #[test]
    fn array_order_is_kept_because_it_is_meaningful() {
        assert_ne!(
            canonical_json(&json!([1, 2])),
            canonical_json(&json!([2, 1]))
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units_not_by_bytes() {
        // U+FF61 is one UTF-16 unit (0xFF61); U+1F600 is a surrogate pair
        // starting 0xD83D. By UTF-16 the emoji sorts first; by UTF-8 bytes
        // (EF vs F0) or code point it would sort last.
        let value = json!({"\u{ff61}": 1, "\u{1f600}": 2, "a": 0});
        assert_eq!(
            canonical(&value),
            "{\"a\":0,\"\u{1f600}\":2,\"\u{ff61}\":1}"
        );
    }

    #[test]
    fn strings_are_escaped_minimally_as_jcs_writes_them() {
        let value = json!("q\"b\\/\u{08}\u{0c}\n\r\t\u{01}\u{1f}\u{7f}é");
        assert_eq!(
            canonical(&value),
            "\"q\\\"b\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é\""
        );
    }

    #[test]
    fn escaped_strings_read_back_as_the_same_string() -> Result<(), serde_json::Error> {
        let original: String = (0_u8..0x80)
            .map(char::from)
            .chain("é\u{1f600}".chars())
            .collect();
        let bytes = canonical_json(&Value::String(original.clone()));
        let back: String = serde_json::from_slice(&bytes)?;
        assert_eq!(back, original);
        Ok(())
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() -> Result<(), serde_json::Error> {
        let value: Value = serde_json::from_str("[1, -0, 1.0, 1.5e300, 18446744073709551615, -3]")?;
        assert_eq!(canonical(&value), serde_json::to_string(&value)?);
        Ok(())
    }

    #[test]
    fn scalars_and_empty_containers_have_one_spelling() {
        assert_eq!(
            canonical(&json!([null, true, false, {}, []])),
            "[null,true,false,{},[]]"
        );
    }

    #[test]
    fn member_order_does_not_change_the_digest() -> Result<(), serde_json::Error> {
        let a = params(serde_json::from_str(
            r#"{"name":"add","arguments":{"a":1,"b":2}}"#,
        )?);
        let b = params(serde_json::from_str(
            r#"{"arguments":{"b":2,"a":1},"name":"add"}"#,
        )?);
        assert_eq!(request_digest(&a), request_digest(&b));
        Ok(())
    }

    #[test]
    fn members_a_retry_adds_do_not_change_the_digest() {
        let original = params(json!({"name": "add", "arguments": {"a": 1}}));
        let digest = request_digest(&original);
        for member in EXCLUDED_MEMBERS {
            let mut retry = original.clone();
            retry.insert(member.to_owned(), json!({"anything": [1, 2, 3]}));
            assert_eq!(
                request_digest(&retry),
                digest,
                "{member} changed the digest"
            );
        }
    }

    #[test]
    fn a_changed_argument_changes_the_digest() {
        let a = params(json!({"name": "transfer", "arguments": {"amount": 10}}));
        let b = params(json!({"name": "transfer", "arguments": {"amount": 1000}}));
        assert_ne!(request_digest(&a), request_digest(&b));
    }

    #[test]
    fn a_changed_target_changes_the_digest() {
        let a = params(json!({"name": "read", "arguments": {}}));
        let b = params(json!({"name": "delete", "arguments": {}}));
        assert_ne!(request_digest(&a), request_digest(&b));
    }

    #[test]
    fn excluded_names_are_excluded_only_at_the_top_level() {
        // An argument that happens to be named `_meta` is part of the call.
        let a = params(json!({"name": "t", "arguments": {"_meta": 1}}));
        let b = params(json!({"name": "t", "arguments": {"_meta": 2}}));
        assert_ne!(request_digest(&a), request_digest(&b));
    }

    #[test]
    fn the_digest_is_sha256_of_the_canonical_params() {
        // Pinned so that a change of canonical form, which would strand every
        // requestState in flight across an upgrade, cannot pass unnoticed.
        // sha256(b"{\"a\":1}")
        let digest = request_digest(&params(json!({"a": 1, "_meta": {"progressToken": 7}})));
        assert_eq!(
            digest.to_string(),
            "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
        );
        assert_eq!(digest.as_bytes().first(), Some(&0x01));
    }

    #[test]
    fn debug_shows_the_digest_in_hex() {
        let digest = request_digest(&Map::new());
        assert_eq!(format!("{digest:?}"), format!("RequestDigest({digest})"));
        assert_eq!(digest.to_string().len(), 64);
    }
}
