//! One GET to a replica's own endpoint (`/metrics`, `/v1/models`, `/kv_event_sources`)
//! over the scrapers' client, its body bounded.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::replica::Replica;

/// The client the scrapers reach replicas with (TLS for `https://` ones).
pub type ReplicaClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

pub type FetchError = Box<dyn std::error::Error + Send + Sync>;

/// The body of the replica's `GET path`, at most `limit` bytes; an error for any status
/// but success.
pub async fn fetch_body(
    client: &ReplicaClient,
    replica: &Replica,
    path: &str,
    limit: usize,
) -> Result<Bytes, FetchError> {
    let uri: http::Uri = format!("{}://{}{path}", replica.scheme(), replica.authority).parse()?;
    let response = client.get(uri).await?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()).into());
    }
    let body = http_body_util::Limited::new(response.into_body(), limit);
    Ok(body.collect().await?.to_bytes())
}
