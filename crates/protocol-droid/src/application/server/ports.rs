//! The ports through which a server reaches its client: [`DynExchange`] for
//! a round trip (a server-initiated request), [`DynFrameSink`] for a one-way
//! message, and the do-nothing implementations a connection without a back
//! channel uses.

use core::future::Future;
use core::pin::Pin;

use serde_json::Value;

use crate::domain::feature::Feature;
use crate::domain::jsonrpc::{ErrorObject, Message};

/// A boxed future that can cross threads, for object-safe async ports.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a server-initiated round trip did not produce an answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The connection has no way to send a request to the client (the
    /// 2026-07-28 era, or a transport without a back channel).
    #[error("this connection cannot carry server-initiated requests")]
    Unsupported,
    /// The negotiated profile does not allow the request; refused before
    /// anything was sent.
    #[error("{0:?} was not negotiated on this connection")]
    NotNegotiated(Feature),
    /// The client answered with an error.
    #[error("the client refused: {} {}", .0.code, .0.message)]
    Peer(ErrorObject),
    /// The connection closed before the answer arrived.
    #[error("the connection closed before the client answered")]
    Closed,
    /// No answer within the time allowed.
    #[error("the client did not answer in time")]
    TimedOut,
}

/// Sends a server-initiated request to the client and waits for its answer.
///
/// The static-dispatch form a transport implements; [`DynExchange`] is the
/// object-safe form a [`PeerSession`](super::PeerSession) holds, and every `CallbackExchange` is
/// one.
pub trait CallbackExchange: Send + Sync {
    /// Sends `method` with `params` and resolves to the client's result.
    fn exchange(
        &self,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value, ExchangeError>> + Send;

    /// Sends `method` with `params` on behalf of the 2025-11-25 task `task`
    /// (a request the task's handler makes, after the call that started it
    /// was answered), and resolves to the client's result.
    ///
    /// A transport with one stream sends it as any other, which is what
    /// this default does; one with several sends it where the client
    /// listens for that task (see docs/tasks.md). An exchange that wraps
    /// another must pass this on, or the routing is lost.
    fn exchange_for_task(
        &self,
        task: &str,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<Value, ExchangeError>> + Send {
        let _ = task;
        self.exchange(method, params)
    }
}

/// The object-safe form of [`CallbackExchange`].
pub trait DynExchange: Send + Sync {
    /// Sends `method` with `params` and resolves to the client's result.
    fn exchange_dyn(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<'_, Result<Value, ExchangeError>>;

    /// As [`CallbackExchange::exchange_for_task`].
    fn exchange_for_task_dyn(
        &self,
        task: &str,
        method: &str,
        params: Value,
    ) -> BoxFuture<'_, Result<Value, ExchangeError>> {
        let _ = task;
        self.exchange_dyn(method, params)
    }
}

impl<T: CallbackExchange> DynExchange for T {
    fn exchange_dyn(
        &self,
        method: &str,
        params: Value,
    ) -> BoxFuture<'_, Result<Value, ExchangeError>> {
        let method = method.to_owned();
        Box::pin(async move { self.exchange(&method, params).await })
    }

    fn exchange_for_task_dyn(
        &self,
        task: &str,
        method: &str,
        params: Value,
    ) -> BoxFuture<'_, Result<Value, ExchangeError>> {
        let (task, method) = (task.to_owned(), method.to_owned());
        Box::pin(async move { self.exchange_for_task(&task, &method, params).await })
    }
}

/// An exchange for connections that have no back channel: every request is
/// refused as [`ExchangeError::Unsupported`].
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExchange;

impl CallbackExchange for NoExchange {
    async fn exchange(&self, _method: &str, _params: Value) -> Result<Value, ExchangeError> {
        Err(ExchangeError::Unsupported)
    }
}

/// Where a session's one-way messages (notifications) go.
///
/// Synchronous and non-blocking on purpose: a handler emitting a log record
/// must not stall on a slow client. An implementation with a bounded queue
/// answers `false` when the message could not be queued, and the caller
/// decides whether that matters.
pub trait DynFrameSink: Send + Sync {
    /// Queues `message` for the client; `false` when it could not be.
    fn send(&self, message: Message) -> bool;

    /// Asks the transport to close the current request's response stream
    /// early; the client resumes it later (SSE polling, 2025-11-25) and
    /// receives the rest, the response included. Transports without
    /// resumable streams ignore it, which is always correct: the answer
    /// then simply arrives on the open stream.
    fn release(&self) {}
}

/// A sink that drops everything, for connections with nowhere to send.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl DynFrameSink for NullSink {
    fn send(&self, _message: Message) -> bool {
        false
    }
}
