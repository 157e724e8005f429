//! The slice engine on the real kernel, across a real reboot: phase `create` makes an sriov-vf
//! slice on the rig's igb PF and allocates it, and allocates an `mtty-2` mdev slice on the
//! kernel's virtual `mtty` parent; the guest powers off; a fresh boot with the same state
//! directory runs phase `verify`: the reconciler must re-create both slices with the same
//! identity (same VF, bound to vfio-pci again; same mdev UUID) and keep their allocations, then
//! release and destroy must leave the devices as they were.

use std::path::Path;

use agent::engine::{
    AllocationRequest, CreateSlice, Engine, EngineConfig, OwnerRequest, SliceKind, SliceRequest,
    SliceSpec, SliceState,
};
use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress};
use sysfs::Sysfs;

use crate::Report;

/// Where phase `create` leaves what phase `verify` must find.
const MEMO: &str = "rig-memo.json";
/// The virtual mdev parent and type the mdev slice is made of.
const MDEV_PARENT: &str = "mtty";
const MDEV_TYPE: &str = "mtty-2";
/// The consumer holding the mdev slice (the VF's is `rig`).
const MDEV_CONSUMER: &str = "rig-mdev";

fn mdev_available(fs: &dyn Sysfs) -> Option<u32> {
    let parent: MdevParentName = MDEV_PARENT.parse().ok()?;
    let ty: MdevTypeId = MDEV_TYPE.parse().ok()?;
    mdev::read_type(fs, &parent, &ty).ok()?.available_instances
}

fn mdev_present(fs: &dyn Sysfs, uuid: MdevUuid) -> bool {
    mdev::read_device(fs, uuid).is_ok_and(|d| d.parent.as_str() == MDEV_PARENT)
}

/// Allocates an `mtty-2` slice by type alone: the engine must find the virtual parent offering
/// it. Returns what phase `verify` needs.
fn create_mdev(engine: &Engine, fs: &dyn Sysfs, r: &mut Report) -> serde_json::Value {
    let start = mdev_available(fs);
    let req = AllocationRequest {
        consumer: MDEV_CONSUMER.into(),
        vm: None,
        request: SliceRequest::new(MDEV_TYPE, 1),
        placement_consumer: None,
    };
    let made = engine
        .allocate(req)
        .and_then(|a| engine.slice(a.slices[0]).map(|s| (a, s)));
    let (slice, uuid) = match &made {
        Ok((_, s)) => (Some(s.id), s.handles.mdev_uuid),
        Err(_) => (None, None),
    };
    let ok = made.as_ref().is_ok_and(|(_, s)| {
        s.state == SliceState::Allocated && s.spec.gpu.to_string() == MDEV_PARENT
    });
    r.check(
        "engine: allocate an mtty-2 mdev slice on the virtual parent mtty",
        ok && uuid.is_some_and(|u| mdev_present(fs, u)),
        format!(
            "{:?}; available_instances {start:?} -> {:?}",
            made.as_ref()
                .map(|(_, s)| (&s.spec.gpu, &s.state, s.handles.mdev_uuid))
                .map_err(|e| format!("{e} ({})", e.code())),
            mdev_available(fs)
        ),
    );
    serde_json::json!({
        "mdev_slice": slice.map(|s| s.to_string()),
        "mdev_uuid": uuid.map(|u| u.to_string()),
        "mdev_available": start,
    })
}

fn open(state_dir: &Path) -> anyhow::Result<Engine> {
    let access = hostwire::real_access(Path::new("/"));
    Ok(Engine::open(EngineConfig::new(state_dir, access))?)
}

fn vf_on_vfio(fs: &dyn Sysfs, vf: PciAddress) -> bool {
    vfio::read_device(fs, vf).is_ok_and(|d| d.driver.as_deref() == Some(vfio::VFIO_PCI))
}

/// Phase 1: create and allocate an sriov-vf slice and an mdev slice.
pub fn create(
    fs: &dyn Sysfs,
    pf: PciAddress,
    state_dir: &Path,
    r: &mut Report,
) -> anyhow::Result<()> {
    let engine = open(state_dir)?;
    engine.reconcile()?;
    let mut memo = create_vf(&engine, fs, pf, r);
    if let (Some(m), serde_json::Value::Object(more)) =
        (memo.as_object_mut(), create_mdev(&engine, fs, r))
    {
        m.extend(more);
    }
    std::fs::write(state_dir.join(MEMO), memo.to_string())?;
    Ok(())
}

/// Creates and allocates an sriov-vf slice on the PF; returns what phase `verify` needs.
fn create_vf(engine: &Engine, fs: &dyn Sysfs, pf: PciAddress, r: &mut Report) -> serde_json::Value {
    let owner = OwnerRequest {
        consumer: "rig".into(),
        vm: None,
    };
    let spec = SliceSpec {
        gpu: pf.into(),
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
            return serde_json::json!({});
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
    serde_json::json!({ "slice": slice.id.to_string(), "vf": vf.map(|v| v.to_string()) })
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
    let mdev_uuid: Option<MdevUuid> = memo["mdev_uuid"].as_str().and_then(|s| s.parse().ok());
    r.check(
        "engine: after the reboot the mdev is gone",
        mdev_uuid.is_some_and(|u| !mdev_present(fs, u)),
        format!("{mdev_uuid:?}"),
    );
    let engine = open(state_dir)?;
    let report = engine.reconcile();
    verify_mdev(&engine, fs, &memo, mdev_uuid, r);
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

/// After the reconcile: the mdev is back with the same UUID and still allocated; release and
/// destroy remove it and give the parent its capacity back.
fn verify_mdev(
    engine: &Engine,
    fs: &dyn Sysfs,
    memo: &serde_json::Value,
    uuid: Option<MdevUuid>,
    r: &mut Report,
) {
    let slice = engine
        .slices()
        .into_iter()
        .find(|s| Some(s.id.to_string()).as_deref() == memo["mdev_slice"].as_str());
    let same = slice.as_ref().is_some_and(|s| {
        uuid.is_some() && s.handles.mdev_uuid == uuid && s.state == SliceState::Allocated
    });
    r.check(
        "engine: reconcile re-creates the mdev with the same UUID on mtty, still allocated",
        same && uuid.is_some_and(|u| mdev_present(fs, u)),
        format!(
            "{:?}",
            slice
                .as_ref()
                .map(|s| (&s.state, s.handles.mdev_uuid, &s.reason))
        ),
    );
    let allocation = engine
        .allocations()
        .into_iter()
        .find(|a| a.consumer == MDEV_CONSUMER);
    r.check(
        "engine: the mdev allocation survived the reboot",
        allocation.is_some(),
        format!("{allocation:?}"),
    );
    let (Some(a), Some(s)) = (allocation, slice) else {
        return;
    };
    let released = engine
        .release(a.id)
        .and_then(|_| engine.destroy_slice(s.id));
    let start = memo["mdev_available"].as_u64();
    let now = mdev_available(fs);
    r.check(
        "engine: release and destroy remove the mdev; available_instances back to its start",
        released.is_ok()
            && uuid.is_some_and(|u| !mdev_present(fs, u))
            && start.is_some()
            && start == now.map(u64::from),
        format!("{released:?}, available_instances {start:?} -> {now:?}"),
    );
}
