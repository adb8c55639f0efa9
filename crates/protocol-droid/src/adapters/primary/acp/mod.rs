//! The Agent Client Protocol (ACP v1), agent side, over stdio.
//!
//! ACP is a separate protocol from MCP: an editor (the client) spawns an
//! agent and speaks newline-delimited JSON-RPC 2.0 to it on stdin/stdout.
//! This module is the agent's transport and nothing more: it frames, parses
//! and routes messages, and leaves every decision (which methods to serve,
//! what to advertise, how a turn runs) to the application.
//!
//! - [`AcpAgentPeer`] owns a reader task and a writer task; the application
//!   loops on [`AcpAgentPeer::recv_request`] and answers through an
//!   [`AcpSender`], which clones for spawned handlers.
//! - The reader answers what needs no application: lines that are not JSON
//!   (-32700), are not messages or are too long (-32600). It routes the
//!   client's answers to the agent's own requests to their waiters, and
//!   delivers every request and notification, known or not, as an
//!   [`Inbound`] with params read for its method.
//! - Notifications are never answered, by the peer or (it is documented
//!   everywhere) by the application.
//!
//! ```no_run
//! use protocol_droid::adapters::primary::acp::{AcpAgentPeer, Inbound, RequestParams};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), protocol_droid::adapters::primary::acp::AcpPeerError> {
//! let mut peer = AcpAgentPeer::from_stdio(tokio::io::stdin(), tokio::io::stdout());
//! while let Some(message) = peer.recv_request().await {
//!     let Inbound::Request(request) = message else { continue };
//!     match &request.params {
//!         Ok(RequestParams::Initialize(_)) => {
//!             let result = json!({ "protocolVersion": 1, "agentCapabilities": {}, "authMethods": [] });
//!             peer.send_reply(request.id.clone(), result).await?;
//!         }
//!         Ok(_) => peer.reply_method_not_found(&request).await?,
//!         Err(invalid) => peer.reply_invalid_params(request.id.clone(), invalid).await?,
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod error;
mod inbound;
mod outbound;
mod peer;
mod wire;

pub use error::{AcpPeerError, ClientError};
pub use inbound::{
    AuthenticateParams, CancelRequestParams, ClientCapabilities, ConfigValue, EmptyParams,
    Implementation, Inbound, InboundNotification, InboundRequest, InitializeParams, InvalidParams,
    ListSessionsParams, LoadSessionParams, McpServer, McpServerHttp, McpServerStdio, NameValue,
    NewSessionParams, NotificationParams, PromptParams, RequestParams, ResumeSessionParams,
    SessionParams, SetConfigOptionParams, SetModeParams,
};
pub use outbound::{
    CreateTerminalResult, PermissionOutcome, ReadTextFileResult, TerminalExitStatus,
    TerminalOutputResult,
};
pub use peer::{AcpAgentPeer, AcpPeerOptions, AcpSender, DEFAULT_MAX_LINE};

/// Method names, by who handles them.
pub mod methods {
    pub use super::inbound::methods as agent;
    pub use super::outbound::methods as client;
}
