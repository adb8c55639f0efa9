//! A request's result as a transport writes it.

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::domain::Refusal;
use crate::domain::ir::ToolResult;
use crate::domain::jsonrpc::{ErrorObject, RequestId, VERSION};

/// The `result` member of a successful response.
///
/// Most results are built as JSON values. A tool's result is instead kept
/// typed, lowered and finished for the client's revision, and written
/// straight into the response's frame: building a value only to write it
/// again was the largest single cost of a `tools/call` (docs/benchmarks.md).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A result built as a JSON value.
    Value(Value),
    /// A `CallToolResult`, complete for the revision it was lowered for.
    Tool(Box<ToolResult>),
}

impl Reply {
    /// The result as a JSON value.
    ///
    /// A tool result always has a JSON form (its extra members are already
    /// JSON); should that ever change, `null` stands in, and the failure is
    /// logged.
    #[must_use]
    pub fn into_value(self) -> Value {
        match self {
            Self::Value(value) => value,
            Self::Tool(result) => serde_json::to_value(result).unwrap_or_else(|e| {
                tracing::error!("a tool result could not be written as JSON: {e}");
                Value::Null
            }),
        }
    }
}

impl From<Value> for Reply {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

impl Serialize for Reply {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Value(value) => value.serialize(serializer),
            Self::Tool(result) => result.serialize(serializer),
        }
    }
}

/// Writes the response answering `id` with `outcome` into `out`, straight
/// from its parts: no JSON object is built only to be written, and the
/// members every response has are copied as they are rather than escaped.
///
/// # Errors
///
/// When the result cannot be written as JSON (a map with a non-string key,
/// which no `Value` has); `out` then holds a partial response.
pub(crate) fn write_response(
    out: &mut Vec<u8>,
    id: &RequestId,
    outcome: &Result<Reply, ErrorObject>,
) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"jsonrpc\":\"");
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b"\",\"id\":");
    serde_json::to_writer(&mut *out, id)?;
    match outcome {
        Ok(result) => {
            out.extend_from_slice(b",\"result\":");
            serde_json::to_writer(&mut *out, result)?;
        }
        Err(error) => {
            out.extend_from_slice(b",\"error\":");
            serde_json::to_writer(&mut *out, error)?;
        }
    }
    out.push(b'}');
    Ok(())
}

/// The response answering `id` with `outcome`, as bytes.
///
/// Never fails: a result that cannot be written (see [`write_response`]) is
/// answered with an internal error instead, so the request still gets its
/// one answer.
#[must_use]
pub(crate) fn response_bytes(id: &RequestId, outcome: &Result<Reply, ErrorObject>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    if let Err(e) = write_response(&mut out, id, outcome) {
        tracing::error!("a result could not be written and was answered with an error: {e}");
        out.clear();
        let failed = Err(Refusal::internal("the result could not be written").into());
        // An error object is a code, a message and no data: it always writes.
        let _written = write_response(&mut out, id, &failed);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::ir::ContentBlock;

    fn tool() -> ToolResult {
        let mut result = ToolResult::from_content(vec![ContentBlock::text("a \"quoted\" é")]);
        result.is_error = Some(false);
        result
    }

    #[test]
    fn a_tool_result_is_written_as_its_value_would_be() {
        #[derive(Serialize)]
        struct Frame<'a> {
            id: u32,
            result: &'a Reply,
        }
        let frame = serde_json::to_string(&Frame {
            id: 1,
            result: &Reply::Tool(Box::new(tool())),
        });
        let value = serde_json::to_value(tool()).unwrap_or_default();
        let expected = serde_json::to_string(&json!({"id": 1, "result": value}));
        assert_eq!(frame.ok(), expected.ok());
    }

    #[test]
    fn a_tool_result_reads_as_its_json() {
        let value = Reply::Tool(Box::new(tool())).into_value();
        let expected =
            json!({"content": [{"type": "text", "text": "a \"quoted\" é"}], "isError": false});
        assert_eq!(value, expected);
    }
}
