//! The relay between instances in a real Redis (`Relay` on `RedisStore`),
//! when the connection its subscription rides on stops carrying anything
//! without closing: a network partition, or a balancer or NAT dropping a
//! quiet flow. The subscription must notice by itself and be opened
//! afresh, or the instance stays deaf to the others while it believes it
//! listens.
//!
//! Between the store and Redis runs a proxy of the test's own that can
//! freeze one connection: it stops moving its bytes either way and keeps
//! it open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid::application::server::Relay as _;
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::redis::RedisServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A loopback proxy to `target`, each connection it carries with a switch
/// that freezes it.
struct Proxy {
    address: String,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Proxy {
    async fn start(target: String) -> Result<Self, TestError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let switches = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let switch = Arc::new(AtomicBool::new(false));
                switches
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Arc::clone(&switch));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, Arc::clone(&switch)));
                tokio::spawn(pump(server_read, client_write, switch));
            }
        });
        Ok(Self { address, frozen })
    }

    /// How many connections it has carried.
    fn connections(&self) -> usize {
        self.frozen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Freezes the connection opened `nth` (from 0), leaving it open.
    fn freeze(&self, nth: usize) -> Result<(), TestError> {
        let switches = self.frozen.lock().unwrap_or_else(PoisonError::into_inner);
        switches
            .get(nth)
            .ok_or("no such connection")?
            .store(true, Ordering::Release);
        Ok(())
    }
}

/// Moves bytes from `from` to `to` until either side ends; once `frozen`,
/// reads nothing more and writes nothing more, and keeps both ends open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        if frozen.load(Ordering::Acquire) {
            // Held open, silent, as a dropped flow looks from either end.
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // Checked again now and then, so a quiet connection freezes too.
            () = tokio::time::sleep(Duration::from_millis(20)) => continue,
        };
        let Ok(read @ 1..) = read else { return };
        if frozen.load(Ordering::Acquire) {
            continue;
        }
        let Some(bytes) = buffer.get(..read) else {
            return;
        };
        if to.write_all(bytes).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_subscription_whose_connection_went_silent_is_opened_afresh() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let target = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = Proxy::start(target).await?;
    let options = RedisOptions {
        // Short for the test, long enough that a busy machine does not
        // reopen the subscription before it is frozen.
        relay_probe: Duration::from_millis(1500),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&format!("redis://{}", proxy.address), options).await?;
    let before = proxy.connections();
    let mut heard = store.listen("a").await?;
    // The subscription rides on the connection `listen` opened.
    assert_eq!(proxy.connections(), before + 1);

    // Heard while the connection carries it.
    let direct = RedisStore::connect(&redis.url(), RedisOptions::default()).await?;
    assert_eq!(direct.send("a", "first").await?, 1);
    let first = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await?;
    assert_eq!(first.as_deref(), Some("first"));

    // Silent from now on, and still open: Redis still counts it as a
    // subscriber, so a sender sees nothing wrong.
    proxy.freeze(before)?;
    let reached = async {
        let mut n = 0_u32;
        loop {
            n += 1;
            let _subscribers = direct.send("a", &format!("later {n}")).await;
            tokio::select! {
                message = heard.recv() => return message,
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    };
    let later = tokio::time::timeout(Duration::from_secs(10), reached).await?;
    assert!(
        later.as_deref().is_some_and(|m| m.starts_with("later ")),
        "{later:?}"
    );
    assert!(
        proxy.connections() > before + 1,
        "the subscription was opened again on a new connection"
    );
    Ok(())
}
