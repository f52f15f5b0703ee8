//! Running a program for a tool or a hook: no shell, JSON on stdin, bounded output, a
//! deadline, cancellation, and nothing left running afterwards.
//!
//! The program gets an empty environment except the variables named for it, its own
//! process group (so a deadline kills whatever it started too), and stdout and stderr read
//! up to a bound: past it the program is killed and the run fails, rather than the host
//! buffering an unbounded stream.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Why a run did not produce an exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramFailure {
    /// Could not start (not found, not executable).
    Spawn(String),
    Timeout(Duration),
    Cancelled,
    /// stdout passed the bound.
    OutputTooLarge(usize),
}

impl std::fmt::Display for ProgramFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramFailure::Spawn(e) => write!(f, "could not start: {e}"),
            ProgramFailure::Timeout(d) => write!(f, "timed out after {} ms", d.as_millis()),
            ProgramFailure::Cancelled => f.write_str("cancelled"),
            ProgramFailure::OutputTooLarge(n) => {
                write!(f, "wrote more than {n} bytes to stdout")
            }
        }
    }
}

/// What a finished program gave.
#[derive(Debug, Clone)]
pub struct ProgramOutput {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    /// The last [`STDERR_TAIL`] bytes of stderr.
    pub stderr_tail: String,
}

/// How much of stderr is kept (its end: where the error usually is).
pub const STDERR_TAIL: usize = 2048;

/// A program and how to run it.
#[derive(Clone)]
pub struct Program<'a> {
    pub argv: &'a [String],
    /// Names of variables passed from this process's environment; nothing else is.
    pub env: &'a [String],
    pub stdin: &'a [u8],
    pub timeout: Duration,
    pub max_stdout: usize,
    /// Called with each line of stderr as it arrives (progress reports).
    pub on_stderr_line: Option<&'a (dyn Fn(&str) + Send + Sync)>,
}

/// Runs `program`; see the module doc.
pub async fn run(
    program: &Program<'_>,
    cancel: &CancellationToken,
) -> Result<ProgramOutput, ProgramFailure> {
    let Some((exe, args)) = program.argv.split_first() else {
        return Err(ProgramFailure::Spawn("empty command".into()));
    };
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    for name in program.env {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ProgramFailure::Spawn(format!("{exe}: {e}")))?;
    let pgid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let input = program.stdin.to_vec();
    let max = program.max_stdout;

    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let work = async {
        let feed = async {
            if let Some(mut s) = stdin.take() {
                // A program that exits without reading its input is not an error.
                let _ = s.write_all(&input).await;
                let _ = s.shutdown().await;
            }
        };
        let out = read_bounded(stdout, max);
        let err = read_tail(stderr, program.on_stderr_line);
        let (_, out, err) = tokio::join!(feed, out, err);
        wait_without_reaping(pid).await;
        (out, err)
    };
    let result = tokio::select! {
        r = work => Ok(r),
        _ = tokio::time::sleep(program.timeout) => Err(ProgramFailure::Timeout(program.timeout)),
        _ = cancel.cancelled() => Err(ProgramFailure::Cancelled),
    };
    // Whatever happened, nothing of the group outlives the run. The leader is not reaped
    // yet (at most a zombie), so its pid, which is the group id, cannot have been reused:
    // the kill cannot hit another process's group. Then it is reaped.
    kill_group(pgid);
    let status = child.wait().await;
    let (out, stderr_tail) = result?;
    let stdout = out.ok_or(ProgramFailure::OutputTooLarge(max))?;
    let code = status.ok().and_then(|s| s.code());
    Ok(ProgramOutput {
        code,
        stdout,
        stderr_tail,
    })
}

/// The end of a child's stderr, kept as it arrives by a task of its own.
pub(crate) struct StderrTail {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    /// A tail for a child without stderr.
    pub(crate) fn empty() -> Self {
        StderrTail {
            text: Default::default(),
            reader: None,
        }
    }

    /// The text kept so far.
    pub(crate) fn text(&self) -> String {
        self.text.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The text once the reader has seen the end of the pipe (the child and everything
    /// that shared its stderr are gone), or after `within`, whichever comes first: a
    /// grandchild that kept the pipe open cannot hold the caller.
    pub(crate) async fn finished(&mut self, within: Duration) -> String {
        if let Some(reader) = self.reader.as_mut()
            && tokio::time::timeout(within, reader).await.is_ok()
        {
            self.reader = None;
        }
        self.text()
    }

    /// The shared text, with the reader left running until the pipe's end (dropping the
    /// handle detaches the task), for a caller that keeps the text longer than this value.
    pub(crate) fn detach(mut self) -> std::sync::Arc<std::sync::Mutex<String>> {
        self.reader = None;
        std::sync::Arc::clone(&self.text)
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

/// Keeps the last `keep` characters of `reader` (a child's stderr) as it arrives.
pub(crate) fn keep_tail<R>(mut reader: R, keep: usize) -> StderrTail
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let kept = std::sync::Arc::clone(&text);
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut t = kept.lock().unwrap_or_else(|p| p.into_inner());
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
            // Cut now and then, not at every chunk: a flood costs amortised linear time.
            let len = t.chars().count();
            if len > keep * 4 {
                *t = t.chars().skip(len - keep).collect();
            }
        }
    });
    StderrTail {
        text,
        reader: Some(reader),
    }
}

/// Waits until process `pid` has exited, leaving it unreaped (`WNOWAIT`), so the caller can
/// still kill its group safely before reaping it.
pub(crate) async fn wait_without_reaping(pid: Option<i32>) {
    let Some(pid) = pid else { return };
    let _ = tokio::task::spawn_blocking(move || {
        use nix::sys::wait::{Id, WaitPidFlag, waitid};
        loop {
            match waitid(
                Id::Pid(nix::unistd::Pid::from_raw(pid)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                _ => return,
            }
        }
    })
    .await;
}

fn kill_group(pgid: Option<u32>) {
    if let Some(pid) = pgid.and_then(|p| i32::try_from(p).ok()) {
        // The group may be gone already; that is the common case.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Reads all of `r`, or `None` once it passes `max` bytes.
async fn read_bounded<R: AsyncRead + Unpin>(r: Option<R>, max: usize) -> Option<Vec<u8>> {
    let mut r = r?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return Some(out),
            Ok(n) => {
                if out.len() + n > max {
                    return None;
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
    }
}

/// Longest stderr line handed to `on_line`; longer ones are cut.
const MAX_LINE: usize = 4096;

/// Reads all of `r`, keeping the last [`STDERR_TAIL`] bytes and handing each line to
/// `on_line` as it arrives.
async fn read_tail<R: AsyncRead + Unpin>(
    r: Option<R>,
    on_line: Option<&(dyn Fn(&str) + Send + Sync)>,
) -> String {
    let Some(mut r) = r else {
        return String::new();
    };
    let mut tail: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
                if let Some(on_line) = on_line {
                    for &b in &buf[..n] {
                        if b == b'\n' {
                            on_line(&String::from_utf8_lossy(&line));
                            line.clear();
                        } else if line.len() < MAX_LINE {
                            line.push(b);
                        }
                    }
                }
            }
        }
    }
    if let (Some(on_line), false) = (on_line, line.is_empty()) {
        on_line(&String::from_utf8_lossy(&line));
    }
    String::from_utf8_lossy(&tail).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    async fn go(
        cmd: &[&str],
        timeout_ms: u64,
        max: usize,
    ) -> Result<ProgramOutput, ProgramFailure> {
        let argv = argv(cmd);
        run(
            &Program {
                argv: &argv,
                env: &[],
                stdin: b"{\"a\":1}",
                timeout: Duration::from_millis(timeout_ms),
                max_stdout: max,
                on_stderr_line: None,
            },
            &CancellationToken::new(),
        )
        .await
    }

    #[tokio::test]
    async fn passes_stdin_and_reads_stdout() {
        let out = go(&["/bin/cat"], 10_000, 1024).await.unwrap();
        assert_eq!(out.stdout, b"{\"a\":1}");
        assert_eq!(out.code, Some(0));
    }

    #[tokio::test]
    async fn the_environment_is_empty() {
        let out = go(&["/usr/bin/env"], 10_000, 1024).await.unwrap();
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    #[tokio::test]
    async fn deadline_kills_the_group() {
        let started = std::time::Instant::now();
        let e = go(&["/bin/sh", "-c", "sleep 30 & sleep 30"], 200, 1024)
            .await
            .unwrap_err();
        assert_eq!(e, ProgramFailure::Timeout(Duration::from_millis(200)));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn output_is_bounded() {
        let e = go(&["/bin/sh", "-c", "yes | head -c 100000"], 10_000, 1000)
            .await
            .unwrap_err();
        assert_eq!(e, ProgramFailure::OutputTooLarge(1000));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_failure() {
        let e = go(&["/nonexistent/prog"], 1000, 10).await.unwrap_err();
        assert!(matches!(e, ProgramFailure::Spawn(m) if m.contains("/nonexistent/prog")));
    }
}
