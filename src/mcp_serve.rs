//! `toolsearch mcp serve`: the surface of the configured mode as an MCP server.
//!
//! What an MCP client lists is what a model would be given: `tool_search_code` (code
//! mode), or `tool_search`/`tool_describe`/`tool_call` (tools and directory modes), plus
//! the direct-only tools; every tool in direct mode. The directory of directory mode goes
//! in the server's `instructions`. A call runs through [`Agent::run_tool`], the very code
//! a model's call in a gateway turn runs, so search, describe, call, the sandbox, policy,
//! approvals, hooks and the session log all apply unchanged. When the catalog changes (an
//! upstream server's `tools/list_changed`, or a server that died), the surface is rebuilt
//! and connected clients are sent `notifications/tools/list_changed` if what they list
//! changed.

mod sessions;
mod stdio;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use crate::agent::Agent;
use crate::catalog::Catalog;
use crate::config::{Config, Mode};
use crate::dispatch::Dispatcher;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::sandbox::Sandbox;
use crate::sandbox::spares::SparePool;
use crate::surface::{self, Surface};

/// Where `mcp serve` answers.
pub enum Transport {
    /// One client on stdin/stdout; it stops the server by closing stdin or with SIGTERM.
    Stdio,
    /// Streamable HTTP at `http://ADDR/mcp`.
    Http(tokio::net::TcpListener),
}

/// `mcp serve --listen ADDR` takes loopback addresses only: the server has no
/// authentication, so only this machine may connect.
pub fn check_loopback(listen: &str) -> Result<()> {
    let loopback = listen
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().is_loopback())
        .unwrap_or_else(|_| listen.starts_with("localhost:"));
    if loopback {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "mcp serve --listen {listen}: only a loopback address (127.0.0.1, [::1], localhost); it has no authentication"
        )))
    }
}

/// `toolsearch mcp serve`: the surface of `host`'s mode, calls run by `dispatcher`, over
/// `transport` until the client leaves (stdio) or `stop` resolves; then the spare children
/// and the upstream servers are stopped, so nothing the server started outlives it.
pub async fn run(
    host: &Host,
    dispatcher: Dispatcher,
    transport: Transport,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let mode = host.mode(None);
    let sandbox = host
        .sandbox(mode)
        .and_then(|s| s.ok_or_else(|| format!("mode {} does not run code", mode.as_str())));
    let spares = sandbox.as_ref().ok().and_then(|s| host.spares(s));
    let server = McpHost::new(ServeParts {
        config: host.config.clone(),
        mode,
        dispatcher: Arc::new(dispatcher),
        sandbox,
        spares: spares.clone(),
    })?;
    server.follow(host.live());
    host.warm();
    let served = match transport {
        Transport::Stdio => {
            let mut stop = std::pin::pin!(stop);
            let served = tokio::select! {
                biased;
                _ = &mut stop => Ok(()),
                r = server.serve_stdio() => r,
            };
            // A signal can end stdin's read (the transport then sees it closed) just
            // before the signal itself is seen: that is a stop, not an error.
            match served {
                Err(_)
                    if tokio::time::timeout(Duration::from_millis(200), &mut stop)
                        .await
                        .is_ok() =>
                {
                    Ok(())
                }
                other => other,
            }
        }
        Transport::Http(listener) => server.serve_http(listener, stop).await,
    };
    if let Some(pool) = spares {
        pool.stop();
    }
    host.stop().await;
    served
}

/// What `mcp serve` runs with.
pub struct ServeParts {
    pub config: Config,
    pub mode: Mode,
    pub dispatcher: Arc<Dispatcher>,
    /// `None` with the reason when code mode cannot run here (the surface falls back).
    pub sandbox: std::result::Result<Arc<Sandbox>, String>,
    pub spares: Option<Arc<SparePool>>,
}

struct Current {
    agent: Arc<Agent>,
    tools: Vec<Tool>,
    instructions: String,
}

/// The state behind every MCP session of one `mcp serve`.
pub struct McpHost {
    parts: ServeParts,
    current: RwLock<Current>,
    peers: Mutex<Vec<Peer<RoleServer>>>,
    runs: AtomicU64,
    /// [`MAX_CALLS_AT_ONCE`] places, one held by each tool call for as long as it runs.
    calls: Arc<tokio::sync::Semaphore>,
}

/// Tool calls `mcp serve` runs at once, over all its sessions and both transports; one
/// more is answered `busy` at once. The bound is on the call itself, not on its HTTP
/// exchange: a client that hangs up after sending a call does not stop rmcp from running
/// it, so a bound released with the response let one client queue ~1,000 runs (1.1 GB).
pub const MAX_CALLS_AT_ONCE: usize = 32;

const INSTRUCTIONS: &str = "toolsearch: search a large tool catalog and call tools through it, \
instead of listing every tool. Start from the tools listed here.";

/// What `mcp serve --listen` reads of a POST before rmcp parses it. rmcp parses any body
/// under its byte limit whole, and keeps an `initialize`'s parameters for the session's
/// life: 4 MiB of `[[0],[0],…]` held 700 MB a session. So a body's JSON values are counted
/// first (a scan, no parse); a body that opens a session (no `Mcp-Session-Id`: an
/// `initialize`, ~300 bytes from a real client) may have [`MAX_OPENING_BYTES`], any other
/// [`MAX_REQUEST_BYTES`] and [`MAX_REQUEST_VALUES`] (a tool's arguments; a
/// `tool_search_code` body is one string value); and at most [`MAX_REQUESTS_AT_ONCE`] are
/// answered at once (a 503 beyond), each taking its place once its body has arrived and
/// holding it until its answer is sent. That bound is stdio's (64 unanswered requests),
/// twice the tool calls run at once, so calls past [`MAX_CALLS_AT_ONCE`] are answered
/// `busy`, a tool result an agent reads, over HTTP as over stdio (front round 27 F3: with
/// both at 32 the 33rd of 40 parallel calls was a 503 the official SDK throws).
pub const MAX_OPENING_BYTES: usize = 16 * 1024;
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
pub const MAX_REQUEST_VALUES: usize = 50_000;
pub const MAX_REQUESTS_AT_ONCE: usize = stdio::MAX_IN_FLIGHT;

/// A refusal of `mcp serve --listen`, as plain text (MCP's HTTP transport has no error
/// body of its own outside JSON-RPC).
fn refused(status: axum::http::StatusCode, message: String) -> axum::response::Response {
    let mut response =
        crate::host::guard::Guard::plain(crate::host::guard::Refusal { status, message });
    if status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("5"),
        );
    }
    response
}

/// `request` on to rmcp within the bounds above, and those of the sessions (a new one
/// when none can be made, a stream when none may be opened: 503, not rmcp's 500).
async fn bounded_request(
    bounded: Arc<sessions::Bounded>,
    in_flight: Arc<tokio::sync::Semaphore>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse;
    let opening = !request.headers().contains_key("mcp-session-id");
    if request.method() == Method::GET {
        if !opening && bounded.streams_full() {
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                sessions::SessionsError::AllStreams.to_string(),
            );
        }
        return next.run(request).await;
    }
    // rmcp closes whatever session a DELETE names and answers 202; MCP (2025-06-18,
    // Session Management) owes an unknown or ended session a 404, which rmcp gives its POST
    // and GET. A client deleting twice learns the second found nothing.
    if request.method() == Method::DELETE
        && let Some(id) = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        && bounded.is_unknown(id).await
    {
        return refused(StatusCode::NOT_FOUND, sessions::NOT_FOUND.to_string());
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    if opening && bounded.full() {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            sessions::SessionsError::Full.to_string(),
        );
    }
    let (parts, body) = request.into_parts();
    let max = if opening {
        MAX_OPENING_BYTES
    } else {
        MAX_REQUEST_BYTES
    };
    let bytes = match axum::body::to_bytes(body, max).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body could not be read within {max} bytes{}: {e}",
                    if opening {
                        " (a request that opens a session)"
                    } else {
                        ""
                    }
                ),
            );
        }
    };
    let bytes = match crate::provider::bounded::mend_lone_surrogates(&bytes) {
        Some(mended) => axum::body::Bytes::from(mended),
        None => bytes,
    };
    // Not JSON, or not a JSON-RPC message: a JSON-RPC error under 400, as MCP's other
    // servers answer (rmcp said 415, which tells a client its content type was wrong:
    // front rounds 21 F2 and 22 F5). Text that is not UTF-8 is not JSON.
    let rpc_error = |code: i32, message: String, id: Option<serde_json::Value>| {
        let error = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": code, "message": message},
        });
        (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
    };
    // Read as rmcp reads it, by rmcp's own message type, so what is refused here is what it
    // would refuse (front round 23 F2: `{}` and other objects that are no message still
    // got its 415).
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        Err(e) => return rpc_error(-32700, format!("Parse error: not UTF-8: {e}"), None),
    };
    if let Err(e) = serde_json::from_str::<rmcp::model::ClientJsonRpcMessage>(text) {
        use serde_json::error::Category;
        return match e.classify() {
            // JSON beyond serde's reach (too deep, a number out of range) is answered
            // under its id, as over stdio; malformed text has none to read.
            Category::Syntax if stdio::beyond_serde(&e) => rpc_error(
                -32700,
                format!("Parse error: the request is not read: {e}"),
                stdio::scanned_id(&bytes),
            ),
            Category::Syntax | Category::Eof | Category::Io => {
                rpc_error(-32700, format!("Parse error: {e}"), None)
            }
            // Under the request's id when it has one rmcp could answer under, as over
            // stdio (front round 28 F4).
            Category::Data => {
                let value = serde_json::from_str::<serde_json::Value>(text).ok();
                let why = value
                    .as_ref()
                    .and_then(|v| stdio::why_unreadable(v).map(str::to_string))
                    .unwrap_or_else(|| format!("not a JSON-RPC message this server reads: {e}"));
                let id = value.as_ref().and_then(stdio::answerable);
                rpc_error(-32600, format!("Invalid Request: {why}"), id)
            }
        };
    }
    let values = crate::provider::bounded::count_values(&bytes);
    if values > MAX_REQUEST_VALUES {
        return refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request holds about {values} JSON values; at most {MAX_REQUEST_VALUES} are read"
            ),
        );
    }
    // An `initialize` is held to the opening bound whatever its headers: rmcp keeps the
    // parameters of the latest one for the session's life, so a second one on an open
    // session (with its id) would otherwise keep 4 MiB a session.
    if !opening && bytes.len() > MAX_OPENING_BYTES && is_initialize(&bytes) {
        return refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("an initialize may have at most {MAX_OPENING_BYTES} bytes"),
        );
    }
    // A place only once the body is here: a client that sends a head and never its body
    // holds a connection (until the body deadline), not one of these.
    let Ok(place) = in_flight.try_acquire_owned() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_REQUESTS_AT_ONCE} requests are being answered, the most this server answers at once; retry shortly"
            ),
        );
    };
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let response = next.run(request).await;
    // The place is held until the answer (often a stream) has been sent.
    response.map(|body| {
        axum::body::Body::from_stream(crate::host::serve::holding(body.into_data_stream(), place))
    })
}

/// Whether a JSON-RPC body is (or, as a batch, holds) an `initialize` request. Read after
/// the body's size is bounded.
fn is_initialize(bytes: &[u8]) -> bool {
    // Other fields are skipped as they are read, never kept (no untagged enum, which
    // would buffer the whole body as values first).
    #[derive(serde::Deserialize)]
    struct Method {
        method: Option<String>,
    }
    let initialize = |m: &Method| m.method.as_deref() == Some("initialize");
    let batch = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    // Not JSON-RPC at all: rmcp refuses it, and nothing is kept.
    if batch {
        serde_json::from_slice::<Vec<Method>>(bytes).is_ok_and(|all| all.iter().any(initialize))
    } else {
        serde_json::from_slice::<Method>(bytes).is_ok_and(|m| initialize(&m))
    }
}

impl McpHost {
    pub fn new(parts: ServeParts) -> Result<Arc<Self>> {
        let current = build(&parts, &parts.dispatcher.catalog())?;
        Ok(Arc::new(McpHost {
            parts,
            current: RwLock::new(current),
            peers: Mutex::new(Vec::new()),
            runs: AtomicU64::new(0),
            calls: Arc::new(tokio::sync::Semaphore::new(MAX_CALLS_AT_ONCE)),
        }))
    }

    /// The surface tools as MCP lists them now.
    pub fn tools(&self) -> Vec<Tool> {
        self.current.read().tools.clone()
    }

    /// Rebuilds the surface whenever `catalog` changes, telling clients when their list
    /// changed. Ends when the sender is gone.
    pub fn follow(self: &Arc<Self>, mut catalog: tokio::sync::watch::Receiver<Arc<Catalog>>) {
        let host = Arc::downgrade(self);
        tokio::spawn(async move {
            while catalog.changed().await.is_ok() {
                let latest = Arc::clone(&catalog.borrow_and_update());
                let Some(host) = host.upgrade() else { return };
                // Off the runtime's workers, as the catalog's build is (review 23 F2).
                let building = Arc::clone(&host);
                let next = tokio::task::spawn_blocking(move || build(&building.parts, &latest))
                    .await
                    .unwrap_or_else(|e| Err(crate::error::Error::Unavailable(e.to_string())));
                match next {
                    Ok(next) => {
                        let changed = {
                            let mut cur = host.current.write();
                            let changed = cur.tools != next.tools;
                            *cur = next;
                            changed
                        };
                        if changed {
                            host.notify_tools_changed().await;
                        }
                    }
                    Err(e) => tracing::warn!("mcp serve: surface not rebuilt: {e}"),
                }
            }
        });
    }

    async fn notify_tools_changed(&self) {
        let peers: Vec<Peer<RoleServer>> = {
            let mut p = self.peers.lock();
            p.retain(|peer| !peer.is_transport_closed());
            p.clone()
        };
        // Each in its own task, bounded: a client that does not read its stream must not
        // hold up the others (or the next rebuild).
        for peer in peers {
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), peer.notify_tool_list_changed())
                        .await;
            });
        }
    }

    /// Serves one client on stdin/stdout until it closes them.
    pub async fn serve_stdio(self: Arc<Self>) -> Result<()> {
        let in_flight = stdio::InFlight::new();
        let running = Handler::new(self, Some(Arc::clone(&in_flight)))
            .serve((
                stdio::filtered(tokio::io::stdin(), Arc::clone(&in_flight)),
                stdio::answers(tokio::io::stdout(), in_flight),
            ))
            .await
            .map_err(|e| Error::Serve(e.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    }

    /// Serves streamable HTTP at `/mcp` until `shutdown` resolves.
    pub async fn serve_http(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
        let stop = tokio_util::sync::CancellationToken::new();
        let host = Arc::clone(&self);
        let bounded = Arc::new(sessions::Bounded::new(sessions::MAX_SESSIONS));
        let service = StreamableHttpService::new(
            move || Ok(Handler::new(Arc::clone(&host), None)),
            Arc::clone(&bounded),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        // rmcp checks the Host too; the shared guard adds Origin and Content-Type.
        let guard = crate::host::guard::Guard::at(
            listener
                .local_addr()
                .map_err(|e| Error::Serve(e.to_string()))?,
            &self.parts.config.server.allowed_origins,
            crate::host::guard::Guard::plain,
        );
        let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_REQUESTS_AT_ONCE));
        let app =
            axum::Router::new()
                .route_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        bounded_request(Arc::clone(&bounded), Arc::clone(&in_flight), request, next)
                    },
                ));
        let stopping = stop.clone();
        let limits = crate::host::serve::Limits::of(&self.parts.config.server);
        crate::host::serve::serve(listener, app, guard, limits, async move {
            shutdown.await;
            stopping.cancel();
        })
        .await
        .map_err(|e| Error::Serve(e.to_string()))
    }
}

/// The surface for `catalog`, as MCP tools and an agent that runs their calls.
fn build(parts: &ServeParts, catalog: &Arc<Catalog>) -> Result<Current> {
    // No prompt and no likely schemas: an MCP server does not see the conversation.
    let options = surface::Options {
        likely: 0,
        ..surface::Options::new(
            &parts.config,
            parts.mode,
            parts.sandbox.as_ref().map(|_| ()).map_err(Clone::clone),
            "",
            catalog.settings().code_timeout_ms,
        )
    };
    let surface: Surface = surface::build(catalog, &options)?;
    let tools = surface
        .tools
        .iter()
        .map(|t| {
            let schema = match &t.parameters {
                Value::Object(m) => m.clone(),
                _ => serde_json::Map::new(),
            };
            Tool::new(t.name.clone(), t.description.clone(), Arc::new(schema))
        })
        .collect();
    let instructions = if surface.system.is_empty() {
        INSTRUCTIONS.to_string()
    } else {
        surface.system.clone()
    };
    let agent = Agent::new(
        Arc::clone(&parts.dispatcher),
        surface,
        parts.sandbox.as_ref().ok().cloned(),
        Duration::from_millis(catalog.settings().code_timeout_ms),
        parts.config.provider.max_rounds,
    )
    .with_spares(parts.spares.clone());
    Ok(Current {
        agent: Arc::new(agent),
        tools,
        instructions,
    })
}

/// The requests a client may send (MCP 2025-06-18), which rmcp reads by their types.
const MCP_CLIENT_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];

/// One client session's handler: the host, whether the session's peer is among those
/// told of tool changes, and on stdio the requests in flight, whose cancellations the
/// line filter takes instead of rmcp ([`stdio::InFlight::cancel`]).
#[derive(Clone)]
struct Handler(
    Arc<McpHost>,
    Arc<std::sync::atomic::AtomicBool>,
    Option<Arc<stdio::InFlight>>,
);

impl Handler {
    fn new(host: Arc<McpHost>, stdio: Option<Arc<stdio::InFlight>>) -> Self {
        Handler(host, Arc::default(), stdio)
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolsearch", env!("CARGO_PKG_VERSION")))
        .with_instructions(self.0.current.read().instructions.clone())
    }

    /// A line the stdio front refused ([`stdio::REFUSED`]) is answered with its reason;
    /// any other method no one knows, as rmcp would.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _: RequestContext<RoleServer>,
    ) -> std::result::Result<rmcp::model::CustomResult, ErrorData> {
        if request.method == stdio::REFUSED {
            let reason = request
                .params
                .as_ref()
                .and_then(|p| p.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("refused");
            return Err(ErrorData::invalid_request(reason.to_string(), None));
        }
        // A method rmcp knows lands here when its params do not read as its type: that is
        // invalid params, not an unknown method (front round 25 F3: `tools/call` with
        // `arguments: "x"` was answered "method not found").
        if MCP_CLIENT_METHODS.contains(&request.method.as_str()) {
            let why = match (request.method.as_str(), request.params) {
                ("tools/call", Some(params)) => {
                    serde_json::from_value::<CallToolRequestParams>(params)
                        .err()
                        .map(|e| crate::shown::head(&e.to_string(), 300).to_string())
                }
                _ => None,
            };
            return Err(ErrorData::invalid_params(
                format!(
                    "invalid params for `{}`: {}",
                    request.method,
                    why.as_deref().unwrap_or("they do not read as the method's")
                ),
                None,
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A session is told of changes once, however often its client says `initialized`:
        // each repeat was an entry more, scanned by every later one (80,000 repeats held
        // the server 7 s) and sent its own `list_changed` at every change (review 24 F1).
        if self.1.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut peers = self.0.peers.lock();
        // Closed sessions go here too, so a long-lived server whose catalog never changes
        // does not keep one entry per session it ever had.
        peers.retain(|p| !p.is_transport_closed());
        peers.push(context.peer);
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        // One page: the surface is a few tools except in direct mode, which is for small
        // catalogs.
        Ok(ListToolsResult::with_all_items(self.0.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let agent = Arc::clone(&self.0.current.read().agent);
        if !agent.surface().tools.iter().any(|t| t.name == request.name) {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`: call tools/list",
                    crate::catalog::compact::cut(&request.name, 200)
                ),
                None,
            ));
        }
        let Ok(_place) = Arc::clone(&self.0.calls).try_acquire_owned() else {
            let busy = serde_json::json!({"ok": false, "error": {
                "code": "busy",
                "message": format!("{MAX_CALLS_AT_ONCE} tool calls are running, the most this server runs at once; call again when one has finished"),
            }});
            return Ok(CallToolResult::error(vec![ContentBlock::text(busy.to_string())]).into());
        };
        let run = self.0.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let args = Value::Object(request.arguments.unwrap_or_default());
        // On stdio a client's cancel reaches the call through the line filter; rmcp's own
        // token then only ends with the session.
        let cancel = match &self.2 {
            Some(in_flight) => in_flight.cancel_of(&context.id, &context.ct),
            None => context.ct.clone(),
        };
        // A panic is a bug; its call is still answered, so the client's wait ends and the
        // places it held (this server's, and a stdio line's) are given back (sandbox round
        // 27 F1: 64 panicked calls left no place, and the server answered nothing more).
        let ran = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(agent.run_tool(
            &request.name,
            args,
            &format!("mcp-{run}"),
            cancel,
        )))
        .await;
        let Ok((text, is_error)) = ran else {
            tracing::error!("mcp serve: a call of `{}` panicked", request.name);
            return Err(ErrorData::internal_error(
                "toolsearch failed while running this call (a bug: its log says where)",
                None,
            ));
        };
        let content = vec![ContentBlock::text(text)];
        Ok(if is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }
}
