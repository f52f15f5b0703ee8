//! Argument validation against a tool's input schema, with compiled validators cached per
//! tool (compiling costs tens of microseconds; checking a small object, about one).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use serde_json::Value;

use crate::catalog::Entry;
use crate::error::{Error, Result};

/// At most this many failures are listed; the rest are counted.
const MAX_LISTED: usize = 10;

/// Keyed by tool id, with the schema text the validator was compiled from: a rebuilt
/// catalog (an MCP server's `tools/list_changed`) may give an id a new schema.
#[derive(Default)]
pub(super) struct Validators {
    cache: Mutex<HashMap<String, (crate::catalog::Schema, Arc<jsonschema::Validator>)>>,
}

impl Validators {
    /// `Ok` when `args` satisfy the tool's input schema; otherwise every failure with its
    /// JSON pointer.
    pub(super) fn check(&self, entry: &Entry, args: &Value) -> Result<()> {
        let validator = self.get(entry)?;
        listed(&validator, &entry.id, args)
    }

    /// The same, the validation itself on a blocking thread: its cost grows with the schema
    /// and the arguments together, and on a runtime worker two costly ones held every
    /// worker of a two-core host, deadlines and all (review 20 F1; the schema's own cost
    /// is bounded when it is loaded, `catalog::schema_cost`). The arguments come back.
    pub(super) async fn check_aside(&self, entry: &Entry, args: Value) -> (Value, Result<()>) {
        let validator = match self.get(entry) {
            Ok(v) => v,
            Err(e) => return (args, Err(e)),
        };
        let id = entry.id.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let result = listed(&validator, &id, &args);
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

    fn get(&self, entry: &Entry) -> Result<Arc<jsonschema::Validator>> {
        if let Some((schema, v)) = self.cache.lock().get(&entry.id)
            && schema.as_str() == entry.descriptor.input_schema.as_str()
        {
            return Ok(Arc::clone(v));
        }
        let schema = entry.descriptor.input_schema.value();
        let validator = jsonschema::validator_for(&schema).map_err(|e| Error::BadSchema {
            id: entry.id.clone(),
            message: e.to_string(),
        })?;
        let validator = Arc::new(validator);
        self.cache.lock().insert(
            entry.id.clone(),
            (
                entry.descriptor.input_schema.clone(),
                Arc::clone(&validator),
            ),
        );
        Ok(validator)
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
