//! Upstream MCP servers: started, listed, called, watched, stopped.
//!
//! A [`Hub`] holds every server of `[mcp.servers]`. [`Hub::start`] starts them all at once
//! (each within its `startup_timeout_ms`: spawn or connect, `initialize`, every page of
//! `tools/list`); the host then builds its catalog from [`Hub::snapshot`], which gives the
//! tools of the servers that are up and, for each server that is not, why: the planner
//! hides a down server's tools and a call to one says the server is unavailable, by name.
//!
//! A stdio server is our own child process (not rmcp's process wrapper): its own process
//! group, so a server started through `npx` (npm, a shell, then node) dies whole; the
//! environment is the configured `env` plus a few variables of the host (PATH, HOME, ...),
//! never the rest (the host's API keys stay out); stderr kept as a short tail for the
//! message that names a failure. Stopping is SIGTERM to the group, a short grace, then
//! SIGKILL to the group; a dropped hub (a one-shot command ending) kills at once.
//!
//! `notifications/tools/list_changed` makes the hub list that server again and bump its
//! generation ([`Hub::subscribe`]); hosts rebuild their catalog on every bump, and also
//! when a server dies.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, ContentBlock, Implementation, PaginatedRequestParams, ResourceContents,
    ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::catalog::ToolDescriptor;
use crate::catalog::load::mcp_server_tools;
use crate::config::{McpConfig, McpServerConfig, McpTransport};
use crate::executors::{ExecCall, ExecFuture, Executor, ToolOutput};
use crate::process::{Group, Leader, StderrTail};

/// Bounds on what one server may list.
pub mod limits {
    pub const MAX_PAGES: usize = 100;
    pub const MAX_TOOLS: usize = 10_000;
    /// The JSON bytes of one server's whole listing. The host holds about 4.5 times a
    /// listing's size (145 MB listed took 800 MB resident; within the page and tool bounds
    /// a listing could reach ~1.45 GB, ~6 GB held: review 18); 16 MiB is ~1,600 tools of
    /// 10 KiB schemas.
    pub const MAX_LISTING_BYTES: usize = 16 << 20;
    /// Characters of a server's stderr kept for the message naming its failure.
    pub const STDERR_TAIL_CHARS: usize = 600;
    /// Between SIGTERM and SIGKILL when the host stops.
    pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(300);
    /// One line (one JSON-RPC message) of a stdio server: rmcp's own bound, which drops a
    /// longer line and waits on; [`super::LineBound`] closes the connection at it instead.
    pub const MAX_LINE_BYTES: usize = 16 << 20;
}

/// Host variables a stdio server gets besides its configured `env` (what MCP clients
/// commonly pass: enough for `npx`, `uvx` and a shell to work).
const HOST_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR",
];

/// Every configured server.
pub struct Hub {
    servers: BTreeMap<String, Arc<Upstream>>,
    generation: watch::Sender<u64>,
    stop: CancellationToken,
}

struct Upstream {
    config: McpServerConfig,
    state: parking_lot::Mutex<State>,
    /// The process group of a stdio server (none before its spawn), signalled by the hub
    /// when it stops while the server's watcher owns the process.
    group: parking_lot::Mutex<Group>,
    /// Set when a stdio server sent a line past [`limits::MAX_LINE_BYTES`] and its
    /// connection was closed for it: the calls that fail with it say why.
    line_too_long: Arc<std::sync::atomic::AtomicBool>,
}

enum State {
    Up {
        peer: Peer<RoleClient>,
        tools: Vec<ToolDescriptor>,
        skipped: Vec<String>,
        protocol: String,
    },
    Down {
        why: String,
    },
}

/// One server, for `catalog` and `doctor`-like reports.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    pub up: bool,
    pub tools: usize,
    /// Why it is down, or the tools it listed that were left out.
    pub notes: Vec<String>,
    pub protocol: Option<String>,
}

/// Forwards `tools/list_changed` to the hub's event loop (listing again from inside the
/// notification handler would wait on the very service task that runs it).
#[derive(Clone)]
struct Handler {
    name: String,
    events: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.events.send(self.name.clone());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolsearch", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// The runtime the upstream servers' connections run on, apart from the host's own.
///
/// Their traffic is theirs to size: rmcp decodes each message where its connection runs,
/// and a server of 10,000 tools that says `list_changed` every 100 ms sends 10 MB to
/// decode each time. On the host's two workers that decoding held every sandbox run's
/// deadline up by up to 0.7 s (review 23 F2), after the rebuilds had moved to blocking
/// threads. Here it takes one thread of its own; the host's calls reach it through rmcp's
/// channels, which work across runtimes. Without a thread to spare, the host's runtime.
fn upstream_runtime() -> tokio::runtime::Handle {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("mcp-upstream")
                .enable_all()
                .build()
                .map_err(|e| {
                    tracing::warn!("mcp: no runtime of their own for upstream servers ({e})")
                })
                .ok()
        })
        .as_ref()
        .map_or_else(tokio::runtime::Handle::current, |r| r.handle().clone())
}

impl Hub {
    /// Starts every server and waits until each is up or has failed (none waits longer
    /// than its own startup timeout). Their connections run on [`upstream_runtime`].
    pub async fn start(config: &McpConfig) -> Arc<Hub> {
        if config.servers.is_empty() {
            return Hub::start_here(config).await;
        }
        let owned = config.clone();
        match upstream_runtime()
            .spawn(async move { Hub::start_here(&owned).await })
            .await
        {
            Ok(hub) => hub,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled only when its runtime shuts down, which the static one never does.
            Err(_) => Hub::start_here(config).await,
        }
    }

    async fn start_here(config: &McpConfig) -> Arc<Hub> {
        let (events, mut incoming) = mpsc::unbounded_channel::<String>();
        let servers: BTreeMap<String, Arc<Upstream>> = config
            .servers
            .values()
            .map(|c| {
                (
                    c.name.clone(),
                    Arc::new(Upstream {
                        config: c.clone(),
                        state: parking_lot::Mutex::new(State::Down {
                            why: "starting".into(),
                        }),
                        group: Default::default(),
                        line_too_long: Default::default(),
                    }),
                )
            })
            .collect();
        let hub = Arc::new(Hub {
            servers,
            generation: watch::channel(0).0,
            stop: CancellationToken::new(),
        });
        let starts = hub.servers.values().map(|up| {
            let weak = Arc::downgrade(&hub);
            let up = Arc::clone(up);
            let events = events.clone();
            let stop = hub.stop.clone();
            async move { up.connect(weak, events, stop).await }
        });
        futures::future::join_all(starts).await;
        let weak = Arc::downgrade(&hub);
        let stop = hub.stop.clone();
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    _ = stop.cancelled() => return,
                    n = incoming.recv() => match n { Some(n) => n, None => return },
                };
                // Every notification queued meanwhile is served by one listing per server:
                // a server that floods list_changed costs one relist per round, not one each.
                let mut names = std::collections::BTreeSet::from([name]);
                while let Ok(n) = incoming.try_recv() {
                    names.insert(n);
                }
                let Some(hub) = weak.upgrade() else { return };
                for name in names {
                    if let Some(up) = hub.servers.get(&name) {
                        up.relist().await;
                    }
                }
                hub.bump();
            }
        });
        hub
    }

    /// Bumped whenever a server's tools or state changed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// The tools of the servers that are up, and `mcp:NAME` → why for each that is not,
    /// together (one lock per server, so a tool list and its server's state agree).
    pub fn snapshot(&self) -> (Vec<ToolDescriptor>, BTreeMap<String, String>) {
        let mut tools = Vec::new();
        let mut down = BTreeMap::new();
        for (name, up) in &self.servers {
            match &*up.state.lock() {
                State::Up { tools: t, .. } => tools.extend(t.iter().cloned()),
                State::Down { why } => {
                    down.insert(
                        format!("mcp:{name}"),
                        format!("MCP server `{name}` is unavailable: {why}"),
                    );
                }
            }
        }
        (tools, down)
    }

    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers
            .iter()
            .map(|(name, up)| match &*up.state.lock() {
                State::Up {
                    tools,
                    skipped,
                    protocol,
                    ..
                } => ServerStatus {
                    name: name.clone(),
                    up: true,
                    tools: tools.len(),
                    notes: skipped.clone(),
                    protocol: Some(protocol.clone()),
                },
                State::Down { why } => ServerStatus {
                    name: name.clone(),
                    up: false,
                    tools: 0,
                    notes: vec![why.clone()],
                    protocol: None,
                },
            })
            .collect()
    }

    /// Stops every server: SIGTERM to each stdio server's group, a short grace, SIGKILL.
    pub async fn stop(&self) {
        self.stop.cancel();
        for up in self.servers.values() {
            up.signal(nix::sys::signal::Signal::SIGTERM);
        }
        // Each server's watcher kills its group after the grace and reaps it; this waits
        // for them, and kills what is left if a watcher is stuck.
        let deadline = Instant::now() + limits::STOP_GRACE + Duration::from_millis(500);
        while Instant::now() < deadline
            && self.servers.values().any(|u| u.group.lock().id().is_some())
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for up in self.servers.values() {
            up.signal(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.cancel();
        for up in self.servers.values() {
            up.signal(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// The transport's `initialize` and the paged `tools/list`, or why not.
type Connected = (RunningService<RoleClient, Handler>, Vec<Value>);

impl Upstream {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        self.group.lock().signal(signal);
    }

    fn set_down(&self, why: String) {
        tracing::warn!("mcp: server `{}` is unavailable: {why}", self.name());
        *self.state.lock() = State::Down { why };
    }

    async fn connect(
        self: Arc<Self>,
        hub: Weak<Hub>,
        events: mpsc::UnboundedSender<String>,
        stop: CancellationToken,
    ) {
        let handler = Handler {
            name: self.name().to_string(),
            events,
        };
        let timeout = Duration::from_millis(self.config.startup_timeout_ms);
        match &self.config.transport {
            McpTransport::Stdio { .. } => {
                let (mut child, stderr) = match self.spawn() {
                    Ok(c) => c,
                    Err(why) => return self.set_down(why),
                };
                let (Some(stdin), Some(stdout), _) = child.take_stdio() else {
                    return self.set_down("no stdio pipes".into());
                };
                let started = tokio::time::timeout(timeout, async {
                    let stdout = LineBound::new(stdout, Arc::clone(&self.line_too_long));
                    let service = handler
                        .serve((stdout, stdin))
                        .await
                        .map_err(|e| e.to_string())?;
                    let tools = list_all(service.peer()).await?;
                    Ok::<Connected, String>((service, tools))
                })
                .await;
                let started = match started {
                    Ok(Ok(s)) => Ok(s),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(format!("did not start within {} ms", timeout.as_millis())),
                };
                match started {
                    Ok((service, tools)) => {
                        self.up(&service, tools);
                        let me = Arc::clone(&self);
                        tokio::spawn(async move {
                            me.watch_child(service, child, stderr, hub, stop).await
                        });
                    }
                    Err(e) => {
                        let status = child.kill_and_reap().await.ok();
                        let tail = tail_of(stderr).await;
                        let exited = match status {
                            Some(_) if e.contains("did not start") => String::new(),
                            Some(s) => format!(" (exit: {s})"),
                            None => String::new(),
                        };
                        self.set_down(format!("{e}{exited}{tail}"));
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                let started = tokio::time::timeout(timeout, async {
                    let client = super::http_client::HttpClient::new(headers, timeout)?;
                    let transport =
                        rmcp::transport::StreamableHttpClientTransport::with_client(
                            client,
                            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                                url.as_str(),
                            ),
                        );
                    let service = handler
                        .serve(transport)
                        .await
                        .map_err(|e| e.to_string())?;
                    let tools = list_all(service.peer()).await?;
                    Ok::<Connected, String>((service, tools))
                })
                .await;
                match started {
                    Ok(Ok((service, tools))) => {
                        self.up(&service, tools);
                        let me = Arc::clone(&self);
                        tokio::spawn(async move {
                            let why = tokio::select! {
                                _ = stop.cancelled() => None,
                                r = service.waiting() => Some(match r {
                                    Ok(reason) => format!("the connection ended ({reason:?})"),
                                    Err(e) => format!("the connection ended ({e})"),
                                }),
                            };
                            if let Some(why) = why {
                                me.set_down(why);
                                if let Some(hub) = hub.upgrade() {
                                    hub.bump();
                                }
                            }
                        });
                    }
                    Ok(Err(e)) => self.set_down(format!("{url}: {e}")),
                    Err(_) => self.set_down(format!(
                        "{url}: did not answer within {} ms",
                        timeout.as_millis()
                    )),
                }
            }
        }
    }

    fn up(&self, service: &RunningService<RoleClient, Handler>, tools: Vec<Value>) {
        let (tools, skipped) = mcp_server_tools(self.name(), tools);
        for s in &skipped {
            tracing::warn!("mcp: server `{}`: {s}", self.name());
        }
        let protocol = service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        *self.state.lock() = State::Up {
            peer: service.peer().clone(),
            tools,
            skipped,
            protocol,
        };
    }

    /// Starts a stdio server as the leader of its own group, and keeps the tail of its
    /// stderr.
    fn spawn(&self) -> Result<(Leader, StderrTail), String> {
        let McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &self.config.transport
        else {
            return Err("not a stdio server".into());
        };
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args).env_clear();
        for var in HOST_VARS {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        cmd.envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        // The group dies with the host too: a host killed outright still takes its servers
        // with it.
        let mut child =
            Leader::spawn(&mut cmd).map_err(|e| format!("cannot start `{command}`: {e}"))?;
        *self.group.lock() = child.group().clone();
        let tail = child.keep_stderr_tail(limits::STDERR_TAIL_CHARS);
        Ok((child, tail))
    }

    /// Waits for the server to go (its connection closes or it exits), then marks it
    /// down with its exit status and the end of its stderr, and reaps it.
    async fn watch_child(
        self: Arc<Self>,
        service: RunningService<RoleClient, Handler>,
        mut child: Leader,
        stderr: StderrTail,
        hub: Weak<Hub>,
        stop: CancellationToken,
    ) {
        let ended = tokio::select! {
            _ = stop.cancelled() => false,
            _ = service.waiting() => true,
        };
        // Let the leader exit by itself first (when stopping, the hub sent SIGTERM; when
        // the connection closed, it is on its way out), then kill the whole group before
        // reaping: members that outlived the leader die too, and the group id is still
        // reserved while the leader is unreaped.
        let grace = if ended {
            Duration::from_millis(500)
        } else {
            limits::STOP_GRACE
        };
        let _ = tokio::time::timeout(grace, child.exited()).await;
        let status = child.kill_and_reap().await.ok();
        if !ended {
            return;
        }
        let tail = tail_of(stderr).await;
        let how = match status {
            _ if self
                .line_too_long
                .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                line_too_long_message()
            }
            Some(s) => format!("it exited ({s})"),
            None => "its connection closed".to_string(),
        };
        self.set_down(format!("{how}{tail}"));
        if let Some(hub) = hub.upgrade() {
            hub.bump();
        }
    }

    /// After `tools/list_changed`: the new list; if the server cannot give one, its previous
    /// tools stay (it is not marked down: the watcher reports a death, this does not).
    async fn relist(&self) {
        let peer = match &*self.state.lock() {
            State::Up { peer, .. } => peer.clone(),
            State::Down { .. } => return,
        };
        let timeout = Duration::from_millis(self.config.startup_timeout_ms);
        match tokio::time::timeout(timeout, list_all(&peer)).await {
            Ok(Ok(tools)) => {
                // Each schema's cost is checked: seconds for 10,000 tools, kept off the
                // runtime's workers (review 23 F2).
                let name = self.name().to_string();
                let Ok((tools, skipped)) =
                    tokio::task::spawn_blocking(move || mcp_server_tools(&name, tools)).await
                else {
                    return;
                };
                if let State::Up {
                    tools: t,
                    skipped: s,
                    ..
                } = &mut *self.state.lock()
                {
                    *t = tools;
                    *s = skipped;
                }
            }
            // The server is still connected (its death is the watcher's to report): keep
            // the list it gave before, and list again at its next list_changed.
            Ok(Err(e)) => tracing::warn!(
                "mcp: server `{}`: tools/list after list_changed failed ({e}); keeping its previous tools",
                self.name()
            ),
            Err(_) => tracing::warn!(
                "mcp: server `{}`: tools/list after list_changed took over {} ms; keeping its previous tools",
                self.name(),
                timeout.as_millis()
            ),
        }
    }

    async fn call(&self, tool: &str, args: &Value, cancel: &CancellationToken) -> ToolOutput {
        let name = self.name();
        let details = |status: &str| json!({"status": status, "source": "mcp", "server": name});
        let peer = match &*self.state.lock() {
            State::Up { peer, .. } => peer.clone(),
            State::Down { why } => {
                return ToolOutput::error(
                    format!("MCP server `{name}` is unavailable: {why}"),
                    details("unavailable"),
                );
            }
        };
        let arguments = match args {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            other => {
                return ToolOutput::error(
                    format!(
                        "MCP tools take an object of arguments, not {}",
                        crate::error::json_type_name(other)
                    ),
                    details("invalid-arguments"),
                );
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let timeout = Duration::from_millis(self.config.call_timeout_ms);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await;
        let handle = match sent {
            Ok(h) => h,
            Err(e) => return self.failed(e, details("unavailable")),
        };
        // A caller that stops waiting (its run ended, its turn was aborted, or the future
        // was dropped) tells the server, which may still be doing the work (review 20 F2: a
        // call the client had given up on finished its side effect 5 s later, and a model
        // that retried did it twice). Disarmed once an answer (or rmcp's own timeout, which
        // says it itself) came.
        let mut told = CancelUpstream {
            peer: Some(handle.peer.clone()),
            id: handle.id.clone(),
        };
        let answer = tokio::select! {
            r = handle.await_response() => {
                told.peer = None;
                r
            }
            _ = cancel.cancelled() => {
                // Said now, not left to a task a one-shot host may exit before.
                told.send_now().await;
                return ToolOutput::error("the call was cancelled", details("cancelled"));
            }
        };
        match answer {
            Ok(ServerResult::CallToolResult(r)) => output(name, tool, r),
            Ok(_) => ToolOutput::error(
                format!("MCP server `{name}` answered tools/call with something else"),
                details("protocol"),
            ),
            Err(ServiceError::Timeout { .. }) => ToolOutput::error(
                format!(
                    "MCP server `{name}`: tools/call `{tool}` timed out after {} ms",
                    timeout.as_millis()
                ),
                details("timeout"),
            ),
            Err(e) => self.failed(e, details("error")),
        }
    }

    fn failed(&self, e: ServiceError, details: Value) -> ToolOutput {
        let name = self.name();
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                let mut d = details;
                d["status"] = json!("unavailable");
                let why = if self
                    .line_too_long
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    line_too_long_message()
                } else {
                    "its connection closed".to_string()
                };
                ToolOutput::error(format!("MCP server `{name}` is unavailable: {why}"), d)
            }
            ServiceError::McpError(err) => ToolOutput::error(
                format!("MCP server `{name}`: {} (code {})", err.message, err.code.0),
                details,
            ),
            other => ToolOutput::error(format!("MCP server `{name}`: {other}"), details),
        }
    }
}

/// Every page of `tools/list`, within the bounds.
async fn list_all(peer: &Peer<RoleClient>) -> Result<Vec<Value>, String> {
    let mut tools = Vec::new();
    let mut bytes = 0usize;
    let mut cursor: Option<String> = None;
    for _ in 0..limits::MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        // A page may hold thousands of tools and megabytes: written as values off the
        // runtime's workers (review 23 F2).
        let (values, page_bytes) = tokio::task::spawn_blocking(move || {
            let mut values = Vec::with_capacity(page.tools.len());
            let mut bytes = 0usize;
            for t in page.tools {
                let value = serde_json::to_value(&t).map_err(|e| e.to_string())?;
                bytes += serde_json::to_vec(&value).map_or(0, |v| v.len());
                values.push(value);
            }
            Ok::<_, String>((values, bytes))
        })
        .await
        .map_err(|e| e.to_string())??;
        bytes += page_bytes;
        tools.extend(values);
        if bytes > limits::MAX_LISTING_BYTES {
            return Err(format!(
                "listed more than {} MiB of tools; refused",
                limits::MAX_LISTING_BYTES >> 20
            ));
        }
        if tools.len() > limits::MAX_TOOLS {
            return Err(format!(
                "listed more than {} tools; refused",
                limits::MAX_TOOLS
            ));
        }
        match page.next_cursor {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(tools),
        }
    }
    Err(format!(
        "tools/list went on for more than {} pages; refused",
        limits::MAX_PAGES
    ))
}

/// The end of a stopped server's stderr for the message that marks it down, once the
/// reader has seen the pipe close (briefly: a grandchild may hold it open).
async fn tail_of(mut stderr: StderrTail) -> String {
    let tail = stderr.finished(Duration::from_millis(20)).await;
    let tail = tail.trim();
    if tail.is_empty() {
        return String::new();
    }
    format!("; stderr: {}", tail.replace('\n', " | "))
}

/// A `tools/call` result as the model reads it: the text blocks as text, other blocks
/// named by kind and size (their bytes stay out of the model's context), structured
/// content in the details.
fn output(server: &str, tool: &str, r: CallToolResult) -> ToolOutput {
    let mut text = Vec::new();
    for block in &r.content {
        match block {
            ContentBlock::Text(t) => text.push(t.text.clone()),
            ContentBlock::Image(i) => text.push(format!(
                "[image {}, {} bytes base64]",
                i.mime_type,
                i.data.len()
            )),
            ContentBlock::Audio(a) => text.push(format!(
                "[audio {}, {} bytes base64]",
                a.mime_type,
                a.data.len()
            )),
            ContentBlock::Resource(res) => match &res.resource {
                ResourceContents::TextResourceContents { uri, text: t, .. } => {
                    text.push(format!("[resource {uri}]\n{t}"))
                }
                ResourceContents::BlobResourceContents { uri, blob, .. } => {
                    text.push(format!("[resource {uri}, {} bytes base64]", blob.len()))
                }
                _ => text.push("[a resource of a kind this client does not know]".into()),
            },
            ContentBlock::ResourceLink(link) => text.push(format!("[link {}]", link.uri)),
            #[allow(unreachable_patterns)]
            _ => text.push("[content of a kind this client does not know]".to_string()),
        }
    }
    let mut details = json!({"source": "mcp", "server": server, "tool": tool});
    if let Some(s) = r.structured_content {
        details["structured_content"] = s;
    }
    ToolOutput {
        text: text.join("\n"),
        details,
        is_error: r.is_error.unwrap_or(false),
    }
}

impl Executor for Hub {
    fn run<'a>(&'a self, call: ExecCall<'a>) -> ExecFuture<'a> {
        Box::pin(async move {
            let Some(crate::catalog::ExecutorSpec::Mcp { server, tool }) =
                &call.entry.descriptor.executor
            else {
                return ToolOutput::error(
                    format!("`{}` is not an MCP tool", call.entry.id),
                    json!({"status": "error"}),
                );
            };
            match self.servers.get(server) {
                Some(up) => up.call(tool, call.args, &call.cancel).await,
                None => ToolOutput::error(
                    format!("MCP server `{server}` is not configured ([mcp.servers])"),
                    json!({"status": "unavailable", "source": "mcp", "server": server}),
                ),
            }
        })
    }
}

fn line_too_long_message() -> String {
    format!(
        "it sent a message longer than {} MiB (an answer too large for one line), and its connection was closed",
        limits::MAX_LINE_BYTES >> 20
    )
}

/// A stdio server's output with its lines bounded. rmcp drops a line past its bound and
/// reads on, so the call it answered waited out `call_timeout_ms` and was said to have
/// timed out (review 25); this ends the connection at the bound instead, so every call
/// waiting on the server fails at once, saying why, and the server is down like one that
/// died (its status says why).
struct LineBound<R> {
    inner: R,
    /// Bytes since the last newline.
    run: usize,
    too_long: Arc<std::sync::atomic::AtomicBool>,
}

impl<R> LineBound<R> {
    fn new(inner: R, too_long: Arc<std::sync::atomic::AtomicBool>) -> Self {
        too_long.store(false, std::sync::atomic::Ordering::Relaxed);
        LineBound {
            inner,
            run: 0,
            too_long,
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineBound<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_read(cx, buf))?;
        // The first piece goes on with the line already begun; each after a newline
        // begins one; the last is the line still going on.
        let mut pieces = buf.filled()[before..].split(|b| *b == b'\n');
        let mut run = self.run + pieces.next().map_or(0, <[u8]>::len);
        // rmcp counts the newline: a line of MAX bytes before it is past its bound.
        let mut over = run >= limits::MAX_LINE_BYTES;
        for piece in pieces {
            run = piece.len();
            over |= run >= limits::MAX_LINE_BYTES;
        }
        self.run = run;
        if over {
            self.too_long
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                line_too_long_message(),
            )));
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// Sends `notifications/cancelled` for a request when dropped armed: the one path every way
/// of no longer waiting goes through, a future dropped mid-await included.
struct CancelUpstream {
    peer: Option<Peer<RoleClient>>,
    id: rmcp::model::RequestId,
}

impl CancelUpstream {
    fn notification(&self) -> rmcp::model::ClientNotification {
        rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the caller stopped waiting".into()),
        ))
        .into()
    }

    /// Sends it now (within a second) and disarms.
    async fn send_now(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let sent = peer.send_notification(self.notification());
        let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
    }
}

impl Drop for CancelUpstream {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let notification = self.notification();
        runtime.spawn(async move {
            let _ = peer.send_notification(notification).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_text_name_other_blocks_and_keep_structured_content() {
        let mut r = CallToolResult::success(vec![
            ContentBlock::text("first"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::embedded_text("memo://1", "inside"),
        ]);
        r.structured_content = Some(json!({"n": 1}));
        let out = output("srv", "t", r);
        assert!(!out.is_error);
        assert_eq!(
            out.text,
            "first\n[image image/png, 8 bytes base64]\n[resource memo://1]\ninside"
        );
        assert_eq!(out.details["structured_content"], json!({"n": 1}));
        assert_eq!(out.details["server"], json!("srv"));
        let failed = output(
            "srv",
            "t",
            CallToolResult::error(vec![ContentBlock::text("bad")]),
        );
        assert!(failed.is_error);
        assert_eq!(failed.text, "bad");
    }

    #[test]
    fn a_hub_reports_each_server_that_cannot_start_and_hides_nothing_else() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = crate::config::Config::from_toml_str(
            "[mcp.servers.gone]\ncommand = \"/nonexistent/server\"\n",
            std::path::Path::new("/t/toolsearch.toml"),
        )
        .unwrap();
        let hub = rt.block_on(Hub::start(&config.mcp));
        let (tools, down) = hub.snapshot();
        assert!(tools.is_empty());
        assert!(
            down["mcp:gone"].contains("MCP server `gone` is unavailable: cannot start"),
            "{down:?}"
        );
        let status = hub.status();
        assert_eq!(status.len(), 1);
        assert!(!status[0].up);
    }
}
