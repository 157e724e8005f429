//! Shared set-up for the engine tests: simulated hosts and engines over them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent::engine::{
    AllocationRequest, CreateSlice, Engine, EngineConfig, GpuSelector, Layout, LayoutEntry, Slice,
    SliceKind, SliceRequest, SliceSpec,
};
use ids::PciAddress;
use sim::{Profile, SimHost};
use sysfs::SysfsExt;

pub fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

pub fn sim(profile: &str) -> SimHost {
    SimHost::new(Profile::builtin(profile).unwrap()).unwrap()
}

pub fn engine_with(sim: &SimHost, dir: &Path, timeout: Duration) -> Engine {
    let mut cfg = EngineConfig::new(dir, agent::host::sim_access(sim));
    cfg.vendor_timeout = timeout;
    Engine::open(cfg).unwrap()
}

pub fn engine(sim: &SimHost, dir: &Path) -> Engine {
    engine_with(sim, dir, Duration::from_secs(5))
}

pub fn spec(gpu: &str, kind: SliceKind) -> SliceSpec {
    SliceSpec {
        gpu: gpu.parse().unwrap(),
        kind,
    }
}

pub fn create(e: &Engine, gpu: &str, kind: SliceKind) -> agent::engine::Result<Slice> {
    e.create_slice(CreateSlice {
        spec: spec(gpu, kind),
        owner: None,
    })
}

pub fn mdev_kind(t: &str) -> SliceKind {
    SliceKind::Mdev {
        type_id: t.parse().unwrap(),
    }
}

pub fn mig_kind(p: &str, start: Option<u32>) -> SliceKind {
    SliceKind::Mig {
        profile: p.parse().unwrap(),
        start,
    }
}

pub fn request(consumer: &str, t: &str, gpu: Option<&str>) -> AllocationRequest {
    AllocationRequest {
        consumer: consumer.into(),
        vm: Some(format!("vm-{consumer}")),
        request: SliceRequest {
            slice_type: t.into(),
            count: 1,
            gpu: gpu.map(addr),
            idempotency_key: None,
            numa_policy: None,
            vcpus: None,
            memory_mib: None,
        },
    }
}

pub fn fs(sim: &SimHost) -> Arc<dyn sysfs::Sysfs> {
    sim.sysfs()
}

pub fn read(sim: &SimHost, path: &str) -> String {
    sim.sysfs().read_text(Path::new(path)).unwrap()
}

pub fn write(sim: &SimHost, path: &str, value: &str) {
    sim.sysfs().write_str(Path::new(path), value).unwrap()
}

pub fn exists(sim: &SimHost, path: &str) -> bool {
    sim.sysfs().exists(Path::new(path))
}

pub fn driver(sim: &SimHost, dev: PciAddress) -> Option<String> {
    sim.sysfs()
        .link_name_opt(
            &Path::new("/sys/bus/pci/devices")
                .join(dev.to_string())
                .join("driver"),
        )
        .unwrap()
}

pub fn fault(sim: &SimHost, spec: &str) {
    sim.inject_fault(spec.parse().unwrap()).unwrap()
}

/// Every slice present on the host (inventory), as (GPU, description).
pub fn host_slices(sim: &SimHost) -> Vec<(PciAddress, inventory::ExistingSlice)> {
    let inv = inventory::discover(&agent::host::sim_access(sim));
    inv.gpus
        .iter()
        .flat_map(|g| g.slices.iter().map(move |s| (g.pci_address, s.clone())))
        .collect()
}

/// A layout for one GPU: `entries` are (slice type, count); no AMD partition, MIG mode as the
/// slices imply.
pub fn gpu_layout(gpu: &str, entries: &[(&str, u32)]) -> Layout {
    Layout {
        name: format!("l-{gpu}"),
        selector: GpuSelector {
            addresses: vec![addr(gpu)],
            ..GpuSelector::default()
        },
        slices: entries
            .iter()
            .map(|(t, n)| LayoutEntry {
                slice_type: (*t).into(),
                count: *n,
            })
            .collect(),
        amd: None,
        mig: None,
    }
}
