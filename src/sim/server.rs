//! Starting and stopping a replica: binding (and the KV-event sockets, when on), the accept
//! loop that hands each connection to an API worker for its lifetime, serving connections
//! with hyper (HTTP/1.1 and h2c), the `exit` fault's crash and restart, and shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::accept::AcceptChoice;
use super::api_workers::ApiWorkers;
use super::clock::SimClock;
use super::config::{SimConfig, SimError};
use super::engine::{Engine, EngineLoad};
use super::fault::{Fault, FaultSwitch};
use super::kv_events::{KvEventPorts, KvEventPublisher};
use super::metrics::SimMetrics;
use super::routes;
use super::state::SimState;
use super::stats::{RequestCounters, SimStats};
use super::step_jitter::{StepJitter, replica_seed};

/// Pause after a failed accept before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// A running replica.
#[derive(Debug)]
pub struct SimHandle {
    state: Arc<SimState>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// The accept loop, the engine and the KV-event publisher (when on). Taken by
    /// `shutdown`; dropping the handle without it still stops the replica.
    tasks: Option<Vec<JoinHandle<()>>>,
}

/// Starts a replica in this process: binds `config.host:config.port` (0: any free port),
/// starts its engine and accept loop, and returns once it accepts connections.
pub async fn spawn(config: SimConfig) -> Result<SimHandle, SimError> {
    config.validate()?;
    let requested = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(requested)
        .await
        .map_err(|source| SimError::Bind { addr: requested, source })?;
    let addr =
        listener.local_addr().map_err(|source| SimError::Bind { addr: requested, source })?;
    let metrics = Arc::new(SimMetrics::new(&config.profile.served_model_name)?);
    let clock = SimClock::new(config.speed);
    let (engine_inbox, inbox) = mpsc::unbounded_channel();
    let (stop, stop_watch) = watch::channel(false);
    let mut tasks = Vec::with_capacity(3);
    let (kv_events, kv_event_ports) = if config.profile.engine.kv_events {
        let (publisher, ports, task) =
            KvEventPublisher::start(config.host, stop_watch.clone()).await?;
        tasks.push(task);
        (Some(publisher), Some(ports))
    } else {
        (None, None)
    };
    let engine_load = Arc::new(EngineLoad::default());
    let state = Arc::new(SimState {
        workers: Arc::new(ApiWorkers::new(config.api_workers)),
        clock: clock.clone(),
        engine_inbox,
        engine_load: engine_load.clone(),
        metrics: metrics.clone(),
        faults: FaultSwitch::default(),
        counters: Arc::new(RequestCounters::default()),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        kv_events: kv_event_ports,
        config,
    });
    let engine = Engine {
        profile: state.config.profile.engine.clone(),
        clock,
        inbox,
        faults: state.faults.subscribe(),
        metrics,
        load: engine_load,
        stop: stop_watch.clone(),
        kv_events,
        jitter: StepJitter::new(
            state.config.profile.engine.step_jitter,
            replica_seed(state.config.seed, &state.config.id),
        ),
    };
    tasks.push(tokio::spawn(engine.run()));
    tasks.push(tokio::spawn(accept_loop(state.clone(), listener, addr, stop_watch)));
    tracing::info!(id = %state.config.id, %addr, profile = %state.config.profile.name,
        api_workers = state.config.api_workers, speed = state.config.speed,
        kv_events = ?state.kv_events, "sim replica listening");
    Ok(SimHandle { state, addr, stop, tasks: Some(tasks) })
}

impl SimHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn id(&self) -> &str {
        &self.state.config.id
    }

    /// The ports KV-cache events are published and replayed on (`None`: they are off).
    pub fn kv_event_ports(&self) -> Option<KvEventPorts> {
        self.state.kv_events
    }

    /// A snapshot of the replica's counters.
    pub fn stats(&self) -> SimStats {
        self.state.stats()
    }

    /// Switches the replica's fault at runtime (`Fault::Healthy` heals it).
    pub fn set_fault(&self, fault: Fault) {
        self.state.faults.set(fault);
    }

    /// The fault currently switched on.
    pub fn fault(&self) -> Fault {
        self.state.faults.get()
    }

    /// Resolves when the `exit` fault is switched on.
    pub async fn exited(&self) {
        let mut faults = self.state.faults.subscribe();
        let _ = faults.wait_for(|fault| *fault == Fault::Exit).await;
    }

    /// Stops accepting, ends every connection and waits for the accept loop, the engine
    /// and the KV-event publisher.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        for task in self.tasks.take().unwrap_or_default() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    /// A dropped handle stops its replica (without waiting for it).
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Accepts connections until shutdown; while the `exit` fault is on, the listener is closed
/// and every connection dropped, and it listens again on `addr` when the fault changes.
async fn accept_loop(
    state: Arc<SimState>,
    listener: TcpListener,
    addr: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let mut listener = Some(listener);
    let mut faults = state.faults.subscribe();
    // Bumped to drop every open connection (crash or shutdown).
    let (drop_all, drop_watch) = watch::channel(0u64);
    let mut connections = JoinSet::new();
    let mut choice = AcceptChoice::new(&state.config.profile.api, state.config.seed);
    loop {
        let crashed = *faults.borrow_and_update() == Fault::Exit;
        if crashed && listener.is_some() {
            tracing::warn!(id = %state.config.id, "exit fault: dropping listener and connections");
            listener = None;
            drop_all.send_modify(|generation| *generation += 1);
        } else if !crashed && listener.is_none() {
            match TcpListener::bind(addr).await {
                Ok(bound) => listener = Some(bound),
                Err(error) => tracing::warn!(%error, %addr, "cannot listen again"),
            }
        }
        let accepted = tokio::select! {
            accepted = accept(&listener) => accepted,
            _ = faults.changed() => continue,
            _ = stop.wait_for(|stopped| *stopped) => break,
            Some(_) = connections.join_next() => continue,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let worker = choice.choose(&state.workers, state.clock.now());
                let serve = serve_connection(state.clone(), stream, worker, drop_watch.clone());
                connections.spawn(serve);
            }
            Err(error) => {
                // E.g. out of descriptors: back off instead of spinning on accept.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
    drop(listener);
    drop_all.send_modify(|generation| *generation += 1);
    while connections.join_next().await.is_some() {}
}

/// The next connection, or never while the listener is closed.
async fn accept(listener: &Option<TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Serves a connection on the API worker that accepted it until it closes or is dropped.
async fn serve_connection(
    state: Arc<SimState>,
    stream: TcpStream,
    worker: usize,
    mut drop_all: watch::Receiver<u64>,
) {
    drop_all.borrow_and_update();
    let _ = stream.set_nodelay(true);
    state.counters.connections_accepted.fetch_add(1, Ordering::Relaxed);
    let service = service_fn(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(routes::handle(state, worker, request).await) }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
        _ = drop_all.changed() => {}
    }
}
