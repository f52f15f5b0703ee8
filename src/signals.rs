//! Stopping long-lived hosts (the gateway, `mcp serve`, the mock provider) on SIGINT or
//! SIGTERM.

/// SIGINT or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled: a signal that comes between the two must not kill the process
/// (with the default action) instead of stopping it. Call it inside the runtime.
pub fn shutdown() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
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
        }
    }
}
