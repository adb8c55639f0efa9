//! The primitives a server offers: tools, resources, resource templates,
//! prompts and completions, registered and removed at run time.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde_json::{Value, json};

use super::BoxFuture;
use super::call::{Call, CallError};
use crate::domain::ir::{JsonObject, ResourceContents, ToolResult};
use crate::wire::prompts::{GetPromptResult, Prompt};
use crate::wire::resources::{Resource, ResourceTemplate};
use crate::wire::tools::{TaskSupport, Tool, ToolAnnotations, ToolExecution};

/// A shared async handler producing `T`.
pub(crate) type Handler<T> =
    Arc<dyn Fn(Call) -> BoxFuture<'static, Result<T, CallError>> + Send + Sync>;

/// Boxes an async closure into a [`Handler`].
pub(crate) fn handler<T, F, Fut>(f: F) -> Handler<T>
where
    F: Fn(Call) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, CallError>> + Send + 'static,
{
    Arc::new(move |call| Box::pin(f(call)))
}

/// A registered tool.
#[derive(Clone)]
pub(crate) struct ToolEntry {
    /// The definition `tools/list` shows.
    pub tool: Tool,
    /// The scope a caller must hold to see and call it; `None` for everyone.
    pub scope: Option<String>,
    /// What runs on `tools/call`.
    pub handler: Handler<ToolResult>,
    /// Whether, run as a 2026-07-28 task, its handler first asks its
    /// questions in the request and starts the task itself
    /// ([`Call::continue_as_task`]); otherwise the task starts at once.
    pub task_after_input: bool,
}

impl ToolEntry {
    /// The entry registering `spec`, run by `handler`.
    pub(crate) fn new(spec: ToolSpec, handler: Handler<ToolResult>) -> Self {
        let task_after_input = spec.starts_task_after_input();
        let (tool, scope) = spec.into_parts();
        Self {
            tool,
            scope,
            handler,
            task_after_input,
        }
    }

    /// How the tool may be run as a task (`execution.taskSupport`; absent
    /// is forbidden).
    pub(crate) fn task_support(&self) -> TaskSupport {
        self.tool
            .execution
            .as_ref()
            .and_then(|e| e.task_support)
            .unwrap_or(TaskSupport::Forbidden)
    }
}

/// Tools registered, replaced, removed and scoped together, as one change
/// of a server's registry ([`Server::edit_tools`](super::Server::edit_tools)):
/// the registry is copied at most once (when a request is reading it) and
/// listeners are told once, however many tools change.
pub struct ToolEdits<'r> {
    tools: &'r mut BTreeMap<String, ToolEntry>,
}

impl<'r> ToolEdits<'r> {
    pub(super) fn new(tools: &'r mut BTreeMap<String, ToolEntry>) -> Self {
        Self { tools }
    }

    /// Registers a tool, replacing one of the same name, as
    /// [`Server::add_tool`](super::Server::add_tool) does.
    pub fn add<F, Fut>(&mut self, spec: ToolSpec, f: F)
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolResult, CallError>> + Send + 'static,
    {
        let entry = ToolEntry::new(spec, handler(f));
        self.tools.insert(entry.tool.name.clone(), entry);
    }

    /// Unregisters the tool `name`; whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// Makes the tool `name` require `scope` (or, with `None`, nothing);
    /// whether such a tool is registered.
    pub fn set_scope(&mut self, name: &str, scope: Option<String>) -> bool {
        self.tools
            .get_mut(name)
            .map(|entry| entry.scope = scope)
            .is_some()
    }
}

impl core::fmt::Debug for ToolEdits<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ToolEdits")
            .field("tools", &self.tools.len())
            .finish()
    }
}

/// A registered resource.
#[derive(Clone)]
pub(crate) struct ResourceEntry {
    /// The definition `resources/list` shows.
    pub resource: Resource,
    /// The scope a caller must hold; `None` for everyone.
    pub scope: Option<String>,
    /// What runs on `resources/read`; the call's arguments hold `uri`.
    pub handler: Handler<Vec<ResourceContents>>,
}

/// A registered resource template.
#[derive(Clone)]
pub(crate) struct TemplateEntry {
    /// The definition `resources/templates/list` shows.
    pub template: ResourceTemplate,
    /// The scope a caller must hold; `None` for everyone.
    pub scope: Option<String>,
    /// What runs on `resources/read` of a matching URI; the call's arguments
    /// hold `uri` and every template variable.
    pub handler: Handler<Vec<ResourceContents>>,
}

/// A registered prompt.
#[derive(Clone)]
pub(crate) struct PromptEntry {
    /// The definition `prompts/list` shows.
    pub prompt: Prompt,
    /// The scope a caller must hold; `None` for everyone.
    pub scope: Option<String>,
    /// What runs on `prompts/get`.
    pub handler: Handler<GetPromptResult>,
}

/// Answers `completion/complete`: given the params, the values to offer.
pub(crate) type Completer = Arc<dyn Fn(&JsonObject) -> Vec<String> + Send + Sync>;

/// Everything a server offers, in a deterministic (name) order.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    /// Tools by name.
    pub tools: BTreeMap<String, ToolEntry>,
    /// Resources by URI.
    pub resources: BTreeMap<String, ResourceEntry>,
    /// Resource templates by URI template.
    pub templates: BTreeMap<String, TemplateEntry>,
    /// Prompts by name.
    pub prompts: BTreeMap<String, PromptEntry>,
    /// The completion handler, if the server offers completions.
    pub completer: Option<Completer>,
}

/// Handlers are closures, so the entries print what they register.
macro_rules! debug_entry {
    ($entry:ident, $field:ident, $key:ident) => {
        impl core::fmt::Debug for $entry {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($entry))
                    .field(stringify!($key), &self.$field.$key)
                    .field("scope", &self.scope)
                    .finish_non_exhaustive()
            }
        }
    };
}

debug_entry!(ToolEntry, tool, name);
debug_entry!(ResourceEntry, resource, uri);
debug_entry!(TemplateEntry, template, uri_template);
debug_entry!(PromptEntry, prompt, name);

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("resources", &self.resources.keys().collect::<Vec<_>>())
            .field("templates", &self.templates.keys().collect::<Vec<_>>())
            .field("prompts", &self.prompts.keys().collect::<Vec<_>>())
            .field("completions", &self.completer.is_some())
            .finish()
    }
}

/// Whether a caller holding `has_scope` may see an entry requiring `scope`.
pub(crate) fn visible(scope: Option<&String>, has_scope: impl Fn(&str) -> bool) -> bool {
    scope.is_none_or(|s| has_scope(s))
}

/// Matches `uri` against an RFC 6570 level-1 template (`{var}` segments),
/// answering the variables.
#[must_use]
pub(crate) fn match_template(template: &str, uri: &str) -> Option<JsonObject> {
    let mut vars = JsonObject::new();
    let mut rest = uri;
    let mut pattern = template;
    while !pattern.is_empty() {
        match pattern.find('{') {
            None => return (rest == pattern).then_some(vars),
            Some(open) => {
                let (literal, after) = pattern.split_at(open);
                rest = rest.strip_prefix(literal)?;
                let close = after.find('}')?;
                let name = after.get(1..close)?;
                pattern = after.get(close + 1..)?;
                // A variable runs to the next literal character, and never
                // across a `/`, so `{id}` matches one path segment.
                let stop = pattern.chars().next();
                let end = rest
                    .find(|c: char| Some(c) == stop || c == '/')
                    .unwrap_or(rest.len());
                let (value, tail) = rest.split_at(end);
                if value.is_empty() {
                    return None;
                }
                vars.insert(name.to_owned(), Value::String(value.to_owned()));
                rest = tail;
            }
        }
    }
    rest.is_empty().then_some(vars)
}

/// Builds a tool definition.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    tool: Tool,
    scope: Option<String>,
    task_after_input: bool,
}

impl ToolSpec {
    /// A tool called `name`, described by `description`, taking no arguments.
    #[must_use]
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        let mut input_schema = JsonObject::new();
        input_schema.insert("type".to_owned(), json!("object"));
        input_schema.insert("properties".to_owned(), json!({}));
        Self {
            tool: Tool {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                input_schema,
                output_schema: None,
                annotations: None,
                execution: None,
                icons: None,
                meta: None,
                extra: JsonObject::new(),
            },
            scope: None,
            task_after_input: false,
        }
    }

    /// A tool exactly as `tool` defines it: what a gateway or bridge uses to
    /// offer a definition it read from elsewhere.
    #[must_use]
    pub const fn from_definition(tool: Tool) -> Self {
        Self {
            tool,
            scope: None,
            task_after_input: false,
        }
    }

    /// Takes arguments shaped like `T`, with the schema schemars derives.
    #[must_use]
    pub fn input<T: JsonSchema>(self) -> Self {
        self.input_schema(Value::Object(super::typed::schema_of::<T>()))
    }

    /// Takes arguments matching `schema` (a JSON Schema object), as given.
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        if let Value::Object(mut schema) = schema {
            // The schema's own title names the Rust type, which means
            // nothing to a client.
            schema.remove("title");
            self.tool.input_schema = schema;
        }
        self
    }

    /// Declares the structured output's schema.
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        if let Value::Object(schema) = schema {
            self.tool.output_schema = Some(schema);
        }
        self
    }

    /// Declares hints about the tool's behaviour (`readOnlyHint`,
    /// `destructiveHint` and the rest), which clients may use to decide
    /// whether to ask their user before a call.
    #[must_use]
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.tool.annotations = Some(annotations);
        self
    }

    /// Requires `scope` to see and call the tool.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Lets the tool run as a task (`execution.taskSupport`): `Optional`
    /// when a call may run either way, `Required` when it only runs as one.
    ///
    /// The handler is the same async function either way; the runtime runs
    /// it in the background when the call is a task. A 2025-11-25 client
    /// asks for a task with `params.task`; a 2026-07-28 client that
    /// declares the `io.modelcontextprotocol/tasks` extension gets one
    /// whenever the tool supports it; a `Required` tool called without the
    /// extension is refused with `-32021`, an `Optional` one runs in the
    /// request. A question the handler asks while it runs as a task parks
    /// the task in `input_required` until the client answers it.
    #[must_use]
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        let execution = self
            .tool
            .execution
            .get_or_insert_with(ToolExecution::default);
        execution.task_support = Some(support);
        self
    }

    /// Has a 2026-07-28 task start only when the handler calls
    /// [`Call::continue_as_task`]: its questions before that are asked in
    /// the request, as rounds of `InputRequiredResult`, and the round that
    /// starts the task answers with it. For a tool that gathers what it
    /// needs and then works for a long time. A 2025-11-25 task, which the
    /// client asked for, starts at once all the same.
    #[must_use]
    pub const fn task_after_input(mut self) -> Self {
        self.task_after_input = true;
        self
    }

    /// Whether [`Self::task_after_input`] was asked for.
    #[must_use]
    pub const fn starts_task_after_input(&self) -> bool {
        self.task_after_input
    }

    /// The definition and scope, for registration.
    #[must_use]
    pub fn into_parts(self) -> (Tool, Option<String>) {
        (self.tool, self.scope)
    }
}

#[cfg(test)]
mod tests {
    // Indexing a `serde_json::Value` yields `Null` for a missing member.
    #![allow(clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn a_template_variable_matches_one_segment() {
        let vars = match_template("test://template/{id}/data", "test://template/123/data");
        assert_eq!(vars.and_then(|v| v.get("id").cloned()), Some(json!("123")));
        assert_eq!(
            match_template("test://template/{id}/data", "test://template/1/2/data"),
            None
        );
        assert_eq!(
            match_template("test://template/{id}/data", "test://template//data"),
            None
        );
        assert_eq!(
            match_template("test://static", "test://static"),
            Some(JsonObject::new())
        );
        assert_eq!(match_template("test://static", "test://static/x"), None);
    }

    /// Arguments a typed tool takes.
    #[derive(JsonSchema)]
    #[allow(dead_code)] // Read only through its schema here.
    struct Weather {
        /// The city.
        city: String,
        /// Days ahead.
        days: Option<u8>,
    }

    #[test]
    fn a_typed_tool_publishes_the_schema_of_its_arguments() {
        let (tool, _) = ToolSpec::new("weather", "Forecast")
            .input::<Weather>()
            .into_parts();
        let schema = Value::Object(tool.input_schema);
        assert_eq!(schema["type"], json!("object"));
        assert_eq!(schema["properties"]["city"]["type"], json!("string"));
        assert_eq!(schema["required"], json!(["city"]));
        assert!(
            schema.get("title").is_none(),
            "the Rust type's name is not the client's business"
        );
    }

    #[test]
    fn an_unscoped_entry_is_visible_to_everyone_and_a_scoped_one_needs_it() {
        assert!(visible(None, |_| false));
        let scope = "tools:admin".to_owned();
        assert!(!visible(Some(&scope), |_| false));
        assert!(visible(Some(&scope), |s| s == "tools:admin"));
    }
}
