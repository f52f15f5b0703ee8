//! Argument validation against a tool's input schema, with compiled validators cached per
//! tool (compiling costs tens of microseconds; checking a small object, about one).
//!
//! Nothing of it runs on the runtime's workers: a schema's regular expressions cost what
//! their author chose to compile (400 patterns of `[^\x00]{0,900}` took 1.4 s and 388 MB),
//! and compiled on the worker that polled the call they held a code run's loop past its
//! deadline and `mcp serve` silent for 7.7 s (sandbox round 36 F1). A light schema
//! ([`checker::light`]: most tools') is compiled once and checked on the check lane
//! ([`offload`]), concurrent calls waiting for that one compile, a schema that does not
//! compile kept as such. Any other is checked in a checker process on a lane of its own
//! ([`checker`]), where a check that outlasts its caller or its budget is stopped by
//! killing the process. Each pattern compiles within [`PATTERN_BYTES`] (the loader allows
//! [`crate::catalog::schema_cost::MAX_PATTERNS`] of them a schema).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use serde_json::Value;

use super::checker;
use super::offload::{Lane, Turns, in_lane, offload};
use crate::catalog::{Catalog, Entry, Schema};
use crate::error::{Error, Result};

/// At most this many failures are listed; the rest are counted.
const MAX_LISTED: usize = 10;

/// The compiled size, and the lazy DFA's cache, each pattern may take.
const PATTERN_BYTES: usize = 1 << 20;
const PATTERN_CACHE_BYTES: usize = 256 << 10;

/// The backtracking steps one match of a pattern with lookaround or a backreference may
/// take (fancy-regex's default is a million, ~21 ms a string: 2,000 strings against one
/// such pattern took 42 s, sandbox round 37 F3). Linear patterns do not backtrack.
const PATTERN_BACKTRACKS: usize = 50_000;

/// Keyed by tool id, with the schema text the validator was compiled from: a rebuilt
/// catalog (an MCP server's `tools/list_changed`) may give an id a new schema.
/// Kept for the tools of the newest catalog only: when a call comes with a catalog other
/// than the last one seen, the validators of ids it no longer has, or has with another
/// schema, are dropped (an upstream that renamed its tools at every list grew the cache
/// 27 MB a run, never freed: sandbox round 37 F2).
#[derive(Default)]
pub(super) struct Validators {
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<String, Arc<Compiled>>,
    catalog: std::sync::Weak<Catalog>,
}

/// One schema's way of being checked, decided once: compiled here (a light schema), or
/// checked in a checker process ([`checker`]) under its key.
struct Compiled {
    schema: Schema,
    way: OnceLock<Way>,
}

enum Way {
    /// The validator, or why the schema does not compile, and the work it costs each part
    /// of a value ([`checker::light`]).
    Here(std::result::Result<jsonschema::Validator, String>, usize),
    Checker {
        key: String,
    },
}

impl Compiled {
    /// Decides on first use (compiling a light schema); a caller that comes meanwhile waits
    /// for that. On the check lane: reading the schema's cost walks it.
    fn way(&self) -> &Way {
        self.way.get_or_init(|| {
            let schema = self.schema.value();
            if let Some(work) = checker::light(&schema) {
                Way::Here(compile(&schema), work)
            } else {
                Way::Checker {
                    key: checker::key_of(self.schema.as_str()),
                }
            }
        })
    }
}

/// A schema's validator, each pattern bounded as the module doc says.
pub(super) fn compile(schema: &Value) -> std::result::Result<jsonschema::Validator, String> {
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex()
                .backtrack_limit(PATTERN_BACKTRACKS)
                .size_limit(PATTERN_BYTES)
                .dfa_size_limit(PATTERN_CACHE_BYTES),
        )
        .build(schema)
        .map_err(|e| e.to_string())
}

impl Validators {
    /// `Ok` when `args` satisfy the tool's input schema; otherwise every failure with its
    /// JSON pointer. The arguments come back. Run on the check lane, in `turns` when the
    /// caller has them: in the host for a light schema, in a checker for any other (killed
    /// if the caller stops waiting, or past [`checker::CHECK_BUDGET`]).
    pub(super) async fn check_aside(
        &self,
        catalog: &Arc<Catalog>,
        entry: &Entry,
        args: Value,
        turns: Option<&Turns>,
    ) -> (Value, Result<()>) {
        let compiled = self.compiled(catalog, entry);
        // A light schema already compiled, and a few values: checked here, in
        // microseconds (the schema's work times the value's values at most
        // [`INLINE_WORK`]), without the hop to the blocking pool and back, which cost 20 µs
        // a call.
        if let Some(Way::Here(Ok(validator), work)) = compiled.way.get()
            && few_values(&args, &mut (INLINE_WORK / (*work).max(1)))
        {
            let result = listed(validator, &entry.id, &args, *work);
            return (args, result);
        }
        let id = entry.id.clone();
        let bad = |message: String| {
            Err(Error::BadSchema {
                id: entry.id.clone(),
                message,
            })
        };
        let here = Arc::clone(&compiled);
        let checked = offload(Lane::Check, turns, move || match here.way() {
            Way::Here(Ok(validator), work) => {
                let result = listed(validator, &id, &args, *work);
                (args, Some(result))
            }
            Way::Here(Err(message), _) => (
                args,
                Some(Err(Error::BadSchema {
                    id: id.clone(),
                    message: message.clone(),
                })),
            ),
            Way::Checker { .. } => (args, None),
        })
        .await;
        let args = match checked {
            Ok((args, Some(result))) => return (args, result),
            Ok((args, None)) => args,
            Err(e) => {
                return (
                    Value::Null,
                    bad(format!("validating the arguments failed: {e}")),
                );
            }
        };
        let Way::Checker { key } = compiled.way() else {
            return (args, bad("the schema's way of checking changed".into()));
        };
        let schema = compiled.schema.as_str();
        let answer = in_lane(Lane::Checker, turns, checker::check(key, schema, &args)).await;
        let result = match answer {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(checker::CheckFailure::Invalid(errors)))) => Err(Error::InvalidArguments {
                id: entry.id.clone(),
                errors,
            }),
            Ok(Ok(Err(checker::CheckFailure::BadSchema(message)))) => bad(message),
            Ok(Err(failed)) => Err(Error::CheckStopped {
                id: entry.id.clone(),
                message: failed.to_string(),
            }),
            Err(e) => bad(format!("validating the arguments failed: {e}")),
        };
        (args, result)
    }

    fn compiled(&self, catalog: &Arc<Catalog>, entry: &Entry) -> Arc<Compiled> {
        let mut cache = self.cache.lock();
        if !std::ptr::eq(cache.catalog.as_ptr(), Arc::as_ptr(catalog)) {
            cache.by_id.retain(|id, c| {
                catalog
                    .find(id)
                    .is_ok_and(|e| e.descriptor.input_schema.as_str() == c.schema.as_str())
            });
            cache.catalog = Arc::downgrade(catalog);
        }
        match cache.by_id.get(&entry.id) {
            Some(c) if c.schema.as_str() == entry.descriptor.input_schema.as_str() => Arc::clone(c),
            _ => {
                let c = Arc::new(Compiled {
                    schema: entry.descriptor.input_schema.clone(),
                    way: OnceLock::new(),
                });
                cache.by_id.insert(entry.id.clone(), Arc::clone(&c));
                c
            }
        }
    }
}

/// The work a check on the polling worker may cost: the schema's work a part of a value
/// ([`checker::light`]: subschemas, enum options) times the value's values (objects,
/// arrays and scalars, all counted), each string counted once more for every 64 bytes of
/// it (a light schema reads a string in one pass, once a subschema at most). 64 values
/// against a 16-subschema schema, or fewer against more.
const INLINE_WORK: usize = 1024;

/// Whether `v` is within `left` values (see [`INLINE_WORK`]); counts it down.
fn few_values(v: &Value, left: &mut usize) -> bool {
    let cost = match v {
        Value::String(s) => 1 + s.len() / 64,
        _ => 1,
    };
    let Some(rest) = left.checked_sub(cost) else {
        return false;
    };
    *left = rest;
    match v {
        Value::Array(items) => items.iter().all(|v| few_values(v, left)),
        Value::Object(m) => m.values().all(|v| few_values(v, left)),
        _ => true,
    }
}

/// `Ok` when `args` satisfy `validator`, else every failure with its JSON pointer.
fn listed(validator: &jsonschema::Validator, id: &str, args: &Value, work: usize) -> Result<()> {
    let errors = failures(validator, args, work);
    if errors.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidArguments {
        id: id.to_string(),
        errors,
    })
}

/// Each way `args` fail `validator`, with its JSON pointer: at most [`MAX_LISTED`], the
/// rest counted in a last line. Empty when they satisfy it.
///
/// The first failure is found by a check that stops at it. Every failure is listed only
/// when the schema's work a part of a value (`work`: its subschemas, and enum options for
/// a light one) times the value's parts is at most [`LISTING_WORK`]: jsonschema builds
/// every failure before the first is read, and 250 `false` subschemas against 49,000
/// numbers built 12 million of them, 4.5 GB in 9 s, on a thread nothing could stop
/// (sandbox round 43 F1). Each failure's text is cut at [`MAX_FAILURE_CHARS`] (a failed
/// `const` quotes the whole constant).
pub(super) fn failures(
    validator: &jsonschema::Validator,
    args: &Value,
    work: usize,
) -> Vec<String> {
    let shown = |e: &jsonschema::ValidationError<'_>| {
        let pointer = e.instance_path().to_string();
        let at = if pointer.is_empty() { "/" } else { &pointer };
        cut(format!("{at}: {e}"), MAX_FAILURE_CHARS)
    };
    let first = match validator.validate(args) {
        Ok(()) => return Vec::new(),
        Err(e) => shown(&e),
    };
    if !few_values(args, &mut (LISTING_WORK / work.max(1))) {
        return vec![
            first,
            "... and maybe more (the arguments are too large to list every failure)".into(),
        ];
    }
    let mut errors: Vec<String> = Vec::new();
    let mut more = 0;
    for e in validator.iter_errors(args) {
        if errors.len() < MAX_LISTED {
            errors.push(shown(&e));
        } else {
            more += 1;
        }
    }
    if errors.is_empty() {
        // A failure the listing does not repeat (it reads the value another way).
        errors.push(first);
    }
    if more > 0 {
        errors.push(format!("... and {more} more"));
    }
    errors
}

/// The most work listing every failure may cost (see [`failures`]): a few milliseconds.
const LISTING_WORK: usize = 16_384;

/// The longest text of one failure.
const MAX_FAILURE_CHARS: usize = 1_000;

/// `text` cut at `max` characters, marked when cut.
fn cut(mut text: String, max: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
        text.push('…');
    }
    text
}

/// Checks the arguments of a tool the host itself declares (the surface's control tools,
/// whose schemas are fixed and small, so compiling per call costs microseconds) with the
/// same listing as a catalog tool's.
pub fn check_declared(name: &str, schema: &Value, args: &Value) -> Result<()> {
    let validator = jsonschema::validator_for(schema).map_err(|e| Error::BadSchema {
        id: name.to_string(),
        message: e.to_string(),
    })?;
    // Fixed and small: a few dozen subschemas at most.
    listed(&validator, name, args, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value failing every subschema is not listed failure by failure past the listing
    /// work: its first failure is (and each failure's text is cut).
    #[test]
    fn a_large_failing_value_lists_its_first_failure_only() {
        let schema =
            serde_json::json!({"properties": {"a": {"items": {"allOf": vec![false; 100]}}}});
        let validator = compile(&schema).unwrap();
        let small = failures(&validator, &serde_json::json!({"a": [0, 0]}), 102);
        assert_eq!(small.len(), MAX_LISTED + 1, "{small:?}");
        assert!(
            small[MAX_LISTED].starts_with("... and 190 more"),
            "{small:?}"
        );
        let large = failures(&validator, &serde_json::json!({"a": vec![0; 49_000]}), 102);
        assert_eq!(large.len(), 2, "{large:?}");
        assert!(large[0].starts_with("/a/0: "), "{large:?}");
        assert!(large[1].contains("too large to list"), "{large:?}");
        let constant = compile(&serde_json::json!({"const": "x".repeat(5000)})).unwrap();
        let long = failures(&constant, &serde_json::json!("y"), 1);
        assert!(
            long[0].chars().count() <= MAX_FAILURE_CHARS + 1,
            "{}",
            long[0].len()
        );
        assert!(failures(&validator, &serde_json::json!({"a": []}), 102).is_empty());
    }

    #[test]
    fn only_a_few_short_values_are_checked_on_the_worker() {
        let count = |v: Value| few_values(&v, &mut 64);
        assert!(count(
            serde_json::json!({"title": "Crash", "labels": ["bug", "p1"]})
        ));
        assert!(!count(
            serde_json::json!({"a": (0..64).collect::<Vec<_>>()})
        ));
        assert!(!count(serde_json::json!({"body": "x".repeat(64 * 64)})));
        assert!(count(serde_json::json!({"body": "x".repeat(64 * 60)})));
    }
    use crate::catalog::{ExecutorSpec, Facts, Source, ToolDescriptor};
    use crate::config::Config;

    fn catalog(names: &[&str]) -> Arc<Catalog> {
        let tools = names
            .iter()
            .map(|n| {
                ToolDescriptor::builder(Source::Openclaw, "core", *n)
                    .description("t")
                    .input_schema(&serde_json::json!({"type": "object"}))
                    .executor(ExecutorSpec::Fixture {
                        text: "ok".into(),
                        details: None,
                    })
                    .origin("test")
                    .build()
            })
            .collect();
        let config = Config::default();
        Arc::new(Catalog::build(tools, &Facts::bare(&config)).unwrap())
    }

    /// The validators of tools a new catalog no longer has are dropped.
    #[test]
    fn validators_are_kept_for_the_newest_catalog_only() {
        let v = Validators::default();
        let old = catalog(&["a", "b", "c"]);
        for id in ["a", "b", "c"] {
            v.compiled(&old, old.resolve(id).unwrap());
        }
        assert_eq!(v.cache.lock().by_id.len(), 3);
        let new = catalog(&["a", "d"]);
        v.compiled(&new, new.resolve("d").unwrap());
        let mut kept: Vec<String> = v.cache.lock().by_id.keys().cloned().collect();
        kept.sort();
        assert_eq!(kept, ["openclaw:core:a", "openclaw:core:d"]);
    }
}
