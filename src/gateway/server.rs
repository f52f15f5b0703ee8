//! `toolsearch gateway`: an OpenAI-compatible endpoint that runs one agent turn per
//! request against the configured provider, with the configured catalog, mode and policy.
//!
//! Routes: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`
//! ([`super::responses`]), `POST /v1/chat/completions` ([`super::chat`]), `GET /v1/models`
//! and `GET /v1/models/{id}`, `GET /healthz`; any other method or path is a 404 in
//! OpenAI's shape. Each `metadata.session_key` is a session ([`super::sessions`]): its own
//! dispatcher (hooks one at a time, its session log under the state directory) and
//! conversation history, one turn at a time. Responses are kept for
//! `previous_response_id` ([`super::store`]). The turns of all clients together run at
//! most [`MAX_CALLS_AT_ONCE`] tool calls at once.
//!
//! Client tools sent in a request are declared to the model as they are, in every mode,
//! and a call to one ends the turn with that call for the client to run. Requests are
//! bounded (4 MiB) and strict: malformed JSON, a wrong type or an unknown field is a 400
//! in OpenAI's error shape, never a panic. On SIGTERM or SIGINT the server stops
//! accepting, aborts turns in flight, and exits with no sandbox child left.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::errors::ApiError;
use super::sessions::Sessions;
use super::store::{InFlight, MemoryStore, ResponseStore};
use crate::agent::Model;
use crate::catalog::Catalog;
use crate::config::Mode;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::host::guard::Guard;
use crate::provider::Provider;
use crate::sandbox::Sandbox;
use crate::sandbox::spares::SparePool;

/// The keys made for requests that name no session. A client may not use one: it would
/// name a request's log and, before this rule, could be made to collect requests that
/// were not its own.
pub const GENERATED_KEY_PREFIX: &str = "gw-";

pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The memory all stored responses may take together.
pub const STORE_MAX_BYTES: usize = 256 * 1024 * 1024;

/// Tool calls the gateway runs at once, all turns together: a model's batch waits for
/// slots instead of starting hundreds of processes.
pub const MAX_CALLS_AT_ONCE: usize = 64;

/// Requests the gateway works on at once, from parsing the body to the turn's end: each
/// may hold a parsed body and conversation of up to 200,000 JSON values (~20 MB), so
/// together they stay under a few gigabytes; one more is a 429 the SDKs retry.
pub const MAX_TURNS_AT_ONCE: usize = 128;

/// Stored responses being sent at once (`GET /v1/responses/{id}`, streamed or not), on
/// top of [`MAX_TURNS_AT_ONCE`]: each holds a response (up to the 4 MiB its request could
/// echo) for as long as its client reads, which the server bounds only from below
/// ([`crate::host::serve::MIN_READ_RATE`]).
pub const MAX_RETRIEVALS_AT_ONCE: usize = 16;

/// Bytes of stored conversation (a `previous_response_id`'s, a session's history) that the
/// requests in flight may be continuing at once. The JSON budget counts values, and a
/// conversation of 16 MiB is a few hundred: 120 requests of 96 bytes each continuing one
/// held 7 GB. Past this a continuation is a 429.
pub const MAX_CONTINUED_BYTES: usize = 256 * 1024 * 1024;

/// A request waiting for its session's turn while this many already wait is a 429: the
/// waiters hold places among the [`MAX_TURNS_AT_ONCE`], and one session key's queue held
/// them all.
pub const MAX_WAITING_PER_SESSION: usize = 4;

/// What a parsed JSON value costs besides its text, counted for what a response holds
/// parsed (a map entry, its key and a `Value`).
const PARSED_VALUE_BYTES: usize = 128;

/// The memory a request's body becomes per byte while its turn runs: parsed, its input
/// the conversation and its instructions the system prompt, its tools joined to the
/// request's catalog and search index, all of it written into each provider request as a
/// value and as text. Measured: 128 requests of 3.85 MB of tools held 33.7 MB each, 4.3 GB
/// in all (front round 10 F3), and 500 of 4 MB instructions 1.1 GB, outside every pool.
pub const REQUEST_COPIES: usize = 9;

/// What the requests in flight may hold of what is made from them ([`REQUEST_COPIES`] of
/// their bodies, the request a response echoes), together: past it, a 429 before the turn
/// runs. Sixteen bodies at the 4 MiB bound fill it; an agent's usual few kilobytes, never.
pub const REQUEST_BYTES_IN_FLIGHT: usize = 512 * 1024 * 1024;

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
    /// The responses whose turns run now (see [`InFlight`]).
    pub(super) in_flight: Arc<InFlight>,
    pub(super) sessions: Sessions,
    /// Catalogs with client tools joined, for the next request that sends the same tools.
    pub(super) joined: super::joined::Joined<Catalog, Catalog>,
    /// [`MAX_CALLS_AT_ONCE`] slots, taken by every tool call of every turn.
    pub(super) call_slots: Arc<tokio::sync::Semaphore>,
    /// The tool results of every turn past their own share ([`crate::agent::results`]).
    pub(super) results: Arc<tokio::sync::Semaphore>,
    /// [`REQUEST_BYTES_IN_FLIGHT`] in KiB, taken by [`Gateway::hold_request`].
    request_bytes: Arc<tokio::sync::Semaphore>,
    /// [`MAX_TURNS_AT_ONCE`] places, taken by [`Gateway::admit`].
    turns: Arc<tokio::sync::Semaphore>,
    /// [`MAX_RETRIEVALS_AT_ONCE`] places, taken by [`Gateway::admit_retrieval`].
    retrievals: Arc<tokio::sync::Semaphore>,
    /// [`MAX_CONTINUED_BYTES`] in KiB, taken by [`Gateway::hold_continued`].
    continued: Arc<tokio::sync::Semaphore>,
    /// [`super::json::VALUES_IN_FLIGHT`], in units, taken by every request's [`Gateway::budget`].
    values: Arc<tokio::sync::Semaphore>,
    shutdown: CancellationToken,
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
        let sessions = Sessions::new(kept.sessions, Duration::from_secs(kept.session_ttl_s));
        Arc::new(Gateway {
            host,
            mode,
            sandbox,
            spares: std::sync::OnceLock::new(),
            code_unavailable,
            model,
            provider,
            store,
            in_flight: Arc::default(),
            sessions,
            joined: Default::default(),
            call_slots: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS_AT_ONCE)),
            results: crate::agent::results::pool(),
            request_bytes: Arc::new(tokio::sync::Semaphore::new(REQUEST_BYTES_IN_FLIGHT / 1024)),
            turns: Arc::new(tokio::sync::Semaphore::new(MAX_TURNS_AT_ONCE)),
            retrievals: Arc::new(tokio::sync::Semaphore::new(MAX_RETRIEVALS_AT_ONCE)),
            continued: Arc::new(tokio::sync::Semaphore::new(MAX_CONTINUED_BYTES / 1024)),
            values: Arc::new(tokio::sync::Semaphore::new(
                super::json::VALUES_IN_FLIGHT / super::json::VALUES_PER_UNIT,
            )),
            shutdown: CancellationToken::new(),
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
        let model = super::client::HttpModel::new(&config.provider)
            .map_err(bad)?
            .waiting_under(Duration::from_millis(config.gateway.stream_keepalive_ms));
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
            .route(
                "/v1/responses/{id}",
                get(super::responses::retrieve).delete(super::responses::delete),
            )
            .route("/v1/chat/completions", post(super::chat::create))
            .route("/v1/models", get(models))
            .route("/v1/models/{id}", get(model))
            .fallback(not_found)
            .method_not_allowed_fallback(not_found)
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
        let guard = Guard::at(
            listener.local_addr()?,
            &self.host.config.server.allowed_origins,
            refused,
        );
        let served = crate::host::serve::serve(
            listener,
            self.router(),
            guard,
            crate::host::serve::Limits::of(&self.host.config.server),
            async move { stop.cancelled().await },
        )
        .await;
        // No spare child outlives the server.
        if let Some(Some(pool)) = self.spares.get() {
            pool.stop();
        }
        served
    }

    /// A place for one more request among the turns in flight, or a 429 when all
    /// [`MAX_TURNS_AT_ONCE`] are taken.
    pub(super) fn admit(&self) -> Result<Admitted, ApiError> {
        let request = take(&self.turns, 1, || {
            format!(
                "{MAX_TURNS_AT_ONCE} requests are in flight, the most this gateway runs at once; retry shortly"
            )
        })?;
        Ok(Admitted {
            _request: request,
            more: Vec::new(),
        })
    }

    /// A request's JSON budget, drawing on the gateway's pool of values parsed at once.
    pub(super) fn budget(&self) -> super::json::Budget {
        super::json::Budget::pooled(Arc::clone(&self.values))
    }

    /// Keeps what `budget` holds of the pool for as long as `admitted` (the request's
    /// turn, which holds what was parsed).
    pub(super) fn keep_parsed(admitted: &mut Admitted, budget: super::json::Budget) {
        admitted.more.extend(budget.into_held());
    }

    /// Holds `bytes` of stored conversation that `admitted` continues, until it ends, or a
    /// 429 when the requests in flight continue [`MAX_CONTINUED_BYTES`] already.
    pub(super) fn hold_continued(
        &self,
        admitted: &mut Admitted,
        bytes: usize,
    ) -> Result<(), ApiError> {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        admitted.more.push(take(&self.continued, kib, || {
            format!("the requests in flight continue {} MiB of stored conversation, the most this gateway holds at once; retry shortly", MAX_CONTINUED_BYTES >> 20)
        })?);
        Ok(())
    }

    /// Places among the [`REQUEST_BYTES_IN_FLIGHT`] for what a request becomes: its body of
    /// `body_bytes` [`REQUEST_COPIES`] times over while its turn runs (held by `admitted`),
    /// and what its response echoes of it (`echo`, held `echo_copies` times) until the
    /// response is sent (returned). A 429 when the requests in flight hold that much
    /// already; taken before the turn runs, so a refusal runs nothing.
    pub(super) fn hold_request(
        &self,
        admitted: &mut Admitted,
        body_bytes: usize,
        echo: Option<(&Value, usize)>,
    ) -> Result<crate::agent::Held, ApiError> {
        let echo_bytes = echo.map_or(0, |(echo, copies)| {
            let text = serde_json::to_vec(echo).unwrap_or_default();
            (text.len() + crate::provider::bounded::count_values(&text) * PARSED_VALUE_BYTES)
                .saturating_mul(copies)
        });
        let kib = |bytes: usize| u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        let (turn, response) = (
            kib(body_bytes.saturating_mul(REQUEST_COPIES)),
            kib(echo_bytes),
        );
        let mut permit = take(&self.request_bytes, turn.saturating_add(response), || {
            format!(
                "the requests in flight hold {} MiB of what is made of their bodies, the most this gateway holds at once; retry shortly",
                REQUEST_BYTES_IN_FLIGHT >> 20
            )
        })?;
        let held = match permit.split(response as usize) {
            Some(part) => crate::agent::Held::new(part),
            None => crate::agent::Held::default(),
        };
        admitted.more.push(permit);
        Ok(held)
    }

    /// A place to send a stored response: one among the requests in flight and one among
    /// the retrievals, or a 429.
    pub(super) fn admit_retrieval(&self) -> Result<Admitted, ApiError> {
        let mut admitted = self.admit()?;
        admitted.more.push(take(&self.retrievals, 1, || {
            format!("{MAX_RETRIEVALS_AT_ONCE} stored responses are being sent, the most this gateway sends at once; retry shortly")
        })?);
        Ok(admitted)
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

    /// The longest a streamed answer goes without an event (`[gateway] stream_keepalive_ms`).
    pub(super) fn stream_keepalive(&self) -> Duration {
        Duration::from_millis(self.host.config.gateway.stream_keepalive_ms)
    }

    /// The model a request gets when it names none.
    pub(super) fn configured_model(&self) -> &str {
        &self.host.config.provider.model
    }

    /// The model an answer names: the one asked for, else (none, or `""`, which is sent
    /// on as none: `options::apply`) the configured one (front round 23: `""` was echoed).
    pub(super) fn answering_model(&self, asked: Option<&str>) -> String {
        asked
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| self.configured_model())
            .to_string()
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
}

/// A request the [`Guard`] refused, in OpenAI's error shape.
fn refused(refusal: crate::host::guard::Refusal) -> Response {
    ApiError::rejected(refusal.status, refusal.message).into_response()
}

/// The provider's models, or the configured model when it lists none (an empty list, or
/// no models route: 404, 405). Any other failure is the provider's error, as a turn's is:
/// a refused key or a provider down answered the configured model with 200 (front round
/// 14 F7).
async fn listed(gw: &Gateway) -> Result<Vec<Value>, ApiError> {
    let listed = match gw.model.models().await {
        Ok(list) => list,
        Err(e) if matches!(e.status, Some(404 | 405)) => {
            tracing::debug!("the provider has no model list: {}", e.message);
            Vec::new()
        }
        Err(e) => {
            return Err(ApiError::of_turn(&crate::agent::TurnError::Provider(e)));
        }
    };
    if listed.is_empty() {
        Ok(vec![json!({
            "id": gw.configured_model(),
            "object": "model",
            "created": 0,
            "owned_by": "toolsearch",
        })])
    } else {
        Ok(listed)
    }
}

/// `n` places of `places` now, or a 429 saying which bound is full.
fn take(
    places: &Arc<tokio::sync::Semaphore>,
    n: u32,
    full: impl FnOnce() -> String,
) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    Arc::clone(places)
        .try_acquire_many_owned(n)
        .map_err(|_| ApiError::too_many(full()))
}

/// Places a request holds while it is answered ([`Gateway::admit_retrieval`]).
pub(super) struct Admitted {
    _request: tokio::sync::OwnedSemaphorePermit,
    /// Places besides: a retrieval's, the bytes a continuation holds.
    more: Vec<tokio::sync::OwnedSemaphorePermit>,
}

/// `GET /v1/models`: admitted like any request, since it may ask the provider.
async fn models(State(gw): State<Arc<Gateway>>) -> Response {
    let _admitted = match gw.admit() {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    match listed(&gw).await {
        Ok(list) => Json(json!({"object": "list", "data": Value::Array(list)})).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models/{id}`: one model of the list; one it does not hold is a 404.
async fn model(
    State(gw): State<Arc<Gateway>>,
    super::extract::Id(id): super::extract::Id,
) -> Response {
    let _admitted = match gw.admit() {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let list = match listed(&gw).await {
        Ok(list) => list,
        Err(e) => return e.into_response(),
    };
    match list.into_iter().find(|m| m["id"] == id.as_str()) {
        Some(m) => Json(m).into_response(),
        None => ApiError::not_found(format!("The model '{id}' does not exist"))
            .param("model")
            .code("model_not_found")
            .into_response(),
    }
}

/// Any other method or path: OpenAI's own answer to those, a 404 naming them.
async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::not_found(format!(
        "this gateway has no route {method} {}; it serves POST /v1/responses, GET and DELETE /v1/responses/{{id}}, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{{id}} and GET /healthz",
        uri.path()
    ))
    .into_response()
}
