//! The Responses event stream of one turn: `response.created` and `response.in_progress`,
//! the message's item and part opened at the first text, a `response.output_text.delta`
//! per piece, then the `.done` events, the client tools' `function_call` items with their
//! argument events, and `response.completed` with the stored response (or
//! `response.failed`). Every event carries the same response id and a `sequence_number`.
//! [`replay`] gives the same events for a stored response (`GET /v1/responses/{id}?stream=true`).

use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{Value, json};

use super::{Answer, function_call, has_message};
use crate::agent::TurnOutcome;
use crate::gateway::errors::ApiError;
use crate::gateway::json::Budget;
use crate::gateway::server::Gateway;
use crate::gateway::sse::{Encoder, Later, event, made};
use crate::gateway::store::StoredResponse;
use crate::provider::normalize::Ending;

/// The Responses event stream of one turn.
pub(super) struct ResponsesStream {
    gw: Arc<Gateway>,
    answer: Answer,
    sequence: u64,
    /// The message's text so far, once its item is open.
    text: Option<String>,
    /// The bytes of each delta sent, for the stored response's replay.
    pieces: Vec<u32>,
}

impl ResponsesStream {
    pub(super) fn new(gw: Arc<Gateway>, answer: Answer) -> Self {
        ResponsesStream {
            gw,
            answer,
            sequence: 0,
            text: None,
            pieces: Vec::new(),
        }
    }

    fn event(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        event(Some(kind), &data)
    }

    fn open_message(&mut self, frames: &mut Vec<Bytes>) {
        if self.text.is_some() {
            return;
        }
        self.text = Some(String::new());
        let mut item = self.answer.message("", "in_progress");
        item["content"] = json!([]);
        let id = self.answer.message_id.clone();
        frames.push(self.event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        ));
        frames.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
        ));
    }

    /// A piece of the message's text.
    fn delta(&mut self, delta: &str) -> Bytes {
        let id = self.answer.message_id.clone();
        self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []}),
        )
    }

    /// The message's `.done` events, each carrying the whole text: made when the client
    /// takes them, from the one copy of the text they share.
    fn close_message(&self, text: Arc<str>, ending: Ending, end: &mut Vec<Later<Self>>) {
        let notes = Arc::new(ending.notes.clone());
        for (i, annotation) in notes.annotations.iter().enumerate() {
            let annotation = annotation.clone();
            end.push(Box::new(move |s: &mut Self| {
                let id = s.answer.message_id.clone();
                s.event(
                    "response.output_text.annotation.added",
                    json!({"item_id": id, "output_index": 0, "content_index": 0,
                           "annotation_index": i, "annotation": annotation}),
                )
            }));
        }
        let (t, n) = (Arc::clone(&text), Arc::clone(&notes));
        end.push(Box::new(move |s: &mut Self| {
            let id = s.answer.message_id.clone();
            s.event(
                "response.output_text.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "text": &*t, "logprobs": n.logprobs}),
            )
        }));
        let t = Arc::clone(&text);
        end.push(Box::new(move |s: &mut Self| {
            let id = s.answer.message_id.clone();
            s.event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0,
                       "part": {"type": "output_text", "text": &*t, "annotations": notes.annotations, "logprobs": notes.logprobs}}),
            )
        }));
        // A refusal is a part of its own after the text, with its own events.
        if !ending.refusal.is_empty() {
            for (kind, data) in refusal_part_events(ending.refusal.as_str().into()) {
                end.push(Box::new(move |s: &mut Self| {
                    let id = s.answer.message_id.clone();
                    let mut v = json!({"item_id": id, "output_index": 0, "content_index": 1});
                    merge(&mut v, data());
                    s.event(kind, v)
                }));
            }
        }
        end.push(Box::new(move |s: &mut Self| {
            let item = s.answer.finished_message(&text, &ending);
            s.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            )
        }));
    }
}

impl Encoder for ResponsesStream {
    fn start(&mut self) -> Vec<Bytes> {
        let response = self.answer.object("in_progress", Vec::new(), None);
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
        ]
    }

    fn text(&mut self, delta: &str) -> Vec<Bytes> {
        let mut frames = Vec::new();
        self.open_message(&mut frames);
        if let Some(text) = &mut self.text {
            text.push_str(delta);
        }
        self.pieces
            .push(u32::try_from(delta.len()).unwrap_or(u32::MAX));
        frames.push(self.delta(delta));
        frames
    }

    fn finish(&mut self, result: Result<TurnOutcome, ApiError>) -> Vec<Later<Self>> {
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                // A failed turn is not stored, and the object says so (front round 13 F5:
                // it said `store: true` and GET found nothing). The open message is not
                // closed with its text again: an answer cut at the 32 MiB bound would be
                // serialized three times more (the flood test's gateway peaked at 208 MiB with it).
                let mut end: Vec<Later<Self>> = Vec::new();
                let mut response = self.answer.object("failed", Vec::new(), None);
                response["error"] =
                    json!({"code": e.code.clone().unwrap_or(e.kind.clone()), "message": e.message});
                response["store"] = json!(false);
                end.push(Box::new(move |s: &mut Self| {
                    s.event("response.failed", json!({"response": response}))
                }));
                return end;
            }
        };
        let outcome_cut = outcome.ending.cut.is_some();
        let mut end: Vec<Later<Self>> = Vec::new();
        if has_message(&outcome) {
            let mut opened = Vec::new();
            self.open_message(&mut opened);
            end.extend(opened.into_iter().map(made));
        }
        let first = usize::from(self.text.is_some());
        if has_message(&outcome) {
            let streamed = self.text.take().unwrap_or_default();
            // What streamed is the answer; a model that did not stream gave it whole.
            let whole = streamed.is_empty() && !outcome.text.is_empty();
            let text: Arc<str> = if whole {
                outcome.text.as_str().into()
            } else {
                streamed.into()
            };
            if whole {
                self.pieces = vec![u32::try_from(text.len()).unwrap_or(u32::MAX)];
                let t = Arc::clone(&text);
                end.push(Box::new(move |s: &mut Self| s.delta(&t)));
            }
            self.close_message(text, outcome.ending.clone(), &mut end);
        }
        // Stored now, whether or not the client reads the end.
        let pieces = std::mem::take(&mut self.pieces);
        let response = self
            .answer
            .complete_streamed(&self.gw, &outcome, Some(pieces));
        let calls = Arc::new(outcome.pending);
        for i in 0..calls.len() {
            let index = first + i;
            let c = Arc::clone(&calls);
            end.push(Box::new(move |s: &mut Self| {
                let mut added = function_call(&c[i], "in_progress");
                added["arguments"] = json!("");
                s.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                )
            }));
            let c = Arc::clone(&calls);
            end.push(Box::new(move |s: &mut Self| {
                let call = &c[i];
                s.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": format!("fc_{}", call.id), "output_index": index, "delta": call.arguments.to_string()}),
                )
            }));
            let c = Arc::clone(&calls);
            end.push(Box::new(move |s: &mut Self| {
                let call = &c[i];
                s.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": format!("fc_{}", call.id), "output_index": index, "name": call.name, "arguments": call.arguments.to_string()}),
                )
            }));
            let c = Arc::clone(&calls);
            end.push(Box::new(move |s: &mut Self| {
                s.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": function_call(&c[i], "completed")}),
                )
            }));
        }
        // A cut answer ends as OpenAI's does: `response.incomplete`.
        let kind = if outcome_cut {
            "response.incomplete"
        } else {
            "response.completed"
        };
        end.push(Box::new(move |s: &mut Self| {
            s.event(kind, json!({"response": response}))
        }));
        end
    }
}

/// The events of a stored response, as a stream that built it would have sent them: each
/// output item added, its text or arguments whole, done; the response completed. Those
/// with a sequence number up to `after` are left out.
///
/// Made one at a time as the client reads them: the response opens and ends the stream
/// (`response.created`, `response.in_progress`, `response.completed`), so building them
/// ahead held the echoed request three times over for as long as a slow client took.
/// The stored text is read once, its top level as raw text (the opening events are that
/// text with `status`, `output` and `usage` replaced; the last is the text itself), its
/// `output` items as values.
pub(super) fn replay(
    stored: Arc<StoredResponse>,
    after: Option<u64>,
) -> Result<impl Iterator<Item = Bytes> + Send + 'static, String> {
    let Fields(fields) = Budget::default().parse::<Fields>(stored.body())?;
    // The live deltas belong to the message, the first item.
    let mut pieces = stored.pieces.clone();
    let mut output: Vec<Value> = Vec::new();
    let mut start = String::from("{");
    let mut incomplete = false;
    for (key, raw) in &fields {
        let value = match key.as_str() {
            "status" => {
                incomplete = raw.get() == r#""incomplete""#;
                r#""in_progress""#
            }
            "output" => {
                output = Budget::default().parse(raw.get())?;
                "[]"
            }
            // The opening events are the response as the live stream opened it: no
            // outcome yet, so no `toolsearch` summary and nothing incomplete (front round 24).
            "usage" | "incomplete_details" | "error" => "null",
            "toolsearch" => continue,
            _ => raw.get(),
        };
        if start.len() > 1 {
            start.push(',');
        }
        start.push_str(&Value::String(key.clone()).to_string());
        start.push(':');
        start.push_str(value);
    }
    start.push('}');
    drop(fields);
    let start = Arc::new(start);
    let opening = ["response.created", "response.in_progress"]
        .into_iter()
        .map(move |kind| Replayed::Response(kind, Arc::clone(&start)));
    let items = output
        .into_iter()
        .enumerate()
        .flat_map(move |(index, item)| item_events(index, item, pieces.take()));
    let kind = if incomplete {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let completed = std::iter::once(Replayed::Completed(stored, kind));
    Ok(opening
        .chain(items)
        .chain(completed)
        .enumerate()
        .filter(move |(n, _)| after.is_none_or(|a| *n as u64 > a))
        .map(|(n, event)| event.frame(n)))
}

/// One replayed event, not yet written out.
enum Replayed {
    /// An event whose data is `{"response": <text>}`.
    Response(&'static str, Arc<String>),
    /// `response.completed`, whose response is the stored text itself.
    /// The stored response and its closing event's kind.
    Completed(Arc<StoredResponse>, &'static str),
    /// An item's event, its data made when it is written.
    Item(&'static str, Box<dyn FnOnce() -> Value + Send>),
}

impl Replayed {
    fn frame(self, sequence: usize) -> Bytes {
        match self {
            Replayed::Item(kind, make) => {
                let mut data = make();
                data["type"] = json!(kind);
                data["sequence_number"] = json!(sequence);
                event(Some(kind), &data)
            }
            Replayed::Response(kind, response) => response_frame(kind, &response, sequence),
            Replayed::Completed(stored, kind) => response_frame(kind, stored.body(), sequence),
        }
    }
}

fn response_frame(kind: &str, response: &str, sequence: usize) -> Bytes {
    Bytes::from(format!(
        "event: {kind}\ndata: {{\"response\":{response},\"type\":\"{kind}\",\"sequence_number\":{sequence}}}\n\n"
    ))
}

/// An event's data, made when the client takes the event.
type MakeData = Box<dyn FnOnce() -> Value + Send>;

/// A refusal part's events, live and replayed alike, as (type, data) with the part's place
/// (`item_id`, `output_index`, `content_index`) left to the caller: the part added empty,
/// the refusal in one delta, the refusal done, the part done.
fn refusal_part_events(refusal: Arc<str>) -> Vec<(&'static str, MakeData)> {
    let (r1, r2, r3) = (Arc::clone(&refusal), Arc::clone(&refusal), refusal);
    vec![
        (
            "response.content_part.added",
            Box::new(|| json!({"part": {"type": "refusal", "refusal": ""}})),
        ),
        (
            "response.refusal.delta",
            Box::new(move || json!({"delta": &*r1})),
        ),
        (
            "response.refusal.done",
            Box::new(move || json!({"refusal": &*r2})),
        ),
        (
            "response.content_part.done",
            Box::new(move || json!({"part": {"type": "refusal", "refusal": &*r3}})),
        ),
    ]
}

/// `extra`'s keys added to `v`'s.
fn merge(v: &mut Value, extra: Value) {
    if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
}

/// The events of output item `index`, from added to done, each made only when the client
/// takes it: an item's text is in four of them (the delta, the text done, the part done,
/// the item done), and made ahead they held it four times over for as long as a reader
/// that did not read kept its connection (16 such readers of a 15 MB answer took 1.1 GB,
/// front round 7).
fn item_events(index: usize, item: Value, pieces: Option<Vec<u32>>) -> Vec<Replayed> {
    let item = Arc::new(item);
    let mut events = Vec::new();
    let lazy = |events: &mut Vec<Replayed>,
                kind: &'static str,
                make: Box<dyn FnOnce() -> Value + Send>| {
        events.push(Replayed::Item(kind, make));
    };
    let added = {
        let item = Arc::clone(&item);
        move |empty: (&'static str, Value)| {
            // The item without what it will have: its text is not copied to be replaced.
            let mut added: serde_json::Map<String, Value> = item
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    let v = if k == empty.0 { Value::Null } else { v.clone() };
                    (k.clone(), v)
                })
                .collect();
            added.insert("status".into(), json!("in_progress"));
            added.insert(empty.0.into(), empty.1);
            json!({"output_index": index, "item": added})
        }
    };
    match item["type"].as_str() {
        Some("message") => {
            lazy(
                &mut events,
                "response.output_item.added",
                Box::new(move || added(("content", json!([])))),
            );
            let parts = item["content"].as_array().map_or(0, Vec::len);
            for part_index in 0..parts {
                let at = {
                    let item = Arc::clone(&item);
                    move |extra: Value| {
                        let mut v = json!({"item_id": item["id"], "output_index": index, "content_index": part_index});
                        merge(&mut v, extra);
                        v
                    }
                };
                // A refusal part is replayed as the live stream sent it: its own part with
                // `response.refusal.*` events (front round 14 F4: replayed as an empty
                // output_text part).
                if item["content"][part_index]["type"] == "refusal" {
                    let refusal = item["content"][part_index]["refusal"]
                        .as_str()
                        .unwrap_or_default();
                    for (kind, data) in refusal_part_events(refusal.into()) {
                        let a = at.clone();
                        lazy(&mut events, kind, Box::new(move || a(data())));
                    }
                    continue;
                }
                let text = {
                    let item = Arc::clone(&item);
                    move || {
                        item["content"][part_index]["text"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    }
                };
                let a = at.clone();
                lazy(
                    &mut events,
                    "response.content_part.added",
                    Box::new(move || {
                        a(
                            json!({"part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                        )
                    }),
                );
                for (start, end) in delta_ranges(&item, part_index, pieces.as_deref()) {
                    let (a, item) = (at.clone(), Arc::clone(&item));
                    lazy(
                        &mut events,
                        "response.output_text.delta",
                        Box::new(move || {
                            let text = item["content"][part_index]["text"]
                                .as_str()
                                .unwrap_or_default();
                            let delta = text.get(start..end).unwrap_or_default();
                            a(json!({"delta": delta, "logprobs": []}))
                        }),
                    );
                }
                // The annotations' events and the logprobs, as the live stream sent them
                // (front round 23 F1: left out, every later event was numbered one lower
                // than live, and a client resuming after the live number lost events).
                let annotations = item["content"][part_index]["annotations"]
                    .as_array()
                    .map_or(0, Vec::len);
                for i in 0..annotations {
                    let (a, item) = (at.clone(), Arc::clone(&item));
                    lazy(
                        &mut events,
                        "response.output_text.annotation.added",
                        Box::new(move || {
                            a(json!({"annotation_index": i,
                                     "annotation": item["content"][part_index]["annotations"][i]}))
                        }),
                    );
                }
                let (a, t, part) = (at.clone(), text, Arc::clone(&item));
                lazy(
                    &mut events,
                    "response.output_text.done",
                    Box::new(move || {
                        let logprobs = match &part["content"][part_index]["logprobs"] {
                            Value::Null => json!([]),
                            found => found.clone(),
                        };
                        a(json!({"text": t(), "logprobs": logprobs}))
                    }),
                );
                let part = Arc::clone(&item);
                lazy(
                    &mut events,
                    "response.content_part.done",
                    Box::new(move || at(json!({"part": part["content"][part_index]}))),
                );
            }
        }
        Some("function_call") => {
            lazy(
                &mut events,
                "response.output_item.added",
                Box::new(move || added(("arguments", json!("")))),
            );
            let call = Arc::clone(&item);
            lazy(
                &mut events,
                "response.function_call_arguments.delta",
                Box::new(
                    move || json!({"item_id": call["id"], "output_index": index, "delta": call["arguments"]}),
                ),
            );
            let call = Arc::clone(&item);
            lazy(
                &mut events,
                "response.function_call_arguments.done",
                Box::new(
                    move || json!({"item_id": call["id"], "output_index": index, "name": call["name"], "arguments": call["arguments"]}),
                ),
            );
        }
        _ => lazy(
            &mut events,
            "response.output_item.added",
            Box::new(move || added(("status", json!("in_progress")))),
        ),
    }
    let done = Arc::clone(&item);
    lazy(
        &mut events,
        "response.output_item.done",
        Box::new(move || json!({"output_index": index, "item": *done})),
    );
    events
}

/// The byte ranges of a message part's text deltas: the live stream's `pieces` when they
/// cut its text exactly, else the whole text as one.
fn delta_ranges(item: &Value, part: usize, pieces: Option<&[u32]>) -> Vec<(usize, usize)> {
    let text = item["content"][part]["text"].as_str().unwrap_or_default();
    let whole = vec![(0, text.len())];
    let Some(pieces) = pieces.filter(|_| part == 0) else {
        return whole;
    };
    let mut ranges = Vec::with_capacity(pieces.len());
    let mut at = 0usize;
    for &n in pieces {
        let end = at.saturating_add(n as usize);
        if !text.is_char_boundary(end) || end > text.len() {
            return whole;
        }
        ranges.push((at, end));
        at = end;
    }
    if at == text.len() { ranges } else { whole }
}

/// A JSON object's members in order, each value as its raw text.
struct Fields(Vec<(String, Box<serde_json::value::RawValue>)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = map.next_entry()? {
                    out.push(member);
                }
                Ok(Fields(out))
            }
        }
        deserializer.deserialize_map(Members)
    }
}
