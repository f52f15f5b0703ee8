//! The result envelope every call returns: `{tool, call_id, result: {content, details,
//! is_error}}`, bounded in size.

use serde::Serialize;
use serde_json::{Value, json};

use crate::catalog::CompactDescriptor;

pub use crate::executors::MAX_CONTENT_BYTES;
/// Details past this are replaced by a note of their size.
pub const MAX_DETAILS_BYTES: usize = 32 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentBlock {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    pub content: Vec<ContentBlock>,
    pub details: Value,
    pub is_error: bool,
}

impl ToolResult {
    /// One text block, with text and details bounded.
    pub fn new(text: String, details: Value, is_error: bool) -> Self {
        ToolResult {
            content: vec![ContentBlock {
                kind: "text",
                text: bound_text(text, MAX_CONTENT_BYTES),
            }],
            details: bound_details(details),
            is_error,
        }
    }

    /// The text of all blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .map(|b| b.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Envelope {
    pub tool: CompactDescriptor,
    /// `{caller}:{parent or "direct"}:{name}:{n}`: who called, from which run.
    pub call_id: String,
    pub result: ToolResult,
    /// An after hook asked the agent loop to stop after this batch.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stop_after_batch: bool,
    /// Its tool ran (it may have acted): not a call blocked by policy or a hook, or given
    /// up before its tool started. The host's to know (a client asking again runs what
    /// ran again), not shown.
    #[serde(skip)]
    pub ran: bool,
}

impl Envelope {
    /// What a model reads of a call, from every front: the tool and its result (not the
    /// call id or the hooks' flags, which are the host's).
    pub fn for_model(&self) -> Value {
        json!({"tool": self.tool, "result": self.result})
    }
}

/// Cuts `text` to at most `max` bytes on a char boundary, saying how much was cut.
pub fn bound_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let end = crate::shown::head(&text, max.saturating_sub(96)).len();
    text.truncate(end);
    text.push_str(&format!(
        "\n[result cut: {} of {total} bytes left out]",
        total - end
    ));
    text
}

fn bound_details(details: Value) -> Value {
    let bytes = serde_json::to_vec(&details).map(|v| v.len()).unwrap_or(0);
    if bytes <= MAX_DETAILS_BYTES {
        details
    } else {
        json!({"truncated": true, "bytes": bytes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_results_are_cut_with_a_marker() {
        let r = ToolResult::new(
            "é".repeat(100_000),
            json!({"big": "x".repeat(40_000)}),
            false,
        );
        let text = r.text();
        assert!(text.len() <= MAX_CONTENT_BYTES);
        assert!(
            text.contains("[result cut: "),
            "{}",
            &text[text.len() - 80..]
        );
        assert_eq!(r.details["truncated"], true);
        let small = ToolResult::new("ok".into(), json!({"a": 1}), false);
        assert_eq!(small.text(), "ok");
        assert_eq!(small.details["a"], 1);
    }
}
