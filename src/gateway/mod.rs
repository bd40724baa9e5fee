//! `laneway serve`: the gateway. A request's path reads by folder:
//! [`listen`] (accept, route) -> [`classify`] (which entry) -> [`pick`] (which replica) ->
//! [`forward`] (which connection) -> [`observe`] (what it cost). [`config`] is validated
//! once per load; [`reload`] switches it atomically; [`health`] and [`admission`] decide
//! which replicas take requests and how many; [`variants`] assigns canary variants;
//! [`canary_actions`] changes weights on verdicts when configured; [`capacity`] judges N-1
//! at SLO per fault unit; [`admin`] serves
//! `/metrics`, `/health`, the admin API and the status page.

pub mod admin;
pub mod admission;
pub mod body;
pub mod capacity;
pub mod classify;
pub mod client_fault;
pub mod clock;
pub mod config;
pub mod context;
pub mod discovery;
pub mod error;
pub mod forward;
pub mod framing;
pub mod headers;
pub mod health;
pub mod kv_events;
pub mod listen;
pub mod observe;
pub mod pick;
pub mod quota;
pub mod secrets;
pub mod state;
pub mod store_connection;
pub mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::GatewayConfig;
use config::demo;
pub use config::{Entry, Strategy};
use listen::ListenerRole;
use state::canary_actions;
use state::reload::{self, LiveState, ReloadError, Reloader};
use state::{GatewayState, Shared};

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
    reloader: Arc<Reloader>,
    stop: watch::Sender<bool>,
    abort_streams: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    health_checks: JoinHandle<()>,
    tls: Option<Arc<tls::ServerTls>>,
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
        self.state().picker.by_name(name).map_or(0, |replica| replica.load.in_flight())
    }

    /// The current request-path state (it changes on reload).
    pub fn state(&self) -> Arc<GatewayState> {
        self.reloader.live().load_full()
    }

    /// Refused connections and failed scrapes of a replica since its last success.
    pub fn replica_failures(&self, name: &str) -> u64 {
        self.state().picker.by_name(name).map_or(0, |replica| replica.load.failures())
    }

    /// Reads the listeners' certificate and key files again (new connections get them).
    pub fn reload_tls(&self) -> Result<(), tls::TlsError> {
        self.tls.as_ref().map_or(Ok(()), |tls| tls.reload())
    }

    /// Names of the replicas currently in the set (static and discovered).
    pub fn replica_names(&self) -> Vec<String> {
        self.state().picker.snapshot().iter().map(|replica| replica.name.clone()).collect()
    }

    /// The Prometheus text the admin listener would serve.
    pub fn metrics_text(&self) -> String {
        admin::render_metrics(&self.state())
    }

    /// Switches to `config` atomically; requests in flight finish on the old settings.
    pub async fn reload(&self, config: GatewayConfig) -> Result<(), ReloadError> {
        self.reloader.apply(config).await
    }

    /// Reloads from a file; an invalid file is refused (every problem logged).
    pub async fn reload_file(&self, path: &std::path::Path) -> Result<(), ReloadError> {
        self.reloader.apply_file(path).await
    }

    /// The reloader, for a SIGHUP handler.
    pub fn reloader(&self) -> Arc<Reloader> {
        self.reloader.clone()
    }

    /// Stops accepting and drains open requests up to the configured deadline; streams
    /// still open then end with an error event and `data: [DONE]`.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for listener in self.listeners {
            let _ = listener.await;
        }
        // Each listener waited up to the drain deadline: whatever is left is cut now, and
        // the cut bodies end within moments (bounded, in case one does not).
        let _ = self.abort_streams.send(true);
        let state = self.reloader.live().load_full();
        let _ = tokio::time::timeout(CUT_STREAMS_END_WITHIN, all_ended(&state)).await;
        self.health_checks.abort();
        self.reloader.stop().await;
    }
}

/// How long shutdown waits for streams it cut to drop their places.
const CUT_STREAMS_END_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Resolves once no admitted request and no request on any replica is left. Nothing new
/// arrives once the listeners have stopped, so the counts only fall: waiting for each in
/// turn is waiting for all.
async fn all_ended(state: &GatewayState) {
    state.shared.admission.idle().await;
    for replica in state.picker.snapshot().iter() {
        replica.load.idle().await;
    }
}

/// The gateway's sockets, bound before it starts: by [`Listeners::bind`] from the config's
/// addresses, or by the caller (an inherited socket, a test that needs the port first).
pub struct Listeners {
    pub smart: TcpListener,
    pub admin: TcpListener,
    /// One per entry with its own `listen` address.
    pub dedicated: Vec<(Entry, TcpListener)>,
}

impl Listeners {
    /// Binds every address the config names.
    pub async fn bind(config: &GatewayConfig) -> anyhow::Result<Self> {
        let smart = bind(config.listen, "listen").await?;
        let admin = bind(config.admin_listen, "admin_listen").await?;
        let mut dedicated = Vec::new();
        for entry in Entry::ALL {
            if let Some(addr) = config.entry(entry).listen {
                dedicated.push((entry, bind(addr, entry.as_str()).await?));
            }
        }
        Ok(Self { smart, admin, dedicated })
    }
}

/// Binds every listener and starts serving.
pub async fn spawn(config: GatewayConfig) -> anyhow::Result<GatewayHandle> {
    let listeners = Listeners::bind(&config).await?;
    spawn_on(config, listeners).await
}

/// Starts serving on listeners already bound (their addresses win over the config's).
pub async fn spawn_on(
    config: GatewayConfig,
    Listeners { smart, admin, dedicated }: Listeners,
) -> anyhow::Result<GatewayHandle> {
    let drain = config.drain_deadline;
    let tls = config.tls.as_ref().map(tls::ServerTls::load).transpose()?.map(Arc::new);
    let acceptor = tls.as_ref().map(|tls| tls.acceptor());
    let (abort_streams, aborted) = watch::channel(false);
    let shared = Shared::new(&config, aborted);
    let picker = Arc::new(pick::Picker::new(&config));
    // A replica joining the set may make room for requests waiting in the admission queue.
    let admission = shared.admission.clone();
    picker.set().on_change(Box::new(move || admission.notify_room()));
    let live: Arc<LiveState> =
        Arc::new(ArcSwap::from_pointee(GatewayState::with_shared(config, picker, shared)));
    let (stop, stopped) = watch::channel(false);
    let addr = smart.local_addr()?;
    let admin_addr = admin.local_addr()?;
    let mut entry_addrs = HashMap::new();
    let mut listeners = vec![tokio::spawn(listen::serve(
        smart,
        ListenerRole::Smart,
        live.clone(),
        stopped.clone(),
        drain,
        acceptor.clone(),
    ))];
    for (entry, listener) in dedicated {
        entry_addrs.insert(entry, listener.local_addr()?);
        let role = ListenerRole::Entry(entry);
        listeners.push(tokio::spawn(listen::serve(
            listener,
            role,
            live.clone(),
            stopped.clone(),
            drain,
            acceptor.clone(),
        )));
    }
    let mut admin_stopped = stopped.clone();
    let admin_router = admin::router(live.clone());
    listeners.push(tokio::spawn(async move {
        let shutdown = async move {
            let _ = admin_stopped.wait_for(|stop| *stop).await;
        };
        // The peer address decides admin read access (loopback only without a token).
        let service = admin_router.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(error) = axum::serve(admin, service).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "admin listener failed");
        }
    }));
    let health_checks = health::active::spawn({
        let live = live.clone();
        move || {
            let state = live.load_full();
            health::active::CheckRound {
                replicas: state.picker.snapshot(),
                health: state.health.clone(),
                upstream_tls: state.upstream_tls.clone(),
            }
        }
    });
    // Ends with the recorder; acts only when the config enables it.
    canary_actions::spawn(live.clone(), stopped.clone());
    capacity::spawn(live.clone(), stopped.clone());
    let reloader = Arc::new(Reloader::start(live).await);
    Ok(GatewayHandle {
        addr,
        admin_addr,
        entry_addrs,
        reloader,
        stop,
        abort_streams,
        listeners,
        health_checks,
        tls,
    })
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
    if args.config.is_some() && config.replicas.is_empty() && !config.discovery.is_active() {
        anyhow::bail!(
            "replicas: at least one [[replicas]] entry or a [discovery] source is required"
        );
    }
    if args.check {
        let policy = config.policy.as_str();
        match args.config {
            Some(_) => {
                println!("configuration OK: {} replicas, policy {policy}", config.replicas.len())
            }
            None => println!(
                "configuration OK: built-in defaults, policy {policy}, {} simulated replicas",
                demo::DEMO_REPLICAS
            ),
        }
        return Ok(());
    }
    let sims = if args.config.is_none() {
        let (handles, replicas) = demo::start_replicas().await?;
        config.replicas = replicas;
        // The demo serves on loopback: its debug entry may share the smart listener.
        config.debug_access.on_smart_listener = config.listen.ip().is_loopback();
        handles
    } else {
        Vec::new()
    };
    let gateway = spawn(config).await?;
    let _tls_reload = gateway.tls.clone().map(tls::reload_on_sighup).transpose()?;
    print_banner(&gateway, !sims.is_empty());
    let hangups = match &args.config {
        Some(path) => Some(reload::spawn_sighup(gateway.reloader(), path.clone())?),
        None => None,
    };
    wait_for_signal().await?;
    if let Some(hangups) = hangups {
        hangups.abort();
    }
    tracing::info!("shutting down: draining open requests");
    gateway.shutdown().await;
    demo::stop_replicas(sims).await;
    Ok(())
}

/// The first line is parsed by scripts and tests: keep its shape.
fn print_banner(gateway: &GatewayHandle, demo: bool) {
    let addr = gateway.addr();
    let scheme = if gateway.tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{addr}");
    println!("admin (metrics, health) on http://{}", gateway.admin_addr());
    for entry in Entry::ALL {
        if let Some(entry_addr) = gateway.entry_addr(entry) {
            println!("{entry} entry on http://{entry_addr}");
        }
    }
    for replica in gateway.state().picker.snapshot().iter() {
        let kind = if demo { "simulated h20-tp4 replica" } else { "replica" };
        let (name, scheme, authority) = (&replica.name, replica.scheme(), &replica.authority);
        println!("{kind} {name} at {scheme}://{authority} (node {})", replica.node);
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
