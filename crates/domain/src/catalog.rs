//! The identity of a cataloged tool, and what pins it: the digest of what a
//! model sees of it, the generation of the catalog it was read from, and
//! where trust in it comes from.
//!
//! A gateway exposes tools from many sources under one namespace. What it
//! promises a session is not "a tool named X" but "the tool whose definition
//! hashed to D, from a source trusted for reason P": a source that later
//! changes X's definition (a rug pull) changes D, and the promise no longer
//! holds.

use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::canonical::canonical_json;

/// The catalog-wide id of a tool: its namespace (the source) and its name,
/// written `namespace/name`, or the bare name for a builtin.
///
/// Ids order by their text, which is what makes every projection of a set
/// deterministic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolId(String);

impl ToolId {
    /// An id as written.
    #[must_use]
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id of `name` from the source `namespace`.
    #[must_use]
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self(format!("{namespace}/{name}"))
    }

    /// The id's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so a table can align ids with `{:<48}`.
        f.pad(&self.0)
    }
}

/// The members of a tool definition a model sees, and so the members a
/// digest covers. Anything else (`_meta`, icons, `execution`) may change
/// without changing what the tool does to the model.
pub const DIGESTED_MEMBERS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// A SHA-256 digest over the canonical JSON form (RFC 8785 style: sorted
/// members, no insignificant whitespace) of a tool definition's
/// [`DIGESTED_MEMBERS`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaDigest([u8; 32]);

impl SchemaDigest {
    /// The digest of a tool definition (a `Tool` object as sent on the wire).
    #[must_use]
    pub fn of_definition(definition: &Map<String, Value>) -> Self {
        let seen: Map<String, Value> = definition
            .iter()
            .filter(|(key, _)| DIGESTED_MEMBERS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        Self(Sha256::digest(canonical_json(&Value::Object(seen))).into())
    }

    /// A digest from its 32 bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The digest's 32 bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Reads the lowercase hex form [`fmt::Display`] writes, and only that:
    /// a digest has one spelling, so a pin or an approval written another
    /// way (upper case, a sign) is refused rather than matched.
    #[must_use]
    pub fn from_hex(hex: &str) -> Option<Self> {
        fn nibble(digit: u8) -> Option<u8> {
            match digit {
                b'0'..=b'9' => Some(digit - b'0'),
                b'a'..=b'f' => Some(digit - b'a' + 10),
                _ => None,
            }
        }
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0_u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let [high, low] = pair else { return None };
            *byte = (nibble(*high)? << 4) | nibble(*low)?;
        }
        Some(Self(bytes))
    }
}

impl fmt::Display for SchemaDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for SchemaDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SchemaDigest({self})")
    }
}

/// How many times a catalog has changed. Every mutation advances it, so a
/// snapshot taken at one generation can tell it is stale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CatalogGeneration(u64);

impl CatalogGeneration {
    /// The generation numbered `n`.
    #[must_use]
    pub const fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The generation after this one.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for CatalogGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "generation {}", self.0)
    }
}

/// Where trust in a tool comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provenance {
    /// Built into this program.
    Builtin,
    /// From an upstream, and its digest was pinned by the operator (in
    /// configuration or by an explicit approval).
    Pinned,
    /// From an upstream, with nothing vouching for its definition: never
    /// callable until approved.
    Unverified,
}

impl Provenance {
    /// Whether the tool may be called at all.
    #[must_use]
    pub const fn is_verified(self) -> bool {
        matches!(self, Self::Builtin | Self::Pinned)
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Builtin => "builtin",
            Self::Pinned => "pinned",
            Self::Unverified => "unverified",
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn the_digest_ignores_member_order_and_what_the_model_does_not_see() {
        let a = object(
            json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {}, "y": {}}}}),
        );
        let b = object(
            json!({"inputSchema": {"properties": {"y": {}, "x": {}}, "type": "object"}, "description": "d", "name": "t", "_meta": {"k": 1}, "icons": []}),
        );
        assert_eq!(
            SchemaDigest::of_definition(&a),
            SchemaDigest::of_definition(&b)
        );
    }

    #[test]
    fn the_digest_changes_with_anything_the_model_sees() {
        let base = json!({"name": "t", "description": "d", "inputSchema": {"type": "object"}});
        let digest = SchemaDigest::of_definition(&object(base.clone()));
        for (member, value) in [
            ("description", json!("d, and also delete everything")),
            (
                "inputSchema",
                json!({"type": "object", "properties": {"path": {}}}),
            ),
            ("annotations", json!({"destructiveHint": true})),
            ("title", json!("T")),
            ("outputSchema", json!({"type": "object"})),
        ] {
            let mut changed = object(base.clone());
            changed.insert(member.to_owned(), value);
            assert_ne!(digest, SchemaDigest::of_definition(&changed), "{member}");
        }
    }

    #[test]
    fn the_hex_form_round_trips() {
        let digest = SchemaDigest::of_definition(&object(json!({"name": "t"})));
        assert_eq!(SchemaDigest::from_hex(&digest.to_string()), Some(digest));
        assert_eq!(SchemaDigest::from_hex("zz"), None);
        // One spelling only: what `u8::from_str_radix` would also take is refused.
        let lower = "ab".repeat(32);
        assert_eq!(
            SchemaDigest::from_hex(&lower),
            Some(SchemaDigest::from_bytes([0xab; 32]))
        );
        assert_eq!(SchemaDigest::from_hex(&lower.to_uppercase()), None);
        assert_eq!(
            SchemaDigest::from_hex(&format!("+f{}", "ab".repeat(31))),
            None
        );
        assert_eq!(
            SchemaDigest::from_hex(&format!("{}+f", "ab".repeat(31))),
            None
        );
        assert_eq!(
            SchemaDigest::from_hex(&format!("{}é", "ab".repeat(31))),
            None
        );
    }

    #[test]
    fn only_builtin_and_pinned_tools_are_verified() {
        assert!(Provenance::Builtin.is_verified());
        assert!(Provenance::Pinned.is_verified());
        assert!(!Provenance::Unverified.is_verified());
    }
}
