//! Failures reaching a replica, typed, and the one rule that turns the clients' errors into
//! a [`GatewayError`]: a request that never left, or whose connection closed before the
//! replica answered anything, may be retried elsewhere; a malformed answer may not.

use std::time::Duration;

use crate::gateway::error::GatewayError;

/// Why a connection to a replica could not be opened. Each message leaves its cause out:
/// [`GatewayError`] shows the whole chain.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect timed out after {0:?}")]
    TimedOut(Duration),
    #[error("connect and TLS handshake timed out after {0:?}")]
    TlsTimedOut(Duration),
    #[error("cannot resolve its address")]
    Resolve(#[source] std::io::Error),
    #[error("TCP connect")]
    Tcp(#[source] std::io::Error),
    #[error("TLS handshake")]
    Tls(#[source] std::io::Error),
}

/// A connection that could not be opened: nothing was sent.
pub fn connect_failed(replica: &str, error: ConnectError) -> GatewayError {
    GatewayError::UpstreamConnect { replica: replica.to_string(), source: error.into() }
}

/// What a hyper error says about the request it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Canceled before it was written: the replica never saw it.
    NotSent,
    /// The connection closed or reset before any response byte.
    Closed,
    /// The replica answered something that is not HTTP, or the request was unusable.
    Malformed,
}

fn ended(error: &hyper::Error) -> Ended {
    if error.is_canceled() {
        Ended::NotSent
    } else if error.is_parse() || error.is_user() {
        Ended::Malformed
    } else {
        Ended::Closed
    }
}

/// A failure of laneway's own client (force_close, spread) before the response head: a
/// close unless the replica answered something that is not HTTP.
pub fn from_wire(replica: &str, error: super::wire::WireError) -> GatewayError {
    let how = if error.is_malformed() { Ended::Malformed } else { Ended::Closed };
    classify(replica, how, error.into())
}

/// A failure of the pooled keep-alive client: its connect errors are connect failures, and
/// the hyper error under anything else says whether the request was sent.
pub fn from_pooled(replica: &str, error: hyper_util::client::legacy::Error) -> GatewayError {
    let how = if error.is_connect() {
        Ended::NotSent
    } else {
        std::error::Error::source(&error)
            .and_then(|source| source.downcast_ref::<hyper::Error>())
            .map_or(Ended::Malformed, ended)
    };
    classify(replica, how, error.into())
}

fn classify(replica: &str, how: Ended, source: crate::gateway::body::BoxError) -> GatewayError {
    // The client's body failed under the exchange: the client's error, not the replica's.
    if let Some(fault) = crate::gateway::client_fault::under(source.as_ref()) {
        return GatewayError::client_fault(fault);
    }
    let replica = replica.to_string();
    match how {
        Ended::NotSent => GatewayError::UpstreamConnect { replica, source },
        Ended::Closed => GatewayError::UpstreamClosed { replica, source },
        Ended::Malformed => GatewayError::UpstreamReset { replica, source },
    }
}
