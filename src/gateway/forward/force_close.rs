//! `force_close`: a fresh upstream connection per request, sent with `Connection: close`
//! so that the replica closes it after the response. With several API-server processes on
//! one listening socket, every request is accepted anew and the kernel spreads them.

use std::time::Duration;

use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::upstream_error;
use crate::gateway::body::ProxyBody;
use crate::gateway::error::GatewayError;

/// Opens an HTTP/1.1 connection to `authority`, ready to send one request.
pub async fn connect(
    replica: &str,
    authority: &str,
    timeout: Duration,
) -> Result<SendRequest<ProxyBody>, GatewayError> {
    let connect_error = |source: Box<dyn std::error::Error + Send + Sync>| {
        GatewayError::UpstreamConnect { replica: replica.to_string(), source }
    };
    let stream = tokio::time::timeout(timeout, TcpStream::connect(authority))
        .await
        .map_err(|_| connect_error("connect timed out".into()))?
        .map_err(|error| connect_error(error.into()))?;
    // Tokens are small writes: do not let Nagle hold them back.
    stream.set_nodelay(true).map_err(|error| connect_error(error.into()))?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| connect_error(error.into()))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream connection ended with an error");
        }
    });
    sender.ready().await.map_err(|error| connect_error(error.into()))?;
    Ok(sender)
}

/// Sends `request` (origin-form target) on a connection of its own.
pub async fn send(
    replica: &str,
    authority: &str,
    timeout: Duration,
    mut request: Request<ProxyBody>,
) -> Result<Response<Incoming>, GatewayError> {
    let mut sender = connect(replica, authority, timeout).await?;
    request.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    sender.send_request(request).await.map_err(|error| upstream_error(replica, error))
}
