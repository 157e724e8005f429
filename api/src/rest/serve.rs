//! The accept and serve loop of both REST listeners (unix socket and TLS), in place of
//! `axum::serve`, which has no timeouts and no connection limits.
//!
//! Each accepted connection is first admitted by the listener's [`Gate`] (or closed at once),
//! then runs in a task of its own: the listener's `open` (peer credentials, or a TLS handshake
//! under its own deadline, so one slow handshake never delays another), the first request head
//! ([`head::read_first`]) and then hyper's HTTP/1.1 connection with `idle_timeout` for later
//! heads. Bodies are read whole, under `body_read_timeout` and `max_body_bytes`, before the
//! router sees the request ([`body`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::body;
use super::conn_limits::{ConnLimits, Gate, PeerKey, Ticket};
use super::head::{self, NoHead, Prefixed};

/// What a listener does: accept, open, and refuse connections.
pub(super) trait Listen: Send + Sync + 'static {
    /// An accepted connection before it is opened.
    type Raw: Send + 'static;
    /// The opened stream HTTP runs on.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// What each request of the connection carries in its extensions.
    type Peer: Clone + Send + Sync + 'static;
    /// A connection still waiting for its first head is closed to make room only once it is
    /// this old.
    const EVICT_MIN_AGE: Duration;

    /// The next connection and whom it counts against; errors are logged and retried.
    fn accept(&self) -> impl Future<Output = std::io::Result<(Self::Raw, PeerKey)>> + Send;

    /// Makes the stream ready for HTTP (a TLS handshake, under its own deadline).
    fn open(
        &self,
        raw: Self::Raw,
    ) -> impl Future<Output = std::io::Result<(Self::Io, Self::Peer)>> + Send;

    /// Turns away a connection over the limits; must not wait for the peer.
    fn refuse(&self, raw: Self::Raw);
}

/// Serves `router` on `listen` until `shutdown` turns true; then each connection finishes its
/// request in flight and closes. Connections still open are cut when this future is dropped.
pub(super) async fn serve<L: Listen>(
    listen: L,
    router: Router,
    limits: ConnLimits,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listen = Arc::new(listen);
    let gate = Gate::new(&limits, L::EVICT_MIN_AGE);
    let limits = Arc::new(limits);
    let mut conns = JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|v| *v) => break,
            accepted = listen.accept() => accepted,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (raw, key) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a REST connection failed");
                // Out of file descriptors and the like: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(ticket) = gate.admit(key.clone()) else {
            tracing::debug!(?key, "REST connection refused: over the connection limits");
            listen.refuse(raw);
            continue;
        };
        let (router, limits) = (router.clone(), limits.clone());
        conns.spawn(connection(
            listen.clone(),
            raw,
            ticket,
            router,
            limits,
            shutdown.clone(),
        ));
    }
    while conns.join_next().await.is_some() {}
    Ok(())
}

async fn connection<L: Listen>(
    listen: Arc<L>,
    raw: L::Raw,
    ticket: Ticket,
    router: Router,
    limits: Arc<ConnLimits>,
    mut shutdown: watch::Receiver<bool>,
) {
    let evicted = ticket.evicted.clone();
    let opening = async {
        let (mut io, peer) = listen.open(raw).await.ok()?;
        match head::read_first(&mut io, limits.header_read_timeout, limits.max_body_bytes).await {
            Ok(bytes) => Some((Prefixed::new(bytes, io), peer)),
            Err(NoHead::Quiet) => None,
            Err(NoHead::Refuse(refusal)) => {
                tracing::debug!(status = %refusal.status, "REST request head refused");
                refusal.send(&mut io).await;
                None
            }
        }
    };
    // Until its first head is in, a connection may be evicted or dropped at shutdown.
    let opened = tokio::select! {
        o = opening => o,
        _ = evicted.notified() => {
            tracing::debug!("silent REST connection closed to make room");
            None
        }
        _ = shutdown.wait_for(|v| *v) => None,
    };
    let Some((io, peer)) = opened else { return };
    ticket.started();
    http(io, peer, router, limits, shutdown).await;
    drop(ticket);
}

async fn http<S, P>(
    io: S,
    peer: P,
    router: Router,
    limits: Arc<ConnLimits>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: Clone + Send + Sync + 'static,
{
    let idle = limits.idle_timeout;
    let service = hyper::service::service_fn(move |req| {
        body::handle(
            TowerToHyperService::new(router.clone()),
            peer.clone(),
            limits.clone(),
            req,
        )
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // Started when hyper waits for a next head: the keep-alive idle limit and that head's.
        .header_read_timeout(idle)
        .max_buf_size(2 * head::MAX_HEAD)
        .max_headers(head::MAX_HEADERS);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "REST connection ended with an error");
                }
                return;
            }
            _ = shutdown.wait_for(|v| *v), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}
