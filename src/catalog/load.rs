//! Reading catalog files in every format README's "Catalog files" names.
//!
//! | shape | recognised by | source |
//! |---|---|---|
//! | descriptor file `{"tools": [...]}` | object with `tools`, no `inputSchema` | each descriptor's `source`, default `openclaw:core` |
//! | plugin manifest `{"plugin": "id", "tools": [...]}` | a `plugin` key | `openclaw:<id>` |
//! | MCP `tools/list` result `{"tools": [{"inputSchema"...}]}` | `inputSchema` in a tool, a `server` key, or a JSON-RPC envelope | `mcp:<server or file stem>` |
//! | OpenAI `tools` array `[{"type": "function", ...}]` | a top-level array | `client:client` |
//! | JSONL, one descriptor a line | the `.jsonl` extension | as for a descriptor file |
//!
//! A folder loads every `.json` and `.jsonl` file under it, sorted by path. Our own
//! descriptor format is strict (an unknown key is an error, since it is almost always a
//! typo that would silently drop a setting); MCP and OpenAI shapes are read leniently,
//! because servers and clients add fields over time.
//!
//! A bad file fails the whole load with its path, the line or JSON pointer, and what is
//! wrong: a catalog is never loaded half.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::descriptor::{
    Availability, CatalogMode, ExecutionMode, ExecutorSpec, Schema, Source, ToolDescriptor,
    safe_name,
};
use crate::error::{Error, Result, json_type_name};

/// Bounds on what one descriptor may hold. Past these a file is refused, not trimmed: a
/// 400 KB description or a schema nested 64 deep is a broken or hostile file, and trimming
/// it silently would change what the tool means.
pub mod limits {
    pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
    pub const MAX_NAME_CHARS: usize = 128;
    pub const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;
    pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
    /// JSON nesting of an input or output schema. Real schemas stay under 10.
    pub const MAX_SCHEMA_DEPTH: usize = 32;
    /// A catalog folder: its files, all their bytes, and how deep its folders go.
    pub const MAX_FOLDER_FILES: usize = 10_000;
    pub const MAX_FOLDER_BYTES: u64 = 512 * 1024 * 1024;
    pub const MAX_FOLDER_DEPTH: usize = 32;
}

/// One catalog file as read: its size and encoding checked, not yet parsed.
#[derive(Debug, Clone)]
pub struct CatalogText {
    pub path: PathBuf,
    pub text: String,
}

impl CatalogText {
    /// Its descriptors.
    pub fn parse(&self) -> Result<Vec<ToolDescriptor>> {
        parse_catalog_text(&self.path, &self.text)
    }
}

/// Loads one file or every catalog file under a folder.
pub fn load_path(path: &Path) -> Result<Vec<ToolDescriptor>> {
    let mut out = Vec::new();
    for file in read_path(path)? {
        out.extend(file.parse()?);
    }
    Ok(out)
}

/// Reads one file, or every catalog file under a folder in path order, without parsing: a
/// file that cannot be read, is too large or is not UTF-8 is an error here.
pub fn read_path(path: &Path) -> Result<Vec<CatalogText>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::bad_catalog(path, "open", format!("cannot read: {e}")))?;
    if meta.is_dir() {
        let mut walk = Walk::default();
        walk.folder(path, 0)?;
        let mut files = walk.files;
        files.sort();
        if files.is_empty() {
            tracing::warn!(folder = %path.display(), "no .json or .jsonl catalog files in folder");
        }
        let mut total = 0u64;
        let mut texts = Vec::with_capacity(files.len());
        for f in &files {
            let text = read_file(f)?;
            total += text.text.len() as u64;
            if total > limits::MAX_FOLDER_BYTES {
                return Err(Error::bad_catalog(
                    path,
                    "folder",
                    format!(
                        "its catalog files hold more than {} bytes in all",
                        limits::MAX_FOLDER_BYTES
                    ),
                ));
            }
            texts.push(text);
        }
        Ok(texts)
    } else {
        Ok(vec![read_file(path)?])
    }
}

/// The walk of a catalog folder. Linked folders are followed (a plugin's folder linked
/// into the catalog), each folder at most once, by its device and inode: two links back
/// to `.` made ~2^40 paths of one folder (review 26 F4). Hidden entries are skipped.
#[derive(Default)]
struct Walk {
    seen: std::collections::HashSet<(u64, u64)>,
    files: Vec<PathBuf>,
}

impl Walk {
    fn folder(&mut self, dir: &Path, depth: usize) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let refuse = |what: String| Error::bad_catalog(dir, "folder", what);
        if depth > limits::MAX_FOLDER_DEPTH {
            return Err(refuse(format!(
                "folders nest more than {} deep",
                limits::MAX_FOLDER_DEPTH
            )));
        }
        let meta = std::fs::metadata(dir)
            .map_err(|e| Error::bad_catalog(dir, "open", format!("cannot read: {e}")))?;
        if !self.seen.insert((meta.dev(), meta.ino())) {
            tracing::debug!(folder = %dir.display(), "skipping a folder already read");
            return Ok(());
        }
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::bad_catalog(dir, "open", format!("cannot list folder: {e}")))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::bad_catalog(dir, "open", format!("cannot list: {e}")))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                self.folder(&path, depth + 1)?;
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("json" | "jsonl")
            ) {
                if self.files.len() == limits::MAX_FOLDER_FILES {
                    return Err(refuse(format!(
                        "more than {} catalog files under it",
                        limits::MAX_FOLDER_FILES
                    )));
                }
                self.files.push(path);
            } else {
                tracing::debug!(file = %path.display(), "skipping a file that is not .json or .jsonl");
            }
        }
        Ok(())
    }
}

/// A catalog file's bytes: a regular file (a link to one is fine), read to at most
/// [`limits::MAX_FILE_BYTES`]. Opened without waiting and looked at once open, so what is
/// read is what was looked at: a FIFO named `tools.json` held the command forever, and a
/// link to `/dev/zero` (0 bytes by its size) grew it to a gigabyte (review 25 F5).
fn read_file(path: &Path) -> Result<CatalogText> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| Error::bad_catalog(path, "open", format!("cannot read: {e}"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(Error::bad_catalog(
            path,
            "file",
            "not a regular file (a catalog file must be one, or a link to one)",
        ));
    }
    let too_big = |len: u64| {
        Error::bad_catalog(
            path,
            "file",
            format!(
                "file is {len} bytes; the limit is {} bytes",
                limits::MAX_FILE_BYTES
            ),
        )
    };
    if meta.len() > limits::MAX_FILE_BYTES {
        return Err(too_big(meta.len()));
    }
    // Bounded as read too: a file may grow between the look and the read.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limits::MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limits::MAX_FILE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::bad_catalog(
            path,
            format!("byte {}", e.utf8_error().valid_up_to()),
            "not valid UTF-8",
        )
    })?;
    Ok(CatalogText {
        path: path.to_path_buf(),
        text,
    })
}

/// Parses the text of one catalog file; `path` names it in errors and decides JSON or JSONL.
pub fn parse_catalog_text(path: &Path, text: &str) -> Result<Vec<ToolDescriptor>> {
    let jsonl = path.extension().and_then(|e| e.to_str()) == Some("jsonl");
    if jsonl {
        parse_jsonl(path, text)
    } else {
        parse_json(path, text)
    }
}

fn parse_jsonl(path: &Path, text: &str) -> Result<Vec<ToolDescriptor>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| {
            Error::bad_catalog(
                path,
                format!("line {line_no}, column {}", e.column()),
                json_error_message(&e),
            )
        })?;
        let at = |pointer: &str| format!("line {line_no}{}", pointer_suffix(pointer));
        let raw: RawDescriptor =
            typed(value).map_err(|(p, m)| Error::bad_catalog(path, at(&p), m))?;
        let origin = format!("{} line {line_no}", path.display());
        out.push(
            raw.into_descriptor(Defaults::descriptor_file(), origin)
                .map_err(|(p, m)| Error::bad_catalog(path, at(&p), m))?,
        );
    }
    Ok(out)
}

fn parse_json(path: &Path, text: &str) -> Result<Vec<ToolDescriptor>> {
    let mut value: Value = serde_json::from_str(text).map_err(|e| {
        Error::bad_catalog(
            path,
            format!("line {}, column {}", e.line(), e.column()),
            json_error_message(&e),
        )
    })?;
    let mut base = String::new();
    // A saved JSON-RPC response to `tools/list`: read its `result`.
    if let Some(obj) = value.as_object_mut()
        && obj.contains_key("jsonrpc")
    {
        match obj.remove("result") {
            Some(result) => {
                value = result;
                base.push_str("/result");
            }
            None => {
                return Err(Error::bad_catalog(
                    path,
                    "/",
                    "a JSON-RPC message without `result` (an error response?) holds no tools",
                ));
            }
        }
    }
    let fail = |pointer: String, message: String| {
        Error::bad_catalog(path, format!("{base}{pointer}").replace("//", "/"), message)
    };
    match value {
        Value::Array(items) => parse_openai_tools(path, items).map_err(|(p, m)| fail(p, m)),
        Value::Object(ref obj) => {
            let is_mcp = obj.contains_key("server")
                || obj.contains_key("nextCursor")
                || obj
                    .get("tools")
                    .and_then(Value::as_array)
                    .is_some_and(|tools| tools.iter().any(|t| t.get("inputSchema").is_some()));
            if is_mcp {
                parse_mcp_result(path, value).map_err(|(p, m)| fail(p, m))
            } else {
                parse_manifest(path, value).map_err(|(p, m)| fail(p, m))
            }
        }
        _ => Err(fail(
            "/".into(),
            "expected an object with `tools` or an array of OpenAI tools".into(),
        )),
    }
}

/// serde_json's message without the ` at line L column C` it appends: the caller reports
/// the position itself (the line of a JSONL file, not of the one-line document).
pub(crate) fn json_error_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

/// A failure inside a document: (JSON pointer, message).
type Located = (String, String);

/// Deserializes with the JSON pointer of the first failure.
fn typed<T: for<'de> Deserialize<'de>>(value: Value) -> std::result::Result<T, Located> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let pointer = pointer_of(e.path());
        (pointer, e.into_inner().to_string())
    })
}

fn pointer_of(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Enum { variant } => {
                out.push('/');
                out.push_str(variant);
            }
            Segment::Unknown => out.push_str("/?"),
        }
    }
    if out.is_empty() { "/".into() } else { out }
}

fn pointer_suffix(pointer: &str) -> String {
    if pointer == "/" || pointer.is_empty() {
        String::new()
    } else {
        format!(", {pointer}")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[serde(default)]
    plugin: Option<String>,
    #[serde(default, rename = "$schema")]
    _schema: Option<String>,
    #[serde(default)]
    _comment: Option<Value>,
    tools: Vec<Value>,
}

fn parse_manifest(path: &Path, value: Value) -> std::result::Result<Vec<ToolDescriptor>, Located> {
    let manifest: RawManifest = typed(value)?;
    let defaults = match &manifest.plugin {
        Some(plugin) => {
            if plugin.is_empty() || safe_name(plugin) != *plugin {
                return Err((
                    "/plugin".into(),
                    format!(
                        "plugin id `{plugin}` must be lowercase letters, digits, `_` or `-` (try `{}`)",
                        safe_name(plugin)
                    ),
                ));
            }
            Defaults::plugin(plugin)
        }
        None => Defaults::descriptor_file(),
    };
    let mut out = Vec::with_capacity(manifest.tools.len());
    for (i, tool) in manifest.tools.into_iter().enumerate() {
        let at = |(p, m): Located| (format!("/tools/{i}{}", p.trim_end_matches('/')), m);
        let raw: RawDescriptor = typed(tool).map_err(at)?;
        let origin = format!("{}#/tools/{i}", path.display());
        out.push(raw.into_descriptor(defaults.clone(), origin).map_err(at)?);
    }
    Ok(out)
}

#[derive(Deserialize)]
struct RawMcpResult {
    #[serde(default)]
    server: Option<String>,
    tools: Vec<RawMcpTool>,
}

/// A tool as MCP's `tools/list` returns it. Unknown fields (annotations, icons, `_meta`)
/// are accepted and ignored: they are the server's, not ours to police.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMcpTool {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
}

fn parse_mcp_result(
    path: &Path,
    value: Value,
) -> std::result::Result<Vec<ToolDescriptor>, Located> {
    let result: RawMcpResult = typed(value)?;
    let server = match result.server {
        Some(s) => s,
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let server = safe_name(&server);
    let mut out = Vec::with_capacity(result.tools.len());
    for (i, tool) in result.tools.into_iter().enumerate() {
        let origin = format!("{}#/tools/{i}", path.display());
        out.push(
            mcp_descriptor(&server, tool, origin)
                .map_err(|(p, m)| (format!("/tools/{i}{p}"), m))?,
        );
    }
    Ok(out)
}

/// One tool of MCP's `tools/list`, checked like any descriptor (its schemas are kept as
/// given: they are never indexed, being untrusted).
fn mcp_descriptor(
    server: &str,
    tool: RawMcpTool,
    origin: String,
) -> std::result::Result<ToolDescriptor, Located> {
    let (input_schema, output_schema) = schemas(
        ("inputSchema", &tool.input_schema),
        tool.output_schema.as_ref().map(|o| ("outputSchema", o)),
    )?;
    let descriptor = ToolDescriptor {
        executor: Some(ExecutorSpec::Mcp {
            server: server.to_string(),
            tool: tool.name.clone(),
        }),
        name: tool.name,
        description: tool.description.unwrap_or_default(),
        input_schema,
        output_schema,
        label: tool.title,
        source: Source::Mcp,
        source_name: server.to_string(),
        catalog_mode: CatalogMode::Catalog,
        availability: None,
        tags: Vec::new(),
        sort_key: None,
        execution_mode: ExecutionMode::Parallel,
        strict: None,
        origin,
    };
    validate(&descriptor)?;
    Ok(descriptor)
}

/// The tools a live MCP server listed (each as it came on the wire), as descriptors of
/// source `mcp:SERVER`. A tool that fails the checks is left out and named in the second
/// list, so one bad tool does not hide a whole server.
pub fn mcp_server_tools(server: &str, tools: Vec<Value>) -> (Vec<ToolDescriptor>, Vec<String>) {
    let mut out = Vec::with_capacity(tools.len());
    let mut skipped = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, value) in tools.into_iter().enumerate() {
        let name = value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .chars()
            .take(64)
            .collect::<String>();
        let parsed = typed::<RawMcpTool>(value).and_then(|t| {
            mcp_descriptor(server, t, format!("mcp server `{server}`, tools/list #{i}"))
        });
        match parsed {
            // A second tool of one name: left out like any bad tool, so the server and
            // the rest of the catalog stay (review 18: the whole catalog failed to plan,
            // every command and host with it, and a late duplicate froze every later
            // rebuild).
            Ok(d) if !names.insert(d.name.clone()) => skipped.push(format!(
                "tool #{i} `{name}` left out: a tool of that name came before it"
            )),
            Ok(d) => out.push(d),
            Err((p, m)) => skipped.push(format!("tool #{i} `{name}` left out: {p}: {m}")),
        }
    }
    (out, skipped)
}

/// The function of an OpenAI tool: nested under `function` (Chat Completions) or at the
/// top of the tool (Responses), `strict` in either place. Other keys (`type`) are ignored.
#[derive(Deserialize)]
struct RawOpenAiFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    strict: Option<bool>,
}

fn parse_openai_tools(
    path: &Path,
    items: Vec<Value>,
) -> std::result::Result<Vec<ToolDescriptor>, Located> {
    let mut out = Vec::with_capacity(items.len());
    for (i, mut item) in items.into_iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "function" {
            return Err((
                format!("/{i}/type"),
                format!(
                    "tool type `{kind}` is not supported; only `function` tools can be cataloged"
                ),
            ));
        }
        if item.get("function").is_none() && item.get("name").is_none() {
            return Err((
                format!("/{i}"),
                "a function tool needs `function.name` (Chat Completions) or `name` (Responses)"
                    .into(),
            ));
        }
        let (function, base) = match item.get_mut("function") {
            Some(f) => (f.take(), format!("/{i}/function")),
            None => (item, format!("/{i}")),
        };
        let at = |(p, m): Located| (format!("{base}{}", p.trim_end_matches('/')), m);
        let f: RawOpenAiFunction = typed(function).map_err(at)?;
        let parameters = f.parameters.unwrap_or_else(empty_object_schema);
        let (input_schema, _) = schemas(("parameters", &parameters), None).map_err(at)?;
        let (name, description) = (f.name, f.description);
        let descriptor = ToolDescriptor {
            name,
            description: description.unwrap_or_default(),
            input_schema,
            output_schema: None,
            label: None,
            source: Source::Client,
            source_name: "client".into(),
            catalog_mode: CatalogMode::Catalog,
            availability: None,
            executor: Some(ExecutorSpec::Client),
            tags: Vec::new(),
            sort_key: None,
            execution_mode: ExecutionMode::Parallel,
            strict: f.strict,
            origin: format!("{}#/{i}", path.display()),
        };
        validate(&descriptor).map_err(at)?;
        out.push(descriptor);
    }
    Ok(out)
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Our own descriptor format (README, "Catalog files"). Strict: an unknown key is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "empty_object_schema")]
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    source_name: Option<String>,
    #[serde(default)]
    catalog_mode: CatalogMode,
    #[serde(default)]
    availability: Option<Availability>,
    #[serde(default)]
    executor: Option<ExecutorSpec>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    sort_key: Option<String>,
    #[serde(default)]
    execution_mode: ExecutionMode,
}

/// What a file's context says about descriptors that do not name their source.
#[derive(Clone)]
struct Defaults {
    source: Source,
    source_name: String,
    /// In a plugin manifest the plugin id is the only possible source.
    locked: bool,
}

impl Defaults {
    fn descriptor_file() -> Self {
        Defaults {
            source: Source::Openclaw,
            source_name: "core".into(),
            locked: false,
        }
    }

    fn plugin(id: &str) -> Self {
        Defaults {
            source: Source::Openclaw,
            source_name: id.into(),
            locked: true,
        }
    }
}

impl RawDescriptor {
    fn into_descriptor(
        self,
        defaults: Defaults,
        origin: String,
    ) -> std::result::Result<ToolDescriptor, Located> {
        if defaults.locked {
            if self.source.is_some_and(|s| s != defaults.source) {
                return Err((
                    "/source".into(),
                    "a plugin manifest's tools are `openclaw` tools; remove `source`".into(),
                ));
            }
            if self
                .source_name
                .as_ref()
                .is_some_and(|s| *s != defaults.source_name)
            {
                return Err((
                    "/source_name".into(),
                    format!(
                        "a tool of plugin `{}` cannot name another source; remove `source_name`",
                        defaults.source_name
                    ),
                ));
            }
        }
        let source = self.source.unwrap_or(defaults.source);
        let source_name = match (self.source_name, source) {
            (Some(name), _) => name,
            (None, Source::Openclaw) => defaults.source_name,
            (None, Source::Client) => "client".into(),
            (None, Source::Mcp) => {
                return Err((
                    "/source_name".into(),
                    "an `mcp` tool needs `source_name`: the server's name".into(),
                ));
            }
        };
        if source_name.is_empty() || safe_name(&source_name) != source_name {
            return Err((
                "/source_name".into(),
                format!(
                    "source name `{source_name}` must be lowercase letters, digits, `_` or `-` (try `{}`)",
                    safe_name(&source_name)
                ),
            ));
        }
        let (input_schema, output_schema) = schemas(
            ("input_schema", &self.input_schema),
            self.output_schema.as_ref().map(|o| ("output_schema", o)),
        )?;
        let descriptor = ToolDescriptor {
            name: self.name,
            description: self.description,
            input_schema,
            output_schema,
            label: self.label,
            source,
            source_name,
            catalog_mode: self.catalog_mode,
            availability: self.availability,
            executor: self.executor,
            tags: self.tags,
            sort_key: self.sort_key,
            execution_mode: self.execution_mode,
            strict: None,
            origin,
        };
        validate(&descriptor)?;
        Ok(descriptor)
    }
}

/// The checks every descriptor passes, whatever format it came in.
pub(crate) fn validate(d: &ToolDescriptor) -> std::result::Result<(), Located> {
    let name_chars = d.name.chars().count();
    if name_chars == 0 {
        return Err(("/name".into(), "tool name is empty".into()));
    }
    if name_chars > limits::MAX_NAME_CHARS {
        return Err((
            "/name".into(),
            format!(
                "tool name is {name_chars} characters; the limit is {}",
                limits::MAX_NAME_CHARS
            ),
        ));
    }
    if let Some(bad) = d
        .name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == ':')
    {
        return Err((
            "/name".into(),
            format!(
                "tool name `{}` contains {bad:?}; names may not hold whitespace, control characters or `:` (the id separator)",
                d.name.escape_debug()
            ),
        ));
    }
    if d.description.len() > limits::MAX_DESCRIPTION_BYTES {
        return Err((
            "/description".into(),
            format!(
                "description is {} bytes; the limit is {} bytes",
                d.description.len(),
                limits::MAX_DESCRIPTION_BYTES
            ),
        ));
    }
    if let Some(ExecutorSpec::Command { command, .. }) = &d.executor
        && command.first().is_none_or(|p| p.is_empty())
    {
        return Err((
            "/executor/command".into(),
            "a command executor needs the program as the first element".into(),
        ));
    }
    Ok(())
}

/// Checks the schemas of one tool and keeps them as text. Each comes with the key it has
/// in its file's format (`input_schema`, `inputSchema`, `parameters`), for the pointer.
fn schemas(
    input: (&str, &Value),
    output: Option<(&str, &Value)>,
) -> std::result::Result<(Schema, Option<Schema>), Located> {
    let input = check_schema(&format!("/{}", input.0), input.1)?;
    let output = output
        .map(|(key, o)| check_schema(&format!("/{key}"), o))
        .transpose()?;
    Ok((input, output))
}

fn check_schema(pointer: &str, schema: &Value) -> std::result::Result<Schema, Located> {
    if !schema.is_object() {
        return Err((
            pointer.into(),
            format!(
                "a schema must be a JSON object, not {}",
                json_type_name(schema)
            ),
        ));
    }
    let depth = json_depth(schema);
    if depth > limits::MAX_SCHEMA_DEPTH {
        return Err((
            pointer.into(),
            format!(
                "schema is nested {depth} levels deep; the limit is {}",
                limits::MAX_SCHEMA_DEPTH
            ),
        ));
    }
    super::schema_cost::expanded_nodes(schema).map_err(|why| (pointer.to_string(), why))?;
    let patterns = super::schema_cost::patterns(schema);
    if patterns > super::schema_cost::MAX_PATTERNS {
        return Err((
            pointer.into(),
            format!(
                "schema holds {patterns} regular expressions (`pattern`, `patternProperties`); the limit is {}: each is compiled at the tool's first call",
                super::schema_cost::MAX_PATTERNS
            ),
        ));
    }
    let compact = Schema::from_value(schema);
    let bytes = compact.as_str().len();
    if bytes > limits::MAX_SCHEMA_BYTES {
        return Err((
            pointer.into(),
            format!(
                "schema is {bytes} bytes; the limit is {} bytes",
                limits::MAX_SCHEMA_BYTES
            ),
        ));
    }
    Ok(compact)
}

/// Nesting depth of a JSON value, counted without recursion so that no input can
/// overflow the stack (serde_json already caps parsing at 128 levels).
pub(crate) fn json_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linked folders are followed once each: links back to the folder itself (`x -> .`,
    /// `y -> .`) made ~2^40 paths (review 26 F4); a linked plugin folder is still read.
    #[test]
    fn a_folder_walk_reads_each_folder_once_and_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("catalog");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.json"), "[]").unwrap();
        for name in ["x", "y", "z"] {
            std::os::unix::fs::symlink(".", root.join(name)).unwrap();
        }
        let plugin = dir.path().join("plugin");
        std::fs::create_dir(&plugin).unwrap();
        std::fs::write(plugin.join("p.json"), "[]").unwrap();
        std::os::unix::fs::symlink("../plugin", root.join("linked")).unwrap();
        std::os::unix::fs::symlink("..", plugin.join("up")).unwrap();
        let files = read_path(&root).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"a.json".to_string()) && names.contains(&"p.json".to_string()));

        // Too deep: a chain of real folders past the bound is refused by name.
        let mut deep = dir.path().join("deep");
        for _ in 0..=limits::MAX_FOLDER_DEPTH + 1 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let e = read_path(&dir.path().join("deep")).unwrap_err().to_string();
        assert!(e.contains("nest more than"), "{e}");
    }

    /// Only regular files are read: a FIFO or a link to a device named like a catalog file
    /// is refused, never waited on or read without end (review 25 F5).
    #[test]
    fn a_catalog_file_that_is_not_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe.json"))
            .status()
            .unwrap();
        assert!(status.success());
        for name in ["zero.json", "pipe.json"] {
            let e = read_path(&dir.path().join(name)).unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{name}: {e}");
        }
        std::fs::write(dir.path().join("fine.json"), "[]").unwrap();
        assert!(read_path(&dir.path().join("fine.json")).is_ok());
        // In a folder, too.
        assert!(read_path(dir.path()).is_err());
    }

    fn parse(name: &str, text: &str) -> Result<Vec<ToolDescriptor>> {
        parse_catalog_text(Path::new(name), text)
    }

    #[test]
    fn descriptor_file_defaults_to_openclaw_core() {
        let tools = parse(
            "a.json",
            r#"{"tools": [{"name": "message", "description": "Send", "executor": {"kind": "fixture", "text": "ok"}}]}"#,
        )
        .unwrap();
        assert_eq!(tools[0].id(), "openclaw:core:message");
    }

    #[test]
    fn plugin_manifest_sets_the_source_name() {
        let tools = parse(
            "gh.json",
            r#"{"plugin": "github", "tools": [{"name": "create_issue"}]}"#,
        )
        .unwrap();
        assert_eq!(tools[0].id(), "openclaw:github:create_issue");
    }

    #[test]
    fn plugin_tool_cannot_claim_another_source() {
        let e = parse(
            "gh.json",
            r#"{"plugin": "github", "tools": [{"name": "x", "source": "mcp", "source_name": "y"}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("/tools/0/source"), "{e}");
    }

    #[test]
    fn mcp_result_uses_server_or_file_stem() {
        let tools = parse(
            "dir/Everything.json",
            r#"{"tools": [{"name": "echo", "inputSchema": {"type": "object"}, "annotations": {}}]}"#,
        )
        .unwrap();
        assert_eq!(tools[0].id(), "mcp:everything:echo");
        assert_eq!(
            tools[0].executor,
            Some(ExecutorSpec::Mcp {
                server: "everything".into(),
                tool: "echo".into()
            })
        );
        let tools = parse(
            "x.json",
            r#"{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "echo", "inputSchema": {}}]}}"#,
        )
        .unwrap();
        assert_eq!(tools[0].id(), "mcp:x:echo");
    }

    /// A server's schema whose references stand for 2^40 subschemas is left out at load,
    /// named, before any call validates against it (review 20 F1).
    #[test]
    fn a_schema_costly_once_its_references_are_followed_is_left_out() {
        use serde_json::json;
        let mut defs = serde_json::Map::new();
        for i in 0..40 {
            let next = format!("#/$defs/d{}", i + 1);
            defs.insert(
                format!("d{i}"),
                json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("d40".into(), json!({"type": "string"}));
        let bomb =
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
        let (tools, skipped) = mcp_server_tools(
            "srv",
            vec![
                json!({"name": "ok", "inputSchema": {"type": "object"}}),
                json!({"name": "bomb", "inputSchema": bomb}),
            ],
        );
        assert_eq!(tools.len(), 1);
        assert!(skipped[0].contains("`bomb`"), "{skipped:?}");
        assert!(skipped[0].contains("subschemas"), "{skipped:?}");
    }

    /// A server's schema with more regular expressions than are compiled is left out at
    /// load, named (sandbox round 36 F1: 400 costly patterns held a host 7.7 s).
    #[test]
    fn a_schema_with_too_many_patterns_is_left_out() {
        use serde_json::json;
        let many = |n: usize| {
            let props: serde_json::Map<String, serde_json::Value> = (0..n)
                .map(|i| {
                    (
                        format!("p{i}"),
                        json!({"type": "string", "pattern": "^a+$"}),
                    )
                })
                .collect();
            json!({"type": "object", "properties": props})
        };
        let (tools, skipped) = mcp_server_tools(
            "srv",
            vec![
                json!({"name": "enough", "inputSchema": many(super::super::schema_cost::MAX_PATTERNS)}),
                json!({"name": "too_many", "inputSchema": many(super::super::schema_cost::MAX_PATTERNS + 1)}),
            ],
        );
        assert_eq!(tools.len(), 1, "{skipped:?}");
        assert!(skipped[0].contains("`too_many`"), "{skipped:?}");
        assert!(skipped[0].contains("regular expressions"), "{skipped:?}");
    }

    #[test]
    fn a_live_server_bad_tool_is_left_out_and_named() {
        use serde_json::json;
        let deep = (0..40).fold(
            json!({}),
            |acc, _| json!({"type": "object", "properties": {"x": acc}}),
        );
        let (tools, skipped) = mcp_server_tools(
            "srv",
            vec![
                json!({"name": "ok", "description": "fine", "inputSchema": {"type": "object"}}),
                json!({"name": "has space", "inputSchema": {}}),
                json!({"name": "deep", "inputSchema": deep}),
                json!({"name": "no_schema"}),
            ],
        );
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].id(), "mcp:srv:ok");
        assert_eq!(tools[0].source, Source::Mcp);
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(
            skipped[0].contains("`has space`") && skipped[0].contains("/name"),
            "{skipped:?}"
        );
        assert!(skipped[1].contains("levels deep"), "{skipped:?}");
        assert!(skipped[2].contains("inputSchema"), "{skipped:?}");
        // A second tool of one name is left out, not the whole catalog (review 18).
        let (tools, skipped) = mcp_server_tools(
            "srv",
            vec![
                json!({"name": "twice", "description": "first", "inputSchema": {"type": "object"}}),
                json!({"name": "twice", "description": "second", "inputSchema": {"type": "object"}}),
            ],
        );
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].description, "first");
        assert!(skipped[0].contains("came before it"), "{skipped:?}");
    }

    #[test]
    fn openai_tools_of_both_shapes_are_client_tools() {
        let tools = parse(
            "t.json",
            r#"[{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
                {"type": "function", "name": "b", "description": "B"}]"#,
        )
        .unwrap();
        assert_eq!(tools[0].id(), "client:client:a");
        assert_eq!(tools[1].id(), "client:client:b");
        assert_eq!(tools[1].description, "B");
    }

    #[test]
    fn jsonl_errors_name_the_line_and_pointer() {
        let e = parse(
            "t.jsonl",
            "{\"name\": \"a\"}\n\n{\"name\": \"b\", \"executor\": {\"kind\": \"teleport\"}}\n",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("t.jsonl: line 3, /executor"), "{text}");
        assert!(text.contains("teleport"), "{text}");
        let e = parse("t.jsonl", "{\"name\": \"a\"\n").unwrap_err();
        assert!(e.to_string().contains("line 1, column"), "{e}");
    }

    #[test]
    fn wrong_types_and_unknown_keys_name_the_pointer() {
        let e = parse("t.json", r#"{"tools": [{"name": 3}]}"#).unwrap_err();
        assert!(e.to_string().contains("/tools/0/name"), "{e}");
        assert!(e.to_string().contains("expected a string"), "{e}");
        let e = parse(
            "t.json",
            r#"{"tools": [{"name": "a", "descripton": "typo"}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("descripton"), "{e}");
        let e = parse("t.json", r#"{"tool": []}"#).unwrap_err();
        assert!(e.to_string().contains("tool"), "{e}");
    }

    #[test]
    fn oversized_and_deep_inputs_are_refused() {
        let big = "x".repeat(400 * 1024);
        let text = format!(r#"{{"tools": [{{"name": "a", "description": "{big}"}}]}}"#);
        let e = parse("t.json", &text).unwrap_err();
        assert!(e.to_string().contains("/tools/0/description"), "{e}");
        assert!(e.to_string().contains("409600 bytes"), "{e}");

        // 64 levels of JSON nesting: 32 schemas, each an object holding `properties`.
        let mut schema = String::from(r#"{"type": "object"}"#);
        for _ in 0..32 {
            schema = format!(r#"{{"type": "object", "properties": {{"a": {schema}}}}}"#);
        }
        let text = format!(r#"{{"tools": [{{"name": "a", "input_schema": {schema}}}]}}"#);
        let e = parse("t.json", &text).unwrap_err();
        assert!(e.to_string().contains("/tools/0/input_schema"), "{e}");
        assert!(e.to_string().contains("levels deep"), "{e}");
    }

    #[test]
    fn names_with_separators_are_refused() {
        let e = parse("t.json", r#"{"tools": [{"name": "a:b"}]}"#).unwrap_err();
        assert!(e.to_string().contains("id separator"), "{e}");
        let e = parse("t.json", r#"{"tools": [{"name": ""}]}"#).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }
}
