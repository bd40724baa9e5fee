//! `laneway serve`: the gateway. A request's path reads by folder:
//! [`listen`] (accept, route) -> [`classify`] (which entry) -> [`pick`] (which replica) ->
//! [`forward`] (which connection) -> [`observe`] (what it cost). [`config`] is read once at
//! start; [`admin`] serves `/metrics` and `/health`.

pub mod admin;
pub mod body;
pub mod classify;
pub mod config;
pub mod demo;
pub mod entry;
pub mod error;
pub mod forward;
pub mod listen;
pub mod observe;
pub mod pick;
pub mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::GatewayConfig;
pub use entry::{Entry, Strategy};
use listen::ListenerRole;
use state::GatewayState;

/// `laneway serve` arguments.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML config file; without one, four simulated replicas start in-process.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check: bool,
    /// Override the smart listener's address (e.g. 127.0.0.1:0).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Override the admin listener's address.
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
}

/// A running gateway.
pub struct GatewayHandle {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    entry_addrs: HashMap<Entry, SocketAddr>,
    state: Arc<GatewayState>,
    stop: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    scrapers: Vec<JoinHandle<()>>,
}

impl GatewayHandle {
    /// The smart listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// An entry's dedicated listener, if configured.
    pub fn entry_addr(&self, entry: Entry) -> Option<SocketAddr> {
        self.entry_addrs.get(&entry).copied()
    }

    /// Requests in flight on a replica (until their bodies end); 0 for an unknown name.
    pub fn replica_in_flight(&self, name: &str) -> u64 {
        self.state.picker.by_name(name).map_or(0, |replica| replica.load.in_flight())
    }

    /// The Prometheus text the admin listener would serve.
    pub fn metrics_text(&self) -> String {
        self.state.metrics.render(&self.state.picker)
    }

    /// Stops accepting, drains open requests up to the configured deadline, stops scraping.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for listener in self.listeners {
            let _ = listener.await;
        }
        for scraper in self.scrapers {
            scraper.abort();
        }
    }
}

/// Binds every listener and starts serving.
pub async fn spawn(config: GatewayConfig) -> anyhow::Result<GatewayHandle> {
    let drain = config.drain_deadline;
    let smart = bind(config.listen, "listen").await?;
    let admin = bind(config.admin_listen, "admin_listen").await?;
    let mut dedicated = Vec::new();
    for entry in Entry::ALL {
        if let Some(addr) = config.entry(entry).listen {
            dedicated.push((entry, bind(addr, entry.as_str()).await?));
        }
    }
    let state = Arc::new(GatewayState::new(config));
    let (stop, stopped) = watch::channel(false);
    let addr = smart.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let mut entry_addrs = HashMap::new();
    let mut listeners = vec![tokio::spawn(listen::serve(
        smart,
        ListenerRole::Smart,
        state.clone(),
        stopped.clone(),
        drain,
    ))];
    for (entry, listener) in dedicated {
        entry_addrs.insert(entry, listener.local_addr()?);
        let role = ListenerRole::Entry(entry);
        listeners.push(tokio::spawn(listen::serve(
            listener,
            role,
            state.clone(),
            stopped.clone(),
            drain,
        )));
    }
    let mut admin_stopped = stopped.clone();
    let admin_router = admin::router(state.clone());
    listeners.push(tokio::spawn(async move {
        let shutdown = async move {
            let _ = admin_stopped.wait_for(|stop| *stop).await;
        };
        if let Err(error) = axum::serve(admin, admin_router).with_graceful_shutdown(shutdown).await
        {
            tracing::error!(%error, "admin listener failed");
        }
    }));
    let replicas = state.picker.snapshot();
    let scrapers =
        pick::scrape::spawn_scrapers(&replicas, state.picker.epoch, state.config.scrape_interval);
    Ok(GatewayHandle { addr, admin_addr, entry_addrs, state, stop, listeners, scrapers })
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| format!("cannot bind {what} on {addr}"))
}

/// Runs `laneway serve` until SIGINT or SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => GatewayConfig::load(path)?,
        None => GatewayConfig::with_replicas(Vec::new()),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(admin_listen) = args.admin_listen {
        config.admin_listen = admin_listen;
    }
    if args.config.is_some() && config.replicas.is_empty() {
        anyhow::bail!("replicas: at least one [[replicas]] entry is required");
    }
    if args.check {
        let replicas = config.replicas.len();
        println!("configuration OK: {replicas} replicas, policy {}", config.policy.as_str());
        return Ok(());
    }
    let sims = if args.config.is_none() {
        let (handles, replicas) = demo::start_replicas().await?;
        config.replicas = replicas;
        handles
    } else {
        Vec::new()
    };
    let gateway = spawn(config).await?;
    print_banner(&gateway, !sims.is_empty());
    wait_for_signal().await?;
    tracing::info!("shutting down: draining open requests");
    gateway.shutdown().await;
    demo::stop_replicas(sims).await;
    Ok(())
}

/// The first line is parsed by scripts and tests: keep its shape.
fn print_banner(gateway: &GatewayHandle, demo: bool) {
    let addr = gateway.addr();
    println!("listening on http://{addr}");
    println!("admin (metrics, health) on http://{}", gateway.admin_addr());
    for entry in Entry::ALL {
        if let Some(entry_addr) = gateway.entry_addr(entry) {
            println!("{entry} entry on http://{entry_addr}");
        }
    }
    for replica in gateway.state.picker.snapshot().iter() {
        let kind = if demo { "simulated h20-tp4 replica" } else { "replica" };
        println!("{kind} {} at http://{} (node {})", replica.name, replica.authority, replica.node);
    }
    println!("try:");
    println!(
        "  curl -sN http://{addr}/v1/chat/completions -H 'content-type: application/json' \\\n    \
         -d '{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}],\
         \"max_tokens\":16,\"stream\":true}}' -D - "
    );
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
