//! Argument validation against a tool's input schema, with compiled validators cached per
//! tool (compiling costs tens of microseconds; checking a small object, about one).
//!
//! Compiling and checking both run on the check lane ([`offload`]), never on the runtime's
//! workers: a schema's regular expressions cost what their author chose to compile (400
//! patterns of `[^\x00]{0,900}` took 1.4 s and 388 MB), and compiled on the worker that
//! polled the call they held a code run's loop past its deadline and `mcp serve` silent for
//! 7.7 s (sandbox round 36 F1). A tool's validator is compiled once, concurrent calls
//! waiting for that one compile, and a schema that does not compile is kept as such (it
//! was compiled again on every call). Each pattern compiles within [`PATTERN_BYTES`] (the
//! loader allows [`crate::catalog::schema_cost::MAX_PATTERNS`] of them a schema).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use serde_json::Value;

use super::offload::{Lane, Turns, offload};
use crate::catalog::{Entry, Schema};
use crate::error::{Error, Result};

/// At most this many failures are listed; the rest are counted.
const MAX_LISTED: usize = 10;

/// The compiled size, and the lazy DFA's cache, each pattern may take.
const PATTERN_BYTES: usize = 1 << 20;
const PATTERN_CACHE_BYTES: usize = 256 << 10;

/// Keyed by tool id, with the schema text the validator was compiled from: a rebuilt
/// catalog (an MCP server's `tools/list_changed`) may give an id a new schema.
#[derive(Default)]
pub(super) struct Validators {
    cache: Mutex<HashMap<String, Arc<Compiled>>>,
}

/// One schema's validator, or why it does not compile, made once.
struct Compiled {
    schema: Schema,
    validator: OnceLock<std::result::Result<jsonschema::Validator, String>>,
}

impl Compiled {
    /// Compiles on first use; a caller that comes meanwhile waits for that compile.
    fn check(&self, id: &str, args: &Value) -> Result<()> {
        let compiled = self.validator.get_or_init(|| {
            jsonschema::options()
                .with_pattern_options(
                    jsonschema::PatternOptions::fancy_regex()
                        .size_limit(PATTERN_BYTES)
                        .dfa_size_limit(PATTERN_CACHE_BYTES),
                )
                .build(&self.schema.value())
                .map_err(|e| e.to_string())
        });
        match compiled {
            Ok(validator) => listed(validator, id, args),
            Err(message) => Err(Error::BadSchema {
                id: id.to_string(),
                message: message.clone(),
            }),
        }
    }
}

impl Validators {
    /// `Ok` when `args` satisfy the tool's input schema; otherwise every failure with its
    /// JSON pointer. The arguments come back. Run on the check lane, in `turns` when the
    /// caller has them.
    pub(super) async fn check_aside(
        &self,
        entry: &Entry,
        args: Value,
        turns: Option<&Turns>,
    ) -> (Value, Result<()>) {
        let compiled = self.compiled(entry);
        let id = entry.id.clone();
        let checked = offload(Lane::Check, turns, move || {
            let result = compiled.check(&id, &args);
            (args, result)
        })
        .await;
        match checked {
            Ok(done) => done,
            Err(e) => (
                Value::Null,
                Err(Error::BadSchema {
                    id: entry.id.clone(),
                    message: format!("validating the arguments failed: {e}"),
                }),
            ),
        }
    }

    fn compiled(&self, entry: &Entry) -> Arc<Compiled> {
        let mut cache = self.cache.lock();
        match cache.get(&entry.id) {
            Some(c) if c.schema.as_str() == entry.descriptor.input_schema.as_str() => Arc::clone(c),
            _ => {
                let c = Arc::new(Compiled {
                    schema: entry.descriptor.input_schema.clone(),
                    validator: OnceLock::new(),
                });
                cache.insert(entry.id.clone(), Arc::clone(&c));
                c
            }
        }
    }
}

/// `Ok` when `args` satisfy `validator`, else every failure with its JSON pointer.
fn listed(validator: &jsonschema::Validator, id: &str, args: &Value) -> Result<()> {
    let mut errors: Vec<String> = Vec::new();
    let mut more = 0;
    for e in validator.iter_errors(args) {
        if errors.len() < MAX_LISTED {
            let pointer = e.instance_path().to_string();
            let at = if pointer.is_empty() {
                "/".to_string()
            } else {
                pointer
            };
            errors.push(format!("{at}: {e}"));
        } else {
            more += 1;
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    if more > 0 {
        errors.push(format!("... and {more} more"));
    }
    Err(Error::InvalidArguments {
        id: id.to_string(),
        errors,
    })
}

/// Checks the arguments of a tool the host itself declares (the surface's control tools,
/// whose schemas are fixed and small, so compiling per call costs microseconds) with the
/// same listing as a catalog tool's.
pub fn check_declared(name: &str, schema: &Value, args: &Value) -> Result<()> {
    let validator = jsonschema::validator_for(schema).map_err(|e| Error::BadSchema {
        id: name.to_string(),
        message: e.to_string(),
    })?;
    listed(&validator, name, args)
}
