//! Connecting a client and a server that speak different revisions.
//!
//! The bridge is a full server toward its client and a full client toward its
//! server, and translates only where the two revisions disagree. The first
//! such place is a tool result: [`Translator`] decides, per reply, whether the
//! client can read what the server said, and rewrites it only when a
//! [`DegradePolicy`](crate::domain::DegradePolicy) authorises the loss.

mod content;

pub use content::{ToolResultCodec, Translated, Translator};
