//! What an operator lets through of one upstream's tools, and how it is
//! shown: an allow list, a deny list, renames and description overrides.
//!
//! The policy is applied to the upstream's definitions before they enter
//! the catalog, so the digest pinned for a tool is the digest of what
//! sessions are shown (a rewritten description is part of what a model
//! reads, and a drift under it is still caught). Calls go upstream under the
//! name the upstream gave the tool.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::domain::ir::JsonObject;

/// Which of an upstream's tools the gateway offers, under which names and
/// descriptions. Names here are the upstream's own, before any rename.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    allow: Option<BTreeSet<String>>,
    deny: BTreeSet<String>,
    rename: BTreeMap<String, String>,
    descriptions: BTreeMap<String, String>,
}

/// Why a policy cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A new name is empty or holds a `/`, the namespace separator.
    #[error("{0:?} cannot be a tool name: it must be non-empty and have no '/'")]
    BadName(String),
    /// Two tools would be offered under one name.
    #[error("two tools would both be called {0:?}")]
    Collision(String),
}

impl ToolPolicy {
    /// Offers only the tools named in `allow` (the default offers all).
    #[must_use]
    pub fn allow<I: IntoIterator<Item = S>, S: Into<String>>(mut self, allow: I) -> Self {
        self.allow = Some(allow.into_iter().map(Into::into).collect());
        self
    }

    /// Never offers the tools named in `deny`, even when allowed.
    #[must_use]
    pub fn deny<I: IntoIterator<Item = S>, S: Into<String>>(mut self, deny: I) -> Self {
        self.deny = deny.into_iter().map(Into::into).collect();
        self
    }

    /// Offers the upstream's tool `from` as `to`.
    ///
    /// # Errors
    ///
    /// When `to` is not a usable name, or is already the new name of
    /// another tool.
    pub fn rename(
        mut self,
        from: impl Into<String>,
        to: impl Into<String>,
    ) -> Result<Self, PolicyError> {
        let to = to.into();
        if to.is_empty() || to.contains('/') {
            return Err(PolicyError::BadName(to));
        }
        if self.rename.values().any(|taken| *taken == to) {
            return Err(PolicyError::Collision(to));
        }
        self.rename.insert(from.into(), to);
        Ok(self)
    }

    /// Shows `description` in place of the upstream's for the tool `name`.
    #[must_use]
    pub fn describe(mut self, name: impl Into<String>, description: impl Into<String>) -> Self {
        self.descriptions.insert(name.into(), description.into());
        self
    }

    /// Whether the policy changes nothing.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        *self == Self::default()
    }

    /// The names the policy mentions, for checking them against what the
    /// upstream offers (a typo in a deny list must not pass unnoticed).
    pub fn named(&self) -> impl Iterator<Item = &str> {
        self.allow
            .iter()
            .flatten()
            .chain(&self.deny)
            .chain(self.rename.keys())
            .chain(self.descriptions.keys())
            .map(String::as_str)
    }

    /// Whether the upstream's tool `name` (its own name) is offered.
    pub(super) fn admits(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|allow| allow.contains(name)) && !self.deny.contains(name)
    }

    /// The name the upstream knows the tool offered as `shown` by.
    #[must_use]
    pub fn upstream_name<'a>(&'a self, shown: &'a str) -> &'a str {
        self.rename
            .iter()
            .find(|(_, to)| to.as_str() == shown)
            .map_or(shown, |(from, _)| from.as_str())
    }

    /// The upstream's definitions as sessions are to see them: filtered,
    /// renamed and described. A renamed tool wins its new name over an
    /// upstream tool that already had it, which is dropped with a warning:
    /// the operator's rename says which one is meant.
    #[must_use]
    pub fn apply(&self, upstream: &str, definitions: Vec<JsonObject>) -> Vec<JsonObject> {
        if self.is_identity() {
            return definitions;
        }
        let mut shown = Vec::with_capacity(definitions.len());
        for mut definition in definitions {
            let Some(name) = definition.get("name").and_then(Value::as_str) else {
                continue;
            };
            let name = name.to_owned();
            if !self.admits(&name) {
                continue;
            }
            let renamed = self.rename.get(&name);
            if renamed.is_none() && self.rename.values().any(|to| *to == name) {
                tracing::warn!(
                    %upstream,
                    tool = %name,
                    "not offered: another tool is renamed to this name"
                );
                continue;
            }
            if let Some(description) = self.descriptions.get(&name) {
                definition.insert("description".to_owned(), Value::from(description.as_str()));
            }
            if let Some(to) = renamed {
                definition.insert("name".to_owned(), Value::from(to.as_str()));
            }
            shown.push(definition);
        }
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(names: &[&str]) -> Vec<JsonObject> {
        names
            .iter()
            .map(
                |n| match json!({ "name": n, "description": format!("{n}!"), "inputSchema": {} }) {
                    Value::Object(map) => map,
                    _ => unreachable!(),
                },
            )
            .collect()
    }

    fn names(definitions: &[JsonObject]) -> Vec<&str> {
        definitions
            .iter()
            .filter_map(|d| d.get("name").and_then(Value::as_str))
            .collect()
    }

    #[test]
    fn the_identity_passes_everything_unchanged() {
        let all = tools(&["a", "b"]);
        assert_eq!(ToolPolicy::default().apply("u", all.clone()), all);
    }

    #[test]
    fn a_denied_tool_stays_out_even_when_allowed() {
        let policy = ToolPolicy::default().allow(["a", "b"]).deny(["b"]);
        assert_eq!(names(&policy.apply("u", tools(&["a", "b", "c"]))), ["a"]);
        let policy = ToolPolicy::default().deny(["c"]);
        assert_eq!(
            names(&policy.apply("u", tools(&["a", "b", "c"]))),
            ["a", "b"]
        );
    }

    #[test]
    fn a_rename_shows_the_new_name_and_calls_the_old() -> Result<(), PolicyError> {
        let policy = ToolPolicy::default()
            .rename("a", "alpha")?
            .describe("a", "The first.");
        let shown = policy.apply("u", tools(&["a", "alpha", "b"]));
        // The upstream's own `alpha` gives way to the operator's rename.
        assert_eq!(names(&shown), ["alpha", "b"]);
        let first = shown.first().and_then(|d| d.get("description"));
        assert_eq!(first, Some(&Value::from("The first.")));
        assert_eq!(policy.upstream_name("alpha"), "a");
        assert_eq!(policy.upstream_name("b"), "b");
        Ok(())
    }

    #[test]
    fn bad_and_colliding_names_are_refused() {
        assert_eq!(
            ToolPolicy::default().rename("a", "x/y"),
            Err(PolicyError::BadName("x/y".to_owned()))
        );
        assert_eq!(
            ToolPolicy::default()
                .rename("a", "z")
                .and_then(|p| p.rename("b", "z")),
            Err(PolicyError::Collision("z".to_owned()))
        );
    }
}
