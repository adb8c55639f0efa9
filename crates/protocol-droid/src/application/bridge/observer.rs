//! What a bridge tells whoever serves its upstream: the upstream's own
//! announcements, and the end of the connection the bridge keeps.
//!
//! A bridge's own server hears them as they are ([`Server`] is an
//! [`Observer`]); a gateway, which serves many upstreams under one name
//! each, renames what it hears before passing it on.

use serde_json::Value;

use crate::application::server::Server;
use crate::domain::{LoggingLevel, SessionId};

/// Hears what an upstream announces, on any of the bridge's connections.
///
/// Called from inside a connection's reader: an implementation must not
/// block, and spawns whatever work the news calls for.
pub trait Observer: Send + Sync {
    /// The upstream's tool list changed.
    fn tools_changed(&self) {}

    /// The upstream's prompt list changed.
    fn prompts_changed(&self) {}

    /// The upstream's resource list changed.
    fn resources_changed(&self) {}

    /// The resource at `uri`, which some session watches, changed: told on
    /// the connection of the legacy session `session` (that session's
    /// subscription, its alone), or on one every watcher shares (`None`).
    fn resource_updated(&self, _session: Option<SessionId>, _uri: &str) {}

    /// The upstream logged a record (of `logger`, when it names one),
    /// outside any request, on the connection that serves the legacy
    /// session `session` alone: the record is that session's.
    fn log(&self, _session: SessionId, _level: LoggingLevel, _logger: Option<&str>, _data: &Value) {
    }

    /// The connection the bridge opened first, and keeps for as long as it
    /// lives, ended: the upstream went away (a child that exited, a server
    /// that closed the session). The bridge still opens new connections
    /// for requests; whoever watches the upstream's health may rather build
    /// a new bridge.
    fn kept_closed(&self, _reason: &str) {}
}

impl Observer for Server {
    fn tools_changed(&self) {
        Self::tools_changed(self);
    }

    fn prompts_changed(&self) {
        Self::prompts_changed(self);
    }

    fn resources_changed(&self) {
        Self::resources_changed(self);
    }

    fn resource_updated(&self, session: Option<SessionId>, uri: &str) {
        match session {
            Some(session) => self.resource_updated_for(session, uri),
            None => Self::resource_updated(self, uri.to_owned()),
        }
    }

    fn log(&self, session: SessionId, level: LoggingLevel, logger: Option<&str>, data: &Value) {
        self.log_to(session, level, logger.map(str::to_owned), data.clone());
    }
}
