//! The demo catalog compiled into the binary, so every command works on a fresh machine
//! with no catalog given. It is read with the same loader as files on disk; its paths are
//! shown as `embedded:fixtures/demo/...` in errors and origins.

use std::path::Path;

use super::descriptor::ToolDescriptor;
use super::load::CatalogText;
use crate::error::Result;

/// The files in load order: core first, then plugins, the MCP server and the client.
const FILES: &[(&str, &str)] = &[
    ("core.json", include_str!("../../fixtures/demo/core.json")),
    (
        "plugins/github.json",
        include_str!("../../fixtures/demo/plugins/github.json"),
    ),
    (
        "plugins/calendar.json",
        include_str!("../../fixtures/demo/plugins/calendar.json"),
    ),
    (
        "plugins/tickets.json",
        include_str!("../../fixtures/demo/plugins/tickets.json"),
    ),
    (
        "mcp/notion.json",
        include_str!("../../fixtures/demo/mcp/notion.json"),
    ),
    (
        "client.json",
        include_str!("../../fixtures/demo/client.json"),
    ),
];

/// The demo's files, as if read from disk.
pub fn demo_texts() -> Vec<CatalogText> {
    FILES
        .iter()
        .map(|(name, text)| CatalogText {
            path: Path::new("embedded:fixtures/demo").join(name),
            text: text.to_string(),
        })
        .collect()
}

/// Every descriptor of the demo catalog.
pub fn demo_descriptors() -> Result<Vec<ToolDescriptor>> {
    let mut out = Vec::new();
    for file in demo_texts() {
        out.extend(file.parse()?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_catalog_loads() {
        let tools = super::demo_descriptors().unwrap();
        assert!((150..=300).contains(&tools.len()), "{}", tools.len());
    }
}
