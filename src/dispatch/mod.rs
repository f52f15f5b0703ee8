//! One call path for every caller: the `tool_search_code` bridge, `tool_call`, a
//! directory-mode exact-name call, direct mode and the CLI all come through
//! [`Dispatcher::call`] (and search and describe through [`Dispatcher::search`] and
//! [`Dispatcher::describe`]), so no rule exists twice.
//!
//! A call, in order:
//! 1. **resolve** an id or exact unique name in the (policy-filtered) catalog: unknown,
//!    ambiguous and unavailable tools are typed errors;
//! 2. **validate** the arguments against the input schema (jsonschema), every failure with
//!    its JSON pointer;
//! 3. **approve**, when an approval rule names the tool; a deny or a timeout blocks;
//! 4. **before hooks**, one session's hooks one at a time: pass, replace the arguments
//!    (validated again) or block; a failing hook blocks;
//! 5. **execute** with the executor of the tool's kind, with a cancellation token and a
//!    progress channel to the session log;
//! 6. **after hooks**: rewrite the content, mark an error, ask to stop after the batch;
//! 7. **envelope** bounded in size, counters and a `call` event in the session log.
//!
//! A blocked call returns an envelope that says it was blocked and why; its executor never
//! runs.

pub mod checker;
pub mod envelope;
pub mod offload;
mod validate;
pub use validate::check_declared;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::{BatchQuery, BatchResult, Catalog, CompactDescriptor, Description, Entry};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::executors::{ExecCall, Executors, Progress, ToolOutput};
use crate::policy::approval::{ApprovalDecision, ApprovalRequest, Approvals, Approver, DenyAll};
use crate::policy::hooks::{AfterToolCall, BeforeDecision, BeforeToolCall, CommandHook, HookEvent};
use crate::telemetry::{CounterSnapshot, Counters, SessionLog};
pub use envelope::{ContentBlock, Envelope, ToolResult};
use offload::{Lane, offload};
use validate::Validators;

/// One call to make.
#[derive(Debug, Clone)]
pub struct CallRequest {
    /// An id, or an exact unique name.
    pub tool: String,
    pub args: Value,
    /// The `tool_search_code` run this call came from; `None` for a direct call.
    pub parent: Option<String>,
    /// Who is calling, for the session log: `code`, `tool_call`, `directory`, `direct`, `cli`.
    pub caller: &'static str,
    pub cancel: CancellationToken,
    /// The caller's turns in the lanes ([`offload::Turns`]), for the work the call sends
    /// there (an unknown id's suggestions).
    pub turns: Option<Arc<offload::Turns>>,
}

impl CallRequest {
    pub fn new(tool: impl Into<String>, args: Value, caller: &'static str) -> Self {
        CallRequest {
            tool: tool.into(),
            args,
            parent: None,
            caller,
            cancel: CancellationToken::new(),
            turns: None,
        }
    }
}

/// The dispatch path of one session.
pub struct Dispatcher {
    /// The newest catalog: a host with MCP servers replaces it when a server's tool list
    /// changes; every call works on the one it read at its start.
    catalog: tokio::sync::watch::Receiver<Arc<Catalog>>,
    approvals: Approvals,
    approver: Arc<dyn Approver>,
    before: Vec<Arc<dyn BeforeToolCall>>,
    after: Vec<Arc<dyn AfterToolCall>>,
    executors: Executors,
    log: Arc<SessionLog>,
    counters: Arc<Counters>,
    /// Hooks of one session run one at a time.
    hook_lock: tokio::sync::Mutex<()>,
    validators: Validators,
    /// Sub-call numbers per parent, for stable call ids.
    sequence: Mutex<HashMap<String, u64>>,
    /// Random per dispatcher: in every call id, so the ids of processes writing one session
    /// log (CLI runs appending to `--session`, a restarted server) never repeat (review 19
    /// F2: three `toolsearch code` runs each wrote `code:cli:create_issue:1`).
    instance: String,
}

/// Builds a [`Dispatcher`]; everything but the catalog has a default (no approvals, deny
/// any approval asked, no hooks, no MCP or client executor, no session log).
pub struct DispatcherBuilder {
    catalog: tokio::sync::watch::Receiver<Arc<Catalog>>,
    approvals: Approvals,
    approver: Arc<dyn Approver>,
    before: Vec<Arc<dyn BeforeToolCall>>,
    after: Vec<Arc<dyn AfterToolCall>>,
    executors: Executors,
    log: Arc<SessionLog>,
    visible_schemas: Option<usize>,
}

impl DispatcherBuilder {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        DispatcherBuilder::live(tokio::sync::watch::channel(catalog).1)
    }

    /// A dispatcher that follows a catalog another task rebuilds.
    pub fn live(catalog: tokio::sync::watch::Receiver<Arc<Catalog>>) -> Self {
        DispatcherBuilder {
            catalog,
            approvals: Approvals::default(),
            approver: Arc::new(DenyAll),
            before: Vec::new(),
            after: Vec::new(),
            executors: Executors::default(),
            log: Arc::new(SessionLog::disabled("none")),
            visible_schemas: None,
        }
    }

    /// How many tool schemas the model sees at first (the surface's tools and the
    /// direct-only ones), for the session log; default: the direct-only count.
    pub fn visible_schemas(mut self, n: usize) -> Self {
        self.visible_schemas = Some(n);
        self
    }

    /// The config's approval rules and command hooks.
    pub fn config(mut self, config: &Config) -> Result<Self> {
        let catalog = Arc::clone(&self.catalog.borrow());
        self.approvals = Approvals::compile(&config.approvals, catalog.toolsets())?;
        for (i, h) in config.hooks.before_tool_call.iter().enumerate() {
            self.before
                .push(Arc::new(CommandHook::new("before_tool_call", i, h)));
        }
        for (i, h) in config.hooks.after_tool_call.iter().enumerate() {
            self.after
                .push(Arc::new(CommandHook::new("after_tool_call", i, h)));
        }
        Ok(self)
    }

    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    pub fn before_hook(mut self, hook: Arc<dyn BeforeToolCall>) -> Self {
        self.before.push(hook);
        self
    }

    pub fn after_hook(mut self, hook: Arc<dyn AfterToolCall>) -> Self {
        self.after.push(hook);
        self
    }

    pub fn executors(mut self, executors: Executors) -> Self {
        self.executors = executors;
        self
    }

    pub fn session_log(mut self, log: Arc<SessionLog>) -> Self {
        self.log = log;
        self
    }

    pub fn build(self) -> Dispatcher {
        let counts = self.catalog.borrow().counts();
        self.log.event(
            "catalog",
            json!({
                "cataloged": counts.cataloged,
                "direct_only": counts.direct_only,
                "hidden": counts.hidden,
                "by_source": counts.by_source,
                "visible_schemas": self.visible_schemas.unwrap_or(counts.direct_only),
            }),
        );
        Dispatcher {
            catalog: self.catalog,
            approvals: self.approvals,
            approver: self.approver,
            before: self.before,
            after: self.after,
            executors: self.executors,
            log: self.log,
            counters: Arc::new(Counters::default()),
            hook_lock: tokio::sync::Mutex::new(()),
            validators: Validators::default(),
            sequence: Mutex::new(HashMap::new()),
            instance: crate::ids::random_hex(4),
        }
    }
}

/// How a call ended, for the log.
enum Outcome {
    Ok,
    ToolError,
    Blocked,
}

impl Dispatcher {
    /// The catalog now (a later rebuild does not change the one returned).
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.borrow())
    }

    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// One search, counted and logged.
    pub fn search(&self, query: &str, limit: Option<usize>) -> Result<Vec<CompactDescriptor>> {
        self.record(self.search_done(query, limit))
    }

    /// One search, counted, its log event made but not written ([`Dispatcher::record`]).
    pub fn search_done(&self, query: &str, limit: Option<usize>) -> Done<Vec<CompactDescriptor>> {
        // A refused search is logged too: every search a caller made is in the log.
        match self.catalog().search(query, limit) {
            Ok(hits) => {
                self.counters.searched(1);
                let event = json!({"query": logged(query), "limit": limit, "ids": hits.iter().map(|h| &h.id).collect::<Vec<_>>()});
                Done::new("search", event, Ok(hits))
            }
            Err(e) => {
                let event = json!({"query": logged(query), "limit": limit, "error": e.code()});
                Done::new("search", event, Err(e))
            }
        }
    }

    /// Writes a search's or a describe's log event, and gives its result.
    pub fn record<T>(&self, done: Done<T>) -> Result<T> {
        self.log.no_effect(done.kind, done.event);
        done.result
    }

    /// A batch search, counted (one per query) and logged.
    pub fn search_batch(&self, queries: &[BatchQuery]) -> Result<BatchResult> {
        let result = self.catalog().search_batch(queries)?;
        self.counters.searched(queries.len() as u64);
        self.log.no_effect(
            "search",
            json!({
                "queries": result.results.iter().map(|g| json!({
                    "query": logged(&g.query),
                    "ids": g.candidates.iter().map(|c| &c.id).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "truncated": result.truncated,
            }),
        );
        Ok(result)
    }

    /// One describe, counted and logged.
    pub fn describe(&self, tool: &str, caller: &str) -> Result<Description> {
        self.record(self.describe_done(tool, caller))
    }

    /// One describe, counted, its log event made but not written ([`Dispatcher::record`]).
    pub fn describe_done(&self, tool: &str, caller: &str) -> Done<Description> {
        self.counters.described();
        let d = self
            .catalog()
            .describe(tool)
            .map_err(|e| with_recovery_hint(e, caller));
        let event = json!({"requested": logged(tool), "id": d.as_ref().ok().map(|d| &d.compact.id), "error": d.as_ref().err().map(Error::code)});
        Done::new("describe", event, d)
    }

    /// The input of a structured `tool_call`, `{id, args?}`, as (tool, args). Arguments
    /// sent flattened beside the id (`{"id": "x", "title": "..."}`) are moved into `args`
    /// only when unambiguous: no `args` given, and every other key a property of the tool's
    /// input schema.
    pub fn tool_call_input(&self, input: &Value) -> Result<(String, Value)> {
        let Some(obj) = input.as_object() else {
            return Err(Error::InvalidRequest(
                "tool_call takes an object: {\"id\": \"...\", \"args\": {...}}".into(),
            ));
        };
        let Some(id) = obj.get("id").and_then(Value::as_str) else {
            return Err(Error::InvalidRequest(
                "tool_call needs `id`: a tool id or exact unique name".into(),
            ));
        };
        let rest: Map<String, Value> = obj
            .iter()
            .filter(|(k, _)| k.as_str() != "id" && k.as_str() != "args")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match (obj.get("args"), rest.is_empty()) {
            (Some(args), true) => Ok((id.to_string(), args.clone())),
            (None, true) => Ok((id.to_string(), json!({}))),
            (Some(_), false) => Err(Error::InvalidRequest(format!(
                "tool_call got `args` and also {}; put every argument inside `args`",
                keys(&rest)
            ))),
            (None, false) => {
                let catalog = self.catalog();
                // An unknown id is the call's to refuse, with its suggestions made off the
                // runtime's workers (this runs on one).
                let entry = match catalog.find(id) {
                    Ok(entry) => entry,
                    Err(Error::UnknownTool { .. }) => {
                        return Ok((id.to_string(), Value::Object(rest)));
                    }
                    Err(e) => return Err(e),
                };
                let unknown: Vec<&String> = rest.keys().filter(|k| !entry.takes(k)).collect();
                if unknown.is_empty() {
                    Ok((id.to_string(), Value::Object(rest)))
                } else {
                    Err(Error::InvalidRequest(format!(
                        "tool_call got {} beside `id`, which `{}` does not take; put the arguments inside `args`",
                        unknown
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        entry.id
                    )))
                }
            }
        }
    }

    /// Runs one call through the whole path (see the module doc).
    pub async fn call(&self, mut request: CallRequest) -> Result<Envelope> {
        let started = Instant::now();
        self.counters.called();
        let catalog = self.catalog();
        let entry = match catalog.find(&request.tool) {
            Ok(e) => e,
            // Logged with its suggestions once they are made, which may wait for the
            // describe lane, or without them if the caller stops waiting meanwhile (its run
            // ended): either way the call it counted is in the log (sandbox round 36 F2: 16
            // counted, 8 logged).
            Err(e) => {
                let e = with_recovery_hint(e, request.caller);
                let event = |e: &Error| json!({"requested": logged(&request.tool), "caller": request.caller, "outcome": e.code(), "message": crate::catalog::compact::cut(&e.to_string(), 2 * LOGGED_CHARS)});
                let mut pending = LoggedOnDrop {
                    log: &self.log,
                    event: Some(event(&e)),
                };
                let e = suggested(&catalog, e, request.turns.as_deref()).await;
                pending.event = Some(event(&e));
                return Err(e);
            }
        };
        let call_id = self.next_call_id(
            request.caller,
            request.parent.as_deref(),
            &entry.descriptor.name,
        );
        let given = std::mem::take(&mut request.args);
        // From here the call may wait (its validation, an approval, the hook lock), run a
        // before-hook (which sees the arguments) or its tool: a caller that stops waiting
        // (its run ended, its turn was aborted) still leaves the call in the log, as
        // `aborted`, with the stage it had reached. Every return below that logs the call
        // itself disarms it first. (Armed only after the validation, a run that ended while
        // its call was validated counted the call and logged nothing: sandbox round 32 F3.)
        let mut unlogged = Unlogged {
            dispatcher: self,
            entry,
            call_id: call_id.clone(),
            request: &request,
            started,
            stage: "validation",
            armed: true,
        };
        let (mut args, checked) = self
            .validators
            .check_aside(&catalog, entry, given, request.turns.as_deref())
            .await;
        if let Err(e) = checked {
            unlogged.armed = false;
            self.log.no_effect(
                "call",
                call_event(entry, &call_id, &request, e.code(), started, None),
            );
            return Err(e);
        }
        unlogged.stage = "approval";

        if let Some((rule, timeout)) = self.approvals.required(&entry.descriptor) {
            let ask = ApprovalRequest {
                id: entry.id.clone(),
                name: entry.descriptor.name.clone(),
                args: args.clone(),
                rule: rule.to_string(),
            };
            let decision = match tokio::time::timeout(timeout, self.approver.decide(&ask)).await {
                Ok(d) => d,
                Err(_) => {
                    ApprovalDecision::Deny(format!("no approval within {} ms", timeout.as_millis()))
                }
            };
            self.log.event(
                "approval",
                json!({"call_id": call_id, "id": entry.id, "decision": match &decision { ApprovalDecision::Allow => "allow", ApprovalDecision::Deny(_) => "deny" }}),
            );
            if let ApprovalDecision::Deny(reason) = decision {
                unlogged.armed = false;
                return Ok(self.blocked(entry, call_id, &request, "approval", reason, started));
            }
        }

        unlogged.stage = "before-hooks";
        let mut event = self.hook_event(entry, &call_id, &args);
        if !self.before.is_empty() {
            let _serial = self.hook_lock.lock().await;
            for hook in &self.before {
                let decision = hook
                    .before(&event)
                    .await
                    .unwrap_or_else(BeforeDecision::Block);
                self.log.event(
                    "hook",
                    json!({"call_id": call_id, "phase": "before_tool_call", "hook": hook.name(), "decision": match &decision {
                        BeforeDecision::Pass => "pass", BeforeDecision::Replace(_) => "replace", BeforeDecision::Block(_) => "block"}}),
                );
                match decision {
                    BeforeDecision::Pass => {}
                    BeforeDecision::Replace(new_args) => {
                        let (new_args, checked) = self
                            .validators
                            .check_aside(&catalog, entry, new_args, request.turns.as_deref())
                            .await;
                        if let Err(e) = checked {
                            let reason = format!(
                                "hook {} replaced the arguments with invalid ones: {e}",
                                hook.name()
                            );
                            unlogged.armed = false;
                            return Ok(self.blocked(
                                entry,
                                call_id,
                                &request,
                                hook.name(),
                                reason,
                                started,
                            ));
                        }
                        args = new_args;
                        event.args = args.clone();
                    }
                    BeforeDecision::Block(reason) => {
                        let by = hook.name().to_string();
                        unlogged.armed = false;
                        return Ok(self.blocked(entry, call_id, &request, &by, reason, started));
                    }
                }
            }
        }

        let log = Arc::clone(&self.log);
        let progress_id = call_id.clone();
        // A tool's progress lines are its chatter, as many as it likes: they take from
        // the session's budget for events that record no effect (review 20 F3: one call's
        // 2 million lines rotated the log four times and took the record of a call that
        // had run with them).
        let progress: Progress = Arc::new(move |message: &str| {
            log.no_effect(
                "progress",
                json!({"call_id": progress_id, "message": crate::catalog::compact::cut(message, 2 * LOGGED_CHARS)}),
            );
        });
        // A caller that stopped waiting before its tool started (its run ended, its turn
        // was aborted or hit its bound while the arguments were checked) starts nothing.
        if request.cancel.is_cancelled() {
            let not_run = ToolResult::new(
                "Not run: the caller stopped waiting before the tool started.".into(),
                Value::Null,
                true,
            );
            return Ok(self.aborted(&mut unlogged, call_id, not_run, false));
        }
        unlogged.stage = "executor";
        let output = self
            .executors
            .run(ExecCall {
                entry,
                args: &args,
                cancel: request.cancel.clone(),
                progress,
            })
            .await;
        self.counters.executed(&entry.id, entry.descriptor.source);
        let mut result = ToolResult::new(output.text, output.details, output.is_error);
        let mut stop_after_batch = false;
        // Its caller stopped waiting while the tool ran: `aborted`, whichever saw it first
        // (the executor ending on the cancel, or the call being dropped); by the executor's
        // own error, a loaded machine logged the same call as `tool-error`.
        if request.cancel.is_cancelled() {
            return Ok(self.aborted(&mut unlogged, call_id, result, true));
        }

        unlogged.stage = "after-hooks";
        if !self.after.is_empty() {
            let _serial = self.hook_lock.lock().await;
            for hook in &self.after {
                event.result = Some(serde_json::to_value(&result).unwrap_or(Value::Null));
                match hook.after(&event).await {
                    Ok(change) => {
                        self.log.event(
                            "hook",
                            json!({"call_id": call_id, "phase": "after_tool_call", "hook": hook.name(), "decision": if change == Default::default() { "keep" } else { "change" }}),
                        );
                        let text = change.content.unwrap_or_else(|| result.text());
                        let details = change.details.unwrap_or(result.details.clone());
                        let is_error = change.is_error.unwrap_or(result.is_error);
                        result = ToolResult::new(text, details, is_error);
                        stop_after_batch |= change.stop_after_batch;
                    }
                    Err(reason) => {
                        self.log.event(
                            "hook",
                            json!({"call_id": call_id, "phase": "after_tool_call", "hook": hook.name(), "decision": "error", "reason": reason}),
                        );
                        let ToolOutput { text, details, .. } = ToolOutput::error(
                            reason,
                            json!({"status": "hook-failed", "hook": hook.name()}),
                        );
                        result = ToolResult::new(text, details, true);
                    }
                }
            }
        }

        let outcome = if result.is_error {
            Outcome::ToolError
        } else {
            Outcome::Ok
        };
        unlogged.armed = false;
        self.log_call(
            entry,
            &call_id,
            &request,
            outcome_str(&outcome),
            started,
            Some(&result),
        );
        Ok(Envelope {
            tool: entry.compact.clone(),
            call_id,
            result,
            stop_after_batch,
            ran: true,
        })
    }

    fn blocked(
        &self,
        entry: &Entry,
        call_id: String,
        request: &CallRequest,
        by: &str,
        reason: String,
        started: Instant,
    ) -> Envelope {
        self.log.event(
            "blocked",
            json!({"call_id": call_id, "id": entry.id, "by": by, "reason": reason}),
        );
        let result = ToolResult::new(
            format!("blocked: {reason}"),
            json!({"status": "blocked", "by": by, "reason": reason}),
            true,
        );
        self.log_call(
            entry,
            &call_id,
            request,
            outcome_str(&Outcome::Blocked),
            started,
            Some(&result),
        );
        Envelope {
            tool: entry.compact.clone(),
            call_id,
            result,
            stop_after_batch: false,
            ran: false,
        }
    }

    /// Logs a call that passed validation and whose caller stopped waiting before it ended
    /// (its approval, its hooks or its tool may have run), with the stage it reached.
    /// A call whose caller stopped waiting, logged `aborted` once, with `result` (the
    /// tool's, or why it did not run).
    fn aborted(
        &self,
        guard: &mut Unlogged<'_>,
        call_id: String,
        result: ToolResult,
        ran: bool,
    ) -> Envelope {
        guard.armed = false;
        self.log_aborted(guard);
        Envelope {
            tool: guard.entry.compact.clone(),
            call_id,
            result,
            stop_after_batch: false,
            ran,
        }
    }

    fn log_aborted(&self, guard: &Unlogged<'_>) {
        let mut event = call_event(
            guard.entry,
            &guard.call_id,
            guard.request,
            "aborted",
            guard.started,
            None,
        );
        event["stage"] = json!(guard.stage);
        self.log.event("call", event);
    }

    fn log_call(
        &self,
        entry: &Entry,
        call_id: &str,
        request: &CallRequest,
        outcome: &str,
        started: Instant,
        result: Option<&ToolResult>,
    ) {
        self.log.event(
            "call",
            call_event(entry, call_id, request, outcome, started, result),
        );
    }

    fn hook_event(&self, entry: &Entry, call_id: &str, args: &Value) -> HookEvent {
        HookEvent {
            session: self.log.session().to_string(),
            call_id: call_id.to_string(),
            id: entry.id.clone(),
            name: entry.descriptor.name.clone(),
            source: entry.descriptor.source.as_str().to_string(),
            source_name: entry.descriptor.source_name.clone(),
            args: args.clone(),
            result: None,
        }
    }

    /// Forgets the call count of `parent` (a code run) once it has ended and no call of it
    /// can start any more: one entry a run, never removed, grew for the life of a server
    /// (front round 7).
    pub fn run_ended(&self, parent: &str) {
        self.sequence.lock().remove(parent);
    }

    /// `{caller}:{parent or "direct"}.{instance}:{name}:{n}`
    /// (`cli:direct.5be03c9a:create_issue:1`, `code:mcp-3.0d41e7f2:create_issue:2`), n
    /// counting from 1 per parent, so an id says who called and from which run, and is
    /// unique in the session however many processes write its log.
    fn next_call_id(&self, caller: &str, parent: Option<&str>, name: &str) -> String {
        let parent = parent.unwrap_or("direct");
        let n = {
            let mut seq = self.sequence.lock();
            let n = seq.entry(parent.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        format!("{caller}:{parent}.{}:{name}:{n}", self.instance)
    }
}

/// A search or a describe whose work is done and whose log event is not yet written: a
/// caller that may have stopped waiting meanwhile (a code run past its end) writes it only
/// if it still waits, so the log and the run's telemetry agree (sandbox round 35 F3: work
/// that ended after its run was logged after the run's `code_result`, uncounted).
#[must_use]
pub struct Done<T> {
    kind: &'static str,
    event: Value,
    result: Result<T>,
}

impl<T> Done<T> {
    fn new(kind: &'static str, event: Value, result: Result<T>) -> Self {
        Done {
            kind,
            event,
            result,
        }
    }
}

/// An unknown id's error with the ids close to it, made on the describe lane as a
/// describe's are: a call runs on the runtime's workers, and a run's 64 calls of unknown
/// ids held both of them (sandbox round 35 F1).
async fn suggested(catalog: &Arc<Catalog>, e: Error, turns: Option<&offload::Turns>) -> Error {
    match e {
        Error::UnknownTool {
            requested, hint, ..
        } => {
            let (catalog, wanted) = (Arc::clone(catalog), requested.clone());
            let suggestions = offload(Lane::Describe, turns, move || catalog.suggest(&wanted))
                .await
                .unwrap_or_default();
            Error::UnknownTool {
                requested,
                suggestions,
                hint,
            }
        }
        other => other,
    }
}

/// A `call` event written when dropped: after the work it waited for, or at once if its
/// caller stopped waiting.
struct LoggedOnDrop<'a> {
    log: &'a SessionLog,
    event: Option<Value>,
}

impl Drop for LoggedOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            self.log.no_effect("call", event);
        }
    }
}

/// An unknown tool's error says how to find the right id from where the caller is.
fn with_recovery_hint(e: Error, caller: &str) -> Error {
    match e {
        Error::UnknownTool {
            requested,
            suggestions,
            ..
        } => Error::UnknownTool {
            requested,
            suggestions,
            hint: crate::texts::recovery_hint(caller).to_string(),
        },
        other => other,
    }
}

fn outcome_str(o: &Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok",
        Outcome::ToolError => "tool-error",
        Outcome::Blocked => "blocked",
    }
}

fn keys(map: &Map<String, Value>) -> String {
    map.keys()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `call` event of the session log: one shape for every outcome.
fn call_event(
    entry: &Entry,
    call_id: &str,
    request: &CallRequest,
    outcome: &str,
    started: Instant,
    result: Option<&ToolResult>,
) -> Value {
    json!({
        "call_id": call_id,
        "id": entry.id,
        "source": entry.descriptor.source,
        "source_name": entry.descriptor.source_name,
        "caller": request.caller,
        "parent": request.parent,
        "outcome": outcome,
        "is_error": result.map(|r| r.is_error),
        "duration_ms": started.elapsed().as_secs_f64() * 1e3,
    })
}

/// A call between its resolution and its own `call` event: dropped armed (the future was
/// dropped: a sandbox run that ended, a turn that was aborted), it logs the call as
/// `aborted` with the stage it reached, so every call that may have acted (a hook, the tool)
/// is in the log.
struct Unlogged<'a> {
    dispatcher: &'a Dispatcher,
    entry: &'a Entry,
    call_id: String,
    request: &'a CallRequest,
    started: Instant,
    /// How far the call got: `validation`, `approval`, `before-hooks`, `executor` or
    /// `after-hooks`.
    stage: &'static str,
    armed: bool,
}

impl Drop for Unlogged<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.dispatcher.log_aborted(self);
        }
    }
}

/// Characters of a caller's text (a query, an id that names no tool) a log event keeps:
/// uncut, 64 calls of 64 KiB ids a run pushed a session's earlier events out of its log
/// in 33 runs (review 11 F3).
const LOGGED_CHARS: usize = 200;

fn logged(text: &str) -> String {
    crate::catalog::compact::cut(text, LOGGED_CHARS)
}

#[cfg(test)]
mod tests;
