//! The CLI's commands, one function each: what `toolsearch COMMAND` does, on a [`Host`],
//! returning what it prints ([`Output`]) or serving until stopped. `main.rs` parses the
//! command line, calls one of these, prints and maps the result to an exit code.
//!
//! Nothing here decides policy or ranks tools: every tool goes through the dispatcher the
//! host builds, as it does in the gateway and `mcp serve`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::BatchQuery;
use crate::config::{Config, Mode};
use crate::dispatch::CallRequest;
use crate::error::{Error, Result};
use crate::host::{self, Host, Options};
use crate::policy::approval::CliApprover;
use crate::provider::Provider;
use crate::sandbox::Sandbox;
use crate::signals::shutdown;
use crate::{code, mcp_serve, report};

/// What a command prints: one JSON document (with `--json`) or text for a person, and
/// whether what it did failed (exit code 1: a refused call, a failed run, an unusable host).
pub struct Output {
    pub json: Value,
    pub text: String,
    pub failed: bool,
}

impl Output {
    fn of<T: Serialize>(value: &T, text: String) -> Self {
        Output {
            json: serde_json::to_value(value).unwrap_or_default(),
            text,
            failed: false,
        }
    }

    fn failed_if(mut self, failed: bool) -> Self {
        self.failed = failed;
        self
    }
}

/// `catalog`: the effective catalog (cataloged, direct-only and hidden tools, counts by
/// source), the mode, whether code mode can run here, and the upstream servers.
pub fn catalog(options: Options) -> Result<Output> {
    let host = Host::load(options)?;
    let requested = host.mode(None);
    let code_mode = host
        .code_status(requested)
        .filter(|_| requested == Mode::Code);
    // Without a usable Node code mode falls back to tools mode, and the catalog says so.
    let mode = match &code_mode {
        Some(status) if !status.available => Mode::Tools,
        _ => requested,
    };
    let dispatcher = host.dispatcher(cli_approver(&host, &[])?)?;
    let catalog = dispatcher.catalog();
    let servers = host.servers();
    let mut json =
        serde_json::to_value(report::CatalogJson::of(&catalog, mode)).unwrap_or_default();
    if let Some(status) = &code_mode {
        json["code_mode"] = serde_json::to_value(status).unwrap_or_default();
        // The session log records why the mode is what it is.
        dispatcher
            .log()
            .event("code_mode", json["code_mode"].clone());
    }
    if !servers.is_empty() {
        json["mcp_servers"] = serde_json::to_value(&servers).unwrap_or_default();
    }
    let text = report::catalog_with_status(&catalog, mode, code_mode.as_ref(), &servers);
    Ok(Output {
        json,
        text,
        failed: false,
    })
}

/// `search`: one query's hits, or several queries as one batch, grouped in order.
pub fn search(options: Options, queries: Vec<String>, limit: Option<usize>) -> Result<Output> {
    let host = Host::load(options)?;
    let dispatcher = host.dispatcher(cli_approver(&host, &[])?)?;
    if let [query] = queries.as_slice() {
        let hits = dispatcher.search(query, limit)?;
        return Ok(Output::of(&hits, report::search(&hits, query)));
    }
    let batch: Vec<BatchQuery> = queries
        .into_iter()
        .map(|query| BatchQuery { query, limit })
        .collect();
    let result = dispatcher.search_batch(&batch)?;
    Ok(Output::of(&result, report::batch(&result)))
}

/// `describe`: one tool with its full schemas, by id or exact unique name.
pub fn describe(options: Options, id: &str) -> Result<Output> {
    let host = Host::load(options)?;
    let d = host
        .dispatcher(cli_approver(&host, &[])?)?
        .describe(id, "cli")?;
    Ok(Output::of(&d, report::describe(&d)))
}

/// `call`: a tool through the full dispatch path; `approve` patterns pass approvals, others
/// are asked on the terminal (or denied when stdin is not one).
pub fn call(options: Options, id: String, args: Value, approve: &[String]) -> Result<Output> {
    let host = Host::load(options)?;
    let dispatcher = host.dispatcher(cli_approver(&host, approve)?)?;
    let envelope = host::runtime()?.block_on(dispatcher.call(CallRequest::new(id, args, "cli")))?;
    let failed = envelope.result.is_error;
    Ok(Output::of(&envelope, report::envelope(&envelope)).failed_if(failed))
}

/// `code`: a `tool_search_code` body in the sandbox, its bridge calls through the dispatcher.
///
/// The child's start (most of a short run) overlaps the catalog's load and index: the
/// sandbox is prepared and a child brought to `ready` on the runtime while this thread loads
/// the catalog.
pub fn code(
    options: Options,
    body: &str,
    timeout_ms: Option<u64>,
    approve: &[String],
) -> Result<Output> {
    let config = Config::load(options.config.as_deref())?;
    let (lo, hi) = crate::config::bounds::CODE_TIMEOUT_MS;
    let timeout = Duration::from_millis(
        timeout_ms
            .unwrap_or(config.tools.tool_search.code_timeout_ms)
            .clamp(lo, hi),
    );
    let runtime = host::runtime()?;
    // The child first, on this thread (its cached probe and calibration take well under a
    // millisecond; handing them to another thread cost more under load): its start is
    // the run's critical path, and everything else happens while it starts.
    let sandbox =
        Sandbox::from_config(&config.sandbox).map_err(|e| Error::Unavailable(e.message))?;
    let early = runtime.spawn(async move {
        let child = sandbox.spawn(timeout).await.ok();
        (sandbox, child)
    });
    // The host loads while the child starts. (Not on a thread of its own at a lower
    // priority, though that left the child more of a two-core machine: the stdio MCP
    // servers it starts die with the thread that started them.)
    let host = Host::load_with(options, config)?;
    let dispatcher = Arc::new(host.dispatcher(cli_approver(&host, approve)?)?);
    let (sandbox, child) = runtime
        .block_on(early)
        .map_err(|e| Error::Unavailable(e.to_string()))?;
    let from = match child {
        Some(child) => code::ChildFrom::Ready(Box::new(child)),
        None => code::ChildFrom::Fresh,
    };
    let result = runtime.block_on(code::run_with(
        &sandbox,
        from,
        dispatcher,
        body,
        timeout,
        code::Parent::alone("cli"),
    ));
    Ok(Output::of(&result, report::code(&result)).failed_if(!result.is_ok()))
}

/// `surface`: the exact request payload the model would get for `prompt` from `provider`,
/// with byte counts, and why the mode is what it is.
pub fn surface(options: Options, provider: &str, prompt: &str) -> Result<Output> {
    let provider = Provider::parse(provider)?;
    let host = Host::load(options)?;
    let mode = host.mode(Some(provider.as_str()));
    let code_available = match host.code_status(mode).and_then(|s| s.reason) {
        Some(reason) => Err(reason),
        None => Ok(()),
    };
    let catalog = host.catalog();
    let surface_options = host.surface_options(&catalog, mode, code_available, prompt);
    let planned = crate::surface::plan_request(&catalog, &surface_options, provider, "", true)?;
    let dispatcher = host.dispatcher(cli_approver(&host, &[])?)?;
    dispatcher
        .log()
        .event("request", planned.log_event(&catalog));
    let value = json!({
        "request": planned.body,
        "summary": planned.summary,
        "reasons": planned.surface.reasons,
        "directory": planned.surface.directory,
        "loaded": planned.surface.loaded,
    });
    Ok(Output::of(&value, report::surface(&planned)))
}

/// `gateway`: `POST /v1/responses` on `listen` runs agent turns against `[provider]`, until
/// SIGTERM or SIGINT. `announce` is told the address once it is bound.
pub fn gateway(options: Options, listen: &str, announce: &dyn Fn(&str)) -> Result<()> {
    let runtime = host::runtime()?;
    // Signals are taken before the upstream servers start: a SIGTERM meanwhile stops the
    // host through its shutdown path instead of killing it and leaving their groups behind.
    let stop = {
        let _on = runtime.enter();
        shutdown()
    };
    let host = Arc::new(Host::load(options)?);
    runtime.block_on(async {
        // The provider's config and key are checked before anything listens: a gateway
        // that cannot answer never says it is listening.
        let started = async {
            let gateway = crate::gateway::server::Gateway::for_host(Arc::clone(&host))?;
            let listener = host::bind(listen).await?;
            Ok::<_, Error>((gateway, listener))
        };
        let (gateway, listener) = match started.await {
            Ok(s) => s,
            Err(e) => {
                host.stop().await;
                return Err(e);
            }
        };
        announce(&format!("listening on http://{}\n", local_addr(&listener)?));
        gateway.run(listener, stop).await
    })
}

/// `mcp serve`: the configured mode's surface as an MCP server, on stdio or (with
/// `listen`, loopback only) streamable HTTP at `http://ADDR/mcp`. Approvals pass only by an
/// `approve` pattern: stdin is the MCP channel, or there is no one to ask.
pub fn mcp_serve(
    options: Options,
    listen: Option<&str>,
    approve: &[String],
    announce: &dyn Fn(&str),
) -> Result<()> {
    if let Some(listen) = listen {
        mcp_serve::check_loopback(listen)?;
    }
    let runtime = host::runtime()?;
    let stop = {
        let _on = runtime.enter();
        shutdown()
    };
    let host = Host::load(options)?;
    check_approvals_name_one_tool(&host.catalog(), approve)?;
    let approver = CliApprover::non_interactive(approve, host.catalog().toolsets())?;
    let dispatcher = host.dispatcher(Arc::new(approver))?;
    runtime.block_on(async {
        let transport = match listen {
            None => mcp_serve::Transport::Stdio,
            Some(listen) => {
                let listener = host::bind(listen).await?;
                announce(&format!(
                    "listening on http://{}/mcp\n",
                    local_addr(&listener)?
                ));
                mcp_serve::Transport::Http(listener)
            }
        };
        mcp_serve::run(&host, dispatcher, transport, stop).await
    })
}

/// `mock-provider`: the scripted OpenAI-compatible provider of QA on `listen`, recording
/// every request to `record`, until SIGTERM or SIGINT.
pub fn mock_provider(
    listen: &str,
    scenario: Option<&Path>,
    record: Option<PathBuf>,
    announce: &dyn Fn(&str),
) -> Result<()> {
    use crate::gateway::mock;
    let scenario = scenario.map(mock::Scenario::load).transpose()?;
    let provider = mock::MockProvider::new(mock::MockOptions { scenario, record });
    host::runtime()?.block_on(async {
        let listener = host::bind(listen).await?;
        let stop = CancellationToken::new();
        let signal = stop.clone();
        let stopping = shutdown();
        tokio::spawn(async move {
            stopping.await;
            signal.cancel();
        });
        announce(&format!("listening on http://{}\n", local_addr(&listener)?));
        mock::serve(listener, provider, stop)
            .await
            .map_err(|e| Error::Serve(format!("mock provider: {e}")))
    })
}

/// `qa tool-search-gateway-e2e`: direct against tool search through the gateway and the
/// mock provider, with `tools` fake plugin tools, the gateways speaking `provider` to the
/// mock; fails when a check fails.
pub fn qa(options: &Options, tools: usize, provider: &str) -> Result<Output> {
    // Its gateways run on a config, catalog, mode and state of their own: options meant
    // for them were read and ignored without a word (front round 17 F6).
    let given: Vec<&str> = [
        ("--catalog", !options.catalogs.is_empty()),
        ("--mode", options.mode.is_some()),
        ("--state-dir", options.state_dir.is_some()),
        ("--session", options.session.is_some()),
        ("--agent", options.agent.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if !given.is_empty() {
        return Err(Error::Usage(format!(
            "qa runs its own mock provider and gateways, one per mode, on a config, catalog and state of their own: {} do not apply",
            given.join(", ")
        )));
    }
    if tools == 0 {
        return Err(Error::Usage(
            "qa --tools: at least 1 fake tool (the target is one of them)".into(),
        ));
    }
    let provider = Provider::parse(provider)?;
    let bin = std::env::current_exe()
        .map_err(|e| Error::Usage(format!("cannot find this program: {e}")))?;
    let report = host::runtime()?.block_on(crate::qa::run(&bin, tools, provider))?;
    let pass = report.pass;
    Ok(Output::of(&report, crate::qa::table(&report)).failed_if(!pass))
}

/// `doctor`: what this host gives the sandbox (Node, each OS barrier, a cold run, an escape
/// probe); fails when code mode cannot run here.
pub fn doctor(options: Options) -> Result<Output> {
    let config = Config::load(options.config.as_deref())?;
    let sandbox = match Sandbox::from_config(&config.sandbox) {
        Ok(s) => s,
        Err(e) => {
            let text = format!("code mode cannot run here: {}\n", e.message);
            return Ok(Output::of(&json!({"usable": false, "error": e}), text).failed_if(true));
        }
    };
    let report = host::runtime()?.block_on(crate::sandbox::doctor::run(&sandbox));
    let mut json = serde_json::to_value(&report).unwrap_or_default();
    json["usable"] = json!(report.usable());
    json["all_probes_blocked"] = json!(report.all_blocked());
    Ok(Output {
        json,
        text: report::doctor(&report),
        failed: !report.usable(),
    })
}

/// `eval`: retrieval quality of the search on a labelled data set. It indexes the data set
/// alone (no agent catalog), ranked as the config says: lexical, or hybrid with the
/// `[search.semantic]` model.
pub fn eval(options: Options, catalog: &Path, queries: &Path, k: &[usize]) -> Result<Output> {
    let config = Config::load(options.config.as_deref())?;
    let r = crate::eval::run(&config, catalog, queries, k)?;
    let name = catalog
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "set".into());
    Ok(Output::of(&r, report::eval(&name, &r)))
}

/// The command line's approver: `approve` patterns pass; others are asked on the terminal
/// when stdin is one.
fn cli_approver(host: &Host, approve: &[String]) -> Result<Arc<CliApprover>> {
    check_approvals_name_one_tool(&host.catalog(), approve)?;
    Ok(Arc::new(CliApprover::new(
        approve,
        host.catalog().toolsets(),
    )?))
}

/// An `--approve` word that is a tool's name (not a toolset's) must name one tool: a name
/// several sources share approved all of them, a server's `create_issue` with the plugin's
/// the user meant (review 18). The pattern language keeps its meaning (a bare name is every
/// tool of that name) in config rules, written once and read; on the command line, where
/// a name is typed for the tool just seen, the ids are asked for instead. Tools a server
/// lists later are not known here.
fn check_approvals_name_one_tool(
    catalog: &crate::catalog::Catalog,
    approve: &[String],
) -> Result<()> {
    for pattern in approve {
        let word = pattern.trim();
        let plain = !word.contains([':', '*', '?', '[', '{']);
        if !plain || word.starts_with("group:") || catalog.toolsets().names(word) {
            continue;
        }
        let mut ids: Vec<String> = catalog
            .cataloged()
            .iter()
            .chain(catalog.direct_only())
            .filter(|e| e.descriptor.name.eq_ignore_ascii_case(word))
            .map(|e| e.id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        if ids.len() > 1 {
            return Err(Error::Usage(format!(
                "--approve {word}: several tools have this name ({}); approve the one you mean by its id",
                ids.join(", ")
            )));
        }
    }
    Ok(())
}

fn local_addr(listener: &tokio::net::TcpListener) -> Result<std::net::SocketAddr> {
    listener.local_addr().map_err(|e| Error::Listen {
        addr: "the bound socket".into(),
        message: e.to_string(),
    })
}
