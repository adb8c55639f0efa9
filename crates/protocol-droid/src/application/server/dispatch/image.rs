//! A legacy session as another instance serves it: what its handshake
//! settled ([`SessionImage`]) and what its client changed since
//! ([`Lasting`]), taken as changes ([`ImageChange`]) so that what one
//! instance changed is never undone by what another changed at the same
//! time.

use std::collections::BTreeSet;

use super::request::Hello;
use super::{Connection, LogGate, MAX_SUBSCRIBED_BYTES, MAX_SUBSCRIPTIONS};
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::ErrorObject;
use crate::domain::{Era, LoggingLevel, ProtocolVersion, Refusal};

/// What a legacy session settled and has changed since: everything another
/// instance needs to serve it (see [`Connection::image`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionImage {
    /// The revision the handshake settled.
    #[serde(with = "revision_text")]
    pub version: ProtocolVersion,
    /// The `initialize` params the client sent.
    pub hello: JsonObject,
    /// The threshold `logging/setLevel` set, if it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<LoggingLevel>,
    /// The resources the session is subscribed to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscribed: Vec<String>,
}

/// What a legacy session's client can change after the handshake
/// (`logging/setLevel`, `resources/(un)subscribe`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lasting {
    /// The threshold `logging/setLevel` set, if it was sent.
    pub level: Option<LoggingLevel>,
    /// The resources the session is subscribed to.
    pub subscribed: BTreeSet<String>,
}

impl Lasting {
    /// What goes from `self` to `next`. A level is set, never taken back:
    /// no request unsets one, so `next` having none changes nothing.
    #[must_use]
    pub fn change_to(&self, next: &Self) -> ImageChange {
        ImageChange {
            level: next.level.filter(|level| self.level != Some(*level)),
            subscribed: next
                .subscribed
                .difference(&self.subscribed)
                .cloned()
                .collect(),
            unsubscribed: self
                .subscribed
                .difference(&next.subscribed)
                .cloned()
                .collect(),
        }
    }
}

/// A change to what a legacy session's client can change: made by one
/// request (or batch) on one instance, and taken by the others as a
/// change, not as a whole, so two made at once on two instances both hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageChange {
    /// The log level set, if one was.
    pub level: Option<LoggingLevel>,
    /// Resources subscribed to.
    pub subscribed: Vec<String>,
    /// Resources no longer subscribed to.
    pub unsubscribed: Vec<String>,
}

impl ImageChange {
    /// Whether it changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.level.is_none() && self.subscribed.is_empty() && self.unsubscribed.is_empty()
    }
}

impl Connection {
    /// What this session settled and has changed since, for another
    /// instance to serve it from; `None` before the handshake.
    #[must_use]
    pub fn image(&self) -> Option<SessionImage> {
        let state = self.state.lock().ok()?;
        let legacy = state.legacy.as_ref()?;
        Some(SessionImage {
            version: legacy.peer.negotiated(),
            hello: (*legacy.hello).clone(),
            level: legacy.peer.log_gate().threshold(),
            subscribed: state.subscribed.iter().cloned().collect(),
        })
    }

    /// What this session's client changed since the handshake; `None`
    /// before it. Cheaper than [`Self::image`], which copies the
    /// `initialize` params.
    #[must_use]
    pub fn lasting(&self) -> Option<Lasting> {
        let state = self.state.lock().ok()?;
        let legacy = state.legacy.as_ref()?;
        Some(Lasting {
            level: legacy.peer.log_gate().threshold(),
            subscribed: state.subscribed.clone(),
        })
    }

    /// Serves the session `image` describes, as the instance that settled
    /// it does: the same revision, client and capabilities, log level and
    /// subscriptions. Applied to a session already settled, only the log
    /// level and subscriptions are taken (what can change later), as
    /// [`Self::apply`] takes them.
    ///
    /// # Errors
    ///
    /// `-32602` when the image's `initialize` params cannot be read, or it
    /// names a revision this server does not offer.
    pub fn restore(&self, image: &SessionImage) -> Result<(), ErrorObject> {
        if self.negotiated().is_none() {
            if !self.server.offered().contains(&image.version) || image.version.era() != Era::Legacy
            {
                return Err(Refusal::invalid_params(format!(
                    "this server does not offer {}",
                    image.version
                ))
                .into());
            }
            let hello = Hello::decode(&image.hello)?;
            let _declared = self.settle(image.version, &hello, &image.hello);
        }
        let now = self.lasting().unwrap_or_default();
        let wanted = Lasting {
            level: image.level,
            subscribed: image.subscribed.iter().cloned().collect(),
        };
        self.apply(&now.change_to(&wanted));
        Ok(())
    }

    /// Takes `change`, made to this session elsewhere, leaving what this
    /// instance changed meanwhile as it is. A forwarder hears of each
    /// subscription that changes here, as it does of a client's own.
    pub fn apply(&self, change: &ImageChange) {
        let mut changed = Vec::new();
        let mut declared = None;
        if let Ok(mut state) = self.state.lock() {
            let Some(legacy) = state.legacy.as_mut() else {
                return;
            };
            if let Some(level) = change.level {
                legacy.peer = legacy.peer.clone().with_log_gate(LogGate::at(level));
            }
            declared = Some(std::sync::Arc::clone(&legacy.client_capabilities));
            for uri in &change.unsubscribed {
                if state.subscribed.remove(uri) {
                    changed.push((uri, false));
                }
            }
            let mut held: usize = state.subscribed.iter().map(String::len).sum();
            for uri in &change.subscribed {
                if state.subscribed.contains(uri) {
                    continue;
                }
                if state.subscribed.len() >= MAX_SUBSCRIPTIONS
                    || held.saturating_add(uri.len()) > MAX_SUBSCRIBED_BYTES
                {
                    break;
                }
                if state.subscribed.insert(uri.clone()) {
                    held = held.saturating_add(uri.len());
                    changed.push((uri, true));
                }
            }
        }
        if let (Some(forward), Some(declared)) = (self.server.forwarder(), declared) {
            for (uri, subscribed) in changed {
                forward.session_subscription(self.session, &declared, uri, subscribed);
            }
        }
    }
}

/// A revision as the text the wire names it by.
mod revision_text {
    use serde::{Deserialize as _, Deserializer, Serializer};

    use crate::domain::ProtocolVersion;

    pub(super) fn serialize<S: Serializer>(
        version: &ProtocolVersion,
        out: S,
    ) -> Result<S::Ok, S::Error> {
        out.serialize_str(version.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<ProtocolVersion, D::Error> {
        let text = String::deserialize(input)?;
        ProtocolVersion::from_wire(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown revision {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lasting(level: Option<LoggingLevel>, subscribed: &[&str]) -> Lasting {
        Lasting {
            level,
            subscribed: subscribed.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_change_names_what_moved_and_nothing_else() {
        let before = lasting(Some(LoggingLevel::Info), &["a", "b"]);
        let after = lasting(Some(LoggingLevel::Debug), &["b", "c"]);
        assert_eq!(
            before.change_to(&after),
            ImageChange {
                level: Some(LoggingLevel::Debug),
                subscribed: vec!["c".to_owned()],
                unsubscribed: vec!["a".to_owned()],
            }
        );
        assert!(after.change_to(&after).is_empty());
        // No request unsets a level: its absence is no change.
        assert!(after.change_to(&lasting(None, &["b", "c"])).is_empty());
    }
}
