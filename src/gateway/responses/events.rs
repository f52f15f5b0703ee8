//! The Responses event stream of one turn: `response.created` and `response.in_progress`,
//! the message's item and part opened at the first text, a `response.output_text.delta`
//! per piece, then the `.done` events, the client tools' `function_call` items with their
//! argument events, and `response.completed` with the stored response (or
//! `response.failed`). Every event carries the same response id and a `sequence_number`.

use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{Value, json};

use super::{Answer, function_call, has_message};
use crate::agent::TurnOutcome;
use crate::gateway::errors::ApiError;
use crate::gateway::server::Gateway;
use crate::gateway::sse::{Encoder, event};

/// The Responses event stream of one turn.
pub(super) struct ResponsesStream {
    gw: Arc<Gateway>,
    answer: Answer,
    sequence: u64,
    /// The message's text so far, once its item is open.
    text: Option<String>,
}

impl ResponsesStream {
    pub(super) fn new(gw: Arc<Gateway>, answer: Answer) -> Self {
        ResponsesStream {
            gw,
            answer,
            sequence: 0,
            text: None,
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
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        ));
    }

    fn close_message(&mut self, frames: &mut Vec<Bytes>) {
        let Some(text) = self.text.clone() else {
            return;
        };
        let id = self.answer.message_id.clone();
        frames.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
        ));
        frames.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": text, "annotations": []}}),
        ));
        let item = self.answer.message(&text, "completed");
        frames.push(self.event(
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ));
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
        let id = self.answer.message_id.clone();
        frames.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": delta, "logprobs": []}),
        ));
        frames
    }

    fn finish(&mut self, result: Result<TurnOutcome, ApiError>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                let mut response = self.answer.object("failed", Vec::new(), None);
                response["error"] =
                    json!({"code": e.code.clone().unwrap_or(e.kind.clone()), "message": e.message});
                frames.push(self.event("response.failed", json!({"response": response})));
                return frames;
            }
        };
        if has_message(&outcome) {
            self.open_message(&mut frames);
            // What streamed is the answer; a model that did not stream gave it whole.
            if self.text.as_deref() == Some("") && !outcome.text.is_empty() {
                frames.extend(self.text(&outcome.text.clone()));
            }
            self.close_message(&mut frames);
        }
        let first = usize::from(self.text.is_some());
        for (i, call) in outcome.pending.iter().enumerate() {
            let index = first + i;
            let item_id = format!("fc_{}", call.id);
            let arguments = call.arguments.to_string();
            let mut added = function_call(call, "in_progress");
            added["arguments"] = json!("");
            frames.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            ));
            frames.push(self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": arguments}),
            ));
            frames.push(self.event(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": index, "name": call.name, "arguments": arguments}),
            ));
            frames.push(self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": function_call(call, "completed")}),
            ));
        }
        let response = self.answer.complete(&self.gw, &outcome);
        frames.push(self.event("response.completed", json!({"response": response})));
        frames
    }
}
