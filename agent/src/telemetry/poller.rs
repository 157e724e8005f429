//! The telemetry poller: one thread that, every `[metrics] poll_interval_ms` and soon after
//! each engine event (a slice or allocation changed), reads every GPU through the time-bounded
//! vendor calls and swaps a fresh snapshot into the cache. A GPU whose call fails or times out
//! has no device reading in that snapshot (its gauges disappear rather than go stale) and counts
//! in `vgpud_telemetry_errors_total`; its `vgpud_telemetry_age_seconds` keeps growing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use ids::PciAddress;

use super::cache::TelemetryCache;
use super::idle::{Held, IdleTracker};
use super::snapshot::{GpuSnapshot, MigSnapshot, SliceSnapshot, TelemetrySnapshot};
use crate::config::MetricsConfig;
use crate::engine::{Engine, GpuCapacity, GpuReading, Slice, SliceKind, SliceState};
use crate::health::Health;
use crate::health::view::{GpuHealthView, HealthState};

/// How often to poll and what counts as idle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollerSettings {
    /// Time between polls.
    pub interval: Duration,
    /// Utilisation under which an allocated slice is idle, 0..1.
    pub idle_threshold: f64,
    /// How long it must stay under it.
    pub idle_window: Duration,
}

impl PollerSettings {
    /// The settings of `[metrics]`.
    pub fn from_config(m: &MetricsConfig) -> Self {
        Self {
            interval: Duration::from_millis(m.poll_interval_ms),
            idle_threshold: f64::from(m.idle_utilization_pct) / 100.0,
            idle_window: Duration::from_secs(m.idle_window_s),
        }
    }
}

impl Default for PollerSettings {
    fn default() -> Self {
        Self::from_config(&MetricsConfig::default())
    }
}

/// Engine events closer together than this are taken in one poll.
const EVENT_DEBOUNCE: Duration = Duration::from_millis(200);

enum Wake {
    Event,
    Stop,
}

/// Reads the host and fills the cache.
#[derive(Debug)]
pub struct Poller {
    engine: Engine,
    cache: Arc<TelemetryCache>,
    settings: PollerSettings,
    health: Option<Arc<Health>>,
    idle: IdleTracker,
    last_read: HashMap<PciAddress, SystemTime>,
    last_poll: Option<Instant>,
}

/// A running poller; dropping it stops the thread after its current poll.
#[derive(Debug)]
pub struct PollerHandle {
    wake: mpsc::Sender<Wake>,
}

impl Drop for PollerHandle {
    fn drop(&mut self) {
        // The thread may already be gone.
        let _ = self.wake.send(Wake::Stop);
    }
}

impl Poller {
    /// A poller filling `cache` from `engine`.
    pub fn new(engine: Engine, cache: Arc<TelemetryCache>, settings: PollerSettings) -> Self {
        Self {
            engine,
            cache,
            settings,
            health: None,
            idle: IdleTracker::default(),
            last_read: HashMap::new(),
            last_poll: None,
        }
    }

    /// Takes each GPU's health (quarantine, Xids, health signals) from the health monitor: a
    /// scrape then shows them without asking the monitor, which reads the engine's state.
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        self.health = Some(health);
        self
    }

    /// Starts the polling thread (the first poll at once).
    pub fn spawn(mut self) -> std::io::Result<PollerHandle> {
        let (tx, rx) = mpsc::channel();
        let events = tx.clone();
        let mut sub = self.engine.subscribe();
        std::thread::Builder::new()
            .name("vgpud-events-to-poller".into())
            .spawn(move || {
                // Ends when the engine closes its channel or the poller is gone.
                while let Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) =
                    sub.blocking_recv()
                {
                    if events.send(Wake::Event).is_err() {
                        break;
                    }
                }
            })?;
        std::thread::Builder::new()
            .name("vgpud-telemetry".into())
            .spawn(move || {
                loop {
                    self.poll_once();
                    match rx.recv_timeout(self.settings.interval) {
                        Ok(Wake::Event) => {
                            std::thread::sleep(EVENT_DEBOUNCE);
                            // Take every event that came meanwhile in this poll.
                            if rx.try_iter().any(|w| matches!(w, Wake::Stop)) {
                                break;
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })?;
        Ok(PollerHandle { wake: tx })
    }

    /// One poll: reads every GPU and swaps the snapshot in.
    pub fn poll_once(&mut self) {
        let started = Instant::now();
        let inventory = self.engine.inventory();
        let slices = self.engine.slices();
        let allocations = self.engine.allocations();
        let capacity = self.engine.capacity(&inventory, &slices);
        let now = SystemTime::now();
        let health: Vec<GpuHealthView> = self.health.as_ref().map(|h| h.view()).unwrap_or_default();
        let readings: Vec<GpuReading> = inventory
            .gpus
            .iter()
            .map(|g| self.engine.read_telemetry(g))
            .collect();
        let gpus: Vec<GpuSnapshot> = inventory
            .gpus
            .iter()
            .zip(&readings)
            .enumerate()
            .map(|(i, (g, r))| {
                let mut snap = self.gpu_snapshot(i, g, r, &slices, &capacity, now);
                if let Some(view) = health.iter().find(|v| v.address == g.pci_address) {
                    apply_health(&mut snap, view);
                }
                snap
            })
            .collect();
        let slice_rows: Vec<SliceSnapshot> = slices
            .iter()
            .map(|s| slice_snapshot(s, &inventory, &readings, &allocations))
            .collect();
        self.count_held(&slice_rows);
        let held: Vec<Held<'_>> = slice_rows
            .iter()
            .filter(|s| s.state == "allocated")
            .map(|s| Held {
                slice: &s.slice,
                consumer: &s.consumer,
                utilization: s.utilization,
            })
            .collect();
        let idle_by_consumer = self.idle.update(
            &held,
            self.settings.idle_threshold,
            self.settings.idle_window,
            Instant::now(),
        );
        self.engine.metrics().telemetry_polled(started.elapsed());
        self.cache.store(TelemetrySnapshot {
            taken: Some(SystemTime::now()),
            hostname: inventory.hostname.clone(),
            gpus,
            slices: slice_rows,
            allocations: allocations.len(),
            idle_by_consumer,
        });
    }

    /// Adds the time since the last poll to every allocated slice's consumer.
    fn count_held(&mut self, slices: &[SliceSnapshot]) {
        let now = Instant::now();
        let dt = self
            .last_poll
            .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        self.last_poll = Some(now);
        for s in slices.iter().filter(|s| !s.consumer.is_empty()) {
            self.engine.metrics().consumer_held(&s.consumer, dt);
        }
    }

    fn gpu_snapshot(
        &mut self,
        index: usize,
        g: &inventory::Gpu,
        reading: &GpuReading,
        slices: &[Slice],
        capacity: &[GpuCapacity],
        now: SystemTime,
    ) -> GpuSnapshot {
        let addr = g.pci_address;
        let failed = slices
            .iter()
            .any(|s| s.spec.gpu == addr && s.state == SliceState::Failed);
        let mut health = if failed || !g.warnings.is_empty() {
            HealthState::Degraded
        } else {
            HealthState::Ok
        };
        let telemetry = match &reading.telemetry {
            Some(Ok(t)) => {
                self.last_read.insert(addr, now);
                Some(*t)
            }
            Some(Err(e)) => {
                tracing::debug!(gpu = %addr, error = %e, "telemetry reading failed");
                self.engine.metrics().telemetry_error(&addr.to_string());
                if e.code == gpu::NvmlCode::TIMEOUT || e.code == gpu::NvmlCode::GPU_IS_LOST {
                    health = HealthState::Unresponsive;
                } else {
                    health = HealthState::Degraded;
                }
                None
            }
            None => None,
        };
        let cap = capacity.iter().find(|c| c.gpu == addr);
        let vendor = format!("{:?}", g.vendor).to_lowercase();
        GpuSnapshot {
            index,
            uuid: g.uuid.clone().unwrap_or_default(),
            pci_bus_id: addr.to_string(),
            device: format!("{vendor}{index}"),
            model: g.model.clone(),
            vendor,
            numa_node: g.numa_node.map(|n| u32::from(n.0)),
            telemetry,
            read_at: self.last_read.get(&addr).copied(),
            mig: mig_rows(g, reading),
            health,
            capacity: cap.map(|c| c.types.clone()).unwrap_or_default(),
            fragmentation: cap.map_or(0.0, |c| c.fragmentation),
            waste: cap.map_or(0.0, |c| c.waste),
            stranded: cap.map_or(0.0, |c| c.stranded),
            last_xid: None,
            xid_events: Vec::new(),
            signals: None,
        }
    }
}

/// The health monitor's word on a GPU: its state wins over what this poll saw when it is worse
/// (a quarantine is never hidden by a good telemetry reading), and its Xid counts and health
/// signals go with the snapshot.
fn apply_health(snap: &mut GpuSnapshot, view: &GpuHealthView) {
    snap.health = snap.health.max(view.state);
    snap.last_xid = view.last_xid;
    snap.xid_events = view
        .xid_events
        .iter()
        .map(|x| (x.xid, x.action.as_str(), x.count))
        .collect();
    snap.signals = view.signals;
}

/// The MIG devices NVML reported, with their profile from the inventory.
fn mig_rows(g: &inventory::Gpu, reading: &GpuReading) -> Vec<MigSnapshot> {
    reading
        .mig
        .iter()
        .map(|m| MigSnapshot {
            profile: g
                .mig
                .as_ref()
                .and_then(|mi| {
                    mi.instances
                        .iter()
                        .find(|i| i.gpu_instance_id == m.gpu_instance_id)
                })
                .map(|i| i.profile.clone())
                .unwrap_or_default(),
            gpu_instance_id: m.gpu_instance_id,
            used_bytes: m.used_bytes,
            total_bytes: m.total_bytes,
        })
        .collect()
}

/// The type of a slice as requests and the capacity gauges name it.
fn type_label(kind: &SliceKind, gpu: Option<&inventory::Gpu>) -> String {
    match kind {
        SliceKind::Mdev { type_id } => type_id.to_string(),
        SliceKind::NvidiaVfio { vgpu_type, .. } => gpu
            .and_then(|g| g.vgpu_types.iter().find(|t| t.id == *vgpu_type))
            .map_or_else(|| vgpu_type.to_string(), |t| t.name.clone()),
        SliceKind::SriovVf => "vf".into(),
        SliceKind::Mig { profile, .. } => profile.to_string(),
        SliceKind::Passthrough => "gpu".into(),
    }
}

fn slice_snapshot(
    s: &Slice,
    inventory: &inventory::HostInventory,
    readings: &[GpuReading],
    allocations: &[crate::engine::Allocation],
) -> SliceSnapshot {
    let at = inventory
        .gpus
        .iter()
        .position(|g| Some(g.pci_address) == s.spec.gpu.pci());
    let gpu = at.and_then(|i| inventory.gpus.get(i));
    let reading = at.and_then(|i| readings.get(i));
    let h = &s.handles;
    let handle = match (&h.mdev_uuid, h.pci_address, h.gpu_instance_id) {
        (Some(u), _, _) => u.to_string(),
        (None, Some(a), _) => a.to_string(),
        (None, None, Some(gi)) => format!("gi{gi}"),
        (None, None, None) => String::new(),
    };
    let (fb_used_bytes, utilization) = reading.map_or((None, None), |r| usage_of(s, r));
    let owner = s.owner.as_ref();
    let vm = owner.and_then(|o| o.vm.clone()).or_else(|| {
        let id = owner?.allocation;
        let a = allocations.iter().find(|a| a.id == id)?;
        a.pinning.as_ref().map(|p| p.domain.clone())
    });
    let (vm_name, vm_uuid) = match vm {
        Some(v) if uuid::Uuid::parse_str(&v).is_ok() => (String::new(), v),
        Some(v) => (v, String::new()),
        None => (String::new(), String::new()),
    };
    SliceSnapshot {
        slice: s.id.to_string(),
        handle,
        backend: s.spec.kind.backend().as_str().to_owned(),
        slice_type: type_label(&s.spec.kind, gpu),
        pci_bus_id: s.spec.gpu.to_string(),
        gpu_uuid: gpu.and_then(|g| g.uuid.clone()).unwrap_or_default(),
        state: serde_json::to_value(s.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        vm_name,
        vm_uuid,
        consumer: owner.map(|o| o.consumer.clone()).unwrap_or_default(),
        allocation: owner.map(|o| o.allocation.to_string()).unwrap_or_default(),
        fb_used_bytes,
        utilization,
    }
}

/// Framebuffer and utilisation of one slice, where the vendor reports them: an mdev vGPU by its
/// UUID, a MIG-backed vGPU by its GPU instance, a MIG instance by its MIG device's memory (NVML
/// has no per-instance utilisation without GPM).
fn usage_of(s: &Slice, r: &GpuReading) -> (Option<u64>, Option<f64>) {
    let h = &s.handles;
    let vgpu = r
        .vgpus
        .iter()
        .find(|v| match (&h.mdev_uuid, h.gpu_instance_id) {
            (Some(u), _) => v.mdev_uuid.as_deref() == Some(u.to_string().as_str()),
            (None, Some(gi)) => {
                matches!(s.spec.kind, SliceKind::NvidiaVfio { .. }) && v.gpu_instance_id == Some(gi)
            }
            (None, None) => false,
        });
    if let Some(v) = vgpu {
        return (
            Some(v.fb_used_bytes),
            v.sm_util_pct.map(|u| f64::from(u.min(100)) / 100.0),
        );
    }
    if let (SliceKind::Mig { .. }, Some(gi)) = (&s.spec.kind, h.gpu_instance_id) {
        let used = r
            .mig
            .iter()
            .find(|m| m.gpu_instance_id == gi)
            .map(|m| m.used_bytes);
        return (used, None);
    }
    (None, None)
}
