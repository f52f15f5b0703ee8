//! The model client over HTTP: OpenAI Responses or Chat Completions against any compatible
//! base URL, streamed (SSE) or not, with a timeout and retries with backoff on 429 and 5xx.
//!
//! It builds no body of its own: what it sends is [`payload::request_body`]'s, the body
//! `toolsearch surface` reports and QA measures, with the whole conversation. The tool
//! calls of an answer are read with [`crate::provider::normalize`]; only its text (the two
//! OpenAI shapes) is picked out here.
//!
//! The API key is read from the variable `provider.api_key_env` names, sent as a bearer
//! token, and never written to logs, errors or session files. A streamed answer is read
//! whole and then assembled (tool calls need every fragment anyway); the turn's latency is
//! the provider's.

use std::time::Duration;

use serde_json::{Value, json};

use crate::agent::{Message, Model, ModelFuture, ModelReply, ModelRequest};
use crate::config::ProviderConfig;
use crate::provider::normalize::{StreamAssembler, parse_sse, tool_calls};
use crate::provider::{Item, Provider, Request, WireNames, payload};

/// An OpenAI-compatible provider.
pub struct HttpModel {
    provider: Provider,
    base_url: String,
    model: String,
    api_key: Option<String>,
    stream: bool,
    retries: u32,
    http: reqwest::Client,
}

impl HttpModel {
    pub fn new(config: &ProviderConfig) -> Result<Self, String> {
        let provider = Provider::parse(&config.kind).map_err(|e| e.to_string())?;
        if !matches!(
            provider,
            Provider::OpenaiResponses | Provider::OpenaiCompletions
        ) {
            return Err(format!(
                "provider.kind = {:?}: the gateway speaks openai-responses and openai-completions",
                config.kind
            ));
        }
        let api_key = match &config.api_key_env {
            Some(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => Some(v),
                _ => {
                    return Err(format!(
                        "provider.api_key_env names `{var}`, which is not set"
                    ));
                }
            },
            None => None,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(HttpModel {
            provider,
            base_url: config.base_url.trim_end_matches('/').to_string(),
            model: config.model.clone(),
            api_key,
            stream: config.stream,
            retries: config.max_retries,
            http,
        })
    }

    fn url(&self) -> String {
        match self.provider {
            Provider::OpenaiCompletions => format!("{}/chat/completions", self.base_url),
            _ => format!("{}/responses", self.base_url),
        }
    }

    /// The request body for this conversation: the provider's body for the surface, built
    /// by [`payload::request_body`] as `toolsearch surface` reports it, with the whole
    /// conversation and, when streaming, `"stream": true`.
    pub fn body(&self, request: &ModelRequest) -> Value {
        let conversation: Vec<Item> = request.messages.iter().map(item_of).collect();
        let mut body = payload::request_body(
            self.provider,
            &Request {
                system: &request.system,
                conversation: &conversation,
                tools: &request.tools,
                model: &self.model,
                strict: false,
                google_legacy: false,
            },
        );
        if self.stream {
            body["stream"] = json!(true);
        }
        body
    }

    async fn send(&self, body: &Value) -> Result<String, String> {
        let name = self.provider.as_str();
        let url = self.url();
        let mut attempt = 0;
        loop {
            let mut req = self.http.post(&url).json(body);
            if let Some(key) = &self.api_key {
                req = req.bearer_auth(key);
            }
            let response = match req.send().await {
                Ok(r) => r,
                Err(e) if attempt < self.retries && (e.is_connect() || e.is_timeout()) => {
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt, None)).await;
                    continue;
                }
                Err(e) => {
                    let what = if e.is_timeout() {
                        "timed out"
                    } else {
                        "failed"
                    };
                    return Err(format!(
                        "{name} at {url}: the request {what}: {}",
                        without_url(&e)
                    ));
                }
            };
            let status = response.status();
            if (status.as_u16() == 429 || status.is_server_error()) && attempt < self.retries {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                attempt += 1;
                tokio::time::sleep(backoff(attempt, retry_after)).await;
                continue;
            }
            let text = response.text().await.map_err(|e| {
                format!(
                    "{name} at {url}: reading the answer failed: {}",
                    without_url(&e)
                )
            })?;
            if !status.is_success() {
                let mut snippet: String = text.chars().take(300).collect();
                if text.chars().count() > 300 {
                    snippet.push('…');
                }
                return Err(format!("{name} at {url} answered {status}: {snippet}"));
            }
            return Ok(text);
        }
    }

    fn parse(&self, text: &str, request: &ModelRequest) -> Result<ModelReply, String> {
        let name = self.provider.as_str();
        let names = WireNames::new(self.provider, &request.tools);
        let garbage =
            |why: String| format!("{name} answered something that is not a response: {why}");
        let (calls, text_out) = if self.stream {
            let events = parse_sse(text);
            if events.is_empty() {
                return Err(garbage("no server-sent events".into()));
            }
            let mut assembler = StreamAssembler::new(self.provider);
            let mut out = String::new();
            for e in &events {
                assembler.push(e).map_err(|e| garbage(e.to_string()))?;
                out.push_str(&stream_text(self.provider, e));
            }
            (assembler.finish().map_err(|e| garbage(e.to_string()))?, out)
        } else {
            let v: Value = serde_json::from_str(text).map_err(|e| garbage(e.to_string()))?;
            let calls = tool_calls(self.provider, &v).map_err(|e| garbage(e.to_string()))?;
            (calls, reply_text(self.provider, &v))
        };
        Ok(ModelReply {
            text: text_out,
            tool_calls: calls
                .into_iter()
                .map(|c| c.with_original_names(&names))
                .collect(),
        })
    }
}

impl Model for HttpModel {
    fn respond<'a>(&'a self, request: &'a ModelRequest) -> ModelFuture<'a> {
        Box::pin(async move {
            let body = self.body(request);
            let text = self.send(&body).await?;
            self.parse(&text, request)
        })
    }
}

/// The agent's message as the provider layer encodes it.
fn item_of(message: &Message) -> Item<'_> {
    match message {
        Message::User { content } => Item::User(content),
        Message::Assistant {
            content,
            tool_calls,
        } => Item::Assistant {
            text: content,
            calls: tool_calls,
        },
        Message::Tool {
            call_id,
            name,
            content,
            is_error,
        } => Item::ToolResult {
            call_id,
            name,
            content,
            is_error: *is_error,
        },
    }
}

/// 100 ms, 200 ms, 400 ms... or the server's `Retry-After`, capped at 5 s.
fn backoff(attempt: u32, retry_after_s: Option<u64>) -> Duration {
    let ms = retry_after_s
        .map(|s| s * 1000)
        .unwrap_or(100 * (1u64 << attempt.saturating_sub(1).min(6)));
    Duration::from_millis(ms.min(5_000))
}

/// reqwest errors print the URL, which may carry a key in its query: leave it out.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(url.as_str(), "<url>");
    }
    s
}

fn reply_text(provider: Provider, v: &Value) -> String {
    match provider {
        Provider::OpenaiCompletions => v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => crate::provider::normalize::responses_output_text(v),
    }
}

fn stream_text(provider: Provider, e: &Value) -> String {
    match provider {
        Provider::OpenaiCompletions => e
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => {
            if e.get("type").and_then(Value::as_str) == Some("response.output_text.delta") {
                e.get("delta")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            } else {
                String::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1, None), Duration::from_millis(100));
        assert_eq!(backoff(3, None), Duration::from_millis(400));
        assert_eq!(backoff(1, Some(60)), Duration::from_millis(5_000));
    }
}
