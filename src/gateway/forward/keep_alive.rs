//! `keep_alive`: hyper's ordinary pooled client, reusing idle connections. A few reused
//! connections pin requests to a few API-server processes, which suits long prompts
//! (no handshake, no regression) and the debug entry.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::gateway::body::ProxyBody;
use crate::gateway::error::GatewayError;

/// A pooled keep-alive client.
pub struct KeepAlive {
    client: Client<HttpConnector, ProxyBody>,
}

impl KeepAlive {
    pub fn new(connect_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Self { client }
    }

    /// Sends `request` (absolute-form target) on a pooled connection.
    pub async fn send(
        &self,
        replica: &str,
        request: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, GatewayError> {
        self.client.request(request).await.map_err(|error| {
            let replica = replica.to_string();
            if error.is_connect() {
                GatewayError::UpstreamConnect { replica, source: error.into() }
            } else {
                GatewayError::UpstreamReset { replica, source: error.into() }
            }
        })
    }
}
