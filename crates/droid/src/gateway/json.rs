//! The JSON files other MCP clients keep, read as they are, so
//! `droid gateway --config ~/.cursor/mcp.json` serves what the editor would
//! start.
//!
//! Two shapes: `{"mcpServers": {NAME: ENTRY}}` (Claude Desktop, Claude
//! Code's `.mcp.json`, Cursor, Windsurf, Cline) and `{"servers": {NAME:
//! ENTRY}}` (VS Code's `mcp.json`). An entry is a command (`command`,
//! `args`, `env`, `cwd`) or a URL (`url`, `headers`), with an optional
//! `type` of `stdio`, `http` (or `streamable-http`) or `sse`, and is left
//! out when `disabled` is true or `enabled` false; `timeout` and `revision`
//! are read as in the TOML form. What those clients keep
//! for themselves (`autoApprove`, `alwaysAllow`, `inputs`, …) is passed
//! over.
//!
//! Variables are expanded in the command, its arguments, `env` values,
//! `cwd`, the URL and header values, in the forms those clients use:
//! `${env:NAME}`, `${NAME}` and `${NAME:-default}` (or
//! `${env:NAME:-default}`). A variable that is not set is an error naming
//! it, never an empty string: an empty token would fail later and further
//! from its cause. An editor's own variables
//! (`${input:…}`, `${workspaceFolder}`) have no meaning here and are
//! refused by name.
//!
//! Every upstream read this way is trusted on first use, and what was
//! trusted is kept in the gateway's state file: the first start takes the
//! servers as they are, later starts hold them to it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use serde::Deserialize;

use super::config::{Config, Mode, ToolsConfig, TrustConfig, UpstreamConfig};

#[derive(Debug, Deserialize)]
struct ClientFile {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<Servers>,
    servers: Option<Servers>,
}

/// The servers of a file, by name, in its order. A name given twice is
/// refused: a map would keep the last silently, and a file naming a server
/// twice most likely means two.
#[derive(Debug)]
struct Servers(Vec<(String, Entry)>);

impl<'de> Deserialize<'de> for Servers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Named;

        impl<'de> serde::de::Visitor<'de> for Named {
            type Value = Servers;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of servers by name")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Servers, A::Error> {
                let mut servers: Vec<(String, Entry)> = Vec::new();
                // A set beside the list: a file of many thousands of
                // servers is checked in one pass, not one per name.
                let mut seen = std::collections::HashSet::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "the server {name:?} is named twice"
                        )));
                    }
                    let entry = map.next_value()?;
                    servers.push((name, entry));
                }
                Ok(Servers(servers))
            }
        }

        deserializer.deserialize_map(Named)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    env_file: Option<String>,
    cwd: Option<String>,
    /// Windsurf calls it `serverUrl`.
    #[serde(alias = "serverUrl")]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    disabled: Option<bool>,
    enabled: Option<bool>,
    /// Seconds, as Cline keeps it.
    timeout: Option<f64>,
    /// The one revision to speak to it, as the TOML form's `revision`: no
    /// other client keeps this key, so it is the gateway's to read.
    revision: Option<String>,
    /// Everything else: what other clients keep there (`autoApprove`,
    /// `description`), or a misspelt setting, which is said rather than
    /// passed over in silence.
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

/// Reads a client's JSON configuration.
pub(crate) fn read(text: &str) -> anyhow::Result<Config> {
    read_with(text, &|name| std::env::var(name).ok())
}

fn read_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
    // Editors keep JSON with comments and trailing commas (VS Code's
    // `mcp.json` is such a file): blanked where they are, so positions in
    // an error still point into the file.
    let mut text = text.to_owned();
    json_strip_comments::strip(&mut text).context("reading the JSON's comments")?;
    // Without the values it quotes, which may be secrets (see
    // `without_values`).
    let file: ClientFile = serde_json::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "reading the JSON: {}",
            super::unquoted::without_values(&error.to_string())
        )
    })?;
    ensure!(
        file.mcp_servers.is_some() || file.servers.is_some(),
        "no \"mcpServers\" or \"servers\" object: not an MCP client configuration"
    );
    let mut upstream = Vec::new();
    for (name, entry) in file
        .mcp_servers
        .into_iter()
        .flat_map(|servers| servers.0)
        .chain(file.servers.into_iter().flat_map(|servers| servers.0))
    {
        // A server turned off is not read further: what it would need to
        // start (its variables, a type this program knows) is not asked of
        // it, since a server is turned off exactly when it cannot start.
        if entry.enabled == Some(false) || entry.disabled == Some(true) {
            continue;
        }
        // What other clients keep for themselves, which is theirs to read.
        let theirs = |key: &str| matches!(key, "autoApprove" | "alwaysAllow" | "description");
        for key in entry.other.keys().filter(|key| !theirs(key)) {
            tracing::warn!(
                target: "droid",
                "server {name:?}: {key:?} is not a setting read here (type, command, args, env, \
                 cwd, url or serverUrl, headers, disabled, enabled, timeout, revision); passed over",
            );
        }
        let config = entry
            .into_upstream(&name, env)
            .with_context(|| format!("server {name:?}"))?;
        upstream.push(config);
    }
    Ok(Config {
        listen: None,
        mode: Mode::Default,
        state: None,
        admin_socket: None,
        upstream,
        pins: BTreeMap::new(),
        scopes: BTreeMap::new(),
        limits: super::config::LimitsConfig::default(),
        store: super::config::StoreConfig::default(),
    })
}

impl Entry {
    fn into_upstream(
        self,
        name: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<UpstreamConfig> {
        // A URL or a header left empty by a variable set to nothing would
        // send an empty credential: refused, as an unset one is. Elsewhere
        // (a command's argument, a child's variable) empty may be meant.
        let expand_credential = |text: &str| expand(text, env, Empty::Refused);
        let expand = |text: &str| expand(text, env, Empty::Kept);
        let remote = match self.kind.as_deref() {
            None => self.url.is_some(),
            Some("stdio") => false,
            Some("http" | "streamable-http" | "streamableHttp" | "sse") => true,
            Some(other) => bail!("type {other:?} is none of stdio, http, streamable-http, sse"),
        };
        ensure!(
            self.env_file.is_none(),
            "envFile is not read here; list the variables under \"env\""
        );
        let mut config = UpstreamConfig {
            name: name.to_owned(),
            trust: TrustConfig::OnFirstUse,
            timeout: self.timeout,
            revision: self.revision,
            enabled: Some(true),
            tools: ToolsConfig::default(),
            ..UpstreamConfig::default()
        };
        if remote {
            let url = self.url.context("a remote server needs a \"url\"")?;
            ensure!(
                self.command.is_none(),
                "give a \"command\" or a \"url\", not both"
            );
            // Refused rather than passed over, as "headers" on a command
            // is: a setting that would silently do nothing.
            ensure!(
                self.args.is_empty() && self.env.is_empty() && self.cwd.is_none(),
                "\"args\", \"env\" and \"cwd\" are for servers started as a command"
            );
            config.url = Some(expand_credential(&url)?);
            for (header, value) in &self.headers {
                config
                    .headers
                    .insert(header.clone(), expand_credential(value)?);
            }
        } else {
            let command = self.command.context("a stdio server needs a \"command\"")?;
            ensure!(
                self.headers.is_empty(),
                "\"headers\" are for remote servers"
            );
            let mut argv = vec![expand(&command)?];
            for arg in &self.args {
                argv.push(expand(arg)?);
            }
            config.command = Some(argv);
            for (key, value) in &self.env {
                config.env.insert(key.clone(), expand(value)?);
            }
            config.cwd = self
                .cwd
                .as_deref()
                .map(expand)
                .transpose()?
                .map(PathBuf::from);
        }
        Ok(config)
    }
}

/// The variables an editor (VS Code and its kin) fills in itself.
const EDITOR_VARIABLES: [&str; 18] = [
    "workspaceFolder",
    "workspaceFolderBasename",
    "workspaceRoot",
    "file",
    "fileWorkspaceFolder",
    "relativeFile",
    "relativeFileDirname",
    "fileBasename",
    "fileBasenameNoExtension",
    "fileExtname",
    "fileDirname",
    "fileDirnameBasename",
    "cwd",
    "lineNumber",
    "selectedText",
    "execPath",
    "pathSeparator",
    "defaultBuildTask",
];

/// What a variable set to nothing stands for in [`expand`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Empty {
    /// Nothing, as in a shell (its `:-` default, if it has one, is taken).
    Kept,
    /// As if unset: its default, or an error.
    Refused,
}

/// `text` with its `${…}` variables replaced.
fn expand(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    empty: Empty,
) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            // The text itself is not repeated: it may be a secret.
            .context("an unclosed ${ (a variable without its closing brace)")?;
        let inner = &after[..end];
        let (variable, default) = match inner.split_once(":-") {
            Some((variable, default)) => (variable, Some(default)),
            None => (inner, None),
        };
        // An editor's own variable names no environment variable, even
        // when one of that name happens to be set; `${env:NAME}` does.
        ensure!(
            !EDITOR_VARIABLES.contains(&variable),
            "${{{variable}}} is the editor's own variable and means nothing here (set the value itself)"
        );
        // Cursor's form, with or without a default.
        let variable = variable.strip_prefix("env:").unwrap_or(variable);
        ensure!(
            is_name(variable),
            "${{{inner}}} is not an environment variable (set the value itself, or use ${{env:NAME}})"
        );
        // `:-` takes its default for a variable set to nothing too, as in
        // a shell; a credential left empty is refused as an unset one is.
        let value = env(variable);
        let set = value.as_ref().is_some_and(|value| !value.is_empty());
        match (value, default) {
            (Some(value), _) if set => out.push_str(&value),
            (_, Some(default)) => out.push_str(default),
            (Some(_), None) if empty == Empty::Kept => {}
            (Some(_), None) => bail!("the environment variable {variable} is set to nothing"),
            (None, None) => bail!("the environment variable {variable} is not set"),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            // Set, as it may be in a shell: the editor's variable still
            // names no environment variable.
            "workspaceFolder" => Some("/etc".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn claude_desktop_and_cursor_files_are_read_as_they_are() -> anyhow::Result<()> {
        let config = read_with(
            r#"{
              "mcpServers": {
                "everything": {
                  "command": "npx",
                  "args": ["-y", "@modelcontextprotocol/server-everything"],
                  "env": { "API_KEY": "${env:TOKEN}", "PLAIN": "a$b" },
                  "autoApprove": ["echo"]
                },
                "remote": {
                  "url": "https://example.test/mcp",
                  "headers": { "Authorization": "Bearer ${TOKEN}" }
                },
                "off": { "command": "x", "disabled": true },
                "needs-what-is-missing": {
                  "type": "websocket", "url": "wss://x/${env:NOT_SET}", "enabled": false
                }
              }
            }"#,
            &env,
        )?;
        // Servers turned off are passed over unread: neither a variable
        // that is not set nor a type this program does not know stops the
        // others.
        let [everything, remote] = &config.upstream[..] else {
            bail!("two upstreams expected: {:?}", config.upstream);
        };
        assert_eq!(
            everything.command.as_deref(),
            Some(&["npx", "-y", "@modelcontextprotocol/server-everything"].map(String::from)[..])
        );
        assert_eq!(
            everything.env.get("API_KEY").map(String::as_str),
            Some("s3cret")
        );
        assert_eq!(everything.env.get("PLAIN").map(String::as_str), Some("a$b"));
        assert_eq!(everything.trust, TrustConfig::OnFirstUse);
        assert_eq!(remote.url.as_deref(), Some("https://example.test/mcp"));
        assert_eq!(
            remote.headers.get("Authorization").map(String::as_str),
            Some("Bearer s3cret")
        );
        assert_eq!(
            config
                .enabled()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>(),
            ["everything", "remote"]
        );
        Ok(())
    }

    /// `revision` pins what is spoken to an upstream, as in the TOML form
    /// (a server whose newest revision lacks something a user needs).
    #[test]
    fn a_revision_is_read_as_the_toml_forms() -> anyhow::Result<()> {
        let config = read_with(
            r#"{ "mcpServers": { "py": { "command": "py-server", "revision": "2025-11-25" } } }"#,
            &env,
        )?;
        assert_eq!(
            config.upstream.first().and_then(|u| u.revision.as_deref()),
            Some("2025-11-25")
        );
        Ok(())
    }

    /// VS Code's `mcp.json` is JSON with comments and trailing commas.
    #[test]
    fn comments_and_trailing_commas_are_read_past() -> anyhow::Result<()> {
        let config = read_with(
            r#"{
              // Servers for this workspace.
              "servers": {
                /* the fixture */
                "memory": { "type": "stdio", "command": "npx", "args": ["-y", "x",], },
              },
            }"#,
            &env,
        )?;
        let [memory] = &config.upstream[..] else {
            bail!("one upstream expected: {:?}", config.upstream);
        };
        assert_eq!(
            memory.command.as_deref(),
            Some(&["npx", "-y", "x"].map(String::from)[..])
        );
        // A comment's marks inside a string are the string's.
        let config = read_with(
            r#"{ "servers": { "s": { "command": "a // b /* c */" } } }"#,
            &env,
        )?;
        assert_eq!(
            config.upstream.first().and_then(|u| u.command.clone()),
            Some(vec!["a // b /* c */".to_owned()])
        );
        Ok(())
    }

    #[test]
    fn vs_code_servers_with_types_are_read() -> anyhow::Result<()> {
        let config = read_with(
            r#"{
              "inputs": [{ "id": "key", "type": "promptString" }],
              "servers": {
                "local": { "type": "stdio", "command": "${HOME}/bin/server", "cwd": "${HOME}" },
                "web": { "type": "http", "url": "http://127.0.0.1:9/mcp" },
                "old": { "type": "sse", "url": "http://127.0.0.1:9/sse" }
              }
            }"#,
            &env,
        )?;
        let local = config.upstream.first().context("no upstream")?;
        assert_eq!(local.name, "local");
        assert_eq!(
            local.command.as_deref(),
            Some(&["/home/u/bin/server".to_owned()][..])
        );
        assert_eq!(local.cwd.as_deref(), Some(std::path::Path::new("/home/u")));
        assert!(config.upstream.iter().skip(1).all(|u| u.url.is_some()));
        Ok(())
    }

    #[test]
    fn a_server_named_twice_is_refused() {
        let twice = r#"{"mcpServers": {
            "fix": {"command": "droid", "args": ["serve"]},
            "fix": {"command": "/bin/cat"}
        }}"#;
        let refused = read_with(twice, &env)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"));
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("\"fix\" is named twice")),
            "{refused:?}"
        );
    }

    #[test]
    fn variables_expand_or_fail_by_name() {
        assert_eq!(
            expand("${NOPE:-fallback}/x", &env, Empty::Kept)
                .ok()
                .as_deref(),
            Some("fallback/x")
        );
        assert_eq!(
            expand("${env:NOPE:-fallback} ${env:HOME:-x}", &env, Empty::Kept)
                .ok()
                .as_deref(),
            Some("fallback /home/u")
        );
        assert_eq!(
            expand("$HOME ${HOME}", &env, Empty::Kept).ok().as_deref(),
            Some("$HOME /home/u")
        );
        // Named as an environment variable, it is one.
        assert_eq!(
            expand("${env:workspaceFolder}", &env, Empty::Kept)
                .ok()
                .as_deref(),
            Some("/etc")
        );
        // Set to nothing: kept as nothing outside credentials.
        assert_eq!(
            expand("-v${EMPTY}", &env, Empty::Kept).ok().as_deref(),
            Some("-v")
        );
        // In a credential, the default, or refused.
        assert_eq!(
            expand("Bearer ${EMPTY:-fallback}", &env, Empty::Refused)
                .ok()
                .as_deref(),
            Some("Bearer fallback")
        );
        for (text, needle) in [
            ("${NOPE}", "NOPE is not set"),
            ("${env:NOPE}", "NOPE is not set"),
            ("Bearer ${env:EMPTY}", "EMPTY is set to nothing"),
            (
                "${input:key}",
                "${input:key} is not an environment variable",
            ),
            ("${workspaceFolder}/x", "the editor's own variable"),
            ("${HOME", "an unclosed ${"),
        ] {
            let error = expand(text, &env, Empty::Refused)
                .err()
                .map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains(needle)),
                "{text}: {error:?}"
            );
        }
    }

    #[test]
    fn what_cannot_work_is_refused_naming_the_server() {
        for (text, needle) in [
            (
                r#"{"other": {}}"#,
                "no \"mcpServers\" or \"servers\" object",
            ),
            (
                r#"{"servers": {"a": {"type": "ws", "url": "x"}}}"#,
                "type \"ws\"",
            ),
            (
                r#"{"servers": {"a": {"type": "stdio"}}}"#,
                "needs a \"command\"",
            ),
            (r#"{"servers": {"a": {"type": "http"}}}"#, "needs a \"url\""),
            (
                r#"{"servers": {"a": {"command": "x", "envFile": ".env"}}}"#,
                "envFile is not read",
            ),
            (
                r#"{"servers": {"a": {"command": "x", "headers": {"A": "b"}}}}"#,
                "\"headers\" are for remote servers",
            ),
            (
                r#"{"servers": {"a": {"url": "https://x/mcp", "env": {"A": "b"}}}}"#,
                "are for servers started as a command",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "https://x/sse", "args": ["-v"]}}}"#,
                "are for servers started as a command",
            ),
        ] {
            let error = read_with(text, &env).err().map(|e| format!("{e:#}"));
            assert!(
                error.as_deref().is_some_and(|e| e.contains(needle)),
                "{text}: {error:?}"
            );
        }
    }
}
