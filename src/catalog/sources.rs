//! What a catalog is built from: the local descriptors (files, the embedded demo) and the
//! tools of upstream servers. Hosts build every catalog through [`Sources::build`], at the
//! start and after each change, so a rebuilt catalog follows the same rules.
//!
//! The upstream side is a trait, [`Upstream`], so the catalog does not depend on the MCP
//! client that implements it (the MCP `Hub`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Catalog, Facts, ToolDescriptor};
use crate::config::Config;
use crate::error::Result;

/// Servers whose tools join the catalog and change while it is in use.
pub trait Upstream: Send + Sync + 'static {
    /// The tools of the servers that are up, and the servers that are down with why
    /// (`mcp:NAME` -> reason): their tools are hidden.
    fn snapshot(&self) -> (Vec<ToolDescriptor>, BTreeMap<String, String>);
    /// Changes whenever the servers' tools may have changed.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// Everything a catalog is built from.
pub struct Sources {
    pub config: Config,
    pub local: Vec<ToolDescriptor>,
    pub upstream: Option<Arc<dyn Upstream>>,
}

impl Sources {
    /// The local descriptors plus the tools of the servers that are up; the tools of a
    /// server that is down are hidden, with why.
    pub fn build(&self) -> Result<Catalog> {
        self.build_with(Vec::new())
    }

    /// The same, with `extra` descriptors (a gateway request's client tools) joining.
    pub fn build_with(&self, extra: Vec<ToolDescriptor>) -> Result<Catalog> {
        let (upstream, down) = match &self.upstream {
            Some(up) => up.snapshot(),
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

    /// The catalog now, and a receiver that gets a rebuilt one after every change of the
    /// upstream servers (on the current tokio runtime).
    pub fn live(self: Arc<Self>) -> Result<tokio::sync::watch::Receiver<Arc<Catalog>>> {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(self.build()?));
        if let Some(up) = &self.upstream {
            let mut changes = up.subscribe();
            let sources = Arc::downgrade(&self);
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let Some(sources) = sources.upgrade() else {
                        return;
                    };
                    match sources.build() {
                        Ok(c) => {
                            // Only long-lived hosts follow changes: they search again soon.
                            c.warm();
                            if tx.send(Arc::new(c)).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("catalog not rebuilt after an upstream change: {e}")
                        }
                    }
                }
            });
        }
        Ok(rx)
    }
}
