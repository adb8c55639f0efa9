//! Typed handlers: a tool whose argument type is named once, and answers and
//! questions read into Rust types.
//!
//! [`Server::add_typed_tool`](super::Server::add_typed_tool) takes a handler
//! of `(A, Call)`: the tool's input schema is derived from `A`, and the
//! arguments are deserialized into that same `A` before the handler runs, so
//! the schema a client is shown and the type the handler reads cannot
//! disagree. What the handler returns is a [`ToolOutput`]: text, a full
//! [`ToolResult`], or [`Structured`] output whose schema is derived from its
//! type and declared as the tool's `outputSchema`.
//!
//! [`Call::elicit_form`], [`Call::create_message`] and [`Call::roots`] are
//! the typed forms of the three questions a server may ask its client.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::call::{Call, CallError};
use crate::domain::ir::{JsonObject, ToolResult};
use crate::wire::roots::{ListRootsResult, Root};
use crate::wire::sampling::{CreateMessageRequestParams, CreateMessageResult};

/// What a typed tool's handler may answer with.
///
/// Implemented for [`ToolResult`] (anything MCP can say), for `String` and
/// `&'static str` (one text block), and for [`Structured`] (structured
/// output with its schema).
pub trait ToolOutput: Send + 'static {
    /// The schema declared as the tool's `outputSchema`, if the output is
    /// structured.
    #[must_use]
    fn output_schema() -> Option<JsonObject> {
        None
    }

    /// The result sent to the client.
    ///
    /// # Errors
    ///
    /// [`CallError`] (`-32603`) when the value cannot be written.
    fn into_tool_result(self) -> Result<ToolResult, CallError>;
}

impl ToolOutput for ToolResult {
    fn into_tool_result(self) -> Result<ToolResult, CallError> {
        Ok(self)
    }
}

impl ToolOutput for String {
    fn into_tool_result(self) -> Result<ToolResult, CallError> {
        Ok(ToolResult::text(self))
    }
}

impl ToolOutput for &'static str {
    fn into_tool_result(self) -> Result<ToolResult, CallError> {
        Ok(ToolResult::text(self))
    }
}

/// Structured output: `T` is sent as `structuredContent`, and also as its
/// JSON text, which is what a client that predates structured output (or
/// ignores it) reads. The tool declares `T`'s schema as its `outputSchema`.
///
/// MCP requires structured content to be a JSON object, so `T` must
/// serialize to one (a struct or a map); anything else is refused when the
/// handler answers, with `-32603`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Structured<T>(pub T);

impl<T: Serialize + JsonSchema + Send + 'static> ToolOutput for Structured<T> {
    fn output_schema() -> Option<JsonObject> {
        Some(schema_of::<T>())
    }

    fn into_tool_result(self) -> Result<ToolResult, CallError> {
        let value = serde_json::to_value(&self.0).map_err(|e| {
            CallError::internal(format!("the tool's output does not serialize: {e}"))
        })?;
        if !value.is_object() {
            return Err(CallError::internal(
                "structured output must be a JSON object",
            ));
        }
        Ok(ToolResult::text(value.to_string()).with_structured_value(value))
    }
}

/// What the user did with a form asked by [`Call::elicit_form`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elicited<T> {
    /// Submitted, with the form's contents.
    Accepted(T),
    /// Explicitly declined.
    Declined,
    /// Dismissed without a choice.
    Cancelled,
}

impl Call {
    /// Asks the user to fill in a form whose fields are `T`'s, as `key`, and
    /// reads a submitted form into `T`.
    ///
    /// The requested schema is derived from `T`: a flat object of strings,
    /// numbers, booleans and enums is what MCP elicitation allows, so `T`
    /// should be a struct of such fields (an `Option` field is optional).
    ///
    /// # Errors
    ///
    /// As [`Call::elicit`]; `-32602` when a submitted form does not fit `T`.
    pub async fn elicit_form<T: DeserializeOwned + JsonSchema>(
        &self,
        key: &str,
        message: &str,
    ) -> Result<Elicited<T>, CallError> {
        let params = json!({ "message": message, "requestedSchema": form_schema_of::<T>() });
        let answer = self.elicit(key, params).await?;
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let content = answer.get("content").cloned().unwrap_or(json!({}));
                serde_json::from_value(content)
                    .map(Elicited::Accepted)
                    .map_err(|e| CallError::invalid_params(format!("the form does not fit: {e}")))
            }
            Some("decline") => Ok(Elicited::Declined),
            Some("cancel") => Ok(Elicited::Cancelled),
            _ => Err(CallError::invalid_params(
                "the client's elicitation answer has no known action",
            )),
        }
    }

    /// Asks the client's model for a message, as `key`.
    ///
    /// # Errors
    ///
    /// As [`Call::sample`]; `-32602` when the client's answer is not a
    /// `CreateMessageResult`.
    pub async fn create_message(
        &self,
        key: &str,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, CallError> {
        let params = serde_json::to_value(params)
            .map_err(|e| CallError::internal(format!("the request does not serialize: {e}")))?;
        let answer = self.sample(key, params).await?;
        serde_json::from_value(answer).map_err(|e| {
            CallError::invalid_params(format!("the client's sampling answer does not parse: {e}"))
        })
    }

    /// Asks the client for its roots, as `key`.
    ///
    /// # Errors
    ///
    /// As [`Call::list_roots`]; `-32602` when the answer is not a
    /// `ListRootsResult`.
    pub async fn roots(&self, key: &str) -> Result<Vec<Root>, CallError> {
        let answer = self.list_roots(key).await?;
        serde_json::from_value::<ListRootsResult>(answer)
            .map(|listed| listed.roots)
            .map_err(|e| {
                CallError::invalid_params(format!("the client's roots answer does not parse: {e}"))
            })
    }
}

/// `T`'s JSON Schema as a tool's input or output schema: what schemars
/// derives, less the `title`, which names the Rust type and means nothing to
/// a client. An `Option` field may be `null`, as serde writes it.
pub(crate) fn schema_of<T: JsonSchema>() -> JsonObject {
    let mut object = match serde_json::to_value(schemars::schema_for!(T)) {
        Ok(Value::Object(object)) => object,
        // `true` / `false` schemas: nothing is known of the shape.
        _ => JsonObject::new(),
    };
    object.remove("title");
    object
}

/// `T`'s JSON Schema as elicitation's `requestedSchema`: an object with no
/// `$schema` and no `title`, and an optional field written as its own type
/// rather than "or null", which elicitation's flat schemas cannot express.
fn form_schema_of<T: JsonSchema>() -> JsonObject {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.meta_schema = None;
            // Elicitation schemas are flat: an enum field is written in
            // place, not as a `$ref` into `$defs`.
            settings.inline_subschemas = true;
        })
        .into_generator();
    let mut object = match generator.into_root_schema_for::<T>().to_value() {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    };
    object.remove("title");
    object
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for field in properties.values_mut() {
            not_null(field);
        }
    }
    object
}

/// Writes an `Option` field's `"type": ["integer", "null"]` as
/// `"type": "integer"`: the field is already optional by being absent from
/// `required`, and a form has no way to send `null`.
///
/// schemars writes an optional field three ways, all undone here: a type
/// list with `"null"` in it, an `enum` with `null` among its values, and an
/// `anyOf` of the field's schema and `{"type": "null"}`.
fn not_null(field: &mut Value) {
    let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
    // `anyOf: [X, {type: null}]` is X.
    let replaced = field
        .get("anyOf")
        .and_then(Value::as_array)
        .filter(|alternatives| alternatives.len() == 2 && alternatives.iter().any(is_null))
        .and_then(|alternatives| alternatives.iter().find(|a| !is_null(a)).cloned());
    if let (Some(mut inner), Value::Object(outer)) = (replaced, &mut *field) {
        outer.remove("anyOf");
        if let Value::Object(inner) = &mut inner {
            for (key, value) in std::mem::take(inner) {
                outer.entry(key).or_insert(value);
            }
        }
    }
    let Value::Object(field) = field else {
        return;
    };
    if let Some(Value::Array(types)) = field.get("type") {
        let mut named = types.iter().filter(|t| t.as_str() != Some("null"));
        if let (Some(only), None) = (named.next().cloned(), named.next()) {
            field.insert("type".to_owned(), only);
        }
    }
    if let Some(Value::Array(values)) = field.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::{Structured, ToolOutput, form_schema_of};

    type TestError = Box<dyn std::error::Error>;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)] // Read only through its schema here.
    struct Contact {
        /// Your name.
        name: String,
        /// How old you are.
        age: Option<u8>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)] // Read only through its schema here.
    enum Colour {
        Red,
        Green,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)] // Read only through its schema here.
    struct Choice {
        /// A colour, if you have one.
        colour: Option<Colour>,
    }

    #[test]
    fn an_optional_enum_offers_its_values_and_no_null() {
        let schema = form_schema_of::<Choice>();
        let colour = schema
            .get("properties")
            .and_then(|p| p.get("colour"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(colour.get("type"), Some(&json!("string")), "{colour}");
        assert_eq!(
            colour.get("enum"),
            Some(&json!(["Red", "Green"])),
            "{colour}"
        );
        assert!(colour.get("anyOf").is_none(), "{colour}");
    }

    #[derive(Serialize, JsonSchema)]
    struct Sum {
        sum: f64,
    }

    #[test]
    fn an_optional_field_is_written_as_its_own_type_and_not_required() {
        let schema = form_schema_of::<Contact>();
        assert_eq!(schema.get("type"), Some(&json!("object")));
        assert_eq!(schema.get("required"), Some(&json!(["name"])));
        assert_eq!(
            schema
                .get("properties")
                .and_then(|p| p.get("age"))
                .and_then(|a| a.get("type")),
            Some(&json!("integer"))
        );
        assert!(schema.get("$schema").is_none());
        assert!(schema.get("title").is_none());
    }

    #[test]
    fn structured_output_is_sent_as_content_and_text_and_declares_its_schema()
    -> Result<(), TestError> {
        let result = Structured(Sum { sum: 3.5 }).into_tool_result()?;
        assert_eq!(result.structured_content, Some(json!({ "sum": 3.5 })));
        let schema = Structured::<Sum>::output_schema().ok_or("a schema")?;
        assert_eq!(schema.get("required"), Some(&json!(["sum"])));
        Ok(())
    }

    #[test]
    fn structured_output_that_is_not_an_object_is_refused() {
        let refused = Structured(vec![1, 2]).into_tool_result();
        assert!(
            matches!(&refused, Err(super::CallError::Protocol(e)) if e.code.0 == -32603),
            "{refused:?}"
        );
    }
}
