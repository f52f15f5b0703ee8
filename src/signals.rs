//! Stopping long-lived hosts (the gateway, `mcp serve`, the mock provider) on SIGINT,
//! SIGTERM or SIGHUP, and one-shot commands on those and SIGQUIT.

/// SIGINT, SIGTERM or SIGHUP (a closed terminal or ssh session; with its default action
/// the host died without stopping its servers' groups: front round 33 F2), each unless the
/// process was started ignoring it. The handlers are installed when this is called, not
/// when the future is first polled: a signal that comes between the two must not kill the
/// process (with the default action) instead of stopping it. Call it inside the runtime.
pub fn shutdown() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind: SignalKind, number| (!ignored(number)).then(|| signal(kind).ok()).flatten();
    let mut term = listen(SignalKind::terminate(), libc::SIGTERM);
    let mut int = listen(SignalKind::interrupt(), libc::SIGINT);
    let mut hup = listen(SignalKind::hangup(), libc::SIGHUP);
    async move {
        let wait = |s: &mut Option<tokio::signal::unix::Signal>| {
            let s = s.take();
            async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
        };
        tokio::select! {
            _ = wait(&mut term) => {}
            _ = wait(&mut int) => {}
            _ = wait(&mut hup) => {}
        }
    }
}

/// For a one-shot command (`catalog`, `call`, `code`, ...): on SIGINT, SIGTERM, SIGHUP or
/// SIGQUIT, every process group it leads is killed and it exits as the signal would have
/// ended it (128 + the signal's number). With the default action the process died alone: its
/// children's leaders followed by the parent-death signal, but what they had started (an
/// MCP server's own children) lived on. Servers stop on these signals their own way. A
/// signal this process was started ignoring (`nohup`, a background job of a script) stays
/// ignored.
pub fn one_shot_ends_on_signals(runtime: &tokio::runtime::Runtime) {
    use tokio::signal::unix::{SignalKind, signal};
    let _in = runtime.enter();
    for (kind, number) in [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::hangup(), libc::SIGHUP),
        // Ctrl-\ reaches only this process: its children lead their own groups.
        (SignalKind::quit(), libc::SIGQUIT),
    ] {
        if ignored(number) {
            continue;
        }
        // Installed now, not at the task's first poll (see [`shutdown`]).
        let Ok(mut stream) = signal(kind) else {
            continue;
        };
        runtime.spawn(async move {
            if stream.recv().await.is_some() {
                crate::process::kill_every_group();
                std::process::exit(128 + number);
            }
        });
    }
}

/// Whether `signal`'s disposition is to be ignored (as inherited across exec).
fn ignored(signal: libc::c_int) -> bool {
    let mut now = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into `now`.
    let read = unsafe { libc::sigaction(signal, std::ptr::null(), now.as_mut_ptr()) };
    // SAFETY: zeroed is a valid `sigaction`, filled in when the call succeeded.
    read == 0 && unsafe { now.assume_init() }.sa_sigaction == libc::SIG_IGN
}
