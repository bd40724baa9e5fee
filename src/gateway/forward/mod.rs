//! Phase 3, forward: sends a request to the picked replica with its entry's connection
//! strategy, and streams the answer back untouched.

pub mod debug;
pub mod force_close;
pub mod keep_alive;
pub mod request;
pub mod spread;

use std::time::Duration;

use http::uri::PathAndQuery;
use http::{Request, Response};
use hyper::body::Incoming;

use crate::gateway::body::ProxyBody;
use crate::gateway::config::EntryConfig;
use crate::gateway::entry::Strategy;
use crate::gateway::error::GatewayError;
use crate::gateway::pick::Replica;
use request::TargetForm;

/// One entry's way of reaching replicas.
pub struct Connector {
    strategy: StrategyConnector,
    /// Longest wait for a replica's response headers (vLLM sends them before the first
    /// token when streaming, after the last one otherwise).
    header_timeout: Duration,
}

enum StrategyConnector {
    ForceClose { connect_timeout: Duration },
    Spread(spread::Spread),
    KeepAlive(Box<keep_alive::KeepAlive>),
}

impl Connector {
    pub fn new(config: &EntryConfig, connect_timeout: Duration, header_timeout: Duration) -> Self {
        let strategy = match config.strategy {
            Strategy::ForceClose => StrategyConnector::ForceClose { connect_timeout },
            Strategy::Spread => StrategyConnector::Spread(spread::Spread::new(
                config.spread_connections,
                connect_timeout,
            )),
            Strategy::KeepAlive => {
                StrategyConnector::KeepAlive(Box::new(keep_alive::KeepAlive::new(connect_timeout)))
            }
        };
        Self { strategy, header_timeout }
    }

    pub fn strategy(&self) -> Strategy {
        match self.strategy {
            StrategyConnector::ForceClose { .. } => Strategy::ForceClose,
            StrategyConnector::Spread(_) => Strategy::Spread,
            StrategyConnector::KeepAlive(_) => Strategy::KeepAlive,
        }
    }

    /// Sends `request` to `replica`, at `path` if given (else the request's own path), and
    /// waits for the response headers at most the header timeout.
    pub async fn send(
        &self,
        replica: &Replica,
        request: Request<ProxyBody>,
        path: Option<PathAndQuery>,
    ) -> Result<Response<Incoming>, GatewayError> {
        let sent = self.send_now(replica, request, path);
        tokio::time::timeout(self.header_timeout, sent).await.unwrap_or_else(|_| {
            Err(GatewayError::UpstreamTimeout {
                replica: replica.name.clone(),
                after: self.header_timeout,
            })
        })
    }

    async fn send_now(
        &self,
        replica: &Replica,
        request: Request<ProxyBody>,
        path: Option<PathAndQuery>,
    ) -> Result<Response<Incoming>, GatewayError> {
        let authority = replica.authority.as_str();
        let name = replica.name.as_str();
        match &self.strategy {
            StrategyConnector::ForceClose { connect_timeout } => {
                let request = request::to_upstream(request, authority, path, TargetForm::Origin);
                force_close::send(name, authority, *connect_timeout, request).await
            }
            StrategyConnector::Spread(spread) => {
                let request = request::to_upstream(request, authority, path, TargetForm::Origin);
                spread.send(name, authority, request).await
            }
            StrategyConnector::KeepAlive(client) => {
                let request = request::to_upstream(request, authority, path, TargetForm::Absolute);
                client.send(name, request).await
            }
        }
    }
}

/// Classifies a failure on a held connection: a request that never left may be retried.
fn upstream_error(replica: &str, error: hyper::Error) -> GatewayError {
    let replica = replica.to_string();
    if error.is_canceled() {
        GatewayError::UpstreamConnect { replica, source: error.into() }
    } else {
        GatewayError::UpstreamReset { replica, source: error.into() }
    }
}
