//! The listeners: HTTP/1.1 (laneway's own server) and h2c (hyper-util's auto builder) on
//! one port, one accept loop per listener, graceful drain on shutdown. Each request goes
//! to [`dispatch::dispatch`].

mod attempts;
pub mod auth;
mod body_deadline;
pub mod client_body;
pub mod connection;
pub mod dispatch;
mod h1;
mod hedge;
mod hot_copy;
mod models;
pub mod request_id;
mod rescue;
mod respond;
mod rewind;
mod upload;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderValue;
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use connection::{Activity, ClientTimeouts, ConnectionTracker, Stops, WatchedIo};

use crate::gateway::admission::HeldBody;
use crate::gateway::body::ProxyBody;
use crate::gateway::config::Entry;
use crate::gateway::config::GatewayConfig;
use crate::gateway::forward::replica_headers::ReplicaHeaders;
use crate::gateway::forward::request::{KEEP_ALIVE, header_items};
use crate::gateway::state::reload::LiveState;
use crate::gateway::tls;
use client_body::ClientBody;

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

/// Serves one client connection under its timeouts (read from the live config as it opens):
/// HTTP/1.1 on laneway's own server ([`h1`]), handed to hyper's for HTTP/2 and whatever
/// else the own server leaves to it.
async fn serve_connection<S>(
    stream: S,
    role: ListenerRole,
    live: Arc<LiveState>,
    builder: &auto::Builder<TokioExecutor>,
    shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let config = &live.load().config;
    let timeouts = &config.reliability.timeouts;
    let limits = h1::Limits {
        head_bytes: config.reliability.limits.max_header_bytes,
        headers: config.reliability.limits.max_headers,
        body_bytes: config.body_limit_bytes,
        body_deadline: timeouts.client_body,
    };
    let timeouts = ClientTimeouts { header: timeouts.client_header, idle: timeouts.client_idle };
    let keep_alive_hint = HeaderValue::from_str(&format!("timeout={}", timeouts.idle.as_secs()))
        .expect("a number is a header value");
    let activity = Activity::new();
    let io = WatchedIo::new(stream, activity.clone());
    let closing = CancellationToken::new();
    let setup = h1::Setup {
        limits,
        keep_alive: keep_alive_hint.clone(),
        activity: &activity,
        closing: &closing,
    };
    let own_live = live.clone();
    let own_service = move |request: Request<ClientBody>, received_at| {
        // Boxed: the request's whole state machine is large; a box moves as one pointer.
        Box::pin(dispatch::dispatch(own_live.load_full(), role, request, received_at))
    };
    let hand_over = |rewound| {
        let service = hyper_service(live, role, activity.clone(), keep_alive_hint);
        serve_on_hyper(TokioIo::new(rewound), builder, service, &closing)
    };
    let connection = async {
        h1::serve(io, setup, own_service, hand_over).await;
        Ok::<(), Infallible>(())
    };
    tokio::pin!(connection);
    let stops = Stops { shutdown, timeouts };
    connection::drive(connection, |_| closing.cancel(), &activity, stops).await;
}

/// A response as hyper's server sends it: held open as a request of its connection.
type HyperResponse = Response<HeldBody<ProxyBody, connection::OpenRequest>>;

/// The service hyper calls for each request of a connection handed to it.
fn hyper_service(
    live: Arc<LiveState>,
    role: ListenerRole,
    activity: Arc<Activity>,
    keep_alive_hint: HeaderValue,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = HyperResponse,
    Error = Infallible,
    Future: Send,
> + Clone {
    service_fn(move |request: Request<Incoming>| {
        let open = activity.begin();
        let http1 = request.version() < Version::HTTP_2;
        let state = live.load_full();
        let hint = keep_alive_hint.clone();
        // Boxed: hyper moves the service's future by value (a profile showed the copies).
        let request = request.map(ClientBody::Hyper);
        let serve = Box::pin(dispatch::dispatch(state, role, request, Instant::now()));
        async move {
            let mut response = serve.await;
            // hyper writes the map alone.
            ReplicaHeaders::merge_into_map(&mut response);
            // A response that closes its connection announces no keep-alive.
            let closes = response.headers().get(http::header::CONNECTION).is_some_and(|value| {
                header_items(value.as_bytes()).any(|token| token.eq_ignore_ascii_case(b"close"))
            });
            if http1 && !closes {
                response.headers_mut().insert(KEEP_ALIVE, hint);
            }
            Ok::<_, Infallible>(response.map(|body| HeldBody::new(body, open)))
        }
    })
}

/// Serves a connection on hyper until it ends; `closing` asks it to finish gracefully
/// (HTTP/1 closes once idle, HTTP/2 sends GOAWAY).
async fn serve_on_hyper<I, Svc>(
    io: I,
    builder: &auto::Builder<TokioExecutor>,
    service: Svc,
    closing: &CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    Svc: hyper::service::Service<Request<Incoming>, Response = HyperResponse, Error = Infallible>
        + Clone
        + Send
        + 'static,
    Svc::Future: Send + 'static,
{
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        () = closing.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, "downstream connection ended with an error");
    }
}
