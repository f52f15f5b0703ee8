//! `toolsearch gateway`: `POST /v1/responses` runs one agent turn (OpenAI Responses shapes
//! in and out) against the configured provider, with the configured catalog, mode and
//! policy; `GET /healthz`. Each `metadata.session_key` is a session: its own dispatcher
//! (hooks one at a time, its session log under the state directory) and conversation
//! history, one turn at a time.
//!
//! Client tools sent in the request are declared to the model as they are (they stay
//! directly visible in every mode) and a call to one ends the turn with a `function_call`
//! item for the client to run. Requests are bounded (4 MiB) and strict: malformed JSON or an
//! unknown field is a 400 with a JSON error, never a panic. On SIGTERM or SIGINT the server
//! stops accepting, aborts turns in flight, and exits with no sandbox child left.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex as AsyncMutex;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Message, Model};
use crate::catalog::{Catalog, ExecutorSpec, ToolDescriptor};
use crate::config::Mode;
use crate::dispatch::{Dispatcher, DispatcherBuilder};
use crate::host::Host;
use crate::provider::Provider;
use crate::sandbox::Sandbox;
use crate::sandbox::spares::SparePool;
use crate::surface;
use crate::telemetry::SessionLog;

/// The keys made for requests that name no session. A client may not use one: it would
/// name a request's log and, before this rule, could be made to collect requests that
/// were not its own.
pub const GENERATED_KEY_PREFIX: &str = "gw-";

pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// What the gateway runs with.
pub struct Gateway {
    /// The config, the catalog as it follows the upstream servers, what catalogs are built
    /// from (client tools join them per request), the executors and the state directory.
    host: Arc<Host>,
    pub mode: Mode,
    pub sandbox: Option<Arc<Sandbox>>,
    /// Spare children of `sandbox` (`[sandbox] spares`), started with the server.
    spares: std::sync::OnceLock<Option<Arc<SparePool>>>,
    pub code_unavailable: Option<String>,
    pub model: Arc<dyn Model>,
    pub provider: Provider,
    sessions: AsyncMutex<HashMap<String, Arc<Session>>>,
    shutdown: CancellationToken,
    counter: std::sync::atomic::AtomicU64,
}

struct Session {
    dispatcher: Arc<Dispatcher>,
    history: AsyncMutex<Vec<Message>>,
}

/// The accepted request fields. `model`, `max_output_tokens`, `temperature` and `stream:
/// false` are accepted (clients send them) but not forwarded: the configured provider and
/// model decide. Their fields are named `_...`: read by serde, by nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnRequest {
    #[serde(default, rename = "model")]
    _model: Option<String>,
    input: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default, rename = "max_output_tokens")]
    _max_output_tokens: Option<u64>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default, rename = "temperature")]
    _temperature: Option<f64>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize, Default)]
struct Metadata {
    #[serde(default)]
    session_key: Option<String>,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"message": message.into(), "type": "invalid_request_error"}})),
    )
        .into_response()
}

impl Gateway {
    /// A gateway on `host` answering with `model`, whose requests are shaped for `provider`.
    /// The mode is the host's for that provider; code mode runs only if the host can.
    pub fn new(host: Arc<Host>, model: Arc<dyn Model>, provider: Provider) -> Arc<Self> {
        let mode = host.mode(Some(provider.as_str()));
        let (sandbox, code_unavailable) = match host.sandbox(mode) {
            Ok(s) => (s, None),
            Err(e) => (None, Some(e)),
        };
        Arc::new(Gateway {
            host,
            mode,
            sandbox,
            spares: std::sync::OnceLock::new(),
            code_unavailable,
            model,
            provider,
            sessions: AsyncMutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            counter: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The gateway of `host` and its configured `[provider]`, served on `listener` until
    /// `stop` resolves; then the upstream servers are stopped too.
    pub async fn run(
        host: Arc<Host>,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> crate::error::Result<()> {
        let config = &host.config;
        let provider = Provider::parse(&config.provider.kind)?;
        let model = super::client::HttpModel::new(&config.provider).map_err(|message| {
            crate::error::Error::BadConfig {
                file: config.file.clone().unwrap_or_else(|| "(defaults)".into()),
                message,
            }
        })?;
        let gateway = Gateway::new(Arc::clone(&host), Arc::new(model), provider);
        host.warm();
        gateway.stop_on(stop);
        let served = gateway
            .serve(listener)
            .await
            .map_err(|e| crate::error::Error::Serve(format!("gateway: {e}")));
        host.stop().await;
        served
    }

    /// The configured catalog now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.host.catalog()
    }

    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
            .route("/v1/responses", post(turn))
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(Arc::clone(self))
    }

    /// Serves until `shutdown` is cancelled (see [`Gateway::stop_on`]).
    pub async fn serve(self: &Arc<Self>, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        // Spares need the runtime, so they start here; they die with the pool.
        let _ = self
            .spares
            .set(self.sandbox.as_ref().and_then(|s| self.host.spares(s)));
        let stop = self.shutdown.clone();
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        // No spare child outlives the server.
        if let Some(Some(pool)) = self.spares.get() {
            pool.stop();
        }
        served
    }

    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Stops the server when `signal` resolves (e.g. [`crate::signals::shutdown`], whose
    /// handlers are installed when it is called, so no signal meets the default action).
    pub fn stop_on(
        self: &Arc<Self>,
        signal: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let stop = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = signal => {}
                _ = stop.cancelled() => {}
            }
            stop.cancel();
        });
    }

    async fn session(&self, key: &str, keep: bool) -> Result<Arc<Session>, String> {
        let mut sessions = self.sessions.lock().await;
        // Only a named session is looked up: a request without a key never joins one,
        // whatever key the gateway made up for it.
        if keep && let Some(s) = sessions.get(key) {
            return Ok(Arc::clone(s));
        }
        let log =
            Arc::new(SessionLog::open(&self.host.state_dir(), key).map_err(|e| e.to_string())?);
        let dispatcher = DispatcherBuilder::live(self.host.live())
            .config(&self.host.config)
            .map_err(|e| e.to_string())?
            .executors(self.host.executors())
            .session_log(log)
            .build();
        let s = Arc::new(Session {
            dispatcher: Arc::new(dispatcher),
            history: AsyncMutex::new(Vec::new()),
        });
        if keep {
            sessions.insert(key.to_string(), Arc::clone(&s));
        }
        Ok(s)
    }
}

/// The user's text from a Responses `input`: a string, or the last user message of a list.
fn prompt_of(input: &Value) -> Option<String> {
    match input {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.iter().rev().find_map(|i| {
            if i.get("role").and_then(Value::as_str) != Some("user") {
                return None;
            }
            match i.get("content") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Array(parts)) => Some(
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                _ => None,
            }
        }),
        _ => None,
    }
}

/// Client tools of the request as catalog descriptors (source client, run by the client).
fn client_tools(tools: &[Value]) -> Result<Vec<ToolDescriptor>, String> {
    let text = Value::Array(tools.to_vec()).to_string();
    crate::catalog::load::parse_catalog_text(std::path::Path::new("request.tools.json"), &text)
        .map_err(|e| format!("tools: {e}"))
        .map(|mut ds| {
            for d in &mut ds {
                d.executor = Some(ExecutorSpec::Client);
            }
            ds
        })
}

async fn turn(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> Response {
    let request: TurnRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
    };
    if request.stream == Some(true) {
        return error(
            StatusCode::BAD_REQUEST,
            "stream: true is not supported by this gateway; send stream: false",
        );
    }
    let Some(prompt) = prompt_of(&request.input) else {
        return error(
            StatusCode::BAD_REQUEST,
            "input: expected a string or a list holding a user message",
        );
    };
    let given = request.metadata.and_then(|m| m.session_key);
    // Without a key the session is this request's alone: kept, it would only hold a log
    // file open until the gateway stops.
    let keep = given.is_some();
    let key = given.unwrap_or_else(|| {
        format!(
            "{GENERATED_KEY_PREFIX}{}",
            gw.counter
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    });
    if keep && key.starts_with(GENERATED_KEY_PREFIX) {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "metadata.session_key: `{GENERATED_KEY_PREFIX}` begins the keys this gateway makes for requests without one; choose another key"
            ),
        );
    }
    if key.len() > 200 {
        return error(
            StatusCode::BAD_REQUEST,
            "metadata.session_key: at most 200 bytes",
        );
    }
    let session = match gw.session(&key, keep).await {
        Ok(s) => s,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    // Client tools join the catalog for this turn; without them the configured one is used.
    let (catalog, dispatcher) = if request.tools.is_empty() {
        (gw.catalog(), Arc::clone(&session.dispatcher))
    } else {
        let extra = match client_tools(&request.tools) {
            Ok(t) => t,
            Err(e) => return error(StatusCode::BAD_REQUEST, e),
        };
        let catalog = match gw.host.sources().build_with(extra) {
            Ok(c) => Arc::new(c),
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let dispatcher = match DispatcherBuilder::new(Arc::clone(&catalog)).config(&gw.host.config)
        {
            Ok(b) => b.executors(gw.host.executors()).session_log(Arc::new(
                SessionLog::open(&gw.host.state_dir(), &key)
                    .unwrap_or_else(|_| SessionLog::disabled(&key)),
            )),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        (catalog, Arc::new(dispatcher.build()))
    };
    let code_available = match &gw.code_unavailable {
        Some(r) => Err(r.clone()),
        None => Ok(()),
    };
    let options = gw
        .host
        .surface_options(&catalog, gw.mode, code_available, &prompt);
    let planned = match surface::plan_request(
        &catalog,
        &options,
        gw.provider,
        request.instructions.as_deref().unwrap_or(""),
        false,
    ) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    dispatcher
        .log()
        .event("request", planned.log_event(&catalog));
    let agent = Arc::new(
        Agent::new(
            Arc::clone(&dispatcher),
            planned.surface.clone(),
            gw.sandbox.clone(),
            Duration::from_millis(catalog.settings().code_timeout_ms),
            gw.host.config.provider.max_rounds,
        )
        .with_client_passthrough()
        .with_spares(gw.spares.get().cloned().flatten()),
    );
    let mut history = session.history.lock().await;
    let outcome = agent
        .run_turn(
            gw.model.as_ref(),
            &planned.system,
            history.clone(),
            &prompt,
            gw.shutdown.child_token(),
        )
        .await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            dispatcher.log().event(
                "turn_error",
                json!({"code": e.code(), "message": e.to_string()}),
            );
            return error(StatusCode::BAD_GATEWAY, e.to_string());
        }
    };
    *history = outcome.messages.clone();
    let n = gw
        .counter
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut output: Vec<Value> = outcome
        .pending
        .iter()
        .map(|c| json!({"type": "function_call", "id": format!("fc_{}", c.id), "call_id": c.id, "name": c.name, "arguments": c.arguments.to_string(), "status": "completed"}))
        .collect();
    if !outcome.text.is_empty() || output.is_empty() {
        output.push(json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": outcome.text, "annotations": []}]}));
    }
    Json(json!({
        "id": format!("resp_gw_{n}"),
        "object": "response",
        "status": "completed",
        "output": output,
        "metadata": {"session_key": key},
        "toolsearch": {"mode": planned.summary.mode, "stop": outcome.stop, "rounds": outcome.rounds, "calls": outcome.calls, "summary": planned.summary},
    }))
    .into_response()
}
