//! Secondary (driven) adapters: what the application calls out to.

pub mod codec;
