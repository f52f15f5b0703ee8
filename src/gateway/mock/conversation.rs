//! What the mock reads of a request: the conversation's turns and the declared tool names,
//! from a Responses, a Chat Completions or an Anthropic Messages body.
//!
//! It reads what any OpenAI-compatible client may send (the SDKs' shapes, legacy fields),
//! not only what our gateway sends, and reads nothing it does not need to play the model.
//! It never decides an answer (that is [`super::play`]).

use std::collections::HashMap;

use serde_json::{Map, Value};

/// What the mock needs of a request: its turns and the declared tool names.
#[derive(Debug, Default)]
pub(super) struct Conversation {
    pub(super) items: Vec<Item>,
    tools: Vec<String>,
}

#[derive(Debug)]
pub(super) enum Item {
    User(String),
    /// One assistant turn and the calls it made (ids may be empty when the client sent
    /// none).
    Assistant(Vec<CallRef>),
    Output {
        call_id: String,
        /// The tool name the output itself carries (Chat `tool` messages may have one).
        name: Option<String>,
        output: String,
    },
}

#[derive(Debug)]
pub(super) struct CallRef {
    id: String,
    name: String,
}

impl Conversation {
    /// Responses: `input` is a string (one user message) or a list of items: messages
    /// (`{role, content}`, with or without `type: "message"`), `function_call` and
    /// `function_call_output` items. Consecutive `function_call`s belong to the assistant
    /// turn before them (an assistant message or the first of them); other item types
    /// (reasoning) are skipped.
    pub(super) fn of_responses(body: &Map<String, Value>) -> Result<Conversation, String> {
        let mut conversation = Conversation {
            items: Vec::new(),
            tools: declared_tools(body),
        };
        let items = match body.get("input") {
            None | Some(Value::Null) => return Ok(conversation),
            Some(Value::String(text)) => {
                conversation.items.push(Item::User(text.clone()));
                return Ok(conversation);
            }
            Some(Value::Array(items)) => items,
            Some(_) => return Err("`input` must be a string or an array of items".into()),
        };
        for item in items.iter().filter_map(Value::as_object) {
            let kind = item.get("type").and_then(Value::as_str);
            match kind {
                Some("function_call") => {
                    let call = CallRef {
                        id: id_field(item, "call_id")
                            .or_else(|| id_field(item, "id"))
                            .unwrap_or_default(),
                        name: str_of(item.get("name")),
                    };
                    match conversation.items.last_mut() {
                        Some(Item::Assistant(calls)) => calls.push(call),
                        _ => conversation.items.push(Item::Assistant(vec![call])),
                    }
                }
                Some("function_call_output") => conversation.items.push(Item::Output {
                    call_id: str_of(item.get("call_id")),
                    name: None,
                    output: item.get("output").map(content_text).unwrap_or_default(),
                }),
                None | Some("message") => match item.get("role").and_then(Value::as_str) {
                    Some("user") => conversation.items.push(Item::User(
                        item.get("content").map(content_text).unwrap_or_default(),
                    )),
                    Some("assistant") => conversation.items.push(Item::Assistant(Vec::new())),
                    _ => {}
                },
                Some(_) => {}
            }
        }
        Ok(conversation)
    }

    /// Chat Completions: `messages` with roles `user`, `assistant` (its `tool_calls`, or
    /// the legacy `function_call`), `tool` (`tool_call_id`, `content`) and the legacy
    /// `function` (`name`, `content`); `system` and `developer` are skipped.
    pub(super) fn of_chat(body: &Map<String, Value>) -> Result<Conversation, String> {
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Err("`messages` must be an array of messages".into());
        };
        let mut conversation = Conversation {
            items: Vec::new(),
            tools: declared_tools(body),
        };
        for message in messages.iter().filter_map(Value::as_object) {
            let content = || message.get("content").map(content_text).unwrap_or_default();
            match message.get("role").and_then(Value::as_str) {
                Some("user") => conversation.items.push(Item::User(content())),
                Some("assistant") => {
                    let mut calls: Vec<CallRef> = message
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_object)
                        .map(|call| CallRef {
                            id: id_field(call, "id").unwrap_or_default(),
                            name: str_of(call.get("function").and_then(|f| f.get("name"))),
                        })
                        .collect();
                    if calls.is_empty()
                        && let Some(legacy) =
                            message.get("function_call").and_then(Value::as_object)
                    {
                        calls.push(CallRef {
                            id: String::new(),
                            name: str_of(legacy.get("name")),
                        });
                    }
                    conversation.items.push(Item::Assistant(calls));
                }
                Some("tool") | Some("function") => conversation.items.push(Item::Output {
                    call_id: str_of(message.get("tool_call_id")),
                    name: message
                        .get("name")
                        .and_then(Value::as_str)
                        .map(String::from),
                    output: content(),
                }),
                _ => {}
            }
        }
        Ok(conversation)
    }

    /// Anthropic Messages: `messages` with roles `user` (a string, or blocks: `text`, and
    /// `tool_result` with `tool_use_id` and a string or text blocks) and `assistant` (a
    /// string, or blocks: `text` and `tool_use` with `id` and `name`); `system` is
    /// skipped. A user message's results come before its text, as the API orders them.
    pub(super) fn of_anthropic(body: &Map<String, Value>) -> Result<Conversation, String> {
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Err("`messages` must be an array of messages".into());
        };
        let mut conversation = Conversation {
            items: Vec::new(),
            tools: declared_tools(body),
        };
        for message in messages.iter().filter_map(Value::as_object) {
            let blocks: Vec<&Map<String, Value>> = message
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .collect();
            let of_type = |kind: &'static str| {
                blocks
                    .iter()
                    .filter(move |b| b.get("type").and_then(Value::as_str) == Some(kind))
            };
            match message.get("role").and_then(Value::as_str) {
                Some("user") => {
                    for result in of_type("tool_result") {
                        conversation.items.push(Item::Output {
                            call_id: str_of(result.get("tool_use_id")),
                            name: None,
                            output: result.get("content").map(content_text).unwrap_or_default(),
                        });
                    }
                    let text = match message.get("content") {
                        Some(Value::String(text)) => text.clone(),
                        _ => of_type("text")
                            .filter_map(|b| b.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("\n"),
                    };
                    if !text.is_empty() || of_type("tool_result").next().is_none() {
                        conversation.items.push(Item::User(text));
                    }
                }
                Some("assistant") => conversation.items.push(Item::Assistant(
                    of_type("tool_use")
                        .map(|b| CallRef {
                            id: id_field(b, "id").unwrap_or_default(),
                            name: str_of(b.get("name")),
                        })
                        .collect(),
                )),
                _ => {}
            }
        }
        Ok(conversation)
    }

    pub(super) fn declares(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }

    pub(super) fn last_user(&self) -> &str {
        self.items
            .iter()
            .rev()
            .find_map(|item| match item {
                Item::User(text) => Some(text.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    }

    pub(super) fn tool_calls_so_far(&self) -> usize {
        self.items
            .iter()
            .map(|item| match item {
                Item::Assistant(calls) => calls.len(),
                _ => 0,
            })
            .sum()
    }

    pub(super) fn assistant_turns(&self) -> usize {
        self.items
            .iter()
            .filter(|item| matches!(item, Item::Assistant(_)))
            .count()
    }

    /// Every tool output in order, with the name of the tool that produced it: the call
    /// with its `call_id`, else the name the output carries.
    pub(super) fn outputs(&self) -> Vec<(&str, &str)> {
        let names: HashMap<&str, &str> = self
            .items
            .iter()
            .filter_map(|item| match item {
                Item::Assistant(calls) => Some(calls),
                _ => None,
            })
            .flatten()
            .filter(|c| !c.id.is_empty())
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        self.items
            .iter()
            .filter_map(|item| match item {
                Item::Output {
                    call_id,
                    name,
                    output,
                } => {
                    let tool = names
                        .get(call_id.as_str())
                        .copied()
                        .or(name.as_deref())
                        .unwrap_or_default();
                    Some((tool, output.as_str()))
                }
                _ => None,
            })
            .collect()
    }
}

/// `tools[].name` (Responses) or `tools[].function.name` (Chat), whichever a tool has, and
/// the legacy Chat `functions[].name`.
fn declared_tools(body: &Map<String, Value>) -> Vec<String> {
    let tools = body.get("tools").and_then(Value::as_array).into_iter();
    let functions = body.get("functions").and_then(Value::as_array).into_iter();
    tools
        .chain(functions)
        .flatten()
        .filter_map(|tool| {
            tool.get("name")
                .or_else(|| tool.get("function").and_then(|f| f.get("name")))
                .and_then(Value::as_str)
                .map(String::from)
        })
        .collect()
}

/// A message content or tool output as text: a string as is, a list of parts as their
/// `text`s joined by newlines, `null` as nothing, anything else as JSON.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                _ => part.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn str_of(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn id_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(String::from)
}
