//! Building the definitions of resources and prompts, as [`ToolSpec`]
//! builds a tool's: the required members first, the rest by name.
//!
//! [`Server::add_text_resource`](super::Server::add_text_resource) and
//! [`Server::add_typed_prompt`](super::Server::add_typed_prompt) take these,
//! so a resource or a prompt is as short to offer as a typed tool.
//!
//! [`ToolSpec`]: super::ToolSpec

use schemars::JsonSchema;
use serde_json::Value;

use super::typed::schema_of;
use crate::domain::ir::{ContentBlock, JsonObject, Role};
use crate::wire::prompts::{GetPromptResult, Prompt, PromptArgument, PromptMessage};
use crate::wire::resources::Resource;

/// Builds a resource definition.
#[derive(Clone, Debug)]
pub struct ResourceSpec {
    resource: Resource,
    scope: Option<String>,
}

impl ResourceSpec {
    /// The resource at `uri`, called `name`.
    #[must_use]
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            resource: Resource {
                uri: uri.into(),
                name: name.into(),
                title: None,
                description: None,
                mime_type: None,
                annotations: None,
                size: None,
                icons: None,
                meta: None,
                extra: JsonObject::new(),
            },
            scope: None,
        }
    }

    /// What the resource holds, for a model deciding whether to read it.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.resource.description = Some(description.into());
        self
    }

    /// Its media type (`text/plain`, `application/json`, ...).
    #[must_use]
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.resource.mime_type = Some(mime_type.into());
        self
    }

    /// Requires `scope` to see and read it.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The definition and scope, for registration.
    #[must_use]
    pub fn into_parts(self) -> (Resource, Option<String>) {
        (self.resource, self.scope)
    }
}

/// Builds a prompt definition.
#[derive(Clone, Debug)]
pub struct PromptSpec {
    prompt: Prompt,
    scope: Option<String>,
}

impl PromptSpec {
    /// A prompt called `name`, described by `description`, taking no
    /// arguments.
    #[must_use]
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            prompt: Prompt {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                arguments: None,
                icons: None,
                meta: None,
                extra: JsonObject::new(),
            },
            scope: None,
        }
    }

    /// Takes one argument (prompt arguments are strings).
    #[must_use]
    pub fn argument(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        required: bool,
    ) -> Self {
        self.prompt
            .arguments
            .get_or_insert_with(Vec::new)
            .push(PromptArgument {
                name: name.into(),
                title: None,
                description: Some(description.into()),
                required: Some(required),
                extra: JsonObject::new(),
            });
        self
    }

    /// Takes the fields of `A` as its arguments, in place of any given with
    /// [`Self::argument`]: each property's name and doc comment, required
    /// unless it is an `Option`. MCP prompt arguments are strings, so `A`'s
    /// fields should be `String` or `Option<String>`: a `prompts/get` whose
    /// arguments do not read as `A` is refused with `-32602`.
    #[must_use]
    pub fn arguments<A: JsonSchema>(mut self) -> Self {
        let schema = schema_of::<A>();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let arguments = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, property)| PromptArgument {
                        name: name.clone(),
                        title: None,
                        description: property
                            .get("description")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        required: Some(required.contains(&name.as_str())),
                        extra: JsonObject::new(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.prompt.arguments = Some(arguments);
        self
    }

    /// Requires `scope` to see and get it.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The definition and scope, for registration.
    #[must_use]
    pub fn into_parts(self) -> (Prompt, Option<String>) {
        (self.prompt, self.scope)
    }
}

/// What a typed prompt's handler may answer with: a full
/// [`GetPromptResult`], its messages, or one text that becomes the user's
/// message.
pub trait PromptOutput: Send + 'static {
    /// The result sent to the client.
    fn into_prompt_result(self) -> GetPromptResult;
}

impl PromptOutput for GetPromptResult {
    fn into_prompt_result(self) -> GetPromptResult {
        self
    }
}

impl PromptOutput for Vec<PromptMessage> {
    fn into_prompt_result(self) -> GetPromptResult {
        GetPromptResult {
            description: None,
            messages: self,
            result_type: None,
            meta: None,
            extra: JsonObject::new(),
        }
    }
}

impl PromptOutput for String {
    fn into_prompt_result(self) -> GetPromptResult {
        vec![PromptMessage {
            role: Role::User,
            content: ContentBlock::text(self),
            extra: JsonObject::new(),
        }]
        .into_prompt_result()
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;

    use super::PromptSpec;

    #[derive(JsonSchema)]
    #[allow(dead_code)] // Read only through its schema here.
    struct Review {
        /// The code to review.
        code: String,
        /// What to look for.
        focus: Option<String>,
    }

    #[test]
    fn a_typed_prompt_takes_its_fields_as_arguments() {
        let (prompt, _) = PromptSpec::new("review", "Reviews code")
            .arguments::<Review>()
            .into_parts();
        let arguments = prompt.arguments.unwrap_or_default();
        let shown: Vec<(&str, Option<&str>, Option<bool>)> = arguments
            .iter()
            .map(|a| (a.name.as_str(), a.description.as_deref(), a.required))
            .collect();
        assert_eq!(
            shown,
            [
                ("code", Some("The code to review."), Some(true)),
                ("focus", Some("What to look for."), Some(false)),
            ]
        );
    }
}
