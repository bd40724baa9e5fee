//! Phase 3, forward: sends a request to the picked replica with its entry's connection
//! strategy, and streams the answer back untouched.

pub mod debug;
pub mod force_close;
pub mod keep_alive;
pub mod ready;
pub mod replica_headers;
pub mod request;
pub mod retry;
pub mod spread;
pub mod upstream_body;
pub mod upstream_error;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Request, Response};

use crate::gateway::body::{ProxyBody, full};
use crate::gateway::config::EntryConfig;
use crate::gateway::config::Strategy;
use crate::gateway::error::GatewayError;
use crate::gateway::pick::Replica;
use crate::gateway::tls::upstream::UpstreamTls;
use force_close::Upstream;
use request::TargetForm;
use upstream_body::UpstreamBody;
use wire::{Buffered, Outgoing};

/// What one send carries.
pub enum Sending<'a> {
    /// A request of the caller's, sent at the path given (else its own).
    Request(Box<Request<ProxyBody>>, Option<PathAndQuery>),
    /// A client's request whose body was read whole: `force_close` and `spread` write it
    /// from the client's head, with no copy of it per send (attempts, hedges, retries).
    Buffered(&'a Parts, Bytes),
}

/// One entry's way of reaching replicas.
pub struct Connector {
    strategy: StrategyConnector,
    /// Longest wait from sending a request to the replica's response headers
    /// (`timeouts.first_byte_ms`; vLLM sends them before the first token when streaming,
    /// after the last one otherwise).
    first_byte_timeout: Duration,
    /// TLS to https replicas; plain http ones never read it.
    tls: Arc<UpstreamTls>,
}

enum StrategyConnector {
    /// With `ready`, connections are opened ahead of the requests (`ready_connections`).
    ForceClose {
        connect_timeout: Duration,
        ready: Option<Box<ready::ReadyConnections>>,
    },
    Spread(spread::Spread),
    KeepAlive(Box<keep_alive::KeepAlive>),
}

impl Connector {
    pub fn new(
        config: &EntryConfig,
        connect_timeout: Duration,
        first_byte_timeout: Duration,
        tls: Arc<UpstreamTls>,
        ready_counts: &ready::ReadyCounts,
    ) -> Self {
        let strategy = match config.strategy {
            Strategy::ForceClose => StrategyConnector::ForceClose {
                connect_timeout,
                ready: (config.ready_connections > 0).then(|| {
                    let ready = ready::ReadyConnections::new(
                        config.ready_connections,
                        config.ready_max_idle,
                        connect_timeout,
                        tls.clone(),
                        ready_counts.clone(),
                    );
                    Box::new(ready)
                }),
            },
            Strategy::Spread => StrategyConnector::Spread(spread::Spread::new(
                config.spread_connections,
                connect_timeout,
            )),
            Strategy::KeepAlive => StrategyConnector::KeepAlive(Box::new(
                keep_alive::KeepAlive::new(connect_timeout, &tls),
            )),
        };
        Self { strategy, first_byte_timeout, tls }
    }

    pub fn strategy(&self) -> Strategy {
        match self.strategy {
            StrategyConnector::ForceClose { .. } => Strategy::ForceClose,
            StrategyConnector::Spread(_) => Strategy::Spread,
            StrategyConnector::KeepAlive(_) => Strategy::KeepAlive,
        }
    }

    /// Sends `request` to `replica`, at `path` if given (else the request's own path), and
    /// waits for the response headers at most the first-byte timeout.
    pub async fn send(
        &self,
        replica: &Arc<Replica>,
        request: Request<ProxyBody>,
        path: Option<PathAndQuery>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let deadline = self.first_byte_deadline();
        self.send_by(replica, Sending::Request(Box::new(request), path), deadline).await
    }

    /// When the response headers of a request sent now are due.
    pub fn first_byte_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.first_byte_timeout
    }

    /// The first-byte timeout error for `replica`.
    pub fn first_byte_timed_out(&self, replica: &Replica) -> GatewayError {
        GatewayError::UpstreamTimeout {
            replica: replica.name.clone(),
            after: self.first_byte_timeout,
        }
    }

    /// [`Self::send`] with the response headers due by `deadline` (a request that waited
    /// for its replica to answer earlier ones has spent part of its first-byte time).
    pub async fn send_by(
        &self,
        replica: &Arc<Replica>,
        sending: Sending<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        // Boxed: the send's state (a connect, a TLS handshake, the exchange) is kilobytes,
        // and inline it would be allocated with every request's future from the start,
        // while it waits in admission or for its replica to answer earlier ones too.
        let sent = tokio::time::timeout_at(deadline, Box::pin(self.send_now(replica, sending)));
        sent.await.unwrap_or_else(|_| Err(self.first_byte_timed_out(replica)))
    }

    async fn send_now(
        &self,
        replica: &Arc<Replica>,
        sending: Sending<'_>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let authority = replica.authority.as_str();
        let upstream = Upstream::of(replica, &self.tls);
        match &self.strategy {
            StrategyConnector::ForceClose { connect_timeout, ready } => {
                let request = on_the_wire(sending, authority);
                match ready {
                    Some(ready) => ready.send(replica, request).await,
                    None => force_close::send(upstream, *connect_timeout, request).await,
                }
            }
            StrategyConnector::Spread(spread) => {
                spread.send(upstream, on_the_wire(sending, authority)).await
            }
            StrategyConnector::KeepAlive(client) => {
                let form = TargetForm::Absolute { https: upstream.tls.is_some() };
                let (request, path) = match sending {
                    Sending::Request(request, path) => (*request, path),
                    Sending::Buffered(parts, body) => (request::rebuild(parts, full(body)), None),
                };
                let request = request::to_upstream(request, authority, path, form);
                client.send(upstream, request).await
            }
        }
    }
}

/// The wire client's request to `authority`: a buffered one as it came when it can be, else
/// a copy pointed at the replica.
fn on_the_wire<'a>(sending: Sending<'a>, authority: &'a str) -> Outgoing<'a> {
    let (request, path) = match sending {
        Sending::Request(request, path) => (*request, path),
        Sending::Buffered(parts, body) => match Buffered::new(parts, body.clone(), authority) {
            Some(buffered) => return Outgoing::Buffered(buffered),
            None => (request::rebuild(parts, full(body)), None),
        },
    };
    Outgoing::Request(request::to_upstream(request, authority, path, TargetForm::Origin))
}
