//! `x-mcp-header`: tool arguments a 2026-07-28 client mirrors into
//! `Mcp-Param-*` HTTP headers, so intermediaries can route without reading the
//! body.
//!
//! A tool whose annotations break the rules is dropped from the client's view
//! rather than called with headers the server would refuse; the rest of the
//! list is kept.

use base64::Engine as _;
use serde_json::Value;

use crate::domain::ir::JsonObject;

/// The annotation's name in a property schema.
pub const ANNOTATION: &str = "x-mcp-header";

/// One argument a tool mirrors into a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The argument (the property name).
    pub property: String,
    /// The header suffix: the header is `Mcp-Param-<name>`.
    pub name: String,
}

/// Why a tool's annotations cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAnnotation {
    /// The header name is empty or has a character a header name cannot have.
    #[error("property `{property}`: `{name}` is not a valid header name")]
    BadName {
        /// The property.
        property: String,
        /// The name given.
        name: String,
    },
    /// The annotation is on something other than a string, integer or
    /// boolean.
    #[error("property `{property}`: x-mcp-header is only allowed on string, integer or boolean")]
    NotPrimitive {
        /// The property.
        property: String,
    },
    /// Two properties claim the same header, compared without case.
    #[error("header `{name}` is claimed by more than one property")]
    Duplicate {
        /// The name.
        name: String,
    },
}

/// The headers a tool's input schema asks for, or why they cannot be used.
///
/// # Errors
///
/// [`InvalidAnnotation`] for the first rule the annotations break.
pub fn param_headers(input_schema: &JsonObject) -> Result<Vec<ParamHeader>, InvalidAnnotation> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut found: Vec<ParamHeader> = Vec::new();
    for (property, schema) in properties {
        let Some(annotation) = schema.get(ANNOTATION) else {
            continue;
        };
        let name = annotation.as_str().unwrap_or_default();
        if !is_token(name) {
            return Err(InvalidAnnotation::BadName {
                property: property.clone(),
                name: annotation.to_string(),
            });
        }
        let primitive = matches!(
            schema.get("type").and_then(Value::as_str),
            Some("string" | "integer" | "boolean")
        );
        if !primitive {
            return Err(InvalidAnnotation::NotPrimitive {
                property: property.clone(),
            });
        }
        if found.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
            return Err(InvalidAnnotation::Duplicate {
                name: name.to_owned(),
            });
        }
        found.push(ParamHeader {
            property: property.clone(),
            name: name.to_owned(),
        });
    }
    Ok(found)
}

/// An RFC 9110 token: what a header field name may be made of.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The header values for one call's arguments. Absent and `null` arguments
/// send no header.
#[must_use]
pub fn values(headers: &[ParamHeader], arguments: Option<&JsonObject>) -> Vec<(String, String)> {
    let Some(arguments) = arguments else {
        return Vec::new();
    };
    headers
        .iter()
        .filter_map(|h| {
            let value = match arguments.get(&h.property)? {
                Value::String(s) => encode(s),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => return None,
            };
            Some((format!("Mcp-Param-{}", h.name), value))
        })
        .collect()
}

/// A string as a header value: as it is when it is printable ASCII without
/// surrounding whitespace, else wrapped in the base64 sentinel.
#[must_use]
pub fn encode(value: &str) -> String {
    // A plain value that looks like the sentinel would be decoded by the
    // server, so it is wrapped too.
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !value.starts_with("=?base64?");
    if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn unsafe_strings_are_wrapped_and_safe_ones_are_not() {
        assert_eq!(encode("us-west1"), "us-west1");
        assert_eq!(encode("a b"), "a b");
        assert_eq!(encode(" lead"), "=?base64?IGxlYWQ=?=");
        assert_eq!(encode("été"), "=?base64?w6l0w6k=?=");
        assert_eq!(encode("a\tb"), "=?base64?YQli?=");
        assert_eq!(encode("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
    }

    #[test]
    fn null_and_absent_arguments_send_nothing() {
        let headers = param_headers(&schema(json!({"properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
            "n": {"type": "integer", "x-mcp-header": "N"},
        }})));
        let headers = headers.unwrap_or_default();
        let arguments = schema(json!({"region": "eu", "verbose": null, "n": 3}));
        assert_eq!(
            values(&headers, Some(&arguments)),
            vec![
                ("Mcp-Param-Region".to_owned(), "eu".to_owned()),
                ("Mcp-Param-N".to_owned(), "3".to_owned())
            ]
        );
    }

    #[test]
    fn each_broken_annotation_is_refused() {
        let bad = [
            json!({"v": {"type": "string", "x-mcp-header": ""}}),
            json!({"v": {"type": "object", "x-mcp-header": "V"}}),
            json!({"v": {"type": "number", "x-mcp-header": "V"}}),
            json!({"v": {"type": "null", "x-mcp-header": "V"}}),
            json!({"v": {"type": "string", "x-mcp-header": "My Region"}}),
            json!({"v": {"type": "string", "x-mcp-header": "A:B"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Région"}}),
            json!({"a": {"type": "string", "x-mcp-header": "F"}, "b": {"type": "string", "x-mcp-header": "f"}}),
        ];
        for properties in bad {
            let input = schema(json!({ "properties": properties }));
            assert!(param_headers(&input).is_err(), "{input:?} was accepted");
        }
    }
}
