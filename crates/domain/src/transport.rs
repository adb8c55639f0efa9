//! The transports MCP runs over.

/// How a connection's frames travel.
///
/// Part of a negotiation because several features exist on one transport only:
/// the `MCP-Protocol-Version` header, sessions, resumability and the 2026
/// routing headers are HTTP matters, and batching was never carried by the
/// 2024-11-05 SSE transport's revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// Newline-delimited JSON-RPC over a child process's stdin and stdout.
    Stdio,
    /// One HTTP endpoint taking POSTs (and, before 2026-07-28, GET and DELETE).
    StreamableHttp,
    /// The 2024-11-05 transport: a GET event stream plus a POST endpoint.
    HttpSse,
}

impl TransportKind {
    /// `"stdio"`, `"streamable_http"` or `"http_sse"`: how logs, spans and
    /// metrics name it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::StreamableHttp => "streamable_http",
            Self::HttpSse => "http_sse",
        }
    }

    /// Whether frames travel as HTTP requests.
    #[must_use]
    pub const fn is_http(self) -> bool {
        matches!(self, Self::StreamableHttp | Self::HttpSse)
    }
}
