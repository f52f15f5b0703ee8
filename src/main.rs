//! The `toolsearch` command line: parse, call one function of [`toolsearch::commands`] per
//! command, print, and map errors to exit codes (0 success; 1 a tool lookup or call failed
//! or was refused; 2 bad usage, config or catalog). Diagnostics go to stderr through
//! `tracing` (`RUST_LOG`), coloured only on a terminal and never with `NO_COLOR` set.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use toolsearch::Error;
use toolsearch::commands::{self, Output};
use toolsearch::config::Mode;
use toolsearch::host;

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
    /// The surface given to the model (code, tools, directory, direct or auto); overrides
    /// tools.toolSearch.mode and the per-agent and per-provider modes.
    #[arg(long, value_parser = parse_mode, global = true)]
    mode: Option<Mode>,
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
        /// The upstream format the gateways speak to the mock: openai-responses,
        /// openai-completions or anthropic.
        #[arg(long, default_value = "openai-responses")]
        provider: String,
        #[arg(long)]
        json: bool,
    },
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
    // SAFETY: first thing in main, before any thread is started.
    unsafe { toolsearch::semantic::pin_threads() };
    toolsearch::process::map_large_allocations();
    // A schema checker the host started for itself: no CLI, no logging, only its loop.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            toolsearch::dispatch::checker::SUBCOMMAND,
        ))
    {
        return match toolsearch::dispatch::checker::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let _groups = toolsearch::process::GroupsDieWithHost;
    // An MCP client that captures a server's stderr shows escape codes as text.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(|| toolsearch::telemetry::stderr::CappedStderr)
        .with_ansi(colour)
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
    let serves = matches!(
        cli.command,
        Command::Gateway { .. } | Command::MockProvider { .. } | Command::Mcp { .. }
    );
    if !serves && let Ok(runtime) = toolsearch::host::runtime() {
        toolsearch::signals::one_shot_ends_on_signals(runtime);
    }
    match run(cli) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(out)) => {
            if json {
                print_json(&out.json);
            } else {
                print_text(&toolsearch::shown::for_terminal(&out.text));
            }
            if out.failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            if json {
                print_json(&serde_json::json!({
                    "error": {"code": e.code(), "message": e.to_string()}
                }));
            }
            toolsearch::shown::to_stderr(&format!("toolsearch: {e}\n"));
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

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| "expected code, tools, directory, direct or auto".to_string())
}

/// Runs the command: `Some(output)` to print, `None` for the servers (they print as they go).
fn run(cli: Cli) -> Result<Option<Output>, Error> {
    let options = host::Options {
        config: cli.config,
        catalogs: cli.catalogs,
        mode: cli.mode,
        state_dir: cli.state_dir,
        session: cli.session,
        agent: cli.agent,
    };
    let announce = |line: &str| print_text(line);
    let out = match cli.command {
        Command::Catalog { .. } => commands::catalog(options)?,
        Command::Search { queries, limit, .. } => commands::search(options, queries, limit)?,
        Command::Describe { id, .. } => commands::describe(options, &id)?,
        Command::Call {
            id, args, approve, ..
        } => commands::call(options, id, read_args(args.as_deref())?, &approve)?,
        Command::Code {
            body,
            timeout_ms,
            approve,
            ..
        } => commands::code(options, &read_body(body)?, timeout_ms, &approve)?,
        Command::Surface {
            provider, prompt, ..
        } => commands::surface(options, &provider, &prompt)?,
        Command::Gateway { listen } => {
            commands::gateway(options, &listen, &announce)?;
            return Ok(None);
        }
        Command::Mcp {
            command: McpCommand::Serve { listen, approve },
        } => {
            commands::mcp_serve(options, listen.as_deref(), &approve, &announce)?;
            return Ok(None);
        }
        Command::MockProvider {
            listen,
            scenario,
            record,
        } => {
            commands::mock_provider(&listen, scenario.as_deref(), record, &announce)?;
            return Ok(None);
        }
        Command::Qa {
            check: QaCheck::ToolSearchGatewayE2e {
                tools, provider, ..
            },
        } => commands::qa(&options, tools, &provider)?,
        Command::Doctor { .. } => commands::doctor(options)?,
        Command::Eval {
            catalog,
            queries,
            k,
            ..
        } => commands::eval(options, &catalog, &queries, &k)?,
    };
    Ok(Some(out))
}

/// `code`'s body: the argument, or stdin for `-`.
fn read_body(body: String) -> Result<String, Error> {
    if body != "-" {
        return Ok(body);
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
        .map_err(|e| Error::Usage(format!("cannot read the code from stdin: {e}")))?;
    Ok(s)
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

fn print_json<T: serde::Serialize>(value: &T) {
    match toolsearch::shown::json_readable(value) {
        Ok(s) => print_text(&(toolsearch::shown::json_for_terminal(s) + "\n")),
        Err(e) => {
            toolsearch::shown::to_stderr(&format!("toolsearch: cannot serialize output: {e}\n"))
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly instead of panicking.
fn print_text(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        toolsearch::shown::to_stderr(&format!("toolsearch: cannot write output: {e}\n"));
    }
}
