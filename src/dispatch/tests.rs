//! Unit tests of the dispatch path with in-process hooks, approvers and executors. The
//! command hooks and executors are exercised end to end in `tests/cli_call.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::catalog::{ExecutorSpec, Facts, Source, ToolDescriptor};
use crate::executors::{ExecFuture, Executor};
use crate::policy::approval::ApprovalFuture;
use crate::policy::hooks::{AfterChange, HookFuture};

fn tool(source: Source, source_name: &str, name: &str, executor: ExecutorSpec) -> ToolDescriptor {
    ToolDescriptor::builder(source, source_name, name)
        .description(format!("{name} tool"))
        .input_schema(&json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["title"]
        }))
        .executor(executor)
        .origin("test")
        .build()
}

fn fixture() -> ExecutorSpec {
    ExecutorSpec::Fixture {
        text: "FAKE_PLUGIN_OK {name} {input}".into(),
        details: None,
    }
}

/// Counts the calls that reached it: the proof that a blocked call never ran.
#[derive(Default)]
struct CountingExecutor {
    runs: AtomicUsize,
}

impl Executor for CountingExecutor {
    fn run<'a>(&'a self, call: ExecCall<'a>) -> ExecFuture<'a> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            (call.progress)("half way");
            ToolOutput {
                text: format!("client ran with {}", call.args),
                details: json!({}),
                is_error: false,
            }
        })
    }
}

fn catalog(config: &Config) -> Arc<Catalog> {
    let tools = vec![
        tool(Source::Openclaw, "github", "create_issue", fixture()),
        tool(Source::Openclaw, "core", "search", fixture()),
        tool(Source::Mcp, "notion", "search", fixture()),
        tool(Source::Client, "client", "pick_file", ExecutorSpec::Client),
        tool(
            Source::Openclaw,
            "core",
            "delete_everything",
            ExecutorSpec::Client,
        ),
    ];
    Arc::new(Catalog::build(tools, &Facts::bare(config)).unwrap())
}

fn dispatcher(
    builder: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder,
) -> (Dispatcher, Arc<CountingExecutor>) {
    let config = Config::from_toml_str(
        "[[approvals]]\ntools = [\"delete_*\"]\ntimeout_ms = 200\n",
        "t.toml".as_ref(),
    )
    .unwrap();
    let counting = Arc::new(CountingExecutor::default());
    let executors = Executors {
        mcp: None,
        client: Some(counting.clone() as Arc<dyn Executor>),
    };
    let b = DispatcherBuilder::new(catalog(&config))
        .config(&config)
        .unwrap()
        .executors(executors);
    (builder(b).build(), counting)
}

fn call(tool: &str, args: Value) -> CallRequest {
    CallRequest::new(tool, args, "test")
}

#[tokio::test]
async fn a_fixture_call_returns_the_envelope() {
    let (d, _) = dispatcher(|b| b);
    let e = d
        .call(call(
            "openclaw:github:create_issue",
            json!({"title": "Crash"}),
        ))
        .await
        .unwrap();
    assert_eq!(e.tool.id, "openclaw:github:create_issue");
    assert_eq!(untagged(&e.call_id), "test:direct:create_issue:1");
    assert_eq!(
        e.call_id,
        format!("test:direct.{}:create_issue:1", d.instance)
    );
    assert_eq!(
        e.result.text(),
        r#"FAKE_PLUGIN_OK create_issue {"title":"Crash"}"#
    );
    assert_eq!(
        e.result.details,
        json!({"status": "ok", "tool": "create_issue", "input": {"title": "Crash"}})
    );
    assert!(!e.result.is_error);
    let second = d
        .call(call("create_issue", json!({"title": "Again"})))
        .await
        .unwrap();
    assert_eq!(untagged(&second.call_id), "test:direct:create_issue:2");
    let mut nested = call("create_issue", json!({"title": "x"}));
    nested.parent = Some("run-7".into());
    let nested = d.call(nested).await.unwrap();
    assert_eq!(untagged(&nested.call_id), "test:run-7:create_issue:1");
    // Another dispatcher (another process writing the same session log) says other ids.
    let (other, _) = dispatcher(|b| b);
    assert_ne!(other.instance, d.instance);
    assert_eq!(d.counters().executed_count, 3);
    // A run's count goes with it: a server's runs leave nothing behind.
    assert!(d.sequence.lock().contains_key("run-7"));
    d.run_ended("run-7");
    assert!(!d.sequence.lock().contains_key("run-7"));
}

#[tokio::test]
async fn resolution_failures_are_typed_and_run_nothing() {
    let (d, runs) = dispatcher(|b| b);
    let e = d.call(call("create_isue", json!({}))).await.unwrap_err();
    assert_eq!(e.code(), "unknown-tool");
    assert!(
        e.to_string().contains("openclaw:github:create_issue"),
        "{e}"
    );
    let e = d
        .call(call("search", json!({"title": "x"})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "ambiguous-tool");
    assert!(e.to_string().contains("mcp:notion:search"), "{e}");
    assert!(e.to_string().contains("openclaw:core:search"), "{e}");
    assert!(e.to_string().contains("use an exact tool id"), "{e}");
    assert_eq!(runs.runs.load(Ordering::SeqCst), 0);
    assert_eq!(d.counters().executed_count, 0);
}

#[tokio::test]
async fn invalid_arguments_list_each_pointer_and_run_nothing() {
    let (d, runs) = dispatcher(|b| b);
    let e = d
        .call(call("pick_file", json!({"title": 3, "count": "many"})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid-arguments");
    let text = e.to_string();
    assert!(
        text.contains("/title: 3 is not of type \"string\""),
        "{text}"
    );
    assert!(text.contains("/count: "), "{text}");
    let e = d.call(call("pick_file", json!({}))).await.unwrap_err();
    assert!(
        e.to_string().contains("\"title\" is a required property"),
        "{e}"
    );
    assert_eq!(runs.runs.load(Ordering::SeqCst), 0);
}

struct Answer(ApprovalDecision, std::time::Duration);

impl Approver for Answer {
    fn decide<'a>(&'a self, _: &'a ApprovalRequest) -> ApprovalFuture<'a> {
        Box::pin(async move {
            tokio::time::sleep(self.1).await;
            self.0.clone()
        })
    }
}

#[tokio::test]
async fn approval_allows_denies_and_times_out() {
    let args = json!({"title": "all"});
    let (d, runs) = dispatcher(|b| b);
    let e = d
        .call(call("delete_everything", args.clone()))
        .await
        .unwrap();
    assert!(e.result.is_error);
    assert_eq!(e.result.details["status"], "blocked");
    assert_eq!(e.result.details["by"], "approval");
    assert!(e.result.text().starts_with("blocked: "));

    let deny = Arc::new(Answer(
        ApprovalDecision::Deny("not today".into()),
        Default::default(),
    ));
    let (d, _) = dispatcher(|b| b.approver(deny));
    let e = d
        .call(call("delete_everything", args.clone()))
        .await
        .unwrap();
    assert_eq!(e.result.details["reason"], "not today");

    let slow = Arc::new(Answer(
        ApprovalDecision::Allow,
        std::time::Duration::from_secs(30),
    ));
    let (d, _) = dispatcher(|b| b.approver(slow));
    let e = d
        .call(call("delete_everything", args.clone()))
        .await
        .unwrap();
    assert_eq!(e.result.details["reason"], "no approval within 200 ms");
    assert_eq!(runs.runs.load(Ordering::SeqCst), 0);

    let allow = Arc::new(Answer(ApprovalDecision::Allow, Default::default()));
    let (d, runs) = dispatcher(|b| b.approver(allow));
    let e = d.call(call("delete_everything", args)).await.unwrap();
    assert!(!e.result.is_error, "{e:?}");
    assert_eq!(runs.runs.load(Ordering::SeqCst), 1);
}

/// A before hook that records how many hooks run at once, and answers by tool title.
#[derive(Default)]
struct Recorder {
    active: AtomicUsize,
    max_active: AtomicUsize,
    seen: AtomicUsize,
}

impl BeforeToolCall for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn before<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, BeforeDecision> {
        Box::pin(async move {
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_active.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            self.active.fetch_sub(1, Ordering::SeqCst);
            self.seen.fetch_add(1, Ordering::SeqCst);
            match event.args.get("title").and_then(Value::as_str) {
                Some("block me") => Ok(BeforeDecision::Block("no blocking titles".into())),
                Some("fail me") => Err("recorder broke".into()),
                Some("replace me") => Ok(BeforeDecision::Replace(json!({"title": "replaced"}))),
                Some("break me") => Ok(BeforeDecision::Replace(json!({"title": 7}))),
                _ => Ok(BeforeDecision::Pass),
            }
        })
    }
}

#[tokio::test]
async fn before_hooks_pass_replace_and_block_failing_closed() {
    let hook = Arc::new(Recorder::default());
    let (d, runs) = dispatcher(|b| b.before_hook(hook.clone()));
    let e = d
        .call(call("pick_file", json!({"title": "replace me"})))
        .await
        .unwrap();
    assert_eq!(e.result.text(), r#"client ran with {"title":"replaced"}"#);
    for (title, reason) in [
        ("block me", "no blocking titles"),
        ("fail me", "recorder broke"),
        ("break me", "replaced the arguments with invalid ones"),
    ] {
        let e = d
            .call(call("pick_file", json!({"title": title})))
            .await
            .unwrap();
        assert_eq!(e.result.details["status"], "blocked", "{title}");
        assert_eq!(e.result.details["by"], "recorder", "{title}");
        assert!(
            e.result.text().contains(reason),
            "{title}: {}",
            e.result.text()
        );
    }
    assert_eq!(runs.runs.load(Ordering::SeqCst), 1);
}

struct Rewriter;

impl AfterToolCall for Rewriter {
    fn name(&self) -> &str {
        "rewriter"
    }

    fn after<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, AfterChange> {
        Box::pin(async move {
            let text = event
                .result
                .as_ref()
                .map(|r| r["content"][0]["text"].clone());
            if event.args["title"] == "fail" {
                return Err("rewriter broke".into());
            }
            Ok(AfterChange {
                content: Some(format!("rewritten: {}", text.unwrap_or_default())),
                is_error: Some(event.args["title"] == "mark"),
                details: None,
                stop_after_batch: event.args["title"] == "stop",
            })
        })
    }
}

#[tokio::test]
async fn after_hooks_rewrite_mark_and_stop() {
    let (d, _) = dispatcher(|b| b.after_hook(Arc::new(Rewriter)));
    let e = d
        .call(call("create_issue", json!({"title": "x"})))
        .await
        .unwrap();
    assert!(
        e.result.text().starts_with("rewritten: \"FAKE_PLUGIN_OK"),
        "{}",
        e.result.text()
    );
    assert!(!e.result.is_error);
    let e = d
        .call(call("create_issue", json!({"title": "mark"})))
        .await
        .unwrap();
    assert!(e.result.is_error);
    let e = d
        .call(call("create_issue", json!({"title": "stop"})))
        .await
        .unwrap();
    assert!(e.stop_after_batch);
    let e = d
        .call(call("create_issue", json!({"title": "fail"})))
        .await
        .unwrap();
    assert!(e.result.is_error);
    assert_eq!(e.result.details["status"], "hook-failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_parallel_calls_keep_hooks_serial_and_the_log_complete() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(SessionLog::open(dir.path(), "parallel").unwrap());
    let hook = Arc::new(Recorder::default());
    let (d, runs) = dispatcher(|b| b.before_hook(hook.clone()).session_log(log.clone()));
    let d = Arc::new(d);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let d = Arc::clone(&d);
        tasks.push(tokio::spawn(async move {
            d.call(call("pick_file", json!({"title": format!("t{i}")})))
                .await
        }));
    }
    for t in tasks {
        assert!(!t.await.unwrap().unwrap().result.is_error);
    }
    assert_eq!(hook.max_active.load(Ordering::SeqCst), 1);
    assert_eq!(hook.seen.load(Ordering::SeqCst), 100);
    assert_eq!(runs.runs.load(Ordering::SeqCst), 100);
    let text = std::fs::read_to_string(log.path().unwrap()).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut call_ids: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "call")
        .map(|e| e["call_id"].as_str().unwrap())
        .collect();
    call_ids.sort();
    call_ids.dedup();
    assert_eq!(call_ids.len(), 100, "every call appears once");
    assert_eq!(
        events.iter().filter(|e| e["event"] == "progress").count(),
        100
    );
}

#[test]
fn flattened_arguments_are_repaired_only_when_unambiguous() {
    let (d, _) = dispatcher(|b| b);
    let (id, args) = d
        .tool_call_input(&json!({"id": "create_issue", "title": "x", "count": 2}))
        .unwrap();
    assert_eq!(
        (id.as_str(), args),
        ("create_issue", json!({"title": "x", "count": 2}))
    );
    let (_, args) = d
        .tool_call_input(&json!({"id": "create_issue", "args": {"title": "y"}}))
        .unwrap();
    assert_eq!(args, json!({"title": "y"}));
    let e = d
        .tool_call_input(&json!({"id": "create_issue", "args": {}, "title": "x"}))
        .unwrap_err();
    assert!(e.to_string().contains("`title`"), "{e}");
    let e = d
        .tool_call_input(&json!({"id": "create_issue", "titel": "x"}))
        .unwrap_err();
    assert!(e.to_string().contains("`titel`"), "{e}");
    assert_eq!(
        d.tool_call_input(&json!("x")).unwrap_err().code(),
        "invalid-request"
    );
    assert_eq!(
        d.tool_call_input(&json!({})).unwrap_err().code(),
        "invalid-request"
    );
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_json_arguments_never_panic(args in any_json(), flat in any_json()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (d, _) = dispatcher(|b| b);
        runtime.block_on(async {
            for tool in ["create_issue", "pick_file", "delete_everything", "nope"] {
                let _ = d.call(call(tool, args.clone())).await;
            }
        });
        let _ = d.tool_call_input(&flat);
        let _ = d.tool_call_input(&json!({"id": "create_issue", "args": args}));
    }
}

/// A call id without its dispatcher's instance: `test:direct.ab12cd34:x:1` -> `test:direct:x:1`.
fn untagged(id: &str) -> String {
    let mut parts: Vec<&str> = id.splitn(3, ':').collect();
    parts[1] = parts[1]
        .rsplit_once('.')
        .map_or(parts[1], |(parent, _)| parent);
    parts.join(":")
}
