//! `vgpud run`: the daemon. It reads the configuration, opens the host (real or simulated) and
//! the engine, reconciles, then serves the REST API on a unix socket (and optionally TLS TCP and
//! an unauthenticated metrics listener) and D-Bus, with a periodic reconcile beside them.
//!
//! Lifecycle under systemd (`Type=notify`): `READY=1` once the first reconcile is done and every
//! listener accepts; `STATUS=` lines; watchdog pings at half `WATCHDOG_USEC`, sent only while the
//! engine answers. SIGTERM/SIGINT: stop accepting, let requests and a running reconcile finish,
//! exit 0 (an operation cut short anyway is rolled back by the engine's intents at the next
//! start). SIGHUP: re-read the tokens file and the configuration, apply what can change live,
//! log what needs a restart. A second daemon on the same state directory is refused by the engine's lock.
//!
//! This module only wires: the logic is the engine's, the wire formats are `api`'s.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent::config::{Config, DEFAULT_CONFIG};
use agent::engine::{Engine, EngineConfig, ReconcileReport};
use agent::service::{Service, ServiceOptions};
use anyhow::Context;
use clap::Args;
use hostwire::{self as host, HostChoice};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::daemon_config;
use crate::daemon_hotplug;
use crate::daemon_listen::{self, ServerResult};
use crate::daemon_systemd::Systemd;

/// How long listeners may take to finish their requests after a stop before they are cut
/// (a `/v1/events` stream never finishes on its own). Below systemd's TimeoutStopSec=60s.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long engine calls still running after the listeners stopped may take to finish.
const OPERATIONS_GRACE: Duration = Duration::from_secs(30);
/// How long connecting to the system bus and taking the name may take.
const DBUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `vgpud run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The configuration file (absent at the default location: every key has its default).
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Run on a simulated host (built-in profile name or TOML file) instead of the real one; the
    /// simulated host persists in STATE_DIR/sim and libvirt's test:///default is the hypervisor.
    #[arg(long, value_name = "PROFILE")]
    pub sim: Option<String>,
    /// The desired-state directory (overrides `state_dir`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The REST API's unix socket (overrides `api.socket`).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Do not serve D-Bus (overrides `dbus.enabled`).
    #[arg(long)]
    pub no_dbus: bool,
}

/// Runs the daemon until SIGTERM or SIGINT; an error means it could not start or a listener
/// failed.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = daemon_config::load(&args)?;
    crate::daemon_memory::limit_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("vgpud")
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(args, config));
    // Engine calls whose client went away are still running on blocking threads: let them
    // reach their commit point or undo rather than cutting them at exit.
    runtime.shutdown_timeout(OPERATIONS_GRACE);
    if result.is_ok() {
        info!("stopped");
    }
    result
}

/// The host the daemon works on (and `vgpud state recover` looks at).
pub(crate) fn host_choice(config: &Config) -> HostChoice {
    match crate::daemon_config::simulated(config) {
        Some(profile) => HostChoice::Sim {
            profile: profile.to_owned(),
            state_dir: Some(config.state_dir.join("sim")),
        },
        None => HostChoice::Real {
            root: config.sysfs_root.clone(),
        },
    }
}

/// Opens the host, the engine and the service, and runs the first reconcile (blocking). Returns
/// the service and the host's device events.
fn open_service(config: &Config) -> anyhow::Result<(Service, DeviceEvents)> {
    let choice = host_choice(config);
    let access = host::open(&choice)?;
    info!("host: {}", access.source);
    let events = access.events.clone();
    let mut engine_config = EngineConfig::new(&config.state_dir, access);
    engine_config.vendor_timeout = Duration::from_millis(config.engine.vendor_call_timeout_ms);
    let engine = Engine::open(engine_config)
        .with_context(|| format!("opening the state directory {}", config.state_dir.display()))?;
    let mut options = ServiceOptions::from_config(config)?;
    if crate::daemon_config::simulated(config).is_some() {
        // A simulated host has no hypervisor: libvirt's test driver stands in, over a host file
        // of the simulated topology, so pinning sees the NUMA nodes the scheduler sees.
        hostwire::pin_to_test_host(&mut options, &engine.inventory(), &engine.state_dir());
    }
    options.placement = crate::daemon_placement::reporter(config, &engine)?;
    let service = Service::with_options(engine, options);
    if let Some(uri) = service.libvirt_uri() {
        info!("VM pinning through libvirt at {uri}");
    }
    let report = service.reconcile().context("first reconcile")?;
    log_reconcile("first reconcile", &report);
    Ok((service, events))
}

type DeviceEvents = std::sync::Arc<dyn hotplug::EventSource>;

fn log_reconcile(what: &str, r: &ReconcileReport) {
    info!(
        "{what}: {} interrupted operations resolved, {} slices re-created, {} failed, {} foreign slices left alone",
        r.intents_resolved,
        r.recreated.len(),
        r.failed.len(),
        r.foreign.len()
    );
    for (slice, why) in &r.failed {
        warn!("slice {slice} is not as it should be: {why}");
    }
    for why in &r.intents_pending {
        warn!("operation still pending: {why}");
    }
    for (slice, why) in &r.given_up {
        warn!("slice {slice} was given up: {why}");
    }
    for what in &r.interrupted_sriov {
        warn!("interrupted NVIDIA SR-IOV sequence: {what}");
    }
    for link in &r.stale_vm_links {
        warn!(
            "VM {:?} of allocation {} is not pinned as recorded: {}",
            link.domain, link.allocation, link.reason
        );
    }
}

/// A one-line summary for `systemctl status` (blocking: asks the host).
fn summary(service: &Service, config: &Config) -> String {
    format!(
        "serving on {}: {} GPUs, {} slices, {} allocations",
        config.api.socket.display(),
        service.host().gpus.len(),
        service.slices().len(),
        service.allocations().len()
    )
}

/// What a signal asks for.
enum Request {
    Stop(&'static str),
    Reload,
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Takes over SIGTERM, SIGINT and SIGHUP (from now on they no longer kill the process).
    fn install() -> anyhow::Result<Self> {
        let take = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("installing the {name} handler"))
        };
        Ok(Self {
            term: take(SignalKind::terminate(), "SIGTERM")?,
            int: take(SignalKind::interrupt(), "SIGINT")?,
            hup: take(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    async fn next(&mut self) -> Request {
        tokio::select! {
            _ = self.term.recv() => Request::Stop("SIGTERM"),
            _ = self.int.recv() => Request::Stop("SIGINT"),
            _ = self.hup.recv() => Request::Reload,
        }
    }
}

/// A future that resolves once the daemon is told to stop.
fn stopped(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        // A dropped sender also means stop.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

async fn serve(args: RunArgs, mut config: Config) -> anyhow::Result<()> {
    crate::daemon_kubernetes::check(&config)?;
    let systemd = Systemd::from_env();
    let mut signals = Signals::install()?;
    systemd.status("starting: opening the host and the state directory, reconciling");

    let startup = tokio::task::spawn_blocking({
        let config = config.clone();
        move || open_service(&config)
    });
    tokio::pin!(startup);
    let (service, device_events) = loop {
        tokio::select! {
            opened = &mut startup => break opened.context("start-up task")??,
            request = signals.next() => if let Request::Stop(name) = request {
                // The first reconcile cannot be cut short; stop as soon as it is done.
                info!("{name} during start-up: stopping after the first reconcile");
                systemd.stopping("stopping: finishing the first reconcile");
                let _ = startup.await;
                return Ok(());
            },
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut servers = JoinSet::new();
    let simulated = crate::daemon_config::simulated(&config).is_some();
    let started = async {
        start_listeners(&mut servers, &service, &config, simulated, &stop_rx).await?;
        start_dbus(&service, &config, simulated).await
    }
    .await;
    let dbus = match started {
        Ok(dbus) => dbus,
        Err(e) => {
            // Listeners already up close properly (the socket file goes with them).
            let _ = stop_tx.send(true);
            drain(&mut servers).await;
            return Err(e);
        }
    };

    let status = blocking(&service, {
        let config = config.clone();
        move |s| summary(s, &config)
    })
    .await?;
    systemd.ready(&status);
    info!("ready: {status}");

    // Stops polling when dropped, at the end of `run`.
    let _telemetry = crate::daemon_metrics::start(&service, &config.metrics)?;
    let (interval_tx, interval_rx) = watch::channel(reconcile_interval(&config));
    let hotplug_wake = Arc::new(Notify::new());
    let hotplug = daemon_hotplug::start(
        &device_events,
        service.engine().clone(),
        hotplug_wake.clone(),
        stop_rx.clone(),
    );
    let pinger = systemd
        .watchdog_period()
        .map(|period| tokio::spawn(watchdog(systemd.clone(), service.clone(), period)));
    let reconciler = tokio::spawn(reconcile_loop(
        service.clone(),
        config.clone(),
        systemd.clone(),
        interval_rx,
        hotplug_wake,
        stop_rx.clone(),
    ));
    let health = crate::daemon_health::spawn(&service, &stop_rx);
    let placement = crate::daemon_placement::start(&service, &stop_rx);
    let kubernetes = crate::daemon_kubernetes::start(&service, &config, &stop_rx);
    let warm_pool = crate::daemon_warm_pool::start(&service, &config.warm_pool, &stop_rx);
    let trimming = crate::daemon_memory::start_trimming(&stop_rx);

    let outcome = loop {
        tokio::select! {
            request = signals.next() => match request {
                Request::Stop(name) => {
                    info!("{name}: stopping");
                    break Ok(());
                }
                Request::Reload => reload(&args, &mut config, &interval_tx),
            },
            Some(ended) = servers.join_next() => break listener_ended(ended),
        }
    };

    systemd.stopping("stopping: finishing requests and operations in flight");
    let _ = stop_tx.send(true);
    drain(&mut servers).await;
    // The reconcile loop returns at the stop signal, after a pass in progress has finished;
    // the watchdog keeps pinging until then.
    if let Err(e) = reconciler.await {
        error!("the reconcile loop failed: {e}");
    }
    health.join().await;
    if let Some(placement) = placement {
        placement.join().await;
    }
    if let Some(kubernetes) = kubernetes {
        let _ = kubernetes.await;
    }
    if let Some(warm_pool) = warm_pool {
        let _ = warm_pool.await;
    }
    let _ = trimming.await;
    if let Some(pinger) = pinger {
        pinger.abort();
    }
    if let Some(hotplug) = hotplug {
        hotplug.abort();
    }
    if let Some(connection) = dbus {
        drop(connection);
    }
    outcome
}

/// Runs a blocking service call on the blocking pool.
async fn blocking<R: Send + 'static>(
    service: &Service,
    f: impl FnOnce(&Service) -> R + Send + 'static,
) -> anyhow::Result<R> {
    let service = service.clone();
    tokio::task::spawn_blocking(move || f(&service))
        .await
        .context("a blocking engine call panicked")
}

async fn start_listeners(
    servers: &mut JoinSet<ServerResult>,
    service: &Service,
    config: &Config,
    simulated: bool,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let options = api::rest::RestOptions {
        max_body_bytes: config.api.max_body_bytes,
    };
    let router = api::rest::router(service.clone(), options);
    let group = daemon_listen::socket_group(config, simulated);
    daemon_listen::spawn_unix(servers, router.clone(), config, group, stopped(stop)).await?;
    daemon_listen::spawn_tls(servers, router, config, stopped(stop)).await?;
    let metrics = api::rest::metrics_router(service.clone());
    daemon_listen::spawn_metrics(servers, metrics, config, stopped(stop)).await
}

/// Serves D-Bus when enabled. On a simulated host a missing bus is only a warning (a laptop or a
/// container has none); on a real host it is an error, as operators rely on it.
async fn start_dbus(
    service: &Service,
    config: &Config,
    simulated: bool,
) -> anyhow::Result<Option<Box<dyn std::any::Any + Send>>> {
    if !config.dbus.enabled {
        return Ok(None);
    }
    let failure = match tokio::time::timeout(DBUS_TIMEOUT, api::dbus::serve(service.clone())).await
    {
        Ok(Ok(connection)) => {
            info!("D-Bus: serving {} on the system bus", api::dbus::BUS_NAME);
            return Ok(Some(Box::new(connection)));
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} s", DBUS_TIMEOUT.as_secs()),
    };
    let what = format!(
        "cannot serve {} on the system bus: {failure}",
        api::dbus::BUS_NAME
    );
    if simulated {
        warn!("{what}; running without D-Bus");
        return Ok(None);
    }
    anyhow::bail!("{what} (set [dbus] enabled = false or pass --no-dbus to run without it)")
}

fn listener_ended(ended: Result<ServerResult, tokio::task::JoinError>) -> anyhow::Result<()> {
    match ended {
        Ok((name, Ok(()))) => Err(anyhow::anyhow!("the {name} stopped unexpectedly")),
        Ok((name, Err(e))) => Err(e.context(format!("the {name} failed"))),
        Err(e) => Err(anyhow::anyhow!("a listener task failed: {e}")),
    }
}

/// Waits for the listeners to finish their requests, then cuts what is left (event streams).
async fn drain(servers: &mut JoinSet<ServerResult>) {
    let all = async {
        while let Some(ended) = servers.join_next().await {
            if let Ok((name, Err(e))) = ended {
                warn!("the {name} ended with an error while stopping: {e:#}");
            }
        }
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, all).await.is_err() {
        warn!(
            "connections still open {} s after the stop: closing them",
            DRAIN_TIMEOUT.as_secs()
        );
        servers.abort_all();
        while servers.join_next().await.is_some() {}
    }
}

fn reconcile_interval(config: &Config) -> Duration {
    Duration::from_secs(config.engine.reconcile_interval_s)
}

async fn reconcile_loop(
    service: Service,
    config: Config,
    systemd: Systemd,
    mut interval: watch::Receiver<Duration>,
    hotplug: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let period = *interval.borrow_and_update();
        // Device events wake the loop early: one place runs reconciles, one at a time.
        let what = tokio::select! {
            _ = tokio::time::sleep(period) => "periodic reconcile",
            _ = hotplug.notified() => "reconcile after device events",
            _ = interval.changed() => continue,
            _ = stop.wait_for(|s| *s) => return,
        };
        let config = config.clone();
        let pass = blocking(&service, move |s| {
            s.reconcile().map(|report| (report, summary(s, &config)))
        });
        match pass.await {
            Ok(Ok((report, status))) => {
                log_reconcile(what, &report);
                systemd.status(&status);
            }
            Ok(Err(e)) => {
                error!("{what} failed: {e}");
                systemd.status(&format!("degraded: the last reconcile failed: {e}"));
            }
            Err(e) => error!("{what}: {e:#}"),
        }
    }
}

/// Pings the watchdog while the engine answers a cheap call in time: a wedged engine lets
/// systemd restart the daemon.
async fn watchdog(systemd: Systemd, service: Service, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut healthy = true;
    loop {
        tick.tick().await;
        let probe = blocking(&service, |s| s.engine().pending_intents());
        let answered = matches!(tokio::time::timeout(period, probe).await, Ok(Ok(_)));
        if answered {
            systemd.watchdog_ping();
        } else if healthy {
            error!("the engine did not answer within {period:?}: withholding watchdog pings");
        }
        healthy = answered;
    }
}

/// SIGHUP, first part: re-reads the TLS listener's tokens file, so a token removed from it stops
/// working now. A file that cannot be read or parsed keeps the tokens in force.
fn reload_tokens() {
    for (path, outcome) in api::rest::reload_token_files() {
        match outcome {
            Ok(n) => info!(
                "SIGHUP: tokens file {} reloaded ({n} tokens)",
                path.display()
            ),
            Err(e) => error!(
                "SIGHUP: tokens file {} not reloaded, the tokens in force stay: {e}",
                path.display()
            ),
        }
    }
}

/// SIGHUP: re-reads the configuration (the same file and flags), applies what can change live
/// and names the keys that need a restart. A bad file keeps the running configuration.
fn reload(args: &RunArgs, config: &mut Config, interval: &watch::Sender<Duration>) {
    reload_tokens();
    let new = match daemon_config::load(args) {
        Ok(c) => c,
        Err(e) => {
            error!("SIGHUP: configuration not reloaded, the running one stays: {e:#}");
            return;
        }
    };
    let changes = daemon_config::changes(config, &new);
    if changes.is_empty() {
        info!("SIGHUP: configuration re-read, nothing changed");
        return;
    }
    if changes
        .live
        .iter()
        .any(|k| k == "engine.reconcile_interval_s")
    {
        config.engine.reconcile_interval_s = new.engine.reconcile_interval_s;
        let _ = interval.send(reconcile_interval(config));
    }
    if !changes.live.is_empty() {
        info!("SIGHUP: applied {}", changes.live.join(", "));
    }
    if !changes.need_restart.is_empty() {
        warn!(
            "SIGHUP: restart vgpud to apply {}",
            changes.need_restart.join(", ")
        );
    }
}
