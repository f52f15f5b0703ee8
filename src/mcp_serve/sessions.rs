//! The sessions of `mcp serve --listen`, bounded: rmcp's local session manager keeps
//! every session until it has been idle for its keep-alive (5 minutes), and one costs
//! ~70 KB, so a client making them as fast as it can held gigabytes.
//!
//! A session is *opening* from its `initialize` until its client says
//! `notifications/initialized` (or asks anything else); then it is *established*. Only
//! opening sessions are ever closed to make room: a client that sends bare `initialize`
//! requests pushes out its own kind, never a session some client is using. At most
//! [`MAX_SESSIONS`] sessions are open; when all are established (or opening and busy), a
//! new `initialize` is refused with `503` until one closes (its client's `DELETE`, or
//! rmcp's keep-alive). A session answering a request, or holding a stream, is never
//! closed here. Each session may hold at most [`MAX_STREAMS`] GET streams (standalone or
//! resumed) at once, and all sessions [`MAX_ALL_STREAMS`]: every stream holds one of the
//! server's connections.
//!
//! A client whose session was closed gets 404 on its next request with that
//! `Mcp-Session-Id` — the MCP answer to an unknown session — and starts a new one
//! (the SDKs re-initialize).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::Stream;
use parking_lot::Mutex;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;

use crate::host::serve::holding;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// Sessions open at once: a handful of agents each hold one; the bound is ~20 MB.
pub const MAX_SESSIONS: usize = 256;

/// GET streams one session may hold at once, and all sessions together: each holds one of
/// the server's 512 connections for as long as its client likes (keep-alive pings pass
/// every timer), and 128 sessions of 4 streams each held all 512.
pub const MAX_STREAMS: usize = 2;
pub const MAX_ALL_STREAMS: usize = 128;

/// rmcp's answer, under 404, to a request naming a session it does not hold.
pub const NOT_FOUND: &str = "Not Found: Session not found";

/// Why the manager refused, or what rmcp's manager said.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(
        "{MAX_SESSIONS} MCP sessions are open and in use, the most this server keeps; retry when one closes"
    )]
    Full,
    #[error("this session holds {MAX_STREAMS} streams already, the most one may hold at once")]
    TooManyStreams,
    #[error("{MAX_ALL_STREAMS} streams are open, the most this server holds at once; retry later")]
    AllStreams,
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

#[derive(Debug)]
struct Entry {
    established: bool,
    /// Requests being answered and streams open.
    busy: usize,
    streams: usize,
    used: Instant,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<SessionId, Entry>,
    /// Streams of all sessions.
    streams: usize,
}

impl Table {
    /// The opening session to close for a new one: not busy, least recently used.
    fn victim(&self) -> Option<SessionId> {
        self.entries
            .iter()
            .filter(|(_, e)| !e.established && e.busy == 0)
            .min_by_key(|(_, e)| e.used)
            .map(|(id, _)| id.clone())
    }

    fn touch(&mut self, id: &SessionId, established: bool) {
        if let Some(e) = self.entries.get_mut(id) {
            e.used = Instant::now();
            e.established |= established;
        }
    }
}

/// [`LocalSessionManager`] within [`MAX_SESSIONS`]; see the module documentation.
pub struct Bounded {
    inner: LocalSessionManager,
    table: Arc<Mutex<Table>>,
    max: usize,
}

/// What a session is busy with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    Initialize,
    Request,
    Stream,
}

/// Marks its session busy while it lives: a request being answered, or a stream.
struct Busy {
    table: Arc<Mutex<Table>>,
    id: SessionId,
    stream: bool,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        if self.stream {
            table.streams = table.streams.saturating_sub(1);
        }
        if let Some(e) = table.entries.get_mut(&self.id) {
            e.busy = e.busy.saturating_sub(1);
            if self.stream {
                e.streams = e.streams.saturating_sub(1);
            }
            e.used = Instant::now();
        }
    }
}

impl Bounded {
    pub fn new(max: usize) -> Self {
        Bounded {
            inner: LocalSessionManager::default(),
            table: Arc::new(Mutex::new(Table::default())),
            max: max.max(1),
        }
    }

    /// Whether a new session would be refused now (checked again when it is made).
    pub fn full(&self) -> bool {
        let table = self.table.lock();
        table.entries.len() >= self.max && table.victim().is_none()
    }

    /// Whether a new stream would be refused now for want of a place among all.
    pub fn streams_full(&self) -> bool {
        self.table.lock().streams >= MAX_ALL_STREAMS
    }

    /// Whether `id` names no session of this server: never one, or one closed (by its
    /// client, to make room, or idle past rmcp's keep-alive). A failure to look is not
    /// taken for a no: the request goes on to rmcp.
    pub async fn is_unknown(&self, id: &str) -> bool {
        matches!(self.has_session(&SessionId::from(id)).await, Ok(false))
    }

    /// Marks `id` busy for `what` until the guard drops (a stream counted, and refused over
    /// [`MAX_STREAMS`] or [`MAX_ALL_STREAMS`]; anything but its `initialize` makes the
    /// session established).
    fn busy(&self, id: &SessionId, what: Use) -> Result<Busy, SessionsError> {
        let stream = what == Use::Stream;
        let mut table = self.table.lock();
        let all = table.streams;
        let counted = match table.entries.get_mut(id) {
            // Not a session of this server (rmcp answers that): nothing to count.
            None => false,
            Some(e) => {
                if stream && e.streams >= MAX_STREAMS {
                    return Err(SessionsError::TooManyStreams);
                }
                if stream && all >= MAX_ALL_STREAMS {
                    return Err(SessionsError::AllStreams);
                }
                e.busy += 1;
                e.streams += usize::from(stream);
                e.used = Instant::now();
                e.established |= what != Use::Initialize;
                table.streams += usize::from(stream);
                stream
            }
        };
        Ok(Busy {
            table: Arc::clone(&self.table),
            id: id.clone(),
            stream: counted,
        })
    }

    /// Forgets sessions rmcp has closed itself (idle past its keep-alive).
    async fn sweep(&self) {
        let ids: Vec<SessionId> = self.table.lock().entries.keys().cloned().collect();
        for id in ids {
            if !matches!(self.inner.has_session(&id).await, Ok(true)) {
                self.table.lock().entries.remove(&id);
            }
        }
    }
}

impl SessionManager for Bounded {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.table.lock().entries.len() >= self.max {
            self.sweep().await;
        }
        let victim = {
            let mut table = self.table.lock();
            if table.entries.len() < self.max {
                None
            } else {
                let victim = table.victim().ok_or(SessionsError::Full)?;
                table.entries.remove(&victim);
                Some(victim)
            }
        };
        if let Some(id) = victim {
            // Already gone (idle, or closed by its client) is fine.
            let _ = self.inner.close_session(&id).await;
        }
        let (id, transport) = self.inner.create_session().await?;
        self.table.lock().entries.insert(
            id.clone(),
            Entry {
                established: false,
                busy: 0,
                streams: 0,
                used: Instant::now(),
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let _busy = self.busy(id, Use::Initialize)?;
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        let has = self.inner.has_session(id).await?;
        let mut table = self.table.lock();
        if has {
            table.touch(id, false);
        } else {
            table.entries.remove(id);
        }
        Ok(has)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.table.lock().entries.remove(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id, Use::Request)?;
        let stream = self.inner.create_stream(id, message).await?;
        Ok(holding(stream, busy))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        // `notifications/initialized`, or any message past `initialize`: a client is there.
        self.table.lock().touch(id, true);
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id, Use::Stream)?;
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(holding(stream, busy))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let busy = self.busy(id, Use::Stream)?;
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(holding(stream, busy))
    }
}
