//! Kubernetes discovery: polls the API server's EndpointSlices by label selector
//! (`GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=...`) with
//! plain hyper and serde, and turns every ready endpoint into a replica named after its
//! pod, in the fault domain of its node. The `kube` crate would add a large dependency tree
//! for one list call. The service-account token is read again on each poll (it rotates).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fault_units::SliceMetadata;
use super::{Discovered, Source};
use crate::gateway::config::ReplicaConfig;
use crate::gateway::tls::upstream as upstream_tls;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Largest EndpointSlice list read.
const MAX_LIST_BYTES: usize = 16 << 20;

/// `[discovery.kubernetes]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetes {
    /// API server; default the in-cluster `https://kubernetes.default.svc`.
    pub api: Option<String>,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    /// The EndpointSlice port to use, by name; default the slice's first port.
    pub port_name: Option<String>,
    /// Bearer token file; default the pod's service-account token, if present.
    pub token_file: Option<String>,
    /// CA bundle for an `https` API; default the service-account CA, else public roots.
    pub ca_file: Option<String>,
    pub interval_ms: Option<u64>,
    /// Reach the pods over TLS (`[upstream_tls]`); their certificates must name the pod
    /// IP (an IP SAN). Not to be confused with the API server's own scheme in `api`.
    pub replica_https: Option<bool>,
}

/// A validated Kubernetes source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesDiscovery {
    pub api: http::Uri,
    pub namespace: String,
    pub label_selector: String,
    pub port_name: Option<String>,
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub interval: Duration,
    /// `replica_https = true`: TLS to each pod, verified against its IP.
    pub replica_https: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    #[error("cannot reach the API server: {0}")]
    Connect(#[source] std::io::Error),
    #[error("TLS to the API server: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("API server answered {0}")]
    Status(http::StatusCode),
    #[error("reading the answer: {0}")]
    Body(String),
    #[error("unexpected EndpointSlice list: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("cannot read the token file: {0}")]
    Token(#[source] std::io::Error),
}

impl KubernetesDiscovery {
    pub fn from_raw(raw: &RawKubernetes) -> Result<Self, Vec<(String, String)>> {
        let mut issues: Vec<(String, String)> = Vec::new();
        let api_text = raw.api.as_deref().unwrap_or("https://kubernetes.default.svc");
        let api = api_text.parse::<http::Uri>().ok().filter(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if api.is_none() {
            issues.push((
                "discovery.kubernetes.api".into(),
                format!("`{api_text}` is not an http(s) URL"),
            ));
        }
        let required = |field: &str, value: &Option<String>, issues: &mut Vec<(String, String)>| {
            let value = value.clone().unwrap_or_default();
            if value.is_empty() {
                issues.push((format!("discovery.kubernetes.{field}"), "is required".into()));
            }
            value
        };
        let namespace = required("namespace", &raw.namespace, &mut issues);
        let label_selector = required("label_selector", &raw.label_selector, &mut issues);
        let interval_ms = raw.interval_ms.unwrap_or(5000);
        if !(100..=3_600_000).contains(&interval_ms) {
            issues.push((
                "discovery.kubernetes.interval_ms".into(),
                format!("{interval_ms} is out of range 100..=3600000"),
            ));
        }
        let in_cluster = |file: &str| {
            let path = Path::new(SERVICE_ACCOUNT).join(file);
            path.exists().then_some(path)
        };
        let token_file = raw.token_file.as_ref().map(PathBuf::from).or_else(|| in_cluster("token"));
        let ca_file = raw.ca_file.as_ref().map(PathBuf::from).or_else(|| in_cluster("ca.crt"));
        match api {
            Some(api) if issues.is_empty() => Ok(Self {
                api,
                namespace,
                label_selector,
                port_name: raw.port_name.clone(),
                token_file,
                ca_file,
                interval: Duration::from_millis(interval_ms),
                replica_https: raw.replica_https.unwrap_or(false),
            }),
            _ => Err(issues),
        }
    }

    /// The list call's path and query.
    pub fn list_path(&self) -> String {
        format!(
            "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices?labelSelector={}",
            self.namespace,
            percent_encode(&self.label_selector)
        )
    }

    /// One poll: the ready endpoints as replicas.
    pub async fn discover(&self) -> Result<Vec<ReplicaConfig>, KubernetesError> {
        let body = self.get(&self.list_path()).await?;
        let list: SliceList = serde_json::from_slice(&body)?;
        let mut replicas = replicas_of(&list, self.port_name.as_deref());
        for replica in &mut replicas {
            replica.tls = self.replica_https;
        }
        Ok(replicas)
    }

    async fn get(&self, path: &str) -> Result<Bytes, KubernetesError> {
        let host = self.api.host().unwrap_or("localhost").trim_matches(['[', ']']).to_string();
        let https = self.api.scheme_str() == Some("https");
        let port = self.api.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp =
            TcpStream::connect((host.as_str(), port)).await.map_err(KubernetesError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let mut request = http::Request::get(path)
            .header(http::header::HOST, self.api.authority().map_or(host.as_str(), |a| a.as_str()))
            .header(http::header::ACCEPT, "application/json");
        if let Some(token_file) = &self.token_file {
            let token = std::fs::read_to_string(token_file).map_err(KubernetesError::Token)?;
            request =
                request.header(http::header::AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| KubernetesError::Body(e.to_string()))?;
        let response = if https {
            let connector = self.tls_connector()?;
            let name = ServerName::try_from(host.clone())
                .map_err(|e| KubernetesError::Tls(e.to_string()))?;
            let stream = connector
                .connect(name, tcp)
                .await
                .map_err(|e| KubernetesError::Tls(e.to_string()))?;
            send(TokioIo::new(stream), request).await?
        } else {
            send(TokioIo::new(tcp), request).await?
        };
        if !response.status().is_success() {
            return Err(KubernetesError::Status(response.status()));
        }
        let body = Limited::new(response.into_body(), MAX_LIST_BYTES);
        Ok(body.collect().await.map_err(|e| KubernetesError::Body(e.to_string()))?.to_bytes())
    }

    /// The upstream TLS client's pieces: the CA file's roots, else the system's.
    fn tls_connector(&self) -> Result<tokio_rustls::TlsConnector, KubernetesError> {
        let tls_error =
            |error: upstream_tls::UpstreamTlsError| KubernetesError::Tls(error.to_string());
        let roots = match &self.ca_file {
            Some(ca) => upstream_tls::roots_from_file(ca).map_err(tls_error)?,
            None => upstream_tls::system_roots(),
        };
        let config = upstream_tls::client_config(roots, None).map_err(tls_error)?;
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

async fn send<I>(
    io: I,
    request: http::Request<Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, KubernetesError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    Ok(sender.send_request(request).await?)
}

/// Polls every interval and sends each list; a failed poll sends nothing, so the last
/// good set stays.
pub fn spawn(source: KubernetesDiscovery, sets: mpsc::Sender<Discovered>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(source.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let polled = tokio::time::timeout(
                source.interval.max(Duration::from_secs(1)) * 4,
                source.discover(),
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

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let source = KubernetesDiscovery::from_raw(&raw).unwrap();
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
        let paths: Vec<String> =
            KubernetesDiscovery::from_raw(&bad).unwrap_err().into_iter().map(|i| i.0).collect();
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
