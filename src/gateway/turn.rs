//! One agent turn for either front: the conversation settled (prior messages and the new
//! input, every tool result matched to its call), the catalog of this request (the
//! configured one, plus the client's tools), the surface, and the turn itself, run in a
//! task of its own.
//!
//! The task is cancelled when the request is dropped — a client that goes away, a stream
//! nobody reads — through the [`DropGuard`] the front holds, and when the gateway stops;
//! either way the turn ends through its abort path, so a sandbox run in it is killed, not
//! leaked. A session's turns run one at a time: its lock is held from before the turn
//! reads the history to after it writes it.
//!
//! What a request can make the gateway do is bounded before any of it runs: at most
//! [`MAX_CLIENT_TOOLS`] client tools, none named like a tool the gateway declares itself;
//! a conversation of at most [`MAX_CONVERSATION_BYTES`]; and the catalog and surface of a
//! request, which cost as much as the configured catalog is large, are built off the
//! runtime's workers.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use super::errors::ApiError;
use super::json::Budget;
use super::server::{GENERATED_KEY_PREFIX, Gateway, MAX_WAITING_PER_SESSION};
use super::sessions::Session;
use crate::agent::{
    Agent, Held, MAX_CONVERSATION_BYTES, Message, Stop, TextStream, TurnError, TurnOptions,
    TurnOutcome, conversation_bytes,
};
use crate::catalog::{Catalog, CatalogMode, ExecutorSpec, Source, ToolDescriptor};
use crate::dispatch::{Dispatcher, DispatcherBuilder};
use crate::provider::{RequestOptions, ToolChoice};
use crate::surface::{self, Planned, Summary};
use crate::telemetry::SessionLog;

/// The most tools one request may declare (OpenAI's own limit).
pub const MAX_CLIENT_TOOLS: usize = 128;

/// How long a streaming client may leave the answer unread before the turn is abandoned.
pub const CLIENT_STALL: Duration = Duration::from_secs(30);

/// Pieces of streamed text buffered for a client before the turn waits for it.
pub const TEXT_BUFFER: usize = 256;

/// Longest session key a client may name.
const MAX_SESSION_KEY: usize = 200;

/// A turn as a front asks for it.
pub struct TurnRequest {
    /// `metadata.session_key`: its session's dispatcher, log and (for [`Prior::Session`])
    /// history.
    pub session_key: Option<String>,
    pub system: String,
    pub prior: Prior,
    /// The new messages: user messages, or the results of the client's tools (their
    /// names may be empty: they are found from the calls).
    pub input: Vec<Message>,
    /// The request field that holds the conversation (`input`, `messages`): the `param`
    /// of an error in it.
    pub input_param: &'static str,
    /// The request's tools, as the client sent them (OpenAI shapes).
    pub client_tools: Vec<Value>,
    pub options: RequestOptions,
    /// Responses `max_tool_calls` ([`TurnOptions::max_tool_calls`]).
    pub max_tool_calls: Option<usize>,
    /// Whether the turn's conversation becomes the session's history (Responses); Chat
    /// is stateless and never writes it.
    pub remember: bool,
    /// What is left of the request's JSON budget, for the session history it continues.
    pub budget: Budget,
    /// The request's place among the turns in flight ([`Gateway::admit`]), held until
    /// its turn ends.
    pub admitted: super::server::Admitted,
    /// Places its response holds from the start (what it echoes of the request:
    /// [`Gateway::hold_request`]), joined to the turn's when it ends.
    pub held: Held,
}

/// Where the conversation before the input comes from.
pub enum Prior {
    Nothing,
    /// The session's history (`metadata.session_key` without `previous_response_id`).
    Session,
    /// A stored response's conversation (`previous_response_id`), read when the turn
    /// starts.
    Stored(Arc<super::store::StoredResponse>),
}

/// What a turn is run on: the request's catalog and its surface.
struct Prepared {
    catalog: Arc<Catalog>,
    planned: Planned,
}

/// A turn under way.
pub struct Running {
    pub turn: JoinHandle<Result<TurnOutcome, TurnError>>,
    /// Cancels the turn when dropped.
    pub cancel: DropGuard,
    /// The session key, given or made.
    pub key: String,
    /// Whether the client named the session.
    pub keyed: bool,
    pub summary: Summary,
    /// How many messages of the turn's conversation came before it ran.
    pub input_messages: usize,
}

/// The turn's end as a front answers it: an aborted turn is a 503 (the gateway is
/// stopping, or no one was left to answer), a failed one the provider's error.
pub fn settled(
    joined: Result<Result<TurnOutcome, TurnError>, tokio::task::JoinError>,
) -> Result<TurnOutcome, ApiError> {
    match joined {
        // Whether its tools ran is not known: asking again may run them twice.
        Err(e) => {
            tracing::error!("a gateway turn failed: {e}");
            Err(ApiError::internal("the turn failed inside the gateway; see its log").no_retry())
        }
        Ok(Err(e)) => Err(ApiError::of_turn(&e)),
        Ok(Ok(o)) if o.stop == Stop::Aborted => {
            let e = ApiError::unavailable("the turn was aborted: the gateway is shutting down")
                .code("aborted");
            // After its tools ran, an SDK's retry on a restarted gateway ran them again
            // (front round 11).
            // Only calls whose tool ran count (front round 22 F4: a call to no tool said so).
            Err(if o.calls.iter().any(|c| c.ran) {
                e.no_retry()
            } else {
                e
            })
        }
        Ok(Ok(o)) => Ok(o),
    }
}

impl Gateway {
    /// Starts a turn; `text` gets the answer's text as it arrives, when the client
    /// streams. The errors are the client's (400, 404) or the gateway's (500), before
    /// anything ran.
    pub(super) async fn start(
        self: &Arc<Self>,
        mut request: TurnRequest,
        text: Option<mpsc::Sender<String>>,
    ) -> Result<Running, ApiError> {
        let keyed = request.session_key.is_some();
        let key = match request.session_key {
            Some(key) if key.starts_with(GENERATED_KEY_PREFIX) => {
                return Err(ApiError::bad_request(format!(
                    "metadata.session_key: `{GENERATED_KEY_PREFIX}` begins the keys this gateway makes for requests without one; choose another key"
                ))
                .param("metadata.session_key"));
            }
            Some(key) if key.len() > MAX_SESSION_KEY => {
                return Err(ApiError::bad_request(format!(
                    "metadata.session_key: at most {MAX_SESSION_KEY} bytes"
                ))
                .param("metadata.session_key"));
            }
            Some(key) => key,
            None => self.sessions.generated_key(),
        };
        refuse_unforwardable(self.provider, &request.options)?;
        if request.client_tools.len() > MAX_CLIENT_TOOLS {
            return Err(ApiError::bad_request(format!(
                "tools: {} tools; at most {MAX_CLIENT_TOOLS} may be sent",
                request.client_tools.len()
            ))
            .param("tools"));
        }
        // Found, not kept: it is kept below, once the request is known valid.
        let session = if keyed {
            self.sessions.find(&key)
        } else {
            Arc::new(Session::new())
        };
        // One turn at a time per named session, from reading its history to writing it.
        let held = if keyed {
            let Some(queued) = session.queue(MAX_WAITING_PER_SESSION) else {
                return Err(ApiError::too_many(format!(
                    "{MAX_WAITING_PER_SESSION} requests of this session already wait for its turn; retry when one is answered"
                ))
                .param("metadata.session_key"));
            };
            let held = Arc::clone(&session.turn).lock_owned().await;
            drop(queued);
            Some(held)
        } else {
            None
        };
        let mut budget = std::mem::replace(&mut request.budget, Budget::new(0));
        let mut messages = match request.prior {
            Prior::Nothing => Vec::new(),
            Prior::Session => {
                let mut history = match self.sessions.history(&key) {
                    None => Vec::new(),
                    Some(text) => {
                        self.hold_continued(&mut request.admitted, text.len())?;
                        budget.parse(&text).map_err(|e| {
                            ApiError::bad_request(format!(
                                "the session's conversation is too intricate to continue: {e}"
                            ))
                            .param("metadata.session_key")
                        })?
                    }
                };
                drop_unanswered(&mut history, &request.input);
                history
            }
            Prior::Stored(stored) => {
                self.hold_continued(&mut request.admitted, stored.conversation_bytes())?;
                stored.messages(&mut budget).map_err(|e| {
                    ApiError::bad_request(format!(
                        "the stored conversation is too intricate to continue: {e}"
                    ))
                    .param("previous_response_id")
                })?
            }
        };
        // What was parsed for this request (its body, the conversation it continues) lives
        // as long as its turn: so does its share of the gateway's pool.
        Gateway::keep_parsed(&mut request.admitted, budget);
        messages.extend(request.input);
        settle(&mut messages).map_err(|e| e.param(request.input_param))?;
        let size = conversation_bytes(&messages);
        if size > MAX_CONVERSATION_BYTES {
            return Err(ApiError::bad_request(format!(
                "the conversation is {size} bytes, over the {MAX_CONVERSATION_BYTES} this gateway sends in one turn; start a new one"
            ))
            .param(request.input_param));
        }
        let input_messages = messages.len();
        let prompt = last_user(&messages);

        let gw = Arc::clone(self);
        let tools = request.client_tools;
        let choice = request.options.tool_choice.clone();
        let system = request.system;
        let Prepared { catalog, planned } = tokio::task::spawn_blocking(move || {
            gw.prepare(tools, choice.as_ref(), &system, &prompt)
        })
        .await
        .map_err(|e| {
            tracing::error!("preparing a gateway turn failed: {e}");
            ApiError::internal("the turn failed inside the gateway; see its log")
        })??;
        // Kept, and its dispatcher made, only now that the request is known valid: its
        // first event creates the session's log file.
        if keyed {
            self.sessions.keep(&key, &session);
        }
        self.prune_logs_now_and_then();
        let dispatcher = session.dispatcher(|| self.new_dispatcher(&key, keyed))?;
        // Whichever way this request ends, the session's file is closed again.
        let log_open = LogOpen(Arc::clone(&dispatcher));
        dispatcher
            .log()
            .event("request", planned.log_event(&catalog));
        let agent = Arc::new(
            Agent::new(
                Arc::clone(&dispatcher),
                planned.surface.clone(),
                self.sandbox.clone(),
                Duration::from_millis(catalog.settings().code_timeout_ms),
                self.host.config.provider.max_rounds,
            )
            .with_catalog(Arc::clone(&catalog))
            .with_client_passthrough()
            .with_spares(self.spares())
            .with_call_slots(Arc::clone(&self.call_slots))
            .with_results_pool(Arc::clone(&self.results))
            .with_turns_before(session.next_turn()),
        );

        let abort = self.shutdown_token().child_token();
        let text = text.map(|tx| TextStream::new(tx, abort.clone(), CLIENT_STALL));
        let gw = Arc::clone(self);
        let system = planned.system.clone();
        let turn_options = TurnOptions {
            options: request.options,
            text,
            max_tool_calls: request.max_tool_calls,
        };
        let abort_turn = abort.clone();
        let remember = keyed && request.remember;
        let admitted = request.admitted;
        let response_held = request.held;
        let turn_key = key.clone();
        let turn = tokio::spawn(async move {
            let result = agent
                .run_turn(
                    gw.model.as_ref(),
                    &system,
                    messages,
                    turn_options,
                    abort_turn,
                )
                .await
                .map(|mut o| {
                    o.held.add(response_held);
                    o
                });
            match &result {
                Ok(o) if o.stop != Stop::Aborted && remember => {
                    gw.sessions.remember(&turn_key, &session, &o.messages);
                }
                Ok(_) => {}
                Err(e) => dispatcher.log().event(
                    "turn_error",
                    json!({"code": e.code(), "message": e.to_string()}),
                ),
            }
            // The session's file stays closed until its next turn.
            drop(log_open);
            drop(held);
            // Unpinned: the session may be evicted again.
            drop(session);
            drop(admitted);
            result
        });
        Ok(Running {
            turn,
            cancel: abort.drop_guard(),
            key,
            keyed,
            summary: planned.summary,
            input_messages,
        })
    }

    /// A dispatcher for the session `key`, logging to its file (requests without a key:
    /// to this start's one file for them); now and then, the state directory's oldest
    /// logs are removed first.
    fn new_dispatcher(&self, key: &str, keyed: bool) -> Result<Dispatcher, ApiError> {
        let state_dir = self.host.state_dir();
        let file = if keyed {
            key.to_string()
        } else {
            self.sessions.keyless_file()
        };
        let made = SessionLog::lazy(&state_dir, &file, key)
            .map_err(|e| e.to_string())
            .and_then(|log| {
                Ok(DispatcherBuilder::live(self.host.live())
                    .config(&self.host.config)
                    .map_err(|e| e.to_string())?
                    .executors(self.host.executors())
                    .session_log(Arc::new(log))
                    .build())
            });
        made.map_err(|e| {
            tracing::error!("gateway session `{key}`: {e}");
            ApiError::internal("the gateway cannot open the session's log; see its log")
        })
    }

    /// The state directory's oldest session logs removed, on the first valid request and
    /// every so often after: counted per request, not per session opened, so a client
    /// writing to one session's log for ever is pruned too.
    fn prune_logs_now_and_then(&self) {
        if !self.sessions.time_to_prune() {
            return;
        }
        let gone = crate::telemetry::prune_sessions(
            &self.host.state_dir(),
            super::sessions::MAX_SESSION_FILES,
            super::sessions::MAX_SESSION_LOG_BYTES,
        );
        if gone > 0 {
            tracing::info!("removed the {gone} oldest session logs");
        }
    }

    /// The request's catalog (the configured one, or with the client's tools joined) and
    /// its surface. Synchronous: it runs on a blocking thread.
    fn prepare(
        &self,
        client_tools: Vec<Value>,
        choice: Option<&ToolChoice>,
        system: &str,
        prompt: &str,
    ) -> Result<Prepared, ApiError> {
        let client_count = client_tools.len();
        let catalog = if client_tools.is_empty() {
            self.catalog()
        } else {
            self.joined
                .get_or_build(&self.catalog(), &client_tools, || {
                    let extra = client_tools_of(&client_tools)
                        .map_err(|e| ApiError::bad_request(e).param("tools"))?;
                    let catalog =
                        self.host.sources().build_with(extra).map_err(|e| {
                            ApiError::bad_request(format!("tools: {e}")).param("tools")
                        })?;
                    check_collisions(&catalog)?;
                    Ok(catalog)
                })?
        };
        if let Some(ToolChoice::Tool(name)) = choice
            && catalog.find(name).is_err()
        {
            return Err(ApiError::bad_request(format!(
                "tool_choice names `{name}`, which is neither a tool of this request nor one of the catalog"
            ))
            .param("tool_choice"));
        }
        let code_available = match &self.code_unavailable {
            Some(r) => Err(r.clone()),
            None => Ok(()),
        };
        let options = self
            .host
            .surface_options(&catalog, self.mode, code_available, prompt);
        let planned = surface::plan_request(&catalog, &options, self.provider, system, false)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        check_declared_once(&planned)?;
        check_declared_count(&planned, client_count)?;
        Ok(Prepared { catalog, planned })
    }
}

/// Closes a session's log file when dropped: a host of many sessions holds open only
/// the files of the requests in flight.
struct LogOpen(Arc<Dispatcher>);

impl Drop for LogOpen {
    fn drop(&mut self) {
        self.0.log().release();
    }
}

/// The last user message's text: what directory mode scores its likely schemas against.
fn last_user(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// A session's history whose last assistant message has calls with no result yet (the
/// client's: the gateway's own ran in that round), followed by input that answers none of
/// them (a new question): those calls are dropped, as if the model had not made them,
/// instead of the session being stuck on "no tool result" until it expires; the calls
/// that ran, and their results, stay. Looked for from the last assistant message, not the
/// last message: after a round that called a catalog tool and a client tool, the history
/// ends with the catalog call's result, and the session jammed (front round 15 F3). Input
/// that answers some of them must answer all (see [`settle`]). A stored response named by
/// `previous_response_id` is continued as OpenAI does: every call must be answered.
fn drop_unanswered(history: &mut Vec<Message>, input: &[Message]) {
    let Some(at) = history
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return;
    };
    let answered_before: HashSet<&str> = history[at + 1..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    let Message::Assistant { tool_calls, .. } = &history[at] else {
        return;
    };
    let open: HashSet<String> = tool_calls
        .iter()
        .filter(|c| !answered_before.contains(c.id.as_str()))
        .map(|c| c.id.clone())
        .collect();
    if open.is_empty() {
        return;
    }
    let answered = input
        .iter()
        .any(|m| matches!(m, Message::Tool { call_id, .. } if open.contains(call_id)));
    if answered {
        return;
    }
    if let Message::Assistant {
        content,
        tool_calls,
    } = &mut history[at]
    {
        tool_calls.retain(|c| !open.contains(&c.id));
        if content.is_empty() && tool_calls.is_empty() {
            history.remove(at);
        }
    }
}

/// Every tool result named after its call and every call answered, and something for the
/// model to answer at the end (a user message or tool results). Linear in the messages.
fn settle(messages: &mut [Message]) -> Result<(), ApiError> {
    let bad = |m: String| ApiError::bad_request(m).param("input");
    // The calls of the last assistant message not answered yet, and their order.
    let mut open: HashMap<String, String> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let first_open = |open: &HashMap<String, String>, order: &[String]| {
        order
            .iter()
            .find_map(|id| open.get(id).map(|name| (id.clone(), name.clone())))
    };
    for message in messages.iter_mut() {
        match message {
            Message::Assistant { tool_calls, .. } => {
                if let Some((id, name)) = first_open(&open, &order) {
                    return Err(bad(format!(
                        "no tool result for the call `{id}` of `{name}`; send one for every call before the next message"
                    )));
                }
                open = HashMap::with_capacity(tool_calls.len());
                for c in tool_calls.iter() {
                    // One result answers one call: two calls of one id would both be
                    // "answered" by it, and the provider would get a call without its result.
                    if open.insert(c.id.clone(), c.name.clone()).is_some() {
                        return Err(bad(format!(
                            "two tool calls of one message have the id `{}`; each call needs an id of its own",
                            c.id
                        )));
                    }
                }
                order = tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            Message::Tool { call_id, name, .. } => {
                let Some(called) = open.remove(call_id.as_str()) else {
                    // A call the message made and already answered: say that, not that it
                    // was never made (front round 19 F3).
                    let why = if order.iter().any(|id| id == call_id) {
                        "which already has its result; send one result per call"
                    } else {
                        "which the message before it did not make"
                    };
                    return Err(bad(format!(
                        "a tool result names the call `{call_id}`, {why}"
                    )));
                };
                if name.is_empty() {
                    *name = called;
                }
            }
            // Instructions between a call and its result change nothing of either.
            Message::System { .. } => {}
            Message::User { .. } => {
                if let Some((id, name)) = first_open(&open, &order) {
                    return Err(bad(format!(
                        "no tool result for the call `{id}` of `{name}`; send one for every call before the next message"
                    )));
                }
            }
        }
    }
    if let Some((id, name)) = first_open(&open, &order) {
        return Err(bad(format!(
            "no tool result for the call `{id}` of `{name}`; send one for every call"
        )));
    }
    match messages
        .iter()
        .rev()
        .find(|m| !matches!(m, Message::System { .. }))
    {
        Some(Message::User { .. } | Message::Tool { .. }) => Ok(()),
        Some(Message::System { .. }) => unreachable!("system messages are skipped"),
        Some(Message::Assistant { .. }) => Err(bad(
            "the conversation ends with the model's answer: there is nothing to answer".into(),
        )),
        None => Err(bad("the input is empty: there is nothing to answer".into())),
    }
}

/// The request's tools as catalog descriptors: source `client`, run by the client, and
/// direct-only, so every mode declares them to the model as the client wrote them. A name
/// the gateway declares itself (a control tool's) is refused, naming it.
fn client_tools_of(tools: &[Value]) -> Result<Vec<ToolDescriptor>, String> {
    let text = Value::Array(tools.to_vec()).to_string();
    let descriptors =
        crate::catalog::load::parse_catalog_text(std::path::Path::new("request.tools.json"), &text)
            .map_err(|e| format!("tools: {e}"))?;
    if let Some(d) = descriptors.iter().find(|d| surface::is_control(&d.name)) {
        return Err(format!(
            "tools: `{}` is the name of a tool this gateway declares itself (tool_search_code, tool_search, tool_describe, tool_call); rename yours",
            d.name
        ));
    }
    Ok(descriptors
        .into_iter()
        .map(|mut d| {
            d.executor = Some(ExecutorSpec::Client);
            d.catalog_mode = CatalogMode::DirectOnly;
            d
        })
        .collect())
}

/// A client tool that shares its name with a catalog tool would make a call by that name
/// ambiguous: refused, naming both. One pass over the catalog.
fn check_collisions(catalog: &Catalog) -> Result<(), ApiError> {
    let all = || catalog.cataloged().iter().chain(catalog.direct_only());
    let mut others: HashMap<&str, &str> = HashMap::new();
    for e in all().filter(|e| e.descriptor.source != Source::Client) {
        others
            .entry(e.descriptor.name.as_str())
            .or_insert(e.id.as_str());
    }
    for client in all().filter(|e| e.descriptor.source == Source::Client) {
        if let Some(other) = others.get(client.descriptor.name.as_str()) {
            // Said for the client, in every mode (review 18: it said "directory mode"
            // whatever the mode was, and did not say whose the other tool is).
            return Err(ApiError::bad_request(format!(
                "tools: `{}` is also the name of `{other}`, a tool of this gateway's catalog; the model calls tools by name, so rename the request's tool",
                client.descriptor.name
            ))
            .param("tools")
            .code("name-collision"));
        }
    }
    Ok(())
}

/// The request's tools and the gateway's own, together, within what a provider takes
/// ([`MAX_CLIENT_TOOLS`], OpenAI's limit): 128 client tools became 131 in code mode, and
/// the provider's 400 named a list the client never sent (front round 15 F8). A surface
/// over the limit by itself (direct mode on a large catalog) is the configuration's, and
/// left to the provider.
fn check_declared_count(planned: &Planned, client_count: usize) -> Result<(), ApiError> {
    let declared = planned.surface.tools.len();
    let own = declared.saturating_sub(client_count);
    if client_count == 0 || declared <= MAX_CLIENT_TOOLS || own > MAX_CLIENT_TOOLS {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "tools: {client_count} tools and the {own} this gateway declares itself make {declared}, over the {MAX_CLIENT_TOOLS} a provider takes; send at most {}",
        MAX_CLIENT_TOOLS.saturating_sub(own)
    ))
    .param("tools"))
}

/// Options the configured upstream kind has no way to take and whose loss would answer
/// another question are refused, naming the option and the upstream (front round 17 F2:
/// they were dropped and answered 200): a JSON format for Anthropic (its answer was prose,
/// and the SDKs' `parse` failed on it), Chat's `stop` for a Responses upstream (the text
/// ran past the stop), a Responses `prompt` (a stored prompt: the instructions themselves)
/// for any other. Options whose loss changes only how an answer is made (sampling, effort,
/// verbosity, metadata) are dropped, as the README's table says.
fn refuse_unforwardable(
    provider: crate::provider::Provider,
    options: &RequestOptions,
) -> Result<(), ApiError> {
    use crate::provider::{OutputFormat, Provider};
    let refuse = |field: &str, param: &str| {
        Err(ApiError::bad_request(format!(
            "{field}: the configured upstream ({}) has no way to take it, and answering without it would answer another question",
            provider.as_str()
        ))
        .param(param)
        .code("unsupported_parameter"))
    };
    if provider == Provider::Anthropic
        && matches!(
            options.format,
            Some(OutputFormat::JsonObject | OutputFormat::JsonSchema { .. })
        )
    {
        return refuse("a JSON `text.format` / `response_format`", "text.format");
    }
    if provider == Provider::OpenaiResponses && !options.stop.is_empty() {
        return refuse("`stop`", "stop");
    }
    if let Some((kind, fields)) = &options.passthrough
        && *kind != provider
        && fields.contains_key("prompt")
    {
        return refuse("`prompt`", "prompt");
    }
    Ok(())
}

/// Every name the surface declares, declared once: a call by a name declared twice
/// would run whichever the gateway found first.
fn check_declared_once(planned: &Planned) -> Result<(), ApiError> {
    let mut seen = HashSet::new();
    for t in &planned.surface.tools {
        if !seen.insert(t.name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "tools: `{}` is declared twice in this request's surface; rename the request's tool",
                t.name
            ))
            .param("tools"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    /// A turn aborted (the gateway stopping) after its tools ran is not to be retried as
    /// it is: an SDK's retry on a restarted gateway ran them again (front round 11).
    #[test]
    fn an_aborted_turn_says_whether_it_may_be_retried() {
        let aborted = |calls: Vec<crate::agent::CallRecord>| TurnOutcome {
            text: String::new(),
            stop: Stop::Aborted,
            rounds: 1,
            calls,
            messages: Vec::new(),
            pending: Vec::new(),
            usage: None,
            ending: Default::default(),
            held: Default::default(),
        };
        let e = settled(Ok(Ok(aborted(Vec::new())))).unwrap_err();
        assert_eq!((e.status.as_u16(), e.should_retry), (503, None));
        let ran = crate::agent::CallRecord {
            round: 1,
            name: "tool_call".into(),
            tool_id: Some("openclaw:core:create_issue".into()),
            is_error: false,
            ran: true,
        };
        let not_run = crate::agent::CallRecord {
            name: "no_such_tool".into(),
            tool_id: None,
            is_error: true,
            ran: false,
            ..ran.clone()
        };
        let e = settled(Ok(Ok(aborted(vec![not_run])))).unwrap_err();
        assert_eq!((e.status.as_u16(), e.should_retry), (503, None));
        let e = settled(Ok(Ok(aborted(vec![ran])))).unwrap_err();
        assert_eq!((e.status.as_u16(), e.should_retry), (503, Some(false)));
        assert_eq!(e.code.as_deref(), Some("aborted"));
    }

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
            unreadable: None,
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: String::new(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn user(text: &str) -> Message {
        Message::User {
            content: text.into(),
        }
    }

    fn asked(calls: Vec<ToolCall>) -> Message {
        Message::Assistant {
            content: String::new(),
            tool_calls: calls,
        }
    }

    #[test]
    fn two_calls_of_one_id_are_refused_as_one_result_would_answer_both() {
        let mut m = vec![
            user("q"),
            asked(vec![call("c1", "f"), call("c1", "g")]),
            result("c1"),
        ];
        let e = settle(&mut m).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(e.message.contains("`c1`"), "{}", e.message);
    }

    #[test]
    fn tool_results_are_named_after_their_calls() {
        let mut m = vec![user("hi"), asked(vec![call("c1", "pick")]), result("c1")];
        settle(&mut m).unwrap();
        assert!(matches!(&m[2], Message::Tool { name, .. } if name == "pick"));
    }

    #[test]
    fn a_new_question_clears_the_calls_a_session_left_unanswered() {
        let mut history = vec![
            user("hi"),
            asked(vec![call("c1", "pick"), call("c2", "pick")]),
        ];
        drop_unanswered(&mut history, &[user("never mind")]);
        assert_eq!(history, vec![user("hi")]);
        // Answered ones stay, for settle to check that all are.
        let mut history = vec![
            user("hi"),
            asked(vec![call("c1", "pick"), call("c2", "pick")]),
        ];
        drop_unanswered(&mut history, &[result("c1")]);
        assert_eq!(history.len(), 2);
        let mut m = history;
        m.push(result("c1"));
        assert!(settle(&mut m).unwrap_err().message.contains("c2"));
        // Text the model said with its calls stays.
        let mut history = vec![
            user("hi"),
            Message::Assistant {
                content: "let me ask".into(),
                tool_calls: vec![call("c1", "pick")],
            },
        ];
        drop_unanswered(&mut history, &[user("again")]);
        assert!(
            matches!(&history[1], Message::Assistant { content, tool_calls } if content == "let me ask" && tool_calls.is_empty())
        );
        // A round that called a catalog tool (it ran: its result follows) and a client tool,
        // in either order: the client's call goes, the one that ran and its result stay.
        for calls in [
            vec![call("w1", "get_weather"), call("p1", "pick")],
            vec![call("p1", "pick"), call("w1", "get_weather")],
        ] {
            let mut history = vec![user("hi"), asked(calls), result("w1")];
            drop_unanswered(&mut history, &[user("new question")]);
            assert!(
                matches!(&history[1], Message::Assistant { tool_calls, .. } if tool_calls.len() == 1 && tool_calls[0].id == "w1"),
                "{history:?}"
            );
            let mut m = history;
            m.push(user("new question"));
            settle(&mut m).unwrap();
        }
    }

    #[test]
    fn settling_many_calls_answered_in_reverse_is_linear_and_right() {
        let n = 50_000;
        let mut m = vec![user("hi")];
        m.push(asked((0..n).map(|i| call(&format!("c{i}"), "f")).collect()));
        m.extend((0..n).rev().map(|i| result(&format!("c{i}"))));
        settle(&mut m).unwrap();
        assert!(matches!(&m[2], Message::Tool { name, .. } if name == "f"));
    }

    #[test]
    fn client_tools_may_not_take_a_control_tools_name() {
        let e = client_tools_of(&[json!({"type": "function", "name": "tool_call"})]).unwrap_err();
        assert!(e.contains("`tool_call`"), "{e}");
        assert!(client_tools_of(&[json!({"type": "function", "name": "pick"})]).is_ok());
    }

    #[test]
    fn a_call_without_a_result_or_a_result_without_a_call_is_refused() {
        let mut unanswered = vec![user("hi"), asked(vec![call("c1", "pick")]), user("and?")];
        let e = settle(&mut unanswered).unwrap_err();
        assert!(e.message.contains("c1"), "{}", e.message);
        let mut stray = vec![user("hi"), result("c9")];
        assert!(settle(&mut stray).unwrap_err().message.contains("c9"));
        // A second result for a call is said to be one, not a result for no call.
        let mut twice = vec![
            user("hi"),
            asked(vec![call("c1", "pick")]),
            result("c1"),
            result("c1"),
        ];
        let e = settle(&mut twice).unwrap_err();
        assert!(
            e.message.contains("already has its result"),
            "{}",
            e.message
        );
        let mut ends_answered = vec![user("hi"), asked(vec![])];
        assert!(settle(&mut ends_answered).is_err());
        assert!(settle(&mut []).is_err());
    }
}
