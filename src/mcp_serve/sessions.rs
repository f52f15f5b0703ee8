//! The sessions of `mcp serve --listen`, bounded: rmcp's local session manager keeps
//! every session until it has been idle for its keep-alive (5 minutes), and one costs
//! ~70 KB, so a client making them as fast as it can held gigabytes. At most
//! [`MAX_SESSIONS`] live here; opening one more closes the least recently used first.
//! A client whose session was closed gets 404 on its next request with that
//! `Mcp-Session-Id` — the MCP answer to an unknown session — and starts a new one
//! (the SDKs re-initialize).

use std::num::NonZeroUsize;

use futures::Stream;
use parking_lot::Mutex;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// Sessions open at once: a handful of agents each hold one; the bound is ~20 MB.
pub const MAX_SESSIONS: usize = 256;

/// [`LocalSessionManager`] within [`MAX_SESSIONS`]; see the module documentation.
pub struct Bounded {
    inner: LocalSessionManager,
    /// Session ids, least recently used last out.
    used: Mutex<lru::LruCache<SessionId, ()>>,
    max: NonZeroUsize,
}

impl Bounded {
    pub fn new(max: usize) -> Self {
        let max = NonZeroUsize::new(max).unwrap_or(NonZeroUsize::MIN);
        Bounded {
            inner: LocalSessionManager::default(),
            used: Mutex::new(lru::LruCache::unbounded()),
            max,
        }
    }

    fn touch(&self, id: &SessionId) {
        self.used.lock().promote(id);
    }
}

impl SessionManager for Bounded {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let oldest: Vec<SessionId> = {
            let mut used = self.used.lock();
            let mut out = Vec::new();
            while used.len() >= self.max.get() {
                match used.pop_lru() {
                    Some((id, ())) => out.push(id),
                    None => break,
                }
            }
            out
        };
        for id in oldest {
            // Already gone (idle, or closed by its client) is fine.
            let _ = self.inner.close_session(&id).await;
        }
        let (id, transport) = self.inner.create_session().await?;
        self.used.lock().put(id.clone(), ());
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        let has = self.inner.has_session(id).await?;
        if has {
            self.touch(id);
        } else {
            self.used.lock().pop(id);
        }
        Ok(has)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.used.lock().pop(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.resume(id, last_event_id).await
    }
}
