//! Typed errors with stable codes.
//!
//! Every error a caller can see carries a `code()` that never changes between releases
//! (`duplicate-tool-name`, `unknown-tool`, ...), so agents, tests and scripts match on the
//! code, never on the message. The message is for people and models: it names the thing
//! that is wrong and, where there is one, the way out.

use std::path::PathBuf;

/// How an error message names the type of a JSON value that has the wrong one.
pub fn json_type_name(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A catalog file could not be read or parsed, or one of its entries is invalid.
    /// `location` is `line N`, `line N, column M` or a JSON pointer.
    #[error("{}: {location}: {message}", file.display())]
    BadCatalog {
        file: PathBuf,
        location: String,
        message: String,
    },

    /// A data set for `eval` (queries or tools) cannot be read.
    #[error("{}: {location}: {message}", file.display())]
    BadDataset {
        file: PathBuf,
        location: String,
        message: String,
    },

    /// The configuration file is unreadable, has a wrong type or an unknown key.
    #[error("{}: {message}", file.display())]
    BadConfig { file: PathBuf, message: String },

    /// The configured embedding model (`[search.semantic] model`) cannot be loaded: a file
    /// is missing or unreadable, or the model is not one this build can run. `file` is the
    /// file at fault (or the folder).
    #[error("embedding model {}: {message}", file.display())]
    BadModel { file: PathBuf, message: String },

    /// Two entries of one source share a name.
    #[error(
        "duplicate tool name `{name}` in source `{source_id}`: defined in {first} and again in {second}"
    )]
    DuplicateToolName {
        source_id: String,
        name: String,
        first: String,
        second: String,
    },

    /// A tool the model could see has nothing that runs it.
    #[error(
        "tool `{id}` is visible but has no executor (defined in {origin}); add an `executor` or mark it unavailable"
    )]
    MissingExecutor { id: String, origin: String },

    /// No tool in the effective catalog has this id or name.
    #[error("{}", unknown_tool_message(.requested, .suggestions, .hint))]
    UnknownTool {
        requested: String,
        suggestions: Vec<String>,
        hint: String,
    },

    /// A bare name matches several entries; the caller must use an id.
    #[error("tool name `{name}` is ambiguous: it matches {}; use an exact tool id", .candidates.join(", "))]
    AmbiguousTool {
        name: String,
        candidates: Vec<String>,
    },

    /// The tool exists but is not available now (a signal failed, or its source is down).
    #[error("tool {} is unavailable: {reason}", shown_id(.id))]
    UnavailableTool { id: String, reason: String },

    /// The arguments do not satisfy the tool's input schema.
    #[error("invalid arguments for `{id}`: {}", .errors.join("; "))]
    InvalidArguments { id: String, errors: Vec<String> },

    /// A tool's input schema cannot be compiled, so its calls cannot be checked (and are
    /// refused).
    #[error(
        "the input schema of `{id}` is not a valid JSON Schema ({message}); calls to it are refused"
    )]
    BadSchema { id: String, message: String },

    /// A valid schema's check of these arguments did not finish (stopped at its budget, or
    /// its checker died); the next call is checked again.
    #[error("the arguments of `{id}` could not be checked: {message}")]
    CheckStopped { id: String, message: String },

    /// Code mode cannot run here (no usable Node, or a required barrier missing).
    #[error("code mode is unavailable: {0}")]
    Unavailable(String),

    /// A server could not bind its address (in use, not permitted, not an address).
    #[error("cannot listen on {addr}: {message}")]
    Listen { addr: String, message: String },
    /// `mcp serve` could not serve (the transport failed).
    #[error("mcp serve: {0}")]
    Serve(String),

    /// Two tools that must be told apart by name share one (a client tool and a cataloged
    /// tool in directory mode).
    #[error(
        "tool name `{name}` is used by both `{first}` and `{second}`; the model calls these tools by their name, so rename one"
    )]
    NameCollision {
        name: String,
        first: String,
        second: String,
    },

    /// The model provider failed (unreachable, an error status, an answer that is not one).
    #[error("model provider: {0}")]
    Provider(String),

    /// The model kept asking for tools past the turn's round limit.
    #[error(
        "the model asked for tools in {0} rounds without finishing its answer (the round limit)"
    )]
    RoundLimit(usize),

    /// A request is malformed or exceeds a limit (too many batch queries, a query too long).
    #[error("{0}")]
    InvalidRequest(String),

    /// The command line was used wrongly (a file that does not exist, a bad `--k` list).
    #[error("{0}")]
    Usage(String),

    /// Building the search index failed. Tantivy errors here mean a bug or an exhausted
    /// resource, not bad input: every input is validated before it reaches the index.
    #[error("search index: {0}")]
    Index(String),
}

/// A tool id as a caller sent it, in backticks, echoed but not without bound: a caller's 60 KB "id" is
/// not worth 60 KB of the model's context (an unknown id, or one under a source that is
/// down).
fn shown_id(requested: &str) -> String {
    const SHOWN: usize = 200;
    if requested.chars().count() > SHOWN {
        let head: String = requested.chars().take(SHOWN).collect();
        format!(
            "`{head}...` ({} bytes; no tool id is that long)",
            requested.len()
        )
    } else {
        format!("`{requested}`")
    }
}

fn unknown_tool_message(requested: &str, suggestions: &[String], hint: &str) -> String {
    let mut message = format!("unknown tool {}", shown_id(requested));
    if !suggestions.is_empty() {
        message.push_str("; did you mean ");
        message.push_str(
            &suggestions
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        message.push('?');
    }
    if !hint.is_empty() {
        message.push_str(if suggestions.is_empty() { ". " } else { " " });
        message.push_str(hint);
        message.push('.');
    }
    message
}

impl Error {
    /// The stable machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadCatalog { .. } => "bad-catalog",
            Error::BadConfig { .. } => "bad-config",
            Error::BadModel { .. } => "bad-model",
            Error::BadDataset { .. } => "bad-dataset",
            Error::DuplicateToolName { .. } => "duplicate-tool-name",
            Error::MissingExecutor { .. } => "missing-executor",
            Error::UnknownTool { .. } => "unknown-tool",
            Error::AmbiguousTool { .. } => "ambiguous-tool",
            Error::UnavailableTool { .. } => "unavailable-tool",
            Error::InvalidArguments { .. } => "invalid-arguments",
            Error::BadSchema { .. } => "bad-schema",
            Error::CheckStopped { .. } => "check-stopped",
            Error::Unavailable(_) => "unavailable",
            Error::Listen { .. } => "cannot-listen",
            Error::Serve(_) => "serve-error",
            Error::NameCollision { .. } => "name-collision",
            Error::Provider(_) => "provider-error",
            Error::RoundLimit(_) => "round-limit",
            Error::InvalidRequest(_) => "invalid-request",
            Error::Usage(_) => "usage",
            Error::Index(_) => "index",
        }
    }

    /// The process exit code (the CLI documents them): 1 when a tool lookup or call was refused,
    /// 2 for bad usage, configuration or catalog.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::UnknownTool { .. }
            | Error::AmbiguousTool { .. }
            | Error::UnavailableTool { .. }
            | Error::InvalidArguments { .. }
            | Error::BadSchema { .. }
            | Error::CheckStopped { .. }
            | Error::Unavailable(_)
            | Error::Serve(_)
            | Error::Listen { .. }
            | Error::Provider(_)
            | Error::RoundLimit(_) => 1,
            Error::BadCatalog { .. }
            | Error::BadConfig { .. }
            | Error::BadModel { .. }
            | Error::BadDataset { .. }
            | Error::DuplicateToolName { .. }
            | Error::NameCollision { .. }
            | Error::MissingExecutor { .. }
            | Error::InvalidRequest(_)
            | Error::Usage(_)
            | Error::Index(_) => 2,
        }
    }

    pub(crate) fn bad_catalog(
        file: impl Into<PathBuf>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::BadCatalog {
            file: file.into(),
            location: location.into(),
            message: message.into(),
        }
    }
}

impl From<tantivy::TantivyError> for Error {
    fn from(e: tantivy::TantivyError) -> Self {
        Error::Index(e.to_string())
    }
}
