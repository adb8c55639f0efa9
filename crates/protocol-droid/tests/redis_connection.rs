//! The store's one connection to a real Redis, when the network between
//! them misbehaves: a connection that a firewall or a NAT silently forgot
//! (nothing comes back on it, while a new one works) is replaced, and the
//! store serves again on its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use protocol_droid::adapters::secondary::redis::{RedisOptions, RedisStore};
use protocol_droid_test_support::TestError;
use protocol_droid_test_support::redis::RedisServer;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to `target` whose connections opened before the latest
/// [`Relay::forget`] carry nothing more, and stay open: what a middlebox
/// that dropped its flows does to them.
struct Relay {
    /// Connections numbered below this are forgotten.
    forgotten_below: Arc<AtomicU64>,
    /// How many connections were opened.
    opened: Arc<AtomicU64>,
    address: String,
}

impl Relay {
    async fn start(target: String) -> Result<Self, TestError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let forgotten_below = Arc::new(AtomicU64::new(0));
        let opened = Arc::new(AtomicU64::new(0));
        let forgotten = Arc::clone(&forgotten_below);
        let counted = Arc::clone(&opened);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let number = counted.fetch_add(1, Ordering::SeqCst) + 1;
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                tokio::spawn(carry(client, server, number, Arc::clone(&forgotten)));
            }
        });
        Ok(Self {
            forgotten_below,
            opened,
            address,
        })
    }

    /// Every connection open now carries nothing more.
    fn forget(&self) {
        self.forgotten_below.store(u64::MAX, Ordering::SeqCst);
    }

    /// Connections opened from now on carry again.
    fn carry_new(&self) {
        let opened = self.opened.load(Ordering::SeqCst);
        self.forgotten_below.store(opened + 1, Ordering::SeqCst);
    }
}

/// Copies both ways between `client` and `server` until either ends; once
/// connection `number` is forgotten, what either sends is swallowed.
async fn carry(client: TcpStream, server: TcpStream, number: u64, forgotten: Arc<AtomicU64>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let live = move || number >= forgotten.load(Ordering::SeqCst);
    let up = {
        let live = live.clone();
        async move {
            let mut buffer = vec![0_u8; 16 * 1024];
            while let Ok(read) = tokio::io::AsyncReadExt::read(&mut client_read, &mut buffer).await
            {
                let Some(chunk) = buffer.get(..read).filter(|c| !c.is_empty()) else {
                    break;
                };
                if live() && server_write.write_all(chunk).await.is_err() {
                    break;
                }
            }
        }
    };
    let down = async move {
        let mut buffer = vec![0_u8; 16 * 1024];
        while let Ok(read) = tokio::io::AsyncReadExt::read(&mut server_read, &mut buffer).await {
            let Some(chunk) = buffer.get(..read).filter(|c| !c.is_empty()) else {
                break;
            };
            if live() && client_write.write_all(chunk).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(up, down);
}

/// A connection gone silent fails its commands within the timeout, and is
/// replaced: the store answers again without a restart. Before, every
/// command failed for as long as the process ran.
#[tokio::test]
async fn a_connection_gone_silent_is_replaced() -> Result<(), TestError> {
    let redis = RedisServer::start()?;
    let target = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let relay = Relay::start(target).await?;
    let options = RedisOptions {
        timeout: Duration::from_millis(500),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&format!("redis://{}", relay.address), options).await?;
    store.ping().await?;
    // The store's connection is forgotten; new ones work.
    relay.forget();
    assert!(
        store.ping().await.is_err(),
        "a forgotten connection answered"
    );
    relay.carry_new();
    for _ in 0..40 {
        if store.ping().await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err("the store never answered again".into())
}
