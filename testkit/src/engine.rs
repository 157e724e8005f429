//! Engine test helpers: slice specs and requests in short form, sysfs reads and writes on a
//! simulated host, faults, what the host shows.

use std::path::Path;
use std::sync::Arc;

use agent::engine::{
    AllocationRequest, CreateSlice, Engine, GpuSelector, Layout, LayoutEntry, NumaPolicy, Slice,
    SliceKind, SliceRequest, SliceSpec,
};
use ids::PciAddress;
use sim::SimHost;
use sysfs::SysfsExt;

/// A PCI address from its text (panics on a bad one).
pub fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

/// A slice spec on a GPU given by address.
pub fn spec(gpu: &str, kind: SliceKind) -> SliceSpec {
    SliceSpec {
        gpu: gpu.parse().unwrap(),
        kind,
    }
}

/// Creates an unowned slice of `kind` on `gpu`.
pub fn create(e: &Engine, gpu: &str, kind: SliceKind) -> agent::engine::Result<Slice> {
    e.create_slice(CreateSlice {
        spec: spec(gpu, kind),
        owner: None,
    })
}

/// An mdev slice kind of type `t`.
pub fn mdev_kind(t: &str) -> SliceKind {
    SliceKind::Mdev {
        type_id: t.parse().unwrap(),
    }
}

/// A MIG slice kind of profile `p`, at an explicit start slot or the engine's choice.
pub fn mig_kind(p: &str, start: Option<u32>) -> SliceKind {
    SliceKind::Mig {
        profile: p.parse().unwrap(),
        start,
    }
}

/// A one-slice allocation request of `consumer` for its VM `vm-<consumer>`, optionally on `gpu`.
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
        placement_consumer: None,
    }
}

/// The simulated host's sysfs.
pub fn fs(sim: &SimHost) -> Arc<dyn sysfs::Sysfs> {
    sim.sysfs()
}

/// Reads a sysfs attribute of the simulated host as text.
pub fn read(sim: &SimHost, path: &str) -> String {
    sim.sysfs().read_text(Path::new(path)).unwrap()
}

/// Writes a sysfs attribute of the simulated host.
pub fn write(sim: &SimHost, path: &str, value: &str) {
    sim.sysfs().write_str(Path::new(path), value).unwrap()
}

/// Whether a sysfs path exists on the simulated host.
pub fn exists(sim: &SimHost, path: &str) -> bool {
    sim.sysfs().exists(Path::new(path))
}

/// The driver a PCI function of the simulated host is bound to.
pub fn driver(sim: &SimHost, dev: PciAddress) -> Option<String> {
    sim.sysfs()
        .link_name_opt(
            &Path::new("/sys/bus/pci/devices")
                .join(dev.to_string())
                .join("driver"),
        )
        .unwrap()
}

/// Injects a fault (`vgpud sim fault` grammar) into the simulated host.
pub fn fault(sim: &SimHost, spec: &str) {
    sim.inject_fault(spec.parse().unwrap()).unwrap()
}

/// Every slice present on the host (inventory), as (GPU, description).
pub fn host_slices(sim: &SimHost) -> Vec<(PciAddress, inventory::ExistingSlice)> {
    let inv = inventory::discover(&hostwire::sim_access(sim));
    inv.gpus
        .iter()
        .flat_map(|g| g.slices.iter().map(move |s| (g.pci_address, s.clone())))
        .collect()
}

/// The mdev UUIDs of the engine's slices (panics on a slice of another kind).
pub fn owned_mdevs(e: &Engine) -> Vec<ids::MdevUuid> {
    e.slices()
        .into_iter()
        .map(|s| match s.identity {
            agent::engine::Identity::Mdev { uuid } => uuid,
            other => panic!("not an mdev slice: {other:?}"),
        })
        .collect()
}

/// A one-slice allocation request of `consumer` for VM `vm` under a NUMA policy.
pub fn vm_request(consumer: &str, vm: &str, t: &str, policy: NumaPolicy) -> AllocationRequest {
    let mut r = SliceRequest::new(t, 1);
    r.numa_policy = Some(policy);
    AllocationRequest {
        consumer: consumer.into(),
        vm: Some(vm.into()),
        request: r,
        placement_consumer: None,
    }
}

/// A vendor-VFIO vGPU slice kind of type `t` (a MIG-backed type at an explicit GI slot or the
/// engine's choice).
pub fn vgpu_kind(t: &str, start: Option<u32>) -> SliceKind {
    SliceKind::NvidiaVfio {
        vgpu_type: t.parse().unwrap(),
        start,
    }
}

/// How many VFs the PCI function `pf` has enabled.
pub fn numvfs(sim: &SimHost, pf: &str) -> u32 {
    read(sim, &format!("/sys/bus/pci/devices/{pf}/sriov_numvfs"))
        .parse()
        .unwrap()
}

/// NVML's index of a GPU of the simulated host.
pub fn nvml_index(sim: &SimHost, gpu: &str) -> u32 {
    let nvml = sim.nvml();
    (0..nvml.device_count().unwrap())
        .find(|i| nvml.device_info(*i).unwrap().pci_address == addr(gpu))
        .unwrap()
}

/// A GPU's MIG mode as NVML reports it: (current, pending).
pub fn mig_mode(sim: &SimHost, gpu: &str) -> (bool, bool) {
    let m = sim.nvml().mig_mode(nvml_index(sim, gpu)).unwrap();
    (m.current, m.pending)
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
