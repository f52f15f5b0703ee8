//! Agent-loop rules with a scripted model and in-process executors and hooks.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::catalog::{ExecutorSpec, Facts, Source, ToolDescriptor};
use crate::config::Config;
use crate::dispatch::DispatcherBuilder;
use crate::executors::{ExecCall, ExecFuture, Executor, Executors, ToolOutput};
use crate::policy::hooks::{AfterChange, AfterToolCall, HookEvent, HookFuture};

/// Replies from a script, recording what it was sent.
struct Script {
    replies: Mutex<VecDeque<ModelReply>>,
    seen: Mutex<Vec<ModelRequest>>,
    /// Once the script is empty, keep calling this tool (round-limit test).
    forever: Option<String>,
    abort_on_call: Option<CancellationToken>,
}

impl Script {
    fn new(replies: Vec<ModelReply>) -> Self {
        Script {
            replies: Mutex::new(replies.into()),
            seen: Mutex::new(Vec::new()),
            forever: None,
            abort_on_call: None,
        }
    }
}

impl Model for Script {
    fn respond<'a>(&'a self, request: &'a ModelRequest) -> ModelFuture<'a> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(request.clone());
            if let Some(t) = &self.abort_on_call {
                t.cancel();
            }
            if let Some(r) = self.replies.lock().unwrap().pop_front() {
                return Ok(r);
            }
            match &self.forever {
                Some(name) => Ok(calls(&[(name, json!({"title": "again"}))])),
                None => Ok(ModelReply {
                    text: "done".into(),
                    ..Default::default()
                }),
            }
        })
    }
}

fn calls(list: &[(&str, Value)]) -> ModelReply {
    ModelReply {
        text: String::new(),
        tool_calls: list
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("call_{}", i + 1),
                name: name.to_string(),
                arguments: args.clone(),
                unreadable: None,
            })
            .collect(),
        streamed: false,
        usage: None,
        ending: Default::default(),
        held: Default::default(),
    }
}

/// A client executor that records how many of its calls run at once.
#[derive(Default)]
struct Gauge {
    active: AtomicUsize,
    max: AtomicUsize,
    runs: AtomicUsize,
}

impl Executor for Gauge {
    fn run<'a>(&'a self, call: ExecCall<'a>) -> ExecFuture<'a> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            self.active.fetch_sub(1, Ordering::SeqCst);
            ToolOutput {
                text: format!("{} ran", call.entry.descriptor.name),
                details: json!({}),
                is_error: false,
            }
        })
    }
}

struct StopHook;

impl AfterToolCall for StopHook {
    fn name(&self) -> &str {
        "stopper"
    }
    fn after<'a>(&'a self, event: &'a HookEvent) -> HookFuture<'a, AfterChange> {
        Box::pin(async move {
            Ok(AfterChange {
                stop_after_batch: event.name == "stopper",
                ..Default::default()
            })
        })
    }
}

fn tool(name: &str, executor: ExecutorSpec, mode: ExecutionMode) -> ToolDescriptor {
    let (source, source_name) = if matches!(executor, ExecutorSpec::Client) {
        (Source::Client, "client")
    } else {
        (Source::Openclaw, "core")
    };
    ToolDescriptor::builder(source, source_name, name)
        .description(format!("{name}: a test tool"))
        .input_schema(&json!({"type": "object", "properties": {"title": {"type": "string"}}}))
        .executor(executor)
        .execution_mode(mode)
        .origin("test")
        .build()
}

fn fixture(text: &str, details: Option<Value>) -> ExecutorSpec {
    ExecutorSpec::Fixture {
        text: text.into(),
        details,
    }
}

fn agent(mode: Mode) -> (Arc<Agent>, Arc<Gauge>) {
    agent_with(mode, Err("not in unit tests".into()))
}

fn agent_with(mode: Mode, code_available: Result<(), String>) -> (Arc<Agent>, Arc<Gauge>) {
    agent_made(mode, code_available, |a| a)
}

fn agent_made(
    mode: Mode,
    code_available: Result<(), String>,
    with: impl FnOnce(Agent) -> Agent,
) -> (Arc<Agent>, Arc<Gauge>) {
    let config = Config::from_toml_str(
        "[[approvals]]\ntools = [\"delete_all\"]\n",
        "t.toml".as_ref(),
    )
    .unwrap();
    let tools = vec![
        tool(
            "create_issue",
            fixture("FAKE_PLUGIN_OK {name} {input}", None),
            ExecutionMode::Parallel,
        ),
        tool(
            "delete_all",
            fixture("deleted", None),
            ExecutionMode::Parallel,
        ),
        tool(
            "finish",
            fixture("finished", Some(json!({"terminate": true}))),
            ExecutionMode::Parallel,
        ),
        tool(
            "stopper",
            fixture("stop here", None),
            ExecutionMode::Parallel,
        ),
        tool("slow", ExecutorSpec::Client, ExecutionMode::Parallel),
        tool("serial", ExecutorSpec::Client, ExecutionMode::Sequential),
    ];
    let catalog = Arc::new(crate::Catalog::build(tools, &Facts::bare(&config)).unwrap());
    let gauge = Arc::new(Gauge::default());
    let dispatcher = Arc::new(
        DispatcherBuilder::new(Arc::clone(&catalog))
            .config(&config)
            .unwrap()
            .after_hook(Arc::new(StopHook))
            .executors(Executors {
                mcp: None,
                client: Some(gauge.clone() as Arc<dyn Executor>),
            })
            .build(),
    );
    let options = surface::Options {
        mode,
        code_available,
        prompt: "",
        context_window: None,
        likely: 0,
        required: &[],
        code_timeout_ms: 10_000,
    };
    let s = surface::build(&catalog, &options).unwrap();
    (
        Arc::new(with(Agent::new(
            dispatcher,
            s,
            None,
            Duration::from_secs(10),
            4,
        ))),
        gauge,
    )
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::User {
        content: text.into(),
    }]
}

async fn turn(agent: &Arc<Agent>, model: &Script) -> Result<TurnOutcome, TurnError> {
    agent
        .run_turn(
            model,
            "system",
            user("do it"),
            TurnOptions::default(),
            CancellationToken::new(),
        )
        .await
}

fn tool_messages(o: &TurnOutcome) -> Vec<(&str, &str, bool)> {
    o.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => Some((name.as_str(), content.as_str(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn direct_calls_run_and_the_model_gets_the_results() {
    let (a, _) = agent(Mode::Direct);
    let script = Script::new(vec![calls(&[("create_issue", json!({"title": "Crash"}))])]);
    let o = turn(&a, &script).await.unwrap();
    assert_eq!(o.stop, Stop::Answered);
    assert_eq!(o.rounds, 2);
    assert_eq!(o.text, "done");
    assert_eq!(
        o.calls[0].tool_id.as_deref(),
        Some("openclaw:core:create_issue")
    );
    let msgs = tool_messages(&o);
    assert!(
        msgs[0]
            .1
            .contains(r#"FAKE_PLUGIN_OK create_issue {\"title\":\"Crash\"}"#),
        "{}",
        msgs[0].1
    );
    // The second request carried the tool result back.
    let seen = script.seen.lock().unwrap();
    assert!(matches!(
        seen[1].messages.last(),
        Some(Message::Tool { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_in_parallel_unless_a_tool_is_sequential() {
    let (a, gauge) = agent(Mode::Direct);
    let three = calls(&[
        ("slow", json!({})),
        ("slow", json!({})),
        ("slow", json!({})),
    ]);
    turn(&a, &Script::new(vec![three])).await.unwrap();
    assert_eq!(gauge.max.load(Ordering::SeqCst), 3);

    let (a, gauge) = agent(Mode::Direct);
    let mixed = calls(&[
        ("slow", json!({})),
        ("serial", json!({})),
        ("slow", json!({})),
    ]);
    let o = turn(&a, &Script::new(vec![mixed])).await.unwrap();
    assert_eq!(gauge.max.load(Ordering::SeqCst), 1);
    // Results stay in call order.
    let names: Vec<&str> = tool_messages(&o).iter().map(|m| m.0).collect();
    assert_eq!(names, ["slow", "serial", "slow"]);
}

#[tokio::test]
async fn blocked_and_unknown_calls_become_error_results() {
    let (a, _) = agent(Mode::Direct);
    let script = Script::new(vec![calls(&[
        ("delete_all", json!({})),
        ("nope", json!({})),
    ])]);
    let o = turn(&a, &script).await.unwrap();
    let msgs = tool_messages(&o);
    assert!(
        msgs[0].2 && msgs[0].1.contains("blocked: "),
        "{}",
        msgs[0].1
    );
    assert!(
        msgs[1].2 && msgs[1].1.starts_with("Tool not found: `nope`"),
        "{}",
        msgs[1].1
    );
    assert_eq!(o.stop, Stop::Answered);
}

#[tokio::test]
async fn terminate_stop_after_batch_abort_and_the_round_limit() {
    let (a, _) = agent(Mode::Direct);
    let o = turn(&a, &Script::new(vec![calls(&[("finish", json!({}))])]))
        .await
        .unwrap();
    assert_eq!((o.stop, o.rounds), (Stop::Terminated, 1));
    // Not every result terminates: the loop goes on.
    let o = turn(
        &a,
        &Script::new(vec![calls(&[
            ("finish", json!({})),
            ("create_issue", json!({})),
        ])]),
    )
    .await
    .unwrap();
    assert_eq!(o.stop, Stop::Answered);

    let o = turn(&a, &Script::new(vec![calls(&[("stopper", json!({}))])]))
        .await
        .unwrap();
    assert_eq!(o.stop, Stop::StopAfterBatch);

    let abort = CancellationToken::new();
    let mut script = Script::new(vec![calls(&[("create_issue", json!({}))])]);
    script.abort_on_call = Some(abort.clone());
    let o = a
        .run_turn(&script, "s", user("p"), TurnOptions::default(), abort)
        .await
        .unwrap();
    assert_eq!(o.stop, Stop::Aborted);

    let mut forever = Script::new(vec![]);
    forever.forever = Some("create_issue".into());
    let e = turn(&a, &forever).await.unwrap_err();
    assert_eq!(e.code(), "round-limit");
    assert!(e.to_string().contains("4 rounds"), "{e}");
}

#[tokio::test]
async fn tools_mode_searches_then_calls_through_the_structured_tools() {
    let (a, _) = agent(Mode::Tools);
    let script = Script::new(vec![
        calls(&[(
            "tool_search",
            json!({"queries": [{"query": "create issue"}, {"query": "finish"}]}),
        )]),
        calls(&[(
            "tool_call",
            json!({"id": "create_issue", "args": {"title": "x"}}),
        )]),
        calls(&[("tool_call", json!({"id": "create_issue", "title": "flat"}))]),
    ]);
    let o = turn(&a, &script).await.unwrap();
    let msgs = tool_messages(&o);
    assert!(
        msgs[0].1.contains("openclaw:core:create_issue"),
        "{}",
        msgs[0].1
    );
    assert!(msgs[1].1.contains("FAKE_PLUGIN_OK"), "{}", msgs[1].1);
    assert!(msgs[2].1.contains("flat"), "{}", msgs[2].1);
    // A catalog tool not declared in tools mode is not callable by name.
    let (a, _) = agent(Mode::Tools);
    let o = turn(
        &a,
        &Script::new(vec![calls(&[("create_issue", json!({}))])]),
    )
    .await
    .unwrap();
    assert!(tool_messages(&o)[0].1.starts_with("Tool not found"));
}

#[tokio::test]
async fn directory_mode_loads_a_hidden_tool_named_exactly() {
    let (a, _) = agent(Mode::Directory);
    let script = Script::new(vec![calls(&[
        ("create_issue", json!({"title": "x"})),
        ("create_iss", json!({})),
    ])]);
    let o = turn(&a, &script).await.unwrap();
    let msgs = tool_messages(&o);
    assert!(
        !msgs[0].2 && msgs[0].1.contains("FAKE_PLUGIN_OK"),
        "{}",
        msgs[0].1
    );
    assert!(
        msgs[1].2 && msgs[1].1.starts_with("Tool not found"),
        "{}",
        msgs[1].1
    );
}

#[tokio::test]
async fn control_tools_refuse_arguments_their_schema_refuses() {
    // No sandbox in this agent: a `tool_search_code` that got past validation would say
    // "unavailable", so an `invalid-arguments` answer shows the check came first.
    let (code, _) = agent_with(Mode::Code, Ok(()));
    let (tools, _) = agent(Mode::Tools);
    let cases = [
        (&code, "tool_search_code", json!({"code": 42}), "/code"),
        (
            &code,
            "tool_search_code",
            json!({}),
            "\"code\" is a required property",
        ),
        (
            &code,
            "tool_search_code",
            json!({"code": "return 1", "extra": 1}),
            "extra",
        ),
        (&tools, "tool_search", json!({"query": 7}), "/query"),
        (&tools, "tool_search", json!({"q": "issue"}), "q"),
        (
            &tools,
            "tool_search",
            json!({"queries": [{"query": "a", "limit": "5"}]}),
            "/queries/0/limit",
        ),
        (
            &tools,
            "tool_describe",
            json!({}),
            "\"id\" is a required property",
        ),
        (&tools, "tool_call", json!({"id": ["create_issue"]}), "/id"),
    ];
    for (agent, name, args, says) in cases {
        let (text, is_error) = agent
            .run_tool(name, args.clone(), "t", CancellationToken::new())
            .await;
        assert!(is_error, "{name} {args}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
        assert_eq!(
            v["error"]["code"], "invalid-arguments",
            "{name} {args}: {text}"
        );
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{name} {args}: {message}");
    }
    // Valid arguments still go through.
    let (text, is_error) = tools
        .run_tool(
            "tool_search",
            json!({"query": "issue"}),
            "t",
            CancellationToken::new(),
        )
        .await;
    assert!(!is_error, "{text}");
}

#[tokio::test]
async fn a_client_that_stops_reading_or_goes_away_aborts_the_turn() {
    // Nobody reads: the second piece finds the buffer full and waits out the stall.
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let abort = CancellationToken::new();
    let text = TextStream::new(tx, abort.clone(), Duration::from_millis(10));
    text.send("first").await;
    assert!(!abort.is_cancelled(), "one piece fits the buffer");
    text.send("second").await;
    assert!(abort.is_cancelled(), "a stalled client ends the turn");

    // Gone: the receiver is dropped.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    drop(rx);
    let abort = CancellationToken::new();
    TextStream::new(tx, abort.clone(), Duration::from_secs(30))
        .send("anyone?")
        .await;
    assert!(abort.is_cancelled());
}

#[tokio::test]
async fn a_streamed_answer_is_every_round_joined_and_the_same_as_the_outcome() {
    let (a, _) = agent(Mode::Direct);
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let abort = CancellationToken::new();
    let mut first = calls(&[("create_issue", json!({"title": "x"}))]);
    first.text = "Let me file it.".into();
    let script = Script::new(vec![first]);
    let outcome = a
        .run_turn(
            &script,
            "s",
            user("file it"),
            TurnOptions {
                options: RequestOptions::default(),
                text: Some(TextStream::new(tx, abort.clone(), Duration::from_secs(30))),
                max_tool_calls: None,
            },
            abort,
        )
        .await
        .unwrap();
    let mut streamed = String::new();
    while let Ok(piece) = rx.try_recv() {
        streamed.push_str(&piece);
    }
    assert_eq!(outcome.text, "Let me file it.\n\ndone");
    assert_eq!(streamed, outcome.text);
}

#[tokio::test]
async fn a_forced_tool_choice_holds_for_the_first_round_only_and_maps_onto_the_surface() {
    let (a, _) = agent(Mode::Tools);
    let forced = ToolChoice::Tool("create_issue".into());
    // A catalog tool behind the structured tools: any tool must be called.
    assert_eq!(a.tool_choice(&forced, 1), ToolChoice::Required);
    assert_eq!(a.tool_choice(&forced, 2), ToolChoice::Auto);
    assert_eq!(a.tool_choice(&ToolChoice::None, 3), ToolChoice::None);
    let (direct, _) = agent(Mode::Direct);
    assert_eq!(direct.tool_choice(&forced, 1), forced);
    let script = Script::new(vec![calls(&[("create_issue", json!({"title": "x"}))])]);
    direct
        .run_turn(
            &script,
            "s",
            user("file it"),
            TurnOptions {
                options: RequestOptions {
                    tool_choice: Some(forced.clone()),
                    ..RequestOptions::default()
                },
                text: None,
                max_tool_calls: None,
            },
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let seen = script.seen.lock().unwrap();
    assert_eq!(seen[0].options.tool_choice, Some(forced));
    assert_eq!(seen[1].options.tool_choice, Some(ToolChoice::Auto));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_at_most_its_bound_at_once_and_a_host_at_most_its_slots() {
    let (a, gauge) = agent(Mode::Direct);
    let many: Vec<(&str, Value)> = (0..40).map(|_| ("slow", json!({}))).collect();
    let o = turn(&a, &Script::new(vec![calls(&many)])).await.unwrap();
    assert_eq!(tool_messages(&o).len(), 40, "every call ran");
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= MAX_PARALLEL_CALLS, "{max} calls at once");

    // Two turns at once on a host of three slots.
    let slots = Arc::new(tokio::sync::Semaphore::new(3));
    let (a, gauge) = agent_made(Mode::Direct, Err("no".into()), |a| {
        a.with_call_slots(Arc::clone(&slots))
    });
    let (one, two) = (
        Script::new(vec![calls(&many[..10])]),
        Script::new(vec![calls(&many[..10])]),
    );
    let (x, y) = tokio::join!(turn(&a, &one), turn(&a, &two));
    assert_eq!(
        tool_messages(&x.unwrap()).len() + tool_messages(&y.unwrap()).len(),
        20
    );
    let max = gauge.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} calls at once on three slots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_waiting_when_the_turn_is_aborted_never_runs() {
    let slots = Arc::new(tokio::sync::Semaphore::new(1));
    let (a, gauge) = agent_made(Mode::Direct, Err("no".into()), |a| {
        a.with_call_slots(Arc::clone(&slots))
    });
    let abort = CancellationToken::new();
    let stop = abort.clone();
    let watch = Arc::clone(&gauge);
    tokio::spawn(async move {
        while watch.active.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stop.cancel();
    });
    let script = Script::new(vec![calls(&[("slow", json!({})), ("slow", json!({}))])]);
    let o = a
        .run_turn(&script, "s", user("x"), TurnOptions::default(), abort)
        .await
        .unwrap();
    assert_eq!(o.stop, Stop::Aborted);
    assert_eq!(
        gauge.runs.load(Ordering::SeqCst),
        1,
        "the second call never started"
    );
}

#[tokio::test]
async fn calls_the_client_ruled_out_are_dropped_before_they_run() {
    let two = calls(&[
        ("create_issue", json!({"title": "a"})),
        ("create_issue", json!({"title": "b"})),
    ]);
    let none = RequestOptions {
        tool_choice: Some(ToolChoice::None),
        ..RequestOptions::default()
    };
    let one_at_a_time = RequestOptions {
        parallel_tool_calls: Some(false),
        ..RequestOptions::default()
    };
    for (options, ran) in [(none, 0), (one_at_a_time, 1)] {
        let (a, _) = agent(Mode::Direct);
        let o = a
            .run_turn(
                &Script::new(vec![two.clone()]),
                "s",
                user("x"),
                TurnOptions {
                    options,
                    text: None,
                    max_tool_calls: None,
                },
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(tool_messages(&o).len(), ran);
        // The conversation holds only the calls that ran: each has its result.
        let asked: usize = o
            .messages
            .iter()
            .map(|m| match m {
                Message::Assistant { tool_calls, .. } => tool_calls.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(asked, ran);
    }
}

/// A batch whose results would grow the conversation past its bound stops there: the
/// calls still waiting never run, and the turn fails at once (it ran the whole batch,
/// then failed at the next round).
#[tokio::test]
async fn a_batch_stops_once_its_results_fill_the_conversation() {
    let (a, _) = agent(Mode::Direct);
    let title = "t".repeat(200 * 1024);
    let list: Vec<(&str, Value)> = (0..64)
        .map(|_| ("create_issue", json!({"title": title})))
        .collect();
    let e = turn(&a, &Script::new(vec![calls(&list)]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("conversation grew"), "{e}");
    let ran = a.dispatcher.counters().executed_count;
    assert!(ran < 64, "{ran} of 64 calls ran past the bound");
}

/// Past its own share, a turn's results take places in the host's pool as they arrive;
/// one that finds no room is not kept (the model reads why), and the turn's places go when
/// it ends.
#[tokio::test]
async fn results_past_a_turns_share_take_places_in_the_hosts_pool() {
    let pool = Arc::new(tokio::sync::Semaphore::new(256));
    let (a, _) = agent_made(Mode::Direct, Err("no".into()), |a| {
        a.with_results_pool(Arc::clone(&pool))
    });
    let title = "t".repeat(200 * 1024);
    let list: Vec<(&str, Value)> = (0..24)
        .map(|_| ("create_issue", json!({"title": title})))
        .collect();
    let o = turn(&a, &Script::new(vec![calls(&list)])).await.unwrap();
    let results = tool_messages(&o);
    assert_eq!(results.len(), 24);
    let refused = results
        .iter()
        .filter(|(_, content, is_error)| *is_error && content.contains("was not kept"))
        .count();
    // Each result is cut at the tool's bound; 1 MiB of its own and 256 KiB of the pool
    // hold as many as fit, the rest are refused.
    let each = results[0].1.len();
    let fit = (0..=24usize)
        .take_while(|n| (n * each).saturating_sub(1 << 20).div_ceil(1024) <= 256)
        .last()
        .unwrap();
    assert!(fit > 16 && fit < 24, "{fit} of {each} bytes");
    assert_eq!(refused, 24 - fit, "{each} bytes each");
    assert_eq!(pool.available_permits(), 256);
}

#[tokio::test]
async fn a_conversation_grown_past_the_bound_fails_the_turn() {
    let (a, _) = agent(Mode::Direct);
    let mut big = calls(&[("create_issue", json!({"title": "x"}))]);
    big.text = "z".repeat(MAX_CONVERSATION_BYTES);
    let e = turn(&a, &Script::new(vec![big])).await.unwrap_err();
    assert!(e.to_string().contains("conversation grew"), "{e}");
    // Its tool had run: the error says so, for the gateway to tell SDKs not to retry.
    assert_eq!(e.calls_run(), 1);
    assert!(
        e.to_string().contains("asking again runs them again"),
        "{e}"
    );
    assert_eq!(
        conversation_bytes(&[Message::Assistant {
            content: "ab".into(),
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: json!({"x": 1}),
                unreadable: None,
            }],
        }]),
        2 + 1 + 1 + r#"{"x":1}"#.len()
    );
}

/// A model that calls a tool with arguments its schema refuses, every round.
struct Refused;

impl Model for Refused {
    fn respond<'a>(&'a self, _: &'a ModelRequest) -> ModelFuture<'a> {
        Box::pin(async { Ok(calls(&[("create_issue", json!({"title": 5}))])) })
    }
}

/// Calls refused before their tool ran are not calls that ran: a turn that hit its round
/// limit with only those says nothing of calls, and may be asked again (front round 21 F3:
/// "after 16 tool calls of this turn ran" for calls refused for their arguments).
#[tokio::test]
async fn calls_refused_before_their_tool_ran_are_not_counted_as_run() {
    let (a, _) = agent(Mode::Direct);
    let e = a
        .run_turn(
            &Refused,
            "system",
            user("do it"),
            TurnOptions::default(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "round-limit", "{e}");
    assert_eq!(e.calls_run(), 0, "{e}");
    assert!(!e.to_string().contains("asking again"), "{e}");
}

/// A model that notes how many hold each round's conversation, and calls a tool twice.
struct Sharing(Mutex<Vec<usize>>);

impl Model for Sharing {
    fn respond<'a>(&'a self, request: &'a ModelRequest) -> ModelFuture<'a> {
        Box::pin(async move {
            let mut seen = self.0.lock().unwrap();
            seen.push(Arc::strong_count(&request.messages));
            Ok(if seen.len() < 3 {
                calls(&[("create_issue", json!({"title": "x"}))])
            } else {
                ModelReply {
                    text: "done".into(),
                    ..Default::default()
                }
            })
        })
    }
}

/// Every round's request shares the turn's one conversation: copied per round, a turn of
/// many rounds held each earlier answer once more while the next was read (front round 9
/// F2). Before a failure, nothing ran, and the error says nothing of calls.
#[tokio::test]
async fn each_round_shares_the_turns_conversation() {
    let (a, _) = agent(Mode::Direct);
    let model = Sharing(Mutex::new(Vec::new()));
    let o = a
        .run_turn(
            &model,
            "system",
            user("do it"),
            TurnOptions::default(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(o.rounds, 3);
    assert_eq!(tool_messages(&o).len(), 2);
    assert_eq!(
        *model.0.lock().unwrap(),
        [2, 2, 2],
        "the turn's and the request's"
    );

    let e = a
        .run_turn(
            &Script::new(vec![]),
            "system",
            vec![Message::User {
                content: "z".repeat(MAX_CONVERSATION_BYTES + 1),
            }],
            TurnOptions::default(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.calls_run(), 0);
    assert!(!e.to_string().contains("asking again"), "{e}");
}

/// A provider that numbers each answer's calls from `call_1` repeats ids across rounds:
/// each round's call gets an id the conversation does not hold yet (front round 12).
#[tokio::test]
async fn call_ids_repeated_across_rounds_are_made_unique() {
    let (a, _) = agent(Mode::Direct);
    let script = Script::new(vec![
        calls(&[("create_issue", json!({"title": "a"}))]),
        calls(&[("create_issue", json!({"title": "b"}))]),
    ]);
    let o = turn(&a, &script).await.unwrap();
    let ids: Vec<&str> = o
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_1", "call_1_2"]);
}
