//! The HTTP server of every front that listens (the gateway, `mcp serve --listen`): one
//! accept loop that bounds what a client can hold without sending a request. A connection
//! has [`HEADER_READ_TIMEOUT`] to send each request's head — a slow sender (slowloris) or
//! a keep-alive connection left idle is closed after it — and at most [`MAX_CONNECTIONS`]
//! are open at once; beyond that new ones wait in the listen backlog until one closes.
//! axum's own `serve` has neither: it sets no timer, so hyper's header timeout never runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// How long a connection may take to send a request's head, counted from when the server
/// starts waiting for it (the connection opened, or its previous response ended). A
/// client sends one in milliseconds; Node's own server closes idle connections after 5 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once: well under the usual 1024 descriptors a process may hold,
/// which its session logs, children and upstream connections need too.
pub const MAX_CONNECTIONS: usize = 512;

/// Serves `app` on `listener` until `stop` resolves; then each connection finishes the
/// request it is answering, and this returns once all are closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, stop, HEADER_READ_TIMEOUT, MAX_CONNECTIONS).await
}

async fn serve_with(
    listener: TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
    header_timeout: Duration,
    max_connections: usize,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(max_connections));
    let stopping = CancellationToken::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            _ = &mut stop => break,
            permit = Arc::clone(&open).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was taken:
                    // the listener itself is fine, so wait a little and go on.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(app.clone());
        let stopping = stopping.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!("connection ended: {e}");
                    }
                }
                _ = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(permit);
        });
    }
    stopping.cancel();
    // Every connection holds a permit until it closes: all back means all closed.
    let _all = open.acquire_many(max_connections as u32).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn server(
        header_timeout: Duration,
        max: usize,
    ) -> (std::net::SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(serve_with(
            listener,
            app,
            async move { stopped.cancelled().await },
            header_timeout,
            max,
        ));
        (addr, stop)
    }

    async fn get(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out).await;
        out
    }

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_head_is_closed() {
        let (addr, stop) = server(Duration::from_millis(300), 8).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nx-slow: ").await.unwrap();
        // The server closes it: a read ends (EOF or an error answer), not waits forever.
        let mut buf = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut buf)).await;
        assert!(ended.is_ok(), "the half-sent request was never cut");
        let mut fine = TcpStream::connect(addr).await.unwrap();
        assert!(get(&mut fine).await.ends_with("ok"));
        stop.cancel();
    }

    #[tokio::test]
    async fn connections_over_the_cap_wait_until_one_closes() {
        let (addr, stop) = server(Duration::from_secs(60), 1).await;
        let held = TcpStream::connect(addr).await.unwrap();
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        let answer = tokio::spawn(async move { get(&mut waiting).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !answer.is_finished(),
            "a second connection was served over a cap of one"
        );
        drop(held);
        let answer = tokio::time::timeout(Duration::from_secs(60), answer)
            .await
            .expect("served once the first closed")
            .unwrap();
        assert!(answer.ends_with("ok"), "{answer}");
        stop.cancel();
    }
}
