//! Every provider's tool calls, non-streamed or streamed, as [`ToolCall`]s `{id, name,
//! arguments: object}`.
//!
//! The rules, the same for every format:
//! - arguments given as a JSON string are parsed; an empty string, `null` (or the string
//!   `"null"`) means `{}`; an object is taken as is; anything else, or text that is not
//!   JSON, is `bad-tool-call` naming the tool (the message shows the first
//!   [`ARGUMENT_PREVIEW_CHARS`] characters of the text);
//! - a call with a missing, empty or `"null"` id gets `call_<n>`, n its 1-based position
//!   among the calls of the response (or stream), so ids are deterministic and tests can
//!   assert them;
//! - a call without a name is `bad-tool-call` (named `#n`);
//! - a response that carries an `error` object is `provider-error` with its message; one
//!   whose shape is wrong where tool calls would be is `bad-provider-response`. Parts that
//!   are not tool calls (text, reasoning, server-side tools) are ignored.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;

use futures::{FutureExt, StreamExt};
use serde_json::{Map, Value, json};
use sse_stream::SseStream;

use super::{Provider, ProviderError, ToolCall};

/// Characters of a bad argument text quoted in the error message.
pub const ARGUMENT_PREVIEW_CHARS: usize = 100;

/// The most tool calls one answer may make: a model makes a handful at once, and each call
/// is work the host does, so an answer with more is refused (`bad-provider-response`)
/// rather than run.
pub const MAX_TOOL_CALLS: usize = 64;

/// The tool calls of one non-streamed response, in the order the provider gave them.
///
/// - Chat Completions: `choices[0].message.tool_calls[]` (`{id, type: "function",
///   function: {name, arguments}}`), or Mistral's `toolCalls`, arguments a string or an
///   object; the legacy `function_call: {name, arguments}` when there are no tool calls.
/// - Responses: `output[]` items of type `function_call`; the id is `call_id` (what a
///   `function_call_output` must name), else the item's `id`.
/// - Anthropic: `content[]` blocks of type `tool_use` (`{id, name, input}`).
/// - Google: `candidates[0].content.parts[].functionCall` (`{name, args, id?}`). A response
///   without candidates (a blocked prompt, a usage-only chunk) has no calls.
pub fn tool_calls(provider: Provider, response: &Value) -> Result<Vec<ToolCall>, ProviderError> {
    let raw = raw_calls(provider, response)?;
    if raw.len() > MAX_TOOL_CALLS {
        return Err(too_many_calls(provider, raw.len()));
    }
    finish_calls(raw)
}

fn too_many_calls(provider: Provider, n: usize) -> ProviderError {
    bad(
        provider,
        &format!("the answer makes {n} tool calls; at most {MAX_TOOL_CALLS} are run at once"),
    )
}

/// A call as found, before its arguments are parsed and its id filled in.
#[derive(Debug, Default)]
struct RawCall {
    id: Option<String>,
    name: String,
    arguments: RawArgs,
}

#[derive(Debug, Default)]
enum RawArgs {
    #[default]
    Missing,
    /// Argument text (a JSON string in the response, or assembled fragments).
    Text(String),
    /// Arguments given as JSON (an object, or anything wrong).
    Json(Value),
}

impl RawArgs {
    fn of(value: Option<&Value>) -> RawArgs {
        match value {
            None | Some(Value::Null) => RawArgs::Missing,
            Some(Value::String(text)) => RawArgs::Text(text.clone()),
            Some(other) => RawArgs::Json(other.clone()),
        }
    }
}

fn raw_calls(provider: Provider, response: &Value) -> Result<Vec<RawCall>, ProviderError> {
    let Some(obj) = response.as_object() else {
        return Err(bad(provider, "the response is not a JSON object"));
    };
    upstream_error(obj)?;
    match provider {
        Provider::OpenaiCompletions => {
            let choices = array_field(provider, obj, "choices")?
                .ok_or_else(|| bad(provider, "the response has no `choices` array"))?;
            // No choice is no answer, not an empty one (front round 18 F3: `choices: []`
            // was said `completed` with no text).
            let Some(choice) = choices.iter().find(|c| is_answer_choice(c)) else {
                return Err(bad(provider, "the response has no choice 0"));
            };
            let Some(message) = choice.get("message").and_then(Value::as_object) else {
                return Err(bad(provider, "`choices[0]` has no `message` object"));
            };
            let mut calls = Vec::new();
            for call in chat_tool_calls(provider, message)? {
                let Some(call) = call.as_object() else {
                    return Err(bad(provider, "a tool call is not a JSON object"));
                };
                if !is_function_type(call) {
                    continue;
                }
                let function = call.get("function").and_then(Value::as_object);
                calls.push(RawCall {
                    id: usable_id(call.get("id")),
                    name: str_field(function, "name"),
                    arguments: RawArgs::of(function.and_then(|f| f.get("arguments"))),
                });
            }
            if calls.is_empty()
                && let Some(legacy) = message.get("function_call").and_then(Value::as_object)
            {
                calls.push(RawCall {
                    id: None,
                    name: str_field(Some(legacy), "name"),
                    arguments: RawArgs::of(legacy.get("arguments")),
                });
            }
            Ok(calls)
        }
        Provider::OpenaiResponses => {
            unfinished_response(obj)?;
            let output = array_field(provider, obj, "output")?
                .ok_or_else(|| bad(provider, "the response has no `output` array"))?;
            Ok(output
                .iter()
                .filter_map(Value::as_object)
                .filter(|item| item.get("type").and_then(Value::as_str) == Some("function_call"))
                .map(|item| RawCall {
                    id: usable_id(item.get("call_id")).or_else(|| usable_id(item.get("id"))),
                    name: str_field(Some(item), "name"),
                    arguments: RawArgs::of(item.get("arguments")),
                })
                .collect())
        }
        Provider::Anthropic => {
            // A whole message ends with its reason; a null one is a message still being
            // written (a stream's `message_start`), not an answer (front round 18 F3).
            if obj.get("stop_reason").is_some_and(Value::is_null) {
                return Err(bad(
                    provider,
                    "the message's `stop_reason` is null: it did not end",
                ));
            }
            let content = array_field(provider, obj, "content")?
                .ok_or_else(|| bad(provider, "the response has no `content` array"))?;
            Ok(content
                .iter()
                .filter_map(Value::as_object)
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_use"))
                .map(|block| RawCall {
                    id: usable_id(block.get("id")),
                    name: str_field(Some(block), "name"),
                    arguments: RawArgs::of(block.get("input")),
                })
                .collect())
        }
        Provider::Google => {
            let Some(candidates) = array_field(provider, obj, "candidates")? else {
                return Ok(Vec::new());
            };
            let parts = candidates
                .first()
                .and_then(|c| c.get("content"))
                .and_then(|c| c.get("parts"));
            let parts = match parts {
                None | Some(Value::Null) => return Ok(Vec::new()),
                Some(Value::Array(parts)) => parts,
                Some(_) => {
                    return Err(bad(
                        provider,
                        "`candidates[0].content.parts` is not an array",
                    ));
                }
            };
            Ok(parts
                .iter()
                .filter_map(|p| p.get("functionCall").and_then(Value::as_object))
                .map(|call| RawCall {
                    id: usable_id(call.get("id")),
                    name: str_field(Some(call), "name"),
                    arguments: RawArgs::of(call.get("args")),
                })
                .collect())
        }
    }
}

/// Whether a Chat choice is the answer's: the one of `index` 0, or one that gives no index.
/// Only one choice is a turn; with `n > 1` the others come with their index, in any order
/// (front round 16 F11: a chunk listing choice 1 before choice 0 lost choice 0's text).
fn is_answer_choice(choice: &Value) -> bool {
    choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0
}

/// The answer's choice of a Chat response or chunk ([`is_answer_choice`]).
fn answer_choice(holder: &Value) -> Option<&Value> {
    holder
        .get("choices")?
        .as_array()?
        .iter()
        .find(|c| is_answer_choice(c))
}

/// `tool_calls`, or Mistral's `toolCalls`; `null` or absent is none.
fn chat_tool_calls(
    provider: Provider,
    holder: &Map<String, Value>,
) -> Result<&[Value], ProviderError> {
    for key in ["tool_calls", "toolCalls"] {
        match holder.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => return Ok(calls),
            Some(_) => return Err(bad(provider, &format!("`{key}` is not an array"))),
        }
    }
    Ok(&[])
}

/// A Chat Completions tool call of type `function`, or of no stated type (Mistral and
/// several compatible servers leave it out). Other types (`custom`) are not ours.
fn is_function_type(call: &Map<String, Value>) -> bool {
    match call.get("type") {
        None | Some(Value::Null) => true,
        Some(t) => t == "function",
    }
}

/// An `error` object (or message) in place of a result: OpenAI's and Google's
/// `{"error": {...}}`, Anthropic's `{"type": "error", "error": {...}}`, a failed Responses
/// object. `"error": null` (a Responses object that succeeded) is no error.
fn upstream_error(obj: &Map<String, Value>) -> Result<(), ProviderError> {
    match obj.get("error") {
        None | Some(Value::Null) => Ok(()),
        Some(error) => Err(reported(error)),
    }
}

/// A Responses object whose `status` says it has not ended well: `cancelled`, `queued`,
/// `in_progress` or `failed` (a server that gives none is taken at its word). They were
/// read as finished answers, and their partial or empty text said `completed` (front round
/// 18 F2).
fn unfinished_response(response: &Map<String, Value>) -> Result<(), ProviderError> {
    match response.get("status").and_then(Value::as_str) {
        None | Some("completed" | "incomplete") => Ok(()),
        Some(status) => Err(ProviderError::Upstream {
            message: format!("the response ended with status `{status}`, not completed"),
            kind: None,
            code: None,
        }),
    }
}

/// A provider's error object as an error: its message, and its `type` and `code` when it
/// gave them as text.
fn reported(error: &Value) -> ProviderError {
    let field = |key: &str| match error.get(key)? {
        Value::String(s) => Some(s.clone()),
        // vLLM and Google send `code` as a number (`429`).
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    ProviderError::Upstream {
        message: error_message(error),
        kind: field("type"),
        code: field("code"),
    }
}

fn error_message(error: &Value) -> String {
    match error {
        Value::String(message) => message.clone(),
        Value::Object(map) => match map.get("message").and_then(Value::as_str) {
            Some(message) => {
                let kind = map
                    .get("type")
                    .or_else(|| map.get("status"))
                    .or_else(|| map.get("code"))
                    .and_then(Value::as_str);
                match kind {
                    Some(kind) => format!("{kind}: {message}"),
                    None => message.to_string(),
                }
            }
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

/// `obj[key]` as an array; `Ok(None)` when absent or null.
fn array_field<'a>(
    provider: Provider,
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a [Value]>, ProviderError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(bad(provider, &format!("`{key}` is not an array"))),
    }
}

fn str_field(obj: Option<&Map<String, Value>>, key: &str) -> String {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// An id worth keeping: a non-empty string other than `"null"` (which some compatible
/// servers send when they have none).
fn usable_id(value: Option<&Value>) -> Option<String> {
    match value {
        Some(Value::String(id)) if !id.is_empty() && id != "null" => Some(id.clone()),
        _ => None,
    }
}

fn bad(provider: Provider, message: &str) -> ProviderError {
    ProviderError::BadResponse(format!("{provider}: {message}"))
}

/// Ids filled in and arguments parsed, in order. The argument texts of one answer share
/// one bound on the values they parse into ([`super::bounded::MAX_JSON_VALUES`]).
fn finish_calls(raw: Vec<RawCall>) -> Result<Vec<ToolCall>, ProviderError> {
    let values: usize = raw
        .iter()
        .map(|c| match &c.arguments {
            RawArgs::Text(text) | RawArgs::Json(Value::String(text)) => {
                super::bounded::count_values(text.as_bytes())
            }
            _ => 0,
        })
        .sum();
    if values > super::bounded::MAX_JSON_VALUES {
        return Err(ProviderError::BadResponse(format!(
            "the tool calls' arguments hold about {values} JSON values; at most {} are read",
            super::bounded::MAX_JSON_VALUES
        )));
    }
    let mut calls = raw
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let position = i + 1;
            if call.name.is_empty() {
                return Err(ProviderError::BadToolCall {
                    tool: format!("#{position}"),
                    message: "the call has no tool name".into(),
                });
            }
            // Arguments that cannot be read are the model's mistake, not the provider's:
            // the call is answered to the model, which can call again.
            let (arguments, unreadable) = match parse_arguments(&call.name, call.arguments) {
                Ok(arguments) => (arguments, None),
                Err(ProviderError::BadToolCall { message, .. }) => {
                    (Value::Object(Map::new()), Some(message))
                }
                Err(other) => return Err(other),
            };
            Ok(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{position}")),
                name: call.name,
                arguments,
                unreadable,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    unique_ids(&mut calls, []);
    Ok(calls)
}

/// Each call's id made its own: a provider that gives two calls one id (or an id equal to
/// one made for a call without) had both reach the client, whose two answers were then
/// refused for ever as one call answered twice (front round 10 F5). A repeated id gets
/// `_2`, `_3`... (the first keeps its own); the model is sent the calls under these ids.
/// `taken` are ids the conversation holds already: a provider that numbers each answer's
/// calls from `call_1` repeated them every round (front round 12).
pub fn unique_ids<'a>(calls: &mut [ToolCall], taken: impl IntoIterator<Item = &'a str>) {
    let mut seen: HashSet<String> = taken.into_iter().map(str::to_string).collect();
    for call in calls.iter_mut() {
        if seen.insert(call.id.clone()) {
            continue;
        }
        let mut n = 2;
        while seen.contains(&format!("{}_{n}", call.id)) {
            n += 1;
        }
        call.id = format!("{}_{n}", call.id);
        seen.insert(call.id.clone());
    }
}

fn parse_arguments(tool: &str, raw: RawArgs) -> Result<Value, ProviderError> {
    let bad_call = |message: String| ProviderError::BadToolCall {
        tool: tool.to_string(),
        message,
    };
    let value = match raw {
        RawArgs::Missing => return Ok(Value::Object(Map::new())),
        RawArgs::Json(Value::String(text)) | RawArgs::Text(text) => {
            if text.trim().is_empty() {
                return Ok(Value::Object(Map::new()));
            }
            match super::bounded::read::<Value>(&text) {
                Ok(Value::Object(map)) => return Ok(Value::Object(map)),
                Ok(Value::Null) => return Ok(Value::Object(Map::new())),
                Ok(other) => {
                    return Err(bad_call(format!(
                        "the arguments must be a JSON object, not {}: {}",
                        kind(&other),
                        preview(&text)
                    )));
                }
                Err(e) => {
                    return Err(bad_call(format!(
                        "the arguments are not valid JSON ({e}): {}",
                        preview(&text)
                    )));
                }
            }
        }
        RawArgs::Json(value) => value,
    };
    match value {
        Value::Object(map) => Ok(Value::Object(map)),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(bad_call(format!(
            "the arguments must be a JSON object, not {}: {}",
            kind(&other),
            preview(&other.to_string())
        ))),
    }
}

fn kind(value: &Value) -> &'static str {
    crate::error::json_type_name(value)
}

fn preview(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(ARGUMENT_PREVIEW_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

// ---------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------

/// The `data:` payloads of an SSE body, each parsed as JSON, in order.
///
/// The body is read by `sse-stream` (the SSE rules: events end at a blank line, an event's
/// `data:` lines are joined with `\n`, `\n`, `\r\n` and `\r` all end a line, a leading BOM
/// is dropped). On top of it: comments (`:`), `event:`, `id:` and `retry:` carry no data
/// and are skipped, and so are lines that are not SSE at all; the `[DONE]` sentinel of
/// OpenAI-compatible streams is skipped; a last event the body does not end with a blank
/// line still counts. An event that is not JSON when joined is tried line by line (servers
/// that forget the blank line between events); a payload that is still not JSON is skipped:
/// a truncated stream then shows up as arguments that do not parse, which
/// [`StreamAssembler::finish`] reports with the tool's name.
pub fn parse_sse(text: &str) -> Vec<Value> {
    // One chunk per line: sse-stream answers a line that is not SSE with an error and drops
    // the rest of its chunk, so a stray line costs only itself. The blank line at the end
    // closes an event the body left open (sse-stream drops an unfinished event).
    let lines = text
        .split_inclusive('\n')
        .chain(["\n\n"])
        .map(|line| Ok::<_, Infallible>(line.as_bytes()));
    let events = SseStream::from_bytes_stream(futures::stream::iter(lines))
        .filter_map(|event| std::future::ready(event.ok().and_then(|e| e.data)))
        .collect::<Vec<String>>()
        // The chunks are all there: the stream never waits, so one poll reads it all.
        .now_or_never()
        .unwrap_or_default();
    events
        .iter()
        .flat_map(|data| match event_values(data) {
            Ok(values) => values,
            Err(_) => data
                .lines()
                .filter_map(|line| super::bounded::read::<Value>(line.trim()).ok())
                .collect(),
        })
        .collect()
}

/// The JSON values of one SSE event's data: none for `[DONE]` or a blank event, one for
/// JSON, else one per line (servers that forget the blank line between events). A line
/// that is not JSON is an error naming it: the gateway's answers fail on it rather than
/// lose its text (front round 13 F4: a delta with an escaped lone surrogate was dropped and
/// the turn said it succeeded). [`parse_sse`], which reads recorded bodies, skips such lines.
pub fn event_values(data: &str) -> Result<Vec<Value>, String> {
    let data = data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(Vec::new());
    }
    if let Ok(value) = super::bounded::read::<Value>(data) {
        return Ok(vec![value]);
    }
    data.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            super::bounded::read::<Value>(line).map_err(|e| {
                let shown: String = line.chars().take(80).collect();
                format!("an event that is not JSON ({e}): {shown}")
            })
        })
        .collect()
}

/// Whether a Responses stream event of this type closes an answer with the whole response
/// in it (`response.completed`, or `.incomplete`): its text, calls and usage are read from
/// either (front round 16 F5: an answer closed by `response.incomplete` lost its usage, and
/// its text when only the closing object had it).
fn closes_responses(kind: &str) -> bool {
    matches!(kind, "response.completed" | "response.incomplete")
}

/// Whether `event` (or the data `[DONE]`) is the event `provider` ends a whole answer
/// with: Chat Completions a `finish_reason` on a choice (or `[DONE]`), Responses
/// `response.completed`, `.incomplete` or `.failed`, Anthropic `message_stop` (or the
/// `message_delta` carrying the stop reason), Gemini a candidate's `finishReason`. A stream
/// whose body ends without one was cut short, and its answer must not pass as whole (front
/// round 13 F1: a cut stream was answered `completed`, stored and continued).
pub fn ends_answer(provider: Provider, data: &str, event: Option<&Value>) -> bool {
    if last_event(provider, data, event) {
        return true;
    }
    // An empty reason is none (round 26 F1: `finish_reason: ""` mid-stream was taken for
    // the end).
    event
        .and_then(|e| stop_reason(provider, e))
        .is_some_and(|r| !r.is_null() && r.as_str() != Some(""))
}

/// Whether a stream event is the last its provider sends: Chat's `[DONE]`, a Responses
/// closing event, Anthropic's `message_stop`. Nothing is read after it: a provider that
/// kept its connection open after a whole answer had the answer failed at `timeout_ms`
/// (front round 20 F1). Gemini names no last event.
pub fn last_event(provider: Provider, data: &str, event: Option<&Value>) -> bool {
    if data.trim() == "[DONE]" {
        return provider == Provider::OpenaiCompletions;
    }
    let kind = event.and_then(|e| e.get("type")).and_then(Value::as_str);
    match provider {
        Provider::OpenaiResponses => matches!(
            kind,
            Some("response.completed" | "response.incomplete" | "response.failed")
        ),
        Provider::Anthropic => kind == Some("message_stop"),
        Provider::OpenaiCompletions | Provider::Google => false,
    }
}

/// Where `provider` says why an answer stopped, in a whole answer or a stream event: Chat
/// the answer's choice's `finish_reason` (`finishReason` for some servers), Anthropic the
/// message's `stop_reason` (a stream's `message_delta` has it in `delta`), Gemini the first
/// candidate's `finishReason`. The Responses API says it in its status instead. One place,
/// so the end check and the ending read the same field.
fn stop_reason(provider: Provider, value: &Value) -> Option<&Value> {
    match provider {
        Provider::OpenaiCompletions => {
            let choice = answer_choice(value)?;
            choice
                .get("finish_reason")
                .or_else(|| choice.get("finishReason"))
        }
        Provider::Anthropic => match value.get("type").and_then(Value::as_str) {
            Some("message_delta") => value.pointer("/delta/stop_reason"),
            _ => value.get("stop_reason"),
        },
        Provider::Google => value.pointer("/candidates/0/finishReason"),
        Provider::OpenaiResponses => None,
    }
}

/// The cut a whole answer's or a stream event's stop reason says, if it says one.
fn cut_of(provider: Provider, value: &Value) -> Option<Option<Cut>> {
    stop_reason(provider, value)
        .and_then(Value::as_str)
        .map(|r| Cut::of(provider, r))
}

/// Assembles the tool calls of one streamed response from its events, pushed in order.
///
/// - Chat Completions: `choices[].delta.tool_calls[]` (or `toolCalls`) of choice 0,
///   fragments grouped by `index`: the id and name come with the first fragment, the
///   argument text is concatenated; an object `arguments` (Mistral) is taken whole. A
///   fragment whose id differs from the call at its index starts a new call (servers that
///   send every call complete at index 0). The legacy `delta.function_call` is one call.
/// - Responses: `response.output_item.added` starts a `function_call` item;
///   `response.function_call_arguments.delta` appends to it (by `item_id`, else
///   `output_index`); `response.function_call_arguments.done` and
///   `response.output_item.done` carry the full arguments, which win over the deltas.
///   `response.completed` is used only when no item came before it; `error` and
///   `response.failed` are `provider-error`.
/// - Anthropic: `content_block_start` of a `tool_use` block (`index`, `id`, `name`,
///   `input`), `content_block_delta` with `input_json_delta.partial_json` fragments;
///   fragments of other blocks (text, server tools) are ignored; `error` is
///   `provider-error`.
/// - Google: every chunk is a whole response with complete `functionCall`s; they are
///   collected in order.
///
/// Ids are filled in at [`StreamAssembler::finish`], by position in the whole stream.
#[derive(Debug)]
pub struct StreamAssembler {
    provider: Provider,
    calls: Vec<Partial>,
    /// Chat: tool-call `index` -> call; Anthropic: content block `index`; Responses:
    /// `output_index`.
    by_index: HashMap<u64, usize>,
    /// Responses: item `id` -> call; Chat: call `id` -> call (fragments without an index).
    by_item: HashMap<String, usize>,
    /// Anthropic: the type of each content block started, by index.
    blocks: HashMap<u64, String>,
    /// Anthropic: the blocks started and not stopped yet, and whether the message's stop
    /// reason says it was cut.
    open: HashSet<u64>,
    cut: bool,
    /// Responses: the `message` items added, by id and by output index, which alone may
    /// carry text.
    text_items: HashSet<String>,
    text_indexes: HashSet<u64>,
}

/// One call being assembled.
#[derive(Debug, Default)]
struct Partial {
    id: Option<String>,
    name: String,
    /// Concatenated argument fragments.
    text: String,
    /// Arguments given whole as JSON (Mistral objects, Anthropic's start `input`, Google).
    json: Option<Value>,
    /// Full argument text from a `done` event: wins over the fragments.
    full: Option<String>,
    /// Responses: its `output_item.done` came (a later one is another item's).
    item_done: bool,
}

/// Chat Completions' legacy `function_call` stream has no index; it gets this one.
const LEGACY_FUNCTION_CALL: u64 = u64::MAX;

impl StreamAssembler {
    pub fn new(provider: Provider) -> Self {
        StreamAssembler {
            provider,
            calls: Vec::new(),
            by_index: HashMap::new(),
            by_item: HashMap::new(),
            blocks: HashMap::new(),
            open: HashSet::new(),
            cut: false,
            text_items: HashSet::new(),
            text_indexes: HashSet::new(),
        }
    }

    /// One event: the parsed JSON of one SSE `data:` payload (see [`parse_sse`]).
    pub fn push(&mut self, event: &Value) -> Result<(), ProviderError> {
        let provider = self.provider;
        let Some(obj) = event.as_object() else {
            return Err(bad(provider, "a stream event is not a JSON object"));
        };
        match provider {
            Provider::OpenaiCompletions => self.push_chat(obj),
            Provider::OpenaiResponses => self.push_responses(obj),
            Provider::Anthropic => self.push_anthropic(obj),
            Provider::Google => {
                for call in raw_calls(provider, event)? {
                    let at = self.new_call()?;
                    self.calls[at] = Partial {
                        id: call.id,
                        name: call.name,
                        text: String::new(),
                        json: match call.arguments {
                            RawArgs::Missing => None,
                            RawArgs::Text(text) => Some(Value::String(text)),
                            RawArgs::Json(value) => Some(value),
                        },
                        full: None,
                        item_done: false,
                    };
                }
                Ok(())
            }
        }
    }

    /// The assembled calls, ids filled in and arguments parsed.
    pub fn finish(self) -> Result<Vec<ToolCall>, ProviderError> {
        // The stream ended, at `message_stop` or after the `message_delta` that says why
        // (front round 26 F2: a body that ended there skipped the check at `message_stop`).
        self.no_call_left_open()?;
        let raw = self
            .calls
            .into_iter()
            .map(|p| RawCall {
                id: p.id,
                name: p.name,
                arguments: if let Some(full) = p.full {
                    RawArgs::Text(full)
                } else if !p.text.is_empty() {
                    RawArgs::Text(p.text)
                } else if let Some(json) = p.json {
                    RawArgs::Json(json)
                } else {
                    RawArgs::Missing
                },
            })
            .collect();
        finish_calls(raw)
    }

    /// Anthropic: no `tool_use` block still open when a message that says it ended whole
    /// stops: its arguments were read as a finished call that did not parse, and the turn
    /// asked again until its round limit (front round 25). A message cut short
    /// (`max_tokens`) is read as cut, its open block with it; an open text block loses
    /// nothing.
    fn no_call_left_open(&self) -> Result<(), ProviderError> {
        let open_call = self
            .open
            .iter()
            .filter(|i| self.blocks.get(i).is_some_and(|t| t == "tool_use"))
            .min();
        match open_call {
            Some(index) if !self.cut => Err(bad(
                self.provider,
                &format!("the message stopped with content block {index} still open"),
            )),
            _ => Ok(()),
        }
    }

    /// A new call; past [`MAX_TOOL_CALLS`] the stream is refused.
    fn new_call(&mut self) -> Result<usize, ProviderError> {
        if self.calls.len() >= MAX_TOOL_CALLS {
            return Err(too_many_calls(self.provider, self.calls.len() + 1));
        }
        self.calls.push(Partial::default());
        Ok(self.calls.len() - 1)
    }

    fn push_chat(&mut self, obj: &Map<String, Value>) -> Result<(), ProviderError> {
        let provider = self.provider;
        upstream_error(obj)?;
        // A usage-only chunk has no (or empty) choices.
        let Some(choices) = array_field(provider, obj, "choices")? else {
            return Ok(());
        };
        for choice in choices {
            if !is_answer_choice(choice) {
                continue;
            }
            let Some(delta) = choice.get("delta").and_then(Value::as_object) else {
                continue;
            };
            for fragment in chat_tool_calls(provider, delta)? {
                let Some(fragment) = fragment.as_object() else {
                    return Err(bad(provider, "a tool call delta is not a JSON object"));
                };
                if !is_function_type(fragment) {
                    continue;
                }
                let index = fragment.get("index").and_then(Value::as_u64);
                let id = usable_id(fragment.get("id"));
                let at = self.chat_call(index, id.as_deref())?;
                self.merge_fragment(at, id, fragment.get("function"));
            }
            if let Some(legacy) = delta.get("function_call").filter(|f| f.is_object()) {
                let at = self.chat_call(Some(LEGACY_FUNCTION_CALL), None)?;
                self.merge_fragment(at, None, Some(legacy));
            }
        }
        Ok(())
    }

    /// The call a Chat fragment belongs to (see [`StreamAssembler`]).
    fn chat_call(&mut self, index: Option<u64>, id: Option<&str>) -> Result<usize, ProviderError> {
        let same_id = |calls: &[Partial], at: usize| match (calls[at].id.as_deref(), id) {
            (Some(known), Some(id)) => known == id,
            _ => true,
        };
        match index {
            Some(index) => match self.by_index.get(&index) {
                Some(&at) if same_id(&self.calls, at) => Ok(at),
                _ => {
                    let at = self.new_call()?;
                    self.by_index.insert(index, at);
                    Ok(at)
                }
            },
            None => {
                if let Some(id) = id
                    && let Some(&at) = self.by_item.get(id)
                {
                    return Ok(at);
                }
                match self.calls.len() {
                    len if len > 0 && id.is_none() => Ok(len - 1),
                    _ => self.new_call(),
                }
            }
        }
    }

    fn merge_fragment(&mut self, at: usize, id: Option<String>, function: Option<&Value>) {
        let call = &mut self.calls[at];
        if call.id.is_none() {
            if let Some(id) = &id {
                self.by_item.entry(id.clone()).or_insert(at);
            }
            call.id = id;
        }
        let Some(function) = function.and_then(Value::as_object) else {
            return;
        };
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && call.name.is_empty()
        {
            call.name = name.to_string();
        }
        match function.get("arguments") {
            Some(Value::String(fragment)) => call.text.push_str(fragment),
            Some(whole @ Value::Object(_)) => call.json = Some(whole.clone()),
            _ => {}
        }
    }

    fn push_responses(&mut self, obj: &Map<String, Value>) -> Result<(), ProviderError> {
        let provider = self.provider;
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            return Err(bad(provider, "a stream event has no `type`"));
        };
        match kind {
            "response.output_item.added" | "response.output_item.done" => {
                let Some(item) = obj.get("item").and_then(Value::as_object) else {
                    return Err(bad(provider, &format!("`{kind}` has no `item` object")));
                };
                let item_id = usable_id(item.get("id"));
                let output_index = obj.get("output_index").and_then(Value::as_u64);
                if item.get("type").and_then(Value::as_str) == Some("message") {
                    self.text_items.extend(item_id);
                    self.text_indexes.extend(output_index);
                    return Ok(());
                }
                if item.get("type").and_then(Value::as_str) != Some("function_call") {
                    return Ok(());
                }
                // An item added is a new call, whatever id it reuses: found by its id, a
                // second call sharing the first's was merged into it and lost (front
                // round 10 F5). Its deltas and its end go to the newest of that id.
                // The same for an item done whose call is done already: items that came
                // only as `done`, sharing an id, were merged into one (front round 11).
                let found = if kind == "response.output_item.added" {
                    None
                } else {
                    self.responses_call(item_id.as_deref(), output_index)
                        .filter(|&at| !self.calls[at].item_done)
                };
                let at = match found {
                    Some(at) => at,
                    None => {
                        let at = self.new_call()?;
                        if let Some(item_id) = &item_id {
                            self.by_item.insert(item_id.clone(), at);
                        }
                        if let Some(output_index) = output_index {
                            self.by_index.insert(output_index, at);
                        }
                        at
                    }
                };
                let call = &mut self.calls[at];
                if call.id.is_none() {
                    call.id = usable_id(item.get("call_id")).or(item_id);
                }
                if call.name.is_empty() {
                    call.name = str_field(Some(item), "name");
                }
                call.item_done |= kind == "response.output_item.done";
                if let Some(arguments) = item.get("arguments").and_then(Value::as_str) {
                    if kind == "response.output_item.done" {
                        call.full = Some(arguments.to_string());
                    } else {
                        call.text.push_str(arguments);
                    }
                }
                Ok(())
            }
            "response.function_call_arguments.delta" | "response.function_call_arguments.done" => {
                let item_id = obj.get("item_id").and_then(Value::as_str);
                let output_index = obj.get("output_index").and_then(Value::as_u64);
                let Some(at) = self.responses_call(item_id, output_index) else {
                    return Err(bad(
                        provider,
                        &format!(
                            "`{kind}` for an item that was never added (item_id {}, output_index {})",
                            item_id.unwrap_or("none"),
                            output_index.map_or("none".to_string(), |i| i.to_string())
                        ),
                    ));
                };
                let call = &mut self.calls[at];
                if kind.ends_with(".delta") {
                    if let Some(delta) = obj.get("delta").and_then(Value::as_str) {
                        call.text.push_str(delta);
                    }
                } else {
                    if let Some(arguments) = obj.get("arguments").and_then(Value::as_str) {
                        call.full = Some(arguments.to_string());
                    }
                    if call.name.is_empty() {
                        call.name = str_field(Some(obj), "name");
                    }
                }
                Ok(())
            }
            // Text in a call's item, or in an item never added while message items were:
            // it was passed on as the answer's (front round 21 F4), and the official SDKs'
            // stream helpers refuse such a stream. A server that adds no items at all (a
            // minimal emulation of the API) still has its text read.
            "response.output_text.delta" | "response.output_text.done" => {
                let item_id = obj.get("item_id").and_then(Value::as_str);
                let output_index = obj.get("output_index").and_then(Value::as_u64);
                // By id, or by index for a message item added without one (front round
                // 22: such an item's deltas, naming an id, were refused).
                let known = item_id.is_some_and(|id| self.text_items.contains(id))
                    || output_index.is_some_and(|i| self.text_indexes.contains(&i));
                let a_call = self.responses_call(item_id, output_index).is_some();
                let none_added = self.text_items.is_empty() && self.text_indexes.is_empty();
                if known || (none_added && !a_call) {
                    return Ok(());
                }
                Err(bad(
                    provider,
                    &format!(
                        "`{kind}` for a message item that was never added (item_id {}, output_index {})",
                        item_id.unwrap_or("none"),
                        output_index.map_or("none".to_string(), |i| i.to_string())
                    ),
                ))
            }
            kind if closes_responses(kind) => {
                if let Some(response) = obj.get("response").and_then(Value::as_object) {
                    unfinished_response(response)?;
                }
                if self.calls.is_empty()
                    && let Some(response) = obj.get("response")
                {
                    let raw = raw_calls(provider, response)?;
                    if raw.len() > MAX_TOOL_CALLS {
                        return Err(too_many_calls(provider, raw.len()));
                    }
                    for call in raw {
                        self.calls.push(Partial {
                            id: call.id,
                            name: call.name,
                            full: match &call.arguments {
                                RawArgs::Text(text) => Some(text.clone()),
                                _ => None,
                            },
                            json: match call.arguments {
                                RawArgs::Json(value) => Some(value),
                                _ => None,
                            },
                            item_done: true,
                            text: String::new(),
                        });
                    }
                }
                Ok(())
            }
            // Responses' stream `error` event has its `code` and `message` beside its
            // `type` (which is the event's, not the error's).
            "error" => Err(match obj.get("error") {
                Some(error) => reported(error),
                None => ProviderError::Upstream {
                    message: obj
                        .get("message")
                        .and_then(Value::as_str)
                        .map_or_else(|| Value::Object(obj.clone()).to_string(), String::from),
                    kind: None,
                    code: match obj.get("code") {
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(Value::Number(n)) => Some(n.to_string()),
                        _ => None,
                    },
                },
            }),
            "response.failed" => Err(obj
                .get("response")
                .and_then(|r| r.get("error"))
                .filter(|e| !e.is_null())
                .map_or_else(
                    || ProviderError::Upstream {
                        message: "the response failed".to_string(),
                        kind: None,
                        code: None,
                    },
                    reported,
                )),
            _ => Ok(()),
        }
    }

    fn responses_call(&self, item_id: Option<&str>, output_index: Option<u64>) -> Option<usize> {
        item_id
            .and_then(|id| self.by_item.get(id))
            .or_else(|| output_index.and_then(|i| self.by_index.get(&i)))
            .copied()
    }

    fn push_anthropic(&mut self, obj: &Map<String, Value>) -> Result<(), ProviderError> {
        let provider = self.provider;
        let kind = obj.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            // Every delta in a block that started, of a kind that block holds, and every
            // block started once: text in a `tool_use` block, a delta of a block never
            // started, or a second start of one index was passed on as text or taken for a
            // second call (front round 21 F4).
            "content_block_start" => {
                let index = block_index(provider, obj, kind)?;
                let Some(block) = obj.get("content_block").and_then(Value::as_object) else {
                    return Err(bad(
                        provider,
                        "`content_block_start` has no `content_block`",
                    ));
                };
                let block_type = str_field(Some(block), "type");
                if self.blocks.insert(index, block_type.clone()).is_some() {
                    return Err(bad(
                        provider,
                        &format!("content block {index} started twice"),
                    ));
                }
                self.open.insert(index);
                if block_type != "tool_use" {
                    return Ok(());
                }
                let at = self.new_call()?;
                self.by_index.insert(index, at);
                let call = &mut self.calls[at];
                call.id = usable_id(block.get("id"));
                call.name = str_field(Some(block), "name");
                call.json = block.get("input").filter(|v| !v.is_null()).cloned();
                Ok(())
            }
            "content_block_delta" => {
                let index = block_index(provider, obj, kind)?;
                let Some(delta) = obj.get("delta").and_then(Value::as_object) else {
                    return Err(bad(provider, "`content_block_delta` has no `delta`"));
                };
                let delta_type = delta.get("type").and_then(Value::as_str).unwrap_or("");
                let Some(block_type) = self.blocks.get(&index) else {
                    return Err(bad(
                        provider,
                        &format!("`{delta_type}` for content block {index}, which never started"),
                    ));
                };
                if !self.open.contains(&index) {
                    return Err(bad(
                        provider,
                        &format!("`{delta_type}` for content block {index}, which had stopped"),
                    ));
                }
                match (delta_type, block_type.as_str()) {
                    ("input_json_delta", "tool_use") => {
                        if let (Some(&at), Some(fragment)) = (
                            self.by_index.get(&index),
                            delta.get("partial_json").and_then(Value::as_str),
                        ) {
                            self.calls[at].text.push_str(fragment);
                        }
                        Ok(())
                    }
                    ("text_delta", block) if block != "text" => Err(bad(
                        provider,
                        &format!("`text_delta` in content block {index}, a `{block}` block"),
                    )),
                    ("input_json_delta", "text") => Err(bad(
                        provider,
                        &format!("`input_json_delta` in content block {index}, a `text` block"),
                    )),
                    _ => Ok(()),
                }
            }
            "content_block_stop" => {
                let index = block_index(provider, obj, kind)?;
                if !self.open.remove(&index) {
                    return Err(bad(
                        provider,
                        &format!("content block {index} stopped, but it was not open"),
                    ));
                }
                Ok(())
            }
            "message_delta" => {
                if let Some(reason) = obj
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.cut = Cut::of(provider, reason).is_some();
                }
                Ok(())
            }
            "message_stop" => self.no_call_left_open(),
            "error" => Err(obj.get("error").map_or_else(
                || ProviderError::Upstream {
                    message: "the stream failed".to_string(),
                    kind: None,
                    code: None,
                },
                reported,
            )),
            _ => Ok(()),
        }
    }
}

fn block_index(
    provider: Provider,
    obj: &Map<String, Value>,
    kind: &str,
) -> Result<u64, ProviderError> {
    obj.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad(provider, &format!("`{kind}` has no `index`")))
}

// ---------------------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------------------

/// The answer's text of one non-streamed response, its parts joined: Chat
/// `choices[0].message.content` (a string, or parts with `text`), the Responses `message`
/// items' text, Anthropic's `text` blocks. Google: the text parts of the first candidate.
pub fn reply_text(provider: Provider, response: &Value) -> String {
    match provider {
        Provider::OpenaiCompletions => {
            match answer_choice(response).and_then(|c| c.pointer("/message/content")) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect(),
                _ => String::new(),
            }
        }
        Provider::OpenaiResponses => responses_output_text(response),
        Provider::Anthropic => response
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        Provider::Google => response
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
    }
}

/// Why a provider ended an answer before its natural end: the token limit, or its content
/// filter (a refusal included). The OpenAI fronts say it as Chat's `finish_reason` and as a
/// Responses `incomplete` status (front round 13 F2: a cut answer was said `completed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cut {
    Length,
    ContentFilter,
}

impl Cut {
    /// Chat Completions' `finish_reason`.
    pub fn finish_reason(self) -> &'static str {
        match self {
            Cut::Length => "length",
            Cut::ContentFilter => "content_filter",
        }
    }

    /// The Responses API's `incomplete_details.reason`.
    pub fn incomplete_reason(self) -> &'static str {
        match self {
            Cut::Length => "max_output_tokens",
            Cut::ContentFilter => "content_filter",
        }
    }

    /// The cut a stop reason says, `None` for the reasons that end an answer as its model
    /// meant to. Every other reason is a cut (front round 14 F2: Anthropic's
    /// `model_context_window_exceeded` and `pause_turn`, Mistral's `model_length` passed as
    /// whole): the content filter's when it is one, else the length's.
    fn of(provider: Provider, reason: &str) -> Option<Cut> {
        let whole = match provider {
            // OpenAI's own and those of servers that speak its Chat API (TGI, vLLM,
            // llama.cpp, Mistral).
            Provider::OpenaiCompletions => matches!(
                reason,
                "" | "stop"
                    | "tool_calls"
                    | "function_call"
                    | "eos_token"
                    | "eos"
                    | "stop_sequence"
                    | "end_turn"
            ),
            Provider::OpenaiResponses => matches!(reason, "" | "completed"),
            Provider::Anthropic => matches!(reason, "" | "end_turn" | "tool_use" | "stop_sequence"),
            Provider::Google => matches!(reason, "" | "STOP" | "FINISH_REASON_UNSPECIFIED"),
        };
        if whole {
            return None;
        }
        let filtered = match provider {
            Provider::OpenaiCompletions | Provider::OpenaiResponses => reason == "content_filter",
            Provider::Anthropic => reason == "refusal",
            Provider::Google => matches!(
                reason,
                "SAFETY"
                    | "RECITATION"
                    | "BLOCKLIST"
                    | "PROHIBITED_CONTENT"
                    | "SPII"
                    | "IMAGE_SAFETY"
            ),
        };
        Some(if filtered {
            Cut::ContentFilter
        } else {
            Cut::Length
        })
    }
}

/// How one answer ended: cut short or not, the refusal the model gave instead of (or
/// with) its text (front round 13 F3: a refusal became an empty answer), and what the
/// provider said of the text besides it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Ending {
    pub cut: Option<Cut>,
    pub refusal: String,
    pub notes: Notes,
}

/// What a provider says of an answer's text: the tokens' log probabilities, when asked
/// for (`logprobs`, `include: [message.output_text.logprobs]`), and annotations such as URL
/// citations (web search). Read from an answer of one text part only, whose offsets are
/// the text's; both OpenAI APIs give a token as `{token, logprob, bytes, top_logprobs}`;
/// annotations are kept in the Responses API's flat shape (`{type: "url_citation", url,
/// title, start_index, end_index}`), which Chat nests under `url_citation` (front round 15
/// F5: both were dropped).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Notes {
    pub logprobs: Vec<Value>,
    pub annotations: Vec<Value>,
}

impl Notes {
    pub fn is_empty(&self) -> bool {
        self.logprobs.is_empty() && self.annotations.is_empty()
    }

    /// Annotations as Chat Completions nests them.
    pub fn chat_annotations(&self) -> Vec<Value> {
        self.annotations
            .iter()
            .map(|a| match a.get("type").and_then(Value::as_str) {
                Some(kind) if a.get(kind).is_none() => {
                    let mut inner = a.clone();
                    if let Some(o) = inner.as_object_mut() {
                        o.remove("type");
                    }
                    json!({"type": kind, kind: inner})
                }
                _ => a.clone(),
            })
            .collect()
    }

    /// Chat Completions' annotations in the flat shape.
    fn from_chat(annotations: &[Value]) -> Vec<Value> {
        annotations
            .iter()
            .map(|a| {
                let kind = a.get("type").and_then(Value::as_str).unwrap_or_default();
                match a.get(kind).and_then(Value::as_object) {
                    Some(inner) => {
                        let mut flat = inner.clone();
                        flat.insert("type".into(), json!(kind));
                        Value::Object(flat)
                    }
                    None => a.clone(),
                }
            })
            .collect()
    }

    /// The notes of a whole answer.
    fn of(provider: Provider, response: &Value) -> Notes {
        let list = |v: Option<&Value>| -> Vec<Value> {
            v.and_then(Value::as_array).cloned().unwrap_or_default()
        };
        match provider {
            Provider::OpenaiCompletions => {
                let choice = answer_choice(response);
                Notes {
                    logprobs: list(choice.and_then(|c| c.pointer("/logprobs/content"))),
                    annotations: Notes::from_chat(&list(
                        choice.and_then(|c| c.pointer("/message/annotations")),
                    )),
                }
            }
            Provider::OpenaiResponses => {
                let parts: Vec<&Value> = response
                    .get("output")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
                    .filter_map(|item| item.get("content").and_then(Value::as_array))
                    .flatten()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("output_text"))
                    .collect();
                match parts.as_slice() {
                    [part] => Notes {
                        logprobs: list(part.get("logprobs")),
                        annotations: list(part.get("annotations")),
                    },
                    _ => Notes::default(),
                }
            }
            Provider::Anthropic | Provider::Google => Notes::default(),
        }
    }
}

/// The ending of a whole (non-streamed) answer.
pub fn ending(provider: Provider, response: &Value) -> Ending {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    match provider {
        Provider::OpenaiCompletions => Ending {
            cut: cut_of(provider, response).flatten(),
            refusal: text(answer_choice(response).and_then(|c| c.pointer("/message/refusal"))),
            notes: Notes::of(provider, response),
        },
        Provider::OpenaiResponses => Ending {
            cut: responses_cut(response),
            refusal: responses_refusal(
                response
                    .get("output")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten(),
            ),
            notes: Notes::of(provider, response),
        },
        Provider::Anthropic | Provider::Google => Ending {
            cut: cut_of(provider, response).flatten(),
            refusal: String::new(),
            notes: Notes::default(),
        },
    }
}

fn responses_cut(response: &Value) -> Option<Cut> {
    if response.get("status").and_then(Value::as_str) != Some("incomplete") {
        return None;
    }
    let reason = response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str)
        .unwrap_or("incomplete");
    Cut::of(Provider::OpenaiResponses, reason).or(Some(Cut::Length))
}

/// The refusal parts of Responses output items.
fn responses_refusal<'a>(items: impl IntoIterator<Item = &'a Value>) -> String {
    items
        .into_iter()
        .filter_map(|item| item.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|part| part.get("type").and_then(Value::as_str) == Some("refusal"))
        .filter_map(|part| part.get("refusal").and_then(Value::as_str))
        .collect()
}

/// The ending of a streamed answer, read event by event. A Responses stream's closing
/// object and its finished items are read as a whole answer is, for servers that say the
/// ending only there (front round 14 F1, F3: an `incomplete` status or a refusal part in
/// `response.completed` alone passed as a whole, empty answer).
#[derive(Debug, Default)]
pub struct StreamEnding {
    ending: Ending,
    /// Refusal text from later sources, each used when the ones before gave none:
    /// `response.refusal.done`, the `output_item.done` items, the closing object.
    refusal_done: String,
    refusal_items: String,
    refusal_closing: String,
    /// A Responses stream's closing object's notes, used when its events gave none.
    notes_closing: Notes,
    /// A Responses stream's text parts (item, output index, content index) that deltas or
    /// annotations named: notes are kept from an answer of one part only, whose offsets are
    /// the text's (front round 22 F3: a second item's citation kept its offsets into the
    /// whole text, marking the first item's words).
    text_parts: HashSet<(String, u64, u64)>,
}

impl StreamEnding {
    pub fn push(&mut self, provider: Provider, event: &Value) {
        let kind = event.get("type").and_then(Value::as_str);
        let e = &mut self.ending;
        match provider {
            Provider::OpenaiCompletions => {
                if let Some(cut) = cut_of(provider, event) {
                    e.cut = cut;
                }
                let choice = answer_choice(event);
                if let Some(piece) = choice
                    .and_then(|c| c.pointer("/delta/refusal"))
                    .and_then(Value::as_str)
                {
                    e.refusal.push_str(piece);
                }
                if let Some(tokens) = choice
                    .and_then(|c| c.pointer("/logprobs/content"))
                    .and_then(Value::as_array)
                {
                    e.notes.logprobs.extend(tokens.iter().cloned());
                }
                if let Some(found) = choice
                    .and_then(|c| c.pointer("/delta/annotations"))
                    .and_then(Value::as_array)
                {
                    e.notes.annotations.extend(Notes::from_chat(found));
                }
            }
            Provider::OpenaiResponses => match kind {
                Some(kind) if closes_responses(kind) => {
                    let closing = event.get("response").map(|r| ending(provider, r));
                    let said = closing.as_ref().and_then(|c| c.cut);
                    e.cut = e
                        .cut
                        .or(said)
                        .or_else(|| (kind == "response.incomplete").then_some(Cut::Length));
                    if let Some(closing) = closing {
                        self.refusal_closing = closing.refusal;
                        self.notes_closing = closing.notes;
                    }
                }
                Some("response.output_text.delta") => {
                    self.text_parts.insert(text_part(event));
                    if let Some(tokens) = event.get("logprobs").and_then(Value::as_array) {
                        e.notes.logprobs.extend(tokens.iter().cloned());
                    }
                }
                Some("response.output_text.annotation.added") => {
                    self.text_parts.insert(text_part(event));
                    if let Some(found) = event.get("annotation") {
                        e.notes.annotations.push(found.clone());
                    }
                }
                Some("response.output_item.done") => {
                    if let Some(item) = event.get("item") {
                        self.refusal_items.push_str(&responses_refusal([item]));
                    }
                }
                Some("response.refusal.delta") => {
                    if let Some(piece) = event.get("delta").and_then(Value::as_str) {
                        e.refusal.push_str(piece);
                    }
                }
                Some("response.refusal.done") => {
                    if let Some(whole) = event.get("refusal").and_then(Value::as_str) {
                        self.refusal_done.push_str(whole);
                    }
                }
                _ => {}
            },
            Provider::Anthropic | Provider::Google => {
                if let Some(cut) = cut_of(provider, event) {
                    e.cut = cut;
                }
            }
        }
    }

    pub fn finish(mut self) -> Ending {
        for later in [self.refusal_done, self.refusal_items, self.refusal_closing] {
            if self.ending.refusal.is_empty() {
                self.ending.refusal = later;
            }
        }
        if self.text_parts.len() > 1 {
            self.ending.notes = Notes::default();
        }
        if self.ending.notes.is_empty() {
            self.ending.notes = self.notes_closing;
        }
        self.ending
    }
}

/// The text part a Responses stream event names.
fn text_part(event: &Value) -> (String, u64, u64) {
    let number = |key: &str| event.get(key).and_then(Value::as_u64).unwrap_or(0);
    let item = event.get("item_id").and_then(Value::as_str).unwrap_or("");
    (
        item.to_string(),
        number("output_index"),
        number("content_index"),
    )
}

/// The piece of the answer's text one stream event carries, if any: Chat
/// `choices[0].delta.content`, Responses `response.output_text.delta`, Anthropic
/// `content_block_delta` of type `text_delta`, a Google chunk's text parts.
pub fn stream_text(provider: Provider, event: &Value) -> Option<String> {
    let text = match provider {
        Provider::OpenaiCompletions => answer_choice(event)?
            .pointer("/delta/content")?
            .as_str()?
            .to_string(),
        Provider::OpenaiResponses => {
            if event.get("type")?.as_str()? != "response.output_text.delta" {
                return None;
            }
            event.get("delta")?.as_str()?.to_string()
        }
        Provider::Anthropic => match event.get("type")?.as_str()? {
            // A text block may start with text of its own.
            "content_block_start" => {
                let block = event.get("content_block")?;
                if block.get("type")?.as_str()? != "text" {
                    return None;
                }
                block.get("text")?.as_str()?.to_string()
            }
            "content_block_delta" => {
                let delta = event.get("delta")?;
                if delta.get("type")?.as_str()? != "text_delta" {
                    return None;
                }
                delta.get("text")?.as_str()?.to_string()
            }
            _ => return None,
        },
        Provider::Google => reply_text(provider, event),
    };
    (!text.is_empty()).then_some(text)
}

/// The answer's text of one stream: its pieces as they come ([`stream_text`]); and, for a
/// Responses stream whose server sends no `response.output_text.delta`, the whole text of
/// its closing events — the `response.output_text.done`s, else the message items of
/// `response.completed` — so such a stream answers what the same answer unstreamed does.
#[derive(Debug, Default)]
pub struct StreamText {
    pieces: String,
    done: String,
    completed: String,
}

impl StreamText {
    /// Reads one event; the piece of text it carries, to pass on at once.
    pub fn push(&mut self, provider: Provider, event: &Value) -> Option<String> {
        if provider == Provider::OpenaiResponses {
            match event.get("type").and_then(Value::as_str) {
                Some("response.output_text.done") => {
                    if let Some(text) = event.get("text").and_then(Value::as_str) {
                        self.done.push_str(text);
                    }
                }
                Some(kind) if closes_responses(kind) => {
                    if let Some(response) = event.get("response") {
                        self.completed = responses_output_text(response);
                    }
                }
                _ => {}
            }
        }
        let piece = stream_text(provider, event)?;
        self.pieces.push_str(&piece);
        Some(piece)
    }

    /// The answer's text, and what of it no piece carried (to pass on now).
    pub fn finish(self) -> (String, Option<String>) {
        if !self.pieces.is_empty() {
            return (self.pieces, None);
        }
        let whole = if self.done.is_empty() {
            self.completed
        } else {
            self.done
        };
        let late = (!whole.is_empty()).then(|| whole.clone());
        (whole, late)
    }

    /// Bytes of text read so far.
    pub fn len(&self) -> usize {
        self.pieces.len() + self.done.len() + self.completed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------

/// Tokens of one answer as the provider counted them. Anthropic's cache reads and writes
/// count as input, as OpenAI's cached tokens do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input, tokens read from the provider's prompt cache (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`, Gemini's
    /// `cachedContentTokenCount`).
    pub cached_tokens: u64,
    /// Of the output, tokens of the model's reasoning (OpenAI's `reasoning_tokens`,
    /// Gemini's `thoughtsTokenCount`; Anthropic counts none apart).
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Every count added; a provider's absurd count saturates instead of wrapping.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Input and output together, saturating.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The usage of one non-streamed response, when it reports one: Chat `usage.prompt_tokens`
/// and `completion_tokens`, Responses and Anthropic `usage.input_tokens` and
/// `output_tokens`, Google `usageMetadata.promptTokenCount` and `candidatesTokenCount`.
pub fn usage(provider: Provider, response: &Value) -> Option<Usage> {
    let mut u = StreamUsage::default();
    match provider {
        Provider::OpenaiCompletions | Provider::OpenaiResponses | Provider::Anthropic => {
            u.observe_counts(provider, response.get("usage")?);
        }
        Provider::Google => u.observe_counts(provider, response.get("usageMetadata")?),
    }
    u.finish()
}

/// The usage of a stream, from the events that carry it: a Chat chunk's `usage` (sent when
/// `stream_options.include_usage` asks), `response.completed`'s response, Anthropic's
/// `message_start` (input) and `message_delta` (output so far), a Google chunk's
/// `usageMetadata`. Later counts replace earlier ones: each is a running total.
#[derive(Debug, Default)]
pub struct StreamUsage {
    input: Option<u64>,
    output: Option<u64>,
    cached: Option<u64>,
    reasoning: Option<u64>,
}

impl StreamUsage {
    pub fn observe(&mut self, provider: Provider, event: &Value) {
        let counts = match provider {
            Provider::OpenaiCompletions => event.get("usage"),
            Provider::OpenaiResponses => {
                if !event
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(closes_responses)
                {
                    return;
                }
                event.pointer("/response/usage")
            }
            Provider::Anthropic => match event.get("type").and_then(Value::as_str) {
                Some("message_start") => event.pointer("/message/usage"),
                Some("message_delta") => event.get("usage"),
                _ => None,
            },
            Provider::Google => event.get("usageMetadata"),
        };
        if let Some(counts) = counts.filter(|c| c.is_object()) {
            self.observe_counts(provider, counts);
        }
    }

    fn observe_counts(&mut self, provider: Provider, counts: &Value) {
        let n = |key: &str| counts.get(key).and_then(Value::as_u64);
        let at = |pointer: &str| counts.pointer(pointer).and_then(Value::as_u64);
        let (input, output, cached, reasoning) = match provider {
            Provider::OpenaiCompletions => (
                n("prompt_tokens"),
                n("completion_tokens"),
                at("/prompt_tokens_details/cached_tokens"),
                at("/completion_tokens_details/reasoning_tokens"),
            ),
            Provider::OpenaiResponses => (
                n("input_tokens"),
                n("output_tokens"),
                at("/input_tokens_details/cached_tokens"),
                at("/output_tokens_details/reasoning_tokens"),
            ),
            Provider::Anthropic => {
                let input = n("input_tokens").map(|i| {
                    i.saturating_add(n("cache_creation_input_tokens").unwrap_or(0))
                        .saturating_add(n("cache_read_input_tokens").unwrap_or(0))
                });
                (
                    input,
                    n("output_tokens"),
                    n("cache_read_input_tokens"),
                    None,
                )
            }
            Provider::Google => (
                n("promptTokenCount"),
                n("candidatesTokenCount"),
                n("cachedContentTokenCount"),
                n("thoughtsTokenCount"),
            ),
        };
        // A stream may say a count more than once (Anthropic's start and its last delta):
        // the latest stands.
        for (seen, now) in [
            (&mut self.input, input),
            (&mut self.output, output),
            (&mut self.cached, cached),
            (&mut self.reasoning, reasoning),
        ] {
            if now.is_some() {
                *seen = now;
            }
        }
    }

    /// The counts, when the provider reported any.
    pub fn finish(&self) -> Option<Usage> {
        (self.input.is_some() || self.output.is_some()).then(|| Usage {
            input_tokens: self.input.unwrap_or(0),
            output_tokens: self.output.unwrap_or(0),
            cached_tokens: self.cached.unwrap_or(0),
            reasoning_tokens: self.reasoning.unwrap_or(0),
        })
    }
}

/// The answer's text of a Responses body: the text parts of its `message` items, joined
/// (tool calls carry none). The gateway's client reads provider answers with it, and QA the
/// gateway's own.
pub fn responses_output_text(body: &Value) -> String {
    body.get("output")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
                .flat_map(|i| {
                    i.get("content")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_string))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}
