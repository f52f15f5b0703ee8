//! Running a program for a tool or a hook: no shell, JSON on stdin, bounded output, a
//! deadline, cancellation, and nothing left running afterwards.
//!
//! The program gets an empty environment except the variables named for it, its own
//! process group that dies with the host ([`Leader`]: a deadline kills whatever it started
//! too), and stdout and stderr read up to a bound: past it the program is killed and the run
//! fails, rather than the host buffering an unbounded stream.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::Leader;

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
        .stderr(Stdio::piped());
    for name in program.env {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let mut child =
        Leader::spawn(&mut cmd).map_err(|e| ProgramFailure::Spawn(format!("{exe}: {e}")))?;
    let (mut stdin, stdout, stderr) = child.take_stdio();
    let input = program.stdin.to_vec();
    let max = program.max_stdout;

    // Output past its bound ends the run there: the group is killed at once and the
    // failure says so (review 20 F4: the run waited out the tool's whole timeout and was
    // reported as a timeout).
    let work = async {
        let feed = async {
            if let Some(mut s) = stdin.take() {
                // A program that exits without reading its input is not an error.
                let _ = s.write_all(&input).await;
                let _ = s.shutdown().await;
            }
            Ok(())
        };
        let out = async { read_bounded(stdout, max).await.ok_or(()) };
        let err = async { Ok(read_tail(stderr, program.on_stderr_line).await) };
        let ((), out, err) = tokio::try_join!(feed, out, err)?;
        child.exited().await;
        Ok((out, err))
    };
    let result = tokio::select! {
        r = work => r.map_err(|()| ProgramFailure::OutputTooLarge(max)),
        _ = tokio::time::sleep(program.timeout) => Err(ProgramFailure::Timeout(program.timeout)),
        _ = cancel.cancelled() => Err(ProgramFailure::Cancelled),
    };
    // Whatever happened, nothing of the group outlives the run.
    let status = child.kill_and_reap().await;
    let (stdout, stderr_tail) = result?;
    let code = status.ok().and_then(|s| s.code());
    Ok(ProgramOutput {
        code,
        stdout,
        stderr_tail,
    })
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

    /// A program that keeps writing past the bound and never ends is stopped at the
    /// bound, not at its timeout, and the failure names the bound (review 20 F4).
    #[tokio::test]
    async fn output_past_the_bound_ends_the_run_at_once() {
        let started = std::time::Instant::now();
        let e = go(&["/bin/sh", "-c", "yes; sleep 600"], 60_000, 1000)
            .await
            .unwrap_err();
        assert_eq!(e, ProgramFailure::OutputTooLarge(1000));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_failure() {
        let e = go(&["/nonexistent/prog"], 1000, 10).await.unwrap_err();
        assert!(matches!(e, ProgramFailure::Spawn(m) if m.contains("/nonexistent/prog")));
    }
}
