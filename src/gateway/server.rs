//! `toolsearch gateway`: an OpenAI-compatible endpoint that runs one agent turn per
//! request against the configured provider, with the configured catalog, mode and policy.
//!
//! Routes: `POST /v1/responses` and `GET /v1/responses/{id}` ([`super::responses`]),
//! `POST /v1/chat/completions` ([`super::chat`]), `GET /v1/models`, `GET /healthz`. Each
//! `metadata.session_key` is a session: its own dispatcher (hooks one at a time, its
//! session log under the state directory) and conversation history, one turn at a time.
//! Responses are kept for `previous_response_id` ([`super::store`]).
//!
//! Client tools sent in a request are declared to the model as they are, in every mode,
//! and a call to one ends the turn with that call for the client to run. Requests are
//! bounded (4 MiB) and strict: malformed JSON, a wrong type or an unknown field is a 400
//! in OpenAI's error shape, never a panic. On SIGTERM or SIGINT the server stops
//! accepting, aborts turns in flight, and exits with no sandbox child left.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Mutex as AsyncMutex;
use tokio_util::sync::CancellationToken;

use super::errors::ApiError;
use super::store::{MemoryStore, ResponseStore};
use crate::agent::{Message, Model};
use crate::catalog::Catalog;
use crate::config::Mode;
use crate::dispatch::{Dispatcher, DispatcherBuilder};
use crate::error::{Error, Result};
use crate::host::Host;
use crate::provider::Provider;
use crate::sandbox::Sandbox;
use crate::sandbox::spares::SparePool;
use crate::telemetry::SessionLog;

/// The keys made for requests that name no session. A client may not use one: it would
/// name a request's log and, before this rule, could be made to collect requests that
/// were not its own.
pub const GENERATED_KEY_PREFIX: &str = "gw-";

pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The memory all stored responses may take together.
pub const STORE_MAX_BYTES: usize = 256 * 1024 * 1024;

/// What the gateway runs with.
pub struct Gateway {
    /// The config, the catalog as it follows the upstream servers, what catalogs are built
    /// from (client tools join them per request), the executors and the state directory.
    pub(super) host: Arc<Host>,
    pub mode: Mode,
    pub sandbox: Option<Arc<Sandbox>>,
    /// Spare children of `sandbox` (`[sandbox] spares`), started with the server.
    spares: std::sync::OnceLock<Option<Arc<SparePool>>>,
    pub code_unavailable: Option<String>,
    pub model: Arc<dyn Model>,
    pub provider: Provider,
    pub(super) store: Arc<dyn ResponseStore>,
    sessions: AsyncMutex<HashMap<String, Arc<Session>>>,
    shutdown: CancellationToken,
    counter: AtomicU64,
}

pub(super) struct Session {
    pub(super) dispatcher: Arc<Dispatcher>,
    pub(super) history: Arc<AsyncMutex<Vec<Message>>>,
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
        let kept = &host.config.gateway;
        let store = Arc::new(MemoryStore::new(
            kept.stored_responses,
            STORE_MAX_BYTES,
            Duration::from_secs(kept.stored_ttl_s),
        ));
        Arc::new(Gateway {
            host,
            mode,
            sandbox,
            spares: std::sync::OnceLock::new(),
            code_unavailable,
            model,
            provider,
            store,
            sessions: AsyncMutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            counter: AtomicU64::new(0),
        })
    }

    /// The gateway of `host` and its configured `[provider]`: a bad provider kind or an
    /// unset key variable is an error here, before anything listens.
    pub fn for_host(host: Arc<Host>) -> Result<Arc<Self>> {
        let config = &host.config;
        let bad = |message: String| Error::BadConfig {
            file: config.file.clone().unwrap_or_else(|| "(defaults)".into()),
            message,
        };
        let provider = Provider::parse(&config.provider.kind).map_err(|e| bad(e.to_string()))?;
        let model = super::client::HttpModel::new(&config.provider).map_err(bad)?;
        Ok(Gateway::new(Arc::clone(&host), Arc::new(model), provider))
    }

    /// Serves on `listener` until `stop` resolves; then the host's upstream servers are
    /// stopped too.
    pub async fn run(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        self.host.warm();
        self.stop_on(stop);
        let served = self
            .serve(listener)
            .await
            .map_err(|e| Error::Serve(format!("gateway: {e}")));
        self.host.stop().await;
        served
    }

    /// The configured catalog now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.host.catalog()
    }

    pub fn router(self: &Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
            .route("/v1/responses", post(super::responses::create))
            .route("/v1/responses/{id}", get(super::responses::retrieve))
            .route("/v1/chat/completions", post(super::chat::create))
            .route("/v1/models", get(models))
            .fallback(not_found)
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

    pub(super) fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub(super) fn spares(&self) -> Option<Arc<SparePool>> {
        self.spares.get().cloned().flatten()
    }

    /// A number no other request of this gateway gets (generated session keys).
    pub(super) fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// The model a request gets when it names none.
    pub(super) fn configured_model(&self) -> &str {
        &self.host.config.provider.model
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

    pub(super) async fn session(
        &self,
        key: &str,
        keep: bool,
    ) -> std::result::Result<Arc<Session>, String> {
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
            history: Arc::new(AsyncMutex::new(Vec::new())),
        });
        if keep {
            sessions.insert(key.to_string(), Arc::clone(&s));
        }
        Ok(s)
    }
}

/// `GET /v1/models`: the provider's list, or the configured model when it lists none (or
/// cannot be asked).
async fn models(State(gw): State<Arc<Gateway>>) -> Response {
    let listed = match gw.model.models().await {
        Ok(list) => list,
        Err(e) => {
            tracing::debug!("the provider lists no models: {}", e.message);
            Vec::new()
        }
    };
    let data = if listed.is_empty() {
        vec![json!({
            "id": gw.configured_model(),
            "object": "model",
            "created": 0,
            "owned_by": "toolsearch",
        })]
    } else {
        listed
    };
    Json(json!({"object": "list", "data": Value::Array(data)})).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::not_found(format!(
        "this gateway has no route {method} {}; it serves POST /v1/responses, GET /v1/responses/{{id}}, POST /v1/chat/completions, GET /v1/models and GET /healthz",
        uri.path()
    ))
    .into_response()
}
