//! Time-bounded vendor library calls.
//!
//! NVML and AMD SMI calls can hang (a GPU falling off the bus, a wedged driver). Each call runs
//! on a helper thread and the caller waits at most the configured timeout; past it the caller
//! gets a timeout and the GPU is marked *stuck* until the abandoned call returns, so later calls
//! on that GPU fail fast instead of piling up threads, while other GPUs carry on. The adapters
//! [`TimedNvml`] and [`TimedAmd`] implement the vendor traits, so discovery and the backends
//! use the same bounded path.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gpu::{
    AmdError, AmdGpuInfo, AmdResult, AmdSmi, AmdStatus, ComputeInstance, ComputeInstanceProfile,
    DeviceInfo, GpuInstance, GpuInstanceProfile, MigMemory, MigMode, Nvml, NvmlCode, NvmlError,
    NvmlResult, PartitionState, Placement, Telemetry, VfCount, VgpuTypeInfo, VgpuUsage, XidEvent,
};
use ids::PciAddress;

use super::host_changes::HostChanges;
use super::kept_geometry::KeptGeometry;
use crate::call_pool::Pool;
use crate::metrics::Metrics;

/// `AMDSMI_STATUS_TIMEOUT` in `amdsmi_status_t`.
pub(crate) const AMD_TIMEOUT: AmdStatus = AmdStatus(8);

/// What a stuck call blocks: one NVML device, one GPU for AMD SMI, or calls naming no GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Gate {
    NvmlIndex(u32),
    Gpu(PciAddress),
    Global,
}

/// Runs calls on helper threads with a deadline and remembers which gates have calls still out.
#[derive(Debug)]
pub(crate) struct Runner {
    timeout: Duration,
    stuck: Mutex<HashMap<Gate, usize>>,
    /// Where each call's latency and error code are counted.
    metrics: Metrics,
    /// The helper threads calls run on.
    pool: Pool,
    /// Counts the mutating calls (see `host_changes`).
    pub(crate) changes: HostChanges,
    /// MIG GPUs' profiles and placements, kept between calls (`kept_geometry`).
    geometry: KeptGeometry,
}

#[derive(Default)]
struct CallState {
    abandoned: bool,
}

impl Runner {
    pub(crate) fn new(timeout: Duration, metrics: Metrics) -> Arc<Self> {
        let changes = HostChanges::default();
        Arc::new(Self {
            timeout,
            stuck: Mutex::new(HashMap::new()),
            metrics,
            pool: Pool::new("vgpud-vendor"),
            geometry: KeptGeometry::new(changes.clone()),
            changes,
        })
    }

    /// Counts one finished (or abandoned) call.
    fn record(&self, call: &'static str, started: Instant, error: Option<u32>) {
        self.metrics.vendor_call(call, started.elapsed(), error);
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether any abandoned call is still running.
    pub(crate) fn any_stuck(&self) -> bool {
        self.stuck
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|n| *n > 0)
    }

    fn is_stuck(&self, gate: Gate) -> bool {
        let map = self.stuck.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&gate).is_some_and(|n| *n > 0)
    }

    fn adjust(&self, gate: Gate, up: bool) {
        let mut map = self.stuck.lock().unwrap_or_else(PoisonError::into_inner);
        let n = map.entry(gate).or_insert(0);
        *n = if up { *n + 1 } else { n.saturating_sub(1) };
    }

    /// `None` when the call did not answer within `limit` (or an earlier one on the same gate is
    /// still out, or no thread could be started).
    fn run<T: Send + 'static>(
        self: &Arc<Self>,
        gate: Gate,
        limit: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        if self.is_stuck(gate) {
            return None;
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let state = Arc::new(Mutex::new(CallState::default()));
        let (runner, thread_state) = (self.clone(), state.clone());
        let spawned = self.pool.spawn(f, move |out| {
            let st = thread_state.lock().unwrap_or_else(PoisonError::into_inner);
            if st.abandoned {
                runner.adjust(gate, false);
            } else {
                // Capacity 1 and one send: never blocks.
                let _ = tx.send(out);
            }
        });
        if spawned.is_err() {
            return None;
        }
        if let Ok(v) = rx.recv_timeout(limit) {
            return Some(v);
        }
        let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
        // The thread may have answered between the deadline and the lock.
        if let Ok(v) = rx.try_recv() {
            return Some(v);
        }
        st.abandoned = true;
        self.adjust(gate, true);
        tracing::warn!(
            ?gate,
            limit_ms = limit.as_millis() as u64,
            "vendor call timed out"
        );
        None
    }
}

/// [`Nvml`] with every call time-bounded; a timeout reads as `NVML_ERROR_TIMEOUT`.
#[derive(Debug, Clone)]
pub(crate) struct TimedNvml {
    inner: Arc<dyn Nvml>,
    runner: Arc<Runner>,
}

impl TimedNvml {
    pub(crate) fn new(inner: Arc<dyn Nvml>, runner: Arc<Runner>) -> Self {
        Self { inner, runner }
    }

    fn call<T: Send + 'static>(
        &self,
        gate: Gate,
        name: &'static str,
        f: impl FnOnce(&dyn Nvml) -> NvmlResult<T> + Send + 'static,
    ) -> NvmlResult<T> {
        self.call_within(gate, name, self.runner.timeout(), f)
    }

    /// A call that changes the GPU: counted as a host change once it returns.
    fn change<T: Send + 'static>(
        &self,
        gate: Gate,
        name: &'static str,
        f: impl FnOnce(&dyn Nvml) -> NvmlResult<T> + Send + 'static,
    ) -> NvmlResult<T> {
        let out = self.call(gate, name, f);
        match &out {
            // The abandoned call may still change the GPU after this: what was read about the
            // host is not trusted piecemeal then.
            Err(e) if e.code == gpu::NvmlCode::TIMEOUT => self.runner.changes.bump_whole(),
            _ => self.runner.changes.bump(),
        }
        out
    }

    fn call_within<T: Send + 'static>(
        &self,
        gate: Gate,
        name: &'static str,
        limit: Duration,
        f: impl FnOnce(&dyn Nvml) -> NvmlResult<T> + Send + 'static,
    ) -> NvmlResult<T> {
        let inner = self.inner.clone();
        let started = Instant::now();
        let out = self
            .runner
            .run(gate, limit, move || f(inner.as_ref()))
            .unwrap_or_else(|| Err(NvmlError::new(name, NvmlCode::TIMEOUT)));
        self.runner
            .record(name, started, out.as_ref().err().map(|e| e.code.0));
        out
    }
}

impl Nvml for TimedNvml {
    fn driver_version(&self) -> NvmlResult<String> {
        self.call(Gate::Global, "nvmlSystemGetDriverVersion", |n| {
            n.driver_version()
        })
    }
    fn device_count(&self) -> NvmlResult<u32> {
        self.call(Gate::Global, "nvmlDeviceGetCount_v2", |n| n.device_count())
    }
    fn device_info(&self, i: u32) -> NvmlResult<DeviceInfo> {
        let info = self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetHandleByIndex_v2",
            move |n| n.device_info(i),
        )?;
        self.runner.geometry.seen(i, info.pci_address);
        Ok(info)
    }
    fn mig_mode(&self, i: u32) -> NvmlResult<MigMode> {
        self.call(Gate::NvmlIndex(i), "nvmlDeviceGetMigMode", move |n| {
            n.mig_mode(i)
        })
    }
    fn set_mig_mode(&self, i: u32, enabled: bool) -> NvmlResult<gpu::MigActivation> {
        let out = self.change(Gate::NvmlIndex(i), "nvmlDeviceSetMigMode", move |n| {
            n.set_mig_mode(i, enabled)
        });
        // Failed or not (a failed set may still have changed the mode).
        self.runner.geometry.mig_mode_set(i);
        out
    }
    fn gpu_instance_profiles(&self, i: u32) -> NvmlResult<Vec<GpuInstanceProfile>> {
        let read = || {
            self.call(
                Gate::NvmlIndex(i),
                "nvmlDeviceGetGpuInstanceProfileInfoV",
                move |n| n.gpu_instance_profiles(i),
            )
        };
        // A GPU with a call still out fails fast, as every call on it does.
        if self.runner.is_stuck(Gate::NvmlIndex(i)) {
            return read();
        }
        self.runner.geometry.profiles(i, read)
    }
    fn gpu_instance_possible_placements(&self, i: u32, p: u32) -> NvmlResult<Vec<Placement>> {
        let read = || {
            self.call(
                Gate::NvmlIndex(i),
                "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                move |n| n.gpu_instance_possible_placements(i, p),
            )
        };
        if self.runner.is_stuck(Gate::NvmlIndex(i)) {
            return read();
        }
        self.runner.geometry.placements(i, p, read)
    }
    fn gpu_instance_remaining_capacity(&self, i: u32, p: u32) -> NvmlResult<u32> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetGpuInstanceRemainingCapacity",
            move |n| n.gpu_instance_remaining_capacity(i, p),
        )
    }
    fn gpu_instances(&self, i: u32) -> NvmlResult<Vec<GpuInstance>> {
        self.call(Gate::NvmlIndex(i), "nvmlDeviceGetGpuInstances", move |n| {
            n.gpu_instances(i)
        })
    }
    fn create_gpu_instance(&self, i: u32, p: u32, pl: Placement) -> NvmlResult<GpuInstance> {
        self.change(
            Gate::NvmlIndex(i),
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            move |n| n.create_gpu_instance(i, p, pl),
        )
    }
    fn destroy_gpu_instance(&self, i: u32, gi: u32) -> NvmlResult<()> {
        self.change(Gate::NvmlIndex(i), "nvmlGpuInstanceDestroy", move |n| {
            n.destroy_gpu_instance(i, gi)
        })
    }
    fn compute_instance_profiles(
        &self,
        i: u32,
        gi: u32,
    ) -> NvmlResult<Vec<ComputeInstanceProfile>> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
            move |n| n.compute_instance_profiles(i, gi),
        )
    }
    fn compute_instances(&self, i: u32, gi: u32) -> NvmlResult<Vec<ComputeInstance>> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlGpuInstanceGetComputeInstances",
            move |n| n.compute_instances(i, gi),
        )
    }
    fn create_compute_instance(&self, i: u32, gi: u32, p: u32) -> NvmlResult<ComputeInstance> {
        self.change(
            Gate::NvmlIndex(i),
            "nvmlGpuInstanceCreateComputeInstance",
            move |n| n.create_compute_instance(i, gi, p),
        )
    }
    fn destroy_compute_instance(&self, i: u32, gi: u32, ci: u32) -> NvmlResult<()> {
        self.change(Gate::NvmlIndex(i), "nvmlComputeInstanceDestroy", move |n| {
            n.destroy_compute_instance(i, gi, ci)
        })
    }
    fn telemetry(&self, i: u32) -> NvmlResult<Telemetry> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetUtilizationRates",
            move |n| n.telemetry(i),
        )
    }
    fn vgpu_usage(&self, i: u32) -> NvmlResult<Vec<VgpuUsage>> {
        self.call(Gate::NvmlIndex(i), "nvmlDeviceGetActiveVgpus", move |n| {
            n.vgpu_usage(i)
        })
    }
    fn mig_memory(&self, i: u32) -> NvmlResult<Vec<MigMemory>> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetMigDeviceHandleByIndex",
            move |n| n.mig_memory(i),
        )
    }
    fn supported_vgpu_types(&self, i: u32) -> NvmlResult<Vec<VgpuTypeInfo>> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetSupportedVgpus",
            move |n| n.supported_vgpu_types(i),
        )
    }
    fn nvlink_peers(&self, i: u32) -> NvmlResult<Vec<PciAddress>> {
        self.call(Gate::NvmlIndex(i), "nvmlDeviceGetNvLinkState", move |n| {
            n.nvlink_peers(i)
        })
    }
    fn wait_xid_event(&self, timeout_ms: u32) -> NvmlResult<Option<XidEvent>> {
        // The call itself waits up to `timeout_ms`; only what comes on top of that is a hang.
        let limit = self.runner.timeout() + Duration::from_millis(u64::from(timeout_ms));
        self.call_within(Gate::Global, "nvmlEventSetWait_v2", limit, move |n| {
            n.wait_xid_event(timeout_ms)
        })
    }
    fn health_signals(&self, i: u32) -> NvmlResult<gpu::HealthSignals> {
        self.call(
            Gate::NvmlIndex(i),
            "nvmlDeviceGetTotalEccErrors",
            move |n| n.health_signals(i),
        )
    }
}

/// [`AmdSmi`] with every call time-bounded; a timeout reads as `AMDSMI_STATUS_TIMEOUT`.
#[derive(Debug, Clone)]
pub(crate) struct TimedAmd {
    inner: Arc<dyn AmdSmi>,
    runner: Arc<Runner>,
}

impl TimedAmd {
    pub(crate) fn new(inner: Arc<dyn AmdSmi>, runner: Arc<Runner>) -> Self {
        Self { inner, runner }
    }

    /// A call that changes the GPU: counted as a host change once it returns.
    fn change<T: Send + 'static>(
        &self,
        gate: Gate,
        name: &'static str,
        f: impl FnOnce(&dyn AmdSmi) -> AmdResult<T> + Send + 'static,
    ) -> AmdResult<T> {
        let out = self.call(gate, name, f);
        match &out {
            // As for NVML: an abandoned call may still change the GPU.
            Err(e) if e.status == gpu::AmdStatus::TIMEOUT => self.runner.changes.bump_whole(),
            _ => self.runner.changes.bump(),
        }
        out
    }

    fn call<T: Send + 'static>(
        &self,
        gate: Gate,
        name: &'static str,
        f: impl FnOnce(&dyn AmdSmi) -> AmdResult<T> + Send + 'static,
    ) -> AmdResult<T> {
        let inner = self.inner.clone();
        let started = Instant::now();
        let out = self
            .runner
            .run(gate, self.runner.timeout(), move || f(inner.as_ref()))
            .unwrap_or_else(|| Err(AmdError::new(name, AMD_TIMEOUT)));
        self.runner
            .record(name, started, out.as_ref().err().map(|e| e.status.0));
        out
    }
}

impl AmdSmi for TimedAmd {
    fn gpus(&self) -> AmdResult<Vec<AmdGpuInfo>> {
        self.call(Gate::Global, "amdsmi_get_processor_handles", |a| a.gpus())
    }
    fn num_vf(&self, gpu: PciAddress) -> AmdResult<VfCount> {
        self.call(Gate::Gpu(gpu), "amdsmi_get_num_vf", move |a| a.num_vf(gpu))
    }
    fn set_num_vf(&self, gpu: PciAddress, count: u32) -> AmdResult<()> {
        self.change(Gate::Gpu(gpu), "amdsmi_set_num_vf", move |a| {
            a.set_num_vf(gpu, count)
        })
    }
    fn partition(&self, gpu: PciAddress) -> AmdResult<PartitionState> {
        self.call(
            Gate::Gpu(gpu),
            "amdsmi_get_gpu_compute_partition",
            move |a| a.partition(gpu),
        )
    }
    fn set_compute_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        let mode = mode.to_owned();
        self.change(
            Gate::Gpu(gpu),
            "amdsmi_set_gpu_compute_partition",
            move |a| a.set_compute_partition(gpu, &mode),
        )
    }
    fn set_memory_partition(&self, gpu: PciAddress, mode: &str) -> AmdResult<()> {
        let mode = mode.to_owned();
        self.change(
            Gate::Gpu(gpu),
            "amdsmi_set_gpu_memory_partition",
            move |a| a.set_memory_partition(gpu, &mode),
        )
    }
    fn xgmi_hive(&self, gpu: PciAddress) -> AmdResult<Option<u64>> {
        self.call(Gate::Gpu(gpu), "amdsmi_get_xgmi_info", move |a| {
            a.xgmi_hive(gpu)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_call_times_out_and_blocks_only_its_gate() {
        let runner = Runner::new(Duration::from_millis(50), Metrics::default());
        let slow = runner.run(Gate::NvmlIndex(0), Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_millis(300));
            1
        });
        assert_eq!(slow, None);
        assert!(runner.any_stuck());
        // The stuck GPU fails fast; another GPU answers.
        let t = std::time::Instant::now();
        assert_eq!(
            runner.run(Gate::NvmlIndex(0), Duration::from_secs(5), || 2),
            None
        );
        assert!(t.elapsed() < Duration::from_millis(40));
        assert_eq!(
            runner.run(Gate::NvmlIndex(1), Duration::from_secs(5), || 3),
            Some(3)
        );
        std::thread::sleep(Duration::from_millis(400));
        assert!(!runner.any_stuck(), "the abandoned call returned");
        assert_eq!(
            runner.run(Gate::NvmlIndex(0), Duration::from_secs(5), || 4),
            Some(4)
        );
    }
}
