//! What a translator may do when a value does not fit the side it is going to.

use crate::feature::{Feature, FeatureSet};

/// Which downgrades are authorised.
///
/// The default is [`Self::strict`]: refuse rather than change what a peer
/// said. A downgrade is lossy by definition (structured output becomes text,
/// audio becomes a description of itself), and the decision to lose something
/// belongs to whoever runs the bridge, not to the bridge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DegradePolicy {
    allowed: FeatureSet,
}

impl DegradePolicy {
    /// Authorises no downgrade at all.
    #[must_use]
    pub const fn strict() -> Self {
        Self {
            allowed: FeatureSet::empty(),
        }
    }

    /// Authorises every downgrade this build knows how to make.
    ///
    /// Some things still cannot be downgraded under any policy: a result that
    /// asks for more input has no form a legacy client could act on.
    #[must_use]
    pub fn permissive() -> Self {
        Self {
            allowed: FeatureSet::union_of(Feature::ALL),
        }
    }

    /// This policy, also authorising the downgrade of `feature`.
    #[must_use]
    pub const fn allowing(self, feature: Feature) -> Self {
        Self {
            allowed: self.allowed.with(feature),
        }
    }

    /// This policy, refusing the downgrade of `feature`.
    #[must_use]
    pub const fn refusing(self, feature: Feature) -> Self {
        Self {
            allowed: self.allowed.without(feature),
        }
    }

    /// Whether losing `feature` is authorised.
    #[must_use]
    pub const fn permits(self, feature: Feature) -> bool {
        self.allowed.contains(feature)
    }
}
