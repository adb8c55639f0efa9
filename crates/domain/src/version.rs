//! The revisions this build implements, kept apart from what a peer may send.
//!
//! Two types for one idea, deliberately. [`WireVersion`] is whatever string
//! arrived in `protocolVersion` or an `MCP-Protocol-Version` header, including
//! revisions that do not exist yet and the pre-release `2024-10-07`.
//! [`ProtocolVersion`] is the closed set this build can speak. Code past the
//! codec layer only ever sees the closed one, so there is no string comparison
//! of versions anywhere a decision is made.

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

/// A revision of the Model Context Protocol this build implements.
///
/// Ordered by publication, so `a < b` means `a` is the older revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// The first public revision: stdio and HTTP+SSE, no authorization.
    V2024_11_05,
    /// OAuth 2.1, Streamable HTTP, batching, tool annotations, audio.
    V2025_03_26,
    /// Structured tool output, elicitation, resource links, titles.
    V2025_06_18,
    /// Icons, URL elicitation, sampling with tools, experimental tasks.
    V2025_11_25,
    /// The stateless revision: per-request `_meta`, no handshake, MRTR.
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every implemented revision, oldest first.
    pub const ALL: [Self; 5] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];

    /// The newest revision this build implements.
    pub const LATEST: Self = Self::V2026_07_28;

    /// The newest revision that still uses the `initialize` handshake.
    pub const LATEST_LEGACY: Self = Self::V2025_11_25;

    /// The revision's identifier as it travels on the wire.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Which lifecycle the revision follows.
    #[must_use]
    pub const fn era(self) -> Era {
        match self {
            Self::V2026_07_28 => Era::Modern,
            Self::V2024_11_05 | Self::V2025_03_26 | Self::V2025_06_18 | Self::V2025_11_25 => {
                Era::Legacy
            }
        }
    }

    /// The closed revision a wire value names, if this build implements it.
    #[must_use]
    pub fn from_wire(wire: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == wire)
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProtocolVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_wire(s).ok_or_else(|| UnsupportedVersion(s.to_owned()))
    }
}

impl Serialize for ProtocolVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = String::deserialize(deserializer)?;
        Self::from_wire(&wire).ok_or_else(|| {
            serde::de::Error::custom(format_args!("unsupported protocol version {wire:?}"))
        })
    }
}

/// A revision named on the wire that this build does not implement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsupported protocol version {0:?}")]
pub struct UnsupportedVersion(pub String);

/// The open wire value of a protocol version: any string a peer sent.
///
/// Kept as its own type so that an unknown revision can be carried, echoed in
/// an `UnsupportedProtocolVersionError`'s `data.requested`, and compared,
/// without being mistaken for one this build speaks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WireVersion(String);

impl WireVersion {
    /// Wraps what a peer sent.
    #[must_use]
    pub fn new(wire: impl Into<String>) -> Self {
        Self(wire.into())
    }

    /// The string as the peer sent it.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The implemented revision this names, if any.
    #[must_use]
    pub fn supported(&self) -> Option<ProtocolVersion> {
        ProtocolVersion::from_wire(&self.0)
    }
}

impl From<ProtocolVersion> for WireVersion {
    fn from(version: ProtocolVersion) -> Self {
        Self(version.as_str().to_owned())
    }
}

impl fmt::Display for WireVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The two lifecycles MCP has had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2024-11-05 through 2025-11-25: an `initialize` handshake settles the
    /// revision and capabilities once per connection.
    Legacy,
    /// 2026-07-28 onwards: every request carries its own revision and
    /// capabilities in `_meta`, and no state survives between requests.
    Modern,
}

impl Era {
    /// `"legacy"` or `"modern"`: how logs, spans and metrics name it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Legacy => "legacy",
            Self::Modern => "modern",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_revision_reads_back_from_its_own_wire_string() {
        for version in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::from_wire(version.as_str()), Some(version));
        }
    }

    #[test]
    fn the_prerelease_tag_is_not_a_supported_revision() {
        assert_eq!(
            "2024-10-07".parse::<ProtocolVersion>(),
            Err(UnsupportedVersion("2024-10-07".to_owned()))
        );
        assert_eq!(WireVersion::new("2024-10-07").supported(), None);
    }

    #[test]
    fn only_the_stateless_revision_is_modern() {
        let modern: Vec<_> = ProtocolVersion::ALL
            .into_iter()
            .filter(|v| v.era() == Era::Modern)
            .collect();
        assert_eq!(modern, [ProtocolVersion::V2026_07_28]);
    }

    #[test]
    fn revisions_order_by_publication() {
        assert!(ProtocolVersion::ALL.is_sorted());
        let mut dedup = ProtocolVersion::ALL.to_vec();
        dedup.dedup();
        assert_eq!(dedup, ProtocolVersion::ALL);
    }
}
