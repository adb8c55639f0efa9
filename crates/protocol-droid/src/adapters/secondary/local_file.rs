//! Files an operator names by path (a token, a CA bundle, a key set, a
//! configuration), read as such a file must be: a regular file, of a
//! bounded size. A FIFO or a device at the path would otherwise block the
//! reading thread for as long as nobody writes to it, or never end.

use std::io::{self, Read as _};
use std::path::Path;

/// The bytes of the regular file at `path` (symbolic links followed), at
/// most `max_bytes` of them.
///
/// # Errors
///
/// [`io::ErrorKind::InvalidInput`] when the path names something other
/// than a regular file, [`io::ErrorKind::InvalidData`] when the file holds
/// more than `max_bytes`; any error of reading it.
pub fn read_regular(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let not_regular = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        )
    };
    // Looked at before it is opened: opening a FIFO waits for a writer,
    // and opening a device may do something.
    let looked = std::fs::metadata(path)?;
    if !looked.is_file() {
        return Err(not_regular());
    }
    // Opened without waiting and without taking a terminal, then looked at
    // again through the handle: what is read is the file looked at, not
    // whatever was put at the path in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY).bits())
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() || (metadata.dev(), metadata.ino()) != (looked.dev(), looked.ino()) {
        return Err(not_regular());
    }
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max_bytes} bytes", path.display()),
        )
    };
    if metadata.len() > max_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    // A file that grew since it was looked at is still read within bounds.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).map_or(true, |length| length > max_bytes) {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_its_bound_is_read() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("token");
        std::fs::write(&file, b"abc")?;
        assert_eq!(read_regular(&file, 3)?, b"abc");
        let over = read_regular(&file, 2).map_err(|e| e.kind());
        assert_eq!(over, Err(io::ErrorKind::InvalidData));
        let directory = read_regular(dir.path(), 1024).map_err(|e| e.kind());
        assert_eq!(directory, Err(io::ErrorKind::InvalidInput));
        let device = read_regular(Path::new("/dev/zero"), 1024).map_err(|e| e.kind());
        assert_eq!(device, Err(io::ErrorKind::InvalidInput));
        // A FIFO nobody writes to is refused at once, not waited on.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(io::Error::from)?;
        let fifo = read_regular(&fifo, 1024).map_err(|e| e.kind());
        assert_eq!(fifo, Err(io::ErrorKind::InvalidInput));
        Ok(())
    }
}
