//! MCP both ways, with the official Rust SDK (`rmcp`).
//!
//! - [`upstream`]: the servers of `[mcp.servers.NAME]`, started when a catalog is needed,
//!   their tools cataloged as `mcp:NAME:tool` (untrusted: name and description indexed,
//!   `input` shown as `"unknown"`), `tools/call` as the `mcp` executor behind the same
//!   dispatch path as every other tool, `tools/list_changed` rebuilding the catalog, and a
//!   server that fails named and its tools hidden (fail closed).
//! - [`serve`]: `toolsearch mcp serve`, the surface of the configured mode over stdio or
//!   streamable HTTP, so any MCP client gets tool search over many servers.

pub mod http_client;
pub mod serve;
pub mod upstream;

pub use upstream::Hub;

use std::sync::Arc;

use crate::catalog::{Catalog, Facts, ToolDescriptor};
use crate::config::Config;
use crate::error::Result;

/// Everything a catalog is built from: the local descriptors (files, the embedded demo)
/// and the upstream servers. Hosts build every catalog through [`Sources::build`], at the
/// start and after each change, so a rebuilt catalog follows the same rules.
pub struct Sources {
    pub config: Config,
    pub local: Vec<ToolDescriptor>,
    pub hub: Option<Arc<Hub>>,
}

impl Sources {
    /// The local descriptors plus the tools of the servers that are up; the tools of a
    /// server that is down are hidden, with why.
    pub fn build(&self) -> Result<Catalog> {
        self.build_with(Vec::new())
    }

    /// The same, with `extra` descriptors (a gateway request's client tools) joining.
    pub fn build_with(&self, extra: Vec<ToolDescriptor>) -> Result<Catalog> {
        let (upstream, down) = match &self.hub {
            Some(hub) => hub.snapshot(),
            None => Default::default(),
        };
        let mut all = self.local.clone();
        all.extend(upstream);
        all.extend(extra);
        Catalog::build(
            all,
            &Facts {
                config: &self.config,
                env: &Facts::process_env,
                sources_down: &down,
            },
        )
    }

    /// The executors the catalog's tools need beyond the built-in kinds: the hub runs the
    /// `mcp` ones.
    pub fn executors(&self) -> crate::executors::Executors {
        crate::executors::Executors {
            mcp: self
                .hub
                .clone()
                .map(|h| h as Arc<dyn crate::executors::Executor>),
            client: None,
        }
    }

    /// The catalog now, and a receiver that gets a rebuilt one after every change of the
    /// upstream servers (on the current tokio runtime).
    pub fn live(self: Arc<Self>) -> Result<tokio::sync::watch::Receiver<Arc<Catalog>>> {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(self.build()?));
        if let Some(hub) = &self.hub {
            let mut changes = hub.subscribe();
            let sources = Arc::downgrade(&self);
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let Some(sources) = sources.upgrade() else {
                        return;
                    };
                    match sources.build() {
                        Ok(c) => {
                            if tx.send(Arc::new(c)).is_err() {
                                return;
                            }
                        }
                        Err(e) => tracing::warn!("mcp: catalog not rebuilt: {e}"),
                    }
                }
            });
        }
        Ok(rx)
    }
}
