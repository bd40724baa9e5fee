//! `keep_alive`: hyper's ordinary pooled client, reusing idle connections. A few reused
//! connections pin requests to a few API-server processes, which suits long prompts
//! (no handshake, no regression) and the debug entry. https replicas get a pool of their
//! own behind hyper-rustls, so that http ones keep the plain connector.

use std::time::Duration;

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{CaptureConnection, HttpConnector, capture_connection};
use hyper_util::rt::TokioExecutor;

use super::force_close::Upstream;
use super::upstream_body::UpstreamBody;
use super::upstream_error;
use super::wire::{ContentLengths, WireError};
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
        mut request: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let connection = capture_connection(&mut request);
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
        let mut response =
            result.map_err(|error| upstream_error::from_pooled(upstream.name, error))?;
        match sound_framing(&mut response) {
            Framing::Sound => {}
            Framing::Mended => poison(&connection),
            Framing::Broken(reason) => {
                poison(&connection);
                let replica = upstream.name.to_string();
                let source = WireError::Framing(reason).into();
                return Err(GatewayError::UpstreamReset { replica, source });
            }
        }
        Ok(response.map(UpstreamBody::from))
    }
}

/// What the framing of a pooled response said.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Sound,
    /// Passed on with its headers mended (a length beside a transfer coding dropped,
    /// repeated equal lengths made one); its connection is not reused.
    Mended,
    /// Refused: an unsolicited switch of protocols or interim head as the answer, or
    /// lengths that disagree.
    Broken(&'static str),
}

/// The rules laneway's own client applies to a response's framing (see
/// `wire::head`), applied to what hyper's client read.
fn sound_framing<B>(response: &mut Response<B>) -> Framing {
    if response.status().is_informational() {
        return Framing::Broken("an interim or protocol-switching answer that was never asked for");
    }
    let headers = response.headers_mut();
    if headers.contains_key(TRANSFER_ENCODING) {
        // hyper decoded the body by its coding: the length was not the framing.
        return match headers.remove(CONTENT_LENGTH) {
            Some(_) => Framing::Mended,
            None => Framing::Sound,
        };
    }
    let mut lengths = ContentLengths::default();
    for value in headers.get_all(CONTENT_LENGTH) {
        lengths.add(value.as_bytes());
    }
    if lengths.items() < 2 {
        return Framing::Sound;
    }
    match lengths.agreed() {
        Ok(Some(length)) => {
            headers.insert(CONTENT_LENGTH, length.into());
            Framing::Mended
        }
        Ok(None) => Framing::Sound,
        Err(reason) => Framing::Broken(reason),
    }
}

/// Keeps the captured connection out of the pool once this exchange ends.
fn poison(connection: &CaptureConnection) {
    if let Some(connected) = connection.connection_metadata().as_ref() {
        connected.poison();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(status: u16, lines: &[(&str, &str)]) -> (Framing, Response<()>) {
        let mut response = Response::builder().status(status);
        for (name, value) in lines {
            response = response.header(*name, *value);
        }
        let mut response = response.body(()).unwrap();
        (sound_framing(&mut response), response)
    }

    #[test]
    fn a_length_beside_a_coding_is_dropped_and_the_connection_not_reused() {
        let (framing, response) =
            framed(200, &[("content-length", "5"), ("transfer-encoding", "chunked")]);
        assert_eq!(framing, Framing::Mended);
        assert!(response.headers().get(CONTENT_LENGTH).is_none());
        assert_eq!(framed(200, &[("transfer-encoding", "chunked")]).0, Framing::Sound);
    }

    #[test]
    fn repeated_lengths_become_one_when_they_agree() {
        let (framing, response) = framed(200, &[("content-length", "5"), ("content-length", "5")]);
        assert_eq!(framing, Framing::Mended);
        assert_eq!(response.headers().get_all(CONTENT_LENGTH).iter().count(), 1);
        assert_eq!(response.headers()[CONTENT_LENGTH], "5");
        assert_eq!(framed(200, &[("content-length", "5, 5")]).0, Framing::Mended);
        assert!(matches!(framed(200, &[("content-length", "5, 6")]).0, Framing::Broken(_)));
        assert_eq!(framed(200, &[("content-length", "5")]).0, Framing::Sound);
    }

    #[test]
    fn an_unasked_switch_of_protocols_is_refused() {
        assert!(matches!(framed(101, &[("upgrade", "h2c")]).0, Framing::Broken(_)));
    }
}
