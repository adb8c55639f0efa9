//! Reading the configuration: the gateway's TOML, the JSON forms other MCP
//! clients keep (by the file's `.json` ending), or the embedded default.

use std::path::Path;

use anyhow::Context as _;
use protocol_droid::adapters::secondary::local_file;

use super::config::{Config, EMBEDDED_DEFAULT};
use super::json;

/// The most bytes a configuration file may hold.
const MAX_CONFIG: u64 = 64 * 1024 * 1024;

/// The text of the configuration file at `path`: a regular file (it is read
/// again whenever it changes, which a pipe cannot be, and a FIFO would
/// block the reader), of bounded size, UTF-8, without the byte-order mark
/// some editors write first.
pub(crate) fn config_text(path: &Path) -> anyhow::Result<String> {
    let bytes = local_file::read_regular(path, MAX_CONFIG)
        .with_context(|| format!("reading {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("reading {}: it is not UTF-8 text", path.display()))?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// `text` read as the gateway's TOML. A syntax error is told by its
/// message and place, without the line it quotes: that line may hold a
/// header's or a token's value.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> anyhow::Result<T> {
    toml::from_str(text).map_err(|error| {
        let place = error.span().map_or_else(String::new, |span| {
            let before = text.get(..span.start).unwrap_or_default();
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit('\n')
                .next()
                .unwrap_or_default()
                .chars()
                .count()
                + 1;
            format!(" at line {line}, column {column}")
        });
        anyhow::anyhow!(
            "{}{place}",
            super::unquoted::without_values(error.message().trim_end())
        )
    })
}

/// Says so when anyone on the machine may change the configuration at
/// `path`: it names the commands the gateway runs and where its tokens go.
fn warn_if_open(path: &Path) {
    if crate::secret::open_to_others(path, 0o002) {
        tracing::warn!(
            target: "droid",
            "{} is writable by every user of this machine, and it names the commands the \
             gateway runs: make it writable by its owner alone",
            path.display()
        );
    }
}

/// Reads `path`, or the embedded default, and checks what no form checks
/// on its own.
pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Config> {
    let config = match path {
        Some(path) => {
            let text = config_text(path)?;
            warn_if_open(path);
            let is_json = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"));
            if is_json {
                json::read(&text).with_context(|| format!("reading {}", path.display()))?
            } else {
                let config: Config = from_toml(&text)
                    .with_context(|| format!("reading {} as TOML", path.display()))?;
                warn_unexpanded(&config);
                config
            }
        }
        None => {
            let me = std::env::current_exe().context("finding this program")?;
            let text =
                EMBEDDED_DEFAULT.replace("{self}", &me.to_string_lossy().replace('\\', "\\\\"));
            toml::from_str(&text).context("reading the embedded configuration")?
        }
    };
    config.check()?;
    Ok(config)
}

/// Says so when a TOML value looks like a variable the JSON forms expand
/// (`${env:NAME}`): the TOML takes every value as written, and one copied
/// from a JSON file would otherwise be sent as those very characters.
fn warn_unexpanded(config: &Config) {
    for upstream in &config.upstream {
        let cwd = upstream.cwd.as_ref().map(|cwd| cwd.to_string_lossy());
        let mut values = upstream
            .command
            .iter()
            .flatten()
            .map(String::as_str)
            .chain(upstream.url.as_deref())
            .chain(upstream.headers.values().map(String::as_str))
            .chain(upstream.env.values().map(String::as_str))
            .chain(cwd.as_deref());
        if values.any(|value| value.contains("${")) {
            tracing::warn!(
                target: "droid",
                upstream = %upstream.name,
                "a value holds \"${{\", which the TOML form takes as written (variables are \
                 expanded in the JSON forms; here use bearer_token_env or pass_env)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_of_the_wrong_type_is_not_quoted() {
        let text = "[[upstream]]\nname = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                    headers = \"Authorization: Bearer SECRET_HDR\"\n";
        let refused = from_toml::<Config>(text)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"));
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| !e.contains("SECRET_HDR") && e.contains("expected a map")),
            "{refused:?}"
        );
        let json = r#"{"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp",
            "headers": "Authorization: Bearer SECRET_JSON"}}}"#;
        let refused = json::read(json).map(|_| ()).map_err(|e| format!("{e:#}"));
        assert!(
            refused.as_ref().is_err_and(|e| !e.contains("SECRET_JSON")),
            "{refused:?}"
        );
    }
}
