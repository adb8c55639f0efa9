//! What a server author needs in one import.
//!
//! ```
//! use protocol_droid::prelude::*;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::builder("hello", "1.0.0").build()?;
//! server.add_tool(ToolSpec::new("hello", "Says hello"), |_call: Call| async {
//!     Ok(ToolResult::text("hello"))
//! });
//! # Ok(())
//! # }
//! ```

pub use schemars::JsonSchema;

pub use crate::adapters::primary::http::{HttpOptions, HttpServer};
pub use crate::adapters::primary::stdio::{StdioOptions, serve_process};
pub use crate::application::server::{
    Call, CallError, Elicited, PromptOutput, PromptSpec, ResourceSpec, Server, ServerBuilder,
    Structured, ToolOutput, ToolSpec,
};
pub use crate::domain::ir::{ContentBlock, ToolResult};
