//! The command language a user types into a `droid acp` prompt.
//!
//! `droid acp` has no model behind it: a prompt is a command, read here
//! into a [`Command`] without touching any server. A leading `/` is
//! accepted, so the commands also work as ACP slash commands. Arguments are
//! one JSON object, which may span lines.

use std::fmt;

use serde_json::{Map, Value};

/// The help text: the whole language, as `help` and `docs/acp.md` show it.
pub(crate) const HELP: &str = "\
Commands (a leading `/` is optional):
  help                        this text
  servers                     the session's MCP servers and how each connection went
  tools                       every tool, named SERVER/TOOL
  resources                   every resource, by URI
  prompts                     every prompt, named SERVER/PROMPT
  call TOOL [JSON]            call a tool with a JSON object of arguments
  read URI                    read a resource
  prompt NAME [JSON]          get a prompt with a JSON object of string arguments
A TOOL or NAME may leave out `SERVER/` when only one server has it.
A tool whose annotations say `destructiveHint: true` runs only after you allow it.";

/// One parsed prompt.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Command {
    /// `help`.
    Help,
    /// `servers`.
    Servers,
    /// `tools`.
    Tools,
    /// `resources`.
    Resources,
    /// `prompts`.
    Prompts,
    /// `call TOOL [JSON]`.
    Call {
        /// `SERVER/TOOL` or `TOOL`.
        tool: String,
        /// The arguments, when given.
        arguments: Option<Map<String, Value>>,
    },
    /// `read URI`.
    Read {
        /// The resource.
        uri: String,
    },
    /// `prompt NAME [JSON]`.
    Prompt {
        /// `SERVER/PROMPT` or `PROMPT`.
        name: String,
        /// The arguments, when given.
        arguments: Option<Map<String, Value>>,
    },
}

/// Why a prompt is not a command; shown to the user as it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NotACommand(pub(crate) String);

impl fmt::Display for NotACommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reads a prompt's text as a command.
pub(crate) fn parse(text: &str) -> Result<Command, NotACommand> {
    let text = text.trim();
    let text = text.strip_prefix('/').unwrap_or(text);
    let (verb, rest) = split_word(text);
    let no_arguments = |command: Command| {
        if rest.is_empty() {
            Ok(command)
        } else {
            Err(NotACommand(format!("`{verb}` takes no arguments.")))
        }
    };
    match verb {
        "" => Err(NotACommand(
            "The prompt is empty. Type `help` for the commands.".to_owned(),
        )),
        "help" | "?" => Ok(Command::Help),
        "servers" => no_arguments(Command::Servers),
        "tools" => no_arguments(Command::Tools),
        "resources" => no_arguments(Command::Resources),
        "prompts" => no_arguments(Command::Prompts),
        "call" => {
            let (tool, json) = split_word(rest);
            if tool.is_empty() {
                return Err(NotACommand(
                    "`call` needs a tool: `call TOOL [JSON]`.".to_owned(),
                ));
            }
            Ok(Command::Call {
                tool: tool.to_owned(),
                arguments: json_object(json, "call")?,
            })
        }
        "read" => {
            let (uri, extra) = split_word(rest);
            match (uri.is_empty(), extra.is_empty()) {
                (true, _) => Err(NotACommand(
                    "`read` needs a resource URI: `read URI`.".to_owned(),
                )),
                (false, false) => Err(NotACommand(
                    "`read` takes one URI; a URI has no spaces.".to_owned(),
                )),
                (false, true) => Ok(Command::Read {
                    uri: uri.to_owned(),
                }),
            }
        }
        "prompt" => {
            let (name, json) = split_word(rest);
            if name.is_empty() {
                return Err(NotACommand(
                    "`prompt` needs a prompt's name: `prompt NAME [JSON]`.".to_owned(),
                ));
            }
            Ok(Command::Prompt {
                name: name.to_owned(),
                arguments: json_object(json, "prompt")?,
            })
        }
        other => Err(NotACommand(format!(
            "Unknown command `{}`. Type `help` for the commands.",
            shortened(other)
        ))),
    }
}

/// The first word and the trimmed rest.
fn split_word(text: &str) -> (&str, &str) {
    match text.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (text, ""),
    }
}

fn json_object(text: &str, verb: &str) -> Result<Option<Map<String, Value>>, NotACommand> {
    if text.is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(NotACommand(format!(
            "The arguments of `{verb}` must be a JSON object, like {{\"id\": \"7\"}}."
        ))),
        Err(e) => Err(NotACommand(format!(
            "The arguments of `{verb}` are not JSON: {e}."
        ))),
    }
}

/// At most 40 characters of what the user typed, so an answer never
/// echoes a whole pasted file back.
fn shortened(word: &str) -> String {
    const MAX: usize = 40;
    if word.chars().count() <= MAX {
        word.to_owned()
    } else {
        let mut short: String = word.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_call_reads_its_tool_and_a_json_object_spanning_lines() {
        let command = parse("call fixture/delete_note {\n  \"id\": \"7\"\n}");
        assert_eq!(
            command,
            Ok(Command::Call {
                tool: "fixture/delete_note".to_owned(),
                arguments: json!({ "id": "7" }).as_object().cloned(),
            })
        );
    }

    #[test]
    fn a_slash_and_surrounding_space_are_accepted() {
        assert_eq!(parse("  /tools \n"), Ok(Command::Tools));
        assert_eq!(parse("/help"), Ok(Command::Help));
    }

    #[test]
    fn a_call_without_arguments_sends_none() {
        assert_eq!(
            parse("call test_simple_text"),
            Ok(Command::Call {
                tool: "test_simple_text".to_owned(),
                arguments: None,
            })
        );
    }

    /// What a refused prompt says, or nothing when it was accepted.
    fn refusal(text: &str) -> String {
        parse(text).err().map(|e| e.0).unwrap_or_default()
    }

    #[test]
    fn malformed_call_arguments_are_explained_not_sent() {
        let message = refusal("call echo {not json");
        assert!(message.contains("not JSON"), "{message:?}");
        let message = refusal("call echo [1, 2]");
        assert!(message.contains("JSON object"), "{message:?}");
    }

    #[test]
    fn read_takes_exactly_one_uri() {
        assert_eq!(
            parse("read test://static-text"),
            Ok(Command::Read {
                uri: "test://static-text".to_owned()
            })
        );
        assert!(parse("read").is_err());
        assert!(parse("read a b").is_err());
    }

    #[test]
    fn prompt_reads_a_name_and_optional_arguments() {
        assert_eq!(
            parse(r#"prompt test_prompt_with_arguments {"arg1": "a", "arg2": "b"}"#),
            Ok(Command::Prompt {
                name: "test_prompt_with_arguments".to_owned(),
                arguments: json!({ "arg1": "a", "arg2": "b" }).as_object().cloned(),
            })
        );
    }

    #[test]
    fn listings_refuse_stray_arguments() {
        assert!(parse("tools please").is_err());
    }

    #[test]
    fn an_unknown_word_is_echoed_shortened() {
        let message = refusal(&"x".repeat(500));
        assert!(message.starts_with("Unknown command"), "{message:?}");
        assert!(message.len() < 120, "{message}");
        assert!(refusal("").contains("empty"));
    }
}
