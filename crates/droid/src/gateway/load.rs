//! Reading the configuration: the gateway's TOML, the JSON forms other MCP
//! clients keep (by the file's `.json` ending), or the embedded default.

use std::path::Path;

use anyhow::Context as _;

use super::config::{Config, EMBEDDED_DEFAULT};
use super::json;

/// Reads `path`, or the embedded default, and checks what no form checks
/// on its own.
pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Config> {
    let config = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let is_json = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"));
            if is_json {
                json::read(&text).with_context(|| format!("reading {}", path.display()))?
            } else {
                toml::from_str(&text)
                    .with_context(|| format!("reading {} as TOML", path.display()))?
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
