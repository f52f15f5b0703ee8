//! What actually runs a tool, behind one trait.
//!
//! - `fixture`: a templated answer (`FAKE_PLUGIN_OK {name} {input}`), for the demo catalog
//!   and QA;
//! - `command`: a program run without a shell, the arguments as JSON on stdin, the result
//!   on stdout ([`command`]);
//! - `mcp` and `client`: seams. The host plugs in an [`Executor`] for each (an MCP client, a
//!   relay to the client that declared the tool); without one, a call says the source is
//!   not connected, by name, so a model stops retrying.
//!
//! Executors only run tools. Resolution, policy, validation, approval and hooks happened
//! before, in `dispatch`, and none of it is repeated here.

pub mod command;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::{Entry, ExecutorSpec};

/// Defaults for `command` executors.
pub mod limits {
    pub const COMMAND_TIMEOUT_MS: u64 = 10_000;
    /// Bound on a command's stdout, and so on the result text it can give.
    pub const COMMAND_MAX_STDOUT: usize = 1024 * 1024;
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub details: Value,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn error(text: impl Into<String>, details: Value) -> Self {
        ToolOutput {
            text: text.into(),
            details,
            is_error: true,
        }
    }
}

/// Progress reports from a running tool; they reach the session log.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// One call, as an executor sees it.
pub struct ExecCall<'a> {
    pub entry: &'a Entry,
    pub args: &'a Value,
    pub cancel: CancellationToken,
    pub progress: Progress,
}

pub type ExecFuture<'a> = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>>;

/// Runs tools of one executor kind. Failures are error outputs, not panics or `Err`: a
/// failed tool is a result the model reads.
pub trait Executor: Send + Sync {
    fn run<'a>(&'a self, call: ExecCall<'a>) -> ExecFuture<'a>;
}

/// The executors a dispatcher uses, by kind.
#[derive(Clone, Default)]
pub struct Executors {
    pub mcp: Option<Arc<dyn Executor>>,
    pub client: Option<Arc<dyn Executor>>,
}

impl Executors {
    /// Runs `call` with the executor its descriptor names.
    pub async fn run(&self, call: ExecCall<'_>) -> ToolOutput {
        match &call.entry.descriptor.executor {
            Some(ExecutorSpec::Fixture { text, details }) => {
                fixture(call.entry, call.args, text, details)
            }
            Some(ExecutorSpec::Command {
                command,
                timeout_ms,
                env,
            }) => command::run_tool(&call, command, *timeout_ms, env).await,
            Some(ExecutorSpec::Mcp { server, .. }) => match &self.mcp {
                Some(e) => e.run(call).await,
                None => ToolOutput::error(
                    format!("MCP server `{server}` is not connected; its tools cannot run now"),
                    json!({"status": "unavailable", "server": server}),
                ),
            },
            Some(ExecutorSpec::Client) => match &self.client {
                Some(e) => e.run(call).await,
                None => ToolOutput::error(
                    // Reached through `tool_call`, a code body or the CLI: the client runs
                    // its tools only when the model calls them by name (front round 18 F4:
                    // "no client is connected" was said with a client connected).
                    format!(
                        "`{0}` is a client tool: only the client runs it, when the model calls `{0}` by name, not through tool_call, code or this command",
                        call.entry.descriptor.name
                    ),
                    json!({"status": "unavailable", "source": "client"}),
                ),
            },
            // The planner refuses visible tools without executors; this is for embedders
            // that build entries by hand.
            None => ToolOutput::error(
                format!("tool `{}` has no executor", call.entry.id),
                json!({"status": "missing-executor"}),
            ),
        }
    }
}

/// Fills a fixture template. Details default to `{status: "ok", tool, input}`.
/// Result text past this is cut, with a marker saying how much was left out
/// (`dispatch::envelope`). 64 KiB is about 16k tokens: more than a model should read from
/// one call.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// The template's text with its placeholders filled, expanded only as far as a result
/// keeps ([`MAX_CONTENT_BYTES`]): each `{input}` copies the caller's arguments, and a
/// template of 20,000 of them made gigabytes from a call's 60 KB before the result was cut
/// (sandbox round 36 F3).
fn fixture(entry: &Entry, args: &Value, text: &str, details: &Option<Value>) -> ToolOutput {
    let cap = MAX_CONTENT_BYTES + 4;
    let input = args.to_string();
    let mut out = String::with_capacity(cap.min(text.len() + input.len()));
    let push = |out: &mut String, piece: &str| {
        let room = cap.saturating_sub(out.len());
        let mut end = piece.len().min(room);
        while !piece.is_char_boundary(end) {
            end -= 1;
        }
        out.push_str(&piece[..end]);
    };
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        if out.len() >= cap {
            rest = "";
            break;
        }
        push(&mut out, &rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            push(&mut out, &rest[start..]);
            rest = "";
            break;
        };
        let key = &after[..end];
        match key {
            "name" => push(&mut out, &entry.descriptor.name),
            "input" => push(&mut out, &input),
            _ => match key.strip_prefix("args.") {
                Some(k) => match args.get(k) {
                    Some(Value::String(s)) => push(&mut out, s),
                    Some(v) => push(&mut out, &v.to_string()),
                    None => {}
                },
                None => push(&mut out, &format!("{{{key}}}")),
            },
        }
        rest = &after[end + 1..];
    }
    push(&mut out, rest);
    let details = details
        .clone()
        .unwrap_or_else(|| json!({"status": "ok", "tool": entry.descriptor.name, "input": args}));
    ToolOutput {
        text: out,
        details,
        is_error: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ExecutorSpec, Facts, Source, ToolDescriptor};
    use crate::config::Config;

    /// A template of 20,000 `{input}`s on a call's 60 KB stops at what a result keeps.
    #[test]
    fn a_fixture_template_expands_only_as_far_as_a_result_keeps() {
        let template = "{input}".repeat(20_000);
        let tool = ToolDescriptor::builder(Source::Openclaw, "core", "tmpl")
            .description("a template")
            .input_schema(&json!({"type": "object"}))
            .executor(ExecutorSpec::Fixture {
                text: template.clone(),
                details: None,
            })
            .origin("test")
            .build();
        let config = Config::default();
        let catalog = crate::Catalog::build(vec![tool], &Facts::bare(&config)).unwrap();
        let entry = catalog.resolve("tmpl").unwrap();
        let args = json!({"s": "é".repeat(30_000)});
        let out = fixture(entry, &args, &template, &None);
        let cap = MAX_CONTENT_BYTES;
        assert!(
            out.text.len() > cap && out.text.len() <= cap + 4,
            "{}",
            out.text.len()
        );
        assert!(out.text.starts_with(&args.to_string()));
        // A small template is filled whole.
        let out = fixture(
            entry,
            &json!({"a": 1}),
            "{name}: {args.a} {input} {other}",
            &None,
        );
        assert_eq!(out.text, r#"tmpl: 1 {"a":1} {other}"#);
    }
}
