//! `laneway sim`: a vLLM-like replica simulator for demos, tests and benchmarks.
//!
//! It serves vLLM's OpenAI endpoints (streaming and not), `/health`, `/version`, `/load`,
//! `/get_load` (SGLang's shape) and `/metrics` (vLLM's names), and models time with a
//! continuous-batching engine ([`engine`]) behind API-server processes ([`api_workers`]) that
//! accept connections in batches and keep them ([`accept`]), stream output with priority and
//! preprocess new requests in the time left ([`preprocess`]), and caches prompt prefixes as vLLM does
//! ([`prefix_cache`], [`kv_cache`], tokens from [`crate::prompt_tokens`]), and can publish
//! that cache's changes as vLLM's KV-cache events ([`kv_event_log`], [`kv_events`]). Timing
//! parameters are data ([`profile`], `config/profiles/`).
//! Faults ([`Fault`]) break and heal a replica at runtime. See `docs/sim.md`.
//!
//! Start one in-process with [`spawn`]; the CLI ([`run`]) is a thin shell over it.

pub mod accept;
pub mod admin;
pub mod api_workers;
pub mod body;
pub mod chunks;
pub mod clock;
pub mod config;
pub mod engine;
pub mod fault;
pub mod inference;
pub mod kv_cache;
pub mod kv_event_log;
pub mod kv_events;
pub mod metrics;
pub mod prefix_cache;
pub mod preprocess;
pub mod profile;
pub mod routes;
pub mod server;
pub mod state;
pub mod stats;
pub mod step_jitter;
pub mod stream;
pub mod topology;

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;

pub use config::{SimConfig, SimError};
pub use fault::Fault;
pub use profile::Profile;
pub use server::{SimHandle, spawn};
pub use stats::SimStats;

/// Command-line arguments of `laneway sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Port to listen on (0 picks a free one; the first stdout line says which).
    #[arg(long)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Replica name, sent back in `x-sim-replica` (default: `sim-PORT`).
    #[arg(long)]
    pub id: Option<String>,
    /// Built-in profile: tiny, h20-tp4 or h20-tp8.
    #[arg(long, default_value = "h20-tp8", conflicts_with = "config")]
    pub profile: String,
    /// A profile TOML file (see config/profiles/).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// API-server processes sharing the listening socket (vLLM's --api-server-count).
    #[arg(long, default_value_t = 1)]
    pub api_workers: usize,
    /// Run the simulated clock this many times faster than the wall clock.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Seed for every random choice.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Turn prefix caching off (vLLM's flag of the same name); the profile's
    /// `engine.enable_prefix_caching` otherwise (on in every built-in profile).
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// Publish KV-cache events as vLLM does with `--kv-events-config` over ZeroMQ (PUB and
    /// replay sockets on free ports, listed by `GET /kv_event_sources`); the profile's
    /// `engine.kv_events` otherwise (off in every built-in profile).
    #[arg(long)]
    pub kv_events: bool,
    /// The model id served (vLLM's flag of the same name); the profile's otherwise.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// LoRA adapter names served besides the base model, listed in `/v1/models`
    /// (vLLM's `--lora-modules NAME=PATH`; a path after `=` is ignored).
    #[arg(long, num_args = 1.., value_delimiter = ',')]
    pub lora_modules: Vec<String>,
}

impl SimArgs {
    /// The validated configuration these arguments describe.
    pub fn to_config(&self) -> Result<SimConfig, SimError> {
        let mut profile = match &self.config {
            Some(path) => Profile::from_file(path)?,
            None => Profile::built_in(&self.profile)?,
        };
        if self.no_enable_prefix_caching {
            profile.engine.enable_prefix_caching = false;
        }
        if self.kv_events {
            profile.engine.kv_events = true;
        }
        if let Some(name) = &self.served_model_name {
            profile.served_model_name = name.clone();
        }
        for module in &self.lora_modules {
            let name = module.split_once('=').map_or(module.as_str(), |(name, _)| name);
            profile.lora_modules.push(name.to_string());
        }
        let config = SimConfig {
            id: self.id.clone().unwrap_or_else(|| format!("sim-{}", self.port)),
            host: self.host,
            port: self.port,
            profile,
            api_workers: self.api_workers,
            speed: self.speed,
            seed: self.seed,
        };
        config.validate()?;
        Ok(config)
    }
}

/// Runs `laneway sim`: prints `listening on http://HOST:PORT` as the first stdout line, then
/// serves until Ctrl-C (clean exit) or the `exit` fault (exit status 1, as a crash).
pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let mut config = args.to_config()?;
    if args.id.is_none() && args.port == 0 {
        config.id = "sim".into();
    }
    let handle = spawn(config).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{}", handle.addr())?;
    stdout.flush()?;
    drop(stdout);
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted, shutting down");
            handle.shutdown().await;
            Ok(())
        }
        _ = handle.exited() => {
            tracing::warn!("exit fault: the replica process stops as a crash");
            std::process::exit(1);
        }
    }
}
