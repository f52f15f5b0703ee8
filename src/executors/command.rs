//! The `command` executor: a tool run as a program ([`crate::process::program`]), its
//! arguments as JSON on stdin, `progress: ` lines of stderr as progress reports, its stdout
//! as the result.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{ExecCall, ToolOutput, limits};
use crate::process::program::{Program, ProgramFailure, run};

/// A `command` executor's call: the arguments as JSON on stdin, `progress: ` lines of
/// stderr as progress reports, stdout parsed by [`parse_command_stdout`].
pub(super) async fn run_tool(
    call: &ExecCall<'_>,
    argv: &[String],
    timeout_ms: Option<u64>,
    env: &[String],
) -> ToolOutput {
    let stdin = call.args.to_string().into_bytes();
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(limits::COMMAND_TIMEOUT_MS));
    let progress = Arc::clone(&call.progress);
    let on_line = move |line: &str| {
        if let Some(p) = line.strip_prefix("progress: ") {
            progress(p);
        }
    };
    let program = Program {
        argv,
        env,
        stdin: &stdin,
        timeout,
        max_stdout: limits::COMMAND_MAX_STDOUT,
        on_stderr_line: Some(&on_line),
    };
    let name = &call.entry.descriptor.name;
    match run(&program, &call.cancel).await {
        Err(failure) => {
            let status = match failure {
                ProgramFailure::Timeout(_) => "timeout",
                ProgramFailure::Cancelled => "cancelled",
                ProgramFailure::OutputTooLarge(_) => "output-too-large",
                ProgramFailure::Spawn(_) => "spawn-failed",
            };
            ToolOutput::error(
                format!("tool `{name}`: the command {failure}"),
                json!({"status": status}),
            )
        }
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut result = parse_command_stdout(&text);
            if out.code != Some(0) {
                result.is_error = true;
                let code = out
                    .code
                    .map(|c| format!("exit code {c}"))
                    .unwrap_or_else(|| "a signal".into());
                if result.text.trim().is_empty() {
                    result.text = format!(
                        "tool `{name}` failed with {code}: {}",
                        out.stderr_tail.trim()
                    );
                }
                if let Value::Object(d) = &mut result.details {
                    d.entry("status").or_insert(json!("failed"));
                    d.insert("exit_code".into(), json!(out.code));
                }
            }
            result
        }
    }
}

/// A command's stdout: a JSON object `{"text"?, "details"?, "is_error"?}`, or plain text.
fn parse_command_stdout(stdout: &str) -> ToolOutput {
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(stdout.trim())
        && obj
            .keys()
            .all(|k| matches!(k.as_str(), "text" | "details" | "is_error"))
    {
        let text = match obj.get("text") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        return ToolOutput {
            text,
            details: obj
                .get("details")
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
            is_error: obj
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
    }
    ToolOutput {
        text: stdout.to_string(),
        details: Value::Object(Map::new()),
        is_error: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_stdout_is_json_or_text() {
        let o = parse_command_stdout(r#"{"text": "hi", "details": {"n": 1}}"#);
        assert_eq!((o.text.as_str(), o.details["n"].as_i64()), ("hi", Some(1)));
        let o = parse_command_stdout("plain words\n");
        assert_eq!(o.text, "plain words\n");
        let o = parse_command_stdout(r#"{"other": 1}"#);
        assert_eq!(o.text, r#"{"other": 1}"#);
        let o = parse_command_stdout(r#"{"text": "bad", "is_error": true}"#);
        assert!(o.is_error);
    }
}
