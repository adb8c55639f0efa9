//! Settling a revision with a server, in either era.
//!
//! A client that may speak 2026-07-28 probes first with `server/discover`. A
//! discover result means a modern server. A recognised modern error
//! (`-32022` with the versions the server supports) means a modern server
//! too: the client picks a version both speak and does not fall back. Any
//! other answer, or none within the probe timeout, means a legacy server, and
//! the client runs the `initialize` handshake. The fallback never keys on one
//! particular error code, since legacy servers answer an unknown pre-handshake
//! request in many ways.

use serde_json::{Value, json};

use std::sync::Arc;

use super::connection::{Client, ClientOptions, RequestOptions, ServerState};
use super::error::ClientError;
use super::link::{InboundRx, Link};
use crate::domain::jsonrpc::ErrorCode;
use crate::domain::{Era, ProtocolVersion};
use crate::wire::{DiscoverResult, InitializeResult, ResultMeta};

impl Client {
    /// Connects over `link` and settles a revision with the server, as
    /// the `era` module describes.
    ///
    /// # Errors
    ///
    /// [`ClientError::Negotiation`] when no revision is shared, or whatever
    /// the handshake's requests failed with.
    pub async fn connect(
        link: Arc<dyn Link>,
        inbound: InboundRx,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let client = Self::start(link, inbound, options);
        match negotiate(&client).await {
            Ok(()) => Ok(client),
            Err(error) => {
                client.close().await;
                Err(error)
            }
        }
    }
}

/// Settles a revision for `client`.
pub(super) async fn negotiate(client: &Client) -> Result<(), ClientError> {
    let allowed = allowed(client);
    let modern = allowed.iter().copied().find(|v| v.era() == Era::Modern);
    let legacy = allowed.iter().copied().find(|v| v.era() == Era::Legacy);
    let Some(modern) = modern else {
        let Some(legacy) = legacy else {
            return Err(ClientError::Negotiation(
                "the client allows no revision".to_owned(),
            ));
        };
        return initialize(client, legacy).await;
    };
    match discover(client, modern).await {
        Ok(state) => {
            client.set_state(state);
            Ok(())
        }
        Err(Probe::Modern(supported)) => {
            let common = allowed
                .iter()
                .copied()
                .find(|v| supported.iter().any(|s| s == v.as_str()));
            match common {
                Some(v) if v.era() == Era::Modern => match discover(client, v).await {
                    Ok(state) => {
                        client.set_state(state);
                        Ok(())
                    }
                    Err(probe) => Err(probe.into_error()),
                },
                Some(v) => initialize(client, v).await,
                None => Err(ClientError::Negotiation(format!(
                    "the server speaks {}",
                    listed(&supported)
                ))),
            }
        }
        Err(Probe::Legacy(why)) => match legacy {
            Some(legacy) => {
                tracing::debug!(%why, "not a 2026-07-28 server; initializing");
                initialize(client, legacy).await
            }
            None => Err(ClientError::Negotiation(format!(
                "the server does not speak {}: {why}",
                modern.as_str()
            ))),
        },
        Err(Probe::Failed(error)) => Err(error),
    }
}

/// The revisions the client allows, newest first.
fn allowed(client: &Client) -> Vec<ProtocolVersion> {
    let mut allowed = client.options().revisions.clone();
    allowed.sort_unstable();
    allowed.dedup();
    allowed.reverse();
    allowed
}

/// The revisions a server said it speaks, as an error shows them: the
/// first few, each cut short, and how many more. The list is the server's
/// to make as long as it likes.
fn listed(supported: &[String]) -> String {
    const SHOWN: usize = 8;
    const LONGEST: usize = 32;
    let mut shown: Vec<String> = supported
        .iter()
        .take(SHOWN)
        .map(|v| {
            let cut: String = v.chars().take(LONGEST).collect();
            let cut = cut.escape_debug().to_string();
            if v.chars().count() > LONGEST {
                format!("{cut}…")
            } else {
                cut
            }
        })
        .collect();
    if supported.len() > SHOWN {
        shown.push(format!("and {} more", supported.len() - SHOWN));
    }
    if shown.is_empty() {
        return "no revision it named".to_owned();
    }
    shown.join(", ")
}

/// What the probe found out.
enum Probe {
    /// A modern server that does not speak the version asked; what it speaks.
    Modern(Vec<String>),
    /// Not a modern server, and why the client thinks so.
    Legacy(String),
    /// The probe failed for a reason that says nothing about the era.
    Failed(ClientError),
}

impl Probe {
    fn into_error(self) -> ClientError {
        match self {
            Self::Modern(supported) => {
                ClientError::Negotiation(format!("the server speaks {}", listed(&supported)))
            }
            Self::Legacy(why) => ClientError::Negotiation(why),
            Self::Failed(error) => error,
        }
    }
}

async fn discover(client: &Client, version: ProtocolVersion) -> Result<ServerState, Probe> {
    client
        .inner
        .link
        .set_protocol_version(Some(version.as_str()));
    let options = RequestOptions {
        timeout: Some(client.options().probe_timeout),
        ..RequestOptions::default()
    };
    let answer = client
        .request_once("server/discover", Some(json!({})), &options)
        .await;
    match answer {
        Ok(result) => {
            let discovered: DiscoverResult = serde_json::from_value(result.clone())
                .map_err(|e| Probe::Legacy(format!("not a discover result: {e}")))?;
            if !discovered
                .supported_versions
                .iter()
                .any(|v| v == version.as_str())
            {
                return Err(Probe::Modern(discovered.supported_versions));
            }
            let server_info = result
                .get("_meta")
                .cloned()
                .and_then(|meta| serde_json::from_value::<ResultMeta>(meta).ok())
                .and_then(|meta| meta.server_info)
                .or_else(|| {
                    result
                        .get("serverInfo")
                        .cloned()
                        .and_then(|info| serde_json::from_value(info).ok())
                });
            Ok(ServerState {
                version,
                server_info,
                capabilities: discovered.capabilities,
                instructions: discovered.instructions,
            })
        }
        Err(ClientError::Server(error))
            if error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION =>
        {
            let supported = error
                .data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Err(Probe::Modern(supported))
        }
        // The other modern errors say the server is modern and the request
        // was wrong: surfaced, never a reason to try the legacy handshake.
        Err(error @ ClientError::Server(_))
            if error.server_error().is_some_and(|e| {
                e.code == ErrorCode::HEADER_MISMATCH
                    || e.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            }) =>
        {
            Err(Probe::Failed(error))
        }
        Err(ClientError::Link(super::link::LinkError::Unauthorized(why))) => Err(Probe::Failed(
            super::link::LinkError::Unauthorized(why).into(),
        )),
        Err(error @ ClientError::Link(super::link::LinkError::Closed)) => Err(Probe::Failed(error)),
        Err(other) => Err(Probe::Legacy(other.to_string())),
    }
}

/// Runs the `initialize` handshake at `version`.
pub(super) async fn initialize(
    client: &Client,
    version: ProtocolVersion,
) -> Result<(), ClientError> {
    // The probe's version must not ride along: a dual-era HTTP server routes
    // a request by that header, and `initialize` is not a 2026-07-28 method.
    client.inner.link.set_protocol_version(None);
    let params = json!({
        "protocolVersion": version.as_str(),
        "capabilities": client.capabilities(),
        "clientInfo": client.options().client_info,
    });
    let result = client
        .request_once("initialize", Some(params), &RequestOptions::default())
        .await?;
    let result: InitializeResult =
        serde_json::from_value(result).map_err(|e| ClientError::InvalidResult {
            method: "initialize".to_owned(),
            detail: e.to_string(),
        })?;
    let chosen = ProtocolVersion::from_wire(&result.protocol_version)
        .filter(|v| v.era() == Era::Legacy && client.options().revisions.contains(v))
        .ok_or_else(|| {
            ClientError::Negotiation(format!(
                "the server chose {}, which the client does not speak",
                result.protocol_version
            ))
        })?;
    client.set_state(ServerState {
        version: chosen,
        server_info: Some(result.server_info),
        capabilities: result.capabilities,
        instructions: result.instructions,
    });
    client.notify("notifications/initialized", None).await?;
    client.inner.link.open_listen_channel().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::listed;

    #[test]
    fn a_servers_list_of_revisions_is_shown_short() {
        assert_eq!(listed(&["2025-11-25".to_owned()]), "2025-11-25");
        assert_eq!(listed(&[]), "no revision it named");
        let many: Vec<String> = (0..100_000).map(|n| format!("junk-{n}")).collect();
        let shown = listed(&many);
        assert!(shown.ends_with("and 99992 more"), "{shown}");
        assert!(shown.len() < 200, "{shown}");
        let long = listed(&[format!("{}\u{1b}[2J", "x".repeat(10_000))]);
        assert!(long.len() < 64 && long.ends_with('…'), "{long}");
        assert!(!listed(&["a\u{1b}[2Jb".to_owned()]).contains('\u{1b}'));
    }
}
