//! The listeners: HTTP/1.1 and h2c on one port (hyper-util's auto builder), one accept loop
//! per listener, graceful drain on shutdown. Each request goes to [`dispatch::dispatch`].

pub mod dispatch;
mod respond;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::gateway::entry::Entry;
use crate::gateway::state::GatewayState;
use crate::gateway::tls;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
    /// Classifies every request (and serves `/debug/...`).
    Smart,
    /// A dedicated port for one entry.
    Entry(Entry),
}

/// Accepts connections until `shutdown` turns true, then waits for open connections to
/// finish their requests, at most `drain_deadline`.
pub async fn serve(
    listener: TcpListener,
    role: ListenerRole,
    state: Arc<GatewayState>,
    mut shutdown: watch::Receiver<bool>,
    drain_deadline: Duration,
    tls: Option<TlsAcceptor>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _peer)) => stream,
                    Err(error) => {
                        // Out of descriptors or similar: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let service = service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(dispatch::dispatch(state, role, request).await) }
                });
                if let Some(acceptor) = &tls {
                    // The handshake runs in the connection's task, not the accept loop.
                    let (acceptor, builder, watcher) = (acceptor.clone(), builder.clone(), graceful.watcher());
                    tokio::spawn(async move {
                        let Some(stream) = tls::handshake(&acceptor, stream).await else { return };
                        let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                        if let Err(error) = watcher.watch(connection).await {
                            tracing::debug!(%error, "downstream TLS connection ended with an error");
                        }
                    });
                    continue;
                }
                let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "downstream connection ended with an error");
                    }
                });
            }
            _ = async { shutdown.wait_for(|stop| *stop).await.map(|_| ()) } => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain_deadline, graceful.shutdown()).await.is_err() {
        tracing::warn!(?role, "drain deadline passed with requests still open");
    }
}
