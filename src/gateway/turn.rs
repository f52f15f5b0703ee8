//! One agent turn for either front: the conversation settled (prior messages and the new
//! input, every tool result matched to its call), the catalog of this request (the
//! configured one, plus the client's tools), the surface, and the turn itself, run in a
//! task of its own.
//!
//! The task is cancelled when the request is dropped — a client that goes away, a stream
//! nobody reads — through the [`DropGuard`] the front holds, and when the gateway stops;
//! either way the turn ends through its abort path, so a sandbox run in it is killed, not
//! leaked. A session's turns run one at a time: the session's history is locked from
//! before the turn to after it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::DropGuard;

use super::errors::ApiError;
use super::server::{GENERATED_KEY_PREFIX, Gateway};
use crate::agent::{Agent, Message, Stop, TextStream, TurnError, TurnOptions, TurnOutcome};
use crate::catalog::{CatalogMode, ExecutorSpec, Source, ToolDescriptor};
use crate::dispatch::DispatcherBuilder;
use crate::provider::{RequestOptions, ToolChoice};
use crate::surface::{self, Summary};
use crate::telemetry::SessionLog;

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
    /// The request's tools, as the client sent them (OpenAI shapes).
    pub client_tools: Vec<Value>,
    pub options: RequestOptions,
}

/// Where the conversation before the input comes from.
pub enum Prior {
    Nothing,
    /// The session's history (`metadata.session_key` without `previous_response_id`).
    Session,
    /// A stored response's conversation.
    Messages(Vec<Message>),
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
}

/// The turn's end as a front answers it: an aborted turn is a 503 (the gateway is
/// stopping, or no one was left to answer), a failed one the provider's error.
pub fn settled(
    joined: Result<Result<TurnOutcome, TurnError>, tokio::task::JoinError>,
) -> Result<TurnOutcome, ApiError> {
    match joined {
        Err(e) => {
            tracing::error!("a gateway turn failed: {e}");
            Err(ApiError::internal(
                "the turn failed inside the gateway; see its log",
            ))
        }
        Ok(Err(e)) => Err(ApiError::of_turn(&e)),
        Ok(Ok(o)) if o.stop == Stop::Aborted => Err(ApiError::unavailable(
            "the turn was aborted: the gateway is shutting down",
        )
        .code("aborted")),
        Ok(Ok(o)) => Ok(o),
    }
}

impl Gateway {
    /// Starts a turn; `text` gets the answer's text as it arrives, when the client
    /// streams. The errors are the client's (400, 404) or the gateway's (500), before
    /// anything ran.
    pub(super) async fn start(
        self: &Arc<Self>,
        request: TurnRequest,
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
            None => format!("{GENERATED_KEY_PREFIX}{}", self.next()),
        };
        let session = self.session(&key, keyed).await.map_err(|e| {
            tracing::error!("gateway session `{key}`: {e}");
            ApiError::internal("the gateway cannot open the session's log; see its log")
        })?;
        // One turn at a time per named session, from reading its history to writing it.
        let history = if keyed {
            Some(Arc::clone(&session.history).lock_owned().await)
        } else {
            None
        };
        let mut messages = match request.prior {
            Prior::Nothing => Vec::new(),
            Prior::Session => history.as_ref().map(|h| h.to_vec()).unwrap_or_default(),
            Prior::Messages(m) => m,
        };
        messages.extend(request.input);
        settle(&mut messages)?;
        let prompt = last_user(&messages);

        // Client tools join the catalog for this turn; without them the configured one.
        let (catalog, dispatcher) = if request.client_tools.is_empty() {
            (self.catalog(), Arc::clone(&session.dispatcher))
        } else {
            let extra = client_tools(&request.client_tools).map_err(ApiError::bad_request)?;
            let catalog = self
                .host
                .sources()
                .build_with(extra)
                .map_err(|e| ApiError::bad_request(format!("tools: {e}")).param("tools"))?;
            check_collisions(&catalog)?;
            let catalog = Arc::new(catalog);
            let builder = DispatcherBuilder::new(Arc::clone(&catalog))
                .config(&self.host.config)
                .map_err(|e| {
                    tracing::error!("gateway dispatcher: {e}");
                    ApiError::internal("the gateway cannot build this request's dispatcher")
                })?;
            let log = SessionLog::open(&self.host.state_dir(), &key)
                .unwrap_or_else(|_| SessionLog::disabled(&key));
            let dispatcher = builder
                .executors(self.host.executors())
                .session_log(Arc::new(log))
                .build();
            (catalog, Arc::new(dispatcher))
        };
        if let Some(ToolChoice::Tool(name)) = &request.options.tool_choice
            && catalog.resolve(name).is_err()
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
            .surface_options(&catalog, self.mode, code_available, &prompt);
        let planned =
            surface::plan_request(&catalog, &options, self.provider, &request.system, false)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
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
            .with_client_passthrough()
            .with_spares(self.spares()),
        );

        let abort = self.shutdown_token().child_token();
        let text = text.map(|tx| TextStream::new(tx, abort.clone(), CLIENT_STALL));
        let gw = Arc::clone(self);
        let system = planned.system.clone();
        let turn_options = TurnOptions {
            options: request.options,
            text,
        };
        let abort_turn = abort.clone();
        let turn = tokio::spawn(async move {
            let mut history = history;
            let result = agent
                .run_turn(
                    gw.model.as_ref(),
                    &system,
                    messages,
                    turn_options,
                    abort_turn,
                )
                .await;
            match &result {
                Ok(o) if o.stop != Stop::Aborted => {
                    if let Some(h) = history.as_mut() {
                        **h = o.messages.clone();
                    }
                }
                Ok(_) => {}
                Err(e) => dispatcher.log().event(
                    "turn_error",
                    json!({"code": e.code(), "message": e.to_string()}),
                ),
            }
            result
        });
        Ok(Running {
            turn,
            cancel: abort.drop_guard(),
            key,
            keyed,
            summary: planned.summary,
        })
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

/// Every tool result named after its call and every call answered, and something for the
/// model to answer at the end (a user message or tool results).
fn settle(messages: &mut [Message]) -> Result<(), ApiError> {
    let bad = |m: String| ApiError::bad_request(m).param("input");
    let mut open: Vec<(String, String)> = Vec::new();
    for message in messages.iter_mut() {
        match message {
            Message::Assistant { tool_calls, .. } => {
                if let Some((id, name)) = open.first() {
                    return Err(bad(format!(
                        "no tool result for the call `{id}` of `{name}`; send one for every call before the next message"
                    )));
                }
                open = tool_calls
                    .iter()
                    .map(|c| (c.id.clone(), c.name.clone()))
                    .collect();
            }
            Message::Tool { call_id, name, .. } => {
                let Some(at) = open.iter().position(|(id, _)| id == call_id) else {
                    return Err(bad(format!(
                        "a tool result names the call `{call_id}`, which the message before it did not make"
                    )));
                };
                let (_, called) = open.remove(at);
                if name.is_empty() {
                    *name = called;
                }
            }
            Message::User { .. } => {
                if let Some((id, name)) = open.first() {
                    return Err(bad(format!(
                        "no tool result for the call `{id}` of `{name}`; send one for every call before the next message"
                    )));
                }
            }
        }
    }
    if let Some((id, name)) = open.first() {
        return Err(bad(format!(
            "no tool result for the call `{id}` of `{name}`; send one for every call"
        )));
    }
    match messages.last() {
        Some(Message::User { .. } | Message::Tool { .. }) => Ok(()),
        Some(Message::Assistant { .. }) => Err(bad(
            "the conversation ends with the model's answer: there is nothing to answer".into(),
        )),
        None => Err(bad("the input is empty: there is nothing to answer".into())),
    }
}

/// The request's tools as catalog descriptors: source `client`, run by the client, and
/// direct-only, so every mode declares them to the model as the client wrote them.
fn client_tools(tools: &[Value]) -> Result<Vec<ToolDescriptor>, String> {
    let text = Value::Array(tools.to_vec()).to_string();
    crate::catalog::load::parse_catalog_text(std::path::Path::new("request.tools.json"), &text)
        .map_err(|e| format!("tools: {e}"))
        .map(|mut ds| {
            for d in &mut ds {
                d.executor = Some(ExecutorSpec::Client);
                d.catalog_mode = CatalogMode::DirectOnly;
            }
            ds
        })
}

/// A client tool that shares its name with a catalog tool would make a call by that name
/// ambiguous: refused, naming both.
fn check_collisions(catalog: &crate::catalog::Catalog) -> Result<(), ApiError> {
    let all = || catalog.cataloged().iter().chain(catalog.direct_only());
    for client in all().filter(|e| e.descriptor.source == Source::Client) {
        if let Some(other) = all().find(|e| {
            e.descriptor.source != Source::Client && e.descriptor.name == client.descriptor.name
        }) {
            let e = crate::error::Error::NameCollision {
                name: client.descriptor.name.clone(),
                first: client.id.clone(),
                second: other.id.clone(),
            };
            return Err(ApiError::bad_request(format!("tools: {e}")).param("tools"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
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
    fn tool_results_are_named_after_their_calls() {
        let mut m = vec![user("hi"), asked(vec![call("c1", "pick")]), result("c1")];
        settle(&mut m).unwrap();
        assert!(matches!(&m[2], Message::Tool { name, .. } if name == "pick"));
    }

    #[test]
    fn a_call_without_a_result_or_a_result_without_a_call_is_refused() {
        let mut unanswered = vec![user("hi"), asked(vec![call("c1", "pick")]), user("and?")];
        let e = settle(&mut unanswered).unwrap_err();
        assert!(e.message.contains("c1"), "{}", e.message);
        let mut stray = vec![user("hi"), result("c9")];
        assert!(settle(&mut stray).unwrap_err().message.contains("c9"));
        let mut ends_answered = vec![user("hi"), asked(vec![])];
        assert!(settle(&mut ends_answered).is_err());
        assert!(settle(&mut []).is_err());
    }
}
