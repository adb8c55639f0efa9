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
    /// Where the argument is: the chain of property names from the
    /// arguments object down to it (one name for a top-level argument).
    pub path: Vec<String>,
    /// The header suffix: the header is `Mcp-Param-<name>`.
    pub name: String,
}

impl ParamHeader {
    /// The argument's path, dotted, for messages.
    #[must_use]
    pub fn property(&self) -> String {
        self.path.join(".")
    }
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
    /// The annotation is somewhere a chain of `properties` does not reach
    /// (under `items`, a composition, a conditional, a `$ref` target).
    #[error("x-mcp-header at `{pointer}` is not on a property reached through `properties` alone")]
    Misplaced {
        /// Where it is, as a JSON pointer into the input schema.
        pointer: String,
    },
}

/// The headers a tool's input schema asks for, or why they cannot be used.
///
/// # Errors
///
/// [`InvalidAnnotation`] for the first rule the annotations break.
pub fn param_headers(input_schema: &JsonObject) -> Result<Vec<ParamHeader>, InvalidAnnotation> {
    let mut found: Vec<ParamHeader> = Vec::new();
    let mut allowed = Vec::new();
    collect(input_schema, &mut Vec::new(), &mut found, &mut allowed)?;
    // Any annotation the chain did not reach is misplaced.
    let mut everywhere = Vec::new();
    annotations(&Value::Object(input_schema.clone()), "", &mut everywhere);
    if let Some(pointer) = everywhere.into_iter().find(|p| !allowed.contains(p)) {
        return Err(InvalidAnnotation::Misplaced { pointer });
    }
    Ok(found)
}

/// Walks `properties` chains from `schema`, recording each annotated
/// property and the JSON pointer of each annotation it accepts.
fn collect(
    schema: &JsonObject,
    path: &mut Vec<String>,
    found: &mut Vec<ParamHeader>,
    allowed: &mut Vec<String>,
) -> Result<(), InvalidAnnotation> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (property, child) in properties {
        let Some(child) = child.as_object() else {
            continue;
        };
        path.push(property.clone());
        if let Some(annotation) = child.get(ANNOTATION) {
            let dotted = path.join(".");
            let name = annotation.as_str().unwrap_or_default();
            if !is_token(name) {
                return Err(InvalidAnnotation::BadName {
                    property: dotted,
                    name: annotation.to_string(),
                });
            }
            let primitive = matches!(
                child.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            );
            if !primitive {
                return Err(InvalidAnnotation::NotPrimitive { property: dotted });
            }
            if found.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
                return Err(InvalidAnnotation::Duplicate {
                    name: name.to_owned(),
                });
            }
            found.push(ParamHeader {
                path: path.clone(),
                name: name.to_owned(),
            });
            let pointer: String = path
                .iter()
                .map(|p| format!("/properties/{}", escape(p)))
                .collect();
            allowed.push(format!("{pointer}/{ANNOTATION}"));
        }
        collect(child, path, found, allowed)?;
        path.pop();
    }
    Ok(())
}

/// The JSON pointer of every annotation anywhere in `value`.
fn annotations(value: &Value, at: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let pointer = format!("{at}/{}", escape(key));
                if key == ANNOTATION {
                    out.push(pointer);
                } else {
                    annotations(child, &pointer, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                annotations(child, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// A JSON pointer reference token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
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
            let (last, parents) = h.path.split_last()?;
            let mut holder = arguments;
            for parent in parents {
                holder = holder.get(parent)?.as_object()?;
            }
            let value = match holder.get(last)? {
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
    fn a_nested_property_reached_through_properties_is_mirrored() {
        let input = schema(
            json!({"properties": {"options": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
            }}}}),
        );
        let headers = param_headers(&input).unwrap_or_default();
        assert_eq!(
            headers.first().map(ParamHeader::property),
            Some("options.region".to_owned())
        );
        let arguments = schema(json!({"options": {"region": "eu"}}));
        assert_eq!(
            values(&headers, Some(&arguments)),
            vec![("Mcp-Param-Region".to_owned(), "eu".to_owned())]
        );
    }

    #[test]
    fn an_annotation_outside_a_properties_chain_is_refused() {
        for misplaced in [
            json!({"properties": {"list": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}}}}),
            json!({"properties": {"v": {"anyOf": [{"type": "string", "x-mcp-header": "V"}]}}}),
            json!({"$defs": {"r": {"type": "string", "x-mcp-header": "R"}}, "properties": {"r": {"$ref": "#/$defs/r"}}}),
        ] {
            let input = schema(misplaced);
            assert!(
                matches!(
                    param_headers(&input),
                    Err(InvalidAnnotation::Misplaced { .. })
                ),
                "{input:?} was accepted"
            );
        }
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
