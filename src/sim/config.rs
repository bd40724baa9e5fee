//! The simulator's typed configuration (`SimConfig`) and the errors of setting one up.

use std::net::{IpAddr, Ipv4Addr};

use super::profile::Profile;

/// Everything one simulated replica is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Replica name, sent back in `x-sim-replica`.
    pub id: String,
    pub host: IpAddr,
    /// 0 picks a free port.
    pub port: u16,
    pub profile: Profile,
    /// API-server processes sharing the listening socket (vLLM's `--api-server-count`).
    pub api_workers: usize,
    /// The simulated clock runs this many times faster than the wall clock.
    pub speed: f64,
    /// Seeds every random choice (the generated text).
    pub seed: u64,
}

impl SimConfig {
    /// Loopback, port 0, given built-in profile name ("tiny", "h20-tp4", "h20-tp8"), 1 api
    /// worker, speed 1, seed 0. Err on unknown profile.
    pub fn with_profile(id: impl Into<String>, profile: &str) -> Result<SimConfig, SimError> {
        Ok(SimConfig {
            id: id.into(),
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            profile: Profile::built_in(profile)?,
            api_workers: 1,
            speed: 1.0,
            seed: 0,
        })
    }

    /// Checks the fields the profile does not cover.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.api_workers == 0 || self.api_workers > 1024 {
            return Err(SimError::InvalidConfig {
                field: "api_workers",
                value: self.api_workers.to_string(),
                reason: "must be between 1 and 1024".into(),
            });
        }
        if !self.speed.is_finite() || self.speed <= 0.0 {
            return Err(SimError::InvalidConfig {
                field: "speed",
                value: self.speed.to_string(),
                reason: "must be a finite number > 0".into(),
            });
        }
        if self.id.is_empty() || http::HeaderValue::from_str(&self.id).is_err() {
            return Err(SimError::InvalidConfig {
                field: "id",
                value: self.id.clone(),
                reason: "must be non-empty and valid in an HTTP header".into(),
            });
        }
        self.profile.validate()
    }
}

/// Why a simulator could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown profile `{name}` (built-in profiles: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("cannot read profile file {path}: {source}")]
    ProfileRead {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {origin}: {message}")]
    ProfileParse { origin: String, message: String },
    #[error("invalid profile field `{field}` = {value}: {reason}")]
    InvalidProfile { field: &'static str, value: String, reason: String },
    #[error("invalid setting `{field}` = {value}: {reason}")]
    InvalidConfig { field: &'static str, value: String, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind the KV-event {socket} socket on {endpoint}: {source}")]
    KvEventsBind {
        socket: &'static str,
        endpoint: String,
        #[source]
        source: zeromq::ZmqError,
    },
    #[error("cannot set up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}
