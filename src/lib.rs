//! `toolsearch`: tool search for agents with large tool catalogs.
//!
//! The catalog stays out of the prompt. A tantivy index over compact descriptors backs
//! search, describe and call; the model gets one sandboxed code tool (or three structured
//! ones) instead of every schema.
//!
//! Dependencies flow one way, from the fronts down to plain data (`tests/architecture.rs`
//! fails on a cycle). Bottom to top:
//!
//! - leaves: [`error`], [`ids`] (sources, tool ids, what policy matches a tool by),
//!   [`signals`], [`cache`] (this user's cache folder and when to trust it); [`config`],
//!   the TOML as plain data;
//! - [`semantic`]: a local sentence-embedding model and the cache of its tool embeddings;
//! - [`search`] (the tantivy index, the ranking, its fusion with the semantic one) and
//!   [`policy`] (which tools exist, which need approval, the hooks), both over config types
//!   and names, never over the catalog;
//! - [`catalog`]: load, plan (policy applied, so nothing above sees a filtered tool),
//!   compact, index; [`catalog::Sources`] with the upstream servers behind a trait;
//! - what runs and records a call: [`executors`], [`telemetry`]; then [`dispatch`], the one
//!   path every call of every front takes; [`texts`], the words a model reads;
//! - [`sandbox`] (the Node child, its barriers and protocol) and [`code`] (a run's bridge to
//!   dispatch); [`surface`] and [`provider`] (what a request declares and its bytes);
//!   [`mcp`], the client of upstream MCP servers;
//! - [`agent`]: a model's tool calls routed to control tools, catalog tools or the client;
//! - [`host`]: the config, catalog, mode, sandbox, spares and shutdown every front shares;
//! - the fronts: [`commands`] (the CLI's, with [`report`]), [`gateway`], [`mcp_serve`],
//!   [`qa`]; [`eval`] and [`synth`] for retrieval quality.

pub mod agent;
pub mod cache;
pub mod catalog;
pub mod code;
pub mod commands;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod eval;
pub mod executors;
pub mod gateway;
pub mod host;
pub mod ids;
pub mod mcp;
pub mod mcp_serve;
pub mod policy;
pub mod process;
pub mod provider;
pub mod qa;
pub mod report;
pub mod sandbox;
pub mod search;
pub mod semantic;
pub mod shown;
pub mod signals;
pub mod surface;
pub mod synth;
pub mod telemetry;
pub mod texts;

pub use catalog::{Catalog, CompactDescriptor, ToolDescriptor};
pub use config::Config;
pub use error::{Error, Result};
