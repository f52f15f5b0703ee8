//! Playing the model: the reply the mock gives a conversation, decided from the request
//! alone (the conversation and the declared tool names), so the same request always gets
//! the same reply. It never sees HTTP and never encodes a response ([`super::encode`]).
//!
//! **The QA prompt.** When a user message holds [`QA_PROMPT`]` <name>`, i.e. `tool search
//! qa check target=<name>` (the first such message counts; `<name>` is
//! `[A-Za-z0-9_.:-]+`), the marker is `qa-marker-<name>` and the first rule that applies
//! answers:
//! 1. the conversation holds the output of a call to `tool_search_code`, `tool_call` or
//!    the target itself: answer `QA_DONE <output>` (the latest such output, cut to
//!    [`QA_OUTPUT_CHARS`] characters);
//! 2. `tool_search_code` is declared: call it with [`qa_code`];
//! 3. `tool_search` is declared: without a `tool_search` output yet, call it with
//!    `{"queries": [{"query": <name>}]}`; else read the latest `tool_search` output (a
//!    batch result `{"results": [{"candidates": [...]}]}` or a plain list of candidates)
//!    and call `tool_call` with `{"id": <the id of the candidate named <name>>, "args":
//!    {"marker": ...}}`, or answer `QA_FAIL target not found by tool_search`;
//! 4. the target is declared (exactly, or as the name the request's format accepts for
//!    it, see [`WireNames`]): call it with `{"marker": ...}`;
//! 5. answer `QA_FAIL target not reachable`.
//!
//! **A scenario** ([`Scenario`]) otherwise. The rule: *the reply is the first step whose
//! `when` is absent or a substring of the last user message, among the steps this
//! conversation has not used yet.* Which steps are used is replayed from the conversation
//! itself: walking it in order, every assistant turn already in it used up the first
//! unused step that matched the user message before it. A single-prompt conversation
//! therefore plays its matching steps in order, one per round, and a conversation with
//! several user messages picks up where it left off. When no step applies (or there is
//! no scenario) the answer is `mock: <last user message>`.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::conversation::{Conversation, Item};
use crate::error::Error;
use crate::gateway::json::{Budget, Unread};
use crate::provider::{Provider, WireNames};
use crate::surface::{TOOL_CALL, TOOL_SEARCH, TOOL_SEARCH_CODE};

/// What a user message says to start the QA play; the target name follows.
pub const QA_PROMPT: &str = "tool search qa check target=";

/// Characters of the final tool output quoted in the `QA_DONE` answer.
pub const QA_OUTPUT_CHARS: usize = 2_000;

/// A scripted conversation: `{"steps": [{"when": "...", "reply": {"text": "...",
/// "tool_calls": [{"name": "...", "arguments": {...}}]}}]}`. See the module documentation
/// for how a step is chosen.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A substring of the last user message; absent matches every message.
    #[serde(default)]
    pub when: Option<String>,
    pub reply: Reply,
}

/// What the model answers: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    /// A JSON object; absent is `{}`.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl Reply {
    fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            tool_calls: Vec::new(),
        }
    }

    fn call(name: &str, arguments: Value) -> Reply {
        Reply {
            text: String::new(),
            tool_calls: vec![ScriptedCall {
                name: name.to_string(),
                arguments,
            }],
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file. Every problem is `bad-config` naming the file and
    /// what is wrong (with the JSON path and line for a shape error).
    pub fn load(path: &Path) -> Result<Scenario, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::BadConfig {
            file: path.to_path_buf(),
            message: format!("cannot read the scenario file: {e}"),
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses and checks scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Scenario, Error> {
        let bad = |message: String| Error::BadConfig {
            file: file.to_path_buf(),
            message,
        };
        let scenario: Scenario = Budget::default().parse_at(text.as_bytes()).map_err(|e| {
            let e = match e {
                Unread::Over(e) | Unread::Busy(e) | Unread::Trailing(e) => {
                    return bad(format!("not a valid scenario: {e}"));
                }
                Unread::Bad(e) => e,
            };
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path.is_empty() || path == "." {
                bad(format!("not a valid scenario: {inner}"))
            } else {
                bad(format!("not a valid scenario at `{path}`: {inner}"))
            }
        })?;
        if scenario.steps.is_empty() {
            return Err(bad(
                "the scenario has no steps; add at least one to `steps`".into(),
            ));
        }
        for (i, step) in scenario.steps.iter().enumerate() {
            if step.reply.text.is_empty() && step.reply.tool_calls.is_empty() {
                return Err(bad(format!(
                    "`steps[{i}].reply` has neither `text` nor `tool_calls`"
                )));
            }
            for (j, call) in step.reply.tool_calls.iter().enumerate() {
                if call.name.trim().is_empty() {
                    return Err(bad(format!(
                        "`steps[{i}].reply.tool_calls[{j}].name` is empty"
                    )));
                }
                if !call.arguments.is_object() {
                    return Err(bad(format!(
                        "`steps[{i}].reply.tool_calls[{j}].arguments` must be a JSON object, not {}",
                        crate::error::json_type_name(&call.arguments)
                    )));
                }
            }
        }
        Ok(scenario)
    }
}

/// The reply to `conversation`, sent in `format`: the QA play, else the scenario, else
/// the echo.
pub(super) fn reply(
    scenario: Option<&Scenario>,
    conversation: &Conversation,
    format: Provider,
) -> Reply {
    if let Some(target) = qa_target(conversation) {
        return qa_reply(conversation, &target, format);
    }
    scenario
        .and_then(|s| scripted_reply(s, conversation))
        .unwrap_or_else(|| Reply::text(format!("mock: {}", conversation.last_user())))
}

/// The target of the first user message holding the QA prompt with a name.
fn qa_target(conversation: &Conversation) -> Option<String> {
    conversation.items.iter().find_map(|item| match item {
        Item::User(text) => qa_target_in(text),
        _ => None,
    })
}

/// The name after the first [`QA_PROMPT`] in `text` that has one (`[A-Za-z0-9_.:-]+`).
pub(super) fn qa_target_in(text: &str) -> Option<String> {
    text.match_indices(QA_PROMPT).find_map(|(at, _)| {
        let name: String = text[at + QA_PROMPT.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
            .collect();
        (!name.is_empty()).then_some(name)
    })
}

/// The marker the QA play passes to the target.
pub fn qa_marker(target: &str) -> String {
    format!("qa-marker-{target}")
}

/// The code the QA play sends to `tool_search_code`: search for the target, find it by
/// name, call it with the marker.
pub fn qa_code(target: &str) -> String {
    let name = Value::String(target.to_string()).to_string();
    let marker = Value::String(qa_marker(target)).to_string();
    format!(
        "const hits = await openclaw.tools.search({name}, {{limit: 20}});\n\
         const hit = hits.find((h) => h.name === {name});\n\
         if (!hit) throw new Error(\"qa target not found: \" + {name});\n\
         return await openclaw.tools.call(hit.id, {{marker: {marker}}});"
    )
}

fn qa_reply(conversation: &Conversation, target: &str, format: Provider) -> Reply {
    let marker = qa_marker(target);
    // The target as declared: its own name, or the name the provider format accepts.
    let direct = [
        target.to_string(),
        WireNames::from_names(format, [target])
            .wire_name(target)
            .to_string(),
    ]
    .into_iter()
    .find(|name| conversation.declares(name));

    let outputs = conversation.outputs();
    let is_final = |tool: &str| {
        tool == TOOL_SEARCH_CODE
            || tool == TOOL_CALL
            || tool == target
            || Some(tool) == direct.as_deref()
    };
    if let Some((_, output)) = outputs.iter().rev().find(|(tool, _)| is_final(tool)) {
        let output: String = output.chars().take(QA_OUTPUT_CHARS).collect();
        return Reply::text(format!("QA_DONE {output}"));
    }
    if conversation.declares(TOOL_SEARCH_CODE) {
        return Reply::call(TOOL_SEARCH_CODE, json!({"code": qa_code(target)}));
    }
    if conversation.declares(TOOL_SEARCH) {
        let latest = outputs.iter().rev().find(|(tool, _)| *tool == TOOL_SEARCH);
        return match latest {
            None => Reply::call(TOOL_SEARCH, json!({"queries": [{"query": target}]})),
            Some((_, output)) => match candidate_id(output, target) {
                Some(id) => Reply::call(TOOL_CALL, json!({"id": id, "args": {"marker": marker}})),
                None => Reply::text("QA_FAIL target not found by tool_search"),
            },
        };
    }
    if let Some(direct) = direct {
        return Reply::call(&direct, json!({"marker": marker}));
    }
    Reply::text("QA_FAIL target not reachable")
}

/// The id of the candidate named `target` in a `tool_search` output: a batch result
/// (`{"results": [{"candidates": [...]}]}`), an object with `candidates`, or a plain list.
fn candidate_id(output: &str, target: &str) -> Option<String> {
    let value: Value = Budget::default().parse(output).ok()?;
    let candidates: Vec<&Value> = match &value {
        Value::Array(list) => list.iter().collect(),
        Value::Object(obj) => match (obj.get("results"), obj.get("candidates")) {
            (Some(Value::Array(results)), _) => results
                .iter()
                .filter_map(|r| r.get("candidates").and_then(Value::as_array))
                .flatten()
                .collect(),
            (_, Some(Value::Array(list))) => list.iter().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let hit = candidates
        .into_iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(target))?;
    Some(
        hit.get("id")
            .and_then(Value::as_str)
            .unwrap_or(target)
            .to_string(),
    )
}

/// The scenario step for this request (see the module documentation), replaying which
/// steps the conversation's assistant turns used.
fn scripted_reply(scenario: &Scenario, conversation: &Conversation) -> Option<Reply> {
    let steps = &scenario.steps;
    let mut used = vec![false; steps.len()];
    let next = |used: &[bool], user: &str| {
        steps.iter().enumerate().position(|(i, step)| {
            !used[i] && step.when.as_deref().is_none_or(|when| user.contains(when))
        })
    };
    let mut last_user = "";
    for item in &conversation.items {
        match item {
            Item::User(text) => last_user = text,
            Item::Assistant(_) => {
                if let Some(i) = next(&used, last_user) {
                    used[i] = true;
                }
            }
            Item::Output { .. } => {}
        }
    }
    next(&used, last_user).map(|i| steps[i].reply.clone())
}
