//! Every text a model reads that is not a tool's own: the descriptions of the surfaces'
//! control tools and their parameters, the directory's heading and footer, and the recovery
//! hints of errors. Kept in one place and reviewed like an API — a change here changes what
//! models do — and covered by snapshot tests (`tests/texts.rs`).

/// `tool_search_code`'s description; `timeout_s` is the run's wall-clock limit.
pub fn tool_search_code(timeout_s: u64) -> String {
    format!(
        "Find and call tools by running JavaScript. `code` is the body of an async function, run in an \
isolated sandbox (no files, network, timers or require). Available inside:\n\
- `await openclaw.tools.search(query, {{limit}})`: tools matching the words of `query`, best first, as \
`[{{id, name, description, input}}]`. Matching is lexical and in English: use the words a tool's \
description would use (\"create issue github\", \"send email\").\n\
- `await openclaw.tools.describe(id)`: one tool with its full `input_schema`.\n\
- `await openclaw.tools.call(id, args)`: runs the tool; returns `{{tool, result: {{content, details, is_error}}}}`.\n\
- `console.log(...)`.\n\
Calls start only when awaited. `return` a JSON value. You get `{{ok, value, logs, telemetry}}`, or \
`{{ok: false, error: {{code, message}}}}`. Limit: {timeout_s} s per run."
    )
}

pub const TOOL_SEARCH_CODE_PARAM: &str =
    "The body of an async JavaScript function: use `await` and `return` a JSON value.";

/// `tool_search`'s description. The batch bounds are the catalog's own constants, so a changed
/// limit changes what the model is told.
pub fn tool_search(default_limit: usize, max_limit: usize) -> String {
    use crate::catalog::batch_limits::{MAX_QUERIES, MAX_QUERY_BYTES, MAX_TOTAL_RESULTS};
    format!(
        "Search the tool catalog. Matching is lexical and in English: use the words a tool's description \
would use. One search: `query`, and `limit` (default {default_limit}, at most {max_limit}). Several \
independent searches at once: `queries: [{{query, limit?}}]` (up to {MAX_QUERIES}, each at most \
{MAX_QUERY_BYTES} bytes, at most {MAX_TOTAL_RESULTS} results in all); results come grouped in request \
order. Returns compact tools `{{id, name, description, input}}`, best first. Then `tool_describe` for a \
full schema, `tool_call` to run one."
    )
}

pub const TOOL_SEARCH_QUERY: &str = "What the tool should do, in a few English words.";
pub const TOOL_SEARCH_LIMIT: &str = "How many tools to return.";
pub const TOOL_SEARCH_QUERIES: &str =
    "Several independent searches, answered together in this order.";

pub const TOOL_DESCRIBE: &str = "Describe one tool: its full input schema. `id` is a tool id from tool_search, or an exact unique tool name.";
pub const TOOL_DESCRIBE_ID: &str =
    "A tool id (`source:source_name:name`) or an exact unique tool name.";

pub const TOOL_CALL: &str = "Call one tool by `id` (a tool id from tool_search, or an exact unique name) \
with `args`, an object matching its input schema. Returns `{tool, result: {content, details, is_error}}`.";
pub const TOOL_CALL_ID: &str = "A tool id from tool_search, or an exact unique tool name.";
pub const TOOL_CALL_ARGS: &str = "The tool's arguments, matching its input schema.";

/// The fixed heading of the directory in the system prompt.
pub const DIRECTORY_HEADING: &str = "## Tool directory";

pub const DIRECTORY_INTRO: &str = "These tools are available but not loaded. Call one by its exact name \
as written here, or use `tool_search` to find tools by what they do and `tool_describe` for a schema.";

/// The footer when the directory left tools out.
pub fn directory_footer(omitted: usize) -> String {
    format!(
        "… and {omitted} more tools not listed here. Find them with `tool_search` (several queries at once are fine)."
    )
}

/// How to find the right tool id, said to a caller that named an unknown one.
pub fn recovery_hint(caller: &str) -> &'static str {
    match caller {
        "code" => "Find tool ids with `await openclaw.tools.search(\"what you want to do\")`",
        "tool_call" | "directory" => "Find tool ids with `tool_search` first",
        "cli" => "Find tool ids with `toolsearch search WORDS`",
        "direct" => "Call only the tools declared to you, by their exact names",
        _ => "Search the catalog to find the tool's exact id",
    }
}
