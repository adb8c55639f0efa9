//! Turning what two peers declared into what a connection may do.

use crate::capability::CapabilitySet;
use crate::feature::{Feature, FeatureProfile};
use crate::transport::TransportKind;
use crate::version::ProtocolVersion;

/// Everything a connection settled: the revision, both sides' declarations and
/// the transport.
///
/// In the legacy era this is what an `initialize` exchange produced, once per
/// session. In the modern era each request carries its own client capabilities,
/// so a server builds one of these per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Negotiation {
    /// The revision both sides speak.
    pub version: ProtocolVersion,
    /// What the client declared.
    pub client_caps: CapabilitySet,
    /// What the server declared.
    pub server_caps: CapabilitySet,
    /// How the frames travel.
    pub transport: TransportKind,
}

/// The features a negotiation allows.
///
/// A feature is allowed when the revision has it, the declared capabilities
/// satisfy its requirement, and the transport carries it. This is the only
/// place revisions turn into behaviour.
#[must_use]
pub fn resolve(negotiation: Negotiation) -> FeatureProfile {
    Feature::ALL
        .into_iter()
        .filter(|feature| {
            feature.exists_at(negotiation.version)
                && feature.transport_allowed(negotiation.transport)
                && feature.requirement_met(
                    negotiation.version,
                    negotiation.client_caps,
                    negotiation.server_caps,
                )
        })
        .collect()
}

/// One side of a bridged connection: the revision it speaks and what it allows.
///
/// A bridge has two legs, one toward the client and one toward the server, and
/// translates a message when it crosses from one to the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leg {
    /// The revision this leg speaks.
    pub version: ProtocolVersion,
    /// What this leg's negotiation allows.
    pub profile: FeatureProfile,
}

impl Leg {
    /// A leg at `version` allowing `profile`.
    #[must_use]
    pub const fn new(version: ProtocolVersion, profile: FeatureProfile) -> Self {
        Self { version, profile }
    }
}
