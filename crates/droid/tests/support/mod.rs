//! What more than one of these test binaries starts: `droid` itself,
//! `droid` listening, and a certificate authority for it.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::process::{Command, Stdio};

pub(crate) mod answers;
pub(crate) mod balancer;

pub(crate) use protocol_droid_test_support::TestError;

/// Kills the server when the test ends, however it ends.
pub(crate) struct Running(pub(crate) std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _killed = self.0.kill();
        let _reaped = self.0.wait();
    }
}

/// `droid`, ready to be given its arguments. What it keeps (a gateway's
/// state file and admin socket) goes to a folder of the tests', never the
/// user's own state directory.
pub(crate) fn droid_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_droid"));
    command.env(
        "XDG_STATE_HOME",
        std::env::temp_dir().join("droid-tests-state"),
    );
    // A collector set for the machine must not receive the tests' spans, nor
    // turn tracing on where a test does not ask for it.
    command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    command
}

/// Starts `droid ARGS` with its standard input, output and error as given.
pub(crate) fn spawn_droid(
    args: &[&str],
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
) -> std::io::Result<std::process::Child> {
    droid_command()
        .args(args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
}

/// Starts `droid ARGS` and waits for the line naming where it listens;
/// the address (`HOST:PORT`) after `scheme://`.
pub(crate) fn listening(args: &[&str], scheme: &str) -> Result<(Running, String), TestError> {
    let mut command = droid_command();
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    listening_with(command, scheme)
}

/// As [`listening`], for a `droid` command set up by the caller (its
/// stderr piped).
pub(crate) fn listening_with(
    command: Command,
    scheme: &str,
) -> Result<(Running, String), TestError> {
    let (running, mut addresses) = announced(command, &[&format!("listening on {scheme}://")])?;
    Ok((running, addresses.pop().unwrap_or_default()))
}

/// Starts `command` (its stderr piped) and waits until its stderr has named
/// an address after each of `markers` (such as `admin page on http://`),
/// in whatever order; the addresses (`HOST:PORT`), in the markers' order.
pub(crate) fn announced(
    mut command: Command,
    markers: &[&str],
) -> Result<(Running, Vec<String>), TestError> {
    use std::io::{BufRead as _, BufReader};

    let mut child = command.spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let running = Running(child);
    let mut lines = BufReader::new(stderr).lines();
    let mut addresses: Vec<Option<String>> = vec![None; markers.len()];
    while addresses.iter().any(Option::is_none) {
        let line = lines.next().ok_or("the server exited before listening")??;
        for (marker, address) in markers.iter().zip(&mut addresses) {
            if let Some(rest) = line.split(marker).nth(1) {
                *address = Some(rest.split('/').next().unwrap_or_default().to_owned());
            }
        }
    }
    // The rest of stderr is drained so the server never blocks on it.
    std::thread::spawn(move || lines.for_each(drop));
    Ok((running, addresses.into_iter().flatten().collect()))
}

/// A fresh folder, removed when dropped.
pub(crate) struct Files {
    dir: std::path::PathBuf,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _removed = std::fs::remove_dir_all(&self.dir);
    }
}

impl Files {
    /// A new empty folder in the temporary directory, its name starting
    /// with `prefix` and unique to this process and moment.
    pub(crate) fn fresh(prefix: &str) -> Result<Self, TestError> {
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    /// The folder.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The path of the file `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// Writes `text` to the file `name` in the folder; its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> Result<String, TestError> {
        std::fs::write(self.dir.join(name), text)?;
        Ok(self.path(name))
    }
}

/// `ca.pem`, `cert.pem` and `key.pem` for 127.0.0.1, in a fresh folder.
pub(crate) fn certificates() -> Result<Files, TestError> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let files = Files::fresh("droid-https")?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    std::fs::write(files.path("ca.pem"), ca.self_signed(&ca_key)?.pem())?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &issuer)?;
    std::fs::write(files.path("cert.pem"), leaf.pem())?;
    std::fs::write(files.path("key.pem"), key.serialize_pem())?;
    Ok(files)
}

/// `droid serve` over HTTPS with the certificate and key in `files`.
pub(crate) fn serve_https(files: &Files) -> Result<(Running, String), TestError> {
    let (cert, key) = (files.path("cert.pem"), files.path("key.pem"));
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    listening(&args, "https")
}

/// POSTs `body` to `/mcp` at `address` over a fresh HTTP/1.1 connection
/// with `headers` (each `Name: value`) besides the usual ones, and reads the
/// whole raw reply: status line, headers and body.
pub(crate) fn raw_post(address: &str, headers: &[String], body: &str) -> Result<String, TestError> {
    use std::io::{Read as _, Write as _};

    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    stream.write_all(request.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

/// The `Mcp-Session-Id` a raw reply (see [`raw_post`]) names.
pub(crate) fn session_id(reply: &str) -> Option<String> {
    reply.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    })
}

/// `GET path` on `address` over a fresh HTTP/1.1 connection, without a
/// token; the whole raw reply.
pub(crate) fn raw_get(address: &str, path: &str) -> Result<String, TestError> {
    use std::io::{Read as _, Write as _};

    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(20)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}
