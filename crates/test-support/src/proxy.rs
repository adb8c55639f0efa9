//! A loopback TCP proxy of a test's own whose connections can each be
//! frozen: it stops moving their bytes either way and keeps them open, as
//! a network partition, or a balancer or NAT that dropped a quiet flow,
//! leaves a connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::TestError;

/// A loopback proxy to `target`, each connection it carries with a switch
/// that freezes it.
#[derive(Debug)]
pub struct Proxy {
    /// Where it listens, `HOST:PORT`.
    pub address: String,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Proxy {
    /// A proxy to `target` (`HOST:PORT`) on an ephemeral loopback port.
    ///
    /// # Errors
    ///
    /// When it cannot listen.
    pub async fn start(target: String) -> Result<Self, TestError> {
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
    #[must_use]
    pub fn connections(&self) -> usize {
        self.frozen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Freezes the connection opened `nth` (from 0), leaving it open.
    ///
    /// # Errors
    ///
    /// When it carried no such connection.
    pub fn freeze(&self, nth: usize) -> Result<(), TestError> {
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
