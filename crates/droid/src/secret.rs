//! Secrets the command line needs: from an environment variable or a file,
//! never from argv, which every user of the machine can read in `ps`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use protocol_droid::adapters::secondary::authorizer::{
    Authorizer, StaticToken, TokenFile, check_token,
};
use protocol_droid::adapters::secondary::local_file;

/// A secret read from the variable `env` or from the file `file`; `None`
/// when neither is given. Both at once is an error: which one wins would
/// be a guess.
pub(crate) fn read(env: &str, file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let from_env = std::env::var(env).ok().filter(|value| !value.is_empty());
    match (from_env, file) {
        (Some(_), Some(path)) => anyhow::bail!(
            "both {env} and {} are set; give the secret one way",
            path.display()
        ),
        (Some(value), None) => Ok(Some(value)),
        (None, file) => read_file(file),
    }
}

/// Says so when every user of the machine may read the secret at `path`.
/// Said, not refused: a secret mounted into a container is often so, with
/// no other user there to read it.
fn warn_if_readable_by_anyone(path: &Path) {
    if open_to_others(path, 0o004) {
        tracing::warn!(
            target: "droid",
            "the secret in {} is readable by every user of this machine: make it readable by its owner alone",
            path.display()
        );
    }
}

/// Whether the file at `path` gives every user of the machine the
/// permission bits `others` (`0o004` to read, `0o002` to write).
pub(crate) fn open_to_others(path: &Path, others: u32) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.permissions().mode() & others != 0)
}

/// The most bytes a file holding one secret may: secrets are kilobytes.
const MAX_SECRET_FILE: u64 = 64 * 1024;

fn read_file(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(path) = file else {
        return Ok(None);
    };
    let bytes = local_file::read_regular(path, MAX_SECRET_FILE)
        .with_context(|| format!("reading the secret in {}", path.display()))?;
    warn_if_readable_by_anyone(path);
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("the secret in {} is not UTF-8 text", path.display()))?;
    // Files written by `echo` end in a newline no secret contains.
    let value = text.trim_end_matches(['\n', '\r']).to_owned();
    anyhow::ensure!(!value.is_empty(), "{} is empty", path.display());
    Ok(Some(value))
}

/// A secret from the variable named `env` or from the file `file`, for
/// settings that name their own variable; `None` when neither is given.
pub(crate) fn read_named(env: Option<&str>, file: Option<&Path>) -> anyhow::Result<Option<String>> {
    match env {
        Some(name) => {
            anyhow::ensure!(
                file.is_none(),
                "give the secret one way, a variable or a file"
            );
            // Repeated only when it reads as a variable's name is written
            // (capitals, digits and `_`): anything else may be the token
            // itself (`ghp_…`, `sk_live_…`), written where its variable's
            // name belongs.
            let named = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            let value = std::env::var(name)
                .ok()
                .filter(|value| !value.is_empty())
                .with_context(|| {
                    if named {
                        format!("the environment variable {name} is not set")
                    } else {
                        "the environment variable named is not set (its name, not in \
                         capitals, is not repeated: is it the secret itself?)"
                            .to_owned()
                    }
                })?;
            Ok(Some(value))
        }
        None => read_file(file),
    }
}

/// What presents `token`, read by [`read`] or [`read_named`] from `file`
/// or else from the variable `variable`, to an upstream as a bearer token.
/// A token from a file is read again when the server refuses it, so a file
/// rotated in place is taken up without a restart.
pub(crate) fn bearer(
    token: Option<String>,
    file: Option<&Path>,
    variable: &str,
) -> anyhow::Result<Option<Arc<dyn Authorizer>>> {
    let Some(token) = token else {
        return Ok(None);
    };
    // Refused here, by where it came from, rather than sent as no token.
    if let Err(why) = check_token(&token) {
        match file {
            Some(path) => anyhow::bail!("the token in {}: {why}", path.display()),
            None => anyhow::bail!("the token in the environment variable {variable}: {why}"),
        }
    }
    Ok(Some(match file {
        Some(path) => Arc::new(
            TokenFile::open(path)
                .with_context(|| format!("reading the secret in {}", path.display()))?,
        ),
        None => Arc::new(StaticToken::new(token)),
    }))
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn a_token_a_header_cannot_carry_is_refused_by_where_it_came_from() {
        let refused = bearer(Some("line\nbreak".to_owned()), None, "WEB_TOKEN")
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(refused.contains("WEB_TOKEN"), "{refused}");
        let taken = bearer(Some("abc".to_owned()), None, "WEB_TOKEN");
        assert!(taken.is_ok_and(|authorizer| authorizer.is_some()));
    }
}
