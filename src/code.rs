//! Code mode: a `tool_search_code` body run in the sandbox, with every
//! `openclaw.tools.*` call relayed to the dispatch path.
//!
//! This is the only place the sandbox and dispatch meet: [`DispatchBridge`] turns bridge
//! frames into `Dispatcher::search`, `describe` and `call` (same policy, approvals, hooks,
//! validation and log as any other caller), and [`run`] shapes the answer the model reads,
//! `{ok, value, logs, telemetry}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::dispatch::offload::{Lane, Turns, offload};
use crate::dispatch::{CallRequest, Dispatcher};
use crate::sandbox::protocol::BridgeMethod;
use crate::sandbox::spares::SparePool;
use crate::sandbox::{
    Answer, Bridge, BridgeFailure, BridgeFuture, Child, Deadline, LogLine, RunReport, Sandbox,
    SandboxError, answer,
};

/// Per-run counts, reported in the result's telemetry, and whether the run still takes
/// searches and describes into them.
#[derive(Debug, Default)]
struct RunCounts {
    searches: AtomicU64,
    describes: AtomicU64,
    calls: AtomicU64,
    /// Set when the run's telemetry is read: a search or describe whose work ends after it
    /// is neither counted nor logged (its answer reaches no one), so the session log and the
    /// telemetry agree (sandbox round 35 F3). Held while one is recorded.
    closed: parking_lot::Mutex<bool>,
}

impl RunCounts {
    /// Logs a finished search or describe and counts it in `counter`, unless the run has
    /// ended.
    fn record<T>(
        &self,
        counter: &AtomicU64,
        dispatcher: &Dispatcher,
        done: crate::dispatch::Done<T>,
    ) -> Result<T, BridgeFailure> {
        let closed = self.closed.lock();
        if *closed {
            return Err(BridgeFailure {
                code: "cancelled".into(),
                message: "the run ended before this answer".into(),
            });
        }
        counter.fetch_add(1, Ordering::Relaxed);
        dispatcher.record(done).map_err(failure)
    }

    /// The counts, as the run ends: (searches, describes, calls).
    fn close(&self) -> (u64, u64, u64) {
        *self.closed.lock() = true;
        (
            self.searches.load(Ordering::Relaxed),
            self.describes.load(Ordering::Relaxed),
            self.calls.load(Ordering::Relaxed),
        )
    }
}

fn failure(e: crate::error::Error) -> BridgeFailure {
    BridgeFailure {
        code: e.code().to_string(),
        message: e.to_string(),
    }
}

/// The tool calls a caller still allows (the gateway's `max_tool_calls`): taken by each
/// call of its own loop and by each catalog call of its `tool_search_code` bodies, which
/// ran past it before (front round 18 F1: `max_tool_calls: 1` and one body ran five).
#[derive(Debug)]
pub struct CallBudget {
    max: usize,
    left: AtomicUsize,
}

impl CallBudget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(CallBudget {
            max,
            left: AtomicUsize::new(max),
        })
    }

    /// Takes one call; `false` when all are made.
    pub fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub fn spent(&self) -> bool {
        self.left.load(Ordering::SeqCst) == 0
    }

    /// Why a call past the budget did not run, for the model.
    pub fn refusal(&self) -> String {
        format!(
            "Not run: this request allows {} tool calls (max_tool_calls), all made. Answer with what you have.",
            self.max
        )
    }
}

/// Who a run is for: its id (sub-calls' ids name it), what ends it, and the tool calls its
/// caller still allows.
pub struct Parent<'a> {
    pub id: &'a str,
    pub cancel: CancellationToken,
    pub calls: Option<Arc<CallBudget>>,
}

impl<'a> Parent<'a> {
    /// A run of its own: never cancelled from outside, no call budget.
    pub fn alone(id: &'a str) -> Self {
        Parent {
            id,
            cancel: CancellationToken::new(),
            calls: None,
        }
    }
}

/// Relays bridge calls of one run to the dispatcher.
pub struct DispatchBridge {
    dispatcher: Arc<Dispatcher>,
    run_id: String,
    counts: Arc<RunCounts>,
    calls: Option<Arc<CallBudget>>,
    turns: Arc<Turns>,
}

impl Bridge for DispatchBridge {
    fn call(
        &self,
        method: BridgeMethod,
        args: Vec<Value>,
        cancel: CancellationToken,
    ) -> BridgeFuture<'_> {
        Box::pin(async move {
            let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
            match method {
                BridgeMethod::Search => {
                    let Value::String(query) = arg(0) else {
                        return Err(BridgeFailure {
                            code: "invalid-request".into(),
                            message: "openclaw.tools.search(query, {limit}) takes a string query"
                                .into(),
                        });
                    };
                    // As `tool_search`'s schema says: a whole number of at least 1 (1.5, -1
                    // and 1e308 fell back to the default limit without a word: round 35).
                    let limit = match arg(1) {
                        Value::Null => None,
                        Value::Number(n) if n.as_u64().is_some_and(|n| n >= 1) => {
                            n.as_u64().map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                        }
                        other => {
                            return Err(BridgeFailure {
                                code: "invalid-request".into(),
                                message: format!(
                                    "openclaw.tools.search: `limit` must be a whole number of at least 1, not {}",
                                    crate::catalog::compact::cut(&other.to_string(), 40)
                                ),
                            });
                        }
                    };
                    // Counted and logged together once its work is done, if the run still
                    // waits: the telemetry and the session log agree (round 34 F1: counted
                    // before its place, a search still waiting when its run ended was
                    // counted and never logged; round 35 F3, the other way).
                    let (dispatcher, counts) =
                        (Arc::clone(&self.dispatcher), Arc::clone(&self.counts));
                    aside(Lane::Search, &self.turns, move || {
                        let done = dispatcher.search_done(&query, limit);
                        let hits = counts.record(&counts.searches, &dispatcher, done)?;
                        Ok(answer(&hits))
                    })
                    .await
                }
                BridgeMethod::Describe => {
                    let Value::String(id) = arg(0) else {
                        return Err(BridgeFailure {
                            code: "invalid-request".into(),
                            message: "openclaw.tools.describe(id) takes a string id".into(),
                        });
                    };
                    // A known id with small schemas is described in place: bounded work (a
                    // lookup, a few KiB parsed and written), where the hand-over to the
                    // blocking pool and back was most of a describe's round trip. Anything
                    // else (an unknown id's suggestions, megabytes of schema: rounds 32, 35)
                    // goes to the lane.
                    if self
                        .dispatcher
                        .catalog()
                        .find(&id)
                        .is_ok_and(|e| e.schema_bytes() <= INLINE_DESCRIBE_BYTES)
                    {
                        let done = self.dispatcher.describe_done(&id, "code");
                        let d =
                            self.counts
                                .record(&self.counts.describes, &self.dispatcher, done)?;
                        return Ok(answer(&d));
                    }
                    let (dispatcher, counts) =
                        (Arc::clone(&self.dispatcher), Arc::clone(&self.counts));
                    aside(Lane::Describe, &self.turns, move || {
                        let done = dispatcher.describe_done(&id, "code");
                        let d = counts.record(&counts.describes, &dispatcher, done)?;
                        Ok(answer(&d))
                    })
                    .await
                }
                BridgeMethod::Call => {
                    let Value::String(id) = arg(0) else {
                        return Err(BridgeFailure {
                            code: "invalid-request".into(),
                            message: "openclaw.tools.call(id, args) takes a string id".into(),
                        });
                    };
                    if let Some(budget) = &self.calls
                        && !budget.take()
                    {
                        return Err(BridgeFailure {
                            code: "call-limit".into(),
                            message: budget.refusal(),
                        });
                    }
                    self.counts.calls.fetch_add(1, Ordering::Relaxed);
                    let mut request = CallRequest::new(id, arg(1), "code");
                    request.parent = Some(self.run_id.clone());
                    request.cancel = cancel;
                    request.turns = Some(Arc::clone(&self.turns));
                    let envelope = self.dispatcher.call(request).await.map_err(failure)?;
                    Ok(answer(&envelope.for_model()))
                }
            }
        })
    }
}

/// The schemas' bytes up to which a describe of a known id runs in the run's loop.
const INLINE_DESCRIBE_BYTES: usize = 16 * 1024;

/// A search or a describe run through [`offload`], the answer's text made there too.
async fn aside(
    lane: Lane,
    turns: &Turns,
    work: impl FnOnce() -> Result<Answer, BridgeFailure> + Send + 'static,
) -> Result<Answer, BridgeFailure> {
    offload(lane, Some(turns), work).await.unwrap_or_else(|e| {
        Err(BridgeFailure {
            code: "internal".into(),
            message: format!("the dispatch path failed: {e}"),
        })
    })
}

/// `telemetry` of a `tool_search_code` result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Telemetry {
    pub catalog_size: usize,
    pub sources: std::collections::BTreeMap<String, usize>,
    pub search_count: u64,
    pub describe_count: u64,
    pub call_count: u64,
}

/// What `tool_search_code` returns to the model.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum CodeResult {
    Ok {
        ok: bool,
        value: Value,
        logs: Vec<LogLine>,
        telemetry: Telemetry,
    },
    Err {
        ok: bool,
        error: SandboxError,
        logs: Vec<LogLine>,
        telemetry: Telemetry,
    },
}

impl CodeResult {
    pub fn is_ok(&self) -> bool {
        matches!(self, CodeResult::Ok { .. })
    }
}

/// Where a run's child comes from.
pub enum ChildFrom<'a> {
    /// Spawned for this run.
    Fresh,
    /// Already at `ready` (the CLI starts it while the catalog loads).
    Ready(Box<Child>),
    /// A spare of a long-lived host's pool.
    Spares(&'a SparePool),
}

/// Runs `code` with a fresh child; `parent_id` names the run in sub-call ids.
pub async fn run(
    sandbox: &Sandbox,
    dispatcher: Arc<Dispatcher>,
    code: &str,
    timeout: Duration,
    parent_id: &str,
) -> CodeResult {
    run_with(
        sandbox,
        ChildFrom::Fresh,
        dispatcher,
        code,
        timeout,
        Parent::alone(parent_id),
    )
    .await
}

/// Runs `code` once a run slot of the sandbox is free (so a flood of calls waits instead
/// of starting children), on a child from `from`; `parent.cancel` ends the run
/// (`cancelled`), and a run cancelled while it waits for its slot never takes a child.
pub async fn run_with(
    sandbox: &Sandbox,
    from: ChildFrom<'_>,
    dispatcher: Arc<Dispatcher>,
    code: &str,
    timeout: Duration,
    parent: Parent<'_>,
) -> CodeResult {
    let Parent {
        id: parent_id,
        cancel,
        calls,
    } = parent;
    let bridge = Arc::new(DispatchBridge {
        dispatcher: Arc::clone(&dispatcher),
        run_id: parent_id.to_string(),
        counts: Arc::default(),
        calls,
        turns: Arc::default(),
    });
    dispatcher
        .log()
        .event("code", json!({"run_id": parent_id, "bytes": code.len()}));
    let not_started = || SandboxError {
        code: "cancelled",
        message: "the run was cancelled by its caller before it started".into(),
    };
    // One deadline from here: the waits for a slot and a child count against it.
    let deadline = Deadline::after(timeout);
    // A body over the size bound takes no slot and no child.
    let slot = match sandbox.admit(code) {
        Err(e) => Err(e),
        Ok(()) => tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(not_started()),
            slot = sandbox.slot(deadline.left()) => slot,
        },
    };
    let outcome = match slot {
        Err(e) => RunReport::failed(e),
        Ok(_) if cancel.is_cancelled() => RunReport::failed(not_started()),
        Ok(_slot) => {
            // A child dropped half started is killed with its group.
            let child = tokio::time::timeout_at(deadline.at, async {
                match from {
                    ChildFrom::Ready(child) => Ok(*child),
                    ChildFrom::Spares(pool) => pool.take().await,
                    ChildFrom::Fresh => sandbox.spawn(timeout).await,
                }
            })
            .await
            .unwrap_or_else(|_| Err(deadline.passed(" waiting for a sandbox child to start")));
            match child {
                Ok(child) => {
                    sandbox
                        .run_on(child, code, deadline, bridge.clone(), cancel)
                        .await
                }
                Err(e) => RunReport::failed(e),
            }
        }
    };
    // The child is gone and its calls ended (`run_on` aborts and drains them).
    dispatcher.run_ended(parent_id);
    let (search_count, describe_count, call_count) = bridge.counts.close();
    let counts = dispatcher.catalog().counts();
    let telemetry = Telemetry {
        catalog_size: counts.cataloged,
        sources: counts.by_source,
        search_count,
        describe_count,
        call_count,
    };
    let result = match outcome.outcome {
        Ok(value) => CodeResult::Ok {
            ok: true,
            value,
            logs: outcome.logs,
            telemetry,
        },
        Err(error) => CodeResult::Err {
            ok: false,
            error,
            logs: outcome.logs,
            telemetry,
        },
    };
    let (ok, code_str) = match &result {
        CodeResult::Ok { .. } => (true, None),
        CodeResult::Err { error, .. } => (false, Some(error.code)),
    };
    let t = match &result {
        CodeResult::Ok { telemetry, .. } | CodeResult::Err { telemetry, .. } => telemetry,
    };
    dispatcher.log().event(
        "code_result",
        json!({"run_id": parent_id, "ok": ok, "error": code_str, "search_count": t.search_count, "describe_count": t.describe_count, "call_count": t.call_count}),
    );
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Facts;
    use crate::config::Config;
    use crate::dispatch::DispatcherBuilder;
    use crate::telemetry::SessionLog;

    /// A describe whose work ends after its run's telemetry was read is neither counted nor
    /// logged; one that ends before is both.
    #[test]
    fn work_that_ends_after_its_run_is_neither_counted_nor_logged() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::default();
        let catalog = crate::Catalog::build(
            crate::catalog::embedded::demo_descriptors().unwrap(),
            &Facts::bare(&config),
        )
        .unwrap();
        let log = Arc::new(SessionLog::open(dir.path(), "k").unwrap());
        let d = DispatcherBuilder::new(Arc::new(catalog))
            .session_log(Arc::clone(&log))
            .build();
        let counts = RunCounts::default();
        let before = d.describe_done("openclaw:github:create_issue", "code");
        assert!(counts.record(&counts.describes, &d, before).is_ok());
        let after = d.describe_done("openclaw:github:create_issue", "code");
        assert_eq!(counts.close(), (0, 1, 0));
        let refused = counts.record(&counts.describes, &d, after).unwrap_err();
        assert_eq!(refused.code, "cancelled");
        assert_eq!(counts.close(), (0, 1, 0));
        let text = std::fs::read_to_string(dir.path().join("sessions/k.jsonl")).unwrap();
        assert_eq!(text.matches(r#""event":"describe""#).count(), 1, "{text}");
    }
}
