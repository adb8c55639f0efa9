//! The per-revision wire codecs.
//!
//! [`wire`] is the typed message model shared by every revision; one module
//! per revision (`v2024_11_05` … `v2026_07_28`) describes what that revision
//! defines, as a [`RevisionCodec`]; [`result::WireToolResults`] implements the
//! bridge's tool-result port by dispatching to them. No code outside this
//! module compares version strings.

pub mod result;
mod revision;
pub mod v2024_11_05;
pub mod v2025_03_26;
pub mod v2025_06_18;
pub mod v2025_11_25;
pub mod v2026_07_28;
pub mod wire;

pub use revision::{CACHEABLE_METHODS, ReadError, RevisionCodec, Sender};

use crate::domain::ProtocolVersion;

/// The codec of `version`.
#[must_use]
pub fn for_version(version: ProtocolVersion) -> &'static RevisionCodec {
    match version {
        ProtocolVersion::V2024_11_05 => &v2024_11_05::CODEC,
        ProtocolVersion::V2025_03_26 => &v2025_03_26::CODEC,
        ProtocolVersion::V2025_06_18 => &v2025_06_18::CODEC,
        ProtocolVersion::V2025_11_25 => &v2025_11_25::CODEC,
        ProtocolVersion::V2026_07_28 => &v2026_07_28::CODEC,
    }
}
