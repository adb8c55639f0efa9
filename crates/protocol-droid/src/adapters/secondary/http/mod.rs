//! HTTP client transports: Streamable HTTP (both eras) and the 2024-11-05
//! HTTP+SSE transport.

mod credentials;
mod event_bytes;
pub mod legacy_sse;
pub mod streamable;

pub use legacy_sse::LegacySse;
pub use streamable::{HttpOptions, InvalidHeader, StreamableHttp};
