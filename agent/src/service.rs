//! The one internal service interface of vgpud. REST, D-Bus and the CLI are thin adapters over
//! [`Service`]: they translate wire formats and errors, nothing more. Every method blocks (sysfs,
//! vendor calls, fsync, libvirt); async callers use `spawn_blocking`.
//!
//! The service joins the slice engine with what sits beside it: the local scheduler (`sched`),
//! which chooses where slices go when a request does not say, and VM pinning through libvirt
//! (`vmpin`), which puts a VM's vCPUs and memory on its slices' NUMA node. An allocation that
//! names a VM is pinned before it is committed: if pinning fails (libvirt down, no NUMA room
//! under `required`), nothing is allocated.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use ids::PciAddress;
use inventory::HostInventory;
use tokio::sync::broadcast;

use crate::apply_slot::{ApplyClaim, ApplySlot};
use crate::config::Config;
use crate::engine::{
    Allocation, AllocationId, AllocationRequest, CreateSlice, Engine, EngineError, Event, Layout,
    LayoutsView, NumaPolicy, ReconcileReport, Scheduling, Slice, SliceId, SliceRequest,
};
use crate::health::quarantine::{Quarantine, QuarantineSource, ReleaseHow};
use crate::health::view::GpuHealthView;
use crate::health::{Health, HealthSettings};
use crate::metrics::failure_reason;
use crate::metrics::process::ProcessStats;
use crate::pinning::{Pinner, PinningConfig, VmLinks};
use crate::placement::consumer::{ConsumerCheck, ConsumerVerdict};
use crate::placement::reporter::Reporter;
use crate::placement::status::PlacementStatus;
use crate::telemetry::TelemetryCache;

/// Result of a service call; errors carry stable machine codes ([`EngineError::code`]).
pub type Result<T> = std::result::Result<T, EngineError>;

/// How the service places slices and pins VMs.
#[derive(Debug, Clone, Default)]
pub struct ServiceOptions {
    /// Placement policy for requests without an explicit placement.
    pub policy: sched::Policy,
    /// VM pinning through libvirt; `None`: allocations naming a VM are not pinned.
    pub pinning: Option<PinningConfig>,
    /// Xid classification, quiet period, reset before release.
    pub health: HealthSettings,
    /// The OpenStack Placement reporter, when `[placement] enabled`; the daemon runs its loop.
    pub placement: Option<Arc<Reporter>>,
}

impl ServiceOptions {
    /// The options `vgpud.toml` describes: `[scheduler] policy`, `[libvirt]` and
    /// `[host] reserved_cpus`. An empty `libvirt.uri` turns pinning off.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            policy: policy_named(&config.scheduler.policy)?,
            pinning: PinningConfig::from_config(config)?,
            health: HealthSettings::from_config(&config.health),
            placement: None,
        })
    }
}

/// The scheduler policy a configuration name stands for (`vgpud`, `best-fit`, `first-fit`,
/// `spread`).
pub fn policy_named(name: &str) -> anyhow::Result<sched::Policy> {
    Ok(match name {
        "vgpud" => sched::Policy::default(),
        "best-fit" => sched::Policy::BestFit,
        "first-fit" => sched::Policy::FirstFit,
        "spread" => sched::Policy::Spread(sched::SpreadWeights::default()),
        other => anyhow::bail!(
            "unknown scheduler policy {other:?}: use vgpud, best-fit, first-fit or spread"
        ),
    })
}

// The answers' types are the engine's (it computes them); re-exported here for the front ends.
pub use crate::engine::{GpuDetail, GpuHealth, GpuUtilization, PlacementScore, SliceCapacity};

/// The agent's operations, as every front end sees them.
#[derive(Debug, Clone)]
pub struct Service {
    engine: Engine,
    policy: Arc<sched::Policy>,
    pinner: Option<Arc<Pinner>>,
    links: Arc<Mutex<VmLinks>>,
    apply_slot: Arc<ApplySlot>,
    telemetry: Arc<TelemetryCache>,
    /// The latest snapshot's part of `/metrics`, rendered once per snapshot.
    snapshot_text: Arc<crate::metrics::SnapshotText>,
    health: Arc<Health>,
    consumer_check: Option<Arc<dyn ConsumerCheck>>,
    placement: Option<Arc<Reporter>>,
}

impl Service {
    /// A service over an open engine, with the default placement policy and no VM pinning.
    pub fn new(engine: Engine) -> Self {
        Self::with_options(engine, ServiceOptions::default())
    }

    /// A service with explicit options.
    pub fn with_options(engine: Engine, options: ServiceOptions) -> Self {
        Self {
            health: Arc::new(Health::new(engine.clone(), options.health)),
            engine,
            policy: Arc::new(options.policy),
            pinner: options.pinning.map(|p| Arc::new(Pinner::new(p))),
            links: Arc::default(),
            apply_slot: Arc::default(),
            telemetry: Arc::default(),
            snapshot_text: Arc::default(),
            // The reporter knows this host's providers: it checks consumers against them.
            consumer_check: options
                .placement
                .clone()
                .map(|r| r as Arc<dyn ConsumerCheck>),
            placement: options.placement,
        }
    }

    /// Checks allocation requests that name a Placement consumer with `check` (the daemon sets
    /// it when Placement reporting is on).
    pub fn with_consumer_check(mut self, check: Arc<dyn ConsumerCheck>) -> Self {
        self.consumer_check = Some(check);
        self
    }

    /// The engine underneath (for the daemon's own housekeeping: reconcile loop, shutdown).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The cache `/metrics` is rendered from; a [`crate::telemetry::Poller`] fills it.
    pub fn telemetry_cache(&self) -> Arc<TelemetryCache> {
        self.telemetry.clone()
    }

    /// `/metrics` in OpenMetrics text: the telemetry cache's latest snapshot and the live
    /// counters. Never waits on the vendor library, sysfs or the engine.
    pub fn metrics_text(&self) -> std::result::Result<String, std::fmt::Error> {
        let snapshot = self.telemetry.latest();
        let mut out = String::from(self.snapshot_text.of(&snapshot)?.as_str());
        crate::metrics::render::render_live(
            &mut out,
            &snapshot,
            self.engine.metrics(),
            &ProcessStats::current(),
            self.placement_status().as_ref(),
            SystemTime::now(),
        )?;
        Ok(out)
    }

    /// The Placement reporter, when reporting is on.
    pub fn placement_reporter(&self) -> Option<&Arc<Reporter>> {
        self.placement.as_ref()
    }

    /// How the host stands with OpenStack Placement; `None` when reporting is off.
    pub fn placement_status(&self) -> Option<PlacementStatus> {
        self.placement.as_ref().map(|r| r.status())
    }

    /// The placement policy in force.
    pub fn policy(&self) -> &sched::Policy {
        &self.policy
    }

    /// The libvirt URI VM pinning uses, when pinning is on.
    pub fn libvirt_uri(&self) -> Option<String> {
        self.pinner.as_ref().map(|p| p.uri().to_owned())
    }

    /// The host: NUMA nodes, GPUs with their slicing capabilities and slices, PCI functions.
    pub fn host(&self) -> HostInventory {
        self.engine.inventory()
    }

    /// One GPU with health, utilisation and, per slice type, how many more fit.
    pub fn gpu(&self, address: PciAddress) -> Result<GpuDetail> {
        let mut detail = self.engine.gpu_detail(address)?;
        let slow = self.health.degraded_reasons(address);
        if detail.health == GpuHealth::Ok && !slow.is_empty() {
            detail.health = GpuHealth::Degraded;
        }
        detail.health_reasons.extend(slow);
        Ok(detail)
    }

    /// The health monitor (for the daemon's monitor threads).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// Every GPU's health, quarantine, Xid counts and last health signals, without a vendor
    /// call (what `/metrics` renders).
    pub fn health_view(&self) -> Vec<GpuHealthView> {
        self.health.view()
    }

    /// An operator quarantines a GPU: no new slices or allocations on it until an operator
    /// releases it (the probe never does). Quarantining one quarantined already by vgpud
    /// makes it the operator's.
    pub fn quarantine_gpu(&self, gpu: PciAddress, reason: &str) -> Result<Quarantine> {
        crate::engine::check_reason(reason)?;
        Ok(self
            .engine
            .quarantine(gpu, reason, QuarantineSource::Operator, None)?
            .record)
    }

    /// An operator returns a quarantined GPU to service; `conflict` when it is not quarantined.
    pub fn release_gpu(&self, gpu: PciAddress) -> Result<Quarantine> {
        let record = self.engine.release_gpu(gpu, ReleaseHow::Operator)?;
        self.health.forget_events(gpu);
        Ok(record)
    }

    /// Slices vgpud owns.
    pub fn slices(&self) -> Vec<Slice> {
        self.engine.slices()
    }

    /// The slices `allocations` hold (for answers about allocations: only those are observed).
    pub fn slices_held(&self, allocations: &[Allocation]) -> Vec<Slice> {
        self.engine.slices_held(allocations)
    }

    /// One owned slice.
    pub fn slice(&self, id: SliceId) -> Result<Slice> {
        self.engine.slice(id)
    }

    /// Creates a slice on an explicit GPU; without an explicit MIG start slot the scheduler
    /// chooses it.
    pub fn create_slice(&self, req: CreateSlice) -> Result<Slice> {
        self.engine.create_slice(req)
    }

    /// Destroys an owned, unallocated slice.
    pub fn destroy_slice(&self, id: SliceId) -> Result<()> {
        self.engine.destroy_slice(id)
    }

    /// Allocates slices to a consumer. The scheduler chooses GPUs and slots unless the request
    /// names a GPU. When the request names a VM and pinning is on, the VM's vCPUs and memory are
    /// pinned next to the slices before the allocation is committed (`pinning` in the answer);
    /// if that fails, nothing is allocated.
    pub fn allocate(&self, req: AllocationRequest) -> Result<Allocation> {
        let received = Instant::now();
        let metrics = self.engine.metrics();
        match self.allocate_timed(req, received) {
            Ok(a) => {
                let backend = a
                    .slices
                    .first()
                    .and_then(|id| self.engine.slice(*id).ok())
                    .map_or("", |s| s.spec.kind.backend().as_str());
                metrics.allocation_succeeded(backend, received.elapsed());
                Ok(a)
            }
            Err(e) => {
                metrics.allocation_failed(failure_reason(&e));
                Err(e)
            }
        }
    }

    /// [`Service::allocate`] without the counting; records how long the request waited for
    /// the VM planning lock and libvirt before the engine started on it.
    fn allocate_timed(&self, req: AllocationRequest, received: Instant) -> Result<Allocation> {
        let placement_gpus = self.placement_gpus(&req)?;
        // CPUs are accounted from the domains' pins: two VMs planned at once would both see
        // the same CPUs free.
        let _planning = self
            .pinner
            .as_ref()
            .filter(|_| req.vm.is_some())
            .map(|p| p.serialise());
        let vm = match (&self.pinner, &req.vm) {
            (Some(p), Some(vm)) => Some(p.prepare(vm, &req.request, || self.engine.inventory())?),
            _ => None,
        };
        let scheduling = Scheduling {
            policy: (*self.policy).clone(),
            numa: vm.as_ref().map(|v| v.numa_states()),
            pin_cpus: vm.as_ref().is_some_and(|v| v.pins_cpus()),
            vcpus: vm.as_ref().map(|v| v.vcpus()),
            memory_mib: vm.as_ref().map(|v| v.memory_mib()),
            reserved_cpus: self.reserved_cpus(),
            placement_gpus,
        };
        self.engine.metrics().allocation_waited(received.elapsed());
        match (&self.pinner, vm) {
            (Some(pinner), Some(vm)) => {
                let engine = self.engine.clone();
                let mut finish = |a: &Allocation| {
                    let slices = a
                        .slices
                        .iter()
                        .map(|id| engine.slice(*id))
                        .collect::<Result<Vec<_>>>()?;
                    pinner.apply(&vm, a, &slices).map(Some)
                };
                self.engine
                    .allocate_with(req, &scheduling, Some(&mut finish))
            }
            _ => self.engine.allocate_with(req, &scheduling, None),
        }
    }

    /// The GPU the request's Placement consumer holds its allocation on, when a check is set
    /// and the request names a consumer. A mismatch or an unreachable Placement refuses the
    /// request under strict checking (nothing allocated), else is warned about and the request
    /// is allocated as asked; each check is counted by outcome.
    fn placement_gpus(&self, req: &AllocationRequest) -> Result<Vec<(PciAddress, u32)>> {
        let (Some(consumer), Some(check)) = (req.placement_consumer, &self.consumer_check) else {
            return Ok(Vec::new());
        };
        let metrics = self.engine.metrics();
        match check.check(consumer, &req.request) {
            Ok(None) => Ok(Vec::new()),
            Ok(Some(ConsumerVerdict::Matches { gpus })) => {
                metrics.placement_consumer_checked("match");
                Ok(gpus)
            }
            Ok(Some(ConsumerVerdict::Mismatch(why))) => {
                metrics.placement_consumer_checked("mismatch");
                let why = format!("Placement consumer {consumer}: {why}");
                if check.strict() {
                    return Err(EngineError::PlacementMismatch(why));
                }
                tracing::warn!(consumer = %req.consumer, reason = %why, "allocating as asked although Placement holds no matching allocation (strict_consumers is off)");
                Ok(Vec::new())
            }
            Err(e) => {
                metrics.placement_consumer_checked("unavailable");
                let why = format!("cannot read Placement consumer {consumer}'s allocations: {e}");
                if check.strict() {
                    return Err(EngineError::PlacementUnavailable(why));
                }
                tracing::warn!(consumer = %req.consumer, reason = %why, "allocating as asked without Placement's word (strict_consumers is off)");
                Ok(Vec::new())
            }
        }
    }

    /// Holds the named free slices for `consumer`, all or none, recording `label` as the
    /// allocation's type: for a front end that picks the devices itself (kubelet's device
    /// manager chooses device ids, then asks the device plugin to allocate them).
    pub fn hold_slices(&self, consumer: &str, label: &str, ids: &[SliceId]) -> Result<Allocation> {
        self.engine.hold_slices(consumer, label, ids)
    }

    /// Releases an allocation: its VM pinning first (restoring the domain as it was), then the
    /// slices. libvirt down: `libvirt_unavailable` and nothing released.
    pub fn release(&self, id: AllocationId) -> Result<()> {
        let alloc = self.engine.allocation(id)?;
        if let (Some(pinner), Some(pinning)) = (&self.pinner, &alloc.pinning) {
            pinner.release(&pinning.domain, id)?;
        }
        self.engine.release(id)
    }

    /// Every allocation.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.engine.allocations()
    }

    /// One allocation.
    pub fn allocation(&self, id: AllocationId) -> Result<Allocation> {
        self.engine.allocation(id)
    }

    /// Would this host take the request, with what score (a dry run: nothing changes).
    pub fn placement_score(&self, request: SliceRequest) -> Result<PlacementScore> {
        let numa = self.numa_for(&request)?;
        self.engine
            .placement_score(&request, &self.scheduling(numa))
    }

    /// The demand mix the default policy has learnt from the requests placed here.
    pub fn demand_mix(&self) -> crate::engine::DemandMix {
        self.engine.demand_mix()
    }

    /// For a request that does not fit now, the cheapest re-layout of idle slices (or, with
    /// `allow_busy`, of VMs' slices too) that would make it fit.
    pub fn defrag_advice(
        &self,
        request: SliceRequest,
        allow_busy: bool,
    ) -> Result<sched::DefragAdvice> {
        let numa = self.numa_for(&request)?;
        self.engine
            .defrag_advice(&request, &self.scheduling(numa), allow_busy)
    }

    /// Declared layouts with their apply status per GPU.
    pub fn layouts(&self) -> LayoutsView {
        self.engine.layouts()
    }

    /// Checks layouts as [`Service::set_layouts`] does, changing nothing (REST answers `422`
    /// with it before it accepts an apply that runs in the background).
    pub fn check_layouts(&self, layouts: &[Layout]) -> Result<()> {
        self.engine.check_layouts(layouts)
    }

    /// Claims the one layout apply slot for apply `id` (`conflict` while another apply, from
    /// any front end, holds it). Hold the claim across the checks and [`Service::set_layouts`].
    pub fn claim_apply(&self, id: &str) -> Result<ApplyClaim> {
        self.apply_slot.claim(id)
    }

    /// Replaces the declared layouts and applies them (diff-based; allocated slices stay).
    /// Front ends call it holding a [`Service::claim_apply`] claim.
    pub fn set_layouts(&self, layouts: Vec<Layout>) -> Result<LayoutsView> {
        self.engine.set_layouts(layouts)
    }

    /// Imports what an operator has: a mig-parted config's layouts (they replace the declared
    /// ones and are applied) or mdevctl definitions (adopted or created as owned slices). With
    /// `dry_run`, only the diff: nothing changes.
    pub fn import_layouts(
        &self,
        source: crate::engine::import::ImportSource,
        dry_run: bool,
    ) -> Result<crate::engine::import::ImportOutcome> {
        self.engine.import(&source, dry_run)
    }

    /// Brings the host in line with the desired state, then rebuilds the allocation ↔ VM links
    /// from the libvirt domains' records: domains that name allocations or slices that no longer
    /// exist are reported (`stale_vm_links` and a `stale_vm_link` event each). libvirt down is
    /// not an error here: the links are rebuilt on the next pass.
    pub fn reconcile(&self) -> Result<ReconcileReport> {
        let started = Instant::now();
        let out = self.reconcile_links();
        let drift = out
            .as_ref()
            .map_or(0, |r| r.recreated.len() + r.failed.len() + r.given_up.len());
        self.engine
            .metrics()
            .reconciled(out.is_ok(), drift, started.elapsed());
        out
    }

    fn reconcile_links(&self) -> Result<ReconcileReport> {
        let mut report = self.engine.reconcile()?;
        if let Some(pinner) = &self.pinner {
            match pinner.scan(&self.engine.allocations(), &self.engine.slices()) {
                Ok(links) => {
                    for stale in &links.stale {
                        self.engine.emit(Event::StaleVmLink {
                            domain: stale.domain.clone(),
                            allocation: stale.allocation.clone(),
                            reason: stale.reason.clone(),
                        });
                    }
                    report.stale_vm_links = links.stale.clone();
                    *self.links.lock().unwrap_or_else(PoisonError::into_inner) = links;
                }
                Err(e) => {
                    tracing::warn!(error = %sysfs::error_chain(&e), "cannot rebuild VM links; retried on the next reconcile");
                }
            }
        }
        Ok(report)
    }

    /// The allocation ↔ VM links found by the last reconcile.
    pub fn vm_links(&self) -> VmLinks {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Slice, allocation, drift, layout and health events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.engine.subscribe()
    }

    /// NUMA room for a dry run: from libvirt's pins when pinning is on and libvirt answers,
    /// else from the inventory.
    fn numa_for(&self, request: &SliceRequest) -> Result<Option<Vec<sched::NumaState>>> {
        let Some(pinner) = &self.pinner else {
            return Ok(None);
        };
        if request.numa() == NumaPolicy::None {
            return Ok(None);
        }
        match pinner.free_numa(|| self.engine.inventory(), None) {
            Ok(numa) => Ok(Some(numa)),
            // A dry run still answers, from the inventory.
            Err(e @ EngineError::LibvirtUnavailable(_)) => {
                tracing::warn!(error = %e, "scoring without libvirt's CPU accounting");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn scheduling(&self, numa: Option<Vec<sched::NumaState>>) -> Scheduling {
        Scheduling {
            policy: (*self.policy).clone(),
            pin_cpus: numa.is_some(),
            numa,
            reserved_cpus: self.reserved_cpus(),
            ..Scheduling::default()
        }
    }

    fn reserved_cpus(&self) -> numa::CpuSet {
        self.pinner
            .as_ref()
            .map(|p| p.reserved_cpus().clone())
            .unwrap_or_default()
    }
}
