//! Every text a model reads that is not a tool's own: recovery hints now; the model-facing
//! tool descriptions, the directory heading and footer arrive with the surfaces. Kept in
//! one place and reviewed like an API: a change here changes what models do.

/// How to find the right tool id, said to a caller that named an unknown one.
pub fn recovery_hint(caller: &str) -> &'static str {
    match caller {
        "code" => "Find tool ids with `await openclaw.tools.search(\"what you want to do\")`",
        "tool_call" | "directory" => "Find tool ids with `tool_search` first",
        "cli" => "Find tool ids with `toolsearch search WORDS`",
        _ => "Search the catalog to find the tool's exact id",
    }
}
