//! The request path above the wire: the 2026-07-28 result cache, the
//! multi round-trip input rounds (`input`), and the retries a revision asks
//! for (a legacy HTTP session the server ended, a header mismatch after a
//! tool changed).

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::connection::{Client, RequestOptions, lock};
use super::error::ClientError;
use super::input;
use super::link::LinkError;
use crate::domain::Era;
use crate::domain::jsonrpc::ErrorCode;
use crate::wire::codec::CACHEABLE_METHODS;

impl Client {
    /// Sends a request and waits for its answer, with the era's metadata,
    /// the cache, progress and the timeout applied, and multi round-trip
    /// input rounds driven to the end.
    ///
    /// # Errors
    ///
    /// [`ClientError`] for an error answer, a transport failure, a timeout or
    /// too many input rounds.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        options: &RequestOptions,
    ) -> Result<Value, ClientError> {
        let partition = self.inner.options.cache_partition.clone();
        let cacheable = self.inner.options.cache
            && !options.fresh
            && CACHEABLE_METHODS.contains(&method)
            && self.version().is_some_and(|v| v.era() == Era::Modern);
        if cacheable {
            if let Some(hit) = lock(&self.inner.cache).get(method, params.as_ref(), &partition) {
                return Ok(hit);
            }
        }
        // Read before sending: a change announced while the answer was on
        // its way makes the answer unfit to keep.
        let epoch = self.inner.epoch.load(Ordering::SeqCst);
        let session = self.inner.session_generation.load(Ordering::SeqCst);
        let (result, rounds) = match input::drive(self, method, params.clone(), options).await {
            // A legacy HTTP session the server ended (idle, restarted) is
            // replaced by a new handshake at the same revision, once.
            Err(ClientError::Link(LinkError::SessionExpired)) => {
                self.reinitialize(session).await?;
                input::drive(self, method, params.clone(), options).await?
            }
            // The server's tool annotations changed since they were listed:
            // list again and retry once, as the revision recommends.
            Err(ClientError::Server(error))
                if method == "tools/call" && error.code == ErrorCode::HEADER_MISMATCH =>
            {
                tracing::debug!(message = %error.message, "header mismatch; listing tools again");
                // Boxed: listing is itself a request.
                Box::pin(self.refresh_tools()).await?;
                input::drive(self, method, params.clone(), options).await?
            }
            other => other?,
        };
        // A result that took input rounds answered one exchange; it is not
        // an answer to the bare request and is never kept.
        if cacheable && rounds == 0 && self.inner.epoch.load(Ordering::SeqCst) == epoch {
            lock(&self.inner.cache).put(method, params.as_ref(), &partition, &result);
        }
        Ok(result)
    }

    /// Runs the handshake again after the server ended the session that
    /// `seen` counted, unless a concurrent request already did: many requests
    /// in flight meet the same expiry, and one new session must serve them
    /// all.
    async fn reinitialize(&self, seen: u64) -> Result<(), ClientError> {
        let _one_at_a_time = self.inner.reinit.lock().await;
        if self.inner.session_generation.load(Ordering::SeqCst) != seen {
            return Ok(());
        }
        let version = self.version().ok_or(LinkError::SessionExpired)?;
        tracing::info!(%version, "the server ended the session; initializing again");
        super::era::initialize(self, version).await?;
        self.inner.session_generation.fetch_add(1, Ordering::SeqCst);
        // A new session may be a new server (one restarted, upgraded): what
        // was listed before may have changed, and a server says nothing of
        // changes made while nobody was connected.
        super::connection::lists_may_have_changed(&self.inner);
        Ok(())
    }
}
