//! Hooks around a tool call: `before_tool_call` may pass, replace the arguments or block;
//! `after_tool_call` may rewrite the content, mark the result an error, or ask the agent
//! loop to stop after the batch.
//!
//! Hooks are a Rust trait for embedders and configured commands for the CLI and the
//! gateway ([`CommandHook`]). A command hook gets the event as JSON on stdin and answers
//! JSON on stdout:
//!
//! - before: `{}` or nothing (pass), `{"decision": "pass"}`, `{"decision": "replace",
//!   "args": {...}}`, or `{"decision": "block", "reason": "..."}`; exit code 2 also blocks,
//!   with stderr as the reason;
//! - after: `{}` or nothing (keep), or any of `{"content": "...", "is_error": true,
//!   "details": {...}, "stop_after_batch": true}`.
//!
//! Fail closed: a hook that cannot start, exits with another non-zero code, answers
//! something else, or passes its timeout blocks the call (before) or marks the result an
//! error (after), and the reason names the hook. The dispatcher runs the hooks of one
//! session one at a time.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::HookConfig;
use crate::process::program::{self as command, Program};

/// Used when a hook gives no `timeout_ms`.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 5_000;
/// A hook's answer is a small JSON document.
const MAX_HOOK_OUTPUT: usize = 1024 * 1024;

/// What a before hook decided.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeDecision {
    Pass,
    Replace(Value),
    Block(String),
}

/// What an after hook changes; `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterChange {
    pub content: Option<String>,
    pub is_error: Option<bool>,
    pub details: Option<Value>,
    pub stop_after_batch: bool,
}

/// The event hooks see. `result` is set for after hooks.
#[derive(Debug, Clone)]
pub struct HookEvent {
    pub session: String,
    pub call_id: String,
    pub id: String,
    pub name: String,
    pub source: String,
    pub source_name: String,
    pub args: Value,
    pub result: Option<Value>,
}

impl HookEvent {
    pub fn to_json(&self, event: &str) -> Value {
        let mut v = json!({
            "event": event,
            "session": self.session,
            "call_id": self.call_id,
            "tool": {"id": self.id, "name": self.name, "source": self.source, "source_name": self.source_name},
            "args": self.args,
        });
        if let Some(r) = &self.result {
            v["result"] = r.clone();
        }
        v
    }
}

pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// A `before_tool_call` hook. An `Err` blocks the call (fail closed).
pub trait BeforeToolCall: Send + Sync {
    fn name(&self) -> &str;
    fn before<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, BeforeDecision>;
}

/// An `after_tool_call` hook. An `Err` marks the result an error.
pub trait AfterToolCall: Send + Sync {
    fn name(&self) -> &str;
    fn after<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, AfterChange>;
}

/// A hook run as a program; see the module doc.
#[derive(Debug, Clone)]
pub struct CommandHook {
    name: String,
    argv: Vec<String>,
    env: Vec<String>,
    timeout: Duration,
}

impl CommandHook {
    /// `phase` and `index` name the hook in messages: `before_tool_call[0] (audit-hook)`.
    pub fn new(phase: &str, index: usize, config: &HookConfig) -> Self {
        let program = config
            .command
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
            .unwrap_or_default();
        CommandHook {
            name: format!("{phase}[{index}] ({program})"),
            argv: config.command.clone(),
            env: config.env.clone(),
            timeout: Duration::from_millis(config.timeout_ms.unwrap_or(DEFAULT_HOOK_TIMEOUT_MS)),
        }
    }

    /// Runs the program; `Ok((exit code, stdout, stderr tail))`.
    async fn run(&self, event: &Value) -> Result<(Option<i32>, String, String), String> {
        let stdin = event.to_string().into_bytes();
        let program = Program {
            argv: &self.argv,
            env: &self.env,
            stdin: &stdin,
            timeout: self.timeout,
            max_stdout: MAX_HOOK_OUTPUT,
            on_stderr_line: None,
        };
        let out = command::run(&program, &CancellationToken::new())
            .await
            .map_err(|f| format!("hook {} {f}", self.name))?;
        Ok((
            out.code,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stderr_tail.trim().to_string(),
        ))
    }

    fn answer<T: for<'de> Deserialize<'de> + Default>(&self, stdout: &str) -> Result<T, String> {
        if stdout.trim().is_empty() {
            return Ok(T::default());
        }
        let not_a_decision = |why: String| {
            format!(
                "hook {} answered something that is not a decision: {why}",
                self.name
            )
        };
        // An object only: serde would also read a struct from a JSON array.
        match serde_json::from_str::<Value>(stdout.trim()) {
            Ok(v @ Value::Object(_)) => {
                serde_json::from_value(v).map_err(|e| not_a_decision(e.to_string()))
            }
            Ok(other) => Err(not_a_decision(format!(
                "expected a JSON object, got {}",
                crate::error::json_type_name(&other)
            ))),
            Err(e) => Err(not_a_decision(e.to_string())),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BeforeAnswer {
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AfterAnswer {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    details: Option<Value>,
    #[serde(default)]
    stop_after_batch: bool,
}

impl BeforeToolCall for CommandHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn before<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, BeforeDecision> {
        Box::pin(async move {
            let (code, stdout, stderr) = self.run(&event.to_json("before_tool_call")).await?;
            match code {
                Some(0) => {}
                Some(2) => {
                    let reason = if stderr.is_empty() {
                        "blocked".to_string()
                    } else {
                        stderr
                    };
                    return Ok(BeforeDecision::Block(reason));
                }
                other => {
                    return Err(format!(
                        "hook {} failed ({}): {stderr}",
                        self.name,
                        other
                            .map(|c| format!("exit code {c}"))
                            .unwrap_or("killed by a signal".into())
                    ));
                }
            }
            let answer: BeforeAnswer = self.answer(&stdout)?;
            match answer.decision.as_deref() {
                None | Some("pass") => Ok(BeforeDecision::Pass),
                Some("replace") => match answer.args {
                    Some(args) => Ok(BeforeDecision::Replace(args)),
                    None => Err(format!("hook {} said replace without `args`", self.name)),
                },
                Some("block") => Ok(BeforeDecision::Block(
                    answer.reason.unwrap_or_else(|| "blocked".into()),
                )),
                Some(other) => Err(format!(
                    "hook {} answered decision `{other}`; expected pass, replace or block",
                    self.name
                )),
            }
        })
    }
}

impl AfterToolCall for CommandHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn after<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, AfterChange> {
        Box::pin(async move {
            let (code, stdout, stderr) = self.run(&event.to_json("after_tool_call")).await?;
            if code != Some(0) {
                return Err(format!("hook {} failed: {stderr}", self.name));
            }
            let a: AfterAnswer = self.answer(&stdout)?;
            Ok(AfterChange {
                content: a.content,
                is_error: a.is_error,
                details: a.details,
                stop_after_batch: a.stop_after_batch,
            })
        })
    }
}
