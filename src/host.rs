//! A host: what every front runs on, built the same way for each of them — the one-shot
//! commands of the CLI, the gateway and `mcp serve`.
//!
//! A [`Host`] owns the config, the catalog as it follows the upstream MCP servers (and the
//! [`Hub`] of those servers), the session directory, and the answers every front needs and
//! must not work out on its own: the effective mode and why ([`Host::mode`]), whether code
//! mode can run here ([`Host::sandbox`]), the surface options ([`Host::surface_options`]),
//! the dispatcher of a session, spare children, and a shutdown that stops what was started
//! ([`Host::stop`]). It decides nothing about tools itself: policy and dispatch do.
//!
//! Above it sit only the fronts: `main.rs`, [`crate::gateway`] and [`crate::mcp_serve`].

pub mod guard;
pub mod serve;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::{Catalog, Local, Sources, ToolDescriptor, Upstream};
use crate::config::{Config, Mode};
use crate::dispatch::{Dispatcher, DispatcherBuilder};
use crate::error::{Error, Result};
use crate::executors::{Executor, Executors};
use crate::mcp::Hub;
use crate::mcp::upstream::ServerStatus;
use crate::policy::approval::Approver;
use crate::sandbox::Sandbox;
use crate::sandbox::spares::{Sizing, SparePool};
use crate::surface;
use crate::telemetry::{self, SessionLog};

/// What a host is started with: the command line's global options, or an embedder's.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file (default: `./toolsearch.toml` if present).
    pub config: Option<PathBuf>,
    /// Catalog files or folders (default: `[catalog] paths`, else the embedded demo).
    pub catalogs: Vec<PathBuf>,
    /// A mode that overrides every configured one.
    pub mode: Option<Mode>,
    /// Where session logs go (default: [`telemetry::default_state_dir`]).
    pub state_dir: Option<PathBuf>,
    /// The session key of this process's log (default: a new session).
    pub session: Option<String>,
    /// The agent, for per-agent mode overrides (`[surface.agents]`).
    pub agent: Option<String>,
}

/// A loaded host; see the module doc.
pub struct Host {
    pub config: Config,
    options: Options,
    /// What the catalog is rebuilt from; the rebuilding task holds it weakly, so it lives
    /// here.
    sources: Arc<Sources>,
    /// The upstream MCP servers, stopped by [`Host::stop`].
    hub: Option<Arc<Hub>>,
    catalog: watch::Receiver<Arc<Catalog>>,
}

/// The async runtime of this process. One per process: the MCP servers' connections and
/// spare children live on it for the whole command. Two workers: a host's work is I/O and
/// children, and this machine kind has two cores.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime> {
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

/// Binds a server's address. Not a usage error: the address is well formed or not, but a
/// port in use or a refused bind is the machine's answer.
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Listen {
            addr: addr.to_string(),
            message: e.to_string(),
        })
}

impl Host {
    /// Loads the config, then the catalog (starting the upstream servers, all at once).
    pub fn load(options: Options) -> Result<Host> {
        let config = Config::load(options.config.as_deref())?;
        Host::load_with(options, config)
    }

    /// As [`Host::load`] with a config loaded already (a command that starts work from the
    /// config before the catalog is built).
    pub fn load_with(options: Options, config: Config) -> Result<Host> {
        let local = Local::read(&config, &options.catalogs)?;
        Host::with_local(options, config, local)
    }

    /// A host over `local` descriptors instead of catalog files (benches, embedders); the
    /// configured MCP servers still join.
    pub fn with_descriptors(
        options: Options,
        config: Config,
        local: Vec<ToolDescriptor>,
    ) -> Result<Host> {
        Host::with_local(options, config, Local::from_descriptors(local))
    }

    fn with_local(options: Options, config: Config, local: Local) -> Result<Host> {
        // A configured embedding model that cannot load stops the host here, before any
        // server starts, naming the file at fault.
        if let Some(semantic) = &config.search.semantic {
            crate::semantic::Model::shared(semantic)?;
        }
        let hub = if config.mcp.servers.is_empty() {
            None
        } else {
            // A catalog file that does not parse fails before any server starts.
            local.descriptors()?;
            Some(runtime()?.block_on(Hub::start(&config.mcp)))
        };
        let sources = Arc::new(Sources::new(
            config.clone(),
            local,
            hub.clone().map(|h| h as Arc<dyn Upstream>),
        ));
        // Following the servers needs a runtime; a catalog without them does not, and the
        // commands that need none do not start one.
        let catalog = {
            let _on = match hub {
                Some(_) => Some(runtime()?.enter()),
                None => None,
            };
            Arc::clone(&sources).live()?
        };
        Ok(Host {
            config,
            options,
            sources,
            hub,
            catalog,
        })
    }

    /// The mode a request gets: the command line's `--mode` wins, then the agent's
    /// (`[surface.agents]`), then the provider's (`[surface.providers]`), then
    /// `tools.toolSearch.mode`. Before any fallback: [`surface::build`] says why the mode it
    /// uses differs, when it does.
    pub fn mode(&self, provider: Option<&str>) -> Mode {
        self.options.mode.unwrap_or_else(|| {
            self.config
                .mode_for(self.options.agent.as_deref(), provider)
        })
    }

    /// The sandbox of a host whose mode may run code (`code`, `auto`): `Ok(None)` for the
    /// other modes, `Err(why)` when code mode cannot run here (the surface then falls back).
    pub fn sandbox(&self, mode: Mode) -> std::result::Result<Option<Arc<Sandbox>>, String> {
        if !matches!(mode, Mode::Code | Mode::Auto) {
            return Ok(None);
        }
        Sandbox::from_config(&self.config.sandbox)
            .map(|s| Some(Arc::new(s)))
            .map_err(|e| e.message)
    }

    /// Whether code mode could run, without building a sandbox: for commands that only
    /// report (catalog, surface). `None` for modes that run no code.
    pub fn code_status(&self, mode: Mode) -> Option<crate::sandbox::CodeModeStatus> {
        matches!(mode, Mode::Code | Mode::Auto)
            .then(|| crate::sandbox::code_mode_status(self.config.sandbox.node.as_deref()))
    }

    /// The surface options of a request in `mode`, with the user's `prompt` (empty when the
    /// host does not see the conversation).
    pub fn surface_options<'a>(
        &'a self,
        catalog: &Catalog,
        mode: Mode,
        code_available: std::result::Result<(), String>,
        prompt: &'a str,
    ) -> surface::Options<'a> {
        surface::Options::new(
            &self.config,
            mode,
            code_available,
            prompt,
            catalog.settings().code_timeout_ms,
        )
    }

    /// The catalog now.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.borrow())
    }

    /// The catalog as it follows the upstream servers.
    pub fn live(&self) -> watch::Receiver<Arc<Catalog>> {
        self.catalog.clone()
    }

    /// What catalogs are built from (a gateway request's client tools join them).
    pub fn sources(&self) -> Arc<Sources> {
        Arc::clone(&self.sources)
    }

    /// The executors the catalog's tools need beyond the built-in kinds: the hub runs the
    /// `mcp` ones.
    pub fn executors(&self) -> Executors {
        Executors {
            mcp: self.hub.clone().map(|h| h as Arc<dyn Executor>),
            client: None,
        }
    }

    /// The upstream servers, up or down with why.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.hub.as_ref().map(|h| h.status()).unwrap_or_default()
    }

    /// Where session logs go.
    pub fn state_dir(&self) -> PathBuf {
        self.options
            .state_dir
            .clone()
            .unwrap_or_else(telemetry::default_state_dir)
    }

    /// The dispatcher of this process's session (its log under the state directory),
    /// following the catalog, with `approver` deciding the approvals.
    pub fn dispatcher(&self, approver: Arc<dyn Approver>) -> Result<Dispatcher> {
        let session = self
            .options
            .session
            .clone()
            .unwrap_or_else(telemetry::new_session_id);
        let log = Arc::new(SessionLog::open(&self.state_dir(), &session)?);
        Ok(DispatcherBuilder::live(self.live())
            .config(&self.config)?
            .approver(approver)
            .executors(self.executors())
            .session_log(log)
            .build())
    }

    /// Spare children of `sandbox` (`[sandbox] spares`; none when it is 0). On a runtime;
    /// they die with the pool ([`SparePool::stop`]).
    pub fn spares(&self, sandbox: &Arc<Sandbox>) -> Option<Arc<SparePool>> {
        (self.config.sandbox.spares > 0).then(|| {
            SparePool::start(
                Arc::clone(sandbox),
                Sizing::of(&self.config.sandbox),
                Duration::from_millis(self.catalog().settings().code_timeout_ms),
            )
        })
    }

    /// Builds the catalog's search index in the background, for hosts that serve many
    /// requests: the first search then does not wait for it. On a runtime.
    pub fn warm(&self) {
        let catalog = self.catalog();
        tokio::task::spawn_blocking(move || catalog.warm());
    }

    /// Stops what the host started: the upstream servers (each through its shutdown, so no
    /// process group is left behind).
    pub async fn stop(&self) {
        if let Some(hub) = &self.hub {
            hub.stop().await;
        }
    }
}
