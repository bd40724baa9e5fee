//! `keep_alive`: hyper's ordinary pooled client, reusing idle connections. A few reused
//! connections pin requests to a few API-server processes, which suits long prompts
//! (no handshake, no regression) and the debug entry. https replicas get a pool of their
//! own behind hyper-rustls, so that http ones keep the plain connector.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::force_close::Upstream;
use crate::gateway::body::ProxyBody;
use crate::gateway::error::GatewayError;
use crate::gateway::tls::upstream::UpstreamTls;

/// Pooled keep-alive clients: one for http replicas, one for https ones.
pub struct KeepAlive {
    client: Client<HttpConnector, ProxyBody>,
    tls_client: Client<HttpsConnector<HttpConnector>, ProxyBody>,
}

impl KeepAlive {
    pub fn new(connect_timeout: Duration, tls: &UpstreamTls) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        let builder = {
            let mut builder = Client::builder(TokioExecutor::new());
            builder.pool_idle_timeout(Duration::from_secs(60));
            builder
        };
        let tls_client = builder.build(tls.pooled_connector(connector.clone()));
        Self { client: builder.build(connector), tls_client }
    }

    /// Sends `request` (absolute-form target, scheme matching the replica) on a pooled
    /// connection.
    pub async fn send(
        &self,
        upstream: Upstream<'_>,
        request: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, GatewayError> {
        let result = match upstream.tls {
            None => self.client.request(request).await,
            Some((tls, _)) => match self.tls_client.request(request).await {
                Ok(response) => {
                    tls.note_success(upstream.authority);
                    Ok(response)
                }
                Err(error) if error.is_connect() => {
                    // hyper-util's error says only "Connect": name the TLS reason under it.
                    let reason = chain(&error);
                    tls.note_failure(upstream.authority, &reason);
                    let replica = upstream.name.to_string();
                    return Err(GatewayError::UpstreamConnect { replica, source: reason.into() });
                }
                Err(error) => Err(error),
            },
        };
        result.map_err(|error| {
            let replica = upstream.name.to_string();
            let closed = std::error::Error::source(&error)
                .and_then(|source| source.downcast_ref::<hyper::Error>())
                .is_some_and(|error| !error.is_parse() && !error.is_user());
            if error.is_connect() {
                GatewayError::UpstreamConnect { replica, source: error.into() }
            } else if closed {
                GatewayError::UpstreamClosed { replica, source: error.into() }
            } else {
                GatewayError::UpstreamReset { replica, source: error.into() }
            }
        })
    }
}

/// An error with its sources, `: `-separated: the TLS reason sits under hyper's wrapper.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
