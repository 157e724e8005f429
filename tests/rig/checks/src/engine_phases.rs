//! The slice engine on the real kernel, across a real reboot: phase `create` makes an sriov-vf
//! slice on the rig's igb PF and allocates it; the guest powers off; a fresh boot with the same
//! state directory runs phase `verify`: the reconciler must re-create the slice with the same
//! identity (same VF, bound to vfio-pci again) and keep its allocation, then release and destroy
//! must leave the device as it was.

use std::path::Path;

use agent::engine::{
    CreateSlice, Engine, EngineConfig, OwnerRequest, SliceKind, SliceSpec, SliceState,
};
use ids::PciAddress;
use sysfs::Sysfs;

use crate::Report;

/// Where phase `create` leaves what phase `verify` must find.
const MEMO: &str = "rig-memo.json";

fn open(state_dir: &Path) -> anyhow::Result<Engine> {
    let access = agent::host::real_access(Path::new("/"));
    Ok(Engine::open(EngineConfig::new(state_dir, access))?)
}

fn vf_on_vfio(fs: &dyn Sysfs, vf: PciAddress) -> bool {
    vfio::read_device(fs, vf).is_ok_and(|d| d.driver.as_deref() == Some(vfio::VFIO_PCI))
}

/// Phase 1: create and allocate an sriov-vf slice.
pub fn create(
    fs: &dyn Sysfs,
    pf: PciAddress,
    state_dir: &Path,
    r: &mut Report,
) -> anyhow::Result<()> {
    let engine = open(state_dir)?;
    engine.reconcile()?;
    let owner = OwnerRequest {
        consumer: "rig".into(),
        vm: None,
    };
    let spec = SliceSpec {
        gpu: pf,
        kind: SliceKind::SriovVf,
    };
    let created = engine.create_slice(CreateSlice {
        spec,
        owner: Some(owner),
    });
    let slice = match created {
        Ok(s) => s,
        Err(e) => {
            r.check(
                "engine: create an sriov-vf slice on the PF",
                false,
                format!("{e} ({})", e.code()),
            );
            return Ok(());
        }
    };
    let vf = slice.handles.pci_address;
    let bound = vf.is_some_and(|v| vf_on_vfio(fs, v));
    let node = slice
        .handles
        .vfio_group
        .is_some_and(|g| vfio::vfio_node_present(fs, g));
    r.check(
        "engine: create an sriov-vf slice: a VF on vfio-pci with its /dev/vfio node",
        bound && node && slice.state == SliceState::Allocated,
        format!("{:?} {:?} {:?}", slice.state, vf, slice.handles.vfio_group),
    );
    let memo =
        serde_json::json!({ "slice": slice.id.to_string(), "vf": vf.map(|v| v.to_string()) });
    std::fs::write(state_dir.join(MEMO), memo.to_string())?;
    Ok(())
}

/// Phase 2, after a fresh boot: the reconciler brings the slice back as it was.
pub fn verify(
    fs: &dyn Sysfs,
    pf: PciAddress,
    state_dir: &Path,
    r: &mut Report,
) -> anyhow::Result<()> {
    let memo: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state_dir.join(MEMO))?)?;
    let vf: Option<PciAddress> = memo["vf"].as_str().and_then(|s| s.parse().ok());
    let lost = vf.is_none_or(|v| !vf_on_vfio(fs, v));
    r.check(
        "engine: after the reboot the VF is gone (the kernel keeps nothing)",
        lost,
        format!("{vf:?}"),
    );
    let engine = open(state_dir)?;
    let report = engine.reconcile();
    let slice = engine
        .slices()
        .into_iter()
        .find(|s| Some(s.id.to_string()).as_deref() == memo["slice"].as_str());
    let same = slice
        .as_ref()
        .is_some_and(|s| s.handles.pci_address == vf && s.state == SliceState::Allocated);
    let bound = vf.is_some_and(|v| vf_on_vfio(fs, v));
    r.check(
        "engine: reconcile re-creates the slice with the same VF, on vfio-pci, still allocated",
        report.is_ok() && same && bound,
        format!(
            "{:?}; {:?}",
            report.as_ref().map(|_| "ok").map_err(|e| e.to_string()),
            slice.as_ref().map(|s| (&s.state, s.handles.pci_address))
        ),
    );
    let allocation = engine
        .allocations()
        .into_iter()
        .find(|a| a.consumer == "rig");
    r.check(
        "engine: the allocation survived the reboot",
        allocation.is_some(),
        format!("{allocation:?}"),
    );
    if let (Some(a), Some(s)) = (allocation, slice) {
        let released = engine
            .release(a.id)
            .and_then(|_| engine.destroy_slice(s.id));
        let left = vfio::read_device(fs, pf)
            .ok()
            .and_then(|d| d.sriov)
            .map(|s| s.num_vfs);
        let unbound = vf.is_none_or(|v| !vf_on_vfio(fs, v));
        r.check(
            "engine: release and destroy hand the VF back",
            released.is_ok() && unbound,
            format!("{released:?}, VFs enabled now {left:?}"),
        );
    }
    Ok(())
}
