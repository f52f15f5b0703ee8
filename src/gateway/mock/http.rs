//! The mock's HTTP side: its routes, the body limit, recording, and errors in OpenAI's
//! shape. Each request is read ([`super::conversation`]), played ([`super::play`]) and
//! answered ([`super::encode`]); nothing here decides or shapes an answer.
//!
//! Every body that parses as JSON is recorded before it is answered (and appended as one
//! line to [`MockOptions::record`](super::MockOptions::record) when set). A body that is
//! not JSON is `400` with an OpenAI-style `{"error": {"message", "type":
//! "invalid_request_error"}}`; a body larger than [`MAX_BODY_BYTES`] is `413`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::MockProvider;
use super::conversation::Conversation;
use super::encode::Plan;
use super::play;
use crate::gateway::json::{Budget, Unread};
use crate::provider::Provider;

/// The model `GET /v1/models` lists.
pub const MODEL: &str = "mock-model";

/// Largest request body accepted; a larger one is `413`.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

impl MockProvider {
    /// The routes of [the module documentation](super), with the body limit.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/responses", post(responses))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/messages", post(messages))
            .route("/v1/models", get(models))
            .route("/debug/requests", get(debug_requests))
            .route("/healthz", get(healthz))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(Arc::clone(self))
    }

    /// Records a body in memory and in the record file. The lock is held while writing so
    /// the file's lines come in the same order as the list.
    fn record(&self, body: &Value) -> Result<(), String> {
        let text: Arc<str> = Arc::from(body.to_string());
        let mut requests = self.requests.lock();
        if let Some(path) = &self.options.record {
            let line = format!("{text}\n");
            requests
                .append(path, &line, super::RECORD_FILE_MAX_BYTES)
                .map_err(|e| {
                    format!(
                        "mock provider: cannot append to the record file {}: {e}",
                        path.display()
                    )
                })?;
        }
        requests.push(text, super::RECORD_MAX_BYTES);
        Ok(())
    }

    fn handle(&self, format: Provider, body: Result<Bytes, BytesRejection>) -> Response {
        let bytes = match body {
            Ok(bytes) => bytes,
            Err(rejection) => return error_response(rejection.status(), rejection.body_text()),
        };
        // Bounded like the gateway's own requests: a body of many small values would
        // cost the mock hundreds of megabytes.
        let request: Value = match Budget::default().parse_at(&bytes) {
            Ok(value) => value,
            Err(Unread::Over(e) | Unread::Busy(e)) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    format!("the request body is too intricate: {e}"),
                );
            }
            Err(Unread::Bad(e)) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    format!("the request body is not valid JSON: {e}"),
                );
            }
            Err(Unread::Trailing(e)) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    format!("the request body is not valid JSON: {e}"),
                );
            }
        };
        if let Err(message) = self.record(&request) {
            tracing::error!("{message}");
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, message);
        }
        let Some(obj) = request.as_object() else {
            return error_response(
                StatusCode::BAD_REQUEST,
                "the request body must be a JSON object".into(),
            );
        };
        let conversation = match format {
            Provider::OpenaiCompletions => Conversation::of_chat(obj),
            Provider::Anthropic => Conversation::of_anthropic(obj),
            _ => Conversation::of_responses(obj),
        };
        let conversation = match conversation {
            Ok(c) => c,
            Err(message) => return error_response(StatusCode::BAD_REQUEST, message),
        };
        let reply = play::reply(self.options.scenario.as_ref(), &conversation, format);
        let k = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        let plan = Plan::new(&conversation, reply, obj, bytes.len(), k);
        let stream = obj.get("stream").and_then(Value::as_bool) == Some(true);
        tracing::debug!(
            format = %format,
            stream,
            calls = plan.call_count(),
            "mock provider answered"
        );
        plan.response(format, stream)
    }
}

async fn responses(
    State(provider): State<Arc<MockProvider>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    provider.handle(Provider::OpenaiResponses, body)
}

async fn chat_completions(
    State(provider): State<Arc<MockProvider>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    provider.handle(Provider::OpenaiCompletions, body)
}

async fn messages(
    State(provider): State<Arc<MockProvider>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    provider.handle(Provider::Anthropic, body)
}

/// The one model the mock plays, in OpenAI's list shape.
async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "toolsearch-mock"}
    ]}))
    .into_response()
}

async fn debug_requests(State(provider): State<Arc<MockProvider>>) -> Response {
    let Ok(reader) = Arc::clone(&provider.readers).try_acquire_owned() else {
        return error_response(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{} readers of /debug/requests are being answered, the most at once; retry when one is done",
                super::DEBUG_READERS
            ),
        );
    };
    let bodies = provider.requests.lock().snapshot();
    // The place is given back when the last chunk is sent, or the reader dropped.
    let chunks = crate::host::serve::holding(super::json_array(bodies), reader);
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(chunks),
    )
        .into_response()
}

async fn healthz() -> Response {
    axum::Json(json!({"ok": true})).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        format!(
            "the mock provider has no route {method} {}; it serves POST /v1/responses, POST /v1/chat/completions, POST /v1/messages, GET /v1/models, GET /debug/requests and GET /healthz",
            uri.path()
        ),
    )
}

/// A request the server's guard refused, in the mock's error shape.
pub(super) fn refused(refusal: crate::host::guard::Refusal) -> Response {
    error_response(refusal.status, refusal.message)
}

fn error_response(status: StatusCode, message: String) -> Response {
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": kind}})),
    )
        .into_response()
}
