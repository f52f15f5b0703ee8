//! The HTTP server of every front that listens (the gateway, `mcp serve --listen`, the mock
//! provider): one accept loop that bounds what a client can hold by being slow. A
//! connection has [`HEADER_READ_TIMEOUT`] to send each request's head — a slow sender
//! (slowloris) or a keep-alive connection left idle is closed after it — then
//! [`Limits::body`] to send the whole body; a response the client leaves unread for
//! [`Limits::write`] (the socket buffer full, no byte taken: per chunk of a stream too)
//! is dropped with its connection, and so is one that reads, but slower than
//! [`MIN_READ_RATE`] over the connection's life (a reader that takes a few bytes every
//! 29 s kept a stream, and the memory behind it, for as long as it liked). Every request
//! passes the listener's [`Guard`] before any route sees it: an argument of [`serve`], so
//! no front can listen without one. At most [`MAX_CONNECTIONS`] are open at once; beyond
//! that new ones wait in the listen backlog until one closes. On stop, requests in flight
//! get [`Limits::grace`] to finish; then their connections are dropped, so a stop always
//! ends. axum's own `serve` has none of these: it sets no timer, so hyper's header
//! timeout never runs.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

use super::guard::Guard;
use crate::config::ServerConfig;

/// How long a connection may take to send a request's head, counted from when the server
/// starts waiting for it (the connection opened, or its previous response ended). A
/// client sends one in milliseconds; Node's own server closes idle connections after 5 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once: well under the usual 1024 descriptors a process may hold,
/// which its session logs, children and upstream connections need too.
pub const MAX_CONNECTIONS: usize = 512;

/// The slowest a client may read, averaged over its connection: its writes may have
/// waited for it, in all, [`Limits::write`] plus a second per this many bytes it took.
/// A client on this machine reads hundreds of megabytes a second; one across the world,
/// megabytes.
pub const MIN_READ_RATE: u64 = 32 * 1024;

/// What a client may take; `[server]` sets the last three.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header: Duration,
    /// To send a request's whole body, from the end of its head: a total, not an idle
    /// time, so a byte now and then does not keep a connection.
    pub body: Duration,
    /// How long a write may wait for the client to read.
    pub write: Duration,
    /// How long requests in flight may take to finish once the server stops.
    pub grace: Duration,
    pub connections: usize,
    /// Bytes a second; see [`MIN_READ_RATE`].
    pub min_read_rate: u64,
}

impl Limits {
    pub fn of(config: &ServerConfig) -> Self {
        Limits {
            header: HEADER_READ_TIMEOUT,
            body: Duration::from_secs(config.body_timeout_s),
            write: Duration::from_secs(config.write_timeout_s),
            grace: Duration::from_secs(config.shutdown_grace_s),
            connections: MAX_CONNECTIONS,
            min_read_rate: MIN_READ_RATE,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::of(&ServerConfig::default())
    }
}

/// `stream` as it is, keeping `held` (a place among the answers sent at once, a session's
/// busy mark) until the stream is dropped: its last item sent, or its client gone. One
/// helper for every answer that holds a bounded place while a slow client reads it.
pub fn holding<S: futures::Stream, H>(stream: S, held: H) -> impl futures::Stream<Item = S::Item> {
    futures::StreamExt::map(stream, move |item| {
        let _held = &held;
        item
    })
}

/// A handler that panics is answered 500, not with a reset connection, and what it held
/// is given back as it unwinds. A panic is a bug (sandbox round 27 F1: a cut inside a
/// character), and one request's bug must not look like the server going away.
async fn caught(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(_) => {
            tracing::error!("a request's handler panicked; answered 500");
            let body = serde_json::json!({"error": {
                "type": "server_error",
                "code": "internal",
                "message": "toolsearch failed while answering this request (a bug: its log says where)",
            }});
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(body),
            )
                .into_response()
        }
    }
}

/// Serves `app` on `listener` within `limits` until `stop` resolves; then each connection
/// finishes the request it is answering (for at most [`Limits::grace`]), and this returns
/// once all are closed. A request `guard` refuses gets its answer and never reaches `app`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    guard: Guard,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let guard = Arc::new(guard);
    let app = app.layer(axum::middleware::from_fn(caught));
    let open = Arc::new(Semaphore::new(limits.connections));
    let idle = Arc::new(Idle::default());
    let stopping = CancellationToken::new();
    let dropping = CancellationToken::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        // One connection taken at a time: with every place taken, it waits below for one,
        // and the next ones in the listen backlog.
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
        // A connection is waiting and every place is taken: the connection idle longest
        // (no request in flight on it) is closed to make room. Kept until their head
        // timeout, idle connections held every place, and a client that reopened each one
        // closed kept honest requests out for good (front round 11: 1,000 idle sockets,
        // honest requests timed out unaccepted).
        // Looked at again and again while it waits: a connection idle too briefly to close
        // now may be idle long enough soon.
        let permit = loop {
            if let Ok(p) = Arc::clone(&open).try_acquire_owned() {
                break Some(p);
            }
            idle.close_the_longest();
            tokio::select! {
                _ = &mut stop => break None,
                permit = Arc::clone(&open).acquire_owned() => break permit.ok(),
                () = tokio::time::sleep(NEVER_ASKED_BEFORE_CLOSED / 2) => {}
            }
        };
        let Some(permit) = permit else { break };
        let app = app.clone();
        let guard = Arc::clone(&guard);
        let conn_state = idle.open();
        let busy_state = Arc::clone(&conn_state);
        let service =
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                // Busy from its head to the end of its response's body; receiving until its
                // own body has come.
                let busy = Busy::of(&busy_state);
                let receiving =
                    (!request.body().is_end_stream()).then(|| Receiving::of(&busy_state));
                let refused =
                    guard.check_request(request.method(), request.uri(), request.headers());
                let request = request.map(|b| {
                    axum::body::Body::new(Arriving {
                        inner: Deadline::new(b, limits.body),
                        receiving,
                    })
                });
                let mut app = app.clone();
                let answer = guard.answer;
                async move {
                    let response = match refused {
                        Ok(()) => tower_service::Service::call(&mut app, request).await,
                        Err(refusal) => Ok(answer(refusal)),
                    };
                    response.map(|r| {
                        r.map(|body| {
                            axum::body::Body::new(BusyBody {
                                inner: body,
                                _busy: busy,
                            })
                        })
                    })
                }
            });
        let (stopping, dropping) = (stopping.clone(), dropping.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header);
            let stream = Arc::new(stream);
            let io = TokioIo::new(Stalled::new(
                Shared(Arc::clone(&stream)),
                limits.write,
                limits.min_read_rate,
            ));
            let conn = builder.serve_connection(io, service);
            let mut conn = std::pin::pin!(conn);
            let mut left = std::pin::pin!(client_left(stream));
            let closed = conn_state.close.clone();
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!("connection ended: {e}");
                    }
                }
                // Idle longest when every place was taken (see the accept loop).
                () = closed.cancelled() => tracing::debug!("an idle connection closed to make room"),
                // Dropping the connection drops the request's handler with it.
                () = left.as_mut() => tracing::debug!("the client closed its connection"),
                _ = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        () = left.as_mut() => {}
                        _ = dropping.cancelled() => {}
                    }
                }
            }
            drop(permit);
            drop(conn_state);
        });
    }
    stopping.cancel();
    // Every connection holds a permit until it closes: all back means all closed.
    let all = limits.connections as u32;
    if tokio::time::timeout(limits.grace, open.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight {} s after the stop: dropped",
            limits.grace.as_secs()
        );
        dropping.cancel();
        let _all = open.acquire_many(all).await;
    }
    Ok(())
}

/// How long a connection must have been idle before it may be closed for another: a
/// client sends its request's head in milliseconds of connecting (or of its last answer),
/// so a connection this idle is waiting, not about to ask.
pub const IDLE_BEFORE_CLOSED: Duration = Duration::from_secs(1);

/// How long a connection that has sent nothing yet is kept before it may be closed for
/// another: a client writes its first request as soon as it connects.
pub const NEVER_ASKED_BEFORE_CLOSED: Duration = Duration::from_millis(100);

/// The open connections, for closing the one idle longest when every place is taken.
#[derive(Default)]
struct Idle {
    open: parking_lot::Mutex<std::collections::HashMap<u64, std::sync::Weak<Conn>>>,
    next: std::sync::atomic::AtomicU64,
}

/// One open connection: its requests in flight, since when it has had none, and how to
/// close it.
struct Conn {
    number: u64,
    busy: std::sync::atomic::AtomicUsize,
    /// Requests whose bodies are still arriving, and when a byte of one last came.
    receiving: std::sync::atomic::AtomicUsize,
    progress: parking_lot::Mutex<Instant>,
    /// Requests answered on it.
    answered: std::sync::atomic::AtomicUsize,
    idle_since: parking_lot::Mutex<Instant>,
    close: CancellationToken,
    all: std::sync::Weak<Idle>,
}

impl Idle {
    fn open(self: &Arc<Self>) -> Arc<Conn> {
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let conn = Arc::new(Conn {
            number,
            busy: Default::default(),
            receiving: Default::default(),
            progress: parking_lot::Mutex::new(Instant::now()),
            answered: Default::default(),
            idle_since: parking_lot::Mutex::new(Instant::now()),
            close: CancellationToken::new(),
            all: Arc::downgrade(self),
        });
        self.open.lock().insert(number, Arc::downgrade(&conn));
        conn
    }

    /// Closes the connection with no request in flight that has been idle longest, if any.
    fn close_the_longest(&self) {
        // Taken out of the lock first: a connection whose task ends meanwhile is dropped
        // here, and its `Drop` takes the lock (taken still, it waited on itself for ever).
        let open: Vec<Arc<Conn>> = self
            .open
            .lock()
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        let ranked: Vec<(u8, Instant, bool, &Arc<Conn>)> = open
            .iter()
            .filter(|c| !c.close.is_cancelled())
            .filter_map(|c| {
                c.closable()
                    .map(|(class, since, due)| (class, since, due, c))
            })
            .collect();
        // Only the first class there is: a kept-alive client is never closed while a
        // connection that never asked is open, however young (a flood's sockets, reopened
        // as fast as closed, were always too young, and the honest one went instead).
        let Some(first) = ranked.iter().map(|r| r.0).min() else {
            return;
        };
        let longest = ranked
            .iter()
            .filter(|r| r.0 == first && r.2)
            .min_by_key(|r| r.1);
        if let Some((_, _, _, conn)) = longest {
            conn.close.cancel();
        }
    }
}

impl Conn {
    /// Whether it may be closed for a waiting connection, and how soon among the others
    /// (the least first): one that never asked anything (after [`NEVER_ASKED_BEFORE_CLOSED`]),
    /// then one whose request body has stalled, then a kept-alive one between requests
    /// (both after [`IDLE_BEFORE_CLOSED`]); the longest waiting first within each. Never one
    /// whose request is being worked on or answered. Ranked by idle time alone, a flood's
    /// sockets, reopened as fast as closed, were always too young, and the one closed was
    /// an honest client's kept-alive connection between two calls; and heads sent with a
    /// body never sent counted as busy, so 512 of them held every place (front round 12).
    fn closable(&self) -> Option<(u8, Instant, bool)> {
        use std::sync::atomic::Ordering::SeqCst;
        let (busy, receiving) = (self.busy.load(SeqCst), self.receiving.load(SeqCst));
        let (class, since, grace) = if busy == 0 && self.answered.load(SeqCst) == 0 {
            (0, *self.idle_since.lock(), NEVER_ASKED_BEFORE_CLOSED)
        } else if busy > 0 && receiving > 0 {
            (1, *self.progress.lock(), IDLE_BEFORE_CLOSED)
        } else if busy == 0 {
            (2, *self.idle_since.lock(), IDLE_BEFORE_CLOSED)
        } else {
            return None;
        };
        Some((class, since, since.elapsed() >= grace))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(all) = self.all.upgrade() {
            all.open.lock().remove(&self.number);
        }
    }
}

/// A request in flight on a connection, from its head to its response's last byte.
struct Busy(Arc<Conn>);

impl Busy {
    fn of(conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Busy(Arc::clone(conn))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock() = Instant::now();
        self.0
            .answered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A request body still arriving on a connection: ends when the body has, or is dropped.
struct Receiving(Arc<Conn>);

impl Receiving {
    fn of(conn: &Arc<Conn>) -> Self {
        *conn.progress.lock() = Instant::now();
        conn.receiving
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Receiving(Arc::clone(conn))
    }
}

impl Drop for Receiving {
    fn drop(&mut self) {
        self.0
            .receiving
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A request body that tells its connection when bytes of it come and when it has all come.
struct Arriving<B> {
    inner: B,
    receiving: Option<Receiving>,
}

impl<B> HttpBody for Arriving<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            Some(Ok(_)) if !self.inner.is_end_stream() => {
                if let Some(r) = &self.receiving {
                    *r.0.progress.lock() = Instant::now();
                }
            }
            _ => self.receiving = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its connection busy until it is sent or dropped.
struct BusyBody {
    inner: axum::body::Body,
    _busy: Busy,
}

impl HttpBody for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How often a connection whose unread bytes keep it readable is looked at again for its
/// client having closed it.
const LEFT_CHECK: Duration = Duration::from_secs(1);

/// Resolves once the client has closed its side of the connection (or reset it). hyper
/// notices that only while its read buffer is empty: one byte pipelined after a request
/// (read along with it) hid a client that left, and its turn ran to its end. The end of
/// the client's sending is taken as the client gone, as Go's server and nginx take it: a
/// client that half-closes after its request (rare: no SDK does) gets no answer.
async fn client_left(stream: Arc<tokio::net::TcpStream>) {
    loop {
        match stream.ready(tokio::io::Interest::READABLE).await {
            Ok(ready) if ready.is_read_closed() => return,
            // Readable for bytes no one reads yet (the next request, or one pipelined
            // early): the closed state is kept once seen, so a look now and then finds it.
            Ok(_) => tokio::time::sleep(LEFT_CHECK).await,
            Err(_) => return,
        }
    }
}

/// A connection shared by hyper (reading and writing) and [`client_left`] (watching it
/// close): reads and writes go through its readiness, as the stream's own would.
struct Shared(Arc<tokio::net::TcpStream>);

impl AsyncRead for Shared {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // `try_read_buf` clears the readiness it found stale, so the next poll waits.
            match self.0.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done.map(|_| ())),
            }
        }
    }
}

impl Shared {
    /// `write` once the socket can take it, as the stream's own writes wait.
    fn written(
        &self,
        cx: &mut Context<'_>,
        write: impl Fn(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match write(&self.0) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written(cx, |s| s.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.written(cx, |s| s.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let closed = socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write);
        // Already closed by the client is closed.
        Poll::Ready(match closed {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

/// Bytes of a request body gathered into one frame before it is passed on: a chunked body
/// of one-byte chunks was one frame (and one allocation, pinning hyper's read buffer) per
/// byte, 37 times its size in memory.
const GATHER_BYTES: usize = 16 * 1024;

/// A request body that must end within a time of its start: past it, reading it fails
/// (the handler answers 400, or its read error) and the connection is closed. Small data
/// frames are gathered into frames of [`GATHER_BYTES`] (or what has arrived when no more
/// has come when the body ends), so a body costs about its size whatever its chunking.
struct Deadline<B> {
    inner: B,
    timer: Pin<Box<Sleep>>,
    limit: Duration,
    gathered: bytes::BytesMut,
    /// A trailers frame that came while data was gathered: passed on after it.
    held: Option<Frame<Bytes>>,
}

impl<B> Deadline<B> {
    fn new(inner: B, limit: Duration) -> Self {
        Deadline {
            inner,
            timer: Box::pin(tokio::time::sleep(limit)),
            limit,
            gathered: bytes::BytesMut::new(),
            held: None,
        }
    }

    fn flush(&mut self) -> Frame<Bytes> {
        Frame::data(self.gathered.split().freeze())
    }
}

impl<B> HttpBody for Deadline<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.held.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if this.gathered.is_empty() && data.len() >= GATHER_BYTES => {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(data) => {
                        this.gathered.extend_from_slice(&data);
                        if this.gathered.len() >= GATHER_BYTES {
                            return Poll::Ready(Some(Ok(this.flush())));
                        }
                    }
                    Err(trailers) if this.gathered.is_empty() => {
                        return Poll::Ready(Some(Ok(trailers)));
                    }
                    Err(trailers) => {
                        this.held = Some(trailers);
                        return Poll::Ready(Some(Ok(this.flush())));
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) if this.gathered.is_empty() => return Poll::Ready(None),
                Poll::Ready(None) => return Poll::Ready(Some(Ok(this.flush()))),
                // Not passed on yet even when some is gathered: hyper hands over one chunk
                // per poll, so that would be a frame per chunk again. The body's end, or
                // enough of it, passes it on; every consumer here reads whole bodies.
                Poll::Pending => break,
            }
        }
        ready!(this.timer.as_mut().poll(cx));
        Poll::Ready(Some(Err(format!(
            "the request body was not sent within {} s",
            this.limit.as_secs()
        )
        .into())))
    }

    fn is_end_stream(&self) -> bool {
        self.gathered.is_empty() && self.held.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let more = self.gathered.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(more));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(more));
        }
        hint
    }
}

/// A connection whose writes fail once one has waited [`Limits::write`] for the client to
/// read, or once they have waited, in all, longer than the bytes the client took pay for
/// (see [`MIN_READ_RATE`]): hyper then drops the connection and the response it held.
struct Stalled<S> {
    inner: S,
    limit: Duration,
    min_read_rate: u64,
    /// Set while a write waits; cleared when one goes through.
    waiting: Option<Pin<Box<Sleep>>>,
    /// When the write waiting now began.
    since: Option<Instant>,
    /// Time writes have waited before the current wait, and bytes written, over the
    /// connection's life.
    waited: Duration,
    written: u64,
}

impl<S> Stalled<S> {
    fn new(inner: S, limit: Duration, min_read_rate: u64) -> Self {
        Stalled {
            inner,
            limit,
            min_read_rate: min_read_rate.max(1),
            waiting: None,
            since: None,
            waited: Duration::ZERO,
            written: 0,
        }
    }

    /// How long the wait that begins now may last: [`Limits::write`], or less when the
    /// connection has used up what its reading paid for.
    fn allowance(&self) -> Duration {
        let earned =
            self.limit + Duration::from_secs_f64(self.written as f64 / self.min_read_rate as f64);
        earned.saturating_sub(self.waited).min(self.limit)
    }

    /// `poll` as it went (`wrote` counts a write's bytes), or an error once writing has
    /// waited too long.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
        wrote: impl Fn(&T) -> usize,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(result) = &poll {
            if let Ok(value) = result {
                self.written = self.written.saturating_add(wrote(value) as u64);
            }
            if let Some(since) = self.since.take() {
                self.waited += since.elapsed();
            }
            self.waiting = None;
            return poll;
        }
        if self.waiting.is_none() {
            self.since = Some(Instant::now());
            self.waiting = Some(Box::pin(tokio::time::sleep(self.allowance())));
        }
        let Some(timer) = self.waiting.as_mut() else {
            return Poll::Pending;
        };
        ready!(timer.as_mut().poll(cx));
        let message = if self.waited.is_zero() {
            format!("the client read nothing for {} s", self.limit.as_secs())
        } else {
            format!(
                "the client reads too slowly: writes waited {} s in all for the {} bytes it took (at least {} bytes a second)",
                (self.waited + self.since.map_or(Duration::ZERO, |s| s.elapsed())).as_secs(),
                self.written,
                self.min_read_rate
            )
        };
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalled<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.timed(cx, poll, |n| *n)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.timed(cx, poll, |n| *n)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.timed(cx, poll, |_| 0)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.timed(cx, poll, |_| 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    fn limits(max: usize) -> Limits {
        Limits {
            header: Duration::from_secs(60),
            body: Duration::from_secs(60),
            write: Duration::from_secs(60),
            grace: Duration::from_secs(60),
            connections: max,
            min_read_rate: 1,
        }
    }

    /// A server of `/` (ok), `/echo` (the body's length), `/big` (32 MiB) and `/hang`
    /// (never answers; `hung` is told when it is asked).
    async fn server(
        limits: Limits,
        hung: Option<Arc<tokio::sync::Notify>>,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route(
                "/echo",
                axum::routing::post(
                    |body: Result<Bytes, axum::extract::rejection::BytesRejection>| async move {
                        match body {
                            Ok(b) => b.len().to_string(),
                            Err(e) => e.body_text(),
                        }
                    },
                ),
            )
            .route(
                "/frames",
                axum::routing::post(|body: axum::body::Body| async move {
                    use futures::StreamExt;
                    let mut stream = body.into_data_stream();
                    let (mut frames, mut bytes) = (0usize, 0usize);
                    while let Some(Ok(data)) = stream.next().await {
                        frames += 1;
                        bytes += data.len();
                    }
                    format!("{frames} {bytes}")
                }),
            )
            .route(
                "/big",
                axum::routing::get(|| async { vec![b'x'; 32 << 20] }),
            )
            .route(
                "/panic",
                axum::routing::get(|| async {
                    if std::hint::black_box(true) {
                        panic!("a handler's bug");
                    }
                    "never"
                }),
            )
            .route(
                "/hang",
                axum::routing::get(move || async move {
                    if let Some(h) = hung {
                        h.notify_one();
                    }
                    std::future::pending::<()>().await
                }),
            );
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let guard = Guard::new(true, &[], Guard::plain);
        let task = tokio::spawn(serve(listener, app, guard, limits, async move {
            stopped.cancelled().await
        }));
        (addr, stop, task)
    }

    async fn get(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out).await;
        out
    }

    /// Whether a fresh connection is answered within a minute.
    async fn answered(addr: std::net::SocketAddr) -> bool {
        let asked = async {
            let mut fine = TcpStream::connect(addr).await.unwrap();
            get(&mut fine).await
        };
        matches!(tokio::time::timeout(Duration::from_secs(60), asked).await, Ok(a) if a.ends_with("ok"))
    }

    /// A handler that panics is a 500 with a JSON error, not a reset connection, and the
    /// server answers on (sandbox round 27 F1).
    #[tokio::test]
    async fn a_handler_that_panics_is_answered_500() {
        let (addr, stop, _) = server(limits(8), None).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /panic HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let _ = client.read_to_string(&mut out).await;
        assert!(out.starts_with("HTTP/1.1 500"), "{out}");
        assert!(out.contains("\"server_error\""), "{out}");
        assert!(answered(addr).await);
        stop.cancel();
    }

    /// A client that leaves while its request is worked on drops the handler, whatever it
    /// left unread behind its request (a pipelined byte hid its leaving from hyper, and a
    /// turn ran to its end for no one), and whether it closed or only stopped sending.
    #[tokio::test]
    async fn a_client_that_leaves_mid_request_drops_its_handler_even_with_bytes_pipelined() {
        struct Told(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Told {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        type Slot = Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;
        for (trailing, half_close) in [
            (&b""[..], false),
            (&b"X"[..], false),
            (&b"GET / HT"[..], false),
            (&b"X"[..], true),
        ] {
            let slot: Slot = Arc::default();
            let (tx, dropped) = tokio::sync::oneshot::channel();
            *slot.lock().unwrap() = Some(tx);
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let held = Arc::clone(&slot);
            let app = axum::Router::new().route(
                "/held",
                axum::routing::get(move || {
                    let told = Told(held.lock().unwrap().take());
                    async move {
                        let _told = told;
                        std::future::pending::<()>().await
                    }
                }),
            );
            let stop = CancellationToken::new();
            let stopped = stop.clone();
            let guard = Guard::new(true, &[], Guard::plain);
            tokio::spawn(serve(listener, app, guard, limits(8), async move {
                stopped.cancelled().await
            }));
            let mut client = TcpStream::connect(addr).await.unwrap();
            let mut request = b"GET /held HTTP/1.1\r\nhost: localhost\r\n\r\n".to_vec();
            request.extend_from_slice(trailing);
            client.write_all(&request).await.unwrap();
            // Wait until the handler runs, so the leaving is mid-request.
            while slot.lock().unwrap().is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if half_close {
                client.shutdown().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            drop(client);
            let gone = tokio::time::timeout(Duration::from_secs(30), dropped).await;
            assert!(
                gone.is_ok(),
                "handler kept running after its client left ({trailing:?}, half-close {half_close})"
            );
            stop.cancel();
        }
    }

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_head_is_closed() {
        let (addr, stop, _) = server(
            Limits {
                header: Duration::from_millis(300),
                ..limits(8)
            },
            None,
        )
        .await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nx-slow: ").await.unwrap();
        // The server closes it: a read ends (EOF or an error answer), not waits forever.
        let mut buf = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut buf)).await;
        assert!(ended.is_ok(), "the half-sent request was never cut");
        assert!(answered(addr).await);
        stop.cancel();
    }

    /// Every place taken by requests whose bodies never come and one kept-alive client
    /// between two calls: a stalled body is closed for a waiting connection, not the
    /// kept-alive client (front round 12: 512 heads without their bodies held every place
    /// for the body timeout, and the closer picked honest kept-alive connections).
    #[tokio::test]
    async fn a_stalled_body_is_closed_before_a_kept_alive_client() {
        let (addr, stop, _) = server(limits(3), None).await;
        // One request on a connection kept open, read to its body's end.
        async fn ask_kept(c: &mut TcpStream) -> bool {
            if c.write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .await
                .is_err()
            {
                return false;
            }
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.ends_with(b"ok") {
                match tokio::time::timeout(Duration::from_secs(60), c.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                    _ => return false,
                }
            }
            true
        }
        let mut kept = TcpStream::connect(addr).await.unwrap();
        assert!(ask_kept(&mut kept).await);
        let mut stalled = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"POST /echo HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\nx")
                .await
                .unwrap();
            stalled.push(c);
        }
        assert!(answered(addr).await, "stalled bodies kept a request out");
        assert!(
            ask_kept(&mut kept).await,
            "the kept-alive client was closed"
        );
        stop.cancel();
    }

    /// Connections opened and closed as fast as they can, over the cap, while honest
    /// requests come: closing the idle ones for new ones must never stall the accept loop
    /// (a connection whose task ended while the loop looked for the idle longest was dropped
    /// under the lock its `Drop` takes, and the server stopped accepting for good).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_churn_of_idle_connections_never_stalls_the_server() {
        let (addr, stop, _) = server(limits(4), None).await;
        let until = Instant::now() + Duration::from_secs(3);
        let churn: Vec<_> = (0..16)
            .map(|_| {
                tokio::spawn(async move {
                    let mut held = Vec::new();
                    while Instant::now() < until {
                        if let Ok(c) = TcpStream::connect(addr).await {
                            held.push(c);
                        }
                        if held.len() > 3 {
                            held.remove(0);
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        while Instant::now() < until {
            let mut fine = TcpStream::connect(addr).await.unwrap();
            let got = tokio::time::timeout(Duration::from_secs(60), get(&mut fine)).await;
            assert!(
                matches!(&got, Ok(a) if a.ends_with("ok")),
                "the server stopped answering under churn: {got:?}"
            );
        }
        for c in churn {
            c.await.unwrap();
        }
        assert!(answered(addr).await);
        stop.cancel();
    }

    /// Over the cap, a connection waits while every place has a request in flight (an idle
    /// one would be closed for it: see the test above).
    #[tokio::test]
    async fn connections_over_the_cap_wait_until_one_closes() {
        let hung = Arc::new(tokio::sync::Notify::new());
        let (addr, stop, _) = server(limits(1), Some(Arc::clone(&hung))).await;
        let mut held = TcpStream::connect(addr).await.unwrap();
        held.write_all(b"GET /hang HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        hung.notified().await;
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

    #[tokio::test]
    async fn a_body_never_finished_is_cut_and_its_connection_freed() {
        let (addr, stop, _) = server(
            Limits {
                body: Duration::from_millis(300),
                ..limits(1)
            },
            None,
        )
        .await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"POST /echo HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\nx")
            .await
            .unwrap();
        let mut out = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(60), slow.read_to_end(&mut out)).await;
        assert!(ended.is_ok(), "the half-sent body was never cut");
        let out = String::from_utf8_lossy(&out);
        assert!(out.contains("not sent within"), "{out}");
        // The one connection allowed is free again.
        assert!(answered(addr).await);
        stop.cancel();
    }

    /// Every place taken by connections that send nothing: the one idle longest is closed
    /// for a new one, so an honest request is answered at once, not after the idle ones'
    /// head timeout; one with a request in flight is never closed for it.
    #[tokio::test]
    async fn idle_connections_make_room_for_new_ones_and_busy_ones_stay() {
        let hung = Arc::new(tokio::sync::Notify::new());
        let (addr, stop, _) = server(limits(3), Some(Arc::clone(&hung))).await;
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /hang HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        hung.notified().await;
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        for _ in 0..3 {
            assert!(answered(addr).await, "idle connections kept a request out");
        }
        // The busy one was not closed: its request is still waiting, its socket open.
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(300), busy.read(&mut byte)).await;
        assert!(read.is_err(), "the busy connection was closed: {read:?}");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_dropped() {
        let (addr, stop, _) = server(
            Limits {
                write: Duration::from_millis(300),
                ..limits(1)
            },
            None,
        )
        .await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /big HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        // `idle` reads nothing and stays open: only the server can free the one slot.
        assert!(
            answered(addr).await,
            "an unread response held its connection"
        );
        drop(idle);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_stop_ends_within_its_grace_whatever_is_in_flight() {
        let hung = Arc::new(tokio::sync::Notify::new());
        let (addr, stop, task) = server(
            Limits {
                grace: Duration::from_millis(300),
                ..limits(8)
            },
            Some(Arc::clone(&hung)),
        )
        .await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET /hang HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        hung.notified().await;
        stop.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(60), task).await;
        assert!(ended.is_ok(), "the server never stopped");
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
    }

    #[tokio::test]
    async fn a_request_the_guard_refuses_never_reaches_a_route() {
        let hung = Arc::new(tokio::sync::Notify::new());
        let (addr, stop, _) = server(limits(8), Some(Arc::clone(&hung))).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        // `/hang` never answers once reached: an answer at all means it was not.
        client
            .write_all(b"GET /hang HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let read = tokio::time::timeout(Duration::from_secs(60), client.read_to_string(&mut out));
        assert!(read.await.is_ok(), "the refused request reached its route");
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        assert!(out.contains("evil.example"), "{out}");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_client_that_reads_but_too_slowly_is_dropped() {
        let (addr, stop, _) = server(
            Limits {
                write: Duration::from_secs(2),
                // Reading 256 KiB each half second is 0.5 MiB/s, well under this rate.
                min_read_rate: 10 << 20,
                ..limits(8)
            },
            None,
        )
        .await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /big HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let mut taken = 0usize;
        let mut buf = vec![0u8; 256 << 10];
        // Each read takes a little, so no single write waits the 2 s: only the
        // connection's total wait against what it read can end it.
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => taken += n,
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "a reader at 0.5 MiB/s kept its response {} s",
                started.elapsed().as_secs()
            );
        }
        assert!(taken < 32 << 20, "the whole response was read: {taken}");
        assert!(answered(addr).await);
        stop.cancel();
    }

    #[tokio::test]
    async fn a_body_of_tiny_chunks_is_gathered_into_few_frames() {
        let (addr, stop, _) = server(limits(8), None).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut request = b"POST /frames HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
        for _ in 0..20_000 {
            request.extend_from_slice(b"1\r\nx\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        client.write_all(&request).await.unwrap();
        let mut out = String::new();
        let read = tokio::time::timeout(Duration::from_secs(60), client.read_to_string(&mut out));
        assert!(read.await.is_ok());
        let answer = out
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .to_string();
        let (frames, bytes) = answer.split_once(' ').expect(&out);
        assert_eq!(bytes, "20000", "{out}");
        let frames: usize = frames.parse().unwrap();
        assert!(
            frames < 500,
            "20,000 one-byte chunks came as {frames} frames"
        );
        stop.cancel();
    }
}
