//! What the model sees, per mode, built from the one policy-filtered catalog:
//!
//! - `code`: `tool_search_code` plus every direct-only tool;
//! - `tools`: `tool_search`, `tool_describe`, `tool_call` plus the direct-only tools;
//! - `directory`: the three structured tools, the direct-only and client tools, a bounded
//!   directory of names in the system prompt and a few full schemas likely needed for this
//!   prompt;
//! - `direct`: every visible tool's schema (the baseline);
//! - `auto`: direct while the visible schemas are small, else code (or tools without Node).
//!
//! Fallbacks never hide tools behind a control the model cannot call: code mode without a
//! usable Node, or with `tool_search_code` denied by the policy, falls to tools; tools and
//! directory with a structured control denied fall to direct. Each step is a reason in the
//! surface (and so in `surface`, `catalog` and the session log).
//!
//! The surface only shapes what is declared. Every call made through it goes through the
//! one dispatch path.

use serde::Serialize;
use serde_json::json;

use crate::catalog::{Catalog, Entry, Source, compact};
use crate::config::Mode;
use crate::error::{Error, Result};
use crate::provider::ToolSpec;
use crate::texts;

pub const TOOL_SEARCH_CODE: &str = "tool_search_code";
pub const TOOL_SEARCH: &str = "tool_search";
pub const TOOL_DESCRIBE: &str = "tool_describe";
pub const TOOL_CALL: &str = "tool_call";

/// The directory's bound, and its share of a small context window.
pub const DIRECTORY_MAX_CHARS: usize = 18_000;
/// Directory characters per 1,000 tokens of context window: 10% of the window at ~4 chars a
/// token, so an 8k-token model gets ~3,200 characters.
const DIRECTORY_CHARS_PER_K_TOKENS: usize = 400;
pub const DIRECTORY_LINE_CHARS: usize = 180;
pub const LIKELY_DEFAULT: usize = 4;
pub const LIKELY_MAX: usize = 12;

/// `auto` stays direct up to this many tools and this many schema bytes (or 5% of a known
/// context window, at ~4 bytes a token, whichever is smaller).
pub const AUTO_MAX_TOOLS: usize = 24;
pub const AUTO_MAX_BYTES: usize = 16 * 1024;

/// What shapes a surface besides the catalog.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    pub mode: Mode,
    /// `Err(reason)` when no usable Node was found.
    pub code_available: std::result::Result<(), String>,
    pub prompt: &'a str,
    pub context_window: Option<usize>,
    pub likely: usize,
    pub required: &'a [String],
    pub code_timeout_ms: u64,
}

impl<'a> Options<'a> {
    /// The options every host derives from its config: `[surface]`'s context window, likely
    /// schemas and required tools, with the mode, code-mode availability, the prompt and the
    /// catalog's code timeout of this request.
    pub fn new(
        config: &'a crate::config::Config,
        mode: Mode,
        code_available: std::result::Result<(), String>,
        prompt: &'a str,
        code_timeout_ms: u64,
    ) -> Self {
        Options {
            mode,
            code_available,
            prompt,
            context_window: config.surface.context_window,
            likely: config.surface.likely_schemas.unwrap_or(LIKELY_DEFAULT),
            required: &config.surface.required,
            code_timeout_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectoryStats {
    pub listed: usize,
    pub omitted: usize,
    pub chars: usize,
    pub bound: usize,
}

/// The declared tools and system text for one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Surface {
    pub requested: Mode,
    pub mode: Mode,
    /// Why the effective mode differs from the requested one, if it does.
    pub reasons: Vec<String>,
    pub tools: Vec<ToolSpec>,
    /// Added to the system prompt (the directory), or empty.
    pub system: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectoryStats>,
    /// Ids of cataloged tools whose full schemas are declared.
    pub loaded: Vec<String>,
}

impl Surface {
    /// Tool schemas the model sees at first.
    pub fn visible_schemas(&self) -> usize {
        self.tools.len()
    }
}

/// A mode once `auto` is decided: what a surface is built as. Its own type, so no code
/// after the decision can meet an undecided `auto`.
#[derive(Clone, Copy, PartialEq)]
enum Built {
    Code,
    Tools,
    Directory,
    Direct,
}

impl Built {
    fn mode(self) -> Mode {
        match self {
            Built::Code => Mode::Code,
            Built::Tools => Mode::Tools,
            Built::Directory => Mode::Directory,
            Built::Direct => Mode::Direct,
        }
    }
}

/// Builds the surface for `options.mode`, falling back as the module doc says.
pub fn build(catalog: &Catalog, options: &Options) -> Result<Surface> {
    let mut reasons = Vec::new();
    let policy = catalog.policy();
    let permitted = |name: &str| policy.permits_parts(name, &format!("openclaw:core:{name}"));
    let mut mode = match options.mode {
        Mode::Code => Built::Code,
        Mode::Tools => Built::Tools,
        Mode::Directory => Built::Directory,
        Mode::Direct => Built::Direct,
        Mode::Auto => Built::Code,
    };
    if options.mode == Mode::Auto {
        let direct = direct_tools(catalog);
        let bytes: usize = direct
            .iter()
            .map(|t| serde_json::to_vec(t).map(|v| v.len()).unwrap_or(0))
            .sum();
        let budget = options
            .context_window
            .map(|tokens| (tokens * 4 / 20).min(AUTO_MAX_BYTES))
            .unwrap_or(AUTO_MAX_BYTES);
        mode = if direct.len() <= AUTO_MAX_TOOLS && bytes <= budget {
            reasons.push(format!(
                "auto: {} tools, {bytes} schema bytes (within {AUTO_MAX_TOOLS} tools and {budget} bytes): direct",
                direct.len()
            ));
            Built::Direct
        } else {
            reasons.push(format!(
                "auto: {} tools, {bytes} schema bytes (over {AUTO_MAX_TOOLS} tools or {budget} bytes): code",
                direct.len()
            ));
            Built::Code
        };
    }
    if mode == Built::Code {
        if let Err(why) = &options.code_available {
            reasons.push(format!("code mode unavailable ({why}); using tools mode"));
            mode = Built::Tools;
        } else if !permitted(TOOL_SEARCH_CODE) {
            reasons.push("the policy denies tool_search_code; using tools mode".into());
            mode = Built::Tools;
        }
    }
    if matches!(mode, Built::Tools | Built::Directory)
        && let Some(denied) = [TOOL_SEARCH, TOOL_DESCRIBE, TOOL_CALL]
            .into_iter()
            .find(|n| !permitted(n))
    {
        reasons.push(format!(
            "the policy denies {denied}; using direct mode so no tool hides behind a control the model cannot call"
        ));
        mode = Built::Direct;
    }
    let mut surface = Surface {
        requested: options.mode,
        mode: mode.mode(),
        reasons,
        tools: Vec::new(),
        system: String::new(),
        directory: None,
        loaded: Vec::new(),
    };
    match mode {
        Built::Direct => {
            let (kept, left_out) = catalog.one_per_name();
            surface.tools = kept.into_iter().map(spec).collect();
            surface.reasons.extend(left_out.into_iter().map(|e| {
                format!(
                    "direct mode declares one tool per name: `{}` is left out for a tool of that name from a source trusted more",
                    e.id
                )
            }));
        }
        Built::Code => {
            surface.tools.push(code_tool(options.code_timeout_ms));
            surface.tools.extend(catalog.direct_only().iter().map(spec));
        }
        Built::Tools => {
            surface.tools.extend(structured_tools(catalog));
            surface.tools.extend(catalog.direct_only().iter().map(spec));
        }
        Built::Directory => build_directory(catalog, options, &mut surface)?,
    }
    Ok(surface)
}

/// Every visible tool: cataloged, then direct-only.
fn direct_tools(catalog: &Catalog) -> Vec<ToolSpec> {
    catalog
        .cataloged()
        .iter()
        .chain(catalog.direct_only())
        .map(spec)
        .collect()
}

/// The full declaration of a catalog entry.
pub fn spec(e: &Entry) -> ToolSpec {
    ToolSpec {
        name: e.descriptor.name.clone(),
        description: e.descriptor.description.clone(),
        parameters: e.descriptor.input_schema.value(),
        strict: e.descriptor.strict,
    }
}

fn code_tool(timeout_ms: u64) -> ToolSpec {
    ToolSpec {
        name: TOOL_SEARCH_CODE.into(),
        description: texts::tool_search_code(timeout_ms.div_ceil(1000)),
        parameters: json!({
            "type": "object",
            "properties": {"code": {"type": "string", "description": texts::TOOL_SEARCH_CODE_PARAM}},
            "required": ["code"],
            "additionalProperties": false
        }),
        strict: None,
    }
}

fn structured_tools(catalog: &Catalog) -> Vec<ToolSpec> {
    let s = catalog.settings();
    vec![
        ToolSpec {
            name: TOOL_SEARCH.into(),
            description: texts::tool_search(s.search_default_limit, s.max_search_limit),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": texts::TOOL_SEARCH_QUERY},
                    "limit": {"type": "integer", "minimum": 1, "description": texts::TOOL_SEARCH_LIMIT},
                    "queries": {
                        "type": "array",
                        "maxItems": crate::catalog::batch_limits::MAX_QUERIES,
                        "description": texts::TOOL_SEARCH_QUERIES,
                        "items": {
                            "type": "object",
                            "properties": {
                                "query": {"type": "string", "description": texts::TOOL_SEARCH_QUERY},
                                "limit": {"type": "integer", "minimum": 1, "description": texts::TOOL_SEARCH_LIMIT}
                            },
                            "required": ["query"],
                            "additionalProperties": false
                        }
                    }
                },
                "additionalProperties": false
            }),
            strict: None,
        },
        ToolSpec {
            name: TOOL_DESCRIBE.into(),
            description: texts::TOOL_DESCRIBE.into(),
            parameters: json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": texts::TOOL_DESCRIBE_ID}},
                "required": ["id"],
                "additionalProperties": false
            }),
            strict: None,
        },
        ToolSpec {
            name: TOOL_CALL.into(),
            description: texts::TOOL_CALL.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": texts::TOOL_CALL_ID},
                    "args": {"type": "object", "description": texts::TOOL_CALL_ARGS}
                },
                "required": ["id"]
            }),
            strict: None,
        },
    ]
}

/// The directory's character bound for a context window.
pub fn directory_bound(context_window: Option<usize>) -> usize {
    context_window
        .map(|tokens| (tokens / 1000 * DIRECTORY_CHARS_PER_K_TOKENS).min(DIRECTORY_MAX_CHARS))
        .unwrap_or(DIRECTORY_MAX_CHARS)
}

fn owner(e: &Entry) -> &str {
    &e.descriptor.source_name
}

fn build_directory(catalog: &Catalog, options: &Options, surface: &mut Surface) -> Result<()> {
    // Client tools stay directly visible, so their names must not collide with cataloged
    // ones: an exact-name call would be ambiguous.
    let client: Vec<&Entry> = catalog
        .cataloged()
        .iter()
        .chain(catalog.direct_only())
        .filter(|e| e.descriptor.source == Source::Client)
        .collect();
    for c in &client {
        if let Some(other) = catalog.cataloged().iter().find(|e| {
            e.descriptor.source != Source::Client && e.descriptor.name == c.descriptor.name
        }) {
            return Err(Error::NameCollision {
                name: c.descriptor.name.clone(),
                first: c.id.clone(),
                second: other.id.clone(),
            });
        }
    }
    surface.tools.extend(structured_tools(catalog));
    surface.tools.extend(catalog.direct_only().iter().map(spec));
    surface.tools.extend(
        client
            .iter()
            .filter(|e| e.descriptor.catalog_mode != crate::catalog::CatalogMode::DirectOnly)
            .map(|e| spec(e)),
    );

    // Likely or required schemas, scored against the prompt; required first.
    let want = options.likely.min(LIKELY_MAX);
    let mut loaded: Vec<&Entry> = Vec::new();
    for r in options.required {
        if let Ok(e) = catalog.find(r)
            && e.descriptor.source != Source::Client
            && e.descriptor.catalog_mode == crate::catalog::CatalogMode::Catalog
            && !loaded.iter().any(|l| l.id == e.id)
            && loaded.len() < LIKELY_MAX
        {
            loaded.push(e);
        }
    }
    if loaded.len() < want && !options.prompt.trim().is_empty() {
        for h in catalog.index()?.search(options.prompt, want + client.len()) {
            let e = &catalog.cataloged()[h.ord];
            if loaded.len() >= want {
                break;
            }
            if e.descriptor.source != Source::Client && !loaded.iter().any(|l| l.id == e.id) {
                loaded.push(e);
            }
        }
    }
    surface.tools.extend(loaded.iter().map(|e| spec(e)));
    surface.loaded = loaded.iter().map(|e| e.id.clone()).collect();

    // The directory: unique names only, sorted, one line each, bounded.
    let mut counts = std::collections::HashMap::new();
    for e in catalog.cataloged() {
        *counts.entry(e.descriptor.name.as_str()).or_insert(0usize) += 1;
    }
    let mut listed: Vec<&Entry> = catalog
        .cataloged()
        .iter()
        .filter(|e| {
            e.descriptor.source != Source::Client && counts[e.descriptor.name.as_str()] == 1
        })
        .collect();
    listed.sort_by(|a, b| a.descriptor.name.cmp(&b.descriptor.name));
    let candidates = catalog
        .cataloged()
        .iter()
        .filter(|e| e.descriptor.source != Source::Client)
        .count();
    let bound = directory_bound(options.context_window);
    let mut text = format!("{}\n{}\n", texts::DIRECTORY_HEADING, texts::DIRECTORY_INTRO);
    // Room kept for the footer, whose count has at most 6 digits.
    let footer_room = texts::directory_footer(999_999).chars().count() + 1;
    let mut n = 0;
    for e in &listed {
        let line = format!(
            "- {} ({}): {}\n",
            e.descriptor.name,
            owner(e),
            compact::cut(
                &compact::collapse_whitespace(&e.descriptor.description),
                DIRECTORY_LINE_CHARS
            )
        );
        if text.chars().count() + line.chars().count() + footer_room > bound {
            break;
        }
        text.push_str(&line);
        n += 1;
    }
    let omitted = candidates - n;
    if omitted > 0 {
        text.push_str(&texts::directory_footer(omitted));
        text.push('\n');
    }
    surface.directory = Some(DirectoryStats {
        listed: n,
        omitted,
        chars: text.chars().count(),
        bound,
    });
    surface.system = text;
    Ok(())
}

/// Directory mode's deferred resolver: a call that names a hidden cataloged tool exactly
/// (its unique name; no prefix, no fuzzy match, no id) loads that tool. `Ok(None)` when no
/// cataloged tool has that name; an error when several do.
pub fn deferred<'a>(catalog: &'a Catalog, name: &str) -> Result<Option<&'a Entry>> {
    let found: Vec<&Entry> = catalog
        .cataloged()
        .iter()
        .filter(|e| e.descriptor.name == name)
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(Error::AmbiguousTool {
            name: name.to_string(),
            candidates: many.iter().map(|e| e.id.clone()).collect(),
        }),
    }
}

/// The control tool names of a surface (to tell them from catalog tools in a call).
pub fn is_control(name: &str) -> bool {
    matches!(
        name,
        TOOL_SEARCH_CODE | TOOL_SEARCH | TOOL_DESCRIBE | TOOL_CALL
    )
}

#[cfg(test)]
mod tests;

/// The sizes of one request, for `surface`, the session log and QA.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub mode: Mode,
    pub provider: crate::provider::Provider,
    pub declared_tools: usize,
    pub tool_bytes: usize,
    pub prompt_bytes: usize,
    pub request_bytes: usize,
    /// This request's bytes over direct mode's for the same catalog and prompt (`None` when
    /// not compared: building direct mode's body costs a parse of every schema).
    pub ratio_to_direct: Option<f64>,
}

/// A surface and the exact request body a provider would get for it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub surface: Surface,
    pub system: String,
    pub body: serde_json::Value,
    pub summary: Summary,
}

/// The model name put in request bodies that need one: `[provider] model`'s default, so
/// what `surface` measures names the model the gateway would ask.
pub const MODEL: &str = crate::config::DEFAULT_MODEL;

impl Planned {
    /// The session log's `request` event: what this request declares and why.
    pub fn log_event(&self, catalog: &Catalog) -> serde_json::Value {
        json!({
            "summary": self.summary,
            "reasons": self.surface.reasons,
            "visible_schemas": self.surface.visible_schemas(),
            "declared": self.surface.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            "catalog": catalog.counts(),
        })
    }
}

/// Builds the surface for `options` and the request body for `provider`: `base_system`
/// then the surface's system text (the directory) as the system prompt, `options.prompt`
/// as the user message.
pub fn plan_request(
    catalog: &Catalog,
    options: &Options,
    provider: crate::provider::Provider,
    base_system: &str,
    compare_direct: bool,
) -> Result<Planned> {
    use crate::provider::{Item, Request, payload};
    let surface = build(catalog, options)?;
    let body_for = |s: &Surface| {
        let system = join_system(base_system, &s.system);
        let request = Request {
            system: &system,
            conversation: &[Item::User(options.prompt)],
            tools: &s.tools,
            model: MODEL,
            strict: false,
            google_legacy: false,
        };
        (
            payload::request_body(provider, &request),
            payload::summary(provider, &request),
            system,
        )
    };
    let (body, sizes, system) = body_for(&surface);
    let direct_bytes = if surface.mode == Mode::Direct {
        Some(sizes.body_bytes)
    } else if compare_direct {
        let direct = build(
            catalog,
            &Options {
                mode: Mode::Direct,
                ..options.clone()
            },
        )?;
        Some(body_for(&direct).1.body_bytes)
    } else {
        None
    };
    let summary = Summary {
        mode: surface.mode,
        provider,
        declared_tools: surface.tools.len(),
        tool_bytes: sizes.tool_bytes,
        prompt_bytes: system.len() + options.prompt.len(),
        request_bytes: sizes.body_bytes,
        ratio_to_direct: direct_bytes.map(|d| {
            if d == 0 {
                1.0
            } else {
                sizes.body_bytes as f64 / d as f64
            }
        }),
    };
    Ok(Planned {
        surface,
        system,
        body,
        summary,
    })
}

fn join_system(base: &str, extra: &str) -> String {
    match (base.is_empty(), extra.is_empty()) {
        (_, true) => base.to_string(),
        (true, false) => extra.to_string(),
        (false, false) => format!("{base}\n\n{extra}"),
    }
}
