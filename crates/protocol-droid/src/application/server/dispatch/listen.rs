//! `subscriptions/listen`: the one long-lived 2026-07-28 request.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::application::server::PeerSession;
use crate::application::server::host::Change;
use crate::domain::ir::JsonObject;
use crate::domain::jsonrpc::{ErrorObject, Message, Notification, RequestId};

use super::{Connection, MAX_SUBSCRIPTIONS, SUBSCRIPTION_ID_META};

impl Connection {
    /// `subscriptions/listen`: acknowledge, then forward the opted-in changes
    /// tagged with this request's id, until the caller stops or the server
    /// goes away.
    pub(super) async fn listen(
        &self,
        id: &RequestId,
        params: &JsonObject,
        peer: &PeerSession,
    ) -> Result<Value, ErrorObject> {
        let filter = params
            .get("notifications")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let wants = |key: &str| filter.get(key).and_then(Value::as_bool).unwrap_or(false);
        // Only what the server announces changes of: a server whose list
        // never changes (a bridge's upstream, say) does not promise to.
        let caps = self.server.capabilities(peer.negotiated());
        let announces = |capability: &str| {
            caps.get(capability)
                .and_then(|c| c.get("listChanged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut honoured = JsonObject::new();
        for (key, capability) in [
            ("toolsListChanged", "tools"),
            ("promptsListChanged", "prompts"),
            ("resourcesListChanged", "resources"),
        ] {
            if wants(key) && announces(capability) {
                honoured.insert(key.to_owned(), json!(true));
            }
        }
        let lists: Vec<String> = honoured.keys().cloned().collect();
        let wants = |key: &str| lists.iter().any(|k| k == key);
        // Only resources the caller may read can be watched, and only so
        // many: the honoured subset goes back in the acknowledgement.
        let uris: BTreeSet<String> = filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .filter(|uri| self.can_read(uri, peer.auth()))
                    .take(MAX_SUBSCRIPTIONS)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !uris.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), json!(uris));
        }
        // Watching through a forwarder means watching upstream too, for as
        // long as this listen lasts, however it ends.
        let _watching = Watching::start(self, &uris);
        let tag = json!({ SUBSCRIPTION_ID_META: id.to_json() });
        let mut changes = self.server.changes();
        let _sent = peer.sink().send(Message::Notification(Notification {
            method: "notifications/subscriptions/acknowledged".to_owned(),
            params: Some(json!({ "notifications": honoured, "_meta": tag })),
        }));
        loop {
            let change = match changes.recv().await {
                Ok(change) => change,
                // A listener that fell behind has lost notifications; list
                // changes are idempotent, so carry on from the newest.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            let (method, extra) = match &change {
                Change::Tools if wants("toolsListChanged") => {
                    ("notifications/tools/list_changed", None)
                }
                Change::ToolsFor(session)
                    if *session == peer.session() && wants("toolsListChanged") =>
                {
                    ("notifications/tools/list_changed", None)
                }
                Change::Prompts if wants("promptsListChanged") => {
                    ("notifications/prompts/list_changed", None)
                }
                Change::Resources if wants("resourcesListChanged") => {
                    ("notifications/resources/list_changed", None)
                }
                Change::ResourceUpdated(uri) if uris.contains(uri) => {
                    ("notifications/resources/updated", Some(uri.clone()))
                }
                _ => continue,
            };
            let mut params = JsonObject::new();
            if let Some(uri) = extra {
                params.insert("uri".to_owned(), json!(uri));
            }
            params.insert("_meta".to_owned(), tag.clone());
            let _sent = peer.sink().send(Message::Notification(Notification {
                method: method.to_owned(),
                params: Some(Value::Object(params)),
            }));
        }
        Ok(json!({ "resultType": "complete", "_meta": tag }))
    }
}

/// The resources a listen watches through the server's forwarder, dropped
/// (and told to the forwarder) when the listen ends.
struct Watching {
    forward: Option<std::sync::Arc<dyn crate::application::server::Forward>>,
    session: crate::domain::SessionId,
    uris: Vec<String>,
}

impl Watching {
    fn start(connection: &Connection, uris: &BTreeSet<String>) -> Self {
        let forward = connection.server.forwarder().cloned();
        if let Some(forward) = &forward {
            for uri in uris {
                forward.subscription(connection.session(), uri, true);
            }
        }
        Self {
            forward,
            session: connection.session(),
            uris: uris.iter().cloned().collect(),
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(forward) = &self.forward {
            for uri in &self.uris {
                forward.subscription(self.session, uri, false);
            }
        }
    }
}
