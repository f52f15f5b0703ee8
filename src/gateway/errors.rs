//! The gateway's answers when a turn cannot be given: OpenAI's error shape, `{"error":
//! {"message", "type", "param", "code"}}`, with a status an OpenAI SDK acts on.
//!
//! - the client's request is wrong: 400 `invalid_request_error` naming the field, 404 for
//!   an unknown or expired `previous_response_id`, 413 for a body over the bound;
//! - the provider refused or failed: its own 4xx status, error type and code (429 keeps
//!   its `Retry-After`, 401 stays 401), or 502 when it failed on its side or answered
//!   something that is not an answer;
//! - the gateway itself: 500 `server_error`, whose message names no path or secret (the
//!   detail goes to the gateway's log), 503 while it shuts down.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::agent::TurnError;

/// An error answer; boxed, so the `Result`s that carry one stay small.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(Box<Detail>);

/// What an error answer says.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail {
    pub status: StatusCode,
    pub kind: String,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Sent as `Retry-After` (whole seconds, rounded up) and `retry-after-ms`, the header
    /// the OpenAI SDKs read first.
    pub retry_after: Option<std::time::Duration>,
    /// Sent as `x-should-retry`, the header the OpenAI SDKs obey over their own rule (they
    /// retry 408, 409, 429 and every 5xx): `false` once the turn's tools have run.
    pub should_retry: Option<bool>,
}

impl std::ops::Deref for ApiError {
    type Target = Detail;

    fn deref(&self) -> &Detail {
        &self.0
    }
}

impl ApiError {
    fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError(Box::new(Detail {
            status,
            kind: kind.to_string(),
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
            should_retry: None,
        }))
    }

    /// 400: the request is malformed or asks what cannot be done.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 404: what the request names does not exist (any more).
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    /// 500: the gateway failed. `message` is for the client: no path, no secret.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 503: the gateway is stopping; the turn was abandoned.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
    }

    /// A request that axum refused before us (a body over the bound: 413).
    pub fn rejected(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::new(status, "invalid_request_error", message)
    }

    /// 429 `too_many_requests`: a bound of the gateway is full; the SDKs retry it.
    pub fn too_many(message: impl Into<String>) -> Self {
        ApiError::rejected(StatusCode::TOO_MANY_REQUESTS, message).code("too_many_requests")
    }

    pub fn param(mut self, param: &str) -> Self {
        self.0.param = Some(param.to_string());
        self
    }

    /// Not to be retried as it is: the turn's tools ran (`x-should-retry: false`, no
    /// `Retry-After`).
    pub fn no_retry(mut self) -> Self {
        self.0.retry_after = None;
        self.0.should_retry = Some(false);
        self
    }

    pub fn code(mut self, code: &str) -> Self {
        self.0.code = Some(code.to_string());
        self
    }

    /// A failed turn: the provider's status and type when it gave them (see the module
    /// documentation).
    pub fn of_turn(e: &TurnError) -> Self {
        match e {
            TurnError::AfterCalls { error, .. } => {
                let mut api = ApiError::of_turn(error).no_retry();
                api.0.message = e.to_string();
                api
            }
            TurnError::Provider(m) => {
                let status = m
                    .status
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    // A provider's 5xx is this gateway's 502 (its upstream failed); the
                    // gateway's own refusal keeps its 503.
                    .filter(|s| {
                        s.is_client_error()
                            || m.code.as_deref() == Some(super::client::ANSWERS_IN_FLIGHT_CODE)
                    })
                    .unwrap_or(StatusCode::BAD_GATEWAY);
                // A provider that gave a status and no type (a code alone, in a stream's
                // error event) gets the type OpenAI gives that status: a 429 typed
                // `invalid_request_error` contradicted itself (front round 28 F1).
                let fallback = match status.as_u16() {
                    401 => "authentication_error",
                    403 => "permission_error",
                    404 => "not_found_error",
                    413 => "request_too_large",
                    429 => "rate_limit_error",
                    s if (400..500).contains(&s) => "invalid_request_error",
                    _ => "server_error",
                };
                ApiError(Box::new(Detail {
                    status,
                    kind: m.kind.clone().unwrap_or_else(|| fallback.to_string()),
                    message: e.to_string(),
                    // The field the provider named (front round 18 F4: a 400 about
                    // `temperature` said `param: null`), under the provider's own name.
                    param: m
                        .param
                        .as_deref()
                        .filter(|_| status.is_client_error())
                        .map(str::to_string),
                    code: Some(m.code.clone().unwrap_or_else(|| e.code().to_string())),
                    retry_after: m.retry_after,
                    should_retry: None,
                }))
            }
            TurnError::RoundLimit(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "server_error", e.to_string()).code(e.code())
            }
        }
    }

    /// The `error` object.
    pub fn object(&self) -> Value {
        json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        })
    }

    pub fn body(&self) -> Value {
        json!({"error": self.object()})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(after) = self.retry_after {
            let ms = after.as_micros().div_ceil(1000);
            let headers = response.headers_mut();
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(ms.div_ceil(1000) as u64),
            );
            headers.insert("retry-after-ms", HeaderValue::from(ms as u64));
        }
        if let Some(retry) = self.should_retry {
            response.headers_mut().insert(
                "x-should-retry",
                HeaderValue::from_static(if retry { "true" } else { "false" }),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ModelError;

    #[test]
    fn provider_errors_keep_their_status_type_and_retry_after() {
        let limited = TurnError::Provider(ModelError {
            message: "slow down".into(),
            status: Some(429),
            kind: Some("rate_limit_error".into()),
            code: None,
            param: None,
            retry_after: Some(std::time::Duration::from_secs(7)),
        });
        let e = ApiError::of_turn(&limited);
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.kind, "rate_limit_error");
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");

        // A refused request names the field the provider named.
        let refused = TurnError::Provider(ModelError {
            status: Some(400),
            param: Some("temperature".into()),
            ..ModelError::from("temperature: out of range".to_string())
        });
        let e = ApiError::of_turn(&refused);
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.object()["param"], "temperature");

        let failed = TurnError::Provider(ModelError {
            status: Some(503),
            ..ModelError::from("overloaded".to_string())
        });
        let e = ApiError::of_turn(&failed);
        assert_eq!(e.status, StatusCode::BAD_GATEWAY);
        assert_eq!(e.kind, "server_error");
        assert_eq!(e.code.as_deref(), Some("provider-error"));

        // The gateway's own refusal (its answers pool full) keeps its 503 and Retry-After.
        let full = TurnError::Provider(ModelError {
            status: Some(503),
            code: Some(crate::gateway::client::ANSWERS_IN_FLIGHT_CODE.into()),
            retry_after: Some(std::time::Duration::from_secs(1)),
            ..ModelError::from("full".to_string())
        });
        let e = ApiError::of_turn(&full);
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.into_response().headers()[header::RETRY_AFTER], "1");

        let e = ApiError::of_turn(&TurnError::RoundLimit(4));
        assert_eq!(
            (e.status, e.kind.as_str()),
            (StatusCode::BAD_GATEWAY, "server_error")
        );
        assert!(e.into_response().headers().get("x-should-retry").is_none());

        // The same refusal after the turn's tools ran: the SDKs must not ask again on their
        // own, since that runs the tools again.
        let after = TurnError::AfterCalls {
            calls: 3,
            error: Box::new(full),
        };
        let e = ApiError::of_turn(&after);
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code.as_deref(), Some("answers_in_flight"));
        assert!(e.message.contains("after 3 tool calls"), "{}", e.message);
        let response = e.into_response();
        assert_eq!(response.headers()["x-should-retry"], "false");
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }
}
