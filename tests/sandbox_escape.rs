//! Escape tests of code mode: hostile `tool_search_code` bodies run through
//! `toolsearch code BODY --json`, on every Node of `TOOLSEARCH_TEST_NODES` (colon-separated
//! paths of node binaries; default: `node` on PATH), each run with `TOOLSEARCH_NODE` set.
//! The nodes of one test run in parallel threads; a failure names the node.
//!
//! Every run has its own temporary folder as cwd, `--state-dir <tmp>/state`, and the catalog
//! `fixtures/tests/sandbox/catalog.json` with `@DIR@` replaced by that folder: its `canary`
//! tool appends its arguments to `<tmp>/canary`, so a test can tell whether anything reached
//! an executor. The parent gets a random secret in its environment
//! (`TOOLSEARCH_TEST_SECRET`), and `<tmp>/secret.txt` holds another. After a hostile run:
//! neither secret appears in stdout or stderr, no `ESCAPED:` marker either (the bodies
//! return `ESCAPED(detail)` when an attempt worked and `held: <the error>` otherwise), the
//! canary did not run, nothing was written, the listeners opened by the test saw nothing,
//! and no sandbox child of that run is left (`/proc`, after a short poll, zombies ignored).
//!
//! Two kinds of bodies. `vm_*` try to leave the vm context, i.e. reach the outer realm's
//! `process`. `escaped_*` start with `fixtures/tests/sandbox/outer-realm.js`, which uses
//! any way out known to this suite, and then attack the next layers (permission model, OS
//! barriers, the parent's checks) as an escaped guest would: those layers are tested
//! whether or not the vm context holds.
//!
//! When this suite was written it found three ways out of the vm context (the rejection of
//! `import()`, and stack overflows at the entry of the host call, through a bridge call and
//! through `console.log`, all three outer-realm errors) and nine misbehaviours (byte and
//! surrogate handling of logs and results, deep values, uncapped ArrayBuffer memory,
//! replaced `Promise.resolve`, a getter-only `code`, unhandled rejections). All are fixed;
//! the tests that found them now guard them. With `TOOLSEARCH_TEST_VERBOSE=1` (and
//! `--nocapture`) every run's output is printed.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

mod common;
use common::{BIN, GENEROUS, fixture};

/// The variable holding the parent's secret.
const SECRET_VAR: &str = "TOOLSEARCH_TEST_SECRET";

/// The deadline of runs that should finish on their own: long, so a busy CI machine never
/// turns a clean result into a timeout.
const RUN_MS: u64 = 10_000;

/// The deadline of runs that are expected to time out (the CLI clamps to at least 1000).
const TIMEOUT_MS: u64 = 1_500;

/// How a sandbox child is recognized in `/proc/PID/cmdline` (the runtime is given with -e, or
/// the startup snapshot with --snapshot-blob).
const CHILD_MARKERS: &[&str] = &["tool_search_code", "openclaw.tools", "--snapshot-blob"];

/// What a body that got something out returns or logs.
const ESCAPED: &str = "ESCAPED:";

/// The codes `toolsearch code --json` may fail with.
const ERROR_CODES: &[&str] = &[
    "timeout",
    "child-exited",
    "protocol",
    "output-too-large",
    "code-error",
    "out-of-memory",
];

/// Put in front of the hostile bodies. `ESCAPED(...)` builds the marker at run time, so it
/// never appears literally in a body (an error message quoting the source cannot fake it).
const HELPERS: &str = r#"
const ESCAPED = (what) => 'ESC' + 'APED: ' + String(what);
const describeError = (e) => {
  try {
    if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
      const code = typeof e.code === 'string' ? e.code + ' ' : '';
      return code + String(e.name) + ': ' + String(e.message);
    }
    return String(e);
  } catch (x) { return 'an unprintable error'; }
};
// An attempt that returns worked (its value is reported); one that throws held.
async function tryIt(label, attempt) {
  try {
    const v = await attempt();
    return ESCAPED(label + ' -> ' + String(v).slice(0, 300));
  } catch (e) {
    return 'held: ' + label + ': ' + describeError(e).slice(0, 300);
  }
}
function needProcess(p) {
  if (p === null || typeof p !== 'object' || typeof p.pid !== 'number') {
    throw new Error('not the process object: ' + typeof p);
  }
  return 'the process object of pid ' + p.pid;
}
// x.constructor.constructor('return process')() on x and up its prototype chain.
async function chains(label, start) {
  const out = [];
  let o = start;
  for (let i = 0; i < 5 && o !== null && o !== undefined; i++) {
    const here = o;
    out.push(await tryIt(label + ' (proto ' + i + ').constructor.constructor',
      () => needProcess(here.constructor.constructor('return process')())));
    try { o = Object.getPrototypeOf(o); } catch (e) { break; }
  }
  if (out.length === 0) out.push('held: ' + label + ' is ' + String(start));
  return out;
}
"#;

// ---------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------

struct NodeBin {
    path: PathBuf,
    version: String,
}

impl NodeBin {
    fn label(&self) -> String {
        format!("node {} ({})", self.version, self.path.display())
    }
}

/// `TOOLSEARCH_TEST_NODES`, else `node` on PATH; each asked for its version once.
fn nodes() -> &'static [NodeBin] {
    static NODES: OnceLock<Vec<NodeBin>> = OnceLock::new();
    NODES.get_or_init(|| {
        let listed = std::env::var("TOOLSEARCH_TEST_NODES").unwrap_or_default();
        let mut paths: Vec<PathBuf> = listed
            .split(':')
            .filter(|s| !s.trim().is_empty())
            .map(PathBuf::from)
            .collect();
        if paths.is_empty() {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let found = std::env::split_paths(&path)
                .map(|d| d.join("node"))
                .find(|c| c.is_file())
                .expect("no `node` on PATH (or set TOOLSEARCH_TEST_NODES)");
            paths.push(found);
        }
        paths
            .into_iter()
            .map(|path| {
                let out = Command::new(&path)
                    .arg("--version")
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
                assert!(out.status.success(), "{} --version failed", path.display());
                NodeBin {
                    version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
                    path,
                }
            })
            .collect()
    })
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "a panic without a message".into()
    }
}

/// Runs `test` once per node, in parallel, each with a fresh [`Case`].
fn each_node(test: impl Fn(Case) + Sync) {
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes()
            .iter()
            .map(|node| (node, s.spawn(|| test(Case::new(node)))))
            .collect();
        handles
            .into_iter()
            .filter_map(|(node, h)| {
                h.join()
                    .err()
                    .map(|p| format!("on {}:\n{}", node.label(), panic_text(p.as_ref())))
            })
            .collect()
    });
    assert!(
        failures.is_empty(),
        "failed on {} of {} node(s):\n\n{}",
        failures.len(),
        nodes().len(),
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------
// One test on one node: its folder, catalog, secrets and runs
// ---------------------------------------------------------------------------------------

fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:016x}", h.finish())
}

struct Case {
    dir: TempDir,
    node: &'static NodeBin,
    /// In the parent's environment.
    secret: String,
    /// In `<tmp>/secret.txt`.
    file_secret: String,
    config: Option<PathBuf>,
}

impl Case {
    fn new(node: &'static NodeBin) -> Self {
        let dir = tempfile::tempdir().expect("create a temporary folder");
        let case = Case {
            dir,
            node,
            secret: format!("s3cr3t-{}", random_hex()),
            file_secret: format!("file-s3cr3t-{}", random_hex()),
            config: None,
        };
        let catalog =
            fs::read_to_string(fixture("sandbox/catalog.json")).expect("read the catalog");
        case.write("catalog.json", catalog.replace("@DIR@", case.dir_str()));
        case.write("secret.txt", format!("{}\n", case.file_secret));
        case
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn dir_str(&self) -> &str {
        self.path().to_str().expect("the temporary folder is UTF-8")
    }

    fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path().join(rel);
        fs::write(&path, contents).expect("write a fixture file");
        path
    }

    /// Uses this TOML as `--config`.
    fn with_config(mut self, toml: &str) -> Self {
        self.config = Some(self.write("config.toml", toml));
        self
    }

    /// `@DIR@` and `@SECRET_FILE@` filled in.
    fn fill(&self, body: &str) -> String {
        body.replace("@SECRET_FILE@", &format!("{}/secret.txt", self.dir_str()))
            .replace("@DIR@", self.dir_str())
    }

    /// A hostile body: [`HELPERS`] then `body`, filled in.
    fn hostile(&self, body: &str) -> String {
        self.fill(&format!("{HELPERS}\n{body}"))
    }

    /// An `escaped_*` body: helpers, `outer-realm.js`, then `body`, filled in.
    fn escaped(&self, body: &str) -> String {
        let prelude =
            fs::read_to_string(fixture("sandbox/outer-realm.js")).expect("read outer-realm.js");
        self.fill(&format!("{HELPERS}\n{prelude}\n{body}"))
    }

    /// `toolsearch code BODY --timeout-ms N --json`.
    fn code(&self, body: &str, timeout_ms: u64) -> Run {
        let timeout = timeout_ms.to_string();
        self.toolsearch(&["code", body, "--timeout-ms", &timeout, "--json"])
    }

    /// `toolsearch --state-dir <tmp>/state --catalog <tmp>/catalog.json [--config] ARGS` in
    /// this folder, on this node, with the secret in its environment. Returns within
    /// [`GENEROUS`] or fails; asserts no panic, no death by signal, and no sandbox child left.
    fn toolsearch(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(self.path())
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .env("TOOLSEARCH_NODE", &self.node.path)
            .env(SECRET_VAR, &self.secret)
            .arg("--state-dir")
            .arg(self.path().join("state"))
            .arg("--catalog")
            .arg(self.path().join("catalog.json"));
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let before = sandbox_children();
        let started = Instant::now();
        let mut child = cmd.spawn().expect("start toolsearch");
        let pid = child.id();
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let out = drain(Box::new(child.stdout.take().expect("stdout")));
        let err = drain(Box::new(child.stderr.take().expect("stderr")));
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for toolsearch") {
                break status;
            }
            if started.elapsed() > GENEROUS {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "toolsearch {:?} did not return within {GENEROUS:?}",
                    args.first()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.join().expect("stdout reader")).into_owned();
        let stderr = String::from_utf8_lossy(&err.join().expect("stderr reader")).into_owned();
        let run = Run {
            exit: status.code(),
            signal: status.signal(),
            json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
            stdout,
            stderr,
            elapsed,
        };
        assert!(
            !run.stderr.contains("panicked"),
            "toolsearch panicked:\n{}",
            run.stderr
        );
        assert!(
            run.exit.is_some(),
            "toolsearch was killed by signal {:?}\nstdout:\n{}\nstderr:\n{}",
            run.signal,
            run.stdout,
            run.stderr
        );
        assert_no_child_left(pid, &before);
        if std::env::var_os("TOOLSEARCH_TEST_VERBOSE").is_some() {
            eprintln!(
                "--- {} {:?} (exit {:?}, {:?}):\n{}",
                self.node.label(),
                args.first(),
                run.exit,
                run.elapsed,
                run.stdout
            );
        }
        run
    }

    fn canary(&self) -> Option<String> {
        fs::read_to_string(self.path().join("canary")).ok()
    }

    /// The standard checks after a hostile run (see the module comment).
    fn assert_contained(&self, run: &Run) {
        run.assert_shape();
        for (what, secret) in [
            ("the parent's secret", &self.secret),
            ("the secret file's content", &self.file_secret),
        ] {
            assert!(
                !run.stdout.contains(secret.as_str()) && !run.stderr.contains(secret.as_str()),
                "{what} got out:\n{}\n{}",
                run.stdout,
                run.stderr
            );
        }
        assert!(
            !run.stdout.contains(ESCAPED) && !run.stderr.contains(ESCAPED),
            "a body reports an escape:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
        if let Some(text) = self.canary() {
            panic!(
                "the canary ran, and must not have; it got {text:?}\nstdout:\n{}",
                run.stdout
            );
        }
        for written in ["pwned", "pwned-dir", "pwned-link"] {
            assert!(
                fs::symlink_metadata(self.path().join(written)).is_err(),
                "the body created <tmp>/{written}\n{}",
                run.stdout
            );
        }
    }

    /// A hostile body that reports each attempt: the run succeeds, and every reported line
    /// is `held: ...` (or a `note: ...`).
    fn assert_all_held(&self, run: &Run) {
        self.assert_contained(run);
        assert!(
            run.ok(),
            "the body itself should run to its end\n{}",
            run.stdout
        );
        let lines = run.value().as_array().unwrap_or_else(|| {
            panic!("the body returns a list of attempts: {}", run.stdout);
        });
        assert!(!lines.is_empty(), "no attempt was reported: {}", run.stdout);
        for line in lines {
            let text = line.as_str().unwrap_or_default();
            assert!(
                text.starts_with("held: ") || text.starts_with("note: "),
                "an attempt did not hold: {line}\n{}",
                run.stdout
            );
        }
    }
}

/// What one `toolsearch` run gave.
struct Run {
    exit: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    json: Value,
    elapsed: Duration,
}

impl Run {
    fn ok(&self) -> bool {
        self.json["ok"] == true
    }

    fn value(&self) -> &Value {
        &self.json["value"]
    }

    fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or_default()
    }

    fn logs(&self) -> &[Value] {
        self.json["logs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The documented shape of `code --json`, and exit 0 exactly when `ok`.
    fn assert_shape(&self) {
        let obj = self.json.as_object().unwrap_or_else(|| {
            panic!(
                "stdout is not a JSON object (exit {:?}):\n{}\nstderr:\n{}",
                self.exit, self.stdout, self.stderr
            )
        });
        let ok = obj.get("ok").and_then(Value::as_bool).unwrap_or_else(|| {
            panic!("`ok` is not a boolean: {}", self.stdout);
        });
        assert_eq!(
            self.exit,
            Some(if ok { 0 } else { 1 }),
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        if ok {
            assert!(obj.contains_key("value"), "{}", self.stdout);
        } else {
            let code = self.error_code();
            assert!(
                ERROR_CODES.contains(&code),
                "error code {code:?}: {}",
                self.stdout
            );
            assert!(self.json["error"]["message"].is_string(), "{}", self.stdout);
        }
        for log in self.logs() {
            assert!(
                ["log", "warn", "error"].contains(&log["level"].as_str().unwrap_or_default()),
                "log level: {log}"
            );
            assert!(log["text"].is_string(), "log text: {log}");
        }
        let t = &self.json["telemetry"];
        for key in [
            "catalog_size",
            "search_count",
            "describe_count",
            "call_count",
        ] {
            assert!(t[key].is_u64(), "telemetry.{key}: {}", self.stdout);
        }
        assert!(
            t["sources"].is_object(),
            "telemetry.sources: {}",
            self.stdout
        );
    }

    fn assert_error(&self, codes: &[&str]) {
        assert!(
            !self.ok() && codes.contains(&self.error_code()),
            "expected an error among {codes:?}, got:\n{}",
            self.stdout
        );
    }
}

// ---------------------------------------------------------------------------------------
// Sandbox children in /proc
// ---------------------------------------------------------------------------------------

/// Live (not zombie) processes whose command line has a runtime marker, with their cwd.
fn sandbox_children() -> HashSet<(u32, String)> {
    let mut found = HashSet::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if !CHILD_MARKERS.iter().any(|m| cmdline.contains(m)) {
            continue;
        }
        // The toolsearch parents have bodies on their command lines too.
        let argv0 = cmdline.split('\0').next().unwrap_or_default();
        if argv0.ends_with("toolsearch") {
            continue;
        }
        let state = fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("State:"))
                    .map(|l| l.trim_start_matches("State:").trim().to_string())
            })
            .unwrap_or_default();
        if state.is_empty() || state.starts_with('Z') || state.starts_with('X') {
            continue;
        }
        let cwd = fs::read_link(format!("/proc/{pid}/cwd"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        found.insert((pid, cwd));
    }
    found
}

/// No sandbox child of the toolsearch process `parent` is alive (polls up to 3 s). A
/// child is recognized by its marker and its working folder, which the parent names after
/// its own pid; one whose folder cannot be read counts if it was not there before.
fn assert_no_child_left(parent: u32, before: &HashSet<(u32, String)>) {
    let prefix = format!("toolsearch-sandbox-{parent}-");
    let before: HashSet<u32> = before.iter().map(|(pid, _)| *pid).collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<(u32, String)> = sandbox_children()
            .into_iter()
            .filter(|(pid, cwd)| {
                if cwd.is_empty() {
                    !before.contains(pid)
                } else {
                    cwd.contains(&prefix)
                }
            })
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            panic!("sandbox children of toolsearch {parent} are still alive: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------
// Listeners and a victim process
// ---------------------------------------------------------------------------------------

/// A TCP listener and a UDP socket on 127.0.0.1, a Unix socket in the folder and an
/// abstract Unix socket, each recording whether anything arrived. Checked from the test
/// first (positive control), then reset.
struct Listeners {
    tcp: u16,
    udp: u16,
    unix: PathBuf,
    abstract_name: String,
    seen: Arc<[AtomicBool; 4]>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

const KINDS: [&str; 4] = ["tcp", "udp", "unix", "abstract unix"];

impl Listeners {
    fn start(dir: &Path) -> Self {
        let seen: Arc<[AtomicBool; 4]> = Arc::new(Default::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind TCP");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
        let unix_path = dir.join("listener.sock");
        let unix = UnixListener::bind(&unix_path).expect("bind a Unix socket");
        let abstract_name = format!("toolsearch-escape-{}", random_hex());
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("abstract");
        let abstract_sock = UnixListener::bind_addr(&addr).expect("bind an abstract socket");
        let ports = (
            tcp.local_addr().expect("tcp addr").port(),
            udp.local_addr().expect("udp addr").port(),
        );
        tcp.set_nonblocking(true).expect("nonblocking");
        unix.set_nonblocking(true).expect("nonblocking");
        abstract_sock.set_nonblocking(true).expect("nonblocking");
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("read timeout");
        let mut threads = Vec::new();
        let watch = |i: usize, accept: Box<dyn Fn() -> bool + Send>| {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if accept() {
                        seen[i].store(true, Ordering::SeqCst);
                    } else {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        };
        threads.push(watch(0, Box::new(move || tcp.accept().is_ok())));
        threads.push(watch(
            1,
            Box::new(move || udp.recv_from(&mut [0u8; 256]).is_ok()),
        ));
        threads.push(watch(2, Box::new(move || unix.accept().is_ok())));
        threads.push(watch(3, Box::new(move || abstract_sock.accept().is_ok())));
        let listeners = Listeners {
            tcp: ports.0,
            udp: ports.1,
            unix: unix_path,
            abstract_name,
            seen,
            stop,
            threads,
        };
        listeners.positive_control();
        listeners
    }

    /// Each listener does see a connection from the test itself.
    fn positive_control(&self) {
        let _tcp = TcpStream::connect(("127.0.0.1", self.tcp)).expect("connect TCP");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
        let _unix = UnixStream::connect(&self.unix).expect("connect Unix");
        let addr = SocketAddr::from_abstract_name(self.abstract_name.as_bytes()).expect("addr");
        let _abstract = UnixStream::connect_addr(&addr).expect("connect abstract");
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.arrived().len() < KINDS.len() && Instant::now() < deadline {
            let _ = udp.send_to(b"control", ("127.0.0.1", self.udp));
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            self.arrived(),
            KINDS.to_vec(),
            "the listeners must see the test's own connections"
        );
        for s in self.seen.iter() {
            s.store(false, Ordering::SeqCst);
        }
    }

    fn arrived(&self) -> Vec<&'static str> {
        KINDS
            .iter()
            .zip(self.seen.iter())
            .filter(|(_, s)| s.load(Ordering::SeqCst))
            .map(|(k, _)| *k)
            .collect()
    }

    fn fill(&self, body: &str) -> String {
        body.replace("@TCP@", &self.tcp.to_string())
            .replace("@UDP@", &self.udp.to_string())
            .replace("@UNIX@", self.unix.to_str().expect("UTF-8 path"))
            .replace("@ABSTRACT@", &self.abstract_name)
    }

    fn assert_nothing_arrived(&self, run: &Run) {
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            self.arrived().is_empty(),
            "the listeners received something from the body: {:?}\n{}",
            self.arrived(),
            run.stdout
        );
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A process the body tries to kill: `sleep`, in its own process group.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Self {
        let child = Command::new("sleep")
            .arg("60")
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()
            .expect("start sleep");
        Victim(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn assert_alive(&mut self) {
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            self.0.try_wait().expect("wait").is_none(),
            "the victim process was killed by the body"
        );
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Test shapes
// ---------------------------------------------------------------------------------------

/// Runs a hostile body (helpers first) on every node; every attempt must hold.
fn all_held(body: &str) {
    each_node(|case| {
        let run = case.code(&case.hostile(body), RUN_MS);
        case.assert_all_held(&run);
    });
}

/// Runs an escaped body (helpers and outer-realm.js first) on every node; every attempt
/// must hold.
fn all_held_escaped(body: &str) {
    each_node(|case| {
        let run = case.code(&case.escaped(body), RUN_MS);
        case.assert_all_held(&run);
    });
}

/// A body expected to time out: `timeout` within the generous bound, not before the
/// deadline, contained, no child left (checked by every run).
fn times_out(body: &str) {
    each_node(|case| {
        let run = case.code(body, TIMEOUT_MS);
        case.assert_contained(&run);
        run.assert_error(&["timeout"]);
        assert!(
            run.elapsed >= Duration::from_millis(TIMEOUT_MS - 100),
            "timed out early: {:?}",
            run.elapsed
        );
    });
}

// ---------------------------------------------------------------------------------------
// 1. Positive controls: the checks can fail
// ---------------------------------------------------------------------------------------

#[test]
fn control_an_awaited_call_runs_the_canary() {
    each_node(|case| {
        let run = case.code(
            "const r = await openclaw.tools.call('canary', {from: 'control'}); return r.result.content[0].text",
            RUN_MS,
        );
        run.assert_shape();
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value(), "ran\n", "{}", run.stdout);
        assert_eq!(case.canary().as_deref(), Some(r#"{"from":"control"}"#));
        assert!(!run.stdout.contains(&case.secret));
    });
}

#[test]
fn control_search_describe_and_a_fixture_call_work() {
    each_node(|case| {
        let run = case.code(
            "const hits = await openclaw.tools.search('canary tool', {limit: 5});\n\
             const d = await openclaw.tools.describe(hits[0].id);\n\
             const e = await openclaw.tools.call('echo', {x: 1});\n\
             console.log('found', hits.length);\n\
             return [hits[0].name, d.name, e.result.content[0].text]",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value()[0], "canary");
        assert_eq!(run.value()[1], "canary");
        assert!(
            run.value()[2]
                .as_str()
                .unwrap_or_default()
                .starts_with("echo")
        );
        assert_eq!(run.logs().len(), 1);
        assert_eq!(run.json["telemetry"]["search_count"], 1);
        assert_eq!(run.json["telemetry"]["describe_count"], 1);
        assert_eq!(run.json["telemetry"]["call_count"], 1);
    });
}

/// A search's `limit` is what `tool_search`'s schema says, a whole number of at least 1;
/// anything else is refused by name (1.5, -1 and 1e308 fell back to the default limit
/// without a word: sandbox round 35).
#[test]
fn a_search_limit_is_a_whole_number_of_at_least_one() {
    each_node(|case| {
        let run = case.code(
            "const out = [];\n\
             for (const limit of [1.5, -1, 0, 1e308, 'x', true]) {\n\
               try { await openclaw.tools.search('canary', {limit}); out.push('searched'); }\n\
               catch (e) { out.push(e.code + (e.message.includes('whole number') ? '' : ': ' + e.message)); }\n\
             }\n\
             out.push((await openclaw.tools.search('canary tool', {limit: 1})).length);\n\
             return out",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        let mut expected = vec![json!("invalid-request"); 6];
        expected.push(json!(1));
        assert_eq!(run.value(), &json!(expected), "{}", run.stdout);
    });
}

#[test]
fn control_the_marker_and_the_secret_checks_can_fail() {
    // A body that prints the marker is caught by assert_contained...
    each_node(|case| {
        let run = case.code(&case.hostile("return ESCAPED('on purpose')"), RUN_MS);
        let caught =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case.assert_contained(&run)));
        assert!(caught.is_err(), "assert_contained missed the marker");
        // ...and so are the secrets, were a body to return one.
        for secret in [&case.secret, &case.file_secret] {
            let fake = Run {
                stdout: format!("{{\"ok\":true,\"value\":\"{secret}\"}}"),
                stderr: String::new(),
                json: run.json.clone(),
                exit: run.exit,
                signal: None,
                elapsed: run.elapsed,
            };
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                case.assert_contained(&fake)
            }));
            assert!(caught.is_err(), "assert_contained missed a secret");
        }
    });
}

#[test]
fn control_the_leftover_check_sees_a_live_child() {
    each_node(|case| {
        // While a run spins, its child is found by the same scan that checks for leftovers.
        let mut child = Command::new(BIN)
            .current_dir(case.path())
            .env_remove("RUST_LOG")
            .env("TOOLSEARCH_NODE", &case.node.path)
            .arg("--state-dir")
            .arg(case.path().join("state"))
            .arg("--catalog")
            .arg(case.path().join("catalog.json"))
            .args(["code", "for(;;){}", "--timeout-ms", "1500", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start toolsearch");
        let prefix = format!("toolsearch-sandbox-{}-", child.id());
        let deadline = Instant::now() + GENEROUS;
        let mut seen = false;
        while !seen && Instant::now() < deadline {
            seen = sandbox_children()
                .iter()
                .any(|(_, cwd)| cwd.contains(&prefix));
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = child.wait().expect("wait");
        assert!(seen, "the scan never saw the running child ({status})");
        assert_no_child_left(child.id(), &HashSet::new());
    });
}

// ---------------------------------------------------------------------------------------
// 2. The vm context: no way to the outer realm
// ---------------------------------------------------------------------------------------

#[test]
fn vm_require_module_and_process_are_not_reachable() {
    all_held(
        r#"
return [
  await tryIt('require', () => require('fs').readFileSync('@SECRET_FILE@', 'utf8')),
  await tryIt('globalThis.require', () => globalThis.require('fs').readFileSync('@SECRET_FILE@', 'utf8')),
  await tryIt('module.require', () => module.require('fs').readFileSync('@SECRET_FILE@', 'utf8')),
  await tryIt('process.mainModule', () => process.mainModule.require('fs')),
  await tryIt('process.binding', () => process.binding('fs')),
  await tryIt('process.getBuiltinModule', () => process.getBuiltinModule('fs')),
  await tryIt('globalThis.process', () => needProcess(globalThis.process)),
  await tryIt('global.process', () => needProcess(global.process)),
  await tryIt('this.process', () => needProcess(this.process)),
  await tryIt('with (globalThis) process', () => { with (globalThis) { return needProcess(process); } }),
  await tryIt('Buffer', () => Buffer.from('x')),
  await tryIt('__filename', () => __filename),
];
"#,
    );
}

/// The outer-realm family: every trigger of a callback V8 or Node runs on the guest's behalf
/// (`.stack`, a V8 TypeError's `.stack`, `Error.captureStackTrace`, `import()`, an error's
/// `toString`, an unhandled rejection, `console.log` of an error, a bridge call), fired at
/// every depth near stack exhaustion, in `mode`; no outer-realm object may come back.
fn outer_realm_family(mode: &str) {
    let kit = fs::read_to_string(fixture("sandbox/realm-kit.js")).expect("read realm-kit.js");
    let triggers = "['stack', 'typeErrorStack', 'capture', 'import', 'toStringOfError', 'rejectUnhandled', 'logAnError', 'bridgeCall']";
    let body = format!("const TRIGGERS = {triggers};\nconst MODE = '{mode}';\n{kit}");
    each_node(|case| {
        let run = case.code(&case.hostile(&body), 60_000);
        case.assert_all_held(&run);
    });
}

#[test]
fn vm_outer_realm_family_sync() {
    outer_realm_family("sync");
}

#[test]
fn vm_outer_realm_family_after_await() {
    outer_realm_family("await");
}

#[test]
fn vm_outer_realm_family_in_a_promise_chain() {
    outer_realm_family("chain");
}

#[test]
fn vm_accessors_on_the_global_see_only_the_guest_realm() {
    // A getter or setter on the guest's global, read or written by the guest or by anything
    // outside on its behalf (Node read `Error` from the guest's global to format stacks),
    // must only ever receive the guest's own global as `this`.
    all_held(
        r#"
const seen = [];
const note = (self) => { if (self !== globalThis && self !== undefined) seen.push(self); };
for (const name of ['Error', 'x', 'openclawX', 'RangeError', 'Promise']) {
  let stored;
  try {
    Object.defineProperty(globalThis, name, { get() { note(this); return stored; }, set(v) { note(this); stored = v; }, configurable: true });
  } catch (e) {}
}
try { globalThis.x = 1; } catch (e) {}
try { x = 2; } catch (e) {}
try { new TypeError('t').stack; } catch (e) {}
try { null.y; } catch (e) { e.stack; }
try { await import('fs'); } catch (e) {}
await openclaw.tools.describe('no-such-tool').catch(() => {});
const out = ['note: ' + seen.length + ' foreign receivers'];
for (const self of seen.slice(0, 3)) out.push(await tryIt('a foreign receiver .constructor.constructor', () => needProcess(self.constructor.constructor('return process')())));
if (seen.length > 0) out.push(ESCAPED('a getter or setter of the global saw another object as this'));
return out;
"#,
    );
}

/// Host calls made at every depth near stack exhaustion are all or nothing: a call the
/// guest was told failed never ran (no "ghost" side effect a model would retry), and every
/// call that ran is one the guest saw succeed.
#[test]
fn vm_host_calls_at_the_stack_edge_are_all_or_nothing() {
    each_node(|case| {
        let body = r#"
function deep(n, k) { if (n > 0) return deep(n - 1, k) + 1;
  openclaw.tools.call('echo', {text: 'k' + k}).then(() => res.ok.push(k), (e) => res.err.push(e.message));
  console.log('k' + k); return 0; }
function probe(n) { try { return probe(n + 1); } catch (e) { return n; } }
const max = probe(0);
const res = { ok: [], err: [] };
let tries = 0;
for (let k = 100; k < 4000 && tries < 50; k += 1) { try { deep(max - k, k); tries++; } catch (e) {} }
for (let j = 0; j < 5; j++) { for (let i = 0; i < 200; i++) await null; await openclaw.tools.search('x'); }
return { ok: res.ok.length, err: res.err.filter((m) => !/stack|too deep/.test(m)) };
"#;
        let run = case.code(body, RUN_MS);
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        let ran = run.json["telemetry"]["call_count"].as_u64().unwrap_or(0);
        assert_eq!(
            run.value()["ok"].as_u64(),
            Some(ran),
            "calls that ran vs calls the guest saw succeed: {}",
            run.stdout
        );
        assert_eq!(run.value()["err"], serde_json::json!([]), "{}", run.stdout);
        assert!(ran > 0, "{}", run.stdout);
    });
}

/// However the guest shapes its error (a message quoting the stack's own pattern, a
/// replaced `RegExp.prototype.exec`, a throwing `Symbol.hasInstance` or `message` getter),
/// the run ends as `code-error` with a sane line, or returns: never `protocol` or `timeout`.
#[test]
fn vm_the_guest_cannot_choose_how_its_result_is_read() {
    each_node(|case| {
        for (body, want) in [
            (
                "throw new Error('failed at tool_search_code.js:99999999999999999999')",
                "code-error",
            ),
            (
                "RegExp.prototype.exec = () => [0, '1.5']; throw new Error('x')",
                "code-error",
            ),
            (
                "Object.defineProperty(Error, Symbol.hasInstance, {value() { throw 1; }}); throw new Error('x')",
                "code-error",
            ),
            (
                "Object.defineProperty(Error, Symbol.hasInstance, {value() { throw 1; }}); return new Error('e')",
                "ok",
            ),
            (
                "const e = new Error('x'); Object.defineProperty(e, 'message', {get() { throw 2; }}); throw e",
                "code-error",
            ),
            (
                "throw new Proxy({}, {get() { throw 3; }, getPrototypeOf() { throw 4; }})",
                "code-error",
            ),
            ("return {toJSON() { throw 5; }}", "code-error"),
        ] {
            let run = case.code(body, RUN_MS);
            case.assert_contained(&run);
            if want == "ok" {
                assert!(run.ok(), "{body}: {}", run.stdout);
            } else {
                run.assert_error(&[want]);
                let message = run.json["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    !message.contains("99999999999999999999)") || message.ends_with("(line 1)"),
                    "{body}: {message}"
                );
            }
        }
    });
}

/// The child's bounds hold on the text it sends, not on the guest's: Node 24's
/// `JSON.rawJSON('1e20')` is 4 bytes in the guest's JSON and 21 once the outer side writes
/// it again, so 60 KB of arguments went out as a 264 KB frame and 950 KB of result as
/// 2.3 MB, and the parent ended both runs as `protocol` (review 23 F1). The call is now
/// refused to the guest, and the result is `output-too-large`. (Node 20 has no `rawJSON`:
/// both bodies say so and pass.)
#[test]
fn vm_bounds_are_checked_on_the_text_that_is_sent() {
    each_node(|case| {
        let call = r#"
            if (typeof JSON.rawJSON !== 'function') return 'refused: no rawJSON';
            const big = Array(12000).fill(JSON.rawJSON('1e20'));
            try {
                await openclaw.tools.call('anything', {big});
                return 'sent';
            } catch (e) {
                return 'refused: ' + e.message;
            }
        "#;
        let run = case.code(call, RUN_MS);
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        let value = run.json["value"].as_str().unwrap_or_default();
        assert!(value.starts_with("refused: "), "{}", run.stdout);

        let result = r#"
            if (typeof JSON.rawJSON !== 'function') throw new Error('no rawJSON');
            return Array(190000).fill(JSON.rawJSON('1e20'));
        "#;
        let run = case.code(result, RUN_MS);
        case.assert_contained(&run);
        if run.stdout.contains("no rawJSON") {
            run.assert_error(&["code-error"]);
        } else {
            run.assert_error(&["output-too-large"]);
        }
    });
}

/// Node's promise-rejection tracking is not run on the guest's promises: with a Proxy in
/// the guest's `Promise.prototype` chain that answers Node's async-id symbol with junk, the
/// child used to crash ("async hook stack has become corrupted", with host paths in the
/// error). Node's C++ side still reads that symbol on a rejected promise; whatever it hands
/// the trap must be of the guest's realm (or a primitive), and the run must end normally.
#[test]
fn vm_node_s_rejection_tracking_neither_crashes_the_child_nor_hands_out_outer_objects() {
    all_held(
        r#"
const ObjProto = Object.prototype;
const outer = (x) => { if (x === null || (typeof x !== 'object' && typeof x !== 'function')) return false;
  let p = x, last = null; while ((p = Object.getPrototypeOf(p)) !== null) last = p; return last !== null && last !== ObjProto; };
const seen = [];
const base = Object.getPrototypeOf(Promise.prototype);
Object.setPrototypeOf(Promise.prototype, new Proxy(base, { get(t, k, r) {
  if (typeof k === 'symbol' && String(k).includes('async_id')) {
    if (outer(t) || outer(r)) seen.push(r);
    return { valueOf() { return 7; } };
  }
  return Reflect.get(t, k, r);
} }));
Promise.reject(1);
new Promise((_, reject) => reject(new Error('late'))).then(() => {});
for (let i = 0; i < 5; i++) await null;
await openclaw.tools.search('x');
const out = ['note: the run went on to its end'];
out.push(seen.length === 0 ? 'held: nothing of another realm reached the trap' : await tryIt('an outer receiver', () => needProcess(seen[0].constructor.constructor('return process')())));
return out;
"#,
    );
}

/// A console line written deep in the stack just before a loop that never yields is still
/// delivered when the run times out.
#[test]
fn vm_a_log_written_deep_before_a_busy_loop_survives_the_timeout() {
    each_node(|case| {
        let body = "function walk(n) { if (n === 0) { console.log('reached the leaf'); return 0; } return 1 + walk(n - 1); }\n\
                    walk(2000); for (;;) {}";
        let run = case.code(body, TIMEOUT_MS);
        case.assert_contained(&run);
        run.assert_error(&["timeout"]);
        assert_eq!(run.logs().len(), 1, "{}", run.stdout);
    });
}

/// A throw from a guest callback that no await of the body is under (a FinalizationRegistry
/// cleanup) ends the run as the guest's `code-error`, with its logs, and a message that
/// names where it came from (it said "an uncaught exception", which read as the runtime's
/// own failure). Allocation, not time, brings the collection, so a loaded machine only
/// takes longer.
#[test]
fn a_throw_from_a_finalization_cleanup_is_the_guest_s_code_error() {
    each_node(|case| {
        let body = "const r = new FinalizationRegistry(() => { throw new Error('from the cleanup'); });\n\
                    (function () { r.register({}, 1); })();\n\
                    console.log('registered');\n\
                    const junk = [];\n\
                    for (let i = 0; i < 5000; i++) { junk.push(new Array(100000).fill(i)); if (junk.length > 4) junk.shift(); await openclaw.tools.search('x'); }\n\
                    return 'never collected'";
        let run = case.code(body, 20_000);
        case.assert_contained(&run);
        run.assert_error(&["code-error"]);
        assert!(
            run.stdout.contains("FinalizationRegistry cleanup"),
            "{}",
            run.stdout
        );
        assert_eq!(run.logs().len(), 1, "{}", run.stdout);
    });
}

/// A body whose helper threads (V8's GC) burn CPU faster than the clock runs to its end:
/// the CPU rlimit is a backstop far above the deadline, not a second, tighter deadline.
#[test]
fn a_gc_heavy_body_is_not_killed_before_its_deadline() {
    each_node(|case| {
        let body = "const live = []; for (let i = 0; i < 200000; i++) live.push({i, s: 'v' + i});\n\
                    const until = Date.now() + 2500; let n = 0;\n\
                    while (Date.now() < until) { live[(n * 7919) % live.length] = {n, s: 'w' + n}; n++; }\n\
                    return n > 0";
        let run = case.code(body, 5_000);
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
    });
}

/// Stacks show only the guest's own frames, however the guest makes formatting re-enter
/// (a stack read from a getter that the formatter would call lists every frame: the
/// runtime's, Node's, and the paths of this host's files).
#[test]
fn vm_stacks_show_only_guest_frames_even_when_formatting_re_enters() {
    each_node(|case| {
        let body = r#"
Error.stackTraceLimit = 50;
const stacks = [];
const nested = () => new Error('inner').stack;
const a = new Error('a'); Object.defineProperty(a, 'name', { get: nested }); stacks.push(a.stack);
const b = new Error('b'); Object.defineProperty(b, 'message', { get: nested }); stacks.push(b.stack);
Object.defineProperty(Error.prototype, 'name', { get: nested, configurable: true });
stacks.push(new Error('c').stack);
Error.prototype.toString = function () { return nested(); };
stacks.push(new TypeError('d').stack);
const e = new Error('e'); Object.setPrototypeOf(e, new Proxy({}, { get: nested, getOwnPropertyDescriptor: nested, getPrototypeOf: nested }));
stacks.push(e.stack);
try { null.x; } catch (x) { stacks.push(x.stack); }
// An accessor's descriptor has no own `value`: reading one would run this getter.
Object.defineProperty(Object.prototype, 'value', { get: nested, configurable: true });
const f = new Error('f'); Object.defineProperty(f, 'message', { __proto__: null, get: () => 'm' });
stacks.push(f.stack);
delete Object.prototype.value;
return stacks.map(String);
"#;
        let run = case.code(body, RUN_MS);
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        for stack in run.value().as_array().expect("a list of stacks") {
            let text = stack.as_str().unwrap_or_default();
            for line in text.lines().skip(1) {
                assert!(
                    line.contains("(tool_search_code.js:")
                        || line.trim_start().starts_with("at tool_search_code.js:"),
                    "a frame that is not the guest's: {line}\n{text}"
                );
            }
            assert!(
                !text.contains("bootstrap.js")
                    && !text.contains("node:")
                    && !text.contains(".cache"),
                "{text}"
            );
        }
    });
}

#[test]
fn vm_dynamic_import_is_refused() {
    all_held(
        r#"
return [
  await tryIt('import fs', async () => (await import('fs')).readFileSync('@SECRET_FILE@', 'utf8')),
  await tryIt('import node:child_process', async () => (await import('node:child_process')).execSync("echo x >> '@DIR@/canary'")),
  await tryIt('import a data: URL', async () => (await import('data:text/javascript,export default 42')).default),
  await tryIt('import a file', async () => (await import('file://@SECRET_FILE@')).default),
];
"#,
    );
}

#[test]
fn vm_constructor_chain_on_the_import_rejection() {
    all_held(
        r#"
try {
  await import('fs');
  return [ESCAPED('import() resolved')];
} catch (e) {
  return [await tryIt('the import() rejection .constructor.constructor', () => needProcess(e.constructor.constructor('return process')()))];
}
"#,
    );
}

#[test]
fn vm_stack_overflow_into_the_host_through_a_bridge_call() {
    all_held(
        r#"
const foreign = [];
const note = (e) => { if (e !== null && typeof e === 'object' && !(e instanceof Error)) foreign.push(e); };
const pending = [];
const deep = (d) => {
  try { deep(d + 1); } catch (e) {}
  try { pending.push(openclaw.tools.describe('no-such-tool').then(() => {}, note)); } catch (e) { note(e); }
};
deep(0);
for (const p of pending) { try { await p; } catch (e) { note(e); } }
const out = ['note: ' + foreign.length + ' errors of another realm'];
for (const e of foreign.slice(0, 3)) out.push(await tryIt('a foreign ' + e.name + '.constructor.constructor', () => needProcess(e.constructor.constructor('return process')())));
return out;
"#,
    );
}

#[test]
fn vm_stack_overflow_into_the_host_through_console_log() {
    // Unwinding frees one frame per level; frames of different sizes move the point where
    // the stack runs out across hostCall's entry. Only a first sweep works: once hostCall is
    // optimized the window is gone, so each shape runs in its own child.
    let shapes = [
        ("", "(d) => { try { sweep(d + 1); } catch (e) {}"),
        ("await null;", "(d) => { try { sweep(d + 1); } catch (e) {}"),
        ("", "(d, a) => { try { sweep(d + 1, a); } catch (e) {}"),
        (
            "await null;",
            "(d, a) => { try { sweep(d + 1, a); } catch (e) {}",
        ),
        (
            "",
            "(d, a, b) => { try { sweep(d + 1, a, b); } catch (e) {}",
        ),
        (
            "await null;",
            "(d, a, b) => { try { sweep(d + 1, a, b); } catch (e) {}",
        ),
    ];
    each_node(|case| {
        for (before, head) in shapes {
            let body = format!(
                r#"{before}
const foreign = [];
const sweep = {head} try {{ console.log('x'); }} catch (e) {{ if (e !== null && typeof e === 'object' && !(e instanceof Error)) foreign.push(e); }} }};
sweep(0);
const out = ['note: ' + foreign.length + ' errors of another realm'];
for (const e of foreign.slice(0, 3)) out.push(await tryIt('a foreign ' + e.name + '.constructor.constructor', () => needProcess(e.constructor.constructor('return process')())));
return out;
"#
            );
            let run = case.code(&case.hostile(&body), RUN_MS);
            case.assert_all_held(&run);
        }
    });
}

#[test]
fn vm_constructor_chains_on_this_and_the_global() {
    all_held(
        r#"
return [
  ...await chains('this', this),
  ...await chains('globalThis', globalThis),
  ...await chains('globalThis.__proto__', globalThis.__proto__),
  await tryIt('this.constructor.constructor', () => needProcess(this.constructor.constructor('return process')())),
  await tryIt('globalThis.__proto__.constructor.constructor', () => needProcess(globalThis.__proto__.constructor.constructor('return process')())),
];
"#,
    );
}

#[test]
fn vm_constructor_chains_on_openclaw() {
    all_held(
        r#"
const lazy = openclaw.tools.search('canary');
return [
  ...await chains('openclaw', openclaw),
  ...await chains('openclaw.tools', openclaw.tools),
  ...await chains('openclaw.tools.search', openclaw.tools.search),
  ...await chains('openclaw.tools.describe', openclaw.tools.describe),
  ...await chains('openclaw.tools.call', openclaw.tools.call),
  ...await chains('an unawaited search', lazy),
  ...await chains('its then', lazy.then),
  ...await chains('its catch', lazy.catch),
  ...await chains('what then() returns', lazy.then(() => {})),
  await tryIt('openclaw.tools.search.caller', () => { const c = openclaw.tools.search.caller; if (!c) throw new Error('no caller'); return c; }),
  await tryIt('openclaw.tools.search.arguments', () => { const a = openclaw.tools.search.arguments; if (!a) throw new Error('no arguments'); return a; }),
];
"#,
    );
}

#[test]
fn vm_constructor_chains_on_bridge_results() {
    all_held(
        r#"
const hits = await openclaw.tools.search('canary');
const d = await openclaw.tools.describe('echo');
const r = await openclaw.tools.call('echo', {x: 1});
return [
  ...await chains('a search result', hits),
  ...await chains('a search hit', hits[0]),
  ...await chains('a descriptor', d),
  ...await chains('a descriptor schema', d.input_schema || d.input || {}),
  ...await chains('a call result', r),
  ...await chains('its content', r.result.content),
];
"#,
    );
}

#[test]
fn vm_constructor_chains_on_bridge_errors() {
    all_held(
        r#"
const errors = [];
const grab = async (label, p) => { try { await p; errors.push([label + ' (resolved)', null]); } catch (e) { errors.push([label, e]); } };
await grab('describe of an unknown id', openclaw.tools.describe('no-such-tool'));
await grab('call of an unknown id', openclaw.tools.call('no-such-tool', {}));
await grab('search with a number', openclaw.tools.search(42));
await grab('a BigInt argument', openclaw.tools.call('echo', {n: 1n}));
await grab('arguments over the size limit', openclaw.tools.call('echo', {x: 'x'.repeat(70000)}));
await grab('invalid arguments', openclaw.tools.call('echo', 'not an object'));
await openclaw.tools.search('x').catch((e) => errors.push(['catch()', e]));
const out = [];
for (const [label, e] of errors) {
  if (e === null) { out.push('note: ' + label); continue; }
  out.push(...await chains(label, e));
  if (e && typeof e === 'object' && e.stack) out.push(...await chains(label + ' .stack', e.stack));
}
return out;
"#,
    );
}

#[test]
fn vm_constructor_chains_on_console() {
    all_held(
        r#"
return [
  ...await chains('console', console),
  ...await chains('console.log', console.log),
  ...await chains('console.error', console.error),
  ...await chains('what console.log returns', console.log('x')),
  await tryIt('console._stdout', () => { const s = console._stdout; if (!s) throw new Error('no _stdout'); return s; }),
  await tryIt('console.log.caller', () => { const c = console.log.caller; if (!c) throw new Error('no caller'); return c; }),
];
"#,
    );
}

#[test]
fn vm_constructor_chains_on_promises_and_function_kinds() {
    all_held(
        r#"
const F = [
  ['a promise', Promise.resolve(1)],
  ['Promise', Promise],
  ['an async arrow', async () => {}],
  ['an async function', async function f() {}],
  ['a generator', function* g() {}],
  ['an async generator', async function* ag() {}],
  ['a class', class K {}],
  ['a bound function', function () {}.bind(null)],
  ['a thrown TypeError', (() => { try { null.x; } catch (e) { return e; } })()],
  ['an inner stack overflow', (() => { const r = () => r(); try { r(); } catch (e) { return e; } })()],
  ['a JSON.parse error', (() => { try { JSON.parse('{'); } catch (e) { return e; } })()],
  ['the EvalError of eval', (() => { try { eval('1'); } catch (e) { return e; } })()],
];
const out = [];
for (const [label, x] of F) out.push(...await chains(label, x));
out.push(await tryIt('(async()=>{}).constructor', () => needProcess((async () => {}).constructor('return process')())));
return out;
"#,
    );
}

#[test]
fn vm_function_and_eval_cannot_compile_strings() {
    all_held(
        r#"
return [
  await tryIt('eval', () => needProcess(eval('process'))),
  await tryIt('indirect eval', () => needProcess((0, eval)('globalThis.process'))),
  await tryIt('Function', () => needProcess(Function('return process')())),
  await tryIt('new Function', () => needProcess(new Function('return process')())),
  await tryIt('Reflect.construct(Function)', () => needProcess(Reflect.construct(Function, ['return process'])())),
  await tryIt('Function.prototype.constructor', () => needProcess(Function.prototype.constructor('return process')())),
  await tryIt('AsyncFunction', async () => needProcess(await (async () => {}).constructor('return process')())),
  await tryIt('GeneratorFunction', () => needProcess((function* () {}).constructor('yield process')().next().value)),
  await tryIt('Function.apply', () => needProcess(Function.apply(null, ['return process'])())),
  await tryIt('eval of a harmless string', () => eval('1 + 1')),
];
"#,
    );
}

#[test]
fn vm_webassembly_cannot_compile() {
    all_held(
        r#"
const empty = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]);
return [
  await tryIt('WebAssembly.compile', () => WebAssembly.compile(empty)),
  await tryIt('new WebAssembly.Module', () => new WebAssembly.Module(empty)),
  await tryIt('WebAssembly.instantiate', () => WebAssembly.instantiate(empty)),
  await tryIt('WebAssembly.compileStreaming', () => WebAssembly.compileStreaming(empty)),
  ...await chains('WebAssembly', WebAssembly),
  ...await chains('WebAssembly.compile', WebAssembly.compile),
];
"#,
    );
}

#[test]
fn vm_reflect_and_proxy_tricks() {
    all_held(
        r#"
// Everything handed to a trap or reached through `caller` is collected, then tried.
const seen = [];
const keep = (x) => { if (x !== null && x !== undefined && (typeof x === 'object' || typeof x === 'function')) seen.push(x); };
function trap(target, key, receiver) { keep(trap.caller); keep(receiver); keep(target); return Reflect.get(target, key, receiver); }
const handler = {
  get: trap,
  getPrototypeOf: function gp(t) { keep(gp.caller); return Reflect.getPrototypeOf(t); },
  ownKeys: function ok(t) { keep(ok.caller); return Reflect.ownKeys(t); },
  getOwnPropertyDescriptor: function gd(t, k) { keep(gd.caller); return Reflect.getOwnPropertyDescriptor(t, k); },
  has: function has(t, k) { keep(has.caller); return Reflect.has(t, k); },
  apply: function ap(t, self, args) { keep(self); args.forEach(keep); keep(ap.caller); return Reflect.apply(t, self, args); },
};
await openclaw.tools.search('canary', new Proxy({limit: 2}, handler));
await openclaw.tools.call('echo', new Proxy({x: 1, nested: new Proxy({y: 2}, handler)}, handler));
console.log(new Proxy({a: 1}, handler), new Proxy(new Error('e'), handler));
await openclaw.tools.search('canary').then(new Proxy(function (v) { return v; }, handler), new Proxy(function (e) { return e; }, handler));
try { await openclaw.tools.describe(new Proxy({}, handler)); } catch (e) { keep(e); }
try { Reflect.apply(openclaw.tools.search, new Proxy({}, handler), ['x']); } catch (e) { keep(e); }
try { Reflect.construct(openclaw.tools.call, ['echo', {}], new Proxy(function () {}, handler)); } catch (e) { keep(e); }
keep(Reflect.getPrototypeOf(openclaw.tools.search));
keep(Reflect.getOwnPropertyDescriptor(globalThis, 'openclaw'));
const out = ['note: ' + seen.length + ' values collected'];
const unique = [...new Set(seen)];
for (const x of unique.slice(0, 40)) out.push(await tryIt('a collected ' + typeof x, () => needProcess(x.constructor.constructor('return process')())));
return out;
"#,
    );
}

#[test]
fn vm_getters_on_object_prototype_catch_nothing_from_outside() {
    all_held(
        r#"
// If any code of the outer realm read these names from an inner object, or an outer object
// inherited from this realm, the getter would see it as `this`.
const seen = [];
const names = ['then', 'catch', 'toJSON', 'message', 'stack', 'code', 'limit', 'resolve', 'reject', 'value', 'ok', 'type', 'id', 'args', 'method', 'items', 'level', 'error', 'line', 'limits', 'length'];
for (const name of names) {
  if (name in Object.prototype) continue;
  Object.defineProperty(Object.prototype, name, {
    __proto__: null,
    configurable: true,
    get() { if (!(this instanceof Object)) seen.push(this); return undefined; },
    // Assignments still create own properties (the bootstrap sets `code` on errors).
    set(v) { Object.defineProperty(this, name, { __proto__: null, value: v, writable: true, enumerable: true, configurable: true }); },
  });
}
try {
  await openclaw.tools.search('canary');
  await openclaw.tools.call('echo', {x: 1});
  try { await openclaw.tools.describe('nope'); } catch (e) {}
  console.log('x', {y: 1});
} finally {
  for (const name of names) { try { delete Object.prototype[name]; } catch (e) {} }
}
const out = ['note: ' + seen.length + ' foreign receivers'];
for (const x of seen.slice(0, 5)) out.push(await tryIt('a foreign receiver', () => needProcess(x.constructor.constructor('return process')())));
return out;
"#,
    );
}

#[test]
fn vm_prepare_stack_trace_call_sites() {
    all_held(
        r#"
// Collects getThis()/getFunction() of every CallSite at several points (in the body, in
// bridge callbacks, inside the bootstrap's JSON.stringify, in a getter the bootstrap reads)
// and tries each.
const found = new Set();
let frames = 0;
let outerFrames = 0;
Error.prepareStackTrace = (err, sites) => {
  for (const s of sites) {
    frames++;
    let fn, self;
    try { fn = s.getFunction(); } catch (e) {}
    try { self = s.getThis(); } catch (e) {}
    const file = String(s.getFileName());
    if (file !== 'tool_search_code.js') outerFrames++;
    if (fn !== undefined && file !== 'tool_search_code.js') found.add(fn);
    if (self !== undefined && self !== null && file !== 'tool_search_code.js') found.add(self);
    if (found.size < 60) for (const x of [sites, s, Object.getPrototypeOf(s)]) found.add(x);
  }
  return 'trace';
};
const grab = () => new Error('x').stack;
grab();
await openclaw.tools.search('canary').then(() => grab());
try { await openclaw.tools.describe('no-such-tool'); } catch (e) { void e.stack; grab(); }
console.log({ toJSON() { grab(); return 1; } });
await openclaw.tools.search('canary', { get limit() { grab(); return 1; } });
await openclaw.tools.call('echo', { get x() { grab(); return 1; } });
const holder = {}; Error.captureStackTrace(holder); void holder.stack;
const out = ['note: ' + frames + ' frames, ' + outerFrames + ' outside the body'];
for (const x of found) out.push(await tryIt('a call-site value (' + typeof x + ')', () => needProcess(x.constructor.constructor('return process')())));
// Frames seen while the bootstrap serializes the return value.
return { toJSON() {
  grab();
  for (const x of found) {
    try { const p = x.constructor.constructor('return process')(); if (p && typeof p.pid === 'number') out.push(ESCAPED('a call site of finish() reached process')); } catch (e) {}
  }
  return out;
} };
"#,
    );
}

#[test]
fn vm_symbol_for_hooks_are_not_called_by_the_outer_realm() {
    all_held(
        r#"
// Symbol.for's registry is shared by all realms: a Node hook the outer realm honours would
// call these with outer-realm arguments.
const calls = [];
const hooks = {};
for (const name of ['nodejs.util.inspect.custom', 'nodejs.util.promisify.custom', 'nodejs.rejection', 'nodejs.stream.destroyed', 'nodejs.webstream.isClosedPromise']) {
  hooks[Symbol.for(name)] = function (...args) { calls.push([name, this, ...args]); return 'hooked'; };
}
hooks.toString = () => 'bait';
console.log(hooks);
console.error('%o', hooks);
await openclaw.tools.search('canary', hooks).catch(() => {});
await openclaw.tools.call('echo', hooks).catch(() => {});
try { await openclaw.tools.describe(hooks); } catch (e) {}
const out = ['note: the hooks were called ' + calls.length + ' times'];
for (const [name, ...args] of calls) {
  out.push(ESCAPED('the outer realm called ' + name));
  for (const a of args) out.push(await tryIt(name + ' argument', () => needProcess(a.constructor.constructor('return process')())));
}
out.push('held: Symbol.keyFor sees only strings: ' + typeof Symbol.keyFor(Symbol.for('nodejs.util.inspect.custom')));
out.push('held: global symbols: ' + Object.getOwnPropertySymbols(globalThis).length);
return out;
"#,
    );
}

#[test]
fn vm_global_prototype_chain() {
    all_held(
        r#"
const out = [];
let o = globalThis;
for (let i = 0; i < 5 && o !== null; i++) {
  const names = Object.getOwnPropertyNames(o).filter((n) => ['process', 'require', 'module', 'Buffer', 'setTimeout', 'fetch'].includes(n));
  out.push(names.length ? ESCAPED('level ' + i + ' has ' + names.join(',')) : 'held: level ' + i + ' has no Node globals');
  o = Object.getPrototypeOf(o);
}
out.push(Object.getPrototypeOf(globalThis) === Object.prototype ? 'held: the global inherits from this realm\'s Object.prototype' : 'note: the global\'s prototype is ' + String(Object.getPrototypeOf(globalThis)));
return out;
"#,
    );
}

/// The own names of the guest's global: ECMAScript and V8 built-ins (those of current and
/// near-future Nodes), plus `openclaw` and `console`.
const BUILTIN_GLOBALS: &[&str] = &[
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "AsyncDisposableStack",
    "Atomics",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DataView",
    "Date",
    "DisposableStack",
    "Error",
    "EvalError",
    "FinalizationRegistry",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "Function",
    "Infinity",
    "Int16Array",
    "Int32Array",
    "Int8Array",
    "Intl",
    "Iterator",
    "JSON",
    "Map",
    "Math",
    "NaN",
    "Number",
    "Object",
    "Promise",
    "Proxy",
    "RangeError",
    "ReferenceError",
    "Reflect",
    "RegExp",
    "Set",
    "SharedArrayBuffer",
    "String",
    "SuppressedError",
    "Symbol",
    "SyntaxError",
    "Temporal",
    "TypeError",
    "URIError",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakRef",
    "WeakSet",
    "WebAssembly",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "eval",
    "globalThis",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "undefined",
    "unescape",
];

#[test]
fn vm_global_names_are_builtins_plus_openclaw_and_console() {
    each_node(|case| {
        let run = case.code(
            "return [Object.getOwnPropertyNames(globalThis), Object.getOwnPropertySymbols(globalThis).map(String)]",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        let names: Vec<&str> = run.value()[0]
            .as_array()
            .expect("a list of names")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let extra: Vec<&&str> = names
            .iter()
            .filter(|n| !BUILTIN_GLOBALS.contains(n) && !["openclaw", "console"].contains(n))
            .collect();
        assert!(extra.is_empty(), "globals beyond the built-ins: {extra:?}");
        for needed in ["openclaw", "console", "Object", "JSON", "Promise"] {
            assert!(names.contains(&needed), "{needed} missing from {names:?}");
        }
        assert_eq!(
            run.value()[1],
            serde_json::json!([]),
            "no symbol-keyed globals"
        );
    });
}

#[test]
fn vm_no_process_worker_or_spawn_api() {
    all_held(
        r#"
const out = [
  await tryIt('require child_process', () => require('child_process').execSync("echo x >> '@DIR@/canary'")),
  await tryIt('process.binding spawn_sync', () => process.binding('spawn_sync')),
  await tryIt('Worker', () => new Worker('data:,1')),
  await tryIt('SharedWorker', () => new SharedWorker('data:,1')),
  await tryIt('setTimeout', () => setTimeout(() => {}, 1)),
  await tryIt('queueMicrotask', () => queueMicrotask(() => {})),
  await tryIt('import child_process', async () => (await import('child_process')).spawn('/bin/sh')),
];
// A fork bomb without a spawn API: every attempt throws at once.
let spawned = 0, failed = 0;
for (let i = 0; i < 1000; i++) { try { require('child_process').spawn('/bin/sh', ['-c', "echo >> '@DIR@/canary'"]); spawned++; } catch (e) { failed++; } }
out.push(spawned ? ESCAPED(spawned + ' processes spawned') : 'held: 1000 spawns refused');
return out;
"#,
    );
}

#[test]
fn vm_no_network_api() {
    each_node(|case| {
        let listeners = Listeners::start(case.path());
        let body = listeners.fill(
            r#"
return [
  await tryIt('fetch', async () => (await fetch('http://127.0.0.1:@TCP@/')).status),
  await tryIt('globalThis.fetch', async () => (await globalThis.fetch('http://127.0.0.1:@TCP@/')).status),
  await tryIt('XMLHttpRequest', () => new XMLHttpRequest()),
  await tryIt('WebSocket', () => new WebSocket('ws://127.0.0.1:@TCP@/')),
  await tryIt('EventSource', () => new EventSource('http://127.0.0.1:@TCP@/')),
  await tryIt('navigator.sendBeacon', () => navigator.sendBeacon('http://127.0.0.1:@TCP@/')),
  await tryIt('require net', () => require('net').connect(@TCP@, '127.0.0.1')),
  await tryIt('require dgram', () => require('dgram').createSocket('udp4').send('x', @UDP@, '127.0.0.1')),
  await tryIt('require dns', () => require('dns').lookup('localhost', () => {})),
  await tryIt('import net', async () => (await import('net')).connect(@TCP@, '127.0.0.1')),
];
"#,
        );
        let run = case.code(&case.hostile(&body), RUN_MS);
        case.assert_all_held(&run);
        listeners.assert_nothing_arrived(&run);
    });
}

#[test]
fn vm_no_environment_or_signals() {
    all_held(
        r#"
return [
  await tryIt('process.env', () => JSON.stringify(process.env)),
  await tryIt('globalThis.process.env', () => JSON.stringify(globalThis.process.env)),
  await tryIt('Deno.env', () => Deno.env.toObject()),
  await tryIt('a global named like a variable', () => { const n = Object.getOwnPropertyNames(globalThis).filter((k) => /TOOLSEARCH|SECRET|^PATH$|^HOME$/.test(k)); if (!n.length) throw new Error('none'); return n.join(','); }),
  await tryIt('process.kill of the parent', () => process.kill(process.ppid, 'SIGTERM')),
  await tryIt('process.exit', () => process.exit(0)),
];
"#,
    );
}

// ---------------------------------------------------------------------------------------
// 3. An escaped guest (outer-realm.js) meets the permission model, the OS barriers and the
//    parent's checks
// ---------------------------------------------------------------------------------------

/// Starts escaped bodies: `o` is the outer realm or the body returns early; `req(name)` a
/// built-in module.
const ESCAPED_START: &str = r#"
const o = await __outer();
if (!o) return ['held: no way out of the vm context'];
const req = (name) => (o.process.getBuiltinModule ? o.process.getBuiltinModule(name) : o.require(name));
const out = ['note: left the vm context by ' + o.route];
"#;

#[test]
fn escaped_guest_cannot_read_files() {
    all_held_escaped(&format!(
        "{ESCAPED_START}{}",
        r#"
const fs = req('fs');
const G = o.global;
const path = '@SECRET_FILE@';
const attempts = [
  ['readFileSync', () => fs.readFileSync(path, 'utf8')],
  ['readFileSync of a URL', () => fs.readFileSync(new G.URL('file://' + path), 'utf8')],
  ['readFileSync of a Buffer path', () => fs.readFileSync(G.Buffer.from(path), 'utf8')],
  ['a relative path', () => fs.readFileSync('../' + path.split('/').slice(-2).join('/'), 'utf8')],
  ['openSync + readSync', () => { const fd = fs.openSync(path, 'r'); const b = G.Buffer.alloc(100); fs.readSync(fd, b); return b.toString(); }],
  ['fs.promises.readFile', () => fs.promises.readFile(path, 'utf8')],
  ['fs/promises', () => req('fs/promises').readFile(path, 'utf8')],
  ['createReadStream', () => new Promise((res, rej) => { const s = fs.createReadStream(path, 'utf8'); s.on('data', res); s.on('error', rej); })],
  ['callback readFile', () => new Promise((res, rej) => fs.readFile(path, 'utf8', (e, d) => (e ? rej(e) : res(d))))],
  ['readdirSync of the folder', () => fs.readdirSync('@DIR@').join(',')],
  ['statSync', () => fs.statSync(path).size],
  ['existsSync', () => { if (!fs.existsSync(path)) throw new Error('existsSync says false'); return true; }],
  ['realpathSync.native', () => fs.realpathSync.native(path)],
  ['cpSync out of reach', () => fs.cpSync(path, '@DIR@/pwned')],
  ['/proc/self/environ', () => fs.readFileSync('/proc/self/environ', 'utf8')],
  ['/proc/PPID/environ', () => fs.readFileSync('/proc/' + o.process.ppid + '/environ', 'utf8')],
  ['/proc/PPID/cmdline', () => fs.readFileSync('/proc/' + o.process.ppid + '/cmdline', 'utf8')],
  ['/proc/PPID/mem', () => fs.readFileSync('/proc/' + o.process.ppid + '/mem')],
  ['/etc/passwd', () => fs.readFileSync('/etc/passwd', 'utf8')],
  ['/etc/hostname', () => fs.readFileSync('/etc/hostname', 'utf8')],
  ['module.createRequire', () => req('module').createRequire(path)(path)],
  ['process.binding fs', () => o.process.binding('fs')],
];
for (const [label, f] of attempts) out.push(await tryIt(label, f));
// Descriptors already open: any regular file among them would be a leak of the parent's.
for (let fd = 0; fd < 64; fd++) {
  if (fd === 3) continue;
  let st = null;
  try { st = fs.fstatSync(fd); } catch (e) { continue; }
  if (st.isFile()) out.push(await tryIt('open descriptor ' + fd + ' is a file', () => { const b = G.Buffer.alloc(200); fs.readSync(fd, b, 0, 200, 0); return b.toString(); }));
}
return out;
"#
    ));
}

#[test]
fn escaped_guest_cannot_write_files() {
    all_held_escaped(&format!(
        "{ESCAPED_START}{}",
        r#"
const fs = req('fs');
const attempts = [
  ['writeFileSync', () => fs.writeFileSync('@DIR@/pwned', 'x')],
  ['appendFileSync to the canary', () => fs.appendFileSync('@DIR@/canary', 'x')],
  ['mkdirSync', () => fs.mkdirSync('@DIR@/pwned-dir')],
  ['symlinkSync', () => fs.symlinkSync('@SECRET_FILE@', '@DIR@/pwned-link')],
  ['fs.promises.writeFile', () => fs.promises.writeFile('@DIR@/pwned', 'x')],
  ['copyFileSync', () => fs.copyFileSync('@SECRET_FILE@', '@DIR@/pwned')],
  ['renameSync', () => fs.renameSync('@SECRET_FILE@', '@DIR@/pwned')],
  ['unlinkSync', () => fs.unlinkSync('@SECRET_FILE@')],
  ['chmodSync', () => fs.chmodSync('@SECRET_FILE@', 0o777)],
  ['writeFileSync in /tmp', () => fs.writeFileSync('/tmp/toolsearch-escape-pwned', 'x')],
  ['process.chdir', () => o.process.chdir('@DIR@')],
  ['process.report.writeReport', () => o.process.report.writeReport('@DIR@/pwned')],
  ['v8.writeHeapSnapshot', () => req('v8').writeHeapSnapshot('@DIR@/pwned')],
  ['process.loadEnvFile', () => o.process.loadEnvFile('@SECRET_FILE@')],
];
for (const [label, f] of attempts) out.push(await tryIt(label, f));
return out;
"#
    ));
    // The one write outside the test's folder.
    assert!(
        !Path::new("/tmp/toolsearch-escape-pwned").exists(),
        "a body wrote /tmp/toolsearch-escape-pwned"
    );
}

#[test]
fn escaped_guest_sees_no_environment() {
    each_node(|case| {
        let body = case.escaped(&format!(
            "{ESCAPED_START}{}",
            r#"
const env = o.process.env;
const keys = Object.keys(env);
out.push(keys.length ? ESCAPED('process.env has ' + keys.join(',')) : 'held: process.env is empty');
out.push(env.TOOLSEARCH_TEST_SECRET !== undefined ? ESCAPED('the secret is in process.env: ' + env.TOOLSEARCH_TEST_SECRET) : 'held: no TOOLSEARCH_TEST_SECRET');
let report = null;
try { report = o.process.report.getReport(); } catch (e) { out.push('held: getReport: ' + describeError(e)); }
if (report) {
  const vars = Object.keys(report.environmentVariables || {});
  out.push(vars.length ? ESCAPED('the report lists ' + vars.join(',')) : 'held: the report lists no variables');
}
out.push(await tryIt('/proc/self/environ', () => req('fs').readFileSync('/proc/self/environ', 'utf8')));
out.push(await tryIt('/proc/PPID/environ', () => req('fs').readFileSync('/proc/' + o.process.ppid + '/environ', 'utf8')));
out.push(await tryIt('os.userInfo', () => JSON.stringify(req('os').userInfo())));
return out;
"#
        ));
        let run = case.code(&body, RUN_MS);
        case.assert_all_held(&run);
    });
}

#[test]
fn escaped_guest_cannot_spawn_processes_or_workers() {
    all_held_escaped(&format!(
        "{ESCAPED_START}{}",
        r#"
const cp = req('child_process');
const canary = ['-c', "echo spawned >> '@DIR@/canary'"];
const attempts = [
  ['execFileSync', () => cp.execFileSync('/bin/sh', canary)],
  ['spawnSync', () => { const r = cp.spawnSync('/bin/sh', canary); if (r.error) throw r.error; return r.status; }],
  ['execSync', () => cp.execSync("echo spawned >> '@DIR@/canary'")],
  ['spawn', () => new Promise((res, rej) => { const c = cp.spawn('/bin/sh', canary); c.on('error', rej); c.on('exit', res); })],
  ['exec', () => new Promise((res, rej) => cp.exec("echo spawned >> '@DIR@/canary'", (e) => (e ? rej(e) : res('ran'))))],
  ['fork', () => cp.fork('@SECRET_FILE@')],
  ['process.binding spawn_sync', () => o.process.binding('spawn_sync')],
  ['Worker', () => new Promise((res, rej) => { const w = new (req('worker_threads').Worker)('1', { eval: true }); w.on('error', rej); w.on('online', () => res('online')); })],
  ['process.dlopen', () => o.process.dlopen({ exports: {} }, '/usr/lib/x86_64-linux-gnu/libc.so.6')],
  ['WASI', () => new (req('wasi').WASI)({ version: 'preview1' })],
  ['inspector.open', () => req('inspector').open(0)],
  ['inspector.Session', () => { const s = new (req('inspector').Session)(); s.connect(); return 'connected'; }],
];
for (const [label, f] of attempts) out.push(await tryIt(label, f));
return out;
"#
    ));
}

#[test]
fn escaped_guest_fork_bomb_is_blocked() {
    all_held_escaped(&format!(
        "{ESCAPED_START}{}",
        r#"
const cp = req('child_process');
let spawned = 0, refused = 0;
const started = Date.now();
for (let i = 0; i < 500; i++) {
  try {
    const c = cp.spawn('/bin/sh', ['-c', "echo bomb >> '@DIR@/canary'"]);
    if (c.pid) spawned++; else refused++;
    c.on('error', () => {});
  } catch (e) { refused++; }
}
out.push(spawned ? ESCAPED(spawned + ' processes spawned') : 'held: ' + refused + ' spawns refused in ' + (Date.now() - started) + ' ms');
return out;
"#
    ));
}

#[test]
fn escaped_guest_has_no_network() {
    each_node(|case| {
        let listeners = Listeners::start(case.path());
        let body = listeners.fill(&format!(
            "{ESCAPED_START}{}",
            r#"
const net = req('net');
const connect = (opts) => new Promise((res, rej) => {
  const s = net.connect(opts);
  s.on('connect', () => { s.destroy(); res('connected'); });
  s.on('error', rej);
  setTimeoutOuter(() => { s.destroy(); rej(new Error('no answer')); }, 2000);
});
const setTimeoutOuter = o.global.setTimeout;
const attempts = [
  ['TCP connect', () => connect({ host: '127.0.0.1', port: @TCP@ })],
  ['TCP connect by name', () => connect({ host: 'localhost', port: @TCP@ })],
  ['IPv6 loopback', () => connect({ host: '::1', port: @TCP@ })],
  ['Unix socket', () => connect({ path: '@UNIX@' })],
  ['abstract Unix socket', () => connect({ path: '\0@ABSTRACT@' })],
  ['fetch', async () => (await o.global.fetch('http://127.0.0.1:@TCP@/')).status],
  ['http.get', () => new Promise((res, rej) => { const r = req('http').get('http://127.0.0.1:@TCP@/', (m) => res(m.statusCode)); r.on('error', rej); })],
  ['UDP send', () => new Promise((res, rej) => { const s = req('dgram').createSocket('udp4'); s.on('error', rej); s.send('x', @UDP@, '127.0.0.1', (e) => (e ? rej(e) : res('sent'))); })],
  ['a TCP server', () => new Promise((res, rej) => { const srv = net.createServer(); srv.on('error', rej); srv.listen(0, '127.0.0.1', () => res('listening on ' + srv.address().port)); })],
  ['dns.lookup', () => new Promise((res, rej) => req('dns').lookup('example.com', (e, a) => (e ? rej(e) : res(a))))],
  ['dns.lookup localhost', () => new Promise((res, rej) => req('dns').lookup('localhost', (e, a) => (e ? rej(e) : res(a))))],
  ['dns.resolve4', () => req('dns').promises.resolve4('example.com')],
  ['fetch by name', async () => (await o.global.fetch('http://example.com/')).status],
];
for (const [label, f] of attempts) out.push(await tryIt(label, f));
return out;
"#
        ));
        let run = case.code(&case.escaped(&body), RUN_MS);
        case.assert_all_held(&run);
        listeners.assert_nothing_arrived(&run);
    });
}

#[test]
fn escaped_guest_cannot_signal_the_parent_or_others() {
    each_node(|case| {
        let mut victim = Victim::start();
        let body = format!(
            "{ESCAPED_START}{}",
            r#"
const p = o.process;
const attempts = [
  ['signal 0 to the parent', () => p.kill(p.ppid, 0)],
  ['SIGTERM to the parent', () => p.kill(p.ppid, 'SIGTERM')],
  ['SIGSTOP to the parent', () => p.kill(p.ppid, 'SIGSTOP')],
  ['SIGKILL to another process', () => p.kill(@VICTIM@, 'SIGKILL')],
  ['SIGKILL to its process group', () => p.kill(-@VICTIM@, 'SIGKILL')],
  ['signal 0 to init', () => p.kill(1, 0)],
];
for (const [label, f] of attempts) out.push(await tryIt(label, f));
return out;
"#
        )
        .replace("@VICTIM@", &victim.pid().to_string());
        let run = case.code(&case.escaped(&body), RUN_MS);
        case.assert_all_held(&run);
        victim.assert_alive();
    });
}

#[test]
fn escaped_guest_forged_frames_still_meet_the_dispatch_policy() {
    each_node(|case| {
        let case = case.with_config("[tools]\ndeny = [\"canary\"]\n");
        let body = case.escaped(&format!(
            "{ESCAPED_START}{}",
            r#"
const fs = req('fs');
for (const id of ['canary', 'openclaw:core:canary']) {
  fs.writeSync(3, JSON.stringify({ type: 'bridge', id: 900 + id.length, method: 'call', args: [id, { forged: true }] }) + '\n');
}
const until = Date.now() + 1000; while (Date.now() < until) {}
out.push('held: forged calls sent; the canary file decides');
return out;
"#,
        ));
        let run = case.code(&body, RUN_MS);
        case.assert_all_held(&run);
        // Not vacuous: when the body did get out, both forged calls reached the dispatcher.
        if run.value()[0]
            .as_str()
            .unwrap_or_default()
            .starts_with("note: left")
        {
            assert_eq!(run.json["telemetry"]["call_count"], 2, "{}", run.stdout);
        }
    });
}

#[test]
fn escaped_guest_forged_frames_run_tools_and_fake_the_result() {
    all_held_escaped(&format!(
        "{ESCAPED_START}{}",
        r#"
const fs = req('fs');
fs.writeSync(3, JSON.stringify({ type: 'bridge', id: 999, method: 'call', args: ['canary', { forged: true }] }) + '\n');
const until = Date.now() + 1000; while (Date.now() < until) {}
fs.writeSync(3, JSON.stringify({ type: 'result', ok: true, value: [ESCAPED('a forged result frame')] }) + '\n');
await new Promise(() => {});
"#
    ));
}

// ---------------------------------------------------------------------------------------
// 4. Breaking out of the wrapper
// ---------------------------------------------------------------------------------------

/// A wrapper-breaking body: a clean code-error or a harmless value, nothing out.
fn check_harmless(case: &Case, body: &str) {
    let run = case.code(body, RUN_MS);
    case.assert_contained(&run);
    assert!(
        run.ok() || run.error_code() == "code-error",
        "expected a value or a code-error for {body:?}: {}",
        run.stdout
    );
}

fn wrapper_is_harmless(bodies: &[&str]) {
    each_node(|case| {
        for body in bodies {
            check_harmless(&case, body);
        }
    });
}

#[test]
fn wrapper_closing_the_function_early() {
    wrapper_is_harmless(&[
        "}); globalThis.x = 1; (async function(){",
        "}); openclaw.tools.call('canary', {from: 'top level'}); (async function(){ return typeof x",
    ]);
}

#[test]
fn wrapper_return_outside_a_function() {
    each_node(|case| {
        let run = case.code("})(); return 1; (function(){", RUN_MS);
        case.assert_contained(&run);
        run.assert_error(&["code-error"]);
    });
}

#[test]
fn wrapper_comments_and_strings() {
    wrapper_is_harmless(&[
        "*/ }) /*",
        "`; }); (async function(){ `",
        "'\n}); (async function(){ '",
        "}), 42; //",
    ]);
}

#[test]
fn wrapper_line_separators() {
    each_node(|case| {
        let run = case.code("return 1\u{2028}; globalThis.y = 2", RUN_MS);
        case.assert_contained(&run);
        assert_eq!(run.value(), 1, "{}", run.stdout);
        let run = case.code(
            "// a comment\u{2028}return 'after U+2028'\u{2029}// and U+2029",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(run.value(), "after U+2028", "{}", run.stdout);
        check_harmless(&case, "\u{2028}}); (async function(){\u{2028}");
    });
}

#[test]
fn wrapper_a_loop_at_the_top_level() {
    each_node(|case| {
        let run = case.code("}); for(;;){} (async function(){", TIMEOUT_MS);
        case.assert_contained(&run);
        run.assert_error(&["timeout", "code-error"]);
    });
}

// ---------------------------------------------------------------------------------------
// 5. Forged protocol frames through the guest's own channels
// ---------------------------------------------------------------------------------------

#[test]
fn forge_frames_in_log_lines() {
    each_node(|case| {
        let run = case.code(
            r#"
console.log('\n{"type":"result","ok":true,"value":"FORGED"}\n');
console.warn('{"type":"result","ok":true,"value":"FORGED"}');
console.error('\r\n{"type":"result","ok":true,"value":"FORGED"}\r\n');
console.log('{"type":"bridge","id":999,"method":"call","args":["canary",{}]}');
console.log('\n{"type":"bridge","id":1,"method":"call","args":["canary",{}]}\n');
console.log('x\u2028{"type":"result","ok":true,"value":"FORGED"}');
const r = await openclaw.tools.search('canary');
return 'real ' + r.length;
"#,
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value(), "real 1");
        assert_eq!(
            run.logs().len(),
            6,
            "each log call is one line: {}",
            run.stdout
        );
        assert_eq!(run.json["telemetry"]["call_count"], 0);
        assert_eq!(
            run.logs()[0]["text"],
            "\n{\"type\":\"result\",\"ok\":true,\"value\":\"FORGED\"}\n"
        );
    });
}

#[test]
fn forge_a_frame_in_the_return_value() {
    each_node(|case| {
        let frame = "\n{\"type\":\"result\",\"ok\":true,\"value\":\"FORGED\"}\n";
        let run = case.code(
            &format!("return {}", serde_json::to_string(frame).expect("json")),
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(run.value(), frame, "the string comes back as it is");
        let run = case.code(
            r#"return {type: 'bridge', id: 999, method: 'call', args: ['canary', {}], toString() { return '{"type":"result"}'; }}"#,
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(
            run.value()["type"],
            "bridge",
            "a value, not a frame: {}",
            run.stdout
        );
    });
}

// ---------------------------------------------------------------------------------------
// 6. Console floods
// ---------------------------------------------------------------------------------------

/// At most 200 lines plus the cut notice, and about 64 KiB of text.
fn assert_logs_bounded(run: &Run) {
    let logs = run.logs();
    let bytes: usize = logs
        .iter()
        .map(|l| l["text"].as_str().unwrap_or_default().len())
        .sum();
    assert!(logs.len() <= 201, "{} log lines", logs.len());
    assert!(bytes <= 70 * 1024, "{bytes} bytes of logs");
}

fn assert_cut_notice(run: &Run) {
    let last = run.logs().last().expect("some logs");
    assert_eq!(last["level"], "warn", "{last}");
    assert!(
        last["text"].as_str().unwrap_or_default().contains("cut"),
        "the last line says lines were cut: {last}"
    );
}

#[test]
fn flood_ten_thousand_lines() {
    each_node(|case| {
        let run = case.code(
            "for (let i = 0; i < 10000; i++) console.log('line ' + i); return 'done'",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value(), "done");
        assert_logs_bounded(&run);
        assert_eq!(run.logs().len(), 201);
        assert_eq!(run.logs()[0]["text"], "line 0");
        assert_cut_notice(&run);
    });
}

#[test]
fn flood_one_ten_megabyte_line() {
    each_node(|case| {
        let run = case.code("console.log('x'.repeat(1e7)); return 'done'", RUN_MS);
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_logs_bounded(&run);
        assert_eq!(run.logs().len(), 1);
        let text = run.logs()[0]["text"].as_str().unwrap_or_default();
        assert!(text.len() < 5000, "the line is cut: {} bytes", text.len());
        assert!(text.ends_with("..."), "a cut line says so");
    });
}

#[test]
fn flood_many_long_lines() {
    each_node(|case| {
        let run = case.code(
            "for (let i = 0; i < 100; i++) console.error('y'.repeat(1e5)); return 'done'",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_logs_bounded(&run);
        assert_cut_notice(&run);
    });
}

#[test]
fn flood_non_ascii_lines_are_cut_not_fatal() {
    each_node(|case| {
        let run = case.code(
            "for (let i = 0; i < 100; i++) console.log('\\u20ac'.repeat(1000)); return 'done'",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_logs_bounded(&run);
        assert_cut_notice(&run);
    });
}

#[test]
fn flood_a_line_cut_inside_a_surrogate_pair() {
    each_node(|case| {
        let run = case.code(
            "console.log('a' + '\\u{1F600}'.repeat(3000)); return 'done'",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value(), "done");
        assert_logs_bounded(&run);
    });
}

// ---------------------------------------------------------------------------------------
// 7. Return values
// ---------------------------------------------------------------------------------------

#[test]
fn output_a_huge_return_value_is_output_too_large() {
    each_node(|case| {
        let run = case.code("return 'x'.repeat(5e6)", RUN_MS);
        case.assert_contained(&run);
        run.assert_error(&["output-too-large"]);
        assert!(run.stdout.len() < 10_000, "the value is not printed");
    });
}

#[test]
fn output_a_huge_non_ascii_return_value_is_output_too_large() {
    each_node(|case| {
        let run = case.code("return '\\u20ac'.repeat(1e6 - 10)", RUN_MS);
        case.assert_contained(&run);
        run.assert_error(&["output-too-large"]);
    });
}

#[test]
fn output_a_deeply_nested_value_is_a_clean_error() {
    each_node(|case| {
        let run = case.code(
            "let a = []; for (let i = 0; i < 10000; i++) a = [a]; return a",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(!run.ok(), "{}", run.stdout);
        let run = case.code(
            "let a = {}; for (let i = 0; i < 10000; i++) a = {a}; console.log(a); return 'logged'",
            RUN_MS,
        );
        case.assert_contained(&run);
    });
}

#[test]
fn output_a_nested_value_of_depth_200() {
    each_node(|case| {
        let run = case.code(
            "let a = []; for (let i = 0; i < 200; i++) a = [a]; return a",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(
            run.ok() || ["code-error", "output-too-large"].contains(&run.error_code()),
            "{}",
            run.stdout
        );
    });
}

#[test]
fn output_a_lone_surrogate() {
    each_node(|case| {
        let run = case.code("return 'a\\uD800b'", RUN_MS);
        case.assert_contained(&run);
        assert!(
            run.ok() || run.error_code() == "code-error",
            "{}",
            run.stdout
        );
    });
}

/// A lone surrogate in a key, not a value (a title cut inside an emoji, grouped on): a
/// replacer that mended values only let the key through as an escape the parent refuses,
/// and the run ended as `protocol`, uncatchable (review 11 F2). Keys are mended too, in
/// results, logs and bridge arguments alike, and `__proto__` stays a key.
#[test]
fn output_a_lone_surrogate_in_a_key() {
    each_node(|case| {
        let run = case.code(
            "const t = '\u{1F600} party'; const g = {}; g[t.slice(0, 1)] = 1; g.__proto__x = 2; \
             console.log(g); return g",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(
            run.value(),
            &json!({"\u{FFFD}": 1, "__proto__x": 2}),
            "{}",
            run.stdout
        );
        let run = case.code(
            "try { await openclaw.tools.call('openclaw:core:calculate', {['\\udc00']: '1', \
             ['__proto__']: {a: 1}}); return 'ok' } catch (e) { return 'caught ' + e.message }",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
    });
}

#[test]
fn output_unserializable_values_are_code_errors() {
    each_node(|case| {
        for body in [
            "return 1n",
            "const a = {}; a.a = a; return a",
            "return { toJSON() { throw new Error('no') } }",
            "return { get x() { throw new Error('no') } }",
            "return new Proxy({}, { ownKeys() { throw new Error('no') } })",
        ] {
            let run = case.code(body, RUN_MS);
            case.assert_contained(&run);
            run.assert_error(&["code-error"]);
        }
        for (body, value) in [
            ("return undefined", Value::Null),
            ("return () => 1", Value::Null),
            ("return Symbol('s')", Value::Null),
            ("return new Error('as a value')", Value::from("as a value")),
        ] {
            let run = case.code(body, RUN_MS);
            case.assert_contained(&run);
            assert_eq!(run.value(), &value, "{body}: {}", run.stdout);
        }
    });
}

// ---------------------------------------------------------------------------------------
// 8. Memory
// ---------------------------------------------------------------------------------------

#[test]
fn memory_a_heap_bomb_is_out_of_memory() {
    each_node(|case| {
        let run = case.code(
            "const a = []; for (;;) a.push('x'.repeat(1000) + a.length)",
            RUN_MS,
        );
        case.assert_contained(&run);
        run.assert_error(&["out-of-memory", "child-exited"]);
        // The parent survives and can run the next body.
        let run = case.code("return 'still here'", RUN_MS);
        assert_eq!(run.value(), "still here");
    });
}

#[test]
fn memory_an_array_bomb_is_out_of_memory() {
    each_node(|case| {
        let run = case.code(
            "const a = []; for (;;) a.push(new Array(1e6).fill(1.5))",
            RUN_MS,
        );
        case.assert_contained(&run);
        run.assert_error(&["out-of-memory", "child-exited"]);
    });
}

#[test]
fn memory_off_heap_buffers_are_capped() {
    each_node(|case| {
        let run = case.code(
            "const keep = []; for (let i = 0; i < 6; i++) { const b = new Uint8Array(1e8); b.fill(1); keep.push(b); } return keep.length * 100 + ' MB held'",
            RUN_MS,
        );
        case.assert_contained(&run);
        // RLIMIT_AS bounds ArrayBuffer memory: the allocation fails inside the guest.
        run.assert_error(&["code-error", "out-of-memory", "child-exited"]);
        assert!(
            run.stdout.contains("Array buffer allocation failed")
                || run.error_code() != "code-error",
            "{}",
            run.stdout
        );
    });
}

// ---------------------------------------------------------------------------------------
// 9. Prototype pollution of the bridge
// ---------------------------------------------------------------------------------------

/// A polluting body: the run ends cleanly (a value or a clean error), nothing out, the canary
/// not run.
fn pollution_is_harmless(body: &str) -> Vec<Run> {
    let runs = std::sync::Mutex::new(Vec::new());
    each_node(|case| {
        let run = case.code(&case.hostile(body), RUN_MS);
        case.assert_contained(&run);
        assert!(
            run.ok() || ["code-error", "timeout"].contains(&run.error_code()),
            "expected a value or a code-error: {}",
            run.stdout
        );
        runs.lock().expect("lock").push(run);
    });
    runs.into_inner().expect("lock")
}

#[test]
fn pollution_object_prototype_then() {
    for run in pollution_is_harmless(
        "Object.prototype.then = function (ok) { delete Object.prototype.then; ok('polluted'); };\n\
         const r = await openclaw.tools.search('canary');\n\
         return r;",
    ) {
        assert!(run.ok(), "{}", run.stdout);
    }
}

#[test]
fn pollution_promise_prototype_then() {
    for run in pollution_is_harmless(
        "const original = Promise.prototype.then;\n\
         Promise.prototype.then = function () { return this; };\n\
         const r = await openclaw.tools.search('canary');\n\
         Promise.prototype.then = original;\n\
         return r.map((h) => h.name);",
    ) {
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(
            run.value(),
            &serde_json::json!(["canary"]),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn pollution_array_prototype_push_and_friends() {
    for run in pollution_is_harmless(
        "Array.prototype.push = function () { throw new Error('push'); };\n\
         Array.prototype.map = function () { throw new Error('map'); };\n\
         Object.defineProperty(Array.prototype, '0', { set() { throw new Error('index'); }, configurable: true });\n\
         Object.defineProperty(Object.prototype, 'resolve', { set() { throw new Error('resolve'); }, configurable: true });\n\
         const r = await openclaw.tools.search('canary');\n\
         return r.length;",
    ) {
        assert!(run.ok(), "{}", run.stdout);
    }
}

#[test]
fn pollution_json_parse_and_stringify() {
    for run in pollution_is_harmless(
        "JSON.parse = function () { return ESCAPED('JSON.parse replaced'); };\n\
         JSON.stringify = function () { return '{\"type\":\"bridge\",\"id\":1,\"method\":\"call\",\"args\":[\"canary\",{}]}'; };\n\
         const r = await openclaw.tools.search('canary');\n\
         console.log('logged', {a: 1});\n\
         return r.length;",
    ) {
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value(), 1, "{}", run.stdout);
        assert_eq!(run.logs()[0]["text"], "logged {\"a\":1}");
    }
}

#[test]
fn pollution_openclaw_is_frozen() {
    for run in pollution_is_harmless(
        "const before = openclaw.tools.search;\n\
         openclaw.tools.search = () => 'hijacked';\n\
         openclaw.tools = {};\n\
         globalThis.openclaw = {};\n\
         try { delete globalThis.openclaw; } catch (e) {}\n\
         try { Object.defineProperty(openclaw.tools, 'call', { value: () => 1 }); return ESCAPED('defineProperty'); } catch (e) {}\n\
         try { Object.setPrototypeOf(openclaw.tools, { search: () => 'x' }); return ESCAPED('setPrototypeOf'); } catch (e) {}\n\
         console.log = () => {};\n\
         console.log('still logged');\n\
         const r = await openclaw.tools.search('canary');\n\
         return [openclaw.tools.search === before, Object.isFrozen(openclaw), Object.isFrozen(openclaw.tools), Object.isFrozen(console), r.length];",
    ) {
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(
            run.value(),
            &serde_json::json!([true, true, true, true, 1]),
            "{}",
            run.stdout
        );
        assert_eq!(run.logs().len(), 1);
    }
    // In strict mode the assignment throws (the directive must come first: no helpers).
    each_node(|case| {
        let run = case.code(
            "'use strict';\n\
             try { openclaw.tools.search = () => 'hijacked'; return 'assigned'; } catch (e) { return 'held: ' + e.name; }",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(run.value(), "held: TypeError", "{}", run.stdout);
    });
}

#[test]
fn pollution_promise_resolve() {
    pollution_is_harmless("Promise.resolve = function () { return {}; }; return 1");
}

#[test]
fn pollution_a_getter_only_code_on_object_prototype() {
    pollution_is_harmless(
        "Object.defineProperty(Object.prototype, 'code', { get() { return undefined; }, configurable: true });\n\
         try { await openclaw.tools.describe('no-such-tool'); } catch (e) { return 'held: rejected'; }\n\
         return 'resolved';",
    );
}

#[test]
fn pollution_of_regexp_and_error_used_by_the_bootstrap() {
    for run in pollution_is_harmless(
        "RegExp.prototype.exec = function () { return ['', { valueOf() { return 7; } }]; };\n\
         Object.defineProperty(Error, Symbol.hasInstance, { value: () => true });\n\
         Object.defineProperty(Error.prototype, 'message', { get() { return { toString() { throw new Error('nested'); } }; } });\n\
         throw new Error('boom');",
    ) {
        run.assert_error(&["code-error"]);
    }
}

/// Every property name the bootstrap, Node or the outer side could read through a
/// prototype of the guest's realm (descriptor fields, promise and error fields, frame
/// fields, conversions, well-known symbols), polluted on Object, Array, Error, Promise and
/// Function prototypes at once, as a throwing getter and as a throwing function value.
/// While it is in place a failing bridge call and a succeeding one both settle, the
/// guest's own `catch` runs, and the run ends with the guest's value: no pollution turns
/// the runtime's own work into an uncaught exception, a lost frame or a timeout. (A
/// descriptor inheriting a guest's `get` made the runtime throw out of its frame handler.)
#[test]
fn pollution_family_every_key_the_bridge_could_read() {
    const KEYS: &[&str] = &[
        "get",
        "set",
        "value",
        "writable",
        "enumerable",
        "configurable",
        "then",
        "constructor",
        "message",
        "code",
        "name",
        "stack",
        "cause",
        "errors",
        "resolve",
        "reject",
        "toJSON",
        "toString",
        "valueOf",
        "length",
        "0",
        "1",
        "id",
        "ok",
        "type",
        "error",
        "items",
        "level",
        "limit",
        "args",
        "method",
        "@@toPrimitive",
        "@@iterator",
        "@@toStringTag",
        "@@hasInstance",
        "@@species",
    ];
    // The runtime itself reads these for every failed call: with them polluted the calls
    // must still end exactly as without (the failing one rejected, the other resolved).
    const EXACT: &[&str] = &[
        "get",
        "set",
        "value",
        "writable",
        "enumerable",
        "configurable",
        "message",
        "code",
        "resolve",
        "reject",
        "id",
        "ok",
        "type",
        "error",
    ];
    let cases: Vec<(String, &str)> = KEYS
        .iter()
        .flat_map(|k| [(k.to_string(), "getter"), (k.to_string(), "value")])
        .collect();
    // 2 calls a case, 64 calls a run.
    for chunk in cases.chunks(24) {
        let list = serde_json::to_string(chunk).expect("json");
        let body = format!(
            r#"
const cases = {list};
const targets = [Object.prototype, Array.prototype, Error.prototype, Promise.prototype, Function.prototype];
const out = [];
for (let i = 0; i < cases.length; i++) {{
  const key = cases[i][0];
  const how = cases[i][1];
  const k = key.startsWith('@@') ? Symbol[key.slice(2)] : key;
  const saved = [];
  for (let t = 0; t < targets.length; t++) {{
    const d = Object.getOwnPropertyDescriptor(targets[t], k);
    saved[t] = d === undefined ? undefined : {{ __proto__: null, ...d }};
  }}
  const fail = function () {{ throw new Error('guest ' + how + ' ' + key); }};
  for (let t = 0; t < targets.length; t++) {{
    try {{
      Object.defineProperty(targets[t], k, how === 'getter'
        ? {{ __proto__: null, get: fail, configurable: true }}
        : {{ __proto__: null, value: fail, configurable: true, writable: true }});
    }} catch (e) {{}}
  }}
  let a = 'none';
  let b = 'none';
  try {{ await openclaw.tools.call('no-such-tool', {{}}); a = 'resolved'; }} catch (e) {{ a = 'rejected'; }}
  try {{ await openclaw.tools.describe('canary'); b = 'resolved'; }} catch (e) {{ b = 'rejected'; }}
  for (let t = targets.length - 1; t >= 0; t--) {{
    try {{
      if (saved[t] === undefined) delete targets[t][k];
      else Object.defineProperty(targets[t], k, saved[t]);
    }} catch (e) {{}}
  }}
  out.push(key + ' ' + how + ' ' + a + ' ' + b);
}}
return out;
"#
        );
        each_node(|case| {
            let run = case.code(&case.hostile(&body), RUN_MS);
            case.assert_contained(&run);
            assert!(
                run.ok(),
                "the guest's own handling must end the run: {}",
                run.stdout
            );
            let lines = run.value().as_array().expect("a list");
            assert_eq!(lines.len(), chunk.len(), "{}", run.stdout);
            for line in lines {
                let line = line.as_str().unwrap_or_default();
                let key = line.split(' ').next().unwrap_or_default();
                if EXACT.contains(&key) {
                    assert!(
                        line.ends_with(" rejected resolved"),
                        "{line}: {}",
                        run.stdout
                    );
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// 10. Policy and lazy calls
// ---------------------------------------------------------------------------------------

#[test]
fn policy_a_denied_tool_is_unknown_and_never_runs() {
    each_node(|case| {
        let case = case.with_config("[tools]\ndeny = [\"canary\"]\n");
        let body = case.hostile(
            r#"
const out = [];
for (const id of ['canary', 'openclaw:core:canary']) {
  try { await openclaw.tools.call(id, {}); out.push(ESCAPED('called ' + id)); } catch (e) { out.push('held: ' + e.code + ': ' + e.message); }
  try { await openclaw.tools.describe(id); out.push(ESCAPED('described ' + id)); } catch (e) { out.push('held: ' + e.code); }
}
const hits = await openclaw.tools.search('canary tool');
out.push(hits.some((h) => h.name === 'canary') ? ESCAPED('the search lists it') : 'held: the search does not list it');
return out;
"#,
        );
        let run = case.code(&body, RUN_MS);
        case.assert_all_held(&run);
        let lines = run.value().as_array().expect("a list");
        assert!(
            lines[0]
                .as_str()
                .unwrap_or_default()
                .starts_with("held: unknown-tool"),
            "{}",
            run.stdout
        );
    });
}

#[test]
fn lazy_an_unawaited_call_never_runs() {
    each_node(|case| {
        let run = case.code("openclaw.tools.call('canary', {}); return 1", RUN_MS);
        case.assert_contained(&run);
        assert_eq!(run.value(), 1, "{}", run.stdout);
        assert_eq!(run.json["telemetry"]["call_count"], 0);
        let run = case.code(
            "const calls = []; for (let i = 0; i < 10; i++) calls.push(openclaw.tools.call('canary', {i})); \
             const t = Date.now(); while (Date.now() - t < 300) {} return calls.length",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(run.value(), 10, "{}", run.stdout);
    });
}

#[test]
fn lazy_an_awaited_call_runs_and_a_then_starts_it() {
    each_node(|case| {
        let run = case.code(
            "await openclaw.tools.call('canary', {n: 1}); \
             await new Promise((ok) => openclaw.tools.call('canary', {n: 2}).then(ok)); \
             return 'done'",
            RUN_MS,
        );
        run.assert_shape();
        assert_eq!(run.value(), "done", "{}", run.stdout);
        assert_eq!(case.canary().as_deref(), Some(r#"{"n":1}{"n":2}"#));
    });
}

#[test]
fn lazy_an_unhandled_rejection_is_not_a_crash() {
    each_node(|case| {
        let run = case.code(
            "(async () => { throw new Error('oops'); })(); return await openclaw.tools.search('canary')",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(
            run.ok() || run.error_code() == "code-error",
            "{}",
            run.stdout
        );
    });
}

#[test]
fn lazy_bridge_call_limits() {
    each_node(|case| {
        let run = case.code(
            r#"
const errors = [];
for (let i = 0; i < 70; i++) { try { await openclaw.tools.search('canary'); } catch (e) { errors.push(e.message); } }
return [errors.length, errors[0]];
"#,
            RUN_MS,
        );
        case.assert_contained(&run);
        assert!(run.ok(), "{}", run.stdout);
        assert_eq!(run.value()[0], 6, "64 calls per run: {}", run.stdout);
        assert_eq!(run.json["telemetry"]["search_count"], 64);
    });
}

// ---------------------------------------------------------------------------------------
// 11. Timeouts and children left behind
// ---------------------------------------------------------------------------------------

#[test]
fn timeout_a_synchronous_loop() {
    times_out("for(;;){}");
}

#[test]
fn timeout_a_loop_after_await() {
    times_out("await null; for(;;){}");
}

#[test]
fn timeout_an_await_loop() {
    times_out("for(;;) await null");
}

#[test]
fn timeout_a_promise_that_never_settles() {
    times_out("await new Promise(()=>{})");
}

/// The guest's one timer, `Atomics.waitAsync` with a timeout, fires while the run waits for
/// nothing else and while a bridge call is awaited (sandbox round 33 F1: a reader that
/// blocked the child's loop turned a 50 ms wait into the run's timeout, and held a race
/// between the timer and a call until the call's answer came).
#[test]
fn a_guest_timer_fires_with_or_without_a_call_awaited() {
    each_node(|case| {
        let alone = case.code(
            "const ia = new Int32Array(new SharedArrayBuffer(4)); return await Atomics.waitAsync(ia, 0, 0, 50).value",
            RUN_MS,
        );
        case.assert_contained(&alone);
        assert_eq!(alone.value(), "timed-out", "{}", alone.stdout);
        let after = case.code(
            "const ia = new Int32Array(new SharedArrayBuffer(4)); const hits = await openclaw.tools.search('issue', {limit: 1}); return [await Atomics.waitAsync(ia, 0, 0, 50).value, Array.isArray(hits)]",
            RUN_MS,
        );
        case.assert_contained(&after);
        assert_eq!(
            after.value(),
            &serde_json::json!(["timed-out", true]),
            "{}",
            after.stdout
        );
        // While 60 calls are in flight, the timer still comes first or with them.
        let during = case.code(
            "const ia = new Int32Array(new SharedArrayBuffer(4)); const calls = []; for (let i = 0; i < 60; i++) calls.push(openclaw.tools.describe('create_issue').then(() => 1, () => 0)); const first = await Promise.race([Atomics.waitAsync(ia, 0, 0, 1).value, new Promise(() => {})]); await Promise.all(calls); return first",
            RUN_MS,
        );
        case.assert_contained(&during);
        assert_eq!(during.value(), "timed-out", "{}", during.stdout);
    });
}

#[test]
fn timeout_a_continuation_left_running_after_return() {
    each_node(|case| {
        // There are no timers in the context: this is a code-error (or, were timers added,
        // the value 1).
        let run = case.code("setTimeout(()=>{for(;;){}}, 10); return 1", RUN_MS);
        case.assert_contained(&run);
        assert!(
            run.value() == 1
                || (run.error_code() == "code-error"
                    && run.json["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("setTimeout")),
            "{}",
            run.stdout
        );
        // A continuation that spins after the result was collected: the value arrives and
        // the child is killed (the run helper checks no child is left).
        let run = case.code(
            "Promise.resolve().then(() => null).then(() => null).then(() => null).then(() => { for (;;) {} }); return 1",
            RUN_MS,
        );
        case.assert_contained(&run);
        assert_eq!(run.value(), 1, "{}", run.stdout);
        assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    });
}

// ---------------------------------------------------------------------------------------
// 12. doctor
// ---------------------------------------------------------------------------------------

#[test]
fn doctor_every_probe_is_blocked() {
    each_node(|case| {
        let run = case.toolsearch(&["doctor", "--json"]);
        assert_eq!(run.exit, Some(0), "{}\n{}", run.stdout, run.stderr);
        let v = &run.json;
        assert_eq!(v["usable"], true, "{}", run.stdout);
        assert_eq!(v["all_probes_blocked"], true, "{}", run.stdout);
        let probes = v["probes"].as_array().expect("probes");
        assert!(!probes.is_empty());
        for p in probes {
            assert_eq!(p["blocked"], true, "{p}");
        }
        assert!(!run.stdout.contains(&case.secret));
        let version = v["node"]["version"].as_str().unwrap_or_default();
        assert_eq!(version, case.node.version, "doctor ran the node under test");
    });
}
