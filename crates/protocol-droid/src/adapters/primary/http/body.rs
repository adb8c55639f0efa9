//! Reading a request body whole, within a size, a deadline and a budget.
//!
//! hyper bounds how long a request head may take, but not its body: a
//! client that sends a `Content-Length` of a megabyte and then a byte a
//! minute would hold its handler, and the memory read so far, for as long as
//! it likes. Every body is read here, before any handler sees it, and a body
//! that does not arrive in time is answered with 408. The bytes of bodies
//! are counted too: in all while they are read, and against their client's
//! address from the first byte until the request is answered (its answer's
//! body sent whole, or, for a request answered after its response, as the
//! 2024-11-05 transport's and a legacy session's are, that answer handed
//! on). One address's many
//! slow bodies, or many slow requests with large bodies, take its own
//! share; only bodies on their way take from everyone's.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use http_body_util::BodyExt as _;

use super::respond::error_body;
use crate::application::server::rate::network_of;
use crate::domain::jsonrpc::ErrorCode;

/// The limits the middleware applies.
#[derive(Clone, Debug)]
pub(super) struct BodyLimits {
    pub(super) max_bytes: usize,
    pub(super) timeout: Duration,
    pub(super) budget: Arc<BodyBudget>,
}

/// The bytes of request bodies at once: those being read in all, and those
/// being read or served per client address (an IPv6 one by its /64). A
/// body is charged as its bytes arrive; its share of all is given back once
/// it is read whole, its address's once its request is answered (or
/// refused). Held only per address, a request waiting long (a stream, a
/// slow tool) takes nothing from other addresses.
#[derive(Debug)]
pub(super) struct BodyBudget {
    in_all: usize,
    per_address: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    in_all: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Which share a body's next bytes would pass.
#[derive(Debug, PartialEq, Eq)]
enum Spent {
    Address,
    InAll,
}

impl BodyBudget {
    /// A budget of `in_all` bytes, `per_address` of them for one address.
    pub(super) fn new(in_all: usize, per_address: usize) -> Self {
        Self {
            in_all,
            per_address,
            held: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Charges `bytes` more to `peer` (none: a connection whose address is
    /// not known, charged in all only, so while it is read only), or says
    /// which share is spent; a `small` body may pass its address's share by
    /// a part of it ([`SMALL_RESERVE_PART`]).
    fn charge(&self, peer: Option<IpAddr>, bytes: usize, small: bool) -> Result<(), Spent> {
        let mut held = self.held();
        let in_all = held.in_all.saturating_add(bytes);
        if in_all > self.in_all {
            return Err(Spent::InAll);
        }
        if let Some(peer) = peer {
            let mine = held.by_address.get(&peer).copied().unwrap_or(0);
            let mine = mine.saturating_add(bytes);
            // A small body may go past the share by a reserve: an address
            // whose share is held by requests waiting on it can still send
            // the answers and cancellations that would end them.
            let share = if small {
                self.per_address
                    .saturating_add(self.per_address / SMALL_RESERVE_PART)
            } else {
                self.per_address
            };
            if mine > share {
                return Err(Spent::Address);
            }
            held.by_address.insert(peer, mine);
        }
        held.in_all = in_all;
        Ok(())
    }

    /// Gives back `bytes` of the share of all, keeping them charged to
    /// their address.
    fn refund_in_all(&self, bytes: usize) {
        let mut held = self.held();
        held.in_all = held.in_all.saturating_sub(bytes);
    }

    /// Gives back `bytes` charged to `peer`, and, unless `read` (already
    /// given back), to the share of all.
    fn refund(&self, peer: Option<IpAddr>, bytes: usize, read: bool) {
        let mut held = self.held();
        if !read {
            held.in_all = held.in_all.saturating_sub(bytes);
        }
        if let Some(peer) = peer {
            if let Some(mine) = held.by_address.get_mut(&peer) {
                *mine = mine.saturating_sub(bytes);
                if *mine == 0 {
                    held.by_address.remove(&peer);
                }
            }
        }
    }
}

/// What one body has been charged, given back when it is dropped: its
/// request answered, refused, or abandoned mid-way.
#[derive(Debug)]
struct Charge {
    budget: Arc<BodyBudget>,
    peer: Option<IpAddr>,
    bytes: usize,
    /// Read whole: the share of all is given back already.
    read: bool,
    /// Announced as small (see [`SMALL_BODY_PART`]): it may use the reserve.
    small: bool,
}

/// A body announced as at most this part of an address's share is small
/// (64 KiB of the default 32 MiB): an answer, a cancellation, a short
/// request.
const SMALL_BODY_PART: usize = 512;

/// How far past its share an address's small bodies may go, as a part of
/// the share (1 MiB of the default 32 MiB).
const SMALL_RESERVE_PART: usize = 32;

/// A request's body charge, in the request's extensions for a handler that
/// answers after its response (the 2024-11-05 transport's 202, a legacy
/// session's requests, which run as the session's own tasks): held until
/// the answer is on its way, it keeps the bytes counted meanwhile.
#[derive(Clone, Debug)]
pub(super) struct BodyCharge {
    _charge: Arc<Charge>,
}

impl Charge {
    fn add(&mut self, bytes: usize) -> Result<(), Spent> {
        self.budget.charge(self.peer, bytes, self.small)?;
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(())
    }
}

impl Charge {
    /// The body is read whole: from now it counts against its address only.
    fn read_whole(&mut self) {
        self.budget.refund_in_all(self.bytes);
        self.read = true;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.refund(self.peer, self.bytes, self.read);
    }
}

/// Why a body was not read.
enum Unread {
    TooLarge,
    CutShort,
    Spent(Spent),
}

/// `body` read whole, at most `max_bytes` of it, each piece charged to
/// `charge` as it arrives. A body that comes in one piece is passed on as
/// it came, uncopied.
async fn read_charged(body: Body, max_bytes: usize, charge: &mut Charge) -> Result<Bytes, Unread> {
    let mut body = body;
    // The first piece as it came; later ones, if any, copied after it. Most
    // bodies come in one piece, which is then neither copied nor listed.
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    let mut length = 0_usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Unread::CutShort)?;
        let Ok(piece) = frame.into_data() else {
            continue;
        };
        length = length.saturating_add(piece.len());
        if length > max_bytes {
            return Err(Unread::TooLarge);
        }
        charge.add(piece.len()).map_err(Unread::Spent)?;
        match first.take() {
            None if joined.is_empty() => first = Some(piece),
            None => joined.extend_from_slice(&piece),
            Some(earlier) => {
                joined.extend_from_slice(&earlier);
                joined.extend_from_slice(&piece);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

/// The middleware: 413 for a body over the size, 408 for one that is not
/// all there in time, 400 for one cut short, 429 when the client's address
/// already has its share of bytes being read or served and 503 when every
/// address together has its share of bytes being read (each with
/// `Retry-After`).
pub(super) async fn read_whole(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| network_of(address.ip()));
    let (parts, body) = request.into_parts();
    // A length announced past the limit is refused before a byte of the
    // body is read or waited for.
    let announced = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if announced.is_some_and(|length| {
        usize::try_from(length).map_or(true, |length| length > limits.max_bytes)
    }) {
        return refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {} bytes", limits.max_bytes),
        );
    }
    let mut charge = Charge {
        budget: Arc::clone(&limits.budget),
        peer,
        bytes: 0,
        read: false,
        small: announced.is_some_and(|length| {
            usize::try_from(length)
                .is_ok_and(|length| length <= limits.budget.per_address / SMALL_BODY_PART)
        }),
    };
    let read = tokio::time::timeout(
        limits.timeout,
        read_charged(body, limits.max_bytes, &mut charge),
    );
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(Unread::TooLarge)) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the body is larger than {} bytes", limits.max_bytes),
            );
        }
        Ok(Err(Unread::CutShort)) => {
            return refused(StatusCode::BAD_REQUEST, "the body was cut short");
        }
        Ok(Err(Unread::Spent(spent))) => {
            let (status, message) = match spent {
                Spent::Address => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "this address has too many request bytes being read or served; \
                     try again when some of its requests are answered",
                ),
                Spent::InAll => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many request bodies are being read; try again later",
                ),
            };
            let mut response = refused(status, message);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(1_u32));
            return response;
        }
        Err(_) => {
            return refused(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {:?}", limits.timeout),
            );
        }
    };
    // Read whole, and still counted against its address until the request
    // is answered: its answer's body holds the charge until it is sent
    // whole (a stream of events until it ends), and a handler answering
    // later takes a share. A request that never reads its body (a GET's
    // stream) holds nothing.
    charge.read_whole();
    if !matches!(parts.method, Method::POST) {
        drop(charge);
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    let charge = Arc::new(charge);
    let mut parts = parts;
    parts.extensions.insert(BodyCharge {
        _charge: Arc::clone(&charge),
    });
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
        .map(|body| {
            Body::new(Charged {
                body,
                _charge: charge,
            })
        })
}

/// An answer's body, holding its request's charge until it is dropped:
/// sent whole, or its client gone.
struct Charged {
    body: Body,
    _charge: Arc<Charge>,
}

impl axum::body::HttpBody for Charged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn refused(status: StatusCode, message: &str) -> Response {
    let mut response = error_body(None, ErrorCode::INVALID_REQUEST, message);
    *response.status_mut() = status;
    // The rest of the body may still be on its way; the connection cannot
    // carry another request after it.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_spends_its_share_and_all_addresses_the_whole() {
        let budget = BodyBudget::new(100, 60);
        let (one, two) = (
            Some(IpAddr::from([10, 0, 0, 1])),
            Some(IpAddr::from([10, 0, 0, 2])),
        );
        assert_eq!(budget.charge(one, 60, false), Ok(()));
        assert_eq!(budget.charge(one, 1, false), Err(Spent::Address));
        assert_eq!(budget.charge(two, 41, false), Err(Spent::InAll));
        assert_eq!(budget.charge(two, 40, false), Ok(()));
        budget.refund(one, 60, false);
        assert_eq!(budget.charge(two, 20, false), Ok(()));
        // Read whole, a body is held against its address only.
        budget.refund_in_all(60);
        assert_eq!(budget.charge(two, 1, false), Err(Spent::Address));
        assert_eq!(budget.charge(one, 60, false), Ok(()));
        // A small body may still go past the share, by the reserve.
        assert_eq!(budget.charge(two, 1, true), Ok(()));
        budget.refund(two, 1, false);
        budget.refund(two, 60, true);
        budget.refund(one, 60, false);
        let held = budget.held();
        assert_eq!(held.in_all, 0);
        assert!(
            held.by_address.is_empty(),
            "nothing kept for idle addresses"
        );
    }
}
