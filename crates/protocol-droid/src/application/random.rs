//! Random names: 128 bits from the operating system's CSPRNG, as lower-case
//! hex (visible ASCII, so fit for ids on any wire and in any key).
//!
//! Two kinds, by what a name must be when the system has no entropy to give:
//! a secret (a session id, a handle, a token) is then not made at all;
//! a name that must only never repeat (a task id behind its owner check, a
//! watch, a process's name) is made from the clock and a counter instead.

use std::sync::atomic::{AtomicU64, Ordering};

/// 128 random bits as hex; `None` without entropy.
pub(crate) fn secret_hex() -> Option<String> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex(&bytes))
}

/// 128 random bits as hex; without entropy, this process's moment and a
/// counter, unique but guessable.
pub(crate) fn unique_hex() -> String {
    secret_hex().unwrap_or_else(|| {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{n:016x}", now ^ u128::from(std::process::id()))
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_32_hex_digits_and_never_repeat() {
        let names: std::collections::BTreeSet<String> = (0..64).map(|_| unique_hex()).collect();
        assert_eq!(names.len(), 64);
        assert!(
            names
                .iter()
                .all(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        );
        assert_eq!(secret_hex().map(|s| s.len()), Some(32));
    }
}
