//! Kubernetes discovery: polls the API server's EndpointSlices by label selector
//! (`GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=...`) with
//! hyper-util's pooled client (the upstream TLS client's roots and rustls, so polls reuse
//! one connection) and serde, and turns every ready endpoint into a replica named after its
//! pod, in the fault domain of its node. The `kube` crate would add a large dependency tree
//! for one list call. The service-account token is read again on each poll (it rotates).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fault_units::SliceMetadata;
use super::{Discovered, Source};
use crate::gateway::body::BoxError;
use crate::gateway::config::{KubernetesDiscovery, ReplicaConfig};
use crate::gateway::tls::upstream::{self as upstream_tls, UpstreamTlsError};

/// Largest EndpointSlice list read.
const MAX_LIST_BYTES: usize = 16 << 20;

/// Everything but RFC 3986's unreserved characters is encoded in the label selector.
const SELECTOR: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The API server's client: pooled, so that polls reuse one connection.
pub type ApiClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    #[error("TLS client for the API server: {0}")]
    Tls(#[from] UpstreamTlsError),
    #[error("invalid request to the API server: {0}")]
    Request(#[from] http::Error),
    #[error("cannot reach the API server: {0}")]
    Send(#[from] hyper_util::client::legacy::Error),
    #[error("API server answered {0}")]
    Status(http::StatusCode),
    #[error("reading the answer: {0}")]
    Body(#[source] BoxError),
    #[error("unexpected EndpointSlice list: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("cannot read the token file: {0}")]
    Token(#[source] std::io::Error),
}

// The source is config (validated once); polling it is this module's.
impl KubernetesDiscovery {
    /// The list call's path and query.
    pub fn list_path(&self) -> String {
        format!(
            "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices?labelSelector={}",
            self.namespace,
            utf8_percent_encode(&self.label_selector, SELECTOR)
        )
    }

    /// The client for this source's API server: the CA file's roots, else the system's.
    pub fn client(&self) -> Result<ApiClient, KubernetesError> {
        let roots = match &self.ca_file {
            Some(ca) => upstream_tls::roots_from_file(ca)?,
            None => upstream_tls::system_roots(),
        };
        let tls = upstream_tls::client_config(roots, None)?;
        let mut http = HttpConnector::new();
        // The API server may be `https://`: the TLS wrapper handles that scheme.
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// One poll: the ready endpoints as replicas.
    pub async fn discover(
        &self,
        client: &ApiClient,
    ) -> Result<Vec<ReplicaConfig>, KubernetesError> {
        let mut uri = self.api.clone().into_parts();
        uri.path_and_query = Some(self.list_path().parse().map_err(http::Error::from)?);
        let mut request =
            http::Request::get(http::Uri::from_parts(uri).map_err(http::Error::from)?)
                .header(http::header::ACCEPT, "application/json");
        if let Some(token_file) = &self.token_file {
            let token = std::fs::read_to_string(token_file).map_err(KubernetesError::Token)?;
            request =
                request.header(http::header::AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        let response = client.request(request.body(Empty::new())?).await?;
        if !response.status().is_success() {
            return Err(KubernetesError::Status(response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_LIST_BYTES);
        let body = body.collect().await.map_err(KubernetesError::Body)?.to_bytes();
        let list: SliceList = serde_json::from_slice(&body)?;
        let mut replicas = replicas_of(&list, self.port_name.as_deref());
        for replica in &mut replicas {
            replica.tls = self.replica_https;
        }
        Ok(replicas)
    }
}

/// Polls every interval and sends each list; a failed poll sends nothing, so the last
/// good set stays.
pub fn spawn(source: KubernetesDiscovery, sets: mpsc::Sender<Discovered>) -> JoinHandle<()> {
    tokio::spawn(async move {
        // A CA file that cannot be read stops this source (logged once); the static list
        // and the other sources go on.
        let client = match source.client() {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "Kubernetes discovery cannot start");
                return;
            }
        };
        let mut ticks = tokio::time::interval(source.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let polled = tokio::time::timeout(
                source.interval.max(Duration::from_secs(1)) * 4,
                source.discover(&client),
            );
            match polled.await {
                Ok(Ok(replicas)) => {
                    if sets.send((Source::Kubernetes, replicas)).await.is_err() {
                        return;
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "Kubernetes discovery failed; keeping the last set")
                }
                Err(_) => tracing::warn!("Kubernetes discovery timed out; keeping the last set"),
            }
        }
    })
}

#[derive(Debug, Deserialize)]
struct SliceList {
    #[serde(default)]
    items: Vec<Slice>,
}

#[derive(Debug, Deserialize)]
struct Slice {
    #[serde(default)]
    metadata: SliceMetadata,
    #[serde(default)]
    ports: Option<Vec<SlicePort>>,
    #[serde(default)]
    endpoints: Option<Vec<Endpoint>>,
}

#[derive(Debug, Deserialize)]
struct SlicePort {
    name: Option<String>,
    port: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Endpoint {
    #[serde(default)]
    addresses: Vec<String>,
    conditions: Option<Conditions>,
    node_name: Option<String>,
    target_ref: Option<TargetRef>,
}

#[derive(Debug, Deserialize)]
struct Conditions {
    /// Absent means ready (the API's rule).
    ready: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct TargetRef {
    name: Option<String>,
}

/// Ready endpoints on the wanted port, sorted by name so equal lists compare equal.
fn replicas_of(list: &SliceList, port_name: Option<&str>) -> Vec<ReplicaConfig> {
    let mut replicas: Vec<ReplicaConfig> = Vec::new();
    for slice in &list.items {
        let ports = slice.ports.as_deref().unwrap_or_default();
        let port = match port_name {
            Some(wanted) => ports.iter().find(|p| p.name.as_deref() == Some(wanted)),
            None => ports.first(),
        };
        let Some(port) = port.and_then(|p| p.port) else { continue };
        for endpoint in slice.endpoints.as_deref().unwrap_or_default() {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<IpAddr>() else { continue };
                let authority = SocketAddr::new(ip, port).to_string();
                let pod = endpoint.target_ref.as_ref().and_then(|t| t.name.clone());
                let mut name = pod.clone().unwrap_or_else(|| authority.clone());
                if replicas.iter().any(|r| r.name == name) {
                    name = authority.clone();
                }
                let node_name = endpoint.node_name.clone().unwrap_or_else(|| name.clone());
                let (node, placement) = slice.metadata.placement(pod.as_deref(), node_name);
                // `replica_https` is applied by the caller.
                replicas.push(ReplicaConfig { name, authority, node, tls: false, placement });
            }
        }
    }
    replicas.sort_by(|a, b| a.name.cmp(&b.name));
    replicas.dedup_by(|a, b| a.name == b.name);
    replicas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::Issues;
    use crate::gateway::config::discovery::RawKubernetes;

    const RECORDED: &str = r#"{"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1",
      "items":[{"addressType":"IPv4","ports":[{"name":"metrics","port":9100},{"name":"http","port":8000}],
        "endpoints":[
          {"addresses":["10.1.0.5"],"conditions":{"ready":true},"nodeName":"gpu-a","targetRef":{"kind":"Pod","name":"vllm-0"}},
          {"addresses":["10.1.0.6"],"conditions":{"ready":false,"terminating":true},"nodeName":"gpu-a","targetRef":{"kind":"Pod","name":"vllm-1"}},
          {"addresses":["10.1.0.7"],"nodeName":"gpu-b","targetRef":{"kind":"Pod","name":"vllm-2"}}]},
        {"addressType":"IPv4","ports":null,"endpoints":null}]}"#;

    #[test]
    fn ready_endpoints_on_the_named_port_become_replicas() {
        let list: SliceList = serde_json::from_str(RECORDED).unwrap();
        let replicas = replicas_of(&list, Some("http"));
        let seen: Vec<(&str, &str, &str)> = replicas
            .iter()
            .map(|r| (r.name.as_str(), r.authority.as_str(), r.node.as_str()))
            .collect();
        assert_eq!(
            seen,
            [("vllm-0", "10.1.0.5:8000", "gpu-a"), ("vllm-2", "10.1.0.7:8000", "gpu-b")]
        );
        assert_eq!(replicas_of(&list, None)[0].authority, "10.1.0.5:9100");
    }

    #[test]
    fn the_selector_is_encoded_and_required_fields_named() {
        let raw = RawKubernetes {
            api: Some("http://127.0.0.1:1".into()),
            namespace: Some("llm".into()),
            label_selector: Some("app=vllm,tier in (gpu)".into()),
            port_name: None,
            token_file: None,
            ca_file: None,
            interval_ms: None,
            replica_https: None,
        };
        let source = KubernetesDiscovery::from_raw(&raw, &mut Issues::default()).unwrap();
        assert_eq!(
            source.list_path(),
            "/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices?labelSelector=app%3Dvllm%2Ctier%20in%20%28gpu%29"
        );
        let bad = RawKubernetes {
            api: Some("ftp://x".into()),
            namespace: None,
            label_selector: None,
            ..raw
        };
        let mut issues = Issues::default();
        assert!(KubernetesDiscovery::from_raw(&bad, &mut issues).is_none());
        let paths = issues.paths();
        assert_eq!(
            paths,
            [
                "discovery.kubernetes.api",
                "discovery.kubernetes.namespace",
                "discovery.kubernetes.label_selector"
            ]
        );
    }
}
