//! A redis-server of a test's own: Debian's binary on a loopback port, keeping
//! nothing on disk, stopped when dropped (`scripts/services.sh` installs
//! it).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestError;

/// A running redis-server.
#[derive(Debug)]
pub struct RedisServer {
    process: Child,
    port: u16,
    /// Whether it speaks TLS only.
    tls: bool,
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
        let mut command = Command::new("redis-server");
        command.args(["--port", &port.to_string()]);
        Self::run(command, port, false)
    }

    /// One on a free port speaking TLS only, with the certificate and key
    /// at `cert` and `key` and the authorities at `ca` (PEM; Redis will
    /// not start TLS without some), asking clients for no certificate:
    /// what a test of a `rediss://` store uses.
    ///
    /// # Errors
    ///
    /// When no port is free, or redis-server is missing or does not accept
    /// connections within 20 s.
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TestError> {
        let port = free_port()?;
        let mut command = Command::new("redis-server");
        command
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-key-file")
            .arg(key)
            .arg("--tls-ca-cert-file")
            .arg(ca)
            .args(["--tls-auth-clients", "no"]);
        Self::run(command, port, true)
    }

    /// Runs `command` (a redis-server told where to listen) on loopback,
    /// keeping nothing on disk, and waits until it answers on `port`. A
    /// test may make it slow (`DEBUG SLEEP`, from loopback only).
    fn run(mut command: Command, port: u16, tls: bool) -> Result<Self, TestError> {
        let process = command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting redis-server (scripts/services.sh installs it): {e}"))?;
        Self { process, port, tls }.answering()
    }

    /// Itself once it answers (over TLS: once it accepts connections).
    fn answering(self) -> Result<Self, TestError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.answers() {
            if Instant::now() > deadline {
                return Err("redis-server did not answer within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Ok(self)
    }

    /// Whether it answers `PING` (over TLS: whether it accepts a connection).
    #[must_use]
    pub fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.tls {
            return true;
        }
        let mut answer = [0_u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// Sends one command (`args`, written as a RESP array) on a connection
    /// of its own, and answers the connection to read the reply from, which
    /// waits at most `wait` for each read.
    ///
    /// # Errors
    ///
    /// When it cannot be reached or written to.
    pub fn command(
        &self,
        args: &[&str],
        wait: Duration,
    ) -> Result<std::io::BufReader<TcpStream>, TestError> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(wait))?;
        let mut command = format!("*{}\r\n", args.len());
        for arg in args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(command.as_bytes())?;
        Ok(std::io::BufReader::new(stream))
    }

    /// Its port.
    #[must_use]
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT` (`rediss://` over TLS).
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
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
