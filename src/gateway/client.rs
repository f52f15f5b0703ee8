//! The model client over HTTP: OpenAI Responses, OpenAI Chat Completions or Anthropic
//! Messages against any compatible base URL, streamed (SSE) or not, with a timeout and
//! retries with backoff on 429 and 5xx.
//!
//! It builds no body of its own: what it sends is [`payload::request_body`]'s, the body
//! `toolsearch surface` reports and QA measures, with the whole conversation, plus the
//! client's options as [`options::apply`] spells them for the provider. The tool calls and
//! the text of an answer are read with [`crate::provider::normalize`].
//!
//! A stream is read as it arrives: each event goes to the tool-call assembler, and each
//! piece of text to the client at once when it streams too ([`ModelRequest::text`]). The
//! provider is asked to stream when `[provider] stream` is set or the client streams.
//!
//! The API key is read from the variable `provider.api_key_env` names, sent as a bearer
//! token (`x-api-key` for Anthropic), and never written to logs, errors or session files:
//! every error leaves through [`Redactor::error`], which takes out the key and the base
//! URL's userinfo and query in every form it can find, and messages name the provider's
//! URL without them. Redirects are not followed: a provider that answers one would get
//! the key and the conversation sent to wherever it points. A failed answer keeps the
//! provider's status, error type and code and `Retry-After` ([`ModelError`]) so the gateway
//! can give its client the same.
//!
//! Everything read from the provider is bounded before it is kept: an answer, whole or
//! streamed, at [`MAX_ANSWER_BYTES`] counted as the bytes arrive (an endless line
//! included), and each JSON document in it at [`bounded::MAX_JSON_VALUES`] values.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use sse_stream::SseStream;

use super::answers::{ANSWER_BYTES_IN_FLIGHT, ANSWER_WAIT, AnswerBytes, AnswerPool, NoRoom};
use super::json::Budget;
use super::redact::{Redactor, shown_url};
use crate::agent::{
    Held, Message, Model, ModelError, ModelFuture, ModelReply, ModelRequest, ModelsFuture,
};
use crate::config::ProviderConfig;
use crate::provider::normalize::{
    Ending, StreamAssembler, StreamEnding, StreamText, StreamUsage, ending, ends_answer,
    event_values, last_event, reply_text, tool_calls, usage,
};
use crate::provider::{
    Item, Provider, Request, RequestOptions, WireNames, bounded, options, payload,
};

/// The largest answer read from a provider, whole or streamed.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// The longest one answer may take from the request sent to its last byte, however
/// steadily it arrives (the OpenAI SDKs' own default).
pub const ANSWER_TIME_LIMIT: Duration = Duration::from_secs(600);

/// The largest model list read: a real one is a few kilobytes to a megabyte.
pub const MAX_MODEL_LIST_BYTES: usize = 8 * 1024 * 1024;

/// The code of [`pool_full`]'s error: the gateway's own refusal, not the provider's, so
/// its 503 reaches the client as it is.
pub const ANSWERS_IN_FLIGHT_CODE: &str = "answers_in_flight";

/// A failure to take an answer's place: the gateway's own 503, with a retry soon.
fn pool_full(why: NoRoom) -> ModelError {
    ModelError {
        message: why.message(),
        status: Some(503),
        kind: Some("server_error".into()),
        code: Some(ANSWERS_IN_FLIGHT_CODE.into()),
        retry_after: Some(Duration::from_secs(1)),
        ..ModelError::default()
    }
}

/// The Messages API version sent to Anthropic.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Characters of a provider's error body quoted when it is not a JSON error.
const ERROR_SNIPPET_CHARS: usize = 300;

/// A provider over HTTP.
pub struct HttpModel {
    provider: Provider,
    base_url: String,
    model: String,
    api_key: Option<String>,
    stream: bool,
    retries: u32,
    /// How long after its first attempt a request's retries must have ended, its attempts
    /// and the waits between them together ([`HttpModel::waiting_under`]).
    retry_wait: Duration,
    /// `[provider] max_output_tokens`: the bound of a request that names none.
    max_output_tokens: Option<u64>,
    http: reqwest::Client,
    /// Takes the key and the URL's secrets out of every error.
    redactor: Redactor,
    /// Where its answers' bytes take their places ([`super::answers`]).
    answers: std::sync::Arc<AnswerPool>,
}

impl HttpModel {
    /// Retries that end within two thirds of `keepalive` of the first attempt (and never
    /// more than [`MAX_RETRY_WAIT`]): a streamed answer opens after `keepalive` without an
    /// event, and a provider's refusal that comes after it reached the client as a 200
    /// stream that failed, its status and `Retry-After` lost (front round 20 F2, with a
    /// 2 s keep-alive). The attempts count as well as the waits (front round 25 F1: a
    /// provider that took 4.5 s to refuse was asked four times, 21 s in all, against a
    /// 15 s keep-alive).
    pub fn waiting_under(mut self, keepalive: Duration) -> Self {
        self.retry_wait = MAX_RETRY_WAIT.min(keepalive * 2 / 3);
        self
    }

    /// The client of `[provider]`; an error names what is wrong in the config or the
    /// environment (an unset key variable).
    pub fn new(config: &ProviderConfig) -> Result<Self, String> {
        let provider = Provider::parse(&config.kind).map_err(|e| e.to_string())?;
        if provider == Provider::Google {
            return Err(format!(
                "provider.kind = {:?}: the gateway speaks openai-responses, openai-completions and anthropic",
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
        let quiet = Duration::from_millis(config.timeout_ms);
        let http = reqwest::Client::builder()
            // `timeout_ms` is how long the provider may say nothing: to connect, to begin
            // its answer, between two pieces of it. As reqwest's total timeout it cut
            // streams still arriving at 60 s (front round 10 F1); a whole answer may take
            // up to ANSWER_TIME_LIMIT.
            .connect_timeout(quiet)
            .read_timeout(quiet)
            .timeout(ANSWER_TIME_LIMIT.max(quiet))
            // A redirect would carry the key (Anthropic's header survives reqwest's
            // cross-origin rule) and the conversation wherever the provider points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let redactor = Redactor::new(api_key.as_deref(), &config.base_url);
        Ok(HttpModel {
            provider,
            base_url: config.base_url.trim_end_matches('/').to_string(),
            model: config.model.clone(),
            api_key,
            stream: config.stream,
            retries: config.max_retries,
            retry_wait: MAX_RETRY_WAIT,
            max_output_tokens: config.max_output_tokens,
            http,
            redactor,
            answers: AnswerPool::new(ANSWER_BYTES_IN_FLIGHT, ANSWER_WAIT),
        })
    }

    pub fn provider(&self) -> Provider {
        self.provider
    }

    fn url(&self) -> String {
        let path = match self.provider {
            Provider::OpenaiCompletions => "chat/completions",
            Provider::Anthropic => "messages",
            _ => "responses",
        };
        join(&self.base_url, path)
    }

    /// A request with the provider's authentication (and Anthropic's version header).
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, url);
        match (self.provider, &self.api_key) {
            (Provider::Anthropic, key) => {
                req = req.header("anthropic-version", ANTHROPIC_VERSION);
                if let Some(key) = key {
                    req = req.header("x-api-key", key);
                }
            }
            (_, Some(key)) => req = req.bearer_auth(key),
            (_, None) => {}
        }
        req
    }

    fn streams(&self, request: &ModelRequest) -> bool {
        self.stream || request.text.is_some()
    }

    /// The request body for this conversation: the provider's body for the surface, built
    /// by [`payload::request_body`] as `toolsearch surface` reports it, with the whole
    /// conversation, the client's options and, when streaming, `"stream": true`.
    pub fn body(&self, request: &ModelRequest) -> Value {
        let conversation: Vec<Item> = request.messages.iter().filter_map(item_of).collect();
        let system = system_of(&request.system, &request.messages);
        let mut body = payload::request_body(
            self.provider,
            &Request {
                system: &system,
                conversation: &conversation,
                tools: &request.tools,
                model: &self.model,
                strict: false,
                google_legacy: false,
            },
        );
        let names = WireNames::new(self.provider, &request.tools);
        let defaulted;
        let options = match self.max_output_tokens {
            Some(n) if request.options.max_output_tokens.is_none() => {
                defaulted = RequestOptions {
                    max_output_tokens: Some(n),
                    ..(*request.options).clone()
                };
                &defaulted
            }
            _ => &*request.options,
        };
        options::apply(self.provider, &mut body, options, &names);
        if self.streams(request) {
            body["stream"] = json!(true);
            // Chat streams count tokens only when asked to.
            if self.provider == Provider::OpenaiCompletions {
                body["stream_options"] = json!({"include_usage": true});
            }
        }
        body
    }

    /// Sends `body`, retrying on a failed connection, a timeout, 429 and 5xx; the answer
    /// when its status is a success, else the provider's error.
    async fn send(&self, body: bytes::Bytes) -> Result<reqwest::Response, ModelError> {
        let name = self.provider.as_str();
        let url = self.url();
        let shown = shown_url(&url);
        let mut attempt = 0;
        let first = tokio::time::Instant::now();
        // Whether a retry after `wait` still ends within the budget, if it takes as long as
        // the attempt before it (front round 26 F1: a retry that started within the budget
        // and took 8 s to be refused again ended after the keep-alive had opened the stream).
        let in_budget = |wait: Duration, tried: tokio::time::Instant| {
            first.elapsed() + wait + tried.elapsed() <= self.retry_wait
        };
        loop {
            let tried = tokio::time::Instant::now();
            let response = match self
                .request(reqwest::Method::POST, &url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send()
                .await
            {
                Ok(r) => r,
                // Retries after a failed connection or a timeout count against the same
                // budget as retries after a 429 (review 26 F6: they were not, and a
                // provider that refused connections held a streamed answer past its
                // keep-alive).
                Err(e)
                    if attempt < self.retries
                        && (e.is_connect() || e.is_timeout())
                        && in_budget(backoff(attempt + 1, None), tried) =>
                {
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
                    return Err(ModelError::from(format!(
                        "{name} at {shown}: the request {what}: {}",
                        without_url(&e)
                    )));
                }
            };
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            if (status.as_u16() == 429 || status.is_server_error()) && attempt < self.retries {
                let asked = asked_wait(&response);
                let wait = backoff(attempt + 1, asked);
                // A provider that asks for a longer wait than the gateway gives one, or
                // waits that would add up past what a streamed answer may hold back (its
                // client would get a 200 stream that fails, not the 429 and its
                // `Retry-After` its SDK obeys: front round 19 F1), end the retries: the
                // client hears the provider's answer and waits as it asked.
                let asked_longer = asked.is_some_and(|asked| asked > MAX_BACKOFF);
                if !asked_longer && in_budget(wait, tried) {
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            return Err(self.error_of(response, &shown).await);
        }
    }

    /// A provider's error answer: its status, `Retry-After`, and the type, code and
    /// message of OpenAI's `{"error": {...}}` or Anthropic's `{"type": "error", "error":
    /// {...}}` (else the start of the body).
    async fn error_of(&self, response: reqwest::Response, url: &str) -> ModelError {
        let status = response.status();
        let retry_after = asked_wait(&response);
        if status.is_redirection() {
            return ModelError {
                message: format!(
                    "{} at {url} answered {status}, a redirect; redirects are not followed (they would take the key and the conversation elsewhere): set [provider] base_url to the address that answers",
                    self.provider.as_str()
                ),
                status: Some(status.as_u16()),
                ..ModelError::default()
            };
        }
        // Parsed whole, then each field redacted before anything is cut from it, so no cut
        // leaves a piece of a secret that the whole-form search would miss (redacted first,
        // the body was cut to the redactor's 2,000 characters and a longer error lost its
        // type, code and `param`: front round 29 F1).
        let raw = match self.unasked_encoding(&response) {
            Some(refused) => serde_json::json!({"error": {"message": refused}}).to_string(),
            None => read_prefix(response, MAX_ERROR_BYTES).await,
        };
        let parsed = Budget::default().parse::<Value>(&raw).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error").cloned());
        let field = |key: &str| {
            error
                .as_ref()
                .and_then(|e| e.get(key))
                .and_then(Value::as_str)
                .map(|v| self.redactor.text(v))
        };
        let said = match (field("message"), &error) {
            (Some(message), _) => message,
            (None, Some(Value::String(s))) => self.redactor.text(s),
            // JSON of another shape is shown as written again, its strings unescaped, so
            // a key spelled in `\u` escapes is found (front round 30 F3).
            _ => {
                let text = self.redactor.text(
                    &parsed
                        .as_ref()
                        .map_or_else(|| raw.clone(), Value::to_string),
                );
                let mut snippet: String = text.chars().take(ERROR_SNIPPET_CHARS).collect();
                if text.chars().count() > ERROR_SNIPPET_CHARS {
                    snippet.push('…');
                }
                snippet
            }
        };
        ModelError {
            message: format!(
                "{} at {url} answered {status}: {said}",
                self.provider.as_str()
            ),
            status: Some(status.as_u16()),
            kind: field("type"),
            code: field("code"),
            param: field("param").map(String::into_boxed_str),
            retry_after,
        }
    }

    /// Why an answer compressed in a way the gateway never asked for is not read, on every
    /// read of a provider's answer (front rounds 28 F3, 29 F2: read as garbage, "expected
    /// value at line 1 column 1").
    /// Every `Content-Encoding` header counts (an `identity` first hid a `gzip` after it),
    /// one that is not text too, and a transfer coding other than `chunked` (front round 30
    /// F4); an empty one is none. The value is shown whole: the message is redacted before
    /// it is cut (cut first, a base64 key in the header kept 70% of itself: round 30 F2).
    fn unasked_encoding(&self, response: &reqwest::Response) -> Option<String> {
        let codings = |name: &str, shown: &str, allowed: &[&str]| {
            response
                .headers()
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .filter(|v| {
                    v.split(',').map(str::trim).any(|c| {
                        !c.is_empty() && !allowed.iter().any(|a| c.eq_ignore_ascii_case(a))
                    })
                })
                .map(|v| format!("{shown}: {v}"))
                .collect::<Vec<_>>()
        };
        let mut unasked = codings("content-encoding", "Content-Encoding", &["identity"]);
        unasked.extend(codings(
            "transfer-encoding",
            "Transfer-Encoding",
            &["chunked", "identity"],
        ));
        if unasked.is_empty() {
            return None;
        }
        Some(format!(
            "{} answered with `{}`, which the gateway did not ask for and does not read",
            self.provider.as_str(),
            unasked.join("`, `")
        ))
    }

    fn garbage(&self, why: impl std::fmt::Display) -> ModelError {
        ModelError::from(format!(
            "{} answered something that is not a response: {why}",
            self.provider.as_str()
        ))
    }

    /// A whole (non-streamed) answer: its tool calls, text and usage.
    fn parse_whole(&self, text: &str) -> Result<Answer, ModelError> {
        // A byte-order mark is not JSON, but says nothing either (front round 16 F9).
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let v: Value = Budget::default().parse(text).map_err(|e| self.garbage(e))?;
        let ending = ending(self.provider, &v);
        let calls = self.calls_of(tool_calls(self.provider, &v), &ending)?;
        Ok(Answer {
            calls,
            text: reply_text(self.provider, &v),
            usage: usage(self.provider, &v),
            ending,
        })
    }

    /// The answer's calls. An answer the provider cut short may end inside a call's
    /// arguments, which are then not JSON: that is the cut, not a broken provider (front
    /// round 15 F4: a 502 the SDKs sent again three times). The agent runs no call of a cut
    /// answer, so its calls are not needed whole.
    fn calls_of(
        &self,
        calls: Result<Vec<crate::provider::ToolCall>, crate::provider::ProviderError>,
        ending: &Ending,
    ) -> Result<Vec<crate::provider::ToolCall>, ModelError> {
        match calls {
            Ok(calls) => Ok(calls),
            Err(_) if ending.cut.is_some() => Ok(Vec::new()),
            Err(e) => Err(self.provider_error(e)),
        }
    }

    /// A streamed answer, read event by event: tool calls assembled, text sent on to the
    /// client as it comes when it streams.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        request: &ModelRequest,
        bytes: AnswerBytes,
    ) -> Result<(Answer, Held), ModelError> {
        let name = self.provider.as_str();
        // `chunk()` in a loop: reqwest's `bytes_stream` needs its `stream` feature. Bytes
        // are counted as they arrive, before the SSE parser buffers any: a line that
        // never ends is cut off at the bound like any other answer.
        // The places are the unfold's while the stream is read, and come back at its end.
        let full = std::sync::Arc::new(parking_lot::Mutex::new(None::<NoRoom>));
        let ended = bytes.ended();
        let taken = std::sync::Arc::new(tokio::sync::Mutex::new(Some(bytes)));
        let (full_in, taken_in) = (std::sync::Arc::clone(&full), std::sync::Arc::clone(&taken));
        let chunks = futures::stream::try_unfold((response, 0usize), move |(mut r, read)| {
            let (full, taken) = (
                std::sync::Arc::clone(&full_in),
                std::sync::Arc::clone(&taken_in),
            );
            async move {
                let mut taken = taken.lock().await;
                let Some(taken) = taken.as_mut() else {
                    return Ok(None);
                };
                let Some(chunk) = next_chunk(&mut r, taken).await.map_err(|e| match e {
                    ReadError::Io(e) => std::io::Error::other(e),
                    ReadError::Full(why) => {
                        *full.lock() = Some(why.clone());
                        std::io::Error::other(why.message())
                    }
                })?
                else {
                    return Ok(None);
                };
                let read = read + chunk.len();
                if read > MAX_ANSWER_BYTES {
                    return Err(std::io::Error::other(format!(
                        "the stream is larger than {MAX_ANSWER_BYTES} bytes"
                    )));
                }
                if let Err(why) = taken.take(chunk.len()).await {
                    *full.lock() = Some(why.clone());
                    return Err(std::io::Error::other(why.message()));
                }
                Ok(Some((chunk, (r, read))))
            }
        });
        // One chunk per line: sse-stream answers a line that is not SSE with an error and
        // drops the rest of its chunk, so a stray line costs only itself.
        let lines = chunks.flat_map(|chunk| {
            let pieces: Vec<Result<bytes::Bytes, std::io::Error>> = match chunk {
                Ok(bytes) => split_lines(bytes).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(pieces)
        });
        // Boxed, so it can be dropped before the answer's places are taken back: a read cut
        // short after the last event may leave the unfold holding their lock.
        let mut events = Box::pin(SseStream::from_bytes_stream(lines));
        let mut assembler = StreamAssembler::new(self.provider);
        let mut text = StreamText::default();
        let mut counted = StreamUsage::default();
        let mut how = StreamEnding::default();
        let mut any = false;
        let mut whole = false;
        let mut last = false;
        // Read to the provider's last event, not to the connection's end: one that holds its
        // connection open after a whole answer had it failed at `timeout_ms` (front round 20
        // F1). Nothing short of the last event ends the read: what follows the end of the
        // answer (Chat's usage chunk, a call's last pieces) came seconds later from some
        // servers, and a read cut there lost it (round 26 F1, F2).
        while !last {
            let Some(event) = events.next().await else {
                break;
            };
            let event = match event {
                Ok(e) => e,
                Err(sse_stream::Error::Body(e)) => {
                    if let Some(why) = full.lock().take() {
                        return Err(pool_full(why));
                    }
                    return Err(ModelError::from(format!(
                        "{name}: reading the stream failed: {e}"
                    )));
                }
                // Text that is not UTF-8 cannot be read as anything: its piece of the
                // answer would be lost and the rest said whole (front round 16 F3).
                Err(sse_stream::Error::Utf8Parse(e)) => {
                    return Err(self.garbage(format!("a stream line that is not UTF-8: {e}")));
                }
                // A line that is not SSE (a stray line, a repeated field) costs only itself.
                Err(_) => continue,
            };
            let Some(data) = event.data else { continue };
            bounded::check(data.as_bytes(), bounded::MAX_JSON_VALUES)
                .map_err(|e| self.garbage(format!("a stream event: {e}")))?;
            whole |= ends_answer(self.provider, &data, None);
            last |= last_event(self.provider, &data, None);
            for value in event_values(&data).map_err(|e| self.garbage(e))? {
                any = true;
                whole |= ends_answer(self.provider, &data, Some(&value));
                last |= last_event(self.provider, &data, Some(&value));
                assembler.push(&value).map_err(|e| self.provider_error(e))?;
                counted.observe(self.provider, &value);
                how.push(self.provider, &value);
                if let Some(piece) = text.push(self.provider, &value)
                    && let Some(out) = &request.text
                {
                    // A client slow to take the text holds the answer here, not in a
                    // read: ended to make room, it lets its places go now, not when its
                    // client next reads (front round 9 F3).
                    tokio::select! {
                        () = out.send(&piece) => {}
                        () = ended.cancelled() => return Err(pool_full(NoRoom::Ended)),
                    }
                }
            }
        }
        if !any {
            return Err(self.garbage("no server-sent events"));
        }
        if !whole {
            return Err(ModelError::from(format!(
                "{}: the stream ended before the event that ends an answer: the answer was cut short",
                self.provider.as_str()
            )));
        }
        drop(events);
        let held = taken
            .lock()
            .await
            .take()
            .map(AnswerBytes::into_held)
            .unwrap_or_default();
        let ending = how.finish();
        let calls = self.calls_of(assembler.finish(), &ending)?;
        let (text, late) = text.finish();
        if let (Some(late), Some(out)) = (late, &request.text) {
            out.send(&late).await;
        }
        let answer = Answer {
            calls,
            text,
            usage: counted.finish(),
            ending,
        };
        Ok((answer, held))
    }

    /// An error object the provider sent in place of an answer, in a whole answer or in its
    /// stream, stays the provider's error (not "garbage"), with its type and code, and the
    /// status its type names: a rate limit reported inside a 200 stream was a 502 its
    /// client's SDK could not tell from a broken gateway.
    fn provider_error(&self, e: crate::provider::ProviderError) -> ModelError {
        match e {
            crate::provider::ProviderError::Upstream {
                message,
                kind,
                code,
            } => ModelError {
                message: format!("{} reported an error: {message}", self.provider.as_str()),
                status: status_of_reported(kind.as_deref(), code.as_deref()),
                kind,
                code,
                ..ModelError::default()
            },
            other => self.garbage(other),
        }
    }

    /// `GET {base_url}/models`, as OpenAI's list entries. Anthropic's list comes in pages
    /// (20 models by default): asked for 1,000 a page and followed by `after_id` while it
    /// says `has_more`, at most [`MAX_MODEL_PAGES`] pages (the first page alone was
    /// answered, front round 17).
    async fn list_models(&self) -> Result<Vec<Value>, ModelError> {
        let owner = match self.provider {
            Provider::Anthropic => "anthropic",
            _ => "upstream",
        };
        let mut models = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_MODEL_PAGES {
            let mut url = join(&self.base_url, "models");
            if self.provider == Provider::Anthropic
                && let Ok(mut u) = reqwest::Url::parse(&url)
            {
                u.query_pairs_mut().append_pair("limit", "1000");
                if let Some(id) = &after {
                    u.query_pairs_mut().append_pair("after_id", id);
                }
                url = u.to_string();
            }
            let page = self.models_page(&url).await?;
            models.extend(
                page.get("data")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|m| {
                        // The list's texts go through the redactor like an error's: an
                        // upstream that lists the key as a model id (front round 31).
                        let id = m.get("id").and_then(Value::as_str)?;
                        let owned_by = m.get("owned_by").and_then(Value::as_str).unwrap_or(owner);
                        Some(json!({
                            "id": self.redactor.text(id),
                            "object": "model",
                            "created": m.get("created").and_then(Value::as_u64).unwrap_or(0),
                            "owned_by": self.redactor.text(owned_by),
                        }))
                    }),
            );
            let more = self.provider == Provider::Anthropic
                && page.get("has_more").and_then(Value::as_bool) == Some(true);
            after = page
                .get("last_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            if !more || after.is_none() {
                break;
            }
        }
        Ok(models)
    }

    /// One page of `GET models`, parsed.
    async fn models_page(&self, url: &str) -> Result<Value, ModelError> {
        let shown = shown_url(url);
        let response = self
            .request(reqwest::Method::GET, url)
            .send()
            .await
            .map_err(|e| ModelError::from(format!("{shown}: {}", without_url(&e))))?;
        if !response.status().is_success() {
            return Err(self.error_of(response, &shown).await);
        }
        if let Some(refused) = self.unasked_encoding(&response) {
            return Err(ModelError::from(refused));
        }
        // Held while it is read and parsed; the list answered is a small copy.
        let mut bytes = self.answers.answer();
        let text = match read_bounded(response, MAX_MODEL_LIST_BYTES, Some(&mut bytes)).await {
            Ok(text) => text,
            Err(ReadError::Full(e)) => return Err(pool_full(e)),
            Err(ReadError::Io(e)) => return Err(ModelError::from(format!("{shown}: {e}"))),
        };
        Budget::default().parse(&text).map_err(|e| self.garbage(e))
    }
}

/// Pages of Anthropic's model list followed at most.
const MAX_MODEL_PAGES: usize = 10;

impl HttpModel {
    async fn answer(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        {
            // Written once and sent from the same bytes on each try; neither the document
            // nor its text outlives the sending, so the next answer is read with one copy
            // of the conversation in memory, the turn's (front round 9 F2).
            let body =
                bytes::Bytes::from(serde_json::to_vec(&self.body(request)).map_err(|e| {
                    ModelError::from(format!("cannot write the request body: {e}"))
                })?);
            let response = self.send(body).await?;
            if let Some(refused) = self.unasked_encoding(&response) {
                return Err(ModelError::from(refused));
            }
            // Read as it is sent, whatever was asked: a server that ignores `stream: true`
            // answers one JSON document, every streaming client's turn failed on it as
            // "no server-sent events" (front round 16 F9).
            let streamed = self.streams(request) && !is_json(&response);
            let seed = std::mem::take(&mut *request.held.lock());
            let mut bytes = self.answers.answer_from(seed);
            let (answer, held) = if streamed {
                self.read_stream(response, request, bytes).await?
            } else {
                let text = match read_bounded(response, MAX_ANSWER_BYTES, Some(&mut bytes)).await {
                    Ok(text) => text,
                    Err(ReadError::Full(e)) => return Err(pool_full(e)),
                    Err(ReadError::Io(e)) => {
                        return Err(ModelError::from(format!(
                            "{} at {}: reading the answer failed: {e}",
                            self.provider.as_str(),
                            shown_url(&self.url())
                        )));
                    }
                };
                (self.parse_whole(&text)?, bytes.into_held())
            };
            let names = WireNames::new(self.provider, &request.tools);
            Ok(ModelReply {
                text: answer.text,
                tool_calls: answer
                    .calls
                    .into_iter()
                    .map(|c| c.with_original_names(&names))
                    .collect(),
                streamed: streamed && request.text.is_some(),
                usage: answer.usage,
                ending: answer.ending,
                held,
            })
        }
    }
}

/// Every error leaves through the redactor: the one place a secret is taken out, so no
/// path can forget it.
impl Model for HttpModel {
    fn respond<'a>(&'a self, request: &'a ModelRequest) -> ModelFuture<'a> {
        Box::pin(async move {
            self.answer(request)
                .await
                .map_err(|e| self.redactor.error(e))
        })
    }

    fn models(&self) -> ModelsFuture<'_> {
        Box::pin(async move { self.list_models().await.map_err(|e| self.redactor.error(e)) })
    }
}

/// One answer as read: its calls (wire names), text and usage.
struct Answer {
    calls: Vec<crate::provider::ToolCall>,
    text: String,
    usage: Option<crate::provider::Usage>,
    ending: Ending,
}

/// The agent's message as the provider layer encodes it.
fn item_of(message: &Message) -> Option<Item<'_>> {
    Some(match message {
        Message::System { .. } => return None,
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
    })
}

/// The system prompt a provider gets: the request's, then the conversation's system
/// messages in order (every provider takes one prompt; Anthropic no system message in the
/// conversation at all).
fn system_of<'a>(own: &'a str, messages: &[Message]) -> std::borrow::Cow<'a, str> {
    let mut parts = messages.iter().filter_map(|m| match m {
        Message::System { content } if !content.is_empty() => Some(content.as_str()),
        _ => None,
    });
    let Some(first) = parts.next() else {
        return std::borrow::Cow::Borrowed(own);
    };
    let mut system = own.to_string();
    for part in std::iter::once(first).chain(parts) {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(part);
    }
    std::borrow::Cow::Owned(system)
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A body read whole, at most `max` bytes, each taking its place in `pool` when given.
async fn read_bounded(
    mut response: reqwest::Response,
    max: usize,
    mut pool: Option<&mut AnswerBytes>,
) -> Result<String, ReadError> {
    let mut body = Vec::new();
    loop {
        let chunk = match pool.as_deref() {
            Some(pool) => next_chunk(&mut response, pool).await?,
            None => response
                .chunk()
                .await
                .map_err(|e| ReadError::Io(read_failure(&e)))?,
        };
        let Some(chunk) = chunk else { break };
        if body.len() + chunk.len() > max {
            return Err(ReadError::Io(format!(
                "the answer is larger than {max} bytes"
            )));
        }
        if let Some(pool) = pool.as_deref_mut() {
            pool.take(chunk.len()).await.map_err(ReadError::Full)?;
        }
        body.extend_from_slice(&chunk);
    }
    // Valid UTF-8 (the usual case) becomes the text without a second copy.
    Ok(String::from_utf8(body)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// What is read of a provider's error body: past 64 KiB a JSON error with a long
/// `details` lost its type, code and `param` (front round 30 F5).
const MAX_ERROR_BYTES: usize = 1 << 20;

/// The first `max` bytes of a body (an error's: past them its start still says what went
/// wrong; a 20 MB error message left the client "answered 400: " and nothing more, front
/// round 28 F2), the rest left unread.
async fn read_prefix(mut response: reqwest::Response, max: usize) -> String {
    let mut body = Vec::new();
    while body.len() < max {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = max - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Why a body was not read.
enum ReadError {
    Io(String),
    /// The answers' pool had no room ([`super::answers`]).
    Full(NoRoom),
}

/// The provider's next bytes, unless the answer is ended to make room first: an ended
/// answer lets its places go now, not when its provider next writes.
async fn next_chunk(
    response: &mut reqwest::Response,
    bytes: &AnswerBytes,
) -> Result<Option<bytes::Bytes>, ReadError> {
    let ended = bytes.ended();
    tokio::select! {
        chunk = response.chunk() => chunk.map_err(|e| ReadError::Io(read_failure(&e))),
        _ = ended.cancelled() => Err(ReadError::Full(NoRoom::Ended)),
    }
}

/// `{base}/{path}`, a query the base carries kept at the end (some providers take their
/// key there).
fn join(base: &str, path: &str) -> String {
    match base.split_once('?') {
        Some((head, query)) => format!("{}/{path}?{query}", head.trim_end_matches('/')),
        None => format!("{base}/{path}"),
    }
}

/// Whether an answer says it is one JSON document (`application/json`, `…+json`).
fn is_json(response: &reqwest::Response) -> bool {
    header(response, "content-type").is_some_and(|t| {
        let t = t
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        t == "application/json" || t.ends_with("+json")
    })
}

/// `bytes` cut after each line ending (the last piece may be an unfinished line).
fn split_lines(bytes: bytes::Bytes) -> Vec<bytes::Bytes> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        // A lone CR ends a line too (SSE allows it): split only at LF, a stray line in a
        // stream of CR endings dropped the rest of its chunk (front round 16 F3). A CR
        // followed by LF stays with it; one at the chunk's end is left to the parser.
        let ends = match b {
            b'\n' => true,
            b'\r' => bytes.get(i + 1).is_some_and(|next| *next != b'\n'),
            _ => false,
        };
        if ends {
            pieces.push(bytes.slice(start..=i));
            start = i + 1;
        }
    }
    if start < bytes.len() {
        pieces.push(bytes.slice(start..));
    }
    pieces
}

/// A `Retry-After` in seconds: a number of them, or an HTTP date (front round 18 F4: a
/// date was not read, and the gateway asked again at once).
/// The wait a provider asks for: `retry-after-ms` (OpenAI's, which its SDKs read first),
/// else `Retry-After` in seconds, a fraction too, or as an HTTP date; a value that is none of
/// these, or negative, asks for nothing. A wait past a day is read as a day (front round 27
/// F1: `1.5` and `99999999999999999999` were read as nothing, so the provider was asked
/// again after 100 ms instead of being left alone, and `retry-after-ms` was not read).
fn asked_wait(response: &reqwest::Response) -> Option<Duration> {
    let number = |name: &str| header(response, name)?.trim().parse::<f64>().ok();
    let wait = |s: f64| {
        (s >= 0.0).then(|| Duration::try_from_secs_f64(s.min(DAY.as_secs_f64())).unwrap_or(DAY))
    };
    if let Some(wait) = number("retry-after-ms").and_then(|ms| wait(ms / 1000.0)) {
        return Some(wait);
    }
    if let Some(s) = number("retry-after") {
        return wait(s);
    }
    let at = httpdate::parse_http_date(header(response, "retry-after")?.trim()).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(DAY),
    )
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The longest one wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The most one request waits between its retries in all: under `[gateway]
/// stream_keepalive_ms`'s default (15 s), so a streamed answer has not opened when the
/// retries give up; less under a shorter keep-alive ([`HttpModel::waiting_under`]).
const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

/// The HTTP status OpenAI and Anthropic give the errors they can also report inside an
/// answer (a stream's `error` event, a failed response): a client's SDK retries or gives up
/// by status. Server-side errors and types not known here stay without one (the gateway's
/// 502).
fn status_of_reported(kind: Option<&str>, code: Option<&str>) -> Option<u16> {
    let status = |name: &str| {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "invalid_request_error" | "invalid_prompt" => Some(400),
            "authentication_error" | "invalid_api_key" => Some(401),
            "permission_error" | "permission_denied" => Some(403),
            "not_found_error" => Some(404),
            "request_too_large" => Some(413),
            "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => Some(429),
            // A code that is itself a client-error status (vLLM's, Google's `429`).
            other => other.parse::<u16>().ok().filter(|n| (400..500).contains(n)),
        }
    };
    code.and_then(status).or_else(|| kind.and_then(status))
}

/// 100 ms, 200 ms, 400 ms... or the wait the server asked for, capped at 5 s.
fn backoff(attempt: u32, asked: Option<Duration>) -> Duration {
    asked
        .unwrap_or(Duration::from_millis(
            100 * (1u64 << attempt.saturating_sub(1).min(6)),
        ))
        .min(MAX_BACKOFF)
}

/// Why reading an answer failed: a timeout said as one (reqwest calls it "error decoding
/// response body").
fn read_failure(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!(
            "timed out: the provider sent nothing for `[provider] timeout_ms`, or the answer took longer than {} s",
            ANSWER_TIME_LIMIT.as_secs()
        )
    } else {
        without_url(e)
    }
}

/// reqwest errors print the URL, which may carry a key in its query: leave it out.
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(url) = e.url() {
        s = s.replace(url.as_str(), "<url>");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(headers: &[(&str, &str)]) -> Option<Duration> {
        let mut r = http::Response::builder().status(429);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        asked_wait(&reqwest::Response::from(r.body("").unwrap()))
    }

    #[test]
    fn a_reported_error_s_status_is_read_from_its_code_or_type() {
        assert_eq!(
            status_of_reported(None, Some("rate_limit_exceeded")),
            Some(429)
        );
        assert_eq!(
            status_of_reported(None, Some("RATE_LIMIT_EXCEEDED")),
            Some(429)
        );
        assert_eq!(status_of_reported(None, Some("429")), Some(429));
        assert_eq!(status_of_reported(None, Some("503")), None);
        assert_eq!(
            status_of_reported(Some("invalid_request_error"), None),
            Some(400)
        );
        assert_eq!(status_of_reported(Some("server_error"), Some("boom")), None);
    }

    #[test]
    fn the_asked_wait_is_milliseconds_seconds_or_a_date() {
        assert_eq!(
            asked(&[("retry-after", " 7 ")]),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            asked(&[("retry-after", "1.5")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            asked(&[("retry-after", "1.5"), ("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(asked(&[("retry-after", "1e30")]), Some(DAY));
        assert_eq!(asked(&[("retry-after", "inf")]), Some(DAY));
        let soon = std::time::SystemTime::now() + Duration::from_secs(30);
        let said = asked(&[("retry-after", &httpdate::fmt_http_date(soon))]).unwrap();
        assert!((29..=31).contains(&said.as_secs()), "{said:?}");
        assert_eq!(
            asked(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            Some(Duration::ZERO)
        );
        for nothing in ["soon", "-1", "NaN", ""] {
            assert_eq!(asked(&[("retry-after", nothing)]), None, "{nothing}");
        }
        // A `retry-after-ms` that says nothing leaves `Retry-After`.
        assert_eq!(
            asked(&[("retry-after", "2"), ("retry-after-ms", "x")]),
            Some(Duration::from_secs(2))
        );
    }

    /// A request's empty model name is none: the configured model is sent (front round 21).
    #[test]
    fn an_empty_model_name_leaves_the_configured_one() {
        let model = HttpModel::new(&ProviderConfig {
            model: "configured".into(),
            ..ProviderConfig::default()
        })
        .unwrap();
        let mut request = ask(false);
        std::sync::Arc::make_mut(&mut request.options).model = Some(String::new());
        assert_eq!(model.body(&request)["model"], "configured");
        std::sync::Arc::make_mut(&mut request.options).model = Some("asked".into());
        assert_eq!(model.body(&request)["model"], "asked");
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1, None), Duration::from_millis(100));
        assert_eq!(backoff(3, None), Duration::from_millis(400));
        assert_eq!(
            backoff(1, Some(Duration::from_secs(60))),
            Duration::from_millis(5_000)
        );
    }

    /// A provider on loopback answering every request with `text` (a Responses message),
    /// whole or streamed as one delta.
    async fn provider(text: String) -> String {
        use axum::response::IntoResponse;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/v1/responses",
            axum::routing::post(move |body: axum::Json<Value>| {
                let text = text.clone();
                async move {
                    if body.0["stream"] == json!(true) {
                        let delta = json!({"type": "response.output_text.delta", "delta": text});
                        let done =
                            json!({"type": "response.completed", "response": {"output": []}});
                        return axum::response::Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(axum::body::Body::from(format!(
                                "data: {delta}\n\ndata: {done}\n\n"
                            )))
                            .unwrap();
                    }
                    axum::Json(json!({"output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}]}))
                    .into_response()
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/v1")
    }

    fn ask(streamed: bool) -> ModelRequest {
        let (tx, _rx) = tokio::sync::mpsc::channel(1 << 20);
        ModelRequest {
            system: String::new(),
            tools: Vec::new(),
            messages: std::sync::Arc::new(vec![Message::User {
                content: "hi".into(),
            }]),
            options: Default::default(),
            held: Default::default(),
            text: streamed.then(|| {
                crate::agent::TextStream::new(
                    tx,
                    tokio_util::sync::CancellationToken::new(),
                    Duration::from_secs(60),
                )
            }),
        }
    }

    /// An answer's bytes hold their places in the pool for as long as the reply (and
    /// what is made of it) lives, whole or streamed; an answer that finds no room fails
    /// with the gateway's own 503, not the provider's.
    #[tokio::test]
    async fn provider_answers_take_places_in_one_pool_until_dropped() {
        let base_url = provider("x".repeat(3 << 20)).await;
        for stream in [false, true] {
            let model = HttpModel::new(&ProviderConfig {
                base_url: base_url.clone(),
                stream,
                max_retries: 0,
                ..ProviderConfig::default()
            })
            .unwrap();
            let all = model.answers.free_kib();
            let reply = model.respond(&ask(stream)).await.unwrap();
            assert_eq!(reply.text.len(), 3 << 20);
            let taken = all - model.answers.free_kib();
            assert!((3 << 10..4 << 10).contains(&taken), "{taken} KiB");
            let kept = reply.held.clone();
            drop(reply);
            assert_eq!(all - model.answers.free_kib(), taken, "a copy keeps them");
            drop(kept);
            assert_eq!(model.answers.free_kib(), all);

            // Room for two answers held: the third waits in line, then fails with 503 and a
            // retry soon.
            let mut model = model;
            model.answers = AnswerPool::new(7 << 20, Duration::from_millis(200));
            let (a, b) = (
                model.respond(&ask(stream)).await.unwrap(),
                model.respond(&ask(stream)).await.unwrap(),
            );
            let e = model.respond(&ask(stream)).await.unwrap_err();
            assert_eq!(e.status, Some(503), "{e:?}");
            assert_eq!(e.code.as_deref(), Some("answers_in_flight"));
            assert!(e.message.contains("answers in flight"), "{}", e.message);
            drop((a, b));
            model.respond(&ask(stream)).await.unwrap();

            // One that waits in line gets the room an answer lets go once it is sent.
            model.answers = AnswerPool::new(7 << 20, Duration::from_secs(60));
            let (a, b) = (
                model.respond(&ask(stream)).await.unwrap(),
                model.respond(&ask(stream)).await.unwrap(),
            );
            let asking = ask(stream);
            let (third, ()) = tokio::join!(model.respond(&asking), async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                drop(a);
            });
            assert_eq!(third.unwrap().text.len(), 3 << 20);
            drop(b);
        }
    }

    #[test]
    fn lines_are_cut_after_each_line_feed() {
        let pieces = split_lines(bytes::Bytes::from_static(b"data: 1\n\ndata: 2"));
        assert_eq!(pieces, ["data: 1\n", "\n", "data: 2"]);
    }
}
