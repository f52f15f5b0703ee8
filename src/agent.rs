//! The agent loop: send the surface and the conversation to the model,
//! run the tool calls it asks for, append the results, ask again — until the model answers
//! without tool calls, every result of a batch says terminate, a hook asks to stop after the
//! batch, the turn is aborted, or the round limit is reached.
//!
//! Each tool call is resolved by name: the surface's control tools (`tool_search_code`,
//! `tool_search`, `tool_describe`, `tool_call`), then the catalog tools the surface
//! declared, then (directory mode) the deferred resolver for a hidden tool named exactly,
//! else a "tool not found" result the model reads. Whatever runs goes through the one
//! dispatch path. A batch runs in parallel unless a tool in it is `sequential`; then the
//! whole batch runs in order.
//!
//! The answer is the text of every round, joined by a blank line; a client that streams
//! gets it as the provider sends it ([`TextStream`]). The client's options
//! ([`RequestOptions`]) go to the model each round, its tool choice mapped onto the surface
//! ([`Agent::tool_choice`]); a model that calls tools under `tool_choice: none` has its
//! calls dropped, and one that makes several under `parallel_tool_calls: false` keeps the
//! first (each drop is logged).
//!
//! What a model's answers make the host do is bounded: a batch runs at most
//! [`MAX_PARALLEL_CALLS`] calls at once, and a host that shares its slots
//! ([`Agent::with_call_slots`]) at most that many across all its turns; a call that has not
//! started when the turn is aborted never starts. The conversation a turn sends is bounded
//! at [`MAX_CONVERSATION_BYTES`] ([`conversation_bytes`]): a model whose answers and tool
//! results grow it past that fails the turn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::{BatchQuery, Catalog, ExecutionMode};
use crate::config::Mode;
use crate::dispatch::offload::{Lane, offload};
use crate::dispatch::{CallRequest, Dispatcher};
use crate::error::Error;
use crate::provider::{OutputFormat, RequestOptions, ToolCall, ToolChoice, Usage};
use crate::sandbox::Sandbox;
use crate::sandbox::spares::SparePool;
use crate::surface::{self, Surface};

mod model;
pub mod results;
pub use model::{
    Held, LettingGo, Model, ModelError, ModelFuture, ModelReply, ModelRequest, ModelsFuture,
    ROUND_SEPARATOR, TextStream, join_places,
};

/// Calls of one batch that run at once (as many as one sandbox run may have in flight).
pub const MAX_PARALLEL_CALLS: usize = 16;

/// The largest conversation a turn sends to the model, in [`conversation_bytes`]: a
/// context window of a million tokens is about 4 MB of text.
pub const MAX_CONVERSATION_BYTES: usize = 16 * 1024 * 1024;

/// The least output a round is asked for under a turn's output bound (OpenAI refuses a
/// `max_output_tokens` under 16): with less left, the turn ends cut at its length.
const MIN_ROUND_OUTPUT_TOKENS: u64 = 16;

/// One message of the conversation, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// A system or developer message of the conversation (Responses input items): kept
    /// with it, so a continued conversation keeps the client's instructions to the model
    /// (front round 16 F1: they held for one turn only). Providers get it in the system
    /// prompt, after the request's own.
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

impl Message {
    /// The bytes of text this message holds: what a conversation's size is measured in
    /// (the request body that carries it, and the memory it takes, grow with it).
    pub fn text_bytes(&self) -> usize {
        match self {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + json_len(&c.arguments))
                        .sum::<usize>()
            }
            Message::Tool {
                call_id,
                name,
                content,
                ..
            } => call_id.len() + name.len() + content.len(),
        }
    }
}

/// The text bytes of a conversation ([`Message::text_bytes`] summed).
pub fn conversation_bytes(messages: &[Message]) -> usize {
    messages.iter().map(Message::text_bytes).sum()
}

/// The length of a value's compact JSON, without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// What a turn is run with besides the conversation.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    pub options: RequestOptions,
    pub text: Option<TextStream>,
    /// Responses `max_tool_calls`: the most calls the turn runs itself (client tools,
    /// handed back, are not counted). Calls past it are answered as not run, and the rounds
    /// after it are sent `tool_choice: none`, so the model answers with what it has.
    pub max_tool_calls: Option<usize>,
}

/// What a turn has done so far, whether it ends well or not: the places its answers hold,
/// and how many tool calls it ran.
#[derive(Default)]
struct SoFar {
    held: Held,
    calls_run: usize,
}

/// Why a turn failed.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnError {
    Provider(ModelError),
    RoundLimit(usize),
    /// `error`, in a turn whose tools had already run `calls` calls: asking again runs
    /// them again, so a client must not retry it as it would a failure before anything
    /// ran (an SDK retried a later round's 503, and every tool of the turn ran twice).
    AfterCalls {
        calls: usize,
        error: Box<TurnError>,
    },
}

impl TurnError {
    /// The crate error it is, for its code and message.
    pub fn as_error(&self) -> Error {
        match self {
            TurnError::Provider(e) => Error::Provider(e.message.clone()),
            TurnError::RoundLimit(n) => Error::RoundLimit(*n),
            TurnError::AfterCalls { error, .. } => error.as_error(),
        }
    }

    pub fn code(&self) -> &'static str {
        self.as_error().code()
    }

    /// The tool calls the turn ran before it failed.
    pub fn calls_run(&self) -> usize {
        match self {
            TurnError::AfterCalls { calls, .. } => *calls,
            _ => 0,
        }
    }
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnError::AfterCalls { calls, error } => write!(
                f,
                "{error} (after {calls} tool calls of this turn ran: asking again runs them again)"
            ),
            _ => self.as_error().fmt(f),
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stop {
    /// The model answered without tool calls.
    Answered,
    /// Every result of the last batch said terminate.
    Terminated,
    /// An after hook asked to stop after the batch.
    StopAfterBatch,
    Aborted,
    /// The model called client tools: they go back to the client to run.
    ClientTools,
}

/// One tool call the loop made, for the session log and QA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub round: usize,
    pub name: String,
    /// The catalog tool that ran, when one did.
    pub tool_id: Option<String>,
    pub is_error: bool,
    /// A tool ran for it and may have acted (not a call refused, not found or held back).
    #[serde(skip)]
    pub ran: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnOutcome {
    /// The answer: every round's text, joined by [`ROUND_SEPARATOR`].
    pub text: String,
    pub stop: Stop,
    pub rounds: usize,
    pub calls: Vec<CallRecord>,
    pub messages: Vec<Message>,
    /// Calls of client tools, for the client to run (with `Stop::ClientTools`).
    pub pending: Vec<ToolCall>,
    /// Tokens of every round, when the provider counted them.
    pub usage: Option<Usage>,
    /// How the last round's answer ended: cut short by the provider, a refusal.
    pub ending: crate::provider::normalize::Ending,
    /// The provider answers' places in their pool ([`ModelReply::held`]): whoever sends
    /// the outcome on keeps them until it is sent.
    #[serde(skip)]
    pub held: Held,
}

impl TurnOutcome {
    /// Ends the turn as its last answer ended. A refusal stays in the conversation as the
    /// model's words, so a continued conversation (a session, a stored response) still has
    /// it (front round 15 F7: a refusal was sent back as an empty assistant message).
    ///
    /// The notes on the last answer's text (annotations, log probabilities) are kept only
    /// when that text is the turn's whole answer: their offsets are its own.
    fn end_with(&mut self, mut ending: crate::provider::normalize::Ending) {
        let last = self.messages.iter_mut().rev().find_map(|m| match m {
            Message::Assistant { content, .. } => Some(content),
            _ => None,
        });
        if last.as_deref() != Some(&self.text) {
            ending.notes = Default::default();
        }
        if !ending.refusal.is_empty()
            && let Some(content) = last
        {
            if !content.is_empty() {
                content.push_str("\n\n");
            }
            content.push_str(&ending.refusal);
        }
        self.ending = ending;
    }
}

/// Runs turns for one session against one surface.
pub struct Agent {
    dispatcher: Arc<Dispatcher>,
    /// The catalog the surface was built from, when it is not the dispatcher's (a
    /// gateway request's, with the client's tools): calls are routed by it.
    catalog: Option<Arc<Catalog>>,
    surface: Surface,
    /// Declared catalog tool name -> id (the first entry of that name, as the surface
    /// declared it).
    declared: HashMap<String, String>,
    sandbox: Option<Arc<Sandbox>>,
    /// Children started ahead (long-lived hosts); a run takes one when there is one.
    spares: Option<Arc<SparePool>>,
    code_timeout: Duration,
    max_rounds: usize,
    turn: std::sync::atomic::AtomicU64,
    /// Client tool calls go back to the client (the gateway) instead of to an executor.
    client_passthrough: bool,
    /// Calls the whole host may run at once, shared by its agents.
    host_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// The tool results its turns hold past their own share ([`results`]).
    results: Option<Arc<tokio::sync::Semaphore>>,
}

/// The result of one tool call, as the model will read it.
struct Outcome {
    text: String,
    is_error: bool,
    terminate: bool,
    stop_after_batch: bool,
    tool_id: Option<String>,
    /// A client tool: not run here, handed back to the client.
    client: bool,
    /// A tool ran for it, which may have acted: what makes a failed turn's client told
    /// not to ask again (front round 21 F3: 16 calls refused for bad arguments were said to
    /// have run).
    ran: bool,
}

impl Outcome {
    fn error(text: String) -> Self {
        Outcome {
            text,
            is_error: true,
            terminate: false,
            stop_after_batch: false,
            tool_id: None,
            client: false,
            ran: false,
        }
    }

    fn json(value: &impl Serialize, is_error: bool) -> Self {
        Outcome {
            text: serde_json::to_string(value).unwrap_or_else(|_| "null".into()),
            is_error,
            terminate: false,
            stop_after_batch: false,
            tool_id: None,
            client: false,
            ran: false,
        }
    }
}

/// A structured tool's work on the blocking pool ([`offload`]).
async fn offloaded(lane: Lane, work: impl FnOnce() -> Outcome + Send + 'static) -> Outcome {
    offload(lane, None, work)
        .await
        .unwrap_or_else(|e| Outcome::error(format!("the dispatch path failed: {e}")))
}

/// Where a model's call goes, decided once per call from its name: the batch's ordering
/// and the call itself read the same answer.
enum Route {
    /// The surface's control tool at this index of `surface.tools`.
    Control(usize),
    /// A catalog tool: one the surface declared, or (directory mode) a hidden one named
    /// exactly.
    Tool {
        id: String,
        caller: &'static str,
        /// Run by the client that declared it, not here.
        client: bool,
        execution_mode: ExecutionMode,
    },
    NotFound,
    /// The lookup itself failed (a name several hidden tools share).
    Failed(String),
}

impl Agent {
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        surface: Surface,
        sandbox: Option<Arc<Sandbox>>,
        code_timeout: Duration,
        max_rounds: usize,
    ) -> Self {
        let declared = declared(&dispatcher.catalog(), &surface);
        Agent {
            dispatcher,
            catalog: None,
            surface,
            declared,
            sandbox,
            code_timeout,
            max_rounds,
            turn: std::sync::atomic::AtomicU64::new(0),
            client_passthrough: false,
            spares: None,
            host_slots: None,
            results: None,
        }
    }

    /// Routes calls by `catalog`, the one the surface was built from, while the dispatcher
    /// (the session's: its log, its hooks) runs them against its own.
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.declared = declared(&catalog, &self.surface);
        self.catalog = Some(catalog);
        self
    }

    /// Takes a slot of `slots` for each call it runs, so the host's turns together run at
    /// most as many calls at once as it has slots.
    pub fn with_call_slots(mut self, slots: Arc<tokio::sync::Semaphore>) -> Self {
        self.host_slots = Some(slots);
        self
    }

    /// Counts its turns' tool results past their own share in `pool` ([`results::pool`]),
    /// shared by the host's agents.
    pub fn with_results_pool(mut self, pool: Arc<tokio::sync::Semaphore>) -> Self {
        self.results = Some(pool);
        self
    }

    /// Numbers its turns after the `n` the session has run before (run ids and the calls
    /// made from them stay unique in the session's log).
    pub fn with_turns_before(mut self, n: u64) -> Self {
        self.turn = std::sync::atomic::AtomicU64::new(n);
        self
    }

    /// The catalog calls are routed by.
    fn routing_catalog(&self) -> Arc<Catalog> {
        match &self.catalog {
            Some(c) => Arc::clone(c),
            None => self.dispatcher.catalog(),
        }
    }

    /// Runs code on spare children from `pool` (same sandbox) instead of cold ones.
    pub fn with_spares(mut self, pool: Option<Arc<SparePool>>) -> Self {
        self.spares = pool;
        self
    }

    /// Hands client tool calls back to the caller (`Stop::ClientTools`) instead of running
    /// them.
    pub fn with_client_passthrough(mut self) -> Self {
        self.client_passthrough = true;
        self
    }

    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// Runs one call of a surface tool, exactly as a model's call in a turn runs (hosts
    /// without a model loop, such as `mcp serve`, come through here): the text the model
    /// reads, and whether it is an error.
    pub async fn run_tool(
        &self,
        name: &str,
        arguments: Value,
        run_id: &str,
        cancel: CancellationToken,
    ) -> (String, bool) {
        let call = ToolCall {
            id: run_id.to_string(),
            name: name.to_string(),
            arguments,
            unreadable: None,
        };
        let parent = crate::code::Parent {
            id: run_id,
            cancel,
            calls: None,
        };
        let out = self.run_one(&call, self.route(name), parent).await;
        (out.text, out.is_error)
    }

    /// The client's tool choice for `round` on this surface. A tool the surface declares
    /// stays named; one behind it (a catalog tool) becomes `tool_search_code` in code mode,
    /// else any tool. A forced choice holds for the first round only: the later rounds must
    /// be free to answer.
    pub fn tool_choice(&self, choice: &ToolChoice, round: usize) -> ToolChoice {
        let declares = |name: &str| self.surface.tools.iter().any(|t| t.name == name);
        match choice {
            ToolChoice::Required | ToolChoice::Tool(_) if round > 1 => ToolChoice::Auto,
            ToolChoice::Tool(name) if declares(name) => ToolChoice::Tool(name.clone()),
            ToolChoice::Tool(_) if declares(surface::TOOL_SEARCH_CODE) => {
                ToolChoice::Tool(surface::TOOL_SEARCH_CODE.to_string())
            }
            ToolChoice::Tool(_) => ToolChoice::Required,
            other => other.clone(),
        }
    }

    /// Runs one turn: the conversation (ending with the new input: a user message or the
    /// results of client tools) to the model, tool calls until it is done.
    pub async fn run_turn(
        self: &Arc<Self>,
        model: &dyn Model,
        system: &str,
        messages: Vec<Message>,
        options: TurnOptions,
        abort: CancellationToken,
    ) -> Result<TurnOutcome, TurnError> {
        let mut so_far = SoFar::default();
        let outcome = self
            .run_rounds(model, system, messages, options, abort, &mut so_far)
            .await;
        match outcome {
            Ok(mut o) => {
                o.held = so_far.held;
                Ok(o)
            }
            Err(error) if so_far.calls_run > 0 => Err(TurnError::AfterCalls {
                calls: so_far.calls_run,
                error: Box::new(error),
            }),
            Err(error) => Err(error),
        }
    }

    async fn run_rounds(
        self: &Arc<Self>,
        model: &dyn Model,
        system: &str,
        messages: Vec<Message>,
        options: TurnOptions,
        abort: CancellationToken,
        so_far: &mut SoFar,
    ) -> Result<TurnOutcome, TurnError> {
        let held = &mut so_far.held;
        let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // Shared with each round's request, and pushed to once the request is gone: one
        // copy of the conversation however many rounds it has.
        let mut messages = Arc::new(messages);
        let for_round = |round: usize| {
            let mut o = options.options.clone();
            o.tool_choice = o.tool_choice.map(|c| self.tool_choice(&c, round));
            Arc::new(o)
        };
        let (first, later) = (for_round(1), for_round(2));
        let spent = Arc::new(RequestOptions {
            tool_choice: Some(ToolChoice::None),
            ..(*later).clone()
        });
        let budget = options.max_tool_calls.map(crate::code::CallBudget::new);
        // Bytes the model wrote in the turn (text and call arguments).
        let mut written = 0u64;
        let mut kept = results::ResultBytes::new(self.results.clone());
        let text_out = options.text;
        // A structured answer (a JSON object or schema) is the last round's text alone:
        // joined, two rounds' JSON documents were one answer no parser reads (front round
        // 16 F2). So its text is not streamed as the provider sends it, but once its round
        // is known to be the last (it makes no calls).
        let structured = matches!(
            options.options.format,
            Some(OutputFormat::JsonObject | OutputFormat::JsonSchema { .. })
        );
        // The answer is read from the conversation when the turn ends, not kept beside it:
        // a second copy of every round's text held while the next was read.
        let mut answer = messages.len();
        let mut said = false;
        let mut usage: Option<Usage> = None;
        let mut calls = Vec::new();
        for round in 1..=self.max_rounds {
            if abort.is_cancelled() {
                return Ok(self.finish(answer, Stop::Aborted, round - 1, calls, messages, usage));
            }
            let size = conversation_bytes(&messages);
            if size > MAX_CONVERSATION_BYTES {
                return Err(TurnError::Provider(ModelError::from(format!(
                    "the conversation grew to {size} bytes in round {round} (the model's answers and its tools' results), over the {MAX_CONVERSATION_BYTES} a turn may send"
                ))));
            }
            if let Some(out) = &text_out
                && said
            {
                out.separate_next();
            }
            let mut round_options = Arc::clone(if budget.as_ref().is_some_and(|b| b.spent()) {
                &spent
            } else if round == 1 {
                &first
            } else {
                &later
            });
            // The client's output bound is the turn's, not each round's (front round 16
            // F6: a bound of 40 wrote 55 in two rounds, said completed): each round may
            // write what the rounds before left, and when too little is left for a round
            // the turn ends there, cut at its length.
            if let Some(cap) = options.options.max_output_tokens
                && round > 1
            {
                // The provider's count; a provider that counts none is estimated at four
                // bytes a token of what it wrote (front round 17 F8: without usage every
                // round was asked for the whole bound).
                let used = usage.map_or(written.div_ceil(4), |u| u.output_tokens);
                let left = cap.saturating_sub(used);
                if left < MIN_ROUND_OUTPUT_TOKENS {
                    let mut out =
                        self.finish(answer, Stop::Answered, round - 1, calls, messages, usage);
                    out.ending.cut = Some(crate::provider::normalize::Cut::Length);
                    return Ok(out);
                }
                round_options = Arc::new(RequestOptions {
                    max_output_tokens: Some(left),
                    ..(*round_options).clone()
                });
            }
            let request = ModelRequest {
                system: system.to_string(),
                tools: self.surface.tools.clone(),
                messages: Arc::clone(&messages),
                options: Arc::clone(&round_options),
                text: if structured { None } else { text_out.clone() },
                held: Arc::new(parking_lot::Mutex::new(std::mem::take(held))),
            };
            let mut reply = tokio::select! {
                r = model.respond(&request) => r.map_err(TurnError::Provider)?,
                _ = abort.cancelled() => {
                    return Ok(self.finish(answer, Stop::Aborted, round - 1, calls, messages, usage));
                }
            };
            held.add(std::mem::take(&mut *request.held.lock()));
            drop(request);
            held.add(std::mem::take(&mut reply.held));
            self.hold_to_choice(&mut reply, &round_options, round);
            if let Some(u) = reply.usage {
                usage.get_or_insert_default().add(u);
            }
            written = written.saturating_add(
                (reply.text.len()
                    + reply
                        .tool_calls
                        .iter()
                        .map(|c| json_len(&c.arguments))
                        .sum::<usize>()) as u64,
            );
            if let Some(out) = &text_out
                && !reply.streamed
                && (!structured || reply.tool_calls.is_empty())
            {
                out.send(&reply.text).await;
                said |= !reply.text.is_empty();
            }
            said |= reply.streamed && !reply.text.is_empty();
            crate::provider::normalize::unique_ids(
                &mut reply.tool_calls,
                messages
                    .iter()
                    .filter_map(|m| match m {
                        Message::Assistant { tool_calls, .. } => Some(tool_calls),
                        _ => None,
                    })
                    .flatten()
                    .map(|c| c.id.as_str()),
            );
            if structured {
                answer = messages.len();
            }
            Arc::make_mut(&mut messages).push(Message::Assistant {
                content: std::mem::take(&mut reply.text),
                tool_calls: reply.tool_calls.clone(),
            });
            if reply.tool_calls.is_empty() {
                let mut out = self.finish(answer, Stop::Answered, round, calls, messages, usage);
                out.end_with(std::mem::take(&mut reply.ending));
                return Ok(out);
            }
            let held_back = self.held_back(&reply.tool_calls, budget.as_deref());
            let outcomes = self
                .run_batch(
                    &reply
                        .tool_calls
                        .iter()
                        .zip(&held_back)
                        .filter(|(_, why)| why.is_none())
                        .map(|(c, _)| c.clone())
                        .collect::<Vec<_>>(),
                    &format!("turn{turn}-r{round}"),
                    &abort,
                    MAX_CONVERSATION_BYTES.saturating_sub(conversation_bytes(&messages)),
                    &mut kept,
                    budget.as_ref(),
                )
                .await;
            let mut ran = outcomes.into_iter();
            let outcomes: Vec<Outcome> = held_back
                .into_iter()
                .map(|why| match why {
                    None => ran
                        .next()
                        .unwrap_or_else(|| Outcome::error("the tool call task failed".into())),
                    Some(why) => Outcome::error(why),
                })
                .collect();
            let all_terminate = outcomes.iter().all(|o| o.terminate);
            let stop_after = outcomes.iter().any(|o| o.stop_after_batch);
            let pending: Vec<ToolCall> = reply
                .tool_calls
                .iter()
                .zip(&outcomes)
                .filter(|(_, o)| o.client)
                .map(|(c, _)| c.clone())
                .collect();
            for (call, o) in reply.tool_calls.iter().zip(outcomes) {
                if o.client {
                    continue;
                }
                if o.ran {
                    so_far.calls_run += 1;
                }
                calls.push(CallRecord {
                    round,
                    name: call.name.clone(),
                    tool_id: o.tool_id,
                    is_error: o.is_error,
                    ran: o.ran,
                });
                Arc::make_mut(&mut messages).push(Message::Tool {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: o.text,
                    is_error: o.is_error,
                });
            }
            if !pending.is_empty() {
                let mut out = self.finish(answer, Stop::ClientTools, round, calls, messages, usage);
                out.pending = pending;
                out.end_with(std::mem::take(&mut reply.ending));
                return Ok(out);
            }
            if abort.is_cancelled() {
                return Ok(self.finish(answer, Stop::Aborted, round, calls, messages, usage));
            }
            if all_terminate {
                return Ok(self.finish(answer, Stop::Terminated, round, calls, messages, usage));
            }
            if stop_after {
                return Ok(self.finish(
                    answer,
                    Stop::StopAfterBatch,
                    round,
                    calls,
                    messages,
                    usage,
                ));
            }
        }
        Err(TurnError::RoundLimit(self.max_rounds))
    }

    /// Why each of a batch's calls is answered without running, in order, `None` for those
    /// that run (or go to the client): arguments the model wrote that could not be read
    /// (it may call again; a client would get nothing it could run), and calls past the
    /// turn's `max_tool_calls`, counted off `left` (the calls the turn runs itself count,
    /// client calls handed back do not).
    fn held_back(
        &self,
        calls: &[ToolCall],
        budget: Option<&crate::code::CallBudget>,
    ) -> Vec<Option<String>> {
        calls
            .iter()
            .map(|c| {
                if let Some(why) = &c.unreadable {
                    return Some(format!(
                        "Not run: {why}. Call `{}` again with its arguments as one JSON object.",
                        c.name
                    ));
                }
                let budget = budget?;
                let handed_back = self.client_passthrough
                    && matches!(self.route(&c.name), Route::Tool { client: true, .. });
                if handed_back || budget.take() {
                    return None;
                }
                Some(budget.refusal())
            })
            .collect()
    }

    /// The reply's calls as the client's options allow them: none under `tool_choice:
    /// none`, the first alone under `parallel_tool_calls: false`. A model that disobeys
    /// has the rest dropped before anything runs, and the drop logged.
    ///
    /// An answer the provider cut short (its token limit, its content filter) runs none of
    /// its calls either: the last may end inside its arguments, and one that parsed may not
    /// be all the model meant to call (front round 15 F4: a client call cut by Anthropic's
    /// `max_tokens` was handed over as whole). The turn ends there, said incomplete.
    fn hold_to_choice(&self, reply: &mut ModelReply, options: &RequestOptions, round: usize) {
        let (keep, why) = if let Some(cut) = reply.ending.cut {
            (
                0,
                format!("the answer was cut short ({})", cut.finish_reason()),
            )
        } else if options.tool_choice == Some(ToolChoice::None) {
            (0, "tool_choice: none".to_string())
        } else if options.parallel_tool_calls == Some(false) {
            (1, "parallel_tool_calls: false".to_string())
        } else {
            return;
        };
        if reply.tool_calls.len() > keep {
            let dropped: Vec<String> = reply.tool_calls.drain(keep..).map(|c| c.name).collect();
            self.dispatcher.log().event(
                "calls_dropped",
                json!({"round": round, "dropped": dropped, "why": why}),
            );
        }
    }

    /// The turn's outcome; its text is every round's text from message `answer` on.
    fn finish(
        &self,
        answer: usize,
        stop: Stop,
        rounds: usize,
        calls: Vec<CallRecord>,
        messages: Arc<Vec<Message>>,
        usage: Option<Usage>,
    ) -> TurnOutcome {
        let mut text = String::new();
        for m in messages.iter().skip(answer) {
            if let Message::Assistant { content, .. } = m
                && !content.is_empty()
            {
                if !text.is_empty() {
                    text.push_str(ROUND_SEPARATOR);
                }
                text.push_str(content);
            }
        }
        let messages = Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone());
        self.dispatcher.log().event(
            "turn",
            json!({"stop": stop, "rounds": rounds, "calls": calls}),
        );
        TurnOutcome {
            text,
            stop,
            rounds,
            calls,
            messages,
            pending: Vec::new(),
            usage,
            ending: Default::default(),
            held: Held::default(),
        }
    }

    /// Runs one batch: in parallel, unless any tool in it is sequential. Its results may
    /// add at most `room` bytes to the conversation: once they have, the calls still
    /// waiting never run and those running are cancelled, and the turn fails at the
    /// conversation's bound. Checked only before each round, a batch of 64 calls each
    /// returning 1 MB grew a turn to 68 MB first, and 64 such turns waited their turns at
    /// the host's run slots for 614 s, holding 2.7 GB (front round 8). Each result takes
    /// its place in `kept` as it arrives, or is not kept.
    async fn run_batch(
        self: &Arc<Self>,
        calls: &[ToolCall],
        batch_id: &str,
        abort: &CancellationToken,
        room: usize,
        kept: &mut results::ResultBytes,
        budget: Option<&Arc<crate::code::CallBudget>>,
    ) -> Vec<Outcome> {
        let over = abort.child_token();
        let abort = &over;
        let mut added = 0usize;
        let mut arrived = |mut o: Outcome| {
            if !o.client && !kept.keep(o.text.len()) {
                let tool_id = o.tool_id.take();
                o = Outcome::error(results::ResultBytes::refusal(o.text.len()));
                o.tool_id = tool_id;
            }
            added += o.text.len();
            if added > room {
                over.cancel();
            }
            o
        };
        let routes: Vec<Route> = calls.iter().map(|c| self.route(&c.name)).collect();
        let sequential = routes.iter().any(|r| {
            matches!(
                r,
                Route::Tool {
                    execution_mode: ExecutionMode::Sequential,
                    ..
                }
            )
        });
        if sequential {
            let mut out = Vec::with_capacity(calls.len());
            for (i, (c, route)) in calls.iter().zip(routes).enumerate() {
                let parent = crate::code::Parent {
                    id: &format!("{batch_id}-{i}"),
                    cancel: abort.clone(),
                    calls: budget.cloned(),
                };
                let o = self.run_in_slot(c, route, parent, None).await;
                out.push(arrived(o));
            }
            return out;
        }
        let batch = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_CALLS));
        // Each call counts its own result as it ends, so the calls still waiting see the
        // bound reached at once, however late this task reads the results.
        let grown = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut set = tokio::task::JoinSet::new();
        for (i, (c, route)) in calls.iter().zip(routes).enumerate() {
            let agent = Arc::clone(self);
            let call = c.clone();
            let id = format!("{batch_id}-{i}");
            let abort = abort.clone();
            let batch = Arc::clone(&batch);
            let (grown, over) = (Arc::clone(&grown), over.clone());
            let calls = budget.cloned();
            set.spawn(async move {
                let parent = crate::code::Parent {
                    id: &id,
                    cancel: abort,
                    calls,
                };
                let o = agent.run_in_slot(&call, route, parent, Some(batch)).await;
                let len = o.text.len();
                if grown.fetch_add(len, std::sync::atomic::Ordering::Relaxed) + len > room {
                    over.cancel();
                }
                (i, o)
            });
        }
        let mut out: Vec<Option<Outcome>> = (0..calls.len()).map(|_| None).collect();
        while let Some(done) = set.join_next().await {
            if let Ok((i, o)) = done {
                out[i] = Some(arrived(o));
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::error("the tool call task failed".into())))
            .collect()
    }

    /// Runs one call once a slot of its batch and one of the host are free; a call still
    /// waiting when the turn is aborted never runs. Client calls handed back take none.
    async fn run_in_slot(
        &self,
        call: &ToolCall,
        route: Route,
        parent: crate::code::Parent<'_>,
        batch: Option<Arc<tokio::sync::Semaphore>>,
    ) -> Outcome {
        if matches!(route, Route::Tool { client: true, .. }) && self.client_passthrough {
            return self.run_one(call, route, parent).await;
        }
        let abort = parent.cancel.clone();
        let slots = async {
            let batch = match batch {
                Some(b) => Some(b.acquire_owned().await.ok()?),
                None => None,
            };
            let host = match &self.host_slots {
                Some(h) => Some(Arc::clone(h).acquire_owned().await.ok()?),
                None => None,
            };
            Some((batch, host))
        };
        let held = tokio::select! {
            biased;
            _ = abort.cancelled() => None,
            held = slots => held,
        };
        match held {
            Some(_held) if !abort.is_cancelled() => self.run_one(call, route, parent).await,
            _ => Outcome::error("the turn was aborted before this call ran".into()),
        }
    }

    fn route(&self, name: &str) -> Route {
        if let Some(i) = self
            .surface
            .tools
            .iter()
            .position(|t| t.name == name && surface::is_control(&t.name))
        {
            return Route::Control(i);
        }
        let catalog = self.routing_catalog();
        let (id, caller) = if let Some(id) = self.declared.get(name) {
            let caller = if self.surface.mode == Mode::Direct {
                "direct"
            } else {
                "tool_call"
            };
            (id.clone(), caller)
        } else if self.surface.mode == Mode::Directory {
            match surface::deferred(&catalog, name) {
                Ok(Some(e)) => (e.id.clone(), "directory"),
                Ok(None) => return Route::NotFound,
                Err(e) => return Route::Failed(e.to_string()),
            }
        } else {
            return Route::NotFound;
        };
        let entry = catalog.find(&id).ok();
        Route::Tool {
            client: entry.is_some_and(|e| {
                matches!(
                    e.descriptor.executor,
                    Some(crate::catalog::ExecutorSpec::Client)
                )
            }),
            execution_mode: entry
                .map(|e| e.descriptor.execution_mode)
                .unwrap_or_default(),
            id,
            caller,
        }
    }

    async fn run_one(
        &self,
        call: &ToolCall,
        route: Route,
        parent: crate::code::Parent<'_>,
    ) -> Outcome {
        let d = &self.dispatcher;
        let spec = match route {
            Route::Control(i) => &self.surface.tools[i],
            Route::Tool { client: true, .. } if self.client_passthrough => {
                return Outcome {
                    client: true,
                    ..Outcome::error(String::new())
                };
            }
            Route::Tool { id, caller, .. } => {
                return self
                    .dispatch(&id, call.arguments.clone(), caller, parent.cancel)
                    .await;
            }
            Route::Failed(e) => return Outcome::error(e),
            Route::NotFound => {
                return Outcome::error(format!(
                    "Tool not found: `{}`. {}.",
                    call.name,
                    // The hint names only what this surface declares: direct mode has no
                    // search tool (front round 15 F10: it pointed at `tool_search`).
                    crate::texts::recovery_hint(match self.surface.mode {
                        Mode::Code => "code",
                        Mode::Direct => "direct",
                        _ => "tool_call",
                    })
                ));
            }
        };
        // A control tool's arguments meet its own declared schema first, at every front
        // (gateway, `mcp serve`, tools mode): `{"code": 42}` is refused, not run as "".
        if let Err(e) =
            crate::dispatch::check_declared(&spec.name, &spec.parameters, &call.arguments)
        {
            let error = json!({"ok": false, "error": {"code": e.code(), "message": e.to_string()}});
            return Outcome::json(&error, true);
        }
        match spec.name.as_str() {
            surface::TOOL_SEARCH_CODE => {
                let code = str_arg(&call.arguments, "code");
                let Some(sandbox) = &self.sandbox else {
                    return Outcome::error(
                        "tool_search_code is unavailable: no sandbox in this host".into(),
                    );
                };
                let from = match &self.spares {
                    Some(pool) => crate::code::ChildFrom::Spares(pool),
                    None => crate::code::ChildFrom::Fresh,
                };
                let result = crate::code::run_with(
                    sandbox,
                    from,
                    Arc::clone(d),
                    code,
                    self.code_timeout,
                    parent,
                )
                .await;
                let ok = result.is_ok();
                // Whatever its outcome, the body may have called tools that acted.
                Outcome {
                    ran: true,
                    ..Outcome::json(&result, !ok)
                }
            }
            // Off the runtime's workers, as the code bridge's (round 34 F3: a search
            // waiting for a first index build held both workers, and `mcp serve` answered
            // nothing for 3.9 s).
            surface::TOOL_SEARCH => {
                let args = match search_args(&call.arguments) {
                    Ok(args) => args,
                    Err(e) => return Outcome::error(e),
                };
                let d = Arc::clone(d);
                offloaded(Lane::Search, move || match args {
                    SearchArgs::One(q, limit) => match d.search(&q, limit) {
                        Ok(hits) => Outcome::json(&hits, false),
                        Err(e) => Outcome::error(e.to_string()),
                    },
                    SearchArgs::Batch(qs) => match d.search_batch(&qs) {
                        Ok(r) => Outcome::json(&r, false),
                        Err(e) => Outcome::error(e.to_string()),
                    },
                })
                .await
            }
            surface::TOOL_DESCRIBE => {
                let id = str_arg(&call.arguments, "id").to_string();
                let d = Arc::clone(d);
                offloaded(Lane::Describe, move || match d.describe(&id, "tool_call") {
                    Ok(desc) => Outcome::json(&desc, false),
                    Err(e) => Outcome::error(e.to_string()),
                })
                .await
            }
            surface::TOOL_CALL => match d.tool_call_input(&call.arguments) {
                Ok((id, args)) => self.dispatch(&id, args, "tool_call", parent.cancel).await,
                Err(e) => Outcome::error(e.to_string()),
            },
            other => Outcome::error(format!(
                "`{other}` is a control tool this host does not run"
            )),
        }
    }

    async fn dispatch(
        &self,
        id: &str,
        args: Value,
        caller: &'static str,
        abort: CancellationToken,
    ) -> Outcome {
        let mut request = CallRequest::new(id, args, caller);
        request.cancel = abort;
        match self.dispatcher.call(request).await {
            Ok(envelope) => Outcome {
                terminate: envelope
                    .result
                    .details
                    .get("terminate")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                stop_after_batch: envelope.stop_after_batch,
                is_error: envelope.result.is_error,
                tool_id: Some(envelope.tool.id.clone()),
                client: false,
                ran: envelope.ran,
                text: serde_json::to_string(&envelope.for_model()).unwrap_or_default(),
            },
            Err(e) => Outcome::error(e.to_string()),
        }
    }
}

/// Each catalog tool the surface declares, by name: the entry of that name a surface
/// declares ([`Catalog::one_per_name`]). One pass over the catalog, one lookup per declared
/// tool.
fn declared(catalog: &Catalog, surface: &Surface) -> HashMap<String, String> {
    let first: HashMap<&str, &str> = catalog
        .one_per_name()
        .0
        .into_iter()
        .map(|e| (e.descriptor.name.as_str(), e.id.as_str()))
        .collect();
    surface
        .tools
        .iter()
        .filter(|t| !surface::is_control(&t.name))
        .filter_map(|t| {
            first
                .get(t.name.as_str())
                .map(|id| (t.name.clone(), id.to_string()))
        })
        .collect()
}

/// A control tool's string argument; its declared schema was checked already, so a missing
/// one is the empty string the schema allowed.
fn str_arg<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or_default()
}

enum SearchArgs {
    One(String, Option<usize>),
    Batch(Vec<BatchQuery>),
}

/// `tool_search`'s arguments: `{query, limit?}` or `{queries: [{query, limit?}]}`.
fn search_args(args: &Value) -> Result<SearchArgs, String> {
    let limit = |v: Option<&Value>| v.and_then(Value::as_u64).map(|n| n as usize);
    if let Some(qs) = args.get("queries") {
        let queries: Vec<BatchQuery> = serde_json::from_value(qs.clone())
            .map_err(|e| format!("tool_search: `queries` must be [{{query, limit?}}]: {e}"))?;
        return Ok(SearchArgs::Batch(queries));
    }
    match args.get("query").and_then(Value::as_str) {
        Some(q) => Ok(SearchArgs::One(q.to_string(), limit(args.get("limit")))),
        None => Err("tool_search needs `query` (a string) or `queries` (a list)".into()),
    }
}

#[cfg(test)]
mod tests;
