//! `keep_alive`: hyper's ordinary pooled client, reusing idle connections. A few reused
//! connections pin requests to a few API-server processes, which suits long prompts
//! (no handshake, no regression) and the debug entry. https replicas get a pool of their
//! own behind hyper-rustls, so that http ones keep the plain connector.

use std::time::Duration;

use http::{Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::force_close::Upstream;
use super::upstream_body::UpstreamBody;
use super::upstream_error;
use crate::error_chain::ErrorChain;
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
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let result = match upstream.tls {
            None => self.client.request(request).await,
            Some((tls, _)) => match self.tls_client.request(request).await {
                Ok(response) => {
                    tls.note_success(upstream.authority);
                    Ok(response)
                }
                Err(error) if error.is_connect() => {
                    // hyper-util's error says only "Connect": name the TLS reason under it.
                    tls.note_failure(upstream.authority, &ErrorChain(&error));
                    Err(error)
                }
                Err(error) => Err(error),
            },
        };
        result
            .map(|response| response.map(UpstreamBody::from))
            .map_err(|error| upstream_error::from_pooled(upstream.name, error))
    }
}
