//! Where the arguments of a tool with a costly schema are checked: in a child process of
//! this same binary, which is killed when its check outlasts [`CHECK_BUDGET`] or when the
//! caller stops waiting (its run ended).
//!
//! A static count of a schema's cost cannot bound what checking it costs: the work is the
//! schema's expanded size times the value's, and a pattern's match time depends on the
//! pattern, the string and what the regex engine falls back to. Sandbox round 40 F1: a
//! 3,000-reference schema of one pattern (`a[ab]{10000}c`, the lazy DFA giving up) passed
//! every load-time rule, and one 60 KB argument took 5 s a reference — about 4 hours a
//! call, on a thread nothing could stop, holding a check place past its run's end; two
//! such calls kept every other client's calls out of the check lane. A thread cannot be
//! stopped; a process can. Schemas that [`light`] proves cheap (no regular expression,
//! format or uniqueness check, and a small expanded size) are still checked in the host,
//! in microseconds: most tools' are, and a call to them pays no round trip.
//!
//! The checkers are `toolsearch internal-schema-checker`: they read one request a line
//! (a schema key, the schema text the first time that checker sees it, the arguments) and
//! answer one line. Each keeps its compiled validators (a bounded number), is held to
//! [`CHECKER_MEMORY`] of address space, leads its own process group and dies with the
//! host. At most one per place of the checker lane runs a check (a lane apart from the light
//! checks', so those never wait behind these); idle ones are kept for the next.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

use crate::catalog::schema_cost;
use crate::process::Leader;

/// The longest one check (with its schema's compile, the first time) may take in a checker
/// before the checker is killed and the call refused.
pub const CHECK_BUDGET: Duration = Duration::from_secs(5);

/// The address space a checker may take: compiled patterns are bounded each (1 MiB, 64 a
/// schema) and a value is at most megabytes; past this, an allocation fails and the
/// checker dies, not the host.
const CHECKER_MEMORY: u64 = 1 << 30;

/// The largest answer read from a checker (ten failures, each naming a part of a value).
const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// Compiled validators a checker keeps; past this it starts again empty.
const KEPT_VALIDATORS: usize = 256;

/// The most subschemas a light schema stands for once expanded.
const LIGHT_NODES: usize = 256;

/// The most work a light schema costs each part of a value: its subschemas, each counted
/// once more for every option of the longest `enum` in the document (an enum may be
/// checked option by option: 118,000 options against 21,000 numbers took 20 s in the
/// host, sandbox round 42 F1, while the subschemas numbered 7). Checked in the host, a
/// 64 KiB value against it is at most a few tens of millions of comparisons.
const LIGHT_WORK: usize = 1024;

/// Keywords whose cost depends on more than the value's size: a regular expression,
/// pairwise comparisons, dynamic references. So is `format: regex`, which compiles the
/// value as a pattern; other formats (dates, addresses, URIs) are read in one pass.
const HEAVY_KEYWORDS: &[&str] = &[
    "pattern",
    "patternProperties",
    "uniqueItems",
    "$dynamicRef",
    "$recursiveRef",
    "contentSchema",
];

/// The hidden subcommand a checker is started with.
pub const SUBCOMMAND: &str = "internal-schema-checker";

/// The work checking each part of a value against `schema` costs (see [`LIGHT_WORK`]), when
/// it is light: checking a value costs no more than its size times that, so it may run in
/// the host. `None` for a schema to check in a checker.
///
/// Every key of the document is looked at, a property's name and data (`examples`,
/// `default`, `enum`) included: a reference may point anywhere in the document and make
/// any part of it a schema (sandbox round 41 F1, F2: a pattern under `examples`, reached
/// by 50 `$ref`s, was taken for data, and its checks held both check places, or a
/// runtime worker, for minutes). A property named `pattern` costs its tool a round trip
/// to a checker, nothing more.
pub(super) fn light(schema: &Value) -> Option<usize> {
    /// The options of the longest `enum` anywhere in `v`.
    fn longest_enum(v: &Value) -> usize {
        match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::Array(options) if k == "enum" => options.len().max(longest_enum(v)),
                    _ => longest_enum(v),
                })
                .max()
                .unwrap_or(0),
            Value::Array(items) => items.iter().map(longest_enum).max().unwrap_or(0),
            _ => 0,
        }
    }
    fn has_heavy(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, v)| {
                HEAVY_KEYWORDS.contains(&k.as_str())
                    || (k == "format" && v == "regex")
                    || has_heavy(v)
            }),
            Value::Array(items) => items.iter().any(has_heavy),
            _ => false,
        }
    }
    if has_heavy(schema) {
        return None;
    }
    let nodes = schema_cost::expanded_nodes(schema)
        .ok()
        .filter(|nodes| *nodes <= LIGHT_NODES)?;
    let work = nodes.saturating_mul(1 + longest_enum(schema));
    (work <= LIGHT_WORK).then_some(work)
}

/// What a checker is asked.
#[derive(Serialize)]
struct Ask<'a> {
    key: &'a str,
    /// The schema text, sent the first time a checker sees its key.
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a str>,
    args: &'a Value,
}

/// [`Ask`] as the checker reads it.
#[derive(Deserialize)]
struct Asked {
    key: String,
    #[serde(default)]
    schema: Option<String>,
    args: Value,
}

/// What a checker answers.
#[derive(Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
enum Answer {
    Valid,
    Invalid {
        errors: Vec<String>,
    },
    BadSchema {
        message: String,
    },
    /// The key names no validator it keeps, and no schema came with it.
    Unknown,
}

/// Why a check in a checker did not give an answer.
#[derive(Debug, PartialEq)]
pub(super) enum Failed {
    /// Past [`CHECK_BUDGET`]: the checker was killed.
    TooLong,
    /// The checker could not start, died or answered what is no answer.
    Checker(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::TooLong => write!(
                f,
                "checking the arguments against the input schema took longer than {} s, the most a check may take; the check was stopped",
                CHECK_BUDGET.as_secs()
            ),
            Failed::Checker(why) => write!(f, "the schema checker failed: {why}"),
        }
    }
}

/// A running checker and the schema keys it has been sent.
struct Worker {
    leader: Leader,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    known: HashSet<String>,
}

/// Idle checkers, kept for the next check (at most one per core: the check lane's places).
fn idle() -> &'static Mutex<Vec<Worker>> {
    static IDLE: OnceLock<Mutex<Vec<Worker>>> = OnceLock::new();
    IDLE.get_or_init(Mutex::default)
}

/// The key of a schema's text.
pub(super) fn key_of(schema: &str) -> String {
    blake3::hash(schema.as_bytes()).to_hex().to_string()
}

/// Checks `args` against the schema `schema` (keyed `key`) in a checker: `Ok` with the
/// failures listed ([`super::validate`]'s listing: at most ten, the rest counted), or why
/// there is no answer. Dropping the future kills the checker in use.
pub(super) async fn check(
    key: &str,
    schema: &str,
    args: &Value,
) -> Result<std::result::Result<(), CheckFailure>, Failed> {
    // One that has this schema compiled already, if any is idle; one that died idle (out
    // of memory, killed) is let go, not asked (front round 34 F4: the next call failed on
    // its closed pipe).
    let worker = {
        let mut idle = idle().lock();
        idle.retain_mut(|w| w.leader.running());
        let at = idle
            .iter()
            .position(|w| w.known.contains(key))
            .or_else(|| idle.len().checked_sub(1));
        at.map(|at| idle.swap_remove(at))
    };
    let mut worker = match worker {
        Some(w) => w,
        None => start().map_err(Failed::Checker)?,
    };
    let answer = match tokio::time::timeout(CHECK_BUDGET, ask(&mut worker, key, schema, args)).await
    {
        Err(_) => return Err(Failed::TooLong),
        Ok(Err(why)) => return Err(Failed::Checker(why)),
        Ok(Ok(answer)) => answer,
    };
    let kept = places();
    let mut idle = idle().lock();
    if idle.len() < kept {
        idle.push(worker);
    }
    drop(idle);
    Ok(match answer {
        Answer::Valid => Ok(()),
        Answer::Invalid { errors } => Err(CheckFailure::Invalid(errors)),
        Answer::BadSchema { message } => Err(CheckFailure::BadSchema(message)),
        Answer::Unknown => Err(CheckFailure::BadSchema(
            "the schema checker lost the schema".into(),
        )),
    })
}

/// A check's negative answer.
#[derive(Debug)]
pub(super) enum CheckFailure {
    Invalid(Vec<String>),
    BadSchema(String),
}

fn places() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
}

/// One request and its answer; the schema goes along when this checker has not seen it
/// (or has dropped it since).
async fn ask(worker: &mut Worker, key: &str, schema: &str, args: &Value) -> Result<Answer, String> {
    let mut with_schema = !worker.known.contains(key);
    loop {
        let ask = Ask {
            key,
            schema: with_schema.then_some(schema),
            args,
        };
        let mut line = serde_json::to_vec(&ask).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let written = async {
            worker.stdin.write_all(&line).await?;
            worker.stdin.flush().await
        };
        written
            .await
            .map_err(|e| format!("it stopped reading ({e})"))?;
        let mut answer = Vec::new();
        let read = (&mut worker.stdout)
            .take(MAX_ANSWER_BYTES)
            .read_until(b'\n', &mut answer)
            .await
            .map_err(|e| format!("its answer could not be read ({e})"))?;
        if read == 0 {
            return Err(match worker.leader.running() {
                true => "it closed its output".to_string(),
                false => "it exited (out of memory, or killed)".to_string(),
            });
        }
        let answer: Answer = serde_json::from_slice(&answer)
            .map_err(|e| format!("it answered what is no answer ({e})"))?;
        worker.known.insert(key.to_string());
        match answer {
            Answer::Unknown if !with_schema => with_schema = true,
            answer => return Ok(answer),
        }
    }
}

/// The program checkers run, when it is not this one: a program that embeds the library
/// (a benchmark) names the `toolsearch` binary, whose `main` serves [`SUBCOMMAND`].
static PROGRAM: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Makes checkers run `program` (a `toolsearch` binary) instead of this process's own.
pub fn use_program(program: std::path::PathBuf) {
    let _ = PROGRAM.set(program);
}

/// Starts a checker: this binary, its hidden subcommand, an empty environment, its
/// address space bounded.
fn start() -> Result<Worker, String> {
    let exe = match PROGRAM.get() {
        Some(program) => program.clone(),
        None => std::env::current_exe().map_err(|e| format!("no path to this program ({e})"))?,
    };
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(SUBCOMMAND)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is one system call on this process's own limits.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: CHECKER_MEMORY,
                rlim_max: CHECKER_MEMORY,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut leader = Leader::spawn(&mut cmd).map_err(|e| format!("it did not start ({e})"))?;
    let (Some(stdin), Some(stdout), _) = leader.take_stdio() else {
        return Err("it has no pipes".into());
    };
    Ok(Worker {
        leader,
        stdin,
        stdout: BufReader::new(stdout),
        known: HashSet::new(),
    })
}

/// A checker's loop, in the child: one request a line until its input ends.
pub fn serve() -> std::io::Result<()> {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut kept: HashMap<String, std::result::Result<(jsonschema::Validator, usize), String>> =
        HashMap::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let answer = match serde_json::from_slice::<Asked>(&line) {
            Ok(ask) => answer(&mut kept, ask),
            Err(e) => Answer::BadSchema {
                message: format!("the checker could not read its request ({e})"),
            },
        };
        let mut out = serde_json::to_vec(&answer).map_err(std::io::Error::other)?;
        out.push(b'\n');
        output.write_all(&out)?;
        output.flush()?;
    }
}

fn answer(
    kept: &mut HashMap<String, std::result::Result<(jsonschema::Validator, usize), String>>,
    ask: Asked,
) -> Answer {
    if !kept.contains_key(&ask.key) {
        let Some(text) = ask.schema else {
            return Answer::Unknown;
        };
        if kept.len() >= KEPT_VALIDATORS {
            kept.clear();
        }
        let compiled = serde_json::from_str::<Value>(&text)
            .map_err(|e| e.to_string())
            .and_then(|schema| {
                // What listing its failures costs a part of a value (the loader bounded it).
                let work =
                    schema_cost::expanded_nodes(&schema).unwrap_or(schema_cost::MAX_EXPANDED_NODES);
                Ok((super::validate::compile(&schema)?, work))
            });
        kept.insert(ask.key.clone(), compiled);
    }
    match kept.get(&ask.key) {
        Some(Ok((validator, work))) => {
            let errors = super::validate::failures(validator, &ask.args, *work);
            if errors.is_empty() {
                Answer::Valid
            } else {
                Answer::Invalid { errors }
            }
        }
        Some(Err(message)) => Answer::BadSchema {
            message: message.clone(),
        },
        None => Answer::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn light_schemas_are_small_and_free_of_costly_keywords() {
        let is_light = |schema: &Value| light(schema).is_some();
        assert!(is_light(&json!({"type": "object", "properties": {
            "title": {"type": "string", "maxLength": 200},
            "due": {"type": "string", "format": "date-time"},
            "labels": {"type": "array", "items": {"type": "string"}}
        }})));
        for heavy in [
            json!({"properties": {"a": {"type": "string", "pattern": "^a+$"}}}),
            json!({"patternProperties": {"^x": {}}}),
            json!({"properties": {"d": {"format": "regex"}}}),
            json!({"items": {"type": "integer"}, "uniqueItems": true}),
            json!({"$defs": {"p": {}}, "allOf": (0..300).map(|_| json!({"$ref": "#/$defs/p"})).collect::<Vec<_>>()}),
            // Anywhere a reference may make a schema of: data, names.
            json!({"properties": {"a": {"$ref": "#/examples/0"}}, "examples": [{"pattern": "a[ab]{99}c"}]}),
            json!({"properties": {"a": {"$ref": "#/default"}}, "default": {"format": "regex"}}),
            json!({"properties": {"a": {"$ref": "#/properties/b/enum/0"}, "b": {"enum": [{"uniqueItems": true}]}}}),
            json!({"properties": {"pattern": {"type": "string"}}}),
            // Options compared one by one: counted as work.
            json!({"properties": {"a": {"type": "array", "items": {"enum": (0..2000).map(|i| json!(i as f64 + 0.5)).collect::<Vec<_>>()}}}}),
            json!({"properties": {"a": {"$ref": "#/examples/0"}}, "examples": [{"enum": (0..2000).collect::<Vec<_>>()}]}),
        ] {
            assert!(!is_light(&heavy), "{heavy}");
        }
    }

    /// Most real schemas are checked in the host, with no round trip: of the demo
    /// catalog's, only the two with a property named `pattern` are not.
    #[test]
    fn the_demo_tools_schemas_are_light_but_those_with_patterns() {
        let tools = crate::catalog::embedded::demo_descriptors().unwrap();
        let heavy: Vec<String> = tools
            .iter()
            .filter(|t| light(&t.input_schema.value()).is_none())
            .map(|t| t.name.clone())
            .collect();
        assert!(
            heavy.len() <= 2,
            "{} of {}: {heavy:?}",
            heavy.len(),
            tools.len()
        );
    }

    /// The child's answers, as the parent reads them.
    #[test]
    fn a_checker_answers_from_the_schema_it_was_sent_once() {
        let mut kept = HashMap::new();
        let schema = r#"{"properties": {"a": {"type": "string", "pattern": "^x+$"}}}"#;
        let ask = |schema: Option<&str>, args: Value| Asked {
            key: "k".into(),
            schema: schema.map(str::to_string),
            args,
        };
        assert!(matches!(
            answer(&mut kept, ask(None, json!({}))),
            Answer::Unknown
        ));
        assert!(matches!(
            answer(&mut kept, ask(Some(schema), json!({"a": "xx"}))),
            Answer::Valid
        ));
        match answer(&mut kept, ask(None, json!({"a": "y"}))) {
            Answer::Invalid { errors } => assert!(errors[0].starts_with("/a:"), "{errors:?}"),
            _ => panic!("not refused"),
        }
        let bad = Asked {
            key: "b".into(),
            schema: Some(r#"{"pattern": "("}"#.into()),
            args: json!("x"),
        };
        assert!(matches!(answer(&mut kept, bad), Answer::BadSchema { .. }));
    }
}
