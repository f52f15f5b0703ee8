//! The Streamable HTTP client rmcp runs on: our reqwest 0.12.
//!
//! rmcp 3.11 ships a `StreamableHttpClient` only for reqwest 0.13, whose rustls setup brings
//! aws-lc-rs (a C build) next to the ring provider our reqwest 0.12 already uses for the
//! model providers. We keep one reqwest and one crypto provider by implementing the trait
//! here, on a client of our own.
//!
//! What a remote MCP server can do to us is bounded:
//! - a JSON response body is at most [`MAX_JSON_BODY`] bytes and an SSE event at most
//!   [`MAX_SSE_EVENT`] bytes. rmcp passes its own limits (the same 16 MiB by default); the
//!   smaller of the two applies, so a config cannot lift ours;
//! - redirects are followed only within the origin and only with 307/308, so the configured
//!   headers (often credentials) never reach another host and a POST never becomes a GET;
//! - error messages name the method, the URL and the HTTP status, but never a header value,
//!   and the URL is shown without userinfo or query, which can hold credentials too.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    fmt,
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, stream::BoxStream};
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, StatusCode,
    header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE},
};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, ErrorData, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        AuthRequiredError, InsufficientScopeError, SseError, StreamableHttpClient,
        StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
    },
};
use sse_stream::{Sse, SseStream};

/// The largest JSON response body we buffer (a tools/list or a tools/call result).
pub const MAX_JSON_BODY: usize = 16 * 1024 * 1024;
/// The largest single SSE event we let the parser buffer.
pub const MAX_SSE_EVENT: usize = 16 * 1024 * 1024;
/// How much of an error body goes into an error message: enough to read a diagnostic,
/// not enough to flood a log with an HTML page.
const ERROR_BODY_PREVIEW: usize = 1024;
const MAX_REDIRECTS: usize = 10;

const HEADER_SESSION_ID: &str = "mcp-session-id";
const HEADER_LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
const ACCEPT_POST: &str = "application/json, text/event-stream";

/// Headers the transport sets itself. A configured copy would be sent next to (or instead
/// of) the transport's value and break the protocol, so `new` refuses them.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    HEADER_SESSION_ID,
    HEADER_LAST_EVENT_ID,
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];
/// SEP-2243 per-parameter headers, which rmcp derives from each tools/call.
const RESERVED_PREFIX: &str = "mcp-param-";

/// A reqwest 0.12 client that speaks MCP Streamable HTTP for rmcp, sending the configured
/// headers with every request.
#[derive(Clone, Debug)]
pub struct HttpClient {
    client: reqwest::Client,
    headers: reqwest::header::HeaderMap,
}

impl HttpClient {
    /// Checks `headers` (names and values) and builds the client. An error names the bad
    /// header, never its value.
    ///
    /// Only connecting is timed out: the GET event stream stays open as long as the session
    /// does, so a whole-request timeout would cut it. Per-call deadlines belong to the caller.
    pub fn new(
        headers: &BTreeMap<String, String>,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let mut map = HeaderMap::with_capacity(headers.len());
        for (name, value) in headers {
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header {name:?}: not a valid header name"))?;
            if is_reserved(&header_name) {
                return Err(format!(
                    "header {name:?}: set by the MCP transport itself, it cannot be configured"
                ));
            }
            let mut header_value = HeaderValue::from_str(value).map_err(|_| {
                format!(
                    "header {name:?}: the value is not a valid header value \
                     (visible ASCII, spaces and tabs only)"
                )
            })?;
            // Keeps the value out of Debug output and out of HTTP/2 header compression tables.
            header_value.set_sensitive(true);
            // The map's keys are distinct strings, but header names are case-insensitive.
            if map.insert(header_name, header_value).is_some() {
                return Err(format!(
                    "header {name:?}: given twice (header names are case-insensitive)"
                ));
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(same_origin_redirects())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {}", describe(e)))?;
        Ok(Self {
            client,
            headers: map,
        })
    }

    fn request(
        &self,
        method: Method,
        uri: &str,
        session_id: Option<&str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let accept = if method == Method::GET {
            EVENT_STREAM
        } else {
            ACCEPT_POST
        };
        let mut rb = self.client.request(method, uri).header(ACCEPT, accept);
        if let Some(session_id) = session_id {
            rb = rb.header(HEADER_SESSION_ID, session_id);
        }
        if let Some(token) = auth_header {
            rb = rb.bearer_auth(token);
        }
        // rmcp's own per-request headers (mcp-protocol-version and the SEP-2243 ones).
        for (name, value) in custom_headers {
            rb = rb.header(name, value);
        }
        // Last, and replacing: a configured Authorization wins over rmcp's auth_header
        // instead of going out as a second one.
        rb.headers(self.headers.clone())
    }

    async fn post(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpClientError>> {
        let target = Target::new(Method::POST, &uri);
        let had_session = session_id.is_some();
        let mut resp = self
            .request(
                Method::POST,
                &uri,
                session_id.as_deref(),
                auth_header,
                custom_headers,
            )
            .json(&message)
            .send()
            .await
            .map_err(|e| target.client_error(e))?;
        let status = resp.status();
        if let Some(e) = auth_challenge(&resp, &target)? {
            return Err(e);
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && had_session {
            // rmcp answers this by initializing a new session.
            return Err(StreamableHttpError::SessionExpired);
        }
        let new_session_id = resp
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = content_type(&resp);
        let is_json = content_type
            .as_deref()
            .is_some_and(|ct| media_type_is(ct, JSON));
        let json_limit = limits.max_json_response_size.min(MAX_JSON_BODY);
        // Notifications, responses and errors leave nothing outstanding: any 2xx will do.
        let awaits_reply = matches!(message, ClientJsonRpcMessage::Request(_));

        if !status.is_success() {
            // A JSON-RPC error sent with a 4xx/5xx must reach the caller as that error, so
            // a JSON body is read whole (bounded); anything else only for the message.
            // A 401/403 without a challenge keeps its status instead.
            let parse_error =
                is_json && !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
            let limit = if parse_error {
                json_limit
            } else {
                ERROR_BODY_PREVIEW
            };
            // A body that fails to arrive must not hide the status we already have.
            let (body, complete) = read_at_most(&mut resp, limit).await.unwrap_or_default();
            if parse_error
                && complete
                && let Ok(error @ ServerJsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(legacy_discover_reply(&message, had_session, status, &body)
                    .unwrap_or(StreamableHttpPostResponse::Json(error, new_session_id)));
            }
            if let Some(reply) = legacy_discover_reply(&message, had_session, status, &body) {
                return Ok(reply);
            }
            return Err(target.status_error(status, &error_detail(status, &body)));
        }

        if !awaits_reply && resp.content_length() == Some(0) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        match content_type.as_deref() {
            Some(ct) if media_type_is(ct, EVENT_STREAM) => {
                let events = sse_events(resp, target, limits.max_sse_event_size);
                Ok(StreamableHttpPostResponse::Sse(events, new_session_id))
            }
            Some(ct) if media_type_is(ct, JSON) => {
                let too_large = || {
                    target
                        .status_error(status, &format!("the JSON body exceeds {json_limit} bytes"))
                };
                // The declared length only lets us refuse early; the read below counts anyway.
                if resp
                    .content_length()
                    .is_some_and(|len| len > json_limit as u64)
                {
                    return Err(too_large());
                }
                let (body, complete) = read_at_most(&mut resp, json_limit)
                    .await
                    .map_err(|e| target.client_error(e))?;
                if !complete {
                    return Err(too_large());
                }
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(reply) => Ok(StreamableHttpPostResponse::Json(reply, new_session_id)),
                    Err(_) if !awaits_reply => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(target.status_error(
                        status,
                        &format!("not a JSON-RPC message ({e}): {}", preview(&body)),
                    )),
                }
            }
            // Some servers answer notifications/initialized with an empty 200 of no type.
            _ if !awaits_reply => Ok(StreamableHttpPostResponse::Accepted),
            other => Err(target.status_error(
                status,
                &format!(
                    "expected {JSON} or {EVENT_STREAM}, got content type {}",
                    other.unwrap_or("(none)")
                ),
            )),
        }
    }
}

impl StreamableHttpClient for HttpClient {
    type Error = HttpClientError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    // The trait's default for the two limited variants below drops the limits, so they are
    // overridden: the transport calls these, not `post_message`.
    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let target = Target::new(Method::DELETE, &uri);
        let mut resp = self
            .request(
                Method::DELETE,
                &uri,
                Some(&session_id),
                auth_header,
                custom_headers,
            )
            .send()
            .await
            .map_err(|e| target.client_error(e))?;
        let status = resp.status();
        // The spec lets a server refuse to end sessions on request; the session then
        // simply expires on its side.
        if status.is_success() || status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        let (body, _) = read_at_most(&mut resp, ERROR_BODY_PREVIEW)
            .await
            .unwrap_or_default();
        Err(target.status_error(status, &error_detail(status, &body)))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            MAX_SSE_EVENT,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let target = Target::new(Method::GET, &uri);
        let mut rb = self.request(
            Method::GET,
            &uri,
            session_id.as_deref(),
            auth_header,
            custom_headers,
        );
        if let Some(id) = last_event_id {
            rb = rb.header(HEADER_LAST_EVENT_ID, id);
        }
        let mut resp = rb.send().await.map_err(|e| target.client_error(e))?;
        let status = resp.status();
        // No standalone stream on this server: rmcp then works from POST replies alone.
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(e) = auth_challenge(&resp, &target)? {
            return Err(e);
        }
        if !status.is_success() {
            let (body, _) = read_at_most(&mut resp, ERROR_BODY_PREVIEW)
                .await
                .unwrap_or_default();
            return Err(target.status_error(status, &error_detail(status, &body)));
        }
        match content_type(&resp) {
            Some(ct) if media_type_is(&ct, EVENT_STREAM) => {
                Ok(sse_events(resp, target, max_sse_event_size))
            }
            other => Err(target.status_error(
                status,
                &format!(
                    "expected {EVENT_STREAM}, got content type {}",
                    other.as_deref().unwrap_or("(none)")
                ),
            )),
        }
    }
}

/// A request that could not be made or whose body could not be read, or an SSE event over
/// the bound. The message names the method and the URL (without userinfo or query) and
/// includes reqwest's causes, since rmcp shows only this error's own text.
#[derive(Debug)]
pub struct HttpClientError(String);

impl fmt::Display for HttpClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HttpClientError {}

/// What an error message says the request was: `POST https://host/path`.
#[derive(Clone, Debug)]
struct Target(Arc<str>);

impl Target {
    fn new(method: Method, uri: &str) -> Self {
        Self(format!("{method} {}", shown_url(uri)).into())
    }

    fn client_error(&self, e: reqwest::Error) -> StreamableHttpError<HttpClientError> {
        StreamableHttpError::Client(self.error(&describe(e)))
    }

    fn error(&self, what: &str) -> HttpClientError {
        HttpClientError(format!("{}: {what}", self.0))
    }

    fn status_error(
        &self,
        status: StatusCode,
        detail: &str,
    ) -> StreamableHttpError<HttpClientError> {
        let message = if detail.is_empty() {
            format!("{}: HTTP {status}", self.0)
        } else {
            format!("{}: HTTP {status}: {detail}", self.0)
        };
        StreamableHttpError::UnexpectedServerResponse(Cow::Owned(message))
    }
}

/// The URL as error messages show it: userinfo, query and fragment can carry credentials.
fn shown_url(uri: &str) -> String {
    match reqwest::Url::parse(uri) {
        Ok(mut url) => {
            let had_query = url.query().is_some();
            // Both fail only for URLs that cannot have userinfo, which then have none.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            if had_query {
                format!("{url}?…")
            } else {
                url.to_string()
            }
        }
        Err(_) => "(an invalid URL)".to_owned(),
    }
}

/// reqwest's message without its URL (we show our own), followed by its causes, where the
/// useful part ("connection refused", "certificate expired") is.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // hyper and hyper-util often repeat the inner message in the outer one.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn is_reserved(name: &HeaderName) -> bool {
    // HeaderName is already lowercase.
    let name = name.as_str();
    RESERVED_HEADERS.contains(&name) || name.starts_with(RESERVED_PREFIX)
}

/// Same-origin 307/308 only. A 301/302/303 would turn the POST into a bodyless GET, which a
/// Streamable HTTP server takes for a stream request, losing the message; another origin
/// would get our configured headers and the session id.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            // The 3xx comes back as the response and becomes a status error.
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

fn content_type(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Media types are case-insensitive and may carry parameters (`; charset=utf-8`).
fn media_type_is(content_type: &str, expected: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

/// A 401 or 403 with a `WWW-Authenticate` challenge becomes rmcp's typed auth error, so a
/// caller can tell "needs credentials" from a failing server.
fn auth_challenge(
    resp: &reqwest::Response,
    target: &Target,
) -> Result<Option<StreamableHttpError<HttpClientError>>, StreamableHttpError<HttpClientError>> {
    let status = resp.status();
    if !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Ok(None);
    }
    let Some(challenge) = resp.headers().get(WWW_AUTHENTICATE) else {
        return Ok(None);
    };
    let Ok(challenge) = challenge.to_str() else {
        return Err(target.status_error(status, "the WWW-Authenticate header is not valid text"));
    };
    let challenge = challenge.to_owned();
    Ok(Some(if status == StatusCode::UNAUTHORIZED {
        StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge))
    } else {
        let scope = required_scope(&challenge);
        StreamableHttpError::InsufficientScope(InsufficientScopeError::new(challenge, scope))
    }))
}

/// The `scope=` parameter of a challenge, quoted or not.
fn required_scope(challenge: &str) -> Option<String> {
    let at = challenge.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let rest = challenge.get(at..)?;
    let scope = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest
            .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
            .next()?,
    };
    (!scope.is_empty()).then(|| scope.to_owned())
}

/// A sessionless `server/discover` refused with a 4xx is how a pre-2026 server says it only
/// speaks `initialize`. rmcp's lifecycle (`ClientLifecycleMode::Auto`) needs that as a
/// JSON-RPC error carrying the request's id, which middleware rejections cannot echo.
fn legacy_discover_reply(
    message: &ClientJsonRpcMessage,
    had_session: bool,
    status: StatusCode,
    body: &[u8],
) -> Option<StreamableHttpPostResponse> {
    if had_session
        || !status.is_client_error()
        || matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
    {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    if !matches!(request.request, ClientRequest::DiscoverRequest(_)) {
        return None;
    }
    let error = match serde_json::from_slice::<ServerJsonRpcMessage>(body) {
        Ok(ServerJsonRpcMessage::Error(error)) => error.error,
        _ => ErrorData::invalid_request(
            format!(
                "server/discover rejected with HTTP {status}: {}",
                preview(body)
            ),
            None,
        ),
    };
    Some(StreamableHttpPostResponse::Json(
        ServerJsonRpcMessage::error(error, Some(request.id.clone())),
        None,
    ))
}

/// Reads the body up to `max` bytes, counting as it goes (a Content-Length can lie or be
/// absent). `false` means there was more, which is left unread.
async fn read_at_most(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

fn error_detail(status: StatusCode, body: &[u8]) -> String {
    let mut detail = preview(body);
    if status.is_redirection() {
        let note = "redirects are followed only within the origin, with 307 or 308";
        detail = if detail.is_empty() {
            note.to_owned()
        } else {
            format!("{note}: {detail}")
        };
    }
    detail
}

/// The start of a body as text, on one line (error messages end up in line-based logs).
fn preview(body: &[u8]) -> String {
    let cut = body.len().min(ERROR_BODY_PREVIEW);
    let mut text = String::from_utf8_lossy(&body[..cut])
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if body.len() > cut {
        text.push('…');
    }
    text
}

/// The response body as SSE events, each at most `max_event` bytes (and [`MAX_SSE_EVENT`]).
///
/// sse-stream has no bound of its own: it buffers an unfinished line and event for as long
/// as the server keeps sending. So the bytes are counted on their way in, and a stream
/// whose event grows past the bound ends with an error. rmcp treats that like any broken
/// stream (it may reconnect, within its retry policy).
fn sse_events(
    resp: reqwest::Response,
    target: Target,
    max_event: usize,
) -> BoxStream<'static, Result<Sse, SseError>> {
    let bound = EventBound::new(max_event.min(MAX_SSE_EVENT));
    // `chunk()` in a loop instead of reqwest's `bytes_stream`, which needs its `stream`
    // feature. `over` is set once the bound is crossed: the events before it in the same
    // chunk are still delivered, then the error.
    let bytes = futures::stream::try_unfold(
        (resp, bound, target, false),
        |(mut resp, mut bound, target, over)| async move {
            let max = bound.max;
            let too_large = || target.error(&format!("an SSE event exceeds {max} bytes"));
            if over {
                return Err(too_large());
            }
            let Some(chunk) = resp.chunk().await.map_err(|e| target.error(&describe(e)))? else {
                return Ok(None);
            };
            match bound.observe(&chunk) {
                Ok(()) => Ok(Some((chunk, (resp, bound, target, false)))),
                Err(0) => Err(too_large()),
                Err(within) => Ok(Some((chunk.slice(..within), (resp, bound, target, true)))),
            }
        },
    );
    SseStream::from_bytes_stream(bytes).boxed()
}

/// Counts what the SSE parser would be holding: the lines of the current event (a blank
/// line ends it) plus the line in progress. Comment lines are dropped by the parser once
/// complete, so they count only while unfinished.
#[derive(Debug)]
struct EventBound {
    max: usize,
    event: usize,
    line: usize,
    line_is_comment: bool,
    after_cr: bool,
}

impl EventBound {
    fn new(max: usize) -> Self {
        Self {
            max,
            event: 0,
            line: 0,
            line_is_comment: false,
            after_cr: false,
        }
    }

    /// `Err(n)`: the bound is crossed at `chunk[n]`; the `n` bytes before it are within.
    fn observe(&mut self, chunk: &[u8]) -> Result<(), usize> {
        for (at, &byte) in chunk.iter().enumerate() {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                // The LF of a CRLF that the CR already ended.
                b'\n' if after_cr => {}
                b'\r' | b'\n' => {
                    if self.line == 0 {
                        self.event = 0;
                    } else if !self.line_is_comment {
                        // +1: the parser joins data lines with a newline.
                        self.event = self.event.saturating_add(self.line).saturating_add(1);
                    }
                    self.line = 0;
                    self.line_is_comment = false;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    if self.line == 0 {
                        self.line_is_comment = byte == b':';
                    }
                    self.line = self.line.saturating_add(1);
                }
            }
            if self.event.saturating_add(self.line) > self.max {
                return Err(at);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::{
        Router,
        body::Body,
        http::HeaderMap as AxumHeaders,
        response::{IntoResponse, Response},
        routing::{get, post},
    };
    use rmcp::model::{PingRequest, RequestId};

    use super::*;

    const SECRET: &str = "s3cret-token-value";

    fn ping() -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            RequestId::Number(1),
        )
    }

    fn client() -> HttpClient {
        let headers = BTreeMap::from([("X-Api-Key".to_owned(), SECRET.to_owned())]);
        HttpClient::new(&headers, Duration::from_secs(5)).unwrap()
    }

    /// Serves `app` on 127.0.0.1:0; returns the URL of `/mcp`.
    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/mcp")
    }

    async fn post_ping(
        client: &HttpClient,
        url: &str,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpClientError>> {
        client
            .post_message(Arc::from(url), ping(), None, None, HashMap::new())
            .await
    }

    fn err_text(
        result: Result<StreamableHttpPostResponse, StreamableHttpError<HttpClientError>>,
    ) -> String {
        match result {
            Ok(reply) => panic!("expected an error, got {reply:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_headers_are_named_and_their_values_are_not_shown() {
        let timeout = Duration::from_secs(1);
        let one = |name: &str, value: &str| {
            HttpClient::new(
                &BTreeMap::from([(name.to_owned(), value.to_owned())]),
                timeout,
            )
        };

        let e = one("Bad Header", "x").unwrap_err();
        assert!(e.contains("\"Bad Header\""), "{e}");

        let e = one("X-Token", "line\nbreak-secret").unwrap_err();
        assert!(e.contains("\"X-Token\""), "{e}");
        assert!(!e.contains("break-secret"), "{e}");

        let e = one("Accept", "text/html").unwrap_err();
        assert!(e.contains("\"Accept\""), "{e}");
        let e = one("Mcp-Param-Region", "eu").unwrap_err();
        assert!(e.contains("\"Mcp-Param-Region\""), "{e}");

        let twice = BTreeMap::from([
            ("X-Key".to_owned(), "a".to_owned()),
            ("x-key".to_owned(), "b".to_owned()),
        ]);
        let e = HttpClient::new(&twice, timeout).unwrap_err();
        assert!(e.contains("x-key") && e.contains("twice"), "{e}");

        let ok = one("Authorization", "Bearer abc").unwrap();
        assert!(!format!("{ok:?}").contains("abc"));
    }

    #[test]
    fn urls_in_errors_lose_userinfo_and_query() {
        assert_eq!(
            shown_url("https://user:pw@example.com:8443/mcp?key=abc#x"),
            "https://example.com:8443/mcp?…"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:9/mcp"),
            "http://127.0.0.1:9/mcp"
        );
        assert_eq!(shown_url("not a url"), "(an invalid URL)");
    }

    #[tokio::test]
    async fn json_reply_is_parsed_and_headers_are_sent() {
        let app = Router::new().route(
            "/mcp",
            post(|headers: AxumHeaders, body: String| async move {
                let sent_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
                let accept = headers.get("accept").and_then(|v| v.to_str().ok());
                let request: serde_json::Value = serde_json::from_str(&body).unwrap();
                if sent_key != Some(SECRET)
                    || accept != Some(ACCEPT_POST)
                    || request["method"] != "ping"
                {
                    return (StatusCode::BAD_REQUEST, "missing header or wrong body")
                        .into_response();
                }
                (
                    [
                        ("content-type", "application/json"),
                        ("mcp-session-id", "sess-1"),
                    ],
                    r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
                )
                    .into_response()
            }),
        );
        let url = serve(app).await;

        let reply = post_ping(&client(), &url).await.unwrap();
        let StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Response(response), session) =
            reply
        else {
            panic!("expected a JSON response, got {reply:?}");
        };
        assert_eq!(response.id, RequestId::Number(1));
        assert_eq!(session.as_deref(), Some("sess-1"));
    }

    #[tokio::test]
    async fn json_body_over_the_bound_is_an_error() {
        let big = || vec![b' '; MAX_JSON_BODY + 1];
        let app = Router::new()
            // With a Content-Length: refused before reading.
            .route(
                "/mcp",
                post(move || async move { ([("content-type", "application/json")], big()) }),
            )
            // Chunked, no Content-Length: only counting catches it.
            .route(
                "/chunked",
                post(|| async {
                    let chunks = futures::stream::iter(
                        (0..17).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024 * 1024])),
                    );
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from_stream(chunks))
                        .unwrap()
                }),
            );
        let url = serve(app).await;
        let client = client();

        for url in [url.clone(), url.replace("/mcp", "/chunked")] {
            let e = err_text(post_ping(&client, &url).await);
            assert!(e.contains(&url), "{e}");
            assert!(e.contains("200 OK"), "{e}");
            assert!(e.contains(&MAX_JSON_BODY.to_string()), "{e}");
        }
    }

    #[tokio::test]
    async fn smaller_limit_from_the_transport_applies() {
        let app = Router::new().route(
            "/mcp",
            post(|| async {
                (
                    [("content-type", "application/json")],
                    r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
                )
            }),
        );
        let url = serve(app).await;
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_json_response_size = 8;
        let result = client()
            .post_message_with_response_limits(
                Arc::from(url.as_str()),
                ping(),
                None,
                None,
                HashMap::new(),
                limits,
            )
            .await;
        let e = err_text(result);
        assert!(e.contains("exceeds 8 bytes"), "{e}");
    }

    #[tokio::test]
    async fn server_error_names_status_and_url_but_not_headers() {
        let app = Router::new().route(
            "/mcp",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database is down") }),
        );
        let url = serve(app).await;

        let e = err_text(post_ping(&client(), &url).await);
        assert!(e.contains("500 Internal Server Error"), "{e}");
        assert!(e.contains(&format!("POST {url}")), "{e}");
        assert!(e.contains("database is down"), "{e}");
        assert!(!e.contains(SECRET), "{e}");
    }

    #[tokio::test]
    async fn json_rpc_error_with_an_error_status_is_kept() {
        let app = Router::new().route(
            "/mcp",
            post(|| async {
                (
                    StatusCode::BAD_REQUEST,
                    [("content-type", "application/json")],
                    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no"}}"#,
                )
            }),
        );
        let url = serve(app).await;

        let reply = post_ping(&client(), &url).await.unwrap();
        assert!(
            matches!(
                reply,
                StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(_), _)
            ),
            "{reply:?}"
        );
    }

    #[tokio::test]
    async fn connection_failure_names_the_url_without_its_query() {
        // Bind and drop, so the port is very likely closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/mcp?key={SECRET}");

        let e = err_text(post_ping(&client(), &url).await);
        assert!(
            e.contains(&format!("POST http://127.0.0.1:{port}/mcp?…")),
            "{e}"
        );
        assert!(!e.contains(SECRET), "{e}");
    }

    #[tokio::test]
    async fn sse_reply_is_parsed_and_an_event_over_the_bound_ends_the_stream() {
        let app = Router::new().route(
            "/mcp",
            post(|| async {
                (
                    [("content-type", "text/event-stream")],
                    ": keep-alive\n\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n\
                     data: this one is far too long for the bound of sixty-four bytes\n\n",
                )
            }),
        );
        let url = serve(app).await;

        let reply = client()
            .post_message_with_max_sse_event_size(
                Arc::from(url.as_str()),
                ping(),
                None,
                None,
                HashMap::new(),
                64,
            )
            .await
            .unwrap();
        let StreamableHttpPostResponse::Sse(mut events, _) = reply else {
            panic!("expected an SSE response, got {reply:?}");
        };
        let first = events.next().await.unwrap().unwrap();
        assert_eq!(first.id.as_deref(), Some("7"));
        let e = events.next().await.unwrap().unwrap_err().to_string();
        assert!(e.contains("exceeds 64 bytes") && e.contains(&url), "{e}");
        assert!(events.next().await.is_none());
    }

    #[tokio::test]
    async fn get_without_stream_support_and_with_a_challenge() {
        let app = Router::new()
            .route(
                "/mcp",
                get(|| async { StatusCode::METHOD_NOT_ALLOWED.into_response() }),
            )
            .route(
                "/auth",
                get(|| async {
                    (
                        StatusCode::FORBIDDEN,
                        [(
                            "www-authenticate",
                            r#"Bearer error="insufficient_scope", scope="tools:call""#,
                        )],
                    )
                }),
            );
        let url = serve(app).await;
        let client = client();
        let get = |url: String| {
            let client = client.clone();
            async move {
                client
                    .get_stream(
                        Arc::from(url),
                        Some(Arc::from("s")),
                        None,
                        None,
                        HashMap::new(),
                    )
                    .await
            }
        };

        let e = get(url.clone()).await.err().unwrap();
        assert!(
            matches!(e, StreamableHttpError::ServerDoesNotSupportSse),
            "{e}"
        );
        let e = get(url.replace("/mcp", "/auth")).await.err().unwrap();
        let StreamableHttpError::InsufficientScope(scope) = e else {
            panic!("expected InsufficientScope, got {e}");
        };
        assert_eq!(scope.get_required_scope(), Some("tools:call"));
    }

    #[test]
    fn event_bound_counts_events_not_streams() {
        let mut bound = EventBound::new(10);
        // Many small events with LF, CRLF and CR line ends, and comments: never over.
        for _ in 0..100 {
            bound
                .observe(b"data: abc\r\n\r\n: ping\rdata: x\r\r")
                .unwrap();
            bound.observe(b"data: 123\n\n").unwrap();
        }
        // A CRLF split across chunks is one line end, not a line end and a blank line:
        // both data lines belong to one event, 8 + 8 > 10.
        bound.observe(b"data: 1\r").unwrap();
        assert_eq!(bound.observe(b"\ndata: 2\n"), Err(3));
        // A single line that never ends is caught too, at its 11th byte.
        let mut bound = EventBound::new(10);
        assert_eq!(bound.observe(b": a comment that goes on"), Err(10));
    }
}
