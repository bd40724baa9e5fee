//! `[discovery]` as validated data: a DNS name resolved every interval, and Kubernetes
//! EndpointSlices by label selector. Running them is [`crate::gateway::discovery`]'s; the DNS
//! source carries its resolver so that tests can script the answers.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;

use super::issues::Issues;

/// Where a pod finds its service-account token and CA.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `[discovery]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    pub dns: Option<RawDns>,
    pub kubernetes: Option<RawKubernetes>,
}

/// The validated discovery sources; both may be on, on top of the static replicas.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveryConfig {
    pub dns: Option<DnsDiscovery>,
    pub kubernetes: Option<KubernetesDiscovery>,
}

impl DiscoveryConfig {
    /// Validates `[discovery]`; every bad field goes to `issues` by path.
    pub fn from_raw(raw: &RawDiscovery, issues: &mut Issues) -> Option<Self> {
        let before = issues.len();
        let dns = raw.dns.as_ref().and_then(|raw| DnsDiscovery::from_raw(raw, issues));
        let kubernetes =
            raw.kubernetes.as_ref().and_then(|raw| KubernetesDiscovery::from_raw(raw, issues));
        (issues.len() == before).then_some(Self { dns, kubernetes })
    }

    pub fn is_active(&self) -> bool {
        self.dns.is_some() || self.kubernetes.is_some()
    }
}

/// `[discovery.dns]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    pub name: Option<String>,
    pub port: Option<u16>,
    pub interval_ms: Option<u64>,
    /// Reach the addresses over TLS; their certificates must name the IP (an IP SAN).
    pub https: Option<bool>,
}

/// Resolves a name to addresses.
pub trait Resolver: Send + Sync + 'static {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default)]
pub struct SystemResolver;

/// The one shared [`SystemResolver`]: configs compare resolvers by pointer, so a reload of
/// an unchanged `[discovery.dns]` equals the running one and does not restart it.
fn system_resolver() -> Arc<dyn Resolver> {
    static SYSTEM: std::sync::OnceLock<Arc<dyn Resolver>> = std::sync::OnceLock::new();
    SYSTEM.get_or_init(|| Arc::new(SystemResolver)).clone()
}

impl Resolver for SystemResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, port)).await?.collect()) })
    }
}

/// A validated DNS source.
#[derive(Clone)]
pub struct DnsDiscovery {
    pub name: String,
    pub port: u16,
    pub interval: Duration,
    /// `https = true`: TLS to each address, verified against the IP.
    pub https: bool,
    pub resolver: Arc<dyn Resolver>,
}

impl fmt::Debug for DnsDiscovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsDiscovery")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("interval", &self.interval)
            .field("https", &self.https)
            .finish_non_exhaustive()
    }
}

impl PartialEq for DnsDiscovery {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.port == other.port
            && self.interval == other.interval
            && self.https == other.https
            && Arc::ptr_eq(&self.resolver, &other.resolver)
    }
}

impl DnsDiscovery {
    pub fn new(name: impl Into<String>, port: u16, interval: Duration) -> Self {
        Self { name: name.into(), port, interval, https: false, resolver: system_resolver() }
    }

    pub fn from_raw(raw: &RawDns, issues: &mut Issues) -> Option<Self> {
        let before = issues.len();
        let name = raw.name.clone().unwrap_or_default();
        if name.is_empty() {
            issues.add("discovery.dns.name", "is required");
        }
        let port = raw.port.unwrap_or(0);
        if port == 0 {
            issues.add("discovery.dns.port", "is required (1..=65535)");
        }
        let interval_ms = raw.interval_ms.unwrap_or(5000);
        if !(100..=3_600_000).contains(&interval_ms) {
            let message = format!("{interval_ms} is out of range 100..=3600000");
            issues.add("discovery.dns.interval_ms", message);
        }
        if issues.len() > before {
            return None;
        }
        let source = Self::new(name, port, Duration::from_millis(interval_ms));
        Some(Self { https: raw.https.unwrap_or(false), ..source })
    }
}

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

impl KubernetesDiscovery {
    pub fn from_raw(raw: &RawKubernetes, issues: &mut Issues) -> Option<Self> {
        let before = issues.len();
        let api_text = raw.api.as_deref().unwrap_or("https://kubernetes.default.svc");
        let api = api_text.parse::<http::Uri>().ok().filter(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if api.is_none() {
            issues.add("discovery.kubernetes.api", format!("`{api_text}` is not an http(s) URL"));
        }
        let mut required = |field: &str, value: &Option<String>| {
            let value = value.clone().unwrap_or_default();
            if value.is_empty() {
                issues.add(format!("discovery.kubernetes.{field}"), "is required");
            }
            value
        };
        let namespace = required("namespace", &raw.namespace);
        let label_selector = required("label_selector", &raw.label_selector);
        let interval_ms = raw.interval_ms.unwrap_or(5000);
        if !(100..=3_600_000).contains(&interval_ms) {
            let message = format!("{interval_ms} is out of range 100..=3600000");
            issues.add("discovery.kubernetes.interval_ms", message);
        }
        let in_cluster = |file: &str| {
            let path = Path::new(SERVICE_ACCOUNT).join(file);
            path.exists().then_some(path)
        };
        let token_file = raw.token_file.as_ref().map(PathBuf::from).or_else(|| in_cluster("token"));
        let ca_file = raw.ca_file.as_ref().map(PathBuf::from).or_else(|| in_cluster("ca.crt"));
        match api {
            Some(api) if issues.len() == before => Some(Self {
                api,
                namespace,
                label_selector,
                port_name: raw.port_name.clone(),
                token_file,
                ca_file,
                interval: Duration::from_millis(interval_ms),
                replica_https: raw.replica_https.unwrap_or(false),
            }),
            _ => None,
        }
    }
}
