//! A result that may instead ask for input or defer to a task: the
//! `X | InputRequiredResult` (and task) unions of the 2026-07-28
//! `*ResultResponse` definitions.

use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::input::InputRequiredResult;
use super::jsonrpc_meta::{ResultType, result_type_of};
use super::tasks::CreateTaskResult;

/// The answer to a request that may ask for input or defer to a task: the
/// `X | InputRequiredResult` of the 2026-07-28 `*ResultResponse` defs.
///
/// Read by `resultType`: absent or `complete` is the method's own result.
/// A value the client did not ask for is refused, as the spec requires.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<R> {
    /// The method's own result.
    Complete(R),
    /// The server needs input before it can finish.
    InputRequired(InputRequiredResult),
    /// The tasks extension deferred the result.
    Task(Box<CreateTaskResult>),
}

impl<R: Serialize> Serialize for Outcome<R> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Complete(r) => r.serialize(serializer),
            Self::InputRequired(r) => r.serialize(serializer),
            Self::Task(r) => r.serialize(serializer),
        }
    }
}

impl<'de, R: DeserializeOwned> Deserialize<'de> for Outcome<R> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let outcome = match result_type_of(&value).map_err(D::Error::custom)? {
            None | Some(ResultType::Complete) => serde_json::from_value(value).map(Self::Complete),
            Some(ResultType::InputRequired) => {
                serde_json::from_value(value).map(Self::InputRequired)
            }
            Some(ResultType::Task) => {
                serde_json::from_value(value).map(|t| Self::Task(Box::new(t)))
            }
            Some(ResultType::Other(other)) => {
                return Err(D::Error::custom(format_args!(
                    "unrecognised resultType `{other}`"
                )));
            }
        };
        outcome.map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::call_tool::CallToolResult;

    #[test]
    fn an_outcome_is_chosen_by_result_type_not_by_shape() -> Result<(), serde_json::Error> {
        let asking = json!({ "resultType": "input_required", "requestState": "s" });
        let read: Outcome<CallToolResult> = serde_json::from_value(asking)?;
        assert!(matches!(read, Outcome::InputRequired(_)));

        let done = json!({ "content": [] });
        let read: Outcome<CallToolResult> = serde_json::from_value(done)?;
        assert!(matches!(read, Outcome::Complete(_)));

        let strange = json!({ "resultType": "someday", "content": [] });
        assert!(serde_json::from_value::<Outcome<CallToolResult>>(strange).is_err());
        Ok(())
    }
}
