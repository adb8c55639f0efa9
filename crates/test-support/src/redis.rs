//! A redis-server of a test's own: Debian's binary on a loopback port, keeping
//! nothing on disk, stopped when dropped (`scripts/services.sh` installs
//! it).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestError;

/// A running redis-server.
#[derive(Debug)]
pub struct RedisServer {
    process: Child,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _killed = self.process.kill();
        let _reaped = self.process.wait();
    }
}

impl RedisServer {
    /// One on a free port.
    ///
    /// # Errors
    ///
    /// When no port is free, or redis-server is missing or does not answer
    /// within 20 s.
    pub fn start() -> Result<Self, TestError> {
        Self::on(free_port()?)
    }

    /// One on `port`: what a test restarting Redis where it was uses.
    ///
    /// # Errors
    ///
    /// When redis-server is missing or does not answer within 20 s.
    pub fn on(port: u16) -> Result<Self, TestError> {
        let process = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting redis-server (scripts/services.sh installs it): {e}"))?;
        let redis = Self { process, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !redis.answers() {
            if Instant::now() > deadline {
                return Err("redis-server did not answer within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Ok(redis)
    }

    /// Whether it answers `PING`.
    #[must_use]
    pub fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut answer = [0_u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// Its port.
    #[must_use]
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// A loopback port free now.
///
/// # Errors
///
/// When none can be bound.
pub fn free_port() -> Result<u16, TestError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
