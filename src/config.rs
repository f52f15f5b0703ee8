//! The TOML configuration.
//!
//! Looked up as `--config FILE`, else `./toolsearch.toml` if present, else built-in defaults.
//! A wrong type or an unknown key is an error that names the key by its dotted path
//! (`tools.toolSearch.codeTimeoutMs`); a value out of range is clamped with a warning. The
//! `tools.toolSearch` keys follow OpenClaw's spelling (camelCase); our own keys are
//! snake_case.
//!
//! ```toml
//! [tools]
//! toolSearch = true          # or false (direct), or a table:
//! # [tools.toolSearch]
//! # mode = "code"            # "code" | "tools" | "directory" | "auto"; anything else is "code"
//! # codeTimeoutMs = 10000    # clamped to 1000..60000
//! # searchDefaultLimit = 8   # clamped to 1..maxSearchLimit
//! # maxSearchLimit = 20      # clamped to 1..50
//! allow = ["*"]              # tool patterns (see policy::pattern)
//! deny = []
//! active = ["github", "message"]   # optional: narrow the tool set by name or pattern
//!
//! [catalog]
//! paths = ["tools/", "mcp-servers.json"]   # relative to this file; replaces the demo catalog
//!
//! [plugins]
//! disabled = ["calendar"]                  # hides that plugin's tools (reason plugin-enabled)
//! allow_core_override = ["github"]         # plugins admitted to replace a core tool
//!
//! [auth]
//! profiles = ["github"]                    # satisfies {"auth": "github"}
//!
//! [context]
//! channel = "slack"                        # satisfies {"context": "channel=slack"}
//!
//! [settings]                               # free-form; satisfies {"config": "voice.provider"}
//! voice.provider = "twilio"
//!
//! [policy.channel]                         # also agent, profile, sandbox, session
//! deny = ["exec_command"]
//!
//! [toolsets.planning]
//! tools = ["calendar", "openclaw:tickets:*"]
//! aliases = ["plan"]
//!
//! [search.semantic]                      # optional: a local embedding model fused with
//! model = "models/all-MiniLM-L6-v2"        # the lexical ranking (relative to this file)
//!
//! [sandbox]
//! node = "/usr/bin/node"                   # else TOOLSEARCH_NODE, else node on PATH
//! strict = false                           # a barrier the host refuses is fatal
//! spares = 8                               # children kept ready (gateway, mcp serve)
//! max_spares = 16                          # a burst grows the pool up to this
//!
//! [server]                                 # the gateway's and mcp serve's HTTP server
//! body_timeout_s = 30                      # to send a request's body
//! write_timeout_s = 30                     # a response unread this long is dropped
//! shutdown_grace_s = 10                    # requests in flight on SIGTERM, at most
//! allowed_origins = []                     # browser origins let in (none)
//!
//! [[approvals]]                            # calls to these need an approval
//! tools = ["openclaw:*:delete_*"]
//! timeout_ms = 60000                       # no answer in time is a deny
//!
//! [[hooks.before_tool_call]]               # JSON event on stdin, decision on stdout
//! command = ["/usr/local/bin/audit-hook"]
//! timeout_ms = 5000
//! env = ["AUDIT_TOKEN"]                    # the only variables it gets
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::ids::safe_name;

/// Which surface the model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Code,
    Tools,
    Directory,
    Direct,
    /// Direct while the visible schemas are small, else code (or tools without Node).
    Auto,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Code => "code",
            Mode::Tools => "tools",
            Mode::Directory => "directory",
            Mode::Direct => "direct",
            Mode::Auto => "auto",
        }
    }

    /// `code`, `tools`, `directory`, `direct` or `auto`.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "code" => Mode::Code,
            "tools" => Mode::Tools,
            "directory" => Mode::Directory,
            "direct" => Mode::Direct,
            "auto" => Mode::Auto,
            _ => return None,
        })
    }
}

/// `[surface]`: what the model is shown, per agent and provider.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurfaceConfig {
    /// The provider's context window in tokens, when known: bounds the directory and the
    /// `auto` threshold.
    #[serde(default)]
    pub context_window: Option<usize>,
    /// Full schemas sent with the directory (4 by default, at most 12).
    #[serde(default)]
    pub likely_schemas: Option<usize>,
    /// Tools whose schemas always go with the directory.
    #[serde(default)]
    pub required: Vec<String>,
    /// Mode per provider name (`openai-completions = "tools"`: weak local models do better
    /// with structured tools than with code).
    #[serde(default)]
    pub providers: BTreeMap<String, String>,
    /// Mode per agent name (`--agent`).
    #[serde(default)]
    pub agents: BTreeMap<String, String>,
}

/// The effective `tools.toolSearch` settings, after clamping.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSearchSettings {
    pub mode: Mode,
    pub code_timeout_ms: u64,
    pub search_default_limit: usize,
    pub max_search_limit: usize,
}

impl Default for ToolSearchSettings {
    fn default() -> Self {
        ToolSearchSettings {
            mode: Mode::Code,
            code_timeout_ms: 10_000,
            search_default_limit: 8,
            max_search_limit: 20,
        }
    }
}

/// Bounds of the configured values; out-of-range values are clamped into them.
pub mod bounds {
    pub const CODE_TIMEOUT_MS: (u64, u64) = (1_000, 60_000);
    pub const MAX_SEARCH_LIMIT: (usize, usize) = (1, 50);
}

/// A named group of tool patterns, with aliases (`[toolsets.NAME]` in the config).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Toolset {
    pub patterns: Vec<String>,
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyLevel {
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyLevels {
    pub agent: Option<PolicyLevel>,
    pub profile: Option<PolicyLevel>,
    pub sandbox: Option<PolicyLevel>,
    pub session: Option<PolicyLevel>,
    pub channel: Option<PolicyLevel>,
}

impl PolicyLevels {
    pub fn levels(&self) -> [(&'static str, Option<&PolicyLevel>); 5] {
        [
            ("agent", self.agent.as_ref()),
            ("profile", self.profile.as_ref()),
            ("sandbox", self.sandbox.as_ref()),
            ("session", self.session.as_ref()),
            ("channel", self.channel.as_ref()),
        ]
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    #[serde(default)]
    pub disabled: Vec<String>,
    #[serde(default)]
    pub allow_core_override: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub profiles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// Keep the planned catalog and its index in this user's cache between runs
    /// (`catalog::store`); `false` plans and indexes in every process.
    #[serde(default = "yes")]
    pub cache: bool,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            paths: Vec::new(),
            cache: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// `[gateway]`: what the gateway keeps for its clients: responses for
/// `previous_response_id`, and named sessions.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Responses kept at most (0: none is kept); the oldest go first.
    #[serde(default = "default_stored_responses")]
    pub stored_responses: usize,
    /// How long a response is kept, in seconds.
    #[serde(default = "default_stored_ttl_s")]
    pub stored_ttl_s: u64,
    /// Named sessions kept at most; the least recently used go first.
    #[serde(default = "default_sessions")]
    pub sessions: usize,
    /// How long an unused session is kept, in seconds.
    #[serde(default = "default_stored_ttl_s")]
    pub session_ttl_s: u64,
    /// How long a streamed turn may go without an event, in milliseconds: past it the
    /// stream opens (if it has not) and an SSE comment is sent, so that neither a client's
    /// read timeout nor a proxy's idle timeout cuts a turn whose tools take long.
    #[serde(default = "default_stream_keepalive_ms")]
    pub stream_keepalive_ms: u64,
}

fn default_stored_responses() -> usize {
    1000
}
fn default_stored_ttl_s() -> u64 {
    3600
}
fn default_sessions() -> usize {
    1000
}
fn default_stream_keepalive_ms() -> u64 {
    15_000
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            stored_responses: default_stored_responses(),
            stored_ttl_s: default_stored_ttl_s(),
            sessions: default_sessions(),
            session_ttl_s: default_stored_ttl_s(),
            stream_keepalive_ms: default_stream_keepalive_ms(),
        }
    }
}

/// `[server]`: how long a client of a listening front (the gateway, `mcp serve --listen`)
/// may take over what it must do; past it, its connection is closed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Seconds to send a request's whole body, from the end of its head.
    #[serde(default = "default_body_timeout_s")]
    pub body_timeout_s: u64,
    /// Seconds a response may wait for the client to read any of it.
    #[serde(default = "default_write_timeout_s")]
    pub write_timeout_s: u64,
    /// Seconds requests in flight get to finish on shutdown; then they are dropped.
    #[serde(default = "default_shutdown_grace_s")]
    pub shutdown_grace_s: u64,
    /// Browser origins (`scheme://host[:port]`) allowed to call the gateway; none by
    /// default, so a web page cannot.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

fn default_body_timeout_s() -> u64 {
    30
}
fn default_write_timeout_s() -> u64 {
    30
}
fn default_shutdown_grace_s() -> u64 {
    10
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            body_timeout_s: default_body_timeout_s(),
            write_timeout_s: default_write_timeout_s(),
            shutdown_grace_s: default_shutdown_grace_s(),
            allowed_origins: Vec::new(),
        }
    }
}

/// `[provider]`: the model the gateway talks to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai-responses`, `openai-completions` or `anthropic`.
    #[serde(default = "default_provider_kind")]
    pub kind: String,
    /// Any compatible base URL (default: the mock provider's default address).
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The environment variable holding the API key (never logged).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "default_model")]
    pub model: String,
    #[serde(default)]
    pub stream: bool,
    #[serde(default = "default_provider_timeout")]
    pub timeout_ms: u64,
    /// Retries on 429 and 5xx, with backoff.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Rounds of tool calls one turn may take.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: usize,
    /// The output bound of a request that names none (Responses `max_output_tokens`,
    /// Chat `max_completion_tokens`, Anthropic `max_tokens`); unset, OpenAI's kinds send
    /// none and Anthropic, which requires one, gets
    /// [`crate::provider::payload::ANTHROPIC_MAX_TOKENS`].
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

fn default_provider_kind() -> String {
    "openai-responses".into()
}
fn default_base_url() -> String {
    "http://127.0.0.1:8787/v1".into()
}
/// `[provider] model` when none is configured.
pub const DEFAULT_MODEL: &str = "toolsearch-model";

fn default_model() -> String {
    DEFAULT_MODEL.into()
}
fn default_provider_timeout() -> u64 {
    60_000
}
fn default_retries() -> u32 {
    3
}
fn default_max_rounds() -> usize {
    16
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            kind: default_provider_kind(),
            base_url: default_base_url(),
            api_key_env: None,
            model: default_model(),
            stream: false,
            timeout_ms: default_provider_timeout(),
            max_retries: default_retries(),
            max_rounds: default_max_rounds(),
            max_output_tokens: None,
        }
    }
}

/// `[sandbox]`: the code-mode child.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// The Node binary (else `TOOLSEARCH_NODE`, else `node` on PATH).
    #[serde(default)]
    pub node: Option<PathBuf>,
    /// A barrier the host cannot apply is fatal instead of a warning.
    #[serde(default)]
    pub strict: bool,
    /// Children kept ready for long-lived hosts (each used for one run).
    #[serde(default = "default_spares")]
    pub spares: usize,
    /// The most children a burst of runs may keep ready (at least `spares`).
    #[serde(default = "default_max_spares")]
    pub max_spares: usize,
}

/// Eight at rest: a start is CPU-bound (two at a time on two cores, 30–50 ms each), so a
/// burst of back-to-back runs is served from what was ready before it began; with four, half
/// of a burst of twenty waited for a start. Each costs about 10 MiB of private memory.
fn default_spares() -> usize {
    8
}

fn default_max_spares() -> usize {
    16
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            node: None,
            strict: false,
            spares: default_spares(),
            max_spares: default_max_spares(),
        }
    }
}

/// `[search]`: how search ranks beyond its lexical rules.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// A local sentence-embedding model whose ranking is fused with the lexical one; none
    /// configured is lexical search alone.
    #[serde(default)]
    pub semantic: Option<SemanticConfig>,
}

/// `[search.semantic]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemanticConfig {
    /// A sentence-transformers folder (config.json, tokenizer.json, model.safetensors,
    /// modules.json and its pooling config); relative to the config file.
    pub model: PathBuf,
    /// Put before every query, for models trained with one (e5: `"query: "`); default: the
    /// folder's own `query` prompt, if it has one.
    #[serde(default)]
    pub query_prefix: Option<String>,
    /// Put before every tool's text (e5: `"passage: "`); default: the folder's own
    /// `document` or `passage` prompt, if it has one.
    #[serde(default)]
    pub document_prefix: Option<String>,
    /// Keep tool embeddings on disk (`$XDG_CACHE_HOME/toolsearch/embeddings`), so a catalog
    /// is embedded once, not in every process.
    #[serde(default = "default_true")]
    pub cache: bool,
}

/// `[[approvals]]`: calls to these tools need an approval.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    pub tools: Vec<String>,
    /// No answer within this time is a deny.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One command hook.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    pub command: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Environment variables passed to the hook; it gets no others.
    #[serde(default)]
    pub env: Vec<String>,
}

/// `[[hooks.before_tool_call]]` and `[[hooks.after_tool_call]]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    #[serde(default)]
    pub before_tool_call: Vec<HookConfig>,
    #[serde(default)]
    pub after_tool_call: Vec<HookConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolsetConfig {
    tools: Vec<String>,
    #[serde(default)]
    aliases: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTools {
    #[serde(default, rename = "toolSearch")]
    tool_search: Option<toml::Value>,
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    active: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolSearch {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default, rename = "codeTimeoutMs")]
    code_timeout_ms: Option<u64>,
    #[serde(default, rename = "searchDefaultLimit")]
    search_default_limit: Option<u64>,
    #[serde(default, rename = "maxSearchLimit")]
    max_search_limit: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tools: RawTools,
    #[serde(default)]
    catalog: CatalogConfig,
    #[serde(default)]
    plugins: PluginsConfig,
    #[serde(default)]
    auth: AuthConfig,
    #[serde(default)]
    context: BTreeMap<String, String>,
    #[serde(default)]
    settings: toml::Table,
    #[serde(default)]
    policy: PolicyLevels,
    #[serde(default)]
    toolsets: BTreeMap<String, RawToolsetConfig>,
    #[serde(default)]
    approvals: Vec<ApprovalConfig>,
    #[serde(default)]
    hooks: HooksConfig,
    #[serde(default)]
    sandbox: SandboxConfig,
    #[serde(default)]
    surface: SurfaceConfig,
    #[serde(default)]
    provider: ProviderConfig,
    #[serde(default)]
    gateway: GatewayConfig,
    #[serde(default)]
    server: ServerConfig,
    #[serde(default)]
    mcp: RawMcpConfig,
    #[serde(default)]
    search: SearchConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpConfig {
    #[serde(default)]
    servers: BTreeMap<String, RawMcpServer>,
}

/// `[mcp.servers.NAME]` as written: the shape MCP clients already use.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default = "default_true")]
    enabled: bool,
    #[serde(default)]
    startup_timeout_ms: Option<u64>,
    #[serde(default)]
    call_timeout_ms: Option<u64>,
}

fn default_true() -> bool {
    true
}

/// `[mcp]` after validation: the upstream servers by safe name (the catalog's source name).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpConfig {
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// The key in the config file (`[mcp.servers.KEY]`).
    pub key: String,
    /// The safe name: ids are `mcp:NAME:tool`.
    pub name: String,
    pub transport: McpTransport,
    /// Spawn (or connect) + `initialize` + the whole `tools/list`.
    pub startup_timeout_ms: u64,
    /// One `tools/call`.
    pub call_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking MCP on stdin/stdout. It gets `env` plus a few variables of
    /// the host (PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG, TMPDIR), not the rest.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

pub mod mcp_limits {
    pub const STARTUP_TIMEOUT_MS: u64 = 10_000;
    pub const CALL_TIMEOUT_MS: u64 = 60_000;
    pub const MIN_TIMEOUT_MS: u64 = 100;
    pub const MAX_TIMEOUT_MS: u64 = 600_000;
}

fn mcp_config(raw: RawMcpConfig, base: &Path) -> std::result::Result<McpConfig, String> {
    let mut servers: BTreeMap<String, McpServerConfig> = BTreeMap::new();
    for (key, s) in raw.servers {
        let at = format!("mcp.servers.{key}");
        if !s.enabled {
            continue;
        }
        let name = safe_name(&key);
        if let Some(other) = servers.get(&name) {
            return Err(format!(
                "{at}: its safe name `{name}` is also the safe name of mcp.servers.{}; rename one",
                other.key
            ));
        }
        let transport = match (s.command, s.url) {
            (Some(_), Some(_)) => {
                return Err(format!("{at}: give `command` or `url`, not both"));
            }
            (None, None) => {
                return Err(format!(
                    "{at}: needs `command` (a stdio server) or `url` (streamable HTTP)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}.command: is empty"));
                }
                if !s.headers.is_empty() {
                    return Err(format!("{at}.headers: only for a `url` server"));
                }
                McpTransport::Stdio {
                    command,
                    args: s.args,
                    env: s.env,
                    cwd: s
                        .cwd
                        .map(|p| if p.is_absolute() { p } else { base.join(p) }),
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "{at}.url = {url:?}: expected an http:// or https:// URL"
                    ));
                }
                if !s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some() {
                    return Err(format!(
                        "{at}: `args`, `env` and `cwd` are only for a `command` server"
                    ));
                }
                McpTransport::Http {
                    url,
                    headers: s.headers,
                }
            }
        };
        let clamp = |v: Option<u64>, default: u64| {
            v.unwrap_or(default)
                .clamp(mcp_limits::MIN_TIMEOUT_MS, mcp_limits::MAX_TIMEOUT_MS)
        };
        servers.insert(
            name.clone(),
            McpServerConfig {
                key,
                name,
                transport,
                startup_timeout_ms: clamp(s.startup_timeout_ms, mcp_limits::STARTUP_TIMEOUT_MS),
                call_timeout_ms: clamp(s.call_timeout_ms, mcp_limits::CALL_TIMEOUT_MS),
            },
        );
    }
    Ok(McpConfig { servers })
}

/// `[tools]` after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsConfig {
    /// `toolSearch = false` gives mode `Direct`.
    pub tool_search: ToolSearchSettings,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub active: Option<Vec<String>>,
}

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, if any (names it in errors).
    pub file: Option<PathBuf>,
    pub tools: ToolsConfig,
    /// Catalog paths, already resolved against the config file's folder.
    pub catalog: CatalogConfig,
    pub plugins: PluginsConfig,
    pub auth: AuthConfig,
    pub context: BTreeMap<String, String>,
    pub settings: toml::Table,
    pub policy: PolicyLevels,
    pub toolsets: BTreeMap<String, Toolset>,
    pub approvals: Vec<ApprovalConfig>,
    pub hooks: HooksConfig,
    pub sandbox: SandboxConfig,
    pub surface: SurfaceConfig,
    pub provider: ProviderConfig,
    pub gateway: GatewayConfig,
    pub server: ServerConfig,
    pub mcp: McpConfig,
    /// `[search]`, the model path resolved against the config file's folder.
    pub search: SearchConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file: None,
            tools: ToolsConfig {
                tool_search: ToolSearchSettings::default(),
                allow: vec!["*".into()],
                deny: Vec::new(),
                active: None,
            },
            catalog: CatalogConfig::default(),
            plugins: PluginsConfig::default(),
            auth: AuthConfig::default(),
            context: BTreeMap::new(),
            settings: toml::Table::new(),
            policy: PolicyLevels::default(),
            toolsets: BTreeMap::new(),
            approvals: Vec::new(),
            hooks: HooksConfig::default(),
            sandbox: SandboxConfig::default(),
            surface: SurfaceConfig::default(),
            provider: ProviderConfig::default(),
            gateway: GatewayConfig::default(),
            server: ServerConfig::default(),
            mcp: McpConfig::default(),
            search: SearchConfig::default(),
        }
    }
}

/// The file looked for when no `--config` is given.
pub const DEFAULT_CONFIG_FILE: &str = "toolsearch.toml";

impl Config {
    /// `--config FILE` if given (it must exist), else `./toolsearch.toml` if present,
    /// else the defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Self> {
        match explicit {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::BadConfig {
                    file: path.to_path_buf(),
                    message: format!("cannot read: {e}"),
                })?;
                Config::from_toml_str(&text, path)
            }
            None => Config::load_found(Path::new(".")),
        }
    }

    /// `dir/toolsearch.toml` if present, else the defaults. A config found, not named, is
    /// believed only when it could have been written by no one but this user or root: it
    /// names programs to run (`[sandbox] node`, hooks, MCP servers' commands), and the
    /// folder a command is run in may be anyone's (`/tmp`, a shared checkout), where
    /// another user's file would have run their program as this user (eighth sandbox
    /// review). So it is read by [`crate::cache::read_believed`]: the file, every link to
    /// it and every folder on the way from `/` must belong to this user or root, no folder
    /// writable by others unless sticky (where others cannot replace what is not theirs),
    /// the file writable by no one else and not on a file system such as procfs whose
    /// owners mean nothing; else it is an error naming why, not a silent default, and
    /// `--config` takes it anyway.
    pub fn load_found(dir: &Path) -> Result<Self> {
        let path = dir.join(DEFAULT_CONFIG_FILE);
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(Config::default());
        }
        let bytes = crate::cache::read_believed(&path).map_err(|why| Error::BadConfig {
            file: path.clone(),
            message: format!(
                "{why}: not loaded, as a config found in the working folder names programs \
                 to run; pass --config {} to use it anyway",
                path.display()
            ),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| Error::BadConfig {
            file: path.clone(),
            message: format!("not UTF-8: {e}"),
        })?;
        Config::from_toml_str(&text, &path)
    }

    /// Parses and validates config text; `path` names it in errors and anchors relative paths.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self> {
        let bad = |message: String| Error::BadConfig {
            file: path.to_path_buf(),
            message,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(one_line(&e)))?;
        let raw: RawConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| bad(format!("{}: {}", e.path(), one_line(e.inner()))))?;

        let tool_search = match raw.tools.tool_search {
            None => ToolSearchSettings::default(),
            Some(toml::Value::Boolean(true)) => ToolSearchSettings::default(),
            Some(toml::Value::Boolean(false)) => ToolSearchSettings {
                mode: Mode::Direct,
                ..ToolSearchSettings::default()
            },
            Some(toml::Value::Table(t)) => {
                let raw_ts: RawToolSearch = serde_path_to_error::deserialize(toml::Value::Table(t))
                    .map_err(|e| {
                        bad(format!(
                            "tools.toolSearch.{}: {}",
                            e.path(),
                            one_line(e.inner())
                        ))
                    })?;
                clamp_tool_search(raw_ts)
            }
            Some(other) => {
                return Err(bad(format!(
                    "tools.toolSearch: expected true, false or a table, found {}",
                    other.type_str()
                )));
            }
        };

        let base = path.parent().unwrap_or(Path::new(""));
        let catalog = CatalogConfig {
            paths: raw
                .catalog
                .paths
                .into_iter()
                .map(|p| if p.is_absolute() { p } else { base.join(p) })
                .collect(),
            cache: raw.catalog.cache,
        };
        for (phase, hooks) in [
            ("before_tool_call", &raw.hooks.before_tool_call),
            ("after_tool_call", &raw.hooks.after_tool_call),
        ] {
            if let Some(i) = hooks
                .iter()
                .position(|h| h.command.first().is_none_or(|p| p.is_empty()))
            {
                return Err(bad(format!(
                    "hooks.{phase}[{i}].command: needs the program as its first element"
                )));
            }
        }
        for (what, map) in [
            ("surface.providers", &raw.surface.providers),
            ("surface.agents", &raw.surface.agents),
        ] {
            if let Some((k, v)) = map.iter().find(|(_, v)| Mode::parse(v).is_none()) {
                return Err(bad(format!(
                    "{what}.{k} = {v:?}: expected code, tools, directory, direct or auto"
                )));
            }
        }
        let mcp = mcp_config(raw.mcp, base).map_err(bad)?;
        let mut search = raw.search;
        if let Some(semantic) = &mut search.semantic {
            if semantic.model.as_os_str().is_empty() {
                return Err(bad(
                    "search.semantic.model: is empty; name a sentence-transformers folder".into(),
                ));
            }
            if semantic.model.is_relative() {
                semantic.model = base.join(&semantic.model);
            }
        }
        Ok(Config {
            file: Some(path.to_path_buf()),
            tools: ToolsConfig {
                tool_search,
                allow: raw.tools.allow.unwrap_or_else(|| vec!["*".into()]),
                deny: raw.tools.deny,
                active: raw.tools.active,
            },
            catalog,
            plugins: raw.plugins,
            auth: raw.auth,
            context: raw.context,
            settings: raw.settings,
            policy: raw.policy,
            toolsets: raw
                .toolsets
                .into_iter()
                .map(|(name, t)| {
                    (
                        name,
                        Toolset {
                            patterns: t.tools,
                            aliases: t.aliases,
                        },
                    )
                })
                .collect(),
            approvals: raw.approvals,
            hooks: raw.hooks,
            sandbox: SandboxConfig {
                node: raw.sandbox.node.map(|p| {
                    if p.is_absolute() || p.components().count() == 1 {
                        p
                    } else {
                        base.join(p)
                    }
                }),
                ..raw.sandbox
            },
            surface: raw.surface,
            provider: raw.provider,
            gateway: raw.gateway,
            server: raw.server,
            mcp,
            search,
        })
    }

    /// The mode for this agent and provider: the agent's override, else the provider's,
    /// else `tools.toolSearch`.
    pub fn mode_for(&self, agent: Option<&str>, provider: Option<&str>) -> Mode {
        agent
            .and_then(|a| self.surface.agents.get(a))
            .or_else(|| provider.and_then(|p| self.surface.providers.get(p)))
            .and_then(|m| Mode::parse(m))
            .unwrap_or(self.tools.tool_search.mode)
    }

    /// The value at a dotted path of `[settings]`, for the `config` availability signal.
    pub fn setting(&self, dotted: &str) -> Option<&toml::Value> {
        let mut parts = dotted.split('.');
        let mut value = self.settings.get(parts.next()?)?;
        for part in parts {
            value = value.as_table()?.get(part)?;
        }
        Some(value)
    }
}

/// toml's errors span several lines (a snippet with a caret, an `in `key`` line); one
/// line reads better in a terminal and in logs, and the key path is given separately.
fn one_line(e: &toml::de::Error) -> String {
    let message = e
        .message()
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    match e.span() {
        Some(span) => format!("at byte {}: {message}", span.start),
        None => message,
    }
}

fn clamp_tool_search(raw: RawToolSearch) -> ToolSearchSettings {
    let defaults = ToolSearchSettings::default();
    // `direct` is not a tool-search mode (it is tool search off): `--mode direct` or a
    // per-agent or per-provider mode gives it.
    let mode = match raw.mode.as_deref() {
        None => Mode::Code,
        Some(s) => match Mode::parse(s) {
            Some(m) if m != Mode::Direct => m,
            _ => {
                tracing::warn!(
                    "tools.toolSearch.mode = {s:?} is not one of code, tools, directory, auto; using code"
                );
                Mode::Code
            }
        },
    };
    let code_timeout_ms = clamp(
        "tools.toolSearch.codeTimeoutMs",
        raw.code_timeout_ms.unwrap_or(defaults.code_timeout_ms),
        bounds::CODE_TIMEOUT_MS.0,
        bounds::CODE_TIMEOUT_MS.1,
    );
    let max_search_limit = clamp(
        "tools.toolSearch.maxSearchLimit",
        raw.max_search_limit
            .unwrap_or(defaults.max_search_limit as u64),
        bounds::MAX_SEARCH_LIMIT.0 as u64,
        bounds::MAX_SEARCH_LIMIT.1 as u64,
    ) as usize;
    let search_default_limit = clamp(
        "tools.toolSearch.searchDefaultLimit",
        raw.search_default_limit
            .unwrap_or((defaults.search_default_limit as u64).min(max_search_limit as u64)),
        1,
        max_search_limit as u64,
    ) as usize;
    ToolSearchSettings {
        mode,
        code_timeout_ms,
        search_default_limit,
        max_search_limit,
    }
}

fn clamp(key: &str, value: u64, lo: u64, hi: u64) -> u64 {
    let clamped = value.clamp(lo, hi);
    if clamped != value {
        tracing::warn!("{key} = {value} is outside {lo}..={hi}; using {clamped}");
    }
    clamped
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config found in the working folder names programs to run: believed only when no
    /// one but this user or root could have written it or replaced it.
    #[test]
    fn a_found_config_is_believed_only_when_no_one_else_could_have_written_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(DEFAULT_CONFIG_FILE);
        assert!(
            Config::load_found(dir.path()).is_ok(),
            "none there: the defaults"
        );
        std::fs::write(&file, "[sandbox]\nnode = \"/bin/true\"\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        Config::load_found(dir.path()).unwrap();

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("others can write it") && err.contains("--config"),
            "{err}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();

        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(err.contains("writable by others"), "{err}");
        // Sticky, as /tmp: others cannot replace a file of ours there.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        Config::load_found(dir.path()).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();

        // Behind a link, the whole way to the file is checked: a folder of ours that others
        // can write, where the file could be replaced by anything (tenth sandbox review)...
        let shared = tempfile::tempdir().unwrap();
        let there = shared.path().join("team.toml");
        std::fs::write(&there, "[sandbox]\nnode = \"/bin/true\"\n").unwrap();
        std::fs::set_permissions(&there, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::rename(&file, dir.path().join("kept.toml")).unwrap();
        std::os::unix::fs::symlink(&there, &file).unwrap();
        Config::load_found(dir.path()).unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(err.contains("writable by others"), "{err}");
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        // ...a file whose owner says nothing of who wrote it (a process's command line)...
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/proc/self/cmdline", &file).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(err.contains("procfs"), "{err}");
        // ...and one too big to be a config.
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, "#".repeat(2 << 20)).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(err.contains("bytes"), "{err}");
        std::fs::rename(dir.path().join("kept.toml"), &file).unwrap();
        Config::load_found(dir.path()).unwrap();

        if !nix::unistd::geteuid().is_root() {
            return; // a file of another user's needs root
        }
        std::os::unix::fs::chown(&file, Some(12345), None).unwrap();
        let err = Config::load_found(dir.path()).unwrap_err().to_string();
        assert!(err.contains("another user"), "{err}");
        // Theirs behind a link of ours, or ours behind a link of theirs: refused alike.
        let other = tempfile::tempdir().unwrap();
        let target = other.path().join("real.toml");
        std::fs::rename(&file, &target).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        assert!(Config::load_found(dir.path()).is_err());
        std::os::unix::fs::chown(&target, Some(0), None).unwrap();
        Config::load_found(dir.path()).unwrap();
        std::os::unix::fs::lchown(&file, Some(12345), None).unwrap();
        assert!(Config::load_found(dir.path()).is_err());
    }

    fn parse(text: &str) -> Result<Config> {
        Config::from_toml_str(text, Path::new("/etc/ts/toolsearch.toml"))
    }

    #[test]
    fn mcp_servers_in_the_usual_shape() {
        let c = parse(
            r#"
[mcp.servers."My Files"]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
env = { DEBUG = "1" }
cwd = "srv"
call_timeout_ms = 5

[mcp.servers.remote]
url = "http://127.0.0.1:9000/mcp"
headers = { Authorization = "Bearer x" }

[mcp.servers.off]
command = "nothing"
enabled = false
"#,
        )
        .unwrap();
        assert_eq!(
            c.mcp.servers.keys().collect::<Vec<_>>(),
            ["my_files", "remote"]
        );
        let files = &c.mcp.servers["my_files"];
        assert_eq!(files.key, "My Files");
        assert_eq!(files.call_timeout_ms, mcp_limits::MIN_TIMEOUT_MS);
        assert_eq!(files.startup_timeout_ms, mcp_limits::STARTUP_TIMEOUT_MS);
        match &files.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                assert_eq!(command, "npx");
                assert_eq!(args.len(), 3);
                assert_eq!(env["DEBUG"], "1");
                assert_eq!(cwd.as_deref(), Some(Path::new("/etc/ts/srv")));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            &c.mcp.servers["remote"].transport,
            McpTransport::Http { url, headers } if url.ends_with("/mcp") && headers.len() == 1
        ));
    }

    #[test]
    fn bad_mcp_servers_are_named() {
        for (text, expect) in [
            ("[mcp.servers.a]\n", "mcp.servers.a: needs `command`"),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
                "not both",
            ),
            ("[mcp.servers.a]\nurl = \"ftp://h\"\n", "mcp.servers.a.url"),
            (
                "[mcp.servers.a]\nurl = \"http://h\"\nargs = [\"x\"]\n",
                "only for a `command` server",
            ),
            ("[mcp.servers.a]\ncommand = \"x\"\nport = 1\n", "port"),
            (
                "[mcp.servers.A]\ncommand = \"x\"\n[mcp.servers.a]\ncommand = \"y\"\n",
                "safe name `a`",
            ),
            ("[mcp.servers.a]\ncommand = 3\n", "mcp.servers.a.command"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expect), "{text}: {err}");
        }
    }

    #[test]
    fn defaults_match_spec() {
        let c = parse("").unwrap();
        assert_eq!(c.tools.tool_search, ToolSearchSettings::default());
        assert_eq!(c.tools.tool_search.code_timeout_ms, 10_000);
        assert_eq!(c.tools.tool_search.search_default_limit, 8);
        assert_eq!(c.tools.tool_search.max_search_limit, 20);
        assert_eq!(c.tools.allow, vec!["*".to_string()]);
    }

    #[test]
    fn tool_search_false_is_direct_and_a_table_enables() {
        assert_eq!(
            parse("[tools]\ntoolSearch = false\n")
                .unwrap()
                .tools
                .tool_search
                .mode,
            Mode::Direct
        );
        let c = parse("[tools.toolSearch]\nmode = \"tools\"\n").unwrap();
        assert_eq!(c.tools.tool_search.mode, Mode::Tools);
        let c = parse("[tools.toolSearch]\nmode = \"banana\"\n").unwrap();
        assert_eq!(c.tools.tool_search.mode, Mode::Code);
    }

    #[test]
    fn values_out_of_range_are_clamped() {
        let c = parse(
            "[tools.toolSearch]\ncodeTimeoutMs = 5\nmaxSearchLimit = 500\nsearchDefaultLimit = 0\n",
        )
        .unwrap();
        let ts = c.tools.tool_search;
        assert_eq!(ts.code_timeout_ms, 1_000);
        assert_eq!(ts.max_search_limit, 50);
        assert_eq!(ts.search_default_limit, 1);
        let c = parse("[tools.toolSearch]\nmaxSearchLimit = 4\nsearchDefaultLimit = 9\n").unwrap();
        assert_eq!(c.tools.tool_search.search_default_limit, 4);
        let c = parse("[tools.toolSearch]\nmaxSearchLimit = 3\n").unwrap();
        assert_eq!(c.tools.tool_search.search_default_limit, 3);
        let c = parse("[tools.toolSearch]\ncodeTimeoutMs = 999999\n").unwrap();
        assert_eq!(c.tools.tool_search.code_timeout_ms, 60_000);
    }

    #[test]
    fn wrong_types_and_unknown_keys_name_the_key() {
        let e = parse("[tools.toolSearch]\ncodeTimeoutMs = \"fast\"\n").unwrap_err();
        assert!(
            e.to_string().contains("tools.toolSearch.codeTimeoutMs"),
            "{e}"
        );
        let e = parse("[tools]\nalow = [\"*\"]\n").unwrap_err();
        assert!(e.to_string().contains("alow"), "{e}");
        let e = parse("[policy.chanel]\ndeny = []\n").unwrap_err();
        assert!(e.to_string().contains("chanel"), "{e}");
        let e = parse("[tools]\ntoolSearch = 3\n").unwrap_err();
        assert!(e.to_string().contains("tools.toolSearch"), "{e}");
        let e = parse("[tools]\ndeny = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("tools.deny"), "{e}");
        let e = parse("[tools\n").unwrap_err();
        assert_eq!(e.code(), "bad-config");
    }

    #[test]
    fn catalog_paths_resolve_against_the_config_folder() {
        let c = parse("[catalog]\npaths = [\"tools\", \"/abs.json\"]\n").unwrap();
        assert_eq!(
            c.catalog.paths,
            vec![PathBuf::from("/etc/ts/tools"), PathBuf::from("/abs.json")]
        );
    }

    #[test]
    fn settings_are_read_by_dotted_path() {
        let c = parse("[settings]\nvoice.provider = \"twilio\"\n").unwrap();
        assert_eq!(
            c.setting("voice.provider").and_then(|v| v.as_str()),
            Some("twilio")
        );
        assert!(c.setting("voice.missing").is_none());
    }

    #[test]
    fn semantic_search_takes_a_model_folder_relative_to_the_config() {
        assert_eq!(parse("").unwrap().search.semantic, None);
        let c = parse("[search.semantic]\nmodel = \"models/minilm\"\n").unwrap();
        let s = c.search.semantic.unwrap();
        assert_eq!(s.model, PathBuf::from("/etc/ts/models/minilm"));
        assert!(s.cache);
        assert_eq!(s.query_prefix, None);
        let c =
            parse("[search.semantic]\nmodel = \"/m\"\nquery_prefix = \"query: \"\ncache = false\n")
                .unwrap();
        let s = c.search.semantic.unwrap();
        assert_eq!(s.model, PathBuf::from("/m"));
        assert_eq!(s.query_prefix.as_deref(), Some("query: "));
        assert!(!s.cache);
        for (text, expect) in [
            ("[search.semantic]\n", "model"),
            (
                "[search.semantic]\nmodel = \"\"\n",
                "search.semantic.model: is empty",
            ),
            ("[search.semantic]\nmodel = \"m\"\nweight = 2\n", "weight"),
            ("[search]\nsemantik = {}\n", "semantik"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.code(), "bad-config");
            assert!(e.to_string().contains(expect), "{text}: {e}");
        }
    }
}
