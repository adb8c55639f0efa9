//! The gateway's [`TrustStore`] as a JSON file: the pins each upstream was
//! trusted with on first use, so a restart holds them rather than trusting
//! whatever the upstreams show by then, and the operator's approvals made on
//! the running gateway.
//!
//! ```json
//! {
//!   "trustedOnFirstUse": { "files": { "files/read_file": "3f1c…" } },
//!   "approved": { "files/write_file": { "digest": "9a0e…", "over": "77b2…" } }
//! }
//! ```
//!
//! The file is replaced whole on every change (written beside it, then
//! renamed over it), so a crash leaves the old state or the new one, never
//! half of either. It is readable by its owner only: it decides what tools
//! a gateway trusts.
//!
//! Several gateways may keep one file (each MCP client on a machine
//! starting its own on one configuration): a change is made to what the
//! file holds at that moment, under an exclusive lock on a file beside it
//! (`<file>.lock`), so each adds its records to the others' rather than
//! writing over them; the first record of an upstream's first use stands,
//! and the gateway that recorded later is told so. The approvals are read
//! from the file again each time they are asked for (a gateway asks at
//! start and at each reload of its configuration).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::application::gateway::{Approval, TrustStore, TrustStoreError};
use crate::domain::catalog::{SchemaDigest, ToolId};

/// How long a change waits for another gateway's lock on the file.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A [`TrustStore`] kept in one file.
#[derive(Debug)]
pub struct TrustFile {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct State {
    /// Upstream name, then tool id, then hex digest.
    #[serde(default)]
    trusted_on_first_use: BTreeMap<String, BTreeMap<String, String>>,
    /// Tool id, then what was approved.
    #[serde(default)]
    approved: BTreeMap<String, Approved>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Approved {
    digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    over: Option<String>,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustFileError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Someone else than this process's user may write the file (it is
    /// writable by its group or by anyone, or another user owns it): what
    /// it says is not taken, as whoever may write it decides which tools
    /// the gateway trusts.
    #[error("{path}: {detail}; make it this user's alone (chmod 600) or name another file")]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// Who else may write it.
        detail: String,
    },
    /// The file holds something else. It is left as it is: overwriting it
    /// would forget what it trusted.
    #[error("{path}: not a trust file: {detail}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl TrustFile {
    /// Opens the file at `path`, or starts an empty one there (it is written
    /// at the first change).
    ///
    /// # Errors
    ///
    /// When the file exists but cannot be read, or does not hold pins.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, TrustFileError> {
        let path = path.into();
        let state = read(&path)?;
        Ok(Self {
            path,
            state: Mutex::new(state),
        })
    }

    /// Where the file is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state as the file holds it now, kept as this store's; what was
    /// held when the file cannot be read (its error is the next write's).
    fn current(&self) -> std::sync::MutexGuard<'_, State> {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(state) = read(&self.path) {
            *held = state;
        }
        held
    }

    /// Makes `change` to what the file holds now, under the lock beside it,
    /// and writes the result, which this store then holds.
    fn update(&self, change: impl FnOnce(&mut State)) -> Result<(), TrustFileError> {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.make_folders()?;
        let _locked = self.lock()?;
        let mut state = read(&self.path)?;
        change(&mut state);
        self.write(&state)?;
        *held = state;
        Ok(())
    }

    /// An exclusive lock on `<file>.lock`, held until the value is dropped.
    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, TrustFileError> {
        let mut name = self.path.clone().into_os_string();
        name.push(".lock");
        let path = PathBuf::from(name);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        // The owner's alone, and never opened through a link planted there.
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options
                .mode(0o600)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
        }
        let file = options.open(&path).map_err(|source| TrustFileError::Io {
            path: path.clone(),
            source,
        })?;
        // Tried for a while rather than waited on: another gateway holds
        // it only to write a small file, and one stopped while holding it
        // must not stall this one's work for good.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut file = file;
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(locked),
                Err((back, nix::errno::Errno::EWOULDBLOCK))
                    if std::time::Instant::now() < deadline =>
                {
                    file = back;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err((_, errno)) => {
                    return Err(TrustFileError::Io {
                        path,
                        source: errno.into(),
                    });
                }
            }
        }
    }

    /// The folders the file goes in: made for its owner alone; a folder
    /// that exists is left as it is.
    fn make_folders(&self) -> Result<(), TrustFileError> {
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            let mut folders = std::fs::DirBuilder::new();
            folders.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut folders, 0o700);
            folders
                .create(parent)
                .map_err(|source| TrustFileError::Io {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    fn write(&self, state: &State) -> Result<(), TrustFileError> {
        let io = |source| TrustFileError::Io {
            path: self.path.clone(),
            source,
        };
        let mut staged = self.path.clone().into_os_string();
        staged.push(format!(".{}.tmp", std::process::id()));
        let staged = PathBuf::from(staged);
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| io(e.into()))?;
        // A file of that name left by a crash is removed, and the new one
        // made afresh (never opened through a link someone planted there,
        // nor keeping another file's mode).
        let _stale = std::fs::remove_file(&staged);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&staged).and_then(|mut file| {
            file.write_all(&bytes)?;
            file.write_all(b"\n")?;
            file.sync_all()
        });
        if let Err(source) = written.and_then(|()| std::fs::rename(&staged, &self.path)) {
            let _gone = std::fs::remove_file(&staged);
            return Err(io(source));
        }
        // The rename itself is durable once the folder is synced.
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(folder) = std::fs::File::open(parent) {
                let _synced = folder.sync_all();
            }
        }
        Ok(())
    }
}

/// Pins as the file keeps them, read back; a digest that does not read is
/// left out (the file is checked when read).
fn decoded(pins: &BTreeMap<String, String>) -> BTreeMap<ToolId, SchemaDigest> {
    pins.iter()
        .filter_map(|(id, hex)| Some((ToolId::new(id.as_str()), SchemaDigest::from_hex(hex)?)))
        .collect()
}

/// What the file at `path` holds: nothing yet when there is no file.
fn read(path: &Path) -> Result<State, TrustFileError> {
    let path = path.to_path_buf();
    let state = match read_own(&path) {
        Ok(bytes) => {
            let state: State =
                serde_json::from_slice(&bytes).map_err(|e| TrustFileError::Malformed {
                    path: path.clone(),
                    detail: e.to_string(),
                })?;
            for (id, approved) in &state.approved {
                let mut digests = std::iter::once(&approved.digest).chain(&approved.over);
                if digests.any(|hex| SchemaDigest::from_hex(hex).is_none()) {
                    return Err(TrustFileError::Malformed {
                        path,
                        detail: format!("the approval of {id} is not a digest"),
                    });
                }
            }
            for (upstream, pins) in &state.trusted_on_first_use {
                if let Some((id, _)) = pins
                    .iter()
                    .find(|(_, hex)| SchemaDigest::from_hex(hex).is_none())
                {
                    return Err(TrustFileError::Malformed {
                        path,
                        detail: format!("{upstream}: the pin of {id} is not a digest"),
                    });
                }
            }
            state
        }
        Err(Unread::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
        Err(Unread::Io(source)) => return Err(TrustFileError::Io { path, source }),
        Err(Unread::Unsafe(detail)) => return Err(TrustFileError::Unsafe { path, detail }),
    };
    Ok(state)
}

/// Why the file's bytes were not read.
enum Unread {
    Io(std::io::Error),
    /// Who else may write it.
    Unsafe(String),
}

/// The bytes of the file at `path`, if no one but this process's user may
/// write it; checked on the file opened, so that it cannot be swapped
/// between the look and the read.
fn read_own(path: &Path) -> Result<Vec<u8>, Unread> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let mut file = std::fs::File::open(path).map_err(Unread::Io)?;
    let metadata = file.metadata().map_err(Unread::Io)?;
    let user = nix::unistd::geteuid().as_raw();
    if metadata.uid() != user {
        return Err(Unread::Unsafe(format!(
            "owned by user {}, not by this one ({user})",
            metadata.uid()
        )));
    }
    // A group or anyone able to write it could approve any tool.
    let mode = metadata.mode();
    if mode & 0o022 != 0 {
        return Err(Unread::Unsafe(format!(
            "writable by others (mode {:o})",
            mode & 0o777
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(Unread::Io)?;
    Ok(bytes)
}

impl TrustStore for TrustFile {
    fn first_use(&self, upstream: &str) -> Option<BTreeMap<ToolId, SchemaDigest>> {
        // What this store holds, not read again: asked while the gateway
        // holds the lock its calls wait on. Another gateway's first use
        // meanwhile is met when this one records its own.
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Some(decoded(state.trusted_on_first_use.get(upstream)?))
    }

    fn record_first_use(
        &self,
        upstream: &str,
        pins: &BTreeMap<ToolId, SchemaDigest>,
    ) -> Result<Option<BTreeMap<ToolId, SchemaDigest>>, TrustStoreError> {
        let mine: BTreeMap<String, String> = pins
            .iter()
            .map(|(id, digest)| (id.as_str().to_owned(), digest.to_string()))
            .collect();
        let mut standing = None;
        self.update(|state| {
            // Recorded meanwhile by another gateway keeping this file: the
            // first use was that one's, and it stands.
            let recorded = state
                .trusted_on_first_use
                .entry(upstream.to_owned())
                .or_insert_with(|| mine.clone());
            if *recorded != mine {
                standing = Some(decoded(recorded));
            }
        })?;
        Ok(standing)
    }

    fn approvals(&self) -> Vec<Approval> {
        let state = self.current();
        state
            .approved
            .iter()
            .filter_map(|(id, approved)| {
                let over = match &approved.over {
                    Some(hex) => Some(SchemaDigest::from_hex(hex)?),
                    None => None,
                };
                Some(Approval::new(
                    ToolId::new(id.as_str()),
                    SchemaDigest::from_hex(&approved.digest)?,
                    over,
                ))
            })
            .collect()
    }

    fn record_approval(&self, approval: &Approval) -> Result<(), TrustStoreError> {
        self.record_approvals(std::slice::from_ref(approval))
    }

    fn record_approvals(&self, approvals: &[Approval]) -> Result<(), TrustStoreError> {
        Ok(self.update(|state| {
            for approval in approvals {
                state.approved.insert(
                    approval.id.as_str().to_owned(),
                    Approved {
                        digest: approval.digest.to_string(),
                        over: approval.over.map(|d| d.to_string()),
                    },
                );
            }
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file's path in a new folder that is removed with the guard.
    fn scratch() -> Result<(tempfile::TempDir, PathBuf), std::io::Error> {
        let dir = tempfile::Builder::new().prefix("droid-trust-").tempdir()?;
        let path = dir.path().join("state.json");
        Ok((dir, path))
    }

    #[test]
    fn what_is_recorded_is_there_after_reopening() -> Result<(), TrustStoreError> {
        let (_dir, path) = scratch()?;
        let store = TrustFile::open(&path)?;
        assert_eq!(store.first_use("files"), None);
        let digest = SchemaDigest::from_hex(&"ab".repeat(32)).ok_or("digest")?;
        let pins = BTreeMap::from([(ToolId::new("files/read"), digest)]);
        store.record_first_use("files", &pins)?;
        // An upstream that offered nothing was still used.
        store.record_first_use("empty", &BTreeMap::new())?;
        let approval = Approval::new(ToolId::new("files/write"), digest, None);
        store.record_approval(&approval)?;
        let again = TrustFile::open(&path)?;
        assert_eq!(again.first_use("files"), Some(pins));
        assert_eq!(again.approvals(), [approval]);
        assert_eq!(again.first_use("empty"), Some(BTreeMap::new()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)?.permissions().mode();
            assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
        }
        Ok(())
    }

    /// Two gateways keeping one file add to each other's records: neither
    /// writes over an approval or a first use the other made, the first
    /// record of an upstream's first use stands, and each reads the other's.
    #[test]
    fn two_stores_on_one_file_keep_each_others_records() -> Result<(), TrustStoreError> {
        let (_dir, path) = scratch()?;
        let one = TrustFile::open(&path)?;
        let two = TrustFile::open(&path)?;
        let digest = |hex: &str| SchemaDigest::from_hex(&hex.repeat(32)).ok_or("digest");
        let approval = Approval::new(ToolId::new("files/write"), digest("ab")?, None);
        one.record_approval(&approval)?;
        let first = BTreeMap::from([(ToolId::new("git/log"), digest("cd")?)]);
        assert_eq!(two.record_first_use("git", &first)?, None);
        // The later record is told the one that stands.
        let later = BTreeMap::from([(ToolId::new("git/log"), digest("ef")?)]);
        assert_eq!(one.record_first_use("git", &later)?, Some(first.clone()));
        for store in [&one, &two, &TrustFile::open(&path)?] {
            assert_eq!(store.approvals(), std::slice::from_ref(&approval));
            assert_eq!(store.first_use("git"), Some(first.clone()));
        }
        Ok(())
    }

    /// Folders the file needs are made for its owner alone.
    #[cfg(unix)]
    #[test]
    fn the_folders_made_for_it_are_the_owners_alone() -> Result<(), TrustStoreError> {
        use std::os::unix::fs::PermissionsExt as _;
        let (dir, _) = scratch()?;
        let path = dir.path().join("droid").join("gateway").join("state.json");
        let store = TrustFile::open(&path)?;
        store.record_first_use("files", &BTreeMap::new())?;
        for folder in [
            dir.path().join("droid"),
            dir.path().join("droid").join("gateway"),
        ] {
            let mode = std::fs::metadata(&folder)?.permissions().mode();
            assert_eq!(mode & 0o077, 0, "{}: {mode:o}", folder.display());
        }
        Ok(())
    }

    #[test]
    fn a_file_others_may_write_is_refused_not_trusted() -> Result<(), TrustStoreError> {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, path) = scratch()?;
        let store = TrustFile::open(&path)?;
        let id = ToolId::new("u/t");
        let digest = SchemaDigest::from_hex(&"ab".repeat(32)).ok_or("digest")?;
        store.record_first_use("u", &BTreeMap::from([(id, digest)]))?;
        for mode in [0o666, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            let error = TrustFile::open(&path).err().ok_or("opened")?;
            assert!(
                matches!(error, TrustFileError::Unsafe { .. }),
                "{mode:o}: {error}"
            );
            // Nor is what it says taken later, nor written over.
            assert!(store.first_use("u").is_some(), "held from before");
            assert!(store.record_approvals(&[]).is_err(), "{mode:o}");
        }
        // Readable by others is not writable by them.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        assert!(TrustFile::open(&path)?.first_use("u").is_some());
        Ok(())
    }

    #[test]
    fn a_file_that_holds_something_else_is_refused_not_overwritten()
    -> Result<(), Box<dyn std::error::Error>> {
        let (_dir, path) = scratch()?;
        std::fs::write(
            &path,
            b"{\"trustedOnFirstUse\": {\"u\": {\"u/t\": \"nope\"}}}",
        )?;
        let error = TrustFile::open(&path).err().ok_or("opened")?;
        assert!(error.to_string().contains("u/t is not a digest"), "{error}");
        std::fs::write(&path, b"[1, 2]")?;
        assert!(matches!(
            TrustFile::open(&path),
            Err(TrustFileError::Malformed { .. })
        ));
        assert_eq!(std::fs::read(&path)?, b"[1, 2]");
        Ok(())
    }
}
