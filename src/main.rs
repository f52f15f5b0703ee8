//! The `toolsearch` command line: parse, call the library, print, map errors to exit codes
//! (0 success; 1 a tool lookup or call failed or was refused; 2 bad usage, config or
//! catalog). Diagnostics go to stderr through `tracing` (`RUST_LOG`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use toolsearch::catalog::BatchQuery;
use toolsearch::config::Mode;
use toolsearch::dispatch::{CallRequest, Dispatcher, DispatcherBuilder};
use toolsearch::mcp::{Hub, Sources};
use toolsearch::policy::approval::CliApprover;
use toolsearch::sandbox::Sandbox;
use toolsearch::signals::shutdown as shutdown_signal;
use toolsearch::telemetry::{self, SessionLog};
use toolsearch::{Catalog, Config, Error, report};

#[derive(Parser)]
#[command(
    name = "toolsearch",
    version,
    about = "Tool search for agents: a large tool catalog behind search, describe and call"
)]
struct Cli {
    /// Configuration file (default: ./toolsearch.toml if present).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Catalog file or folder; repeatable. Default: [catalog] paths, else the embedded demo.
    #[arg(long = "catalog", value_name = "PATH")]
    catalogs: Vec<PathBuf>,
    /// The surface given to the model; overrides tools.toolSearch.
    #[arg(long, value_enum, global = true)]
    mode: Option<CliMode>,
    /// Where session logs go (default: $XDG_DATA_HOME/toolsearch or ~/.local/share/toolsearch).
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Session key: events append to sessions/KEY.jsonl (default: a new session per run).
    #[arg(long, value_name = "KEY", global = true)]
    session: Option<String>,
    /// Agent name, for per-agent mode overrides ([surface.agents]).
    #[arg(long, value_name = "NAME", global = true)]
    agent: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum QaCheck {
    /// Direct against tool search through the gateway and the mock provider.
    ToolSearchGatewayE2e {
        /// Fake plugin tools.
        #[arg(long, default_value_t = 36)]
        tools: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum CliMode {
    Code,
    Tools,
    Directory,
    Direct,
    Auto,
}

#[derive(Subcommand)]
enum Command {
    /// The effective catalog: cataloged, direct-only and hidden tools, counts by source.
    Catalog {
        #[arg(long)]
        json: bool,
    },
    /// Search the catalog; several queries make a batch, grouped in order.
    Search {
        #[arg(required = true, value_name = "QUERY")]
        queries: Vec<String>,
        /// Results per query (default searchDefaultLimit, clamped to maxSearchLimit).
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// One tool with its full input and output schemas, by id or exact unique name.
    Describe {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Call a tool through the full dispatch path and print the result envelope.
    Call {
        /// Tool id or exact unique name.
        id: String,
        /// Arguments as JSON, or `-` to read them from stdin (default `{}`).
        args: Option<String>,
        /// Approve calls to tools matching this pattern (repeatable); others needing
        /// approval are asked on the terminal, or denied when stdin is not one.
        #[arg(long, value_name = "PATTERN")]
        approve: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Run a tool_search_code body (JavaScript, an async function body) in the sandbox.
    Code {
        /// The body, or `-` to read it from stdin.
        body: String,
        /// Wall-clock limit (default tools.toolSearch.codeTimeoutMs; clamped to 1000..60000).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Approve calls to tools matching this pattern (repeatable).
        #[arg(long, value_name = "PATTERN")]
        approve: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// The exact request payload the model would get in this mode, with byte counts.
    Surface {
        /// openai-completions, openai-responses, anthropic or google.
        #[arg(long, default_value = "openai-responses")]
        provider: String,
        /// The user's prompt (scores directory mode's likely schemas).
        #[arg(long, default_value = "")]
        prompt: String,
        #[arg(long)]
        json: bool,
    },
    /// The HTTP gateway: POST /v1/responses runs one agent turn against [provider].
    Gateway {
        #[arg(long, default_value = "127.0.0.1:8788")]
        listen: String,
    },
    /// MCP: toolsearch as an MCP server.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// A scripted OpenAI-compatible provider for QA that records every request.
    MockProvider {
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: String,
        /// A scenario file scripting conversations other than the QA prompt.
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
        /// Append every request body to this JSONL file.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
    /// End-to-end QA.
    Qa {
        #[command(subcommand)]
        check: QaCheck,
    },
    /// What this host gives the sandbox: Node, each OS barrier, a cold run, an escape probe.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Retrieval quality of the search on a labelled data set.
    Eval {
        /// catalog.jsonl of the data set.
        #[arg(long = "catalog", value_name = "FILE")]
        catalog: PathBuf,
        /// queries.jsonl of the data set.
        #[arg(long, value_name = "FILE")]
        queries: PathBuf,
        /// Recall cut-offs.
        #[arg(long, value_delimiter = ',', default_value = "1,5,10")]
        k: Vec<usize>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum McpCommand {
    /// Serve the configured mode's surface (tool_search_code, or the structured tools,
    /// plus direct-only tools) over the merged catalog: on stdio, or streamable HTTP at
    /// http://ADDR/mcp with --listen.
    Serve {
        /// Serve streamable HTTP on this address instead of stdio.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Approve calls to tools matching this pattern (repeatable); other approvals are
        /// denied (stdin is the MCP channel, or there is no one to ask).
        #[arg(long, value_name = "PATTERN")]
        approve: Vec<String>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let json = match &cli.command {
        Command::Catalog { json }
        | Command::Search { json, .. }
        | Command::Describe { json, .. }
        | Command::Call { json, .. }
        | Command::Code { json, .. }
        | Command::Doctor { json }
        | Command::Surface { json, .. }
        | Command::Eval { json, .. } => *json,
        Command::Gateway { .. } | Command::MockProvider { .. } | Command::Mcp { .. } => false,
        Command::Qa {
            check: QaCheck::ToolSearchGatewayE2e { json, .. },
        } => *json,
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if json {
                print_json(&serde_json::json!({
                    "error": {"code": e.code(), "message": e.to_string()}
                }));
            }
            eprintln!("toolsearch: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// Clap's own errors (help and version included) print as clap prints them; with `--json`
/// anywhere on the line a usage error is also one JSON document on stdout.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if std::env::args_os().any(|a| a == "--json") {
        let message = e.kind().to_string();
        let detail = e.to_string();
        let first = detail
            .lines()
            .next()
            .unwrap_or(&message)
            .trim_start_matches("error: ");
        print_json(&serde_json::json!({"error": {"code": "usage", "message": first}}));
    }
    let _ = e.print();
    ExitCode::from(2)
}

/// The async runtime of the commands that need one (call, code, doctor, the servers, QA,
/// and any command once MCP servers are configured). One per process: the MCP servers'
/// connections live on it for the whole command.
fn runtime() -> Result<&'static tokio::runtime::Runtime, Error> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Usage(format!("cannot start the async runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// The local catalog and the upstream MCP servers (started now, all at once), and the
/// catalog built from them, following the servers.
#[allow(clippy::type_complexity)]
fn catalog_sources(
    config: &Config,
    catalogs: &[PathBuf],
) -> Result<(Arc<Sources>, tokio::sync::watch::Receiver<Arc<Catalog>>), Error> {
    let local = toolsearch::catalog::load_descriptors(config, catalogs)?;
    let hub = if config.mcp.servers.is_empty() {
        None
    } else {
        Some(runtime()?.block_on(Hub::start(&config.mcp)))
    };
    let needs_runtime = hub.is_some();
    let sources = Arc::new(Sources {
        config: config.clone(),
        local,
        hub,
    });
    let live = {
        let _on = runtime_if(needs_runtime)?.map(|rt| rt.enter());
        Arc::clone(&sources).live()?
    };
    Ok((sources, live))
}

/// The sandbox of a host whose mode may run code (code, auto): `Ok(None)` for the other
/// modes, `Err(why)` when code mode cannot run here (the surface then falls back).
fn code_sandbox(mode: Mode, config: &Config) -> Result<Option<Arc<Sandbox>>, String> {
    if !matches!(mode, Mode::Code | Mode::Auto) {
        return Ok(None);
    }
    Sandbox::from_config(&config.sandbox)
        .map(|s| Some(Arc::new(s)))
        .map_err(|e| e.message)
}

fn runtime_if(needed: bool) -> Result<Option<&'static tokio::runtime::Runtime>, Error> {
    if needed {
        runtime().map(Some)
    } else {
        Ok(None)
    }
}

fn cli_mode(m: Option<CliMode>) -> Option<Mode> {
    m.map(|m| match m {
        CliMode::Code => Mode::Code,
        CliMode::Tools => Mode::Tools,
        CliMode::Directory => Mode::Directory,
        CliMode::Direct => Mode::Direct,
        CliMode::Auto => Mode::Auto,
    })
}

/// The options every catalog command shares.
struct Globals {
    config: Option<PathBuf>,
    catalogs: Vec<PathBuf>,
    mode: Option<CliMode>,
    state_dir: Option<PathBuf>,
    session: Option<String>,
    agent: Option<String>,
}

/// What a catalog command works with.
struct Loaded {
    config: Config,
    dispatcher: Dispatcher,
    mode: Mode,
    /// The upstream MCP servers, stopped when this is dropped.
    hub: Option<Arc<Hub>>,
    /// The catalog as it follows the servers (hosts that outlive one command use it).
    catalog: tokio::sync::watch::Receiver<Arc<Catalog>>,
    /// What the catalog is rebuilt from; the rebuilding task holds it weakly, so it lives
    /// here.
    _sources: Arc<Sources>,
}

impl Globals {
    /// Loads the config, builds the catalog and opens the session (its log).
    fn load(&self, approve: &[String]) -> Result<Loaded, Error> {
        self.load_as(approve, true)
    }

    /// As [`Globals::load`]; `interactive: false` never asks for an approval on the
    /// terminal (only `approve` patterns pass).
    fn load_as(&self, approve: &[String], interactive: bool) -> Result<Loaded, Error> {
        let config = Config::load(self.config.as_deref())?;
        let mode =
            cli_mode(self.mode).unwrap_or_else(|| config.mode_for(self.agent.as_deref(), None));
        let (sources, live) = catalog_sources(&config, &self.catalogs)?;
        let hub = sources.hub.clone();
        let catalog = Arc::clone(&live.borrow());
        let state_dir = self
            .state_dir
            .clone()
            .unwrap_or_else(telemetry::default_state_dir);
        let session = self
            .session
            .clone()
            .unwrap_or_else(telemetry::new_session_id);
        let log = Arc::new(SessionLog::open(&state_dir, &session)?);
        let approver = Arc::new(if interactive {
            CliApprover::new(approve, catalog.toolsets())?
        } else {
            CliApprover::non_interactive(approve, catalog.toolsets())?
        });
        let dispatcher = DispatcherBuilder::live(live.clone())
            .config(&config)?
            .approver(approver)
            .executors(sources.executors())
            .session_log(log)
            .build();
        Ok(Loaded {
            config,
            dispatcher,
            mode,
            hub,
            catalog: live,
            _sources: sources,
        })
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    let globals = Globals {
        config: cli.config,
        catalogs: cli.catalogs,
        mode: cli.mode,
        state_dir: cli.state_dir,
        session: cli.session,
        agent: cli.agent,
    };
    match cli.command {
        Command::Catalog { json } => {
            let Loaded {
                config,
                dispatcher,
                mode,
                hub,
                ..
            } = globals.load(&[])?;
            let servers = hub.as_ref().map(|h| h.status()).unwrap_or_default();
            // Code mode needs a usable Node; without one the surface falls back to tools
            // mode, and the catalog says so.
            let code_mode = (mode == Mode::Code)
                .then(|| toolsearch::sandbox::code_mode_status(config.sandbox.node.as_deref()));
            let mode = match &code_mode {
                Some(status) if !status.available => Mode::Tools,
                _ => mode,
            };
            if let Some(status) = &code_mode {
                dispatcher.log().event(
                    "code_mode",
                    serde_json::to_value(status).unwrap_or_default(),
                );
            }
            let catalog = dispatcher.catalog();
            if json {
                let mut v =
                    serde_json::to_value(CatalogJson::of(&catalog, mode)).unwrap_or_default();
                if let Some(status) = &code_mode {
                    v["code_mode"] = serde_json::to_value(status).unwrap_or_default();
                }
                if !servers.is_empty() {
                    v["mcp_servers"] = serde_json::to_value(&servers).unwrap_or_default();
                }
                print_json(&v);
            } else {
                let mut text = report::catalog(&catalog, mode);
                match &code_mode {
                    Some(s) if s.available => {
                        if let Some(n) = &s.node {
                            text.push_str(&format!(
                                "\ncode mode: node {} at {} ({})\n",
                                n.version,
                                n.path.display(),
                                n.permission_flag
                            ));
                        }
                    }
                    Some(s) => text.push_str(&format!(
                        "\ncode mode unavailable ({}); falling back to tools mode\n",
                        s.reason.as_deref().unwrap_or("unknown reason")
                    )),
                    None => {}
                }
                text.push_str(&report::mcp_servers(&servers));
                print_text(&text);
            }
        }
        Command::Search {
            queries,
            limit,
            json,
        } => {
            let dispatcher = globals.load(&[])?.dispatcher;
            if let [query] = queries.as_slice() {
                let hits = dispatcher.search(query, limit)?;
                if json {
                    print_json(&hits);
                } else {
                    print_text(&report::search(&hits, query));
                }
            } else {
                let batch: Vec<BatchQuery> = queries
                    .into_iter()
                    .map(|query| BatchQuery { query, limit })
                    .collect();
                let result = dispatcher.search_batch(&batch)?;
                if json {
                    print_json(&result);
                } else {
                    print_text(&report::batch(&result));
                }
            }
        }
        Command::Describe { id, json } => {
            let d = globals.load(&[])?.dispatcher.describe(&id, "cli")?;
            if json {
                print_json(&d);
            } else {
                print_text(&report::describe(&d));
            }
        }
        Command::Call {
            id,
            args,
            approve,
            json,
        } => {
            let args = read_args(args.as_deref())?;
            let loaded = globals.load(&approve)?;
            let runtime = runtime()?;
            let envelope =
                runtime.block_on(loaded.dispatcher.call(CallRequest::new(id, args, "cli")))?;
            if json {
                print_json(&envelope);
            } else {
                print_text(&report::envelope(&envelope));
            }
            if envelope.result.is_error {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Code {
            body,
            timeout_ms,
            approve,
            json,
        } => {
            let body = if body == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| Error::Usage(format!("cannot read the code from stdin: {e}")))?;
                s
            } else {
                body
            };
            // The child's start (~85% of a run) overlaps the catalog's load and index: the
            // sandbox is prepared and its child brought to `ready` on the runtime while
            // this thread loads the catalog.
            let config = Config::load(globals.config.as_deref())?;
            let (lo, hi) = toolsearch::config::bounds::CODE_TIMEOUT_MS;
            let timeout = Duration::from_millis(
                timeout_ms
                    .unwrap_or(config.tools.tool_search.code_timeout_ms)
                    .clamp(lo, hi),
            );
            let runtime = runtime()?;
            let sandbox_config = config.sandbox.clone();
            let early = runtime.spawn(async move {
                let sandbox =
                    tokio::task::spawn_blocking(move || Sandbox::from_config(&sandbox_config))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.message)?;
                let child = sandbox.spawn(timeout).await.ok();
                Ok::<_, String>((sandbox, child))
            });
            let loaded = globals.load(&approve)?;
            let (sandbox, child) = runtime
                .block_on(early)
                .map_err(|e| Error::Unavailable(e.to_string()))?
                .map_err(Error::Unavailable)?;
            let dispatcher = Arc::new(loaded.dispatcher);
            let from = match child {
                Some(child) => toolsearch::code::ChildFrom::Ready(Box::new(child)),
                None => toolsearch::code::ChildFrom::Fresh,
            };
            let result = runtime.block_on(toolsearch::code::run_with(
                &sandbox,
                from,
                dispatcher,
                &body,
                timeout,
                "cli",
                tokio_util::sync::CancellationToken::new(),
            ));
            if json {
                print_json(&result);
            } else {
                print_text(&report::code(&result));
            }
            if !result.is_ok() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Surface {
            provider,
            prompt,
            json,
        } => {
            let provider = toolsearch::provider::Provider::parse(&provider)?;
            let loaded = globals.load(&[])?;
            // The CLI's --mode wins; else the agent's, then the provider's override.
            let mode = if globals.mode.is_some() {
                loaded.mode
            } else {
                loaded
                    .config
                    .mode_for(globals.agent.as_deref(), Some(provider.as_str()))
            };
            let catalog = loaded.dispatcher.catalog();
            let code_available = if matches!(mode, Mode::Code | Mode::Auto) {
                let status =
                    toolsearch::sandbox::code_mode_status(loaded.config.sandbox.node.as_deref());
                match status.reason {
                    Some(r) => Err(r),
                    None => Ok(()),
                }
            } else {
                Ok(())
            };
            let options = toolsearch::surface::Options {
                mode,
                code_available,
                prompt: &prompt,
                context_window: loaded.config.surface.context_window,
                likely: loaded
                    .config
                    .surface
                    .likely_schemas
                    .unwrap_or(toolsearch::surface::LIKELY_DEFAULT),
                required: &loaded.config.surface.required,
                code_timeout_ms: catalog.settings().code_timeout_ms,
            };
            let planned =
                toolsearch::surface::plan_request(&catalog, &options, provider, "", true)?;
            loaded.dispatcher.log().event(
                "request",
                serde_json::json!({
                    "summary": planned.summary,
                    "reasons": planned.surface.reasons,
                    "visible_schemas": planned.surface.visible_schemas(),
                    "catalog": catalog.counts(),
                }),
            );
            if json {
                print_json(&serde_json::json!({
                    "request": planned.body,
                    "summary": planned.summary,
                    "reasons": planned.surface.reasons,
                    "directory": planned.surface.directory,
                    "loaded": planned.surface.loaded,
                }));
            } else {
                print_text(&report::surface(&planned));
            }
        }
        Command::Gateway { listen } => {
            // As for mcp serve: signals are taken before the upstream servers start.
            let stop = {
                let _on = runtime()?.enter();
                shutdown_signal()
            };
            let config = Config::load(globals.config.as_deref())?;
            let mode = cli_mode(globals.mode).unwrap_or_else(|| {
                config.mode_for(
                    globals.agent.as_deref(),
                    Some(config.provider.kind.as_str()),
                )
            });
            let (sources, catalog) = catalog_sources(&config, &globals.catalogs)?;
            let provider = toolsearch::provider::Provider::parse(&config.provider.kind)?;
            let model =
                toolsearch::gateway::client::HttpModel::new(&config.provider).map_err(|e| {
                    Error::BadConfig {
                        file: config.file.clone().unwrap_or_else(|| "(defaults)".into()),
                        message: e,
                    }
                })?;
            let runtime = runtime()?;
            let (sandbox, code_unavailable) = match code_sandbox(mode, &config) {
                Ok(s) => (s, None),
                Err(e) => (None, Some(e)),
            };
            let state_dir = globals
                .state_dir
                .clone()
                .unwrap_or_else(telemetry::default_state_dir);
            let hub = sources.hub.clone();
            let gateway = toolsearch::gateway::server::Gateway::new(
                config,
                Arc::clone(&sources),
                catalog,
                mode,
                sandbox,
                code_unavailable,
                Arc::new(model),
                provider,
                state_dir,
            );
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(&listen)
                    .await
                    .map_err(|e| Error::Usage(format!("cannot listen on {listen}: {e}")))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| Error::Usage(e.to_string()))?;
                gateway.stop_on(stop);
                print_text(&format!("listening on http://{addr}\n"));
                let served = gateway
                    .serve(listener)
                    .await
                    .map_err(|e| Error::Usage(format!("gateway: {e}")));
                if let Some(hub) = hub {
                    hub.stop().await;
                }
                served
            })?;
        }
        Command::Mcp {
            command: McpCommand::Serve { listen, approve },
        } => {
            // No authentication: only this machine may connect.
            if let Some(listen) = &listen {
                let loopback = listen
                    .parse::<std::net::SocketAddr>()
                    .map(|a| a.ip().is_loopback())
                    .unwrap_or_else(|_| listen.starts_with("localhost:"));
                if !loopback {
                    return Err(Error::Usage(format!(
                        "mcp serve --listen {listen}: only a loopback address (127.0.0.1, [::1], localhost); it has no authentication"
                    )));
                }
            }
            // Signals are taken from here on: a SIGTERM while the upstream servers start
            // stops the host through its shutdown path (servers included) instead of
            // killing it and leaving their process groups behind.
            let stop = {
                let _on = runtime()?.enter();
                shutdown_signal()
            };
            let loaded = globals.load_as(&approve, false)?;
            let mode = loaded.mode;
            let runtime = runtime()?;
            let sandbox = code_sandbox(mode, &loaded.config)
                .and_then(|s| s.ok_or_else(|| format!("mode {} does not run code", mode.as_str())));
            let timeout =
                Duration::from_millis(loaded.dispatcher.catalog().settings().code_timeout_ms);
            let hub = loaded.hub.clone();
            runtime.block_on(async {
                let spares = match (&sandbox, loaded.config.sandbox.spares) {
                    (Ok(sb), n) if n > 0 => Some(toolsearch::sandbox::spares::SparePool::start(
                        Arc::clone(sb),
                        toolsearch::sandbox::spares::Sizing::of(&loaded.config.sandbox),
                        timeout,
                    )),
                    _ => None,
                };
                let host =
                    toolsearch::mcp::serve::McpHost::new(toolsearch::mcp::serve::ServeParts {
                        config: loaded.config.clone(),
                        mode,
                        dispatcher: Arc::new(loaded.dispatcher),
                        sandbox,
                        spares: spares.clone(),
                    })?;
                host.follow(loaded.catalog.clone());
                let served = match listen {
                    // MCP clients stop a stdio server by closing stdin or with SIGTERM.
                    None => {
                        let mut stop = std::pin::pin!(stop);
                        let served = tokio::select! {
                            biased;
                            _ = &mut stop => Ok(()),
                            r = host.serve_stdio() => r,
                        };
                        // A signal can end stdin's read (the transport then sees it closed)
                        // just before the signal itself is seen: that is a stop, not an error.
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
                    Some(listen) => {
                        let listener = tokio::net::TcpListener::bind(&listen)
                            .await
                            .map_err(|e| Error::Usage(format!("cannot listen on {listen}: {e}")))?;
                        let addr = listener
                            .local_addr()
                            .map_err(|e| Error::Usage(e.to_string()))?;
                        print_text(&format!("listening on http://{addr}/mcp\n"));
                        host.serve_http(listener, stop).await
                    }
                };
                if let Some(pool) = spares {
                    pool.stop();
                }
                if let Some(hub) = hub {
                    hub.stop().await;
                }
                served
            })?;
        }
        Command::MockProvider {
            listen,
            scenario,
            record,
        } => {
            use toolsearch::gateway::mock;
            let scenario = scenario.as_deref().map(mock::Scenario::load).transpose()?;
            let provider = mock::MockProvider::new(mock::MockOptions { scenario, record });
            let runtime = runtime()?;
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(&listen)
                    .await
                    .map_err(|e| Error::Usage(format!("cannot listen on {listen}: {e}")))?;
                let addr = listener
                    .local_addr()
                    .map_err(|e| Error::Usage(e.to_string()))?;
                let stop = tokio_util::sync::CancellationToken::new();
                let signal = stop.clone();
                let stopping = shutdown_signal();
                tokio::spawn(async move {
                    stopping.await;
                    signal.cancel();
                });
                print_text(&format!("listening on http://{addr}\n"));
                mock::serve(listener, provider, stop)
                    .await
                    .map_err(|e| Error::Usage(format!("mock provider: {e}")))
            })?;
        }
        Command::Qa {
            check: QaCheck::ToolSearchGatewayE2e { tools, json },
        } => {
            let bin = std::env::current_exe()
                .map_err(|e| Error::Usage(format!("cannot find this program: {e}")))?;
            let runtime = runtime()?;
            let report = runtime.block_on(toolsearch::qa::run(&bin, tools))?;
            if json {
                print_json(&report);
            } else {
                print_text(&toolsearch::qa::table(&report));
            }
            if !report.pass {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Doctor { json } => {
            let config = Config::load(globals.config.as_deref())?;
            let runtime = runtime()?;
            let sandbox = Sandbox::from_config(&config.sandbox);
            let sandbox = match sandbox {
                Ok(s) => s,
                Err(e) => {
                    if json {
                        print_json(&serde_json::json!({"usable": false, "error": e}));
                    } else {
                        print_text(&format!("code mode cannot run here: {}\n", e.message));
                    }
                    return Ok(ExitCode::from(1));
                }
            };
            let report = runtime.block_on(toolsearch::sandbox::doctor::run(&sandbox));
            if json {
                let mut v = serde_json::to_value(&report).unwrap_or_default();
                v["usable"] = serde_json::json!(report.usable());
                v["all_probes_blocked"] = serde_json::json!(report.all_blocked());
                print_json(&v);
            } else {
                print_text(&report::doctor(&report));
            }
            if !report.usable() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Eval {
            catalog,
            queries,
            k,
            json,
        } => eval(&catalog, &queries, &k, json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `call`'s arguments: JSON text, `-` for stdin, or `{}` when absent.
fn read_args(arg: Option<&str>) -> Result<serde_json::Value, Error> {
    let text = match arg {
        None => return Ok(serde_json::json!({})),
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| Error::Usage(format!("cannot read the arguments from stdin: {e}")))?;
            s
        }
        Some(text) => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "ARGS_JSON is not valid JSON ({e}); pass an object such as '{{\"title\": \"x\"}}'"
        ))
    })
}

/// `eval` needs no config or agent catalog: it indexes the data set alone.
fn eval(catalog: &Path, queries: &Path, k: &[usize], json: bool) -> Result<(), Error> {
    let r = toolsearch::eval::run(catalog, queries, k)?;
    if json {
        print_json(&r);
    } else {
        let name = catalog
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "set".into());
        print_text(&report::eval(&name, &r));
    }
    Ok(())
}

#[derive(Serialize)]
struct CatalogJson<'a> {
    mode: &'static str,
    counts: toolsearch::catalog::Counts,
    cataloged: Vec<&'a toolsearch::CompactDescriptor>,
    direct_only: Vec<&'a toolsearch::CompactDescriptor>,
    hidden: &'a [toolsearch::catalog::HiddenTool],
    notices: &'a [toolsearch::catalog::Notice],
    filtered: usize,
}

impl<'a> CatalogJson<'a> {
    fn of(c: &'a Catalog, mode: Mode) -> Self {
        CatalogJson {
            mode: mode.as_str(),
            counts: c.counts(),
            cataloged: c.cataloged().iter().map(|e| &e.compact).collect(),
            direct_only: c.direct_only().iter().map(|e| &e.compact).collect(),
            hidden: c.hidden(),
            notices: c.notices(),
            filtered: c.filtered(),
        }
    }
}

fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => print_text(&(s + "\n")),
        Err(e) => eprintln!("toolsearch: cannot serialize output: {e}"),
    }
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly instead of panicking.
fn print_text(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("toolsearch: cannot write output: {e}");
    }
}
