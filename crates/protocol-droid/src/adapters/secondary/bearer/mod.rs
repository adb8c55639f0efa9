//! Checking bearer tokens for a resource server: signed JWTs against the
//! issuer's key set ([`JwtValidator`] over [`Jwks`]), or by asking the
//! authorization server (RFC 7662, [`IntrospectionValidator`]).
//!
//! Both implement the application's
//! [`TokenValidator`](crate::application::server::TokenValidator) port;
//! the HTTP transport's
//! [`ResourceServer`](crate::adapters::primary::http::ResourceServer) holds
//! one. Every request they make is bounded in time and in size, and neither
//! ever logs or echoes a token.

mod fetch;
mod introspection;
mod jwks;
mod jwt;

pub use introspection::IntrospectionValidator;
pub use jwks::{Jwks, JwksOptions};
pub use jwt::{JwtValidator, MAX_LEEWAY};
