//! The listeners: HTTP/1.1 and h2c on one port (hyper-util's auto builder), one accept loop
//! per listener, graceful drain on shutdown. Each request goes to [`dispatch::dispatch`].

mod attempts;
pub mod auth;
mod body_deadline;
pub mod connection;
pub mod dispatch;
mod models;
pub mod request_id;
mod respond;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use http::{Request, Version};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use connection::{Activity, ClientTimeouts, ConnectionTracker, Stops, WatchedIo};

use crate::gateway::admission::HeldBody;
use crate::gateway::config::Entry;
use crate::gateway::config::GatewayConfig;
use crate::gateway::forward::request::KEEP_ALIVE;
use crate::gateway::state::reload::LiveState;
use crate::gateway::tls;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
    /// Classifies every request (and serves `/debug/...`).
    Smart,
    /// A dedicated port for one entry.
    Entry(Entry),
}

/// The protocol settings that protect the listener from its clients: header size and
/// count (431), HTTP/2 streams per connection and header list size. The header, idle and
/// body timeouts are the connection driver's ([`connection`]) and the body reader's.
fn connection_builder(config: &GatewayConfig) -> auto::Builder<TokioExecutor> {
    let limits = &config.reliability.limits;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // hyper's own timer starts when it waits for a head, idle time included: it would
        // close idle keep-alive connections after the header timeout.
        .header_read_timeout(None)
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
    shutdown: watch::Receiver<bool>,
    drain_deadline: Duration,
    tls: Option<TlsAcceptor>,
) {
    let builder = connection_builder(&live.load().config);
    let connections = Arc::new(ConnectionTracker::default());
    let mut stop = shutdown.clone();
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
                let tracked = connections.track();
                let (live, builder, shutdown, tls) =
                    (live.clone(), builder.clone(), shutdown.clone(), tls.clone());
                tokio::spawn(async move {
                    let _tracked = tracked;
                    match tls {
                        // The handshake runs in the connection's task, not the accept loop.
                        Some(acceptor) => {
                            let Some(stream) = tls::handshake(&acceptor, stream).await else { return };
                            serve_connection(stream, role, live, &builder, shutdown).await;
                        }
                        None => serve_connection(stream, role, live, &builder, shutdown).await,
                    }
                });
            }
            _ = async { stop.wait_for(|stop| *stop).await.map(|_| ()) } => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(drain_deadline, connections.all_closed()).await.is_err() {
        tracing::warn!(?role, "drain deadline passed with requests still open");
    }
}

/// Serves one client connection under its timeouts (read from the live config as it opens).
async fn serve_connection<S>(
    stream: S,
    role: ListenerRole,
    live: Arc<LiveState>,
    builder: &auto::Builder<TokioExecutor>,
    shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let timeouts = &live.load().config.reliability.timeouts;
    let timeouts = ClientTimeouts { header: timeouts.client_header, idle: timeouts.client_idle };
    let keep_alive_hint = HeaderValue::from_str(&format!("timeout={}", timeouts.idle.as_secs()))
        .expect("a number is a header value");
    let activity = Activity::new();
    let io = TokioIo::new(WatchedIo::new(stream, activity.clone()));
    let requests = activity.clone();
    let service = service_fn(move |request: Request<Incoming>| {
        let open = requests.begin();
        let http1 = request.version() < Version::HTTP_2;
        let state = live.load_full();
        let hint = keep_alive_hint.clone();
        // Boxed: the request's whole state machine is large, and hyper moves the service's
        // future by value (a profile showed the copies); a box moves as one pointer.
        let serve = Box::pin(dispatch::dispatch(state, role, request));
        async move {
            let mut response = serve.await;
            if http1 {
                response.headers_mut().insert(KEEP_ALIVE, hint);
            }
            Ok::<_, Infallible>(response.map(|body| HeldBody::new(body, open)))
        }
    });
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let stops = Stops { shutdown, timeouts };
    connection::drive(connection, |connection| connection.graceful_shutdown(), &activity, stops)
        .await;
}
