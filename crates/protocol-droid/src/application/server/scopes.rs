//! Scopes over what a server serves through a [`Forward`](super::Forward).
//!
//! A registered primitive carries its own scope in the registry. A forwarded
//! one is the upstream's, and the upstream knows nothing of this server's
//! callers, so the rules live here and the dispatcher applies them around the
//! forwarder: a list loses what the caller may not see, and a call, get,
//! read, subscription or completion naming it is answered exactly as if it
//! did not exist, so a refusal never confirms that it does.

use std::collections::HashMap;

use serde_json::Value;

/// The primitive a request names, as a scope rule is looked up by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named<'a> {
    /// A tool called.
    Tool(&'a str),
    /// A prompt got.
    Prompt(&'a str),
    /// A resource read, subscribed to or unsubscribed from.
    Resource(&'a str),
    /// A prompt whose argument is completed.
    CompletionOfPrompt(&'a str),
    /// A resource template (or resource) whose argument is completed.
    CompletionOfResource(&'a str),
}

/// The kind of primitive a scope rule names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// A tool, by name.
    Tool,
    /// A prompt, by name.
    Prompt,
    /// A resource, by URI.
    Resource,
    /// A resource template, by its URI template; it also covers every URI
    /// the template matches.
    Template,
}

impl Primitive {
    /// The word a rule uses for this kind: `tool`, `prompt`, `resource`,
    /// `template`.
    #[must_use]
    pub const fn word(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::Resource => "resource",
            Self::Template => "template",
        }
    }
}

/// Which scope each forwarded primitive requires; a primitive no rule names
/// is open to every caller the transport admitted.
#[derive(Clone, Debug, Default)]
pub struct ScopeRules {
    rules: HashMap<(Primitive, String), String>,
}

impl ScopeRules {
    /// Makes the primitive of `kind` called `name` require `scope`.
    pub fn require(&mut self, kind: Primitive, name: impl Into<String>, scope: impl Into<String>) {
        self.rules.insert((kind, name.into()), scope.into());
    }

    /// Whether no rule is set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every rule, as `(kind, name, scope)`.
    pub fn iter(&self) -> impl Iterator<Item = (Primitive, &str, &str)> {
        self.rules
            .iter()
            .map(|((kind, name), scope)| (*kind, name.as_str(), scope.as_str()))
    }

    fn scope(&self, kind: Primitive, name: &str) -> Option<&str> {
        // Lookups by a borrowed name without building the key: the table is
        // small and read on every forwarded request. A URI's letters match
        // either case: a scheme is case-insensitive, and an upstream may
        // treat the rest so too; a rule covering more is the safe error.
        let same = |n: &str| match kind {
            Primitive::Tool | Primitive::Prompt => n == name,
            Primitive::Resource | Primitive::Template => n.eq_ignore_ascii_case(name),
        };
        self.rules
            .iter()
            .find(|((k, n), _)| *k == kind && same(n))
            .map(|(_, scope)| scope.as_str())
    }

    /// Whether a caller holding `has` may see the tool `name`.
    pub(crate) fn admits_tool(&self, name: &str, has: impl Fn(&str) -> bool) -> bool {
        self.scope(Primitive::Tool, name).is_none_or(has)
    }

    /// Whether a caller holding `has` may read the resource at `uri`: the
    /// resource's own rule, and that of every template matching it.
    pub(crate) fn admits_resource(&self, uri: &str, has: impl Fn(&str) -> bool) -> bool {
        let own = self.scope(Primitive::Resource, uri).is_none_or(&has);
        own && self.rules.iter().all(|((kind, template), scope)| {
            *kind != Primitive::Template || !may_be_of(template, uri) || has(scope)
        })
    }

    /// Whether a caller holding `has` may make a request naming `target`.
    pub(crate) fn admits(&self, target: Named<'_>, has: impl Fn(&str) -> bool) -> bool {
        match target {
            Named::Tool(name) => self.admits_tool(name, has),
            Named::Prompt(name) | Named::CompletionOfPrompt(name) => {
                self.scope(Primitive::Prompt, name).is_none_or(has)
            }
            Named::Resource(uri) => self.admits_resource(uri, has),
            Named::CompletionOfResource(uri) => {
                self.scope(Primitive::Template, uri).is_none_or(&has)
                    && self.admits_resource(uri, &has)
            }
        }
    }

    /// Removes from the list result of `method` what a caller holding `has`
    /// may not see.
    pub(crate) fn filter_list(&self, method: &str, result: &mut Value, has: impl Fn(&str) -> bool) {
        let (member, kind, key) = match method {
            "tools/list" => ("tools", Primitive::Tool, "name"),
            "prompts/list" => ("prompts", Primitive::Prompt, "name"),
            "resources/list" => ("resources", Primitive::Resource, "uri"),
            "resources/templates/list" => ("resourceTemplates", Primitive::Template, "uriTemplate"),
            _ => return,
        };
        let Some(Value::Array(items)) = result.get_mut(member) else {
            return;
        };
        items.retain(|item| {
            let name = item.get(key).and_then(Value::as_str).unwrap_or_default();
            match kind {
                Primitive::Resource => self.admits_resource(name, &has),
                other => self.scope(other, name).is_none_or(&has),
            }
        });
    }
}

/// Whether `uri` could be one of `template`'s, as a rule reads it: each
/// expression (`{id}`, `{+path}`, `{?q}`, any operator) stands for any text,
/// slashes and nothing included, and letters match either case. Wider than
/// any server's own matching (this crate's stops a variable at `/`; others
/// read `{+path}` across segments), because the upstream, not this server,
/// decides which URIs a template serves: a rule must cover them all.
fn may_be_of(template: &str, uri: &str) -> bool {
    let template = template.to_ascii_lowercase();
    let uri = uri.to_ascii_lowercase();
    // The literal text between expressions; an unclosed `{` is literal.
    let mut literals = Vec::new();
    let mut rest = template.as_str();
    while let Some((literal, expression)) = rest
        .split_once('{')
        .and_then(|(literal, after)| after.split_once('}').map(|(_, tail)| (literal, tail)))
    {
        literals.push(literal);
        rest = expression;
    }
    literals.push(rest);
    let (Some((first, middle_and_last)), true) = (literals.split_first(), literals.len() > 1)
    else {
        return template == uri;
    };
    let Some((last, middle)) = middle_and_last.split_last() else {
        return template == uri;
    };
    let Some(between) = uri
        .strip_prefix(first)
        .and_then(|tail| tail.strip_suffix(last))
    else {
        return false;
    };
    // Each literal between two expressions, found in order as early as it
    // can be: the leftmost place leaves the most for what follows.
    let mut unread = between;
    for literal in middle {
        match unread.find(literal) {
            Some(at) => unread = unread.get(at + literal.len()..).unwrap_or_default(),
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules() -> ScopeRules {
        let mut rules = ScopeRules::default();
        rules.require(Primitive::Tool, "admin", "tools:admin");
        rules.require(Primitive::Prompt, "secret", "prompts:secret");
        rules.require(Primitive::Resource, "file:///etc/shadow", "files:root");
        rules.require(Primitive::Template, "notes://{id}", "notes:read");
        rules
    }

    #[test]
    fn a_caller_without_the_scope_is_refused_every_request_naming_it() {
        let rules = rules();
        let nobody = |_: &str| false;
        for target in [
            Named::Tool("admin"),
            Named::Prompt("secret"),
            Named::Resource("file:///etc/shadow"),
            Named::Resource("notes://7"),
            Named::CompletionOfPrompt("secret"),
            Named::CompletionOfResource("notes://{id}"),
        ] {
            assert!(!rules.admits(target, nobody), "{target:?}");
            assert!(rules.admits(target, |_| true), "{target:?}");
        }
        assert!(rules.admits(Named::Tool("open"), nobody));
    }

    #[test]
    fn a_template_rule_covers_every_uri_an_upstream_could_serve_through_it() {
        let mut rules = ScopeRules::default();
        rules.require(Primitive::Template, "up+file:///{path}", "files:read");
        rules.require(
            Primitive::Template,
            "notes://{id}/v/{+rev}{?q}",
            "notes:read",
        );
        let nobody = |_: &str| false;
        for uri in [
            "up+file:///hostname",
            "up+file:///etc/hostname",
            "up+file:////etc/hostname",
            "up+file:///",
            "UP+FILE:///etc/shadow",
            "notes://1/v/2",
            "notes://a/b/v/c/d?q=1",
        ] {
            assert!(!rules.admits(Named::Resource(uri), nobody), "{uri}");
        }
        for uri in [
            "up+files:///x",
            "up+file://x",
            "notes://1/w/2",
            "file:///etc/hostname",
        ] {
            assert!(rules.admits(Named::Resource(uri), nobody), "{uri}");
        }
        // A resource's own rule, by its URI in either case.
        rules.require(Primitive::Resource, "up+secret://x", "secret");
        assert!(!rules.admits(Named::Resource("UP+SECRET://x"), nobody));
    }

    #[test]
    fn a_list_loses_exactly_what_the_caller_may_not_see() {
        let rules = rules();
        let mut listed = json!({ "tools": [{ "name": "admin" }, { "name": "open" }] });
        rules.filter_list("tools/list", &mut listed, |_| false);
        assert_eq!(listed, json!({ "tools": [{ "name": "open" }] }));
        let mut resources = json!({ "resources": [
            { "uri": "notes://1" }, { "uri": "file:///etc/shadow" }, { "uri": "file:///tmp/x" }] });
        rules.filter_list("resources/list", &mut resources, |s| s == "files:root");
        assert_eq!(
            resources,
            json!({ "resources": [{ "uri": "file:///etc/shadow" }, { "uri": "file:///tmp/x" }] })
        );
    }
}
