//! `/metrics` in the OpenMetrics text format: the telemetry cache's latest snapshot (device,
//! slice, capacity and GPU-state gauges) plus the live counters, in the names
//! `docs/metrics.md` lists. Device gauges carry dcgm-exporter's names and labels so dashboards
//! built for it work unchanged. Rendering reads only the snapshot and atomics: it never waits on
//! the vendor library, sysfs or the engine.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::process::ProcessStats;
use super::{Labels, Metrics};
use crate::health::view::HealthState;
use crate::placement::status::PlacementStatus;
use crate::telemetry::{GpuSnapshot, TelemetrySnapshot};

/// The OpenMetrics content type `/metrics` is served with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type IntRows = Vec<(Labels, i64)>;
type FloatRows = Vec<(Labels, f64)>;

/// A gauge family with one sample per row (no sample at all when `rows` is empty).
pub(super) fn int_gauge(registry: &mut Registry, name: &str, help: &str, rows: IntRows) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).set(v);
    }
    registry.register(name, help, family);
}

pub(super) fn float_gauge(registry: &mut Registry, name: &str, help: &str, rows: FloatRows) {
    let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).set(v);
    }
    registry.register(name, help, family);
}

pub(super) fn pairs(p: &[(&str, &str)]) -> Labels {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn to_i64<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

/// dcgm-exporter's device labels.
fn device_labels(g: &GpuSnapshot, hostname: &str) -> Labels {
    pairs(&[
        ("gpu", &g.index.to_string()),
        ("UUID", &g.uuid),
        ("pci_bus_id", &g.pci_bus_id),
        ("device", &g.device),
        ("modelName", &g.model),
        ("Hostname", hostname),
    ])
}

/// Renders the snapshot, the counters and the process figures as OpenMetrics text, `# EOF`
/// included.
pub fn render(
    snapshot: &TelemetrySnapshot,
    metrics: &Metrics,
    process: &ProcessStats,
    placement: Option<&PlacementStatus>,
    now: SystemTime,
) -> Result<String, fmt::Error> {
    let mut out = snapshot_text(snapshot)?;
    render_live(&mut out, snapshot, metrics, process, placement, now)?;
    Ok(out)
}

/// The families read from the snapshot alone (device, health, slice and capacity gauges), with
/// no closing `# EOF`: the same text for every scrape of one snapshot, so the service renders
/// it once per telemetry poll (`snapshot_text`).
pub fn snapshot_text(snapshot: &TelemetrySnapshot) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    device_families(&mut registry, snapshot);
    health_families(&mut registry, snapshot);
    slice_families(&mut registry, snapshot);
    capacity_families(&mut registry, snapshot);
    let mut out = String::new();
    encode_registry(&mut out, &registry)?;
    Ok(out)
}

/// Appends what changes between scrapes of one snapshot (its age, the counters, the process
/// figures, Placement's status) and `# EOF` to `out`, which holds [`snapshot_text`].
pub fn render_live(
    out: &mut String,
    snapshot: &TelemetrySnapshot,
    metrics: &Metrics,
    process: &ProcessStats,
    placement: Option<&PlacementStatus>,
    now: SystemTime,
) -> Result<(), fmt::Error> {
    let mut registry = Registry::default();
    staleness_families(&mut registry, snapshot, now);
    metrics.register(&mut registry);
    process_families(&mut registry, process);
    super::placement::placement_families(&mut registry, placement, now);
    encode_registry(out, &registry)?;
    encode_eof(out)
}

/// The dcgm-exporter device gauges, for GPUs whose last reading in this poll succeeded.
fn device_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    type Field = (&'static str, &'static str, fn(&gpu::Telemetry) -> f64);
    let fields: [Field; 11] = [
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)", |t| {
            f64::from(t.gpu_util_pct)
        }),
        (
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "Memory utilization (in %)",
            |t| f64::from(t.mem_copy_util_pct),
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB)",
            |t| t.fb_used_mib as f64,
        ),
        (
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB)",
            |t| t.fb_free_mib as f64,
        ),
        ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)", |t| {
            f64::from(t.temperature_c)
        }),
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)", |t| {
            f64::from(t.power_mw) / 1000.0
        }),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "Total energy consumption since boot (in mJ)",
            |t| t.energy_mj as f64,
        ),
        ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)", |t| {
            f64::from(t.sm_clock_mhz)
        }),
        (
            "DCGM_FI_DEV_MEM_CLOCK",
            "Memory clock frequency (in MHz)",
            |t| f64::from(t.mem_clock_mhz),
        ),
        ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe link generation", |t| {
            f64::from(t.pcie_link_gen)
        }),
        (
            "DCGM_FI_DEV_PCIE_LINK_WIDTH",
            "PCIe link width (lanes)",
            |t| f64::from(t.pcie_link_width),
        ),
    ];
    for (name, help, value) in fields {
        let mut rows: FloatRows = s
            .gpus
            .iter()
            .filter_map(|g| Some((device_labels(g, &s.hostname), value(g.telemetry.as_ref()?))))
            .collect();
        // dcgm-exporter reports framebuffer per MIG instance too, with the instance's labels.
        if name == "DCGM_FI_DEV_FB_USED" || name == "DCGM_FI_DEV_FB_FREE" {
            rows.extend(mig_rows(s, name == "DCGM_FI_DEV_FB_USED"));
        }
        float_gauge(registry, name, help, rows);
    }
}

/// Framebuffer rows of MIG instances (MiB), for GPUs with a device reading.
fn mig_rows(s: &TelemetrySnapshot, used: bool) -> FloatRows {
    const MIB: u64 = 1024 * 1024;
    let mut rows = Vec::new();
    for g in s.gpus.iter().filter(|g| g.telemetry.is_some()) {
        for m in &g.mig {
            let mut labels = device_labels(g, &s.hostname);
            labels.push(("GPU_I_PROFILE".into(), m.profile.clone()));
            labels.push(("GPU_I_ID".into(), m.gpu_instance_id.to_string()));
            let v = if used {
                m.used_bytes / MIB
            } else {
                m.total_bytes.saturating_sub(m.used_bytes) / MIB
            };
            rows.push((labels, v as f64));
        }
    }
    rows
}

/// GPU identity and health: the info metric, the health state set, the quarantine flag, and
/// what the health monitor read (Xids, ECC, retired pages, remapped rows, throttle reasons).
fn health_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    let gpu_labels = |g: &GpuSnapshot| {
        pairs(&[
            ("gpu", &g.index.to_string()),
            ("UUID", &g.uuid),
            ("pci_bus_id", &g.pci_bus_id),
        ])
    };
    let info = s
        .gpus
        .iter()
        .map(|g| {
            let numa = g.numa_node.map(|n| n.to_string()).unwrap_or_default();
            let labels = pairs(&[
                ("gpu", &g.index.to_string()),
                ("UUID", &g.uuid),
                ("pci_bus_id", &g.pci_bus_id),
                ("modelName", &g.model),
                ("vendor", &g.vendor),
                ("numa_node", &numa),
            ]);
            (labels, 1)
        })
        .collect();
    int_gauge(
        registry,
        "vgpud_gpu_info",
        "GPUs on the host (always 1)",
        info,
    );
    let mut health = Vec::new();
    for g in &s.gpus {
        for state in HealthState::ALL {
            let mut labels = gpu_labels(g);
            labels.push(("state".into(), state.as_str().into()));
            health.push((labels, i64::from(g.health == state)));
        }
    }
    int_gauge(
        registry,
        "vgpud_gpu_health",
        "GPU health as a state set: 1 for the current state",
        health,
    );
    let quarantined = s
        .gpus
        .iter()
        .map(|g| {
            (
                gpu_labels(g),
                i64::from(g.health == HealthState::Quarantined),
            )
        })
        .collect();
    int_gauge(
        registry,
        "vgpud_gpu_quarantined",
        "Whether the GPU is quarantined (no new slices or allocations)",
        quarantined,
    );
    xid_families(registry, s);
    signal_families(registry, s);
}

/// `DCGM_FI_DEV_XID_ERRORS` (dcgm's meaning: the last Xid, 0 for none) for NVIDIA GPUs the
/// monitor watches, and `vgpud_gpu_xid_events_total` by code and what it did.
fn xid_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    let nvidia = || s.gpus.iter().filter(|g| g.vendor == "nvidia");
    let last = nvidia()
        .map(|g| {
            (
                device_labels(g, &s.hostname),
                to_i64(g.last_xid.unwrap_or(0)),
            )
        })
        .collect();
    int_gauge(
        registry,
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered",
        last,
    );
    let events = Family::<Labels, Counter>::default();
    for g in nvidia() {
        for &(xid, action, count) in &g.xid_events {
            let labels = pairs(&[
                ("gpu", &g.index.to_string()),
                ("UUID", &g.uuid),
                ("pci_bus_id", &g.pci_bus_id),
                ("xid", &xid.to_string()),
                ("action", action),
            ]);
            events.get_or_create(&labels).inc_by(count);
        }
    }
    registry.register(
        "vgpud_gpu_xid_events",
        "Xid events since the agent started, by code and action (quarantine or ignore)",
        events,
    );
}

/// The dcgm memory-error and throttle gauges, where the GPU reports the counter.
fn signal_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    type Field = (
        &'static str,
        &'static str,
        fn(&gpu::HealthSignals) -> Option<u64>,
    );
    let fields: [Field; 9] = [
        (
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "Total number of single-bit volatile ECC errors",
            |h| h.ecc_sbe_volatile,
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "Total number of double-bit volatile ECC errors",
            |h| h.ecc_dbe_volatile,
        ),
        (
            "DCGM_FI_DEV_RETIRED_SBE",
            "Total number of retired pages due to single-bit errors",
            |h| h.retired_sbe,
        ),
        (
            "DCGM_FI_DEV_RETIRED_DBE",
            "Total number of retired pages due to double-bit errors",
            |h| h.retired_dbe,
        ),
        (
            "DCGM_FI_DEV_RETIRED_PENDING",
            "Whether pages wait for retirement (1) or not (0)",
            |h| h.retired_pending.map(u64::from),
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "Number of remapped rows for correctable errors",
            |h| h.remapped_correctable,
        ),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "Number of remapped rows for uncorrectable errors",
            |h| h.remapped_uncorrectable,
        ),
        (
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            "Whether remapping of rows has failed (1) or not (0)",
            |h| h.remap_failure.map(u64::from),
        ),
        (
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "Current clock throttle reasons (NVML clocks-event bitmask)",
            |h| h.clock_event_reasons,
        ),
    ];
    for (name, help, value) in fields {
        let rows = s
            .gpus
            .iter()
            .filter_map(|g| {
                Some((
                    device_labels(g, &s.hostname),
                    to_i64(value(g.signals.as_ref()?)?),
                ))
            })
            .collect();
        int_gauge(registry, name, help, rows);
    }
}

/// Per slice: the info join and usage where the vendor reports it.
fn slice_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    let info = s
        .slices
        .iter()
        .map(|x| {
            let labels = pairs(&[
                ("slice", &x.slice),
                ("handle", &x.handle),
                ("backend", &x.backend),
                ("type", &x.slice_type),
                ("pci_bus_id", &x.pci_bus_id),
                ("UUID", &x.gpu_uuid),
                ("vm_name", &x.vm_name),
                ("vm_uuid", &x.vm_uuid),
                ("consumer", &x.consumer),
                ("allocation", &x.allocation),
                ("state", &x.state),
            ]);
            (labels, 1)
        })
        .collect();
    int_gauge(
        registry,
        "vgpud_slice_info",
        "Owned slices with their GPU, VM and consumer (always 1)",
        info,
    );
    let key = |x: &crate::telemetry::SliceSnapshot| {
        pairs(&[
            ("slice", &x.slice),
            ("pci_bus_id", &x.pci_bus_id),
            ("UUID", &x.gpu_uuid),
        ])
    };
    let fb = s
        .slices
        .iter()
        .filter_map(|x| Some((key(x), to_i64(x.fb_used_bytes?))))
        .collect();
    int_gauge(
        registry,
        "vgpud_slice_framebuffer_used_bytes",
        "Framebuffer a slice's guest uses, where the vendor reports it",
        fb,
    );
    let util = s
        .slices
        .iter()
        .filter_map(|x| Some((key(x), x.utilization?)))
        .collect();
    float_gauge(
        registry,
        "vgpud_slice_utilization_ratio",
        "Slice utilisation 0..1, where the vendor reports it",
        util,
    );
    let mut by_state: BTreeMap<Labels, i64> = BTreeMap::new();
    for x in &s.slices {
        let labels = pairs(&[
            ("type", &x.slice_type),
            ("backend", &x.backend),
            ("state", &x.state),
            ("pci_bus_id", &x.pci_bus_id),
        ]);
        *by_state.entry(labels).or_insert(0) += 1;
    }
    int_gauge(
        registry,
        "vgpud_slices",
        "Slices vgpud owns, by type, backend, state and GPU",
        by_state.into_iter().collect(),
    );
    // Every consumer holding slices has a row (0 when none is idle), so a dashboard or an alert
    // sees "none idle" rather than no data.
    let mut idle_counts: BTreeMap<&str, u64> = s
        .slices
        .iter()
        .filter(|sl| !sl.consumer.is_empty())
        .map(|sl| (sl.consumer.as_str(), 0))
        .collect();
    for (c, n) in &s.idle_by_consumer {
        idle_counts.insert(c.as_str(), *n);
    }
    let idle = idle_counts
        .into_iter()
        .map(|(c, n)| (pairs(&[("consumer", c)]), to_i64(n)))
        .collect();
    int_gauge(
        registry,
        "vgpud_slices_idle",
        "Allocated slices under the idle utilisation for longer than the idle window",
        idle,
    );
    int_gauge(
        registry,
        "vgpud_allocations",
        "Allocations held by consumers",
        vec![(Vec::new(), to_i64(s.allocations))],
    );
    int_gauge(
        registry,
        "vgpud_gpus",
        "GPUs on the host",
        vec![(Vec::new(), to_i64(s.gpus.len()))],
    );
}

/// Free and creatable slices per type, and the scheduler's per-GPU figures.
fn capacity_families(registry: &mut Registry, s: &TelemetrySnapshot) {
    let (mut free, mut creatable) = (Vec::new(), Vec::new());
    for g in &s.gpus {
        for c in &g.capacity {
            let labels = pairs(&[
                ("type", &c.slice_type),
                ("backend", c.backend.as_str()),
                ("pci_bus_id", &g.pci_bus_id),
            ]);
            free.push((labels.clone(), i64::from(c.free)));
            creatable.push((labels, i64::from(c.creatable)));
        }
    }
    int_gauge(
        registry,
        "vgpud_capacity_free_slices",
        "Owned slices ready and unallocated, by type",
        free,
    );
    int_gauge(
        registry,
        "vgpud_capacity_creatable_slices",
        "How many more slices of the type fit on the GPU now",
        creatable,
    );
    let per_gpu = |f: fn(&GpuSnapshot) -> f64| -> FloatRows {
        s.gpus
            .iter()
            .map(|g| (pairs(&[("pci_bus_id", &g.pci_bus_id)]), f(g)))
            .collect()
    };
    float_gauge(
        registry,
        "vgpud_capacity_stranded_ratio",
        "Free capacity of the GPU no type of its current layout can use (fraction of the GPU)",
        per_gpu(|g| g.stranded),
    );
    float_gauge(
        registry,
        "vgpud_gpu_fragmentation_ratio",
        "Expected fragmentation of the GPU for the host's request mix (GPUs)",
        per_gpu(|g| g.fragmentation),
    );
    float_gauge(
        registry,
        "vgpud_gpu_expected_waste_ratio",
        "Expected waste of the GPU for the host's request mix (GPUs)",
        per_gpu(|g| g.waste),
    );
}

/// How old each GPU's last good reading is.
fn staleness_families(registry: &mut Registry, s: &TelemetrySnapshot, now: SystemTime) {
    let age = s
        .gpus
        .iter()
        .filter_map(|g| {
            let at = g.read_at?;
            let secs = now.duration_since(at).map_or(0.0, |d| d.as_secs_f64());
            Some((pairs(&[("pci_bus_id", &g.pci_bus_id)]), secs))
        })
        .collect();
    float_gauge(
        registry,
        "vgpud_telemetry_age_seconds",
        "Time since the GPU's last good telemetry reading",
        age,
    );
}

/// The standard process metrics.
fn process_families(registry: &mut Registry, p: &ProcessStats) {
    if let Some(cpu) = p.cpu_seconds {
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            ConstCounter::new(cpu),
        );
    }
    let gauges: [(&str, &str, Option<f64>); 3] = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            p.resident_bytes.map(|b| b as f64),
        ),
        (
            "process_open_fds",
            "Number of open file descriptors",
            p.open_fds.map(|n| n as f64),
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            p.start_time_seconds,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            float_gauge(registry, name, help, vec![(Vec::new(), v)]);
        }
    }
}
