//! `toolsearch`: tool search for agents with large tool catalogs.
//!
//! The catalog stays out of the prompt. A tantivy index over compact descriptors backs
//! search, describe and call; the model gets one sandboxed code tool (or three structured
//! ones) instead of every schema.
//!
//! The data flows one way, and the modules follow it:
//! [`config`] -> [`catalog`] (load, plan, compact) -> [`search`] (index, rank) -> [`eval`]
//! (retrieval quality). [`policy`] decides which tools exist at all; it is applied while the
//! catalog is planned, so nothing downstream can see a filtered tool.

pub mod catalog;
pub mod code;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod eval;
pub mod executors;
pub mod gateway;
pub mod mcp;
pub mod policy;
pub mod process;
pub mod provider;
pub mod qa;
pub mod report;
pub mod sandbox;
pub mod search;
pub mod signals;
pub mod surface;
pub mod synth;
pub mod telemetry;
pub mod texts;

pub use catalog::{Catalog, CompactDescriptor, ToolDescriptor};
pub use config::Config;
pub use error::{Error, Result};
