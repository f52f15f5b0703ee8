//! A run: a slot, a ready child, the `run` frame, then the loop that relays the child's
//! frames — console lines kept, bridge calls handed to the [`Bridge`] as futures the loop
//! polls, the answers queued to the child — until its result, its error, its death, the
//! deadline or the caller's cancel. The child is killed whatever the outcome.
//!
//! Never waits on the child anywhere but the framed read, and never decides policy: a
//! bridge call's answer is the bridge's.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde_json::{Value, json};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::protocol::{self, ChildFrame, Frame, ProtocolError};
use super::{Answer, Bridge, BridgeFailure, Child, LogLine, RunReport, Sandbox, SandboxError};

/// Frames to the child, written from the run loop itself without ever waiting: each is
/// written at once as far as the socket takes it, and what it does not take waits here
/// until the loop sees the socket writable again. A child that stops reading fills the
/// socket and this queue, never the loop, which keeps watching the deadline; and an
/// answer costs no hand-over to another task (a writer task of its own was two thread
/// wake-ups per bridge call). The queue holds at most one answer per bridge call plus the
/// `run` frame, so it is bounded by the calls a run may make.
struct Outbox {
    writer: OwnedWriteHalf,
    queue: VecDeque<Vec<u8>>,
    /// Bytes of the queue's first frame already written.
    written: usize,
    capacity: usize,
    /// The child closed its end: what is sent is dropped, and the read side says how the
    /// child ended.
    closed: bool,
}

impl Outbox {
    fn new(writer: OwnedWriteHalf, capacity: usize) -> Self {
        Outbox {
            writer,
            queue: VecDeque::new(),
            written: 0,
            capacity: capacity.max(1),
            closed: false,
        }
    }

    fn send(&mut self, frame: &Value) -> Result<(), SandboxError> {
        let mut bytes = frame.to_string().into_bytes();
        bytes.push(b'\n');
        self.send_line(bytes)
    }

    /// A bridge call's answer: its text is put in the frame as it came.
    fn answer(
        &mut self,
        id: u64,
        outcome: Result<Answer, BridgeFailure>,
    ) -> Result<(), SandboxError> {
        match outcome {
            Ok(value) => {
                let value = value.get();
                let mut bytes = Vec::with_capacity(value.len() + 64);
                bytes.extend_from_slice(b"{\"type\":\"bridge-result\",\"id\":");
                bytes.extend_from_slice(id.to_string().as_bytes());
                bytes.extend_from_slice(b",\"ok\":true,\"value\":");
                bytes.extend_from_slice(value.as_bytes());
                bytes.extend_from_slice(b"}\n");
                self.send_line(bytes)
            }
            Err(f) => self.send(&json!({"type": "bridge-result", "id": id, "ok": false, "error": {"code": f.code, "message": f.message}})),
        }
    }

    fn send_line(&mut self, bytes: Vec<u8>) -> Result<(), SandboxError> {
        if self.closed {
            return Ok(());
        }
        if self.queue.len() >= self.capacity {
            return Err(SandboxError::new(
                "protocol",
                "more answers are queued for the child than it made calls",
            ));
        }
        self.queue.push_back(bytes);
        self.flush();
        Ok(())
    }

    /// Writes what the socket takes now, without waiting.
    fn flush(&mut self) {
        while let Some(front) = self.queue.front() {
            match self.writer.try_write(&front[self.written..]) {
                Ok(n) => {
                    self.written += n;
                    if self.written == front.len() {
                        self.queue.pop_front();
                        self.written = 0;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    self.queue.clear();
                    return;
                }
            }
        }
    }

    /// Whether frames wait for the socket to take them.
    fn waiting(&self) -> bool {
        !self.closed && !self.queue.is_empty()
    }
}

/// What a run collects while it runs: the guest's console lines, and its bridge calls in
/// flight (each a task, with its id and outcome).
struct Held {
    logs: Vec<LogLine>,
    calls: FuturesUnordered<CallFuture>,
}

/// A bridge call of the run, polled by the run loop itself (no task of its own: a task
/// per call was two more thread wake-ups per round trip). Dropping it stops it.
type CallFuture = BoxFuture<'static, (u64, Result<Answer, BridgeFailure>)>;

/// Bytes a `bridge` frame may carry beyond its arguments (`{"type":"bridge","id":N,
/// "method":"describe","args":...}`), so the parent can bound the arguments by the line.
const BRIDGE_FRAME_OVERHEAD: usize = 128;

/// Bytes a `result` frame may carry beyond its value.
const RESULT_FRAME_OVERHEAD: usize = 64;

/// Bytes of a guest error's message kept: the runtime's 4,096 UTF-16 units, at most three
/// bytes each in UTF-8, with room to spare.
const MAX_ERROR_MESSAGE_BYTES: usize = 16 * 1024;

/// When a run must be over: one instant for the whole of it, from the moment its caller
/// asked (the wait for a slot, for a child, the run itself), and the time it was given, for
/// the message. Each stage given the whole timeout again, a 10 s run took 19 s (review 11
/// F4).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: tokio::time::Instant,
    pub whole: Duration,
}

impl Deadline {
    pub fn after(whole: Duration) -> Self {
        Deadline {
            at: tokio::time::Instant::now() + whole,
            whole,
        }
    }

    /// What is left of it.
    pub fn left(&self) -> Duration {
        self.at
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// The run's `timeout` error, `while` naming the stage it was in when it ran out.
    pub fn passed(&self, stage: &str) -> SandboxError {
        SandboxError::new(
            "timeout",
            format!(
                "tool_search_code timed out after {} ms{stage}",
                self.whole.as_millis()
            ),
        )
    }
}

impl Sandbox {
    /// A slot for one run, waited for at most `within` (then `busy`). Taken before a child
    /// is: a flood of calls waits here instead of starting children.
    pub async fn slot(&self, within: Duration) -> Result<OwnedSemaphorePermit, SandboxError> {
        match tokio::time::timeout(within, Arc::clone(&self.runs).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(SandboxError::new(
                "busy",
                format!(
                    "{} tool_search_code runs are already running in this host; try again when one has finished",
                    self.policy.limits.max_concurrent_runs
                ),
            )),
        }
    }

    /// Whether `code` may be run at all (its size): checked before a slot or a child is
    /// taken for it, and again on the child.
    pub fn admit(&self, code: &str) -> Result<(), SandboxError> {
        let max = self.policy.limits.max_code_bytes;
        if code.len() > max {
            return Err(SandboxError::new(
                "code-error",
                format!("the code is {} bytes; the limit is {max}", code.len()),
            ));
        }
        Ok(())
    }

    /// Takes a slot, spawns a child and runs `code` on it.
    pub async fn run(&self, code: &str, timeout: Duration, bridge: Arc<dyn Bridge>) -> RunReport {
        if let Err(e) = self.admit(code) {
            return RunReport::failed(e);
        }
        let deadline = Deadline::after(timeout);
        let _slot = match self.slot(deadline.left()).await {
            Ok(s) => s,
            Err(e) => return RunReport::failed(e),
        };
        // The child's start counts against the deadline too, as in `code::run_with`.
        let child = tokio::time::timeout_at(deadline.at, self.spawn(timeout))
            .await
            .unwrap_or_else(|_| Err(deadline.passed(" waiting for a sandbox child to start")));
        match child {
            Ok(child) => {
                self.run_on(child, code, deadline, bridge, CancellationToken::new())
                    .await
            }
            Err(e) => RunReport::failed(e),
        }
    }

    /// Runs `code` on a ready child, then kills the child's group whatever happened.
    /// `cancel` ends the run early (as `cancelled`): the caller went away.
    pub async fn run_on(
        &self,
        mut child: Child,
        code: &str,
        deadline: Deadline,
        bridge: Arc<dyn Bridge>,
        cancel: CancellationToken,
    ) -> RunReport {
        let cancel = cancel.child_token();
        let mut held = Held {
            logs: Vec::new(),
            calls: FuturesUnordered::new(),
        };
        let outcome = match self.admit(code) {
            Err(e) => Err(e),
            Ok(()) => {
                self.drive(&mut child, code, deadline, bridge, &cancel, &mut held)
                    .await
            }
        };
        let Held {
            logs,
            calls: in_flight,
        } = held;
        cancel.cancel();
        child.kill_now_reap_later();
        // The calls still running are stopped: dropped here, before the run's report goes
        // back, so a call whose tool began has logged itself (`aborted`) by the time the
        // caller reads the log.
        drop(in_flight);
        RunReport { outcome, logs }
    }

    /// The run loop. Nothing in it waits on the child except the framed read, which is
    /// safe to cancel: writes never wait (the [`Outbox`] keeps what the socket does not
    /// take), bridge calls are futures polled here (at most `max_calls_in_flight` at once;
    /// a search's or describe's work runs on the blocking pool, `dispatch::offload`, and a
    /// tool's execution waits on its executor), so the deadline arm is always polled and
    /// wins whenever it has passed.
    async fn drive(
        &self,
        child: &mut Child,
        code: &str,
        limit: Deadline,
        bridge: Arc<dyn Bridge>,
        cancel: &CancellationToken,
        held: &mut Held,
    ) -> Result<Value, SandboxError> {
        let Held {
            logs,
            calls: in_flight,
        } = held;
        let l = &self.policy.limits;
        let deadline = tokio::time::sleep_until(limit.at);
        tokio::pin!(deadline);
        let writer = child
            .writer
            .take()
            .ok_or_else(|| SandboxError::new("protocol", "this child has already run"))?;
        let mut outbox = Outbox::new(writer, l.max_bridge_calls + 1);
        outbox.send(&json!({
            "type": "run",
            "code": code,
            "limits": {
                "maxResultBytes": l.max_result_bytes,
                "maxLogBytes": l.max_log_bytes,
                "maxLogLines": l.max_log_lines,
                "maxBridgeCalls": l.max_bridge_calls,
                "maxArgBytes": l.max_arg_bytes,
            },
        }))?;
        let timed_out = || limit.passed("");
        let permits = Arc::new(Semaphore::new(l.max_calls_in_flight.max(1)));
        let mut log_bytes = 0usize;
        let mut bridge_calls = 0usize;
        loop {
            tokio::select! {
                biased;
                _ = &mut deadline => return Err(timed_out()),
                _ = cancel.cancelled() => {
                    return Err(SandboxError::new("cancelled", "the run was cancelled by its caller"));
                }
                Some((id, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                    outbox.answer(id, outcome)?;
                }
                _ = outbox.writer.writable(), if outbox.waiting() => outbox.flush(),
                frame = child.frames.next() => {
                    let Frame { frame, bytes } = match frame {
                        Some(Ok(f)) => f,
                        // The child closed its end, or the socket failed as it died: how
                        // it ended is the answer, unless the deadline passed first.
                        None | Some(Err(ProtocolError::Io(_))) => {
                            return Err(tokio::select! {
                                biased;
                                _ = &mut deadline => timed_out(),
                                e = self.exited(child, true) => e,
                            });
                        }
                        Some(Err(e)) => return Err(SandboxError::new("protocol", e.to_string())),
                    };
                    match frame {
                        ChildFrame::Ready {} => {
                            return Err(SandboxError::new("protocol", "a second `ready` from the child"));
                        }
                        ChildFrame::Log { level, items } => {
                            for text in items {
                                log_bytes += text.len();
                                if logs.len() > l.max_log_lines || log_bytes > l.max_log_bytes + 4096 {
                                    return Err(SandboxError::new("protocol", "the child sent more console output than its limits allow"));
                                }
                                logs.push(LogLine { level, text });
                            }
                        }
                        ChildFrame::Bridge { id, method, args } => {
                            bridge_calls += 1;
                            if bridge_calls > l.max_bridge_calls {
                                return Err(SandboxError::new("protocol", format!("more than {} bridge calls", l.max_bridge_calls)));
                            }
                            if bytes > l.max_arg_bytes + BRIDGE_FRAME_OVERHEAD {
                                return Err(SandboxError::new("protocol", format!(
                                    "a bridge call of {bytes} bytes; its arguments may have at most {}", l.max_arg_bytes)));
                            }
                            let bridge = Arc::clone(&bridge);
                            let cancel = cancel.child_token();
                            let permits = Arc::clone(&permits);
                            in_flight.push(Box::pin(async move {
                                let _permit = permits.acquire_owned().await;
                                (id, bridge.call(method, args, cancel).await)
                            }));
                        }
                        ChildFrame::Result { ok: true, value, .. } => {
                            if bytes > l.max_result_bytes + RESULT_FRAME_OVERHEAD {
                                return Err(SandboxError::new("output-too-large", format!(
                                    "the return value is about {bytes} bytes of JSON; the limit is {}", l.max_result_bytes)));
                            }
                            return Ok(value);
                        }
                        ChildFrame::Result { ok: false, error, .. } => {
                            let e = error.unwrap_or(protocol::GuestError { code: "code-error".into(), message: "error".into(), line: None });
                            let code = match e.code.as_str() {
                                "output-too-large" => "output-too-large",
                                _ => "code-error",
                            };
                            // The runtime cuts a message to 4,096 characters; a child
                            // that did not is held to it here (sandbox round 27 F2: 2 MB).
                            let said = crate::shown::head(&e.message, MAX_ERROR_MESSAGE_BYTES);
                            let message = match e.line {
                                Some(line) => format!("{said} (line {line})"),
                                None => said.to_string(),
                            };
                            return Err(SandboxError::new(code, message));
                        }
                    }
                }
            }
        }
    }
}
