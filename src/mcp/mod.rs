//! MCP both ways, with the official Rust SDK (`rmcp`).
//!
//! - [`upstream`]: the servers of `[mcp.servers.NAME]`, started when a catalog is needed,
//!   their tools cataloged as `mcp:NAME:tool` (untrusted: name and description indexed,
//!   `input` shown as `"unknown"`), `tools/call` as the `mcp` executor behind the same
//!   dispatch path as every other tool, `tools/list_changed` rebuilding the catalog, and a
//!   server that fails named and its tools hidden (fail closed).
//!
//! The other direction, toolsearch as an MCP server, is [`crate::mcp_serve`], a front above
//! the hosts.

pub mod http_client;
pub mod upstream;

pub use upstream::Hub;

use std::collections::BTreeMap;

use crate::catalog::{ToolDescriptor, Upstream};

impl Upstream for Hub {
    fn snapshot(&self) -> (Vec<ToolDescriptor>, BTreeMap<String, String>) {
        Hub::snapshot(self)
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        Hub::subscribe(self)
    }
}
