//! The listeners: HTTP/1.1 and h2c on one port (hyper-util's auto builder), one accept loop
//! per listener, graceful drain on shutdown. Each request goes to [`dispatch::dispatch`].

mod attempts;
pub mod dispatch;
mod respond;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::gateway::config::GatewayConfig;
use crate::gateway::entry::Entry;
use crate::gateway::reload::LiveState;
use crate::gateway::tls;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
    /// Classifies every request (and serves `/debug/...`).
    Smart,
    /// A dedicated port for one entry.
    Entry(Entry),
}

/// The protocol settings that protect the listener from its clients: the header read
/// timeout (slowloris), header size and count (431), HTTP/2 streams per connection.
fn connection_builder(config: &GatewayConfig) -> auto::Builder<TokioExecutor> {
    let limits = &config.reliability.limits;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.reliability.timeouts.client_header)
        .max_buf_size(limits.max_header_bytes)
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(limits.max_header_bytes as u32);
    builder
}

/// Accepts connections until `shutdown` turns true, then waits for open connections to
/// finish their requests, at most `drain_deadline`. Each request loads the live state once.
pub async fn serve(
    listener: TcpListener,
    role: ListenerRole,
    live: Arc<LiveState>,
    mut shutdown: watch::Receiver<bool>,
    drain_deadline: Duration,
    tls: Option<TlsAcceptor>,
) {
    let builder = connection_builder(&live.load().config);
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
                let live = live.clone();
                let service = service_fn(move |request| {
                    let state = live.load_full();
                    // Boxed: the request's whole state machine is large, and hyper moves the
                    // service's future by value (a profile showed the copies); a box moves
                    // as one pointer.
                    let serve = Box::pin(dispatch::dispatch(state, role, request));
                    async move { Ok::<_, Infallible>(serve.await) }
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
