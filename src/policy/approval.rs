//! Approvals: rules naming tools whose calls a person (or a program) must allow first.
//!
//! A rule is a list of tool patterns (`[[approvals]] tools = [...]`). When a call matches a
//! rule, the [`Approver`] answers allow, or deny with a reason; no answer within the rule's
//! timeout is a deny. A denied call never reaches its executor.
//!
//! On the command line ([`CliApprover`]): a call matching `--approve PATTERN` is allowed;
//! otherwise, when stdin is a terminal, the question is asked there; otherwise it is denied
//! with a message saying how to approve it.

use std::future::Future;
use std::io::{BufRead, IsTerminal};
use std::pin::Pin;
use std::time::Duration;

use serde_json::Value;

use super::pattern::{PatternSet, Toolsets};
use crate::config::ApprovalConfig;
use crate::error::Result;
use crate::ids::ToolKey;

/// Used when a rule gives no `timeout_ms`.
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Allow,
    Deny(String),
}

/// What an approver is asked.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub id: String,
    pub name: String,
    pub args: Value,
    /// The rule that matched, as written in the config.
    pub rule: String,
}

pub type ApprovalFuture<'a> = Pin<Box<dyn Future<Output = ApprovalDecision> + Send + 'a>>;

/// Answers approval requests.
pub trait Approver: Send + Sync {
    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> ApprovalFuture<'a>;
}

/// Compiled approval rules.
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    rules: Vec<(PatternSet, Duration, String)>,
}

impl Approvals {
    pub fn compile(config: &[ApprovalConfig], toolsets: &Toolsets) -> Result<Self> {
        let mut rules = Vec::new();
        for (i, rule) in config.iter().enumerate() {
            let what = format!("approvals[{i}].tools");
            rules.push((
                PatternSet::compile(&rule.tools, toolsets, &what)?,
                Duration::from_millis(rule.timeout_ms.unwrap_or(DEFAULT_APPROVAL_TIMEOUT_MS)),
                rule.tools.join(", "),
            ));
        }
        Ok(Approvals { rules })
    }

    /// The first rule that needs approval for `tool`: its text and timeout.
    pub fn required(&self, tool: &impl ToolKey) -> Option<(&str, Duration)> {
        self.rules
            .iter()
            .find(|(set, _, _)| set.matches(tool))
            .map(|(_, timeout, text)| (text.as_str(), *timeout))
    }
}

/// Denies everything: the approver of hosts that have no one to ask.
pub struct DenyAll;

impl Approver for DenyAll {
    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> ApprovalFuture<'a> {
        Box::pin(async move {
            ApprovalDecision::Deny(format!(
                "`{}` needs approval and this host has no approver",
                request.id
            ))
        })
    }
}

/// The command line's approver; see the module doc.
pub struct CliApprover {
    approved: PatternSet,
    interactive: bool,
}

impl CliApprover {
    /// `patterns` from `--approve`; asks on the terminal only when stdin is one.
    pub fn new(patterns: &[String], toolsets: &Toolsets) -> Result<Self> {
        Ok(CliApprover {
            approved: PatternSet::compile(patterns, toolsets, "--approve")?,
            interactive: std::io::stdin().is_terminal(),
        })
    }

    /// The same, never asking: for hosts whose stdin is a protocol channel or whose
    /// callers are not at this terminal (`mcp serve`).
    pub fn non_interactive(patterns: &[String], toolsets: &Toolsets) -> Result<Self> {
        Ok(CliApprover {
            approved: PatternSet::compile(patterns, toolsets, "--approve")?,
            interactive: false,
        })
    }

    fn ask(request: &ApprovalRequest) -> ApprovalDecision {
        // Stdin is locked before the prompt is shown and until its answer is read: one
        // prompt on screen at a time, and the answer typed under it is its own. Taken
        // after printing, two calls asking at once both showed their prompts, and the
        // `y` typed under the last (a harmless read) approved the first (a recursive
        // delete) (review 16).
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        // The arguments are the caller's: escaped, and a string's line breaks shown as `\n`
        // by JSON, so the person deciding sees what will run.
        crate::shown::to_stderr(&format!(
            "toolsearch: `{}` needs approval (rule: {}).\n  arguments: {}\nAllow this call? [y/N] ",
            request.id,
            request.rule,
            crate::shown::json_for_terminal(request.args.to_string())
        ));
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(_) if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") => {
                ApprovalDecision::Allow
            }
            _ => ApprovalDecision::Deny("denied at the terminal".into()),
        }
    }
}

impl Approver for CliApprover {
    fn decide<'a>(&'a self, request: &'a ApprovalRequest) -> ApprovalFuture<'a> {
        Box::pin(async move {
            if self.approved.matches_parts(&request.name, &request.id) {
                return ApprovalDecision::Allow;
            }
            if !self.interactive {
                return ApprovalDecision::Deny(format!(
                    "`{}` needs approval; run from a terminal to be asked, or pass --approve {}",
                    request.id, request.id
                ));
            }
            let request = request.clone();
            tokio::task::spawn_blocking(move || CliApprover::ask(&request))
                .await
                .unwrap_or_else(|_| ApprovalDecision::Deny("the approval prompt failed".into()))
        })
    }
}
