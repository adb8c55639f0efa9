//! Accepting connections: TLS, the header deadline, and caps on how many
//! connections there are, in all and from one address.
//!
//! axum's own `serve` leaves hyper's header-read timeout off and accepts
//! without a limit, so a client that opens thousands of connections and
//! sends half a request on each would pin a descriptor for each. Here every
//! connection holds a permit from a global cap and a slot of its address's
//! share, a TLS handshake and a request head must each arrive within a
//! deadline, a write that makes no progress fails after the stall bound, and
//! a shutdown lets requests in flight finish.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower_service::Service as _;

use super::HttpOptions;
use super::tls::ServerTls;
use crate::application::server::rate::network_of;

/// What the accept loop needs from [`HttpOptions`].
#[derive(Clone, Debug)]
pub(super) struct Admission {
    total: Arc<Semaphore>,
    per_address: Arc<PerAddress>,
    header_timeout: Duration,
    handshake_timeout: Duration,
    write_timeout: Duration,
    tls: Option<ServerTls>,
}

impl Admission {
    pub(super) fn new(options: &HttpOptions) -> Self {
        Self {
            total: Arc::new(Semaphore::new(options.max_connections)),
            per_address: Arc::new(PerAddress {
                limit: options.max_connections_per_address,
                open: Mutex::new(HashMap::new()),
            }),
            header_timeout: options.header_timeout,
            handshake_timeout: options.header_timeout,
            write_timeout: options.stall_timeout,
            tls: options.tls.clone(),
        }
    }

    /// A slot for a connection from `peer`, or `None` when either cap is
    /// reached: the connection is then closed at once, before anything of
    /// it is read.
    fn admit(&self, peer: IpAddr) -> Option<Slot> {
        let permit = Arc::clone(&self.total).try_acquire_owned().ok()?;
        let address = self.per_address.take(network_of(peer))?;
        Some(Slot {
            _permit: permit,
            _address: address,
        })
    }
}

/// How many connections each address has open.
#[derive(Debug)]
struct PerAddress {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    fn take(self: &Arc<Self>, peer: IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(peer).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: Arc::clone(self),
            peer,
        })
    }
}

/// One connection's share of its address's cap, given back on drop.
#[derive(Debug)]
struct AddressSlot {
    table: Arc<PerAddress>,
    peer: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self
            .table
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            // No entry outlives its last connection, so the table is
            // bounded by the connections open, not by addresses ever seen.
            if *count == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// What a connection holds while it is open.
#[derive(Debug)]
struct Slot {
    _permit: OwnedSemaphorePermit,
    _address: AddressSlot,
}

/// Accepts on `listener` until `stopping` resolves, serving each
/// connection with `router`; then waits for the connections' requests in
/// flight to finish (each connection closes after its current response).
pub(super) async fn run(
    listener: TcpListener,
    router: Router,
    admission: Admission,
    stopping: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    tokio::pin!(stopping);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors or a connection reset before it was
                // taken: the listener itself is fine, so keep accepting
                // after a pause rather than spinning or giving up.
                Err(error) => {
                    tracing::debug!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stopping => break,
        };
        let Some(slot) = admission.admit(peer.ip()) else {
            tracing::debug!(%peer, "connection refused: at the connection limit");
            drop(stream);
            continue;
        };
        let watcher = graceful.watcher();
        let router = router.clone();
        let admission = admission.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, router, &admission, watcher).await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    admission: &Admission,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let _ = stream.set_nodelay(true);
    // A client that stops reading leaves its response, and every buffer
    // behind it, unwritten: a write that makes no progress for the stall
    // bound fails, and hyper closes the connection, freeing all of it.
    let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
    stream.set_write_timeout(Some(admission.write_timeout));
    let stream = Box::pin(stream);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        router.clone().call(request)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(admission.header_timeout);
    let served = match &admission.tls {
        None => {
            watcher
                .watch(http.serve_connection(TokioIo::new(stream), service))
                .await
        }
        Some(tls) => {
            let handshake =
                tokio::time::timeout(admission.handshake_timeout, tls.acceptor().accept(stream))
                    .await;
            let stream = match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake refused");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake not finished in time");
                    return;
                }
            };
            watcher
                .watch(http.serve_connection(TokioIo::new(stream), service))
                .await
        }
    };
    if let Err(error) = served {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
