//! A server run as a child process, spoken to over its stdin and stdout.
//!
//! Messages are newline-delimited JSON, bounded per line as the stdio server
//! side is. The child's stderr is its log: every line goes to `tracing`, and
//! the last few are kept so that a server that dies can say why. Shutdown is
//! orderly, as the stdio transport asks: close stdin, wait, send `SIGTERM`,
//! wait, then kill.
//!
//! The child leads a process group of its own, and the signals go to the
//! group: a server started through a wrapper (`npx`, `uvx`, a shell script)
//! or that starts helpers of its own leaves none of them running. What is
//! left of the group once the server is gone gets the same grace, then is
//! killed; a transport dropped without `close` kills the group at once.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex as AsyncMutex, mpsc};

use crate::application::client::{Inbound, InboundTx, Link, LinkError, Outgoing, plain_response};
use crate::domain::jsonrpc;
use crate::domain::jsonrpc::framing::{DEFAULT_MAX_LINE, FrameError, LineFramer};

/// How many of the child's last stderr lines are kept for error messages.
const STDERR_TAIL: usize = 20;

/// The longest stderr line kept whole.
const STDERR_MAX_LINE: usize = 64 * 1024;

/// How many outgoing messages may wait for the child's stdin.
const OUTGOING_QUEUE: usize = 256;

/// The room a line to the child starts with: a 2026-07-28 request, with the
/// `_meta` every one carries, fits.
const LINE_CAPACITY: usize = 512;

/// How to run the child.
#[derive(Clone, Debug)]
pub struct ChildOptions {
    /// The program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables set for the child, on top of the minimal
    /// environment ([`BASE_ENV`]) and [`Self::pass_env`].
    pub env: Vec<(OsString, OsString)>,
    /// Variables of this process's environment passed on by name, besides
    /// [`BASE_ENV`]; nothing else of it reaches the child.
    pub pass_env: Vec<OsString>,
    /// The working directory; this process's when `None`.
    pub cwd: Option<std::path::PathBuf>,
    /// The longest line accepted from the child.
    pub max_line: usize,
    /// How long to wait after closing stdin, and again after `SIGTERM`.
    pub grace: Duration,
}

impl ChildOptions {
    /// Runs `program` with `args`, with default limits.
    pub fn new<I, S>(program: impl Into<OsString>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            pass_env: Vec::new(),
            cwd: None,
            max_line: DEFAULT_MAX_LINE,
            grace: Duration::from_secs(2),
        }
    }
}

/// The child-process transport.
pub struct ChildProcess {
    outgoing: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    child: AsyncMutex<Option<Child>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    grace: Duration,
    pid: Option<u32>,
    /// Set once `close` has ended the server's whole process group.
    ended: AtomicBool,
}

impl std::fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProcess")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl ChildProcess {
    /// Starts the child and its reader, writer and stderr tasks; what it
    /// sends goes to `inbound`.
    ///
    /// # Errors
    ///
    /// When the program cannot be started, or a variable given it has no
    /// name or a name holding `=` (which the environment would read as
    /// another variable).
    pub fn spawn(options: &ChildOptions, inbound: InboundTx) -> std::io::Result<Self> {
        if let Some((name, _)) = options
            .env
            .iter()
            .find(|(name, _)| name.is_empty() || name.as_encoded_bytes().contains(&b'='))
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the environment variable name {:?} is empty or holds `=`",
                    name.to_string_lossy()
                ),
            ));
        }
        let mut command = Command::new(&options.program);
        if let Some(cwd) = &options.cwd {
            // Said by name: the error spawning gives is the program's
            // ("No such file or directory"), whichever of the two is missing.
            if !cwd.is_dir() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the working directory {} is not a directory", cwd.display()),
                ));
            }
            command.current_dir(cwd);
        }
        // A child starts from a minimal environment: what this process was
        // given (cloud keys, tokens, this program's own secrets) is for it,
        // not for every server it starts. What a server needs is said per
        // server, as a value or as a name to pass on.
        command.env_clear();
        for (key, value) in std::env::vars_os() {
            let named = options.pass_env.contains(&key);
            if named || (is_base(&key) && !is_secret(&key)) {
                command.env(key, value);
            }
        }
        let mut child = command
            .args(&options.args)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A client dropped without `close` must not leave the server
            // running (nor, see `Drop`, anything it started).
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|error| not_started(&options.program, &error))?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the child's pipes were not set up"));
        };
        let (tx, rx) = mpsc::channel(OUTGOING_QUEUE);
        tokio::spawn(write_loop(stdin, rx));
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let stderr_read = tokio::spawn(stderr_loop(stderr, Arc::clone(&tail), pid));
        tokio::spawn(read_loop(
            stdout,
            options.max_line,
            inbound,
            Arc::clone(&tail),
            Some(stderr_read),
        ));
        Ok(Self {
            outgoing: Mutex::new(Some(tx)),
            child: AsyncMutex::new(Some(child)),
            stderr: tail,
            grace: options.grace,
            pid,
            ended: AtomicBool::new(false),
        })
    }

    /// The child's last stderr lines, oldest first.
    #[must_use]
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The child's process id, while it runs.
    #[must_use]
    pub const fn pid(&self) -> Option<u32> {
        self.pid
    }
}

impl Link for ChildProcess {
    fn send(&self, message: Outgoing) -> BoxFuture<'_, Result<(), LinkError>> {
        let sender = self
            .outgoing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(async move {
            let sender = sender.ok_or(LinkError::Closed)?;
            // Grown from `to_vec`'s 128 bytes, a 2026-07-28 request with
            // its `_meta` was moved twice on the way.
            let mut line = Vec::with_capacity(LINE_CAPACITY);
            serde_json::to_writer(&mut line, &message.message)
                .map_err(|e| LinkError::Io(format!("unwritable message: {e}")))?;
            line.push(b'\n');
            sender.send(line).await.map_err(|_| LinkError::Closed)
        })
    }

    fn is_stream(&self) -> bool {
        true
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Dropping the sender ends the writer, which closes stdin.
            self.outgoing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let Some(mut child) = self.child.lock().await.take() else {
                return;
            };
            let group = self.pid.and_then(|pid| i32::try_from(pid).ok());
            if tokio::time::timeout(self.grace, child.wait())
                .await
                .is_err()
            {
                signal_group(group, nix::sys::signal::Signal::SIGTERM);
                if tokio::time::timeout(self.grace, child.wait())
                    .await
                    .is_err()
                {
                    tracing::warn!(pid = self.pid, "the server ignored SIGTERM; killing it");
                    signal_group(group, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.kill().await;
                }
            }
            // The server is gone; what it started goes the same way: told,
            // given the same grace, then killed.
            signal_group(group, nix::sys::signal::Signal::SIGTERM);
            let deadline = tokio::time::Instant::now() + self.grace;
            while group_lives(group) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            signal_group(group, nix::sys::signal::Signal::SIGKILL);
            self.ended.store(true, Ordering::Release);
        })
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // Not ended by `close` (never closed, or dropped while closing):
        // `kill_on_drop` ends the server itself, and this whatever it
        // started, at once, as a process ending cannot wait.
        if !self.ended.load(Ordering::Acquire) {
            signal_group(
                self.pid.and_then(|pid| i32::try_from(pid).ok()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Whether any process of the group `group` leads is still there.
fn group_lives(group: Option<i32>) -> bool {
    group
        .filter(|g| *g > 0)
        .is_some_and(|g| nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), None).is_ok())
}

/// Sends `signal` to the process group `group` leads, if there is one: a
/// group that has already ended is no error.
fn signal_group(group: Option<i32>, signal: nix::sys::signal::Signal) {
    if let Some(group) = group.filter(|g| *g > 0) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(group), signal);
    }
}

/// How many bytes of queued lines go to the server in one write.
const WRITE_BATCH: usize = 64 * 1024;

async fn write_loop(mut stdin: ChildStdin, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut line) = rx.recv().await {
        // Lines queued meanwhile go in the same write: under load, one
        // system call carries many requests instead of one each.
        while line.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(more) => line.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if let Err(error) = stdin.write_all(&line).await {
            tracing::debug!(%error, "the server's stdin is closed");
            return;
        }
        if let Err(error) = stdin.flush().await {
            tracing::debug!(%error, "the server's stdin is closed");
            return;
        }
    }
}

async fn stderr_loop(
    mut stderr: impl AsyncRead + Unpin,
    tail: Arc<Mutex<VecDeque<String>>>,
    pid: Option<u32>,
) {
    // Framed like stdout, so one endless line cannot grow a buffer forever.
    let mut framer = LineFramer::new(STDERR_MAX_LINE);
    let mut buffer = vec![0_u8; 8 * 1024];
    let keep = |frame: Result<Vec<u8>, FrameError>| {
        let line = match frame {
            Ok(line) => String::from_utf8_lossy(&line).into_owned(),
            Err(_) => "(a line too long to keep)".to_owned(),
        };
        tracing::debug!(pid, "server stderr: {}", line.escape_debug());
        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    };
    while let Ok(read @ 1..) = stderr.read(&mut buffer).await {
        for frame in framer.push(buffer.get(..read).unwrap_or_default()) {
            keep(frame);
        }
    }
    // A server's last words often lack their newline (`write` of a message,
    // then exit); they are the ones that say why it stopped.
    if let Some(frame) = framer.finish() {
        keep(frame);
    }
}

/// How long the reason a server closed its stdout waits for the rest of its
/// stderr: both close as it exits, in either order, and a process it left
/// behind may hold stderr open for ever.
const STDERR_GRACE: Duration = Duration::from_millis(500);

async fn read_loop(
    mut stdout: impl AsyncRead + Unpin,
    max_line: usize,
    inbound: InboundTx,
    tail: Arc<Mutex<VecDeque<String>>>,
    stderr_read: Option<tokio::task::JoinHandle<()>>,
) {
    let mut framer = LineFramer::new(max_line);
    let mut buffer = vec![0_u8; 64 * 1024];
    let reason = loop {
        let read = match stdout.read(&mut buffer).await {
            Ok(0) => break None,
            Ok(n) => n,
            Err(error) => break Some(format!("reading the server's stdout failed: {error}")),
        };
        for frame in framer.push(buffer.get(..read).unwrap_or_default()) {
            let item = match frame {
                Ok(line) => decode(&line),
                // An answer too long to read still ends its request, now
                // rather than at its timeout.
                Err(FrameError::LineTooLong {
                    limit,
                    id: Some(id),
                    method: false,
                    ..
                }) => vec![Inbound::Failed {
                    id,
                    error: LinkError::TooLarge { limit },
                }],
                // A request too long to read is refused under its id.
                Err(FrameError::LineTooLong {
                    limit,
                    id: Some(id),
                    method: true,
                    ..
                }) => vec![Inbound::TooLarge { id, limit }],
                Err(error) => vec![Inbound::Malformed(error.to_string())],
            };
            for item in item {
                if inbound.send(item).await.is_err() {
                    return;
                }
            }
        }
    };
    if let Some(Ok(line)) = framer.finish() {
        // A last message without its newline is still a message.
        for item in decode(&line) {
            let _ = inbound.send(item).await;
        }
    }
    if let Some(stderr_read) = stderr_read {
        let _read = tokio::time::timeout(STDERR_GRACE, stderr_read).await;
    }
    let stderr: Vec<String> = tail
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let reason = reason.unwrap_or_else(|| "the server closed its stdout".to_owned());
    let reason = if stderr.is_empty() {
        reason
    } else {
        let words: Vec<String> = stderr.iter().map(|line| printable(line)).collect();
        format!("{reason}; its last words: {}", words.join(" | "))
    };
    let _ = inbound.send(Inbound::Closed(Some(reason))).await;
}

/// Why `program` did not start, naming it: the system's words alone ("No
/// such file or directory") say neither which program nor that a bare
/// name is looked for on the `PATH` the child is given, the commonest
/// cause (an `npx` or `uvx` not on it).
fn not_started(program: &std::ffi::OsStr, error: &std::io::Error) -> std::io::Error {
    let name = program.to_string_lossy();
    let shown = printable(&name);
    let message = match error.kind() {
        std::io::ErrorKind::NotFound if !name.contains('/') => {
            format!("{shown} is not found on the PATH the server is given ({error})")
        }
        std::io::ErrorKind::NotFound => format!("{shown} does not exist ({error})"),
        std::io::ErrorKind::PermissionDenied => format!("{shown} may not be run ({error})"),
        _ => format!("{shown}: {error}"),
    };
    std::io::Error::new(error.kind(), message)
}

/// `line` as the server wrote it, but with what a terminal would obey
/// (controls, direction overrides, invisible characters) escaped: the
/// reason a server stopped is logged and shown, and a server chooses its
/// last words.
fn printable(line: &str) -> String {
    let mut shown = String::with_capacity(line.len());
    for c in line.chars() {
        match c {
            // Harmless, and escaped they would be harder to read.
            '"' | '\'' | '\\' => shown.push(c),
            c => shown.extend(c.escape_debug()),
        }
    }
    shown
}

/// What every child is given of this process's environment: enough to find
/// programs, a home for caches, and the locale and terminal, nothing that
/// authorises anything. Every `LC_*` variable is passed as well.
pub const BASE_ENV: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ",
];

/// Whether `key` is in [`BASE_ENV`] or is a locale category.
fn is_base(key: &std::ffi::OsStr) -> bool {
    let key = key.to_string_lossy();
    BASE_ENV.contains(&key.as_ref()) || key.starts_with("LC_")
}

/// Whether an environment variable holds one of this program's secrets
/// (`DROID_TOKEN`, `DROID_AUTH_CLIENT_SECRET`, and any like them).
fn is_secret(key: &std::ffi::OsStr) -> bool {
    let key = key.to_string_lossy().to_ascii_uppercase();
    key.starts_with("DROID_")
        && ["TOKEN", "SECRET", "PASSWORD", "KEY"]
            .iter()
            .any(|word| key.contains(word))
}

/// One line as messages: a batch is split into its elements.
fn decode(line: &[u8]) -> Vec<Inbound> {
    // A lone surrogate is mended first: the result kept as text below is
    // not checked for one, and its reader would refuse it later.
    let surrogate = memchr::memmem::find_iter(line, b"\\u")
        .any(|at| matches!(line.get(at + 2), Some(b'd' | b'D')));
    if surrogate {
        let mended = core::str::from_utf8(line)
            .ok()
            .and_then(jsonrpc::mend_lone_surrogates);
        if let Some(mended) = mended {
            return decode(mended.as_bytes());
        }
    }
    // Most lines answer a request, and only that request reads the result:
    // it is kept as text for it, not built into a tree here.
    if let Some((id, result)) = plain_response(line) {
        return vec![Inbound::Answer { id, result }];
    }
    match jsonrpc::value_from_slice(line) {
        Ok(Value::Array(batch)) => batch.into_iter().map(Inbound::Message).collect(),
        Ok(message @ Value::Object(_)) => vec![Inbound::Message(message)],
        // A line that is not UTF-8 is read as an event stream's is, each
        // bad sequence as U+FFFD: its answer still ends its request, where
        // dropped it would leave it to its timeout. The text read is UTF-8,
        // so this is taken once.
        Err(_) if std::str::from_utf8(line).is_err() => {
            decode(String::from_utf8_lossy(line).as_bytes())
        }
        Ok(_) | Err(_) => vec![Inbound::Malformed(
            String::from_utf8_lossy(line.get(..line.len().min(200)).unwrap_or_default())
                .into_owned(),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_base_environment_is_passed_on_unnamed() {
        for base in ["PATH", "HOME", "LANG", "LC_ALL", "TERM"] {
            assert!(is_base(base.as_ref()), "{base}");
        }
        for secret in [
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "DROID_TOKEN",
            "SSH_AUTH_SOCK",
        ] {
            assert!(!is_base(secret.as_ref()), "{secret}");
        }
    }

    /// A variable named `A=B` would reach the child as `A` holding `B=…`,
    /// and one with no name as a malformed entry: neither starts a child.
    #[tokio::test]
    async fn a_variable_without_a_name_of_its_own_starts_nothing() {
        for name in ["A=B", ""] {
            let mut options = ChildOptions::new("true", Vec::<OsString>::new());
            options.env.push((name.into(), "c".into()));
            let (inbound, _rx) = crate::application::client::inbound_queue();
            let spawned = ChildProcess::spawn(&options, inbound);
            assert!(
                spawned.is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidInput),
                "{name:?}"
            );
        }
    }

    /// The last words are kept without their newline, awaited, and, since
    /// the server chose them, escaped where a terminal would obey them.
    #[tokio::test]
    async fn a_servers_last_words_are_kept_without_their_newline_and_awaited() {
        use tokio::io::AsyncWriteExt as _;
        let (mut writer, reader) = tokio::io::duplex(1024);
        let tail = Arc::default();
        let stderr_read = tokio::spawn(stderr_loop(reader, Arc::clone(&tail), None));
        let (tx, mut rx) = mpsc::channel(8);
        // Stdout has ended; stderr has not yet said everything.
        let reading = tokio::spawn(read_loop(&b""[..], 64, tx, tail, Some(stderr_read)));
        // Both loops run up to where they wait before the rest is written.
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        let written = writer
            .write_all("starting\nno \"API\" key given\u{1b}]0;t\u{7}\u{202e}".as_bytes())
            .await;
        assert!(written.is_ok());
        drop(writer);
        assert!(reading.await.is_ok());
        let reason = match rx.recv().await {
            Some(Inbound::Closed(Some(reason))) => reason,
            other => format!("not the closing reason: {other:?}"),
        };
        assert!(
            reason.ends_with(
                r#"its last words: starting | no "API" key given\u{1b}]0;t\u{7}\u{202e}"#
            ),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_fails_its_request_and_reading_goes_on() {
        use crate::domain::jsonrpc::RequestId;
        let pad = "x".repeat(100);
        let stdout = format!(
            "{{\"result\":{{\"text\":\"{pad}\"}},\"jsonrpc\":\"2.0\",\"id\":4}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{{}}}}\n"
        );
        let (tx, mut rx) = mpsc::channel(8);
        read_loop(stdout.as_bytes(), 64, tx, Arc::default(), None).await;
        let first = rx.recv().await;
        assert!(
            matches!(
                &first,
                Some(Inbound::Failed {
                    id: RequestId::Number(4),
                    error: LinkError::TooLarge { limit: 64 }
                })
            ),
            "{first:?}"
        );
        assert!(matches!(
            rx.recv().await,
            Some(Inbound::Answer {
                id: RequestId::Number(5),
                ..
            })
        ));
    }

    /// An answer with a byte that is not UTF-8 is still its request's
    /// answer, the byte read as U+FFFD.
    #[test]
    fn a_line_that_is_not_utf8_is_read_with_replacement_characters() {
        let line = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"text\":\"a\xffb\"}}";
        let decoded = decode(line);
        let [Inbound::Answer { id, result }] = &decoded[..] else {
            return assert!(decoded.is_empty(), "{decoded:?}");
        };
        assert_eq!(*id, jsonrpc::RequestId::Number(7));
        assert!(result.get().contains("a\u{fffd}b"), "{}", result.get());
    }

    /// A lone surrogate (JSON, though no Rust string can hold it) is read
    /// as U+FFFD: the message still arrives, where refused it would leave
    /// its request to the timeout.
    #[test]
    fn a_lone_surrogate_is_read_as_a_replacement_character() {
        let answer = br#"{"jsonrpc":"2.0","id":7,"result":{"text":"a\ud800b"}}"#;
        let decoded = decode(answer);
        let [Inbound::Answer { id, result }] = &decoded[..] else {
            return assert!(decoded.is_empty(), "{decoded:?}");
        };
        assert_eq!(*id, jsonrpc::RequestId::Number(7));
        // Its reader takes the result as it is.
        let read = serde_json::from_str::<Value>(result.get());
        assert_eq!(read.ok(), Some(serde_json::json!({ "text": "a\u{fffd}b" })));
        let told =
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\udc00"}}"#;
        let decoded = decode(told);
        let [Inbound::Message(message)] = &decoded[..] else {
            return assert!(decoded.is_empty(), "{decoded:?}");
        };
        let data = message.pointer("/params/data");
        assert_eq!(data, Some(&serde_json::json!("\u{fffd}")));
    }

    #[tokio::test]
    async fn closing_kills_what_the_server_left_behind_even_if_it_ignores_sigterm() {
        use protocol_droid_test_support::running;
        // The server ends at once on its own; the helper it started ignores
        // SIGTERM (an ignored signal stays ignored across exec).
        let helper = ["sleep", "617.5"];
        let mut options =
            ChildOptions::new("sh", ["-c", "trap '' TERM; sleep 617.5 & exec sleep 0.2"]);
        options.grace = Duration::from_millis(300);
        let (inbound, _rx) = crate::application::client::inbound_queue();
        let child = ChildProcess::spawn(&options, inbound);
        let Ok(child) = child else {
            return assert!(child.is_ok(), "sh did not start");
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !running(&helper) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(running(&helper), "the helper started");
        child.close().await;
        // A killed process takes a moment to be gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running(&helper) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!running(&helper), "the helper outlived its server's close");
    }

    #[tokio::test]
    async fn a_missing_working_directory_is_named_not_taken_for_the_program() {
        let mut options = ChildOptions::new("true", Vec::<OsString>::new());
        let missing = std::env::temp_dir().join("droid-no-such-directory-for-a-child");
        options.cwd = Some(missing.clone());
        let (inbound, _rx) = crate::application::client::inbound_queue();
        let error = ChildProcess::spawn(&options, inbound)
            .err()
            .map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains(&missing.display().to_string())),
            "{error:?}"
        );
    }
}
