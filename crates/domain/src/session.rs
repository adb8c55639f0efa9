//! Session identity.

use core::fmt;

/// Which session a piece of state belongs to.
///
/// An opaque number allocated by whatever store owns the sessions. Everything
/// keyed per session (the idempotency store, the in-flight map, tool grants)
/// is keyed on this, so two sessions never share a key space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(u64);

impl SessionId {
    /// The session numbered `id`.
    #[must_use]
    pub const fn new(id: u64) -> Self {
        Self(id)
    }

    /// The number this session was allocated.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "session-{}", self.0)
    }
}
