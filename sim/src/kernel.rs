//! The kernel's rules for the attributes vgpud writes, applied to the model.
//!
//! Each function takes the bytes written and returns the errno the kernel's store handler would
//! return. Every rule checks before it mutates, so a refused write changes nothing.
//!
//! Where the simulator departs from Linux it is on purpose and noted: writing an attribute
//! without a store method fails with `EACCES` (kernfs refuses the open); removing a device a VM
//! holds open fails with `EBUSY` (the kernel would block until the VM lets go), and so does
//! unbinding `nvidia` from a GPU that processes hold (`nv_pci_remove` waits for them).
//!
//! The NVIDIA rules (SR-IOV only through `pci-pf-stub`, `unbindLock`, GPU instances lost on a
//! PF rebind, `EIO` for a vGPU type that cannot be created) and their sources are collected in
//! `docs/sysfs.md`, "NVIDIA SR-IOV".

use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress};
use libc::{EBUSY, EEXIST, EINVAL, EIO, ENODEV, ENOENT, EPERM, ERANGE};

use crate::mdev;
use crate::mig::MigFamily;
use crate::profile::{GpuModel, VgpuInUseErrno, VgpuTypeSpec, vf_address};
use crate::state::{
    AMDGPU, GIM, Hw, MdevState, NVIDIA, PCI_PF_STUB, PciState, State, VFIO_PCI, VfState,
};

/// An errno.
pub(crate) type Errno = i32;

/// The longest `driver_override` the kernel keeps (`PAGE_SIZE - 1`; the store rejects longer).
const OVERRIDE_MAX: usize = 4095;

/// The written value as text, with the one trailing newline `echo` adds removed.
pub(crate) fn text(data: &[u8]) -> Result<&str, Errno> {
    let s = std::str::from_utf8(data).map_err(|_| EINVAL)?;
    Ok(s.strip_suffix('\n').unwrap_or(s))
}

/// A device named by a bus-level write (`bind`, `drivers_probe`): `sysfs_streq` semantics.
fn named_device(state: &State, data: &[u8]) -> Result<PciAddress, Errno> {
    let name = text(data).map_err(|_| ENODEV)?;
    let addr: PciAddress = name.parse().map_err(|_| ENODEV)?;
    // The kernel matches the device name exactly: `0000:41:00.0`, not `41:00.0` or upper case.
    if addr.to_string() != name || !state.pci.contains_key(&addr) {
        return Err(ENODEV);
    }
    Ok(addr)
}

/// `<dev>/driver_override`: a name sets it, `\n` or an empty write clears it.
pub(crate) fn write_driver_override(
    state: &mut State,
    dev: PciAddress,
    data: &[u8],
) -> Result<(), Errno> {
    if data.len() >= OVERRIDE_MAX {
        return Err(EINVAL);
    }
    // The kernel stops at the first NUL and the first newline.
    let upto_nul = data.split(|b| *b == 0).next().unwrap_or(&[]);
    let line = upto_nul.split(|b| *b == b'\n').next().unwrap_or(&[]);
    let value = std::str::from_utf8(line).map_err(|_| EINVAL)?;
    let p = state.pci.get_mut(&dev).ok_or(ENODEV)?;
    p.driver_override = (!value.is_empty()).then(|| value.to_owned());
    Ok(())
}

/// `drivers/<driver>/unbind`: ENODEV unless the device is bound to that driver.
pub(crate) fn write_unbind(
    state: &mut State,
    hw: &Hw,
    driver: &str,
    data: &[u8],
) -> Result<(), Errno> {
    let addr = named_device(state, data)?;
    let p = state.pci.get(&addr).ok_or(ENODEV)?;
    if p.driver.as_deref() != Some(driver) {
        return Err(ENODEV);
    }
    check_release(state, addr)?;
    check_nvidia_clients(state, addr, driver)?;
    detach(state, hw, addr);
    Ok(())
}

/// `nv_pci_remove` (open-gpu-kernel-modules, kernel-open/nvidia/nv-pci.c) does not fail while
/// clients hold the GPU: it logs "Attempting to remove device ... with non-zero usage count!"
/// and waits until they close it. The simulator refuses with `EBUSY` instead of blocking.
/// Taking `unbindLock` first (what `sriov-manage` and XenServer do, xen-api PR #1557: "the
/// NVIDIA driver must have no clients when a device is unbound") only succeeds without clients.
fn check_nvidia_clients(state: &State, addr: PciAddress, driver: &str) -> Result<(), Errno> {
    let held = driver == NVIDIA && state.gpus.get(&addr).is_some_and(|g| g.clients);
    if held { Err(EBUSY) } else { Ok(()) }
}

/// `/proc/driver/nvidia/gpus/<bdf>/unbindLock`: `1` asks for the lock, `0` gives it back. The
/// driver grants it only while no client holds the GPU; the write succeeds either way and the
/// file reads back whether the lock is held, which is how `sriov-manage` checks it (it reads the
/// file after writing and gives up unless it says 1).
pub(crate) fn write_unbind_lock(
    state: &mut State,
    gpu: PciAddress,
    data: &[u8],
) -> Result<(), Errno> {
    let want = match text(data)?.trim() {
        "1" => true,
        "0" => false,
        _ => return Err(EINVAL),
    };
    let g = state.gpus.get_mut(&gpu).ok_or(ENODEV)?;
    g.unbind_lock = want && !g.clients;
    Ok(())
}

/// `drivers/<driver>/bind`: ENODEV when the driver does not match the device, EBUSY when it is
/// bound already.
pub(crate) fn write_bind(
    state: &mut State,
    hw: &Hw,
    driver: &str,
    data: &[u8],
) -> Result<(), Errno> {
    let addr = named_device(state, data)?;
    if !driver_matches(state, hw, addr, driver) {
        return Err(ENODEV);
    }
    if state.pci.get(&addr).is_some_and(|p| p.driver.is_some()) {
        return Err(EBUSY);
    }
    attach(state, hw, addr, driver)
}

/// `/sys/bus/pci/drivers_probe`: binds an unbound device to its override, else its default
/// driver; no matching driver leaves it unbound and still succeeds, as in the kernel.
pub(crate) fn write_drivers_probe(state: &mut State, hw: &Hw, data: &[u8]) -> Result<(), Errno> {
    let addr = named_device(state, data)?;
    let Some(p) = state.pci.get(&addr) else {
        return Err(ENODEV);
    };
    if p.driver.is_some() {
        return Ok(());
    }
    let candidate = p
        .driver_override
        .clone()
        .or_else(|| state.default_driver(hw, addr));
    match candidate {
        Some(d) if state.drivers(hw).contains(&d) => attach(state, hw, addr, &d),
        _ => Ok(()),
    }
}

/// PCI matching: an override names the only driver that may bind; otherwise the device's own.
fn driver_matches(state: &State, hw: &Hw, addr: PciAddress, driver: &str) -> bool {
    match state
        .pci
        .get(&addr)
        .and_then(|p| p.driver_override.as_deref())
    {
        Some(o) => o == driver,
        None => state.default_driver(hw, addr).as_deref() == Some(driver),
    }
}

fn attach(state: &mut State, hw: &Hw, addr: PciAddress, driver: &str) -> Result<(), Errno> {
    if !state.drivers(hw).contains(driver) {
        return Err(ENODEV);
    }
    if driver == NVIDIA && !nvidia_vf_probe_ok(state, addr) {
        return Err(ENODEV);
    }
    let p = state.pci.get_mut(&addr).ok_or(ENODEV)?;
    p.driver = Some(driver.to_owned());
    Ok(())
}

/// What a driver's remove does to the state it owned.
fn detach(state: &mut State, hw: &Hw, addr: PciAddress) {
    let default = state.default_driver(hw, addr);
    let was_default = state
        .pci
        .get(&addr)
        .is_some_and(|p| p.driver.is_some() && p.driver == default);
    if let Some(p) = state.pci.get_mut(&addr) {
        p.driver = None;
        p.open = false;
        if let Some(vf) = p.vf.as_mut() {
            vf.vgpu_type = None;
            vf.gpu_instance = None;
        }
    }
    if was_default {
        // The vendor driver unregisters its mdev parent, and PF drivers disable SR-IOV on
        // remove (`pci_disable_sriov` in their remove path).
        let parent = MdevParentName::from(addr);
        state.mdevs.retain(|_, m| m.parent != parent);
        remove_vfs(state, addr);
        forget_gpu_instances(state, addr);
    }
    // Any other PF driver (pci-pf-stub) leaves SR-IOV as it is: the PCI core only warns,
    // "driver left SR-IOV enabled after remove" (drivers/pci/iov.c, `pci_iov_remove`), which is
    // what lets `sriov-manage` enable VFs under pci-pf-stub and hand the PF back to nvidia.
}

/// The NVIDIA driver lets go of a GPU: its MIG GPU and compute instances do not survive, and
/// the unbind lock goes with the driver's `/proc` entry. MIG mode itself is a GPU setting and
/// stays. (Field report in bigstack-oss/cubecos's GPU configuration code: `sriov-manage -e`
/// "goes through the driver's unbindLock and rebinds the GPU, which wipes every GPU instance on
/// the card - MIG mode itself is persistent state and survives"; so VFs come before GIs.)
fn forget_gpu_instances(state: &mut State, addr: PciAddress) {
    if let Some(g) = state.gpus.get_mut(&addr) {
        g.gis.clear();
        g.unbind_lock = false;
    }
}

/// Whether `nvidia` can take a function: a PF always; a VF only while its PF is on `nvidia`.
/// `sriov-manage` binds the VFs to nvidia only after it has handed the PF back to nvidia
/// (gpu-operator issue #2594 describes the VFs' `nvidia/` files appearing after
/// `sriov-manage -e`); VFs that appear while the PF sits on pci-pf-stub stay unbound.
fn nvidia_vf_probe_ok(state: &State, addr: PciAddress) -> bool {
    match state.pci.get(&addr).and_then(|p| p.vf.as_ref()) {
        None => true,
        Some(vf) => state.pci.get(&vf.pf).and_then(|p| p.driver.as_deref()) == Some(NVIDIA),
    }
}

/// `<bdf>/reset`, as `reset_store` in drivers/pci/pci-sysfs.c: anything but `1` is EINVAL
/// ("Writing 1 to this file will perform reset", Documentation/ABI/testing/sysfs-bus-pci).
/// A GPU in use is refused with EBUSY: a VM holding the VFIO fd of the GPU, a VF or an mdev
/// (as a release is), or what holds it for `nvidia-smi -r` ([`State::reset_blocker`]). The
/// reset itself is the GPU's ([`State::reset_gpu`]).
pub(crate) fn write_reset(state: &mut State, gpu: PciAddress, data: &[u8]) -> Result<(), Errno> {
    if parse_ulong(text(data)?) != Some(1) {
        return Err(EINVAL);
    }
    check_release(state, gpu)?;
    if state.reset_blocker(gpu).is_some() {
        return Err(EBUSY);
    }
    state.reset_gpu(gpu);
    Ok(())
}

/// Refuses to take a device away from a VM.
fn check_release(state: &State, addr: PciAddress) -> Result<(), Errno> {
    let parent = MdevParentName::from(addr);
    let open_mdev = state.mdevs.values().any(|m| m.parent == parent && m.open);
    let open_vf = state.vfs_of(addr).iter().any(|(_, v)| v.open);
    let open_self = state.pci.get(&addr).is_some_and(|p| p.open);
    if open_self || open_mdev || open_vf {
        Err(EBUSY)
    } else {
        Ok(())
    }
}

/// `<pf>/sriov_numvfs`, as `sriov_numvfs_store` in drivers/pci/iov.c: kstrtou16, ERANGE above
/// the total, the same count is a no-op, ENOENT without a bound PF driver or with one that has
/// no `sriov_configure` ("driver does not support SR-IOV configuration via sysfs": nvidia.ko is
/// such a driver), EBUSY from non-zero to another non-zero.
pub(crate) fn write_sriov_numvfs(
    state: &mut State,
    hw: &Hw,
    pf: PciAddress,
    data: &[u8],
    partial: Option<u32>,
) -> Result<(), Errno> {
    let n = parse_u16(text(data)?).ok_or(EINVAL)?;
    set_num_vfs(state, hw, pf, u32::from(n), partial)
}

/// `sriov_numvfs_store`'s rules (drivers/pci/iov.c), for a write or a PF driver's own call.
pub(crate) fn set_num_vfs(
    state: &mut State,
    hw: &Hw,
    pf: PciAddress,
    n: u32,
    partial: Option<u32>,
) -> Result<(), Errno> {
    let sriov = state.profile.sriov_of(pf).ok_or(ENOENT)?;
    if n > sriov.total_vfs {
        return Err(ERANGE);
    }
    let current = state.vfs_of(pf).len() as u32;
    if n == current {
        return Ok(());
    }
    if !sriov_driver_bound(state, hw, pf) {
        return Err(ENOENT);
    }
    if n == 0 {
        if state.vfs_of(pf).iter().any(|(_, v)| v.open) {
            return Err(EBUSY);
        }
        remove_vfs(state, pf);
        return Ok(());
    }
    if current != 0 {
        return Err(EBUSY);
    }
    enable_vfs(state, hw, pf, partial.map_or(n, |p| p.min(n)))
}

/// Whether the PF's driver has a `sriov_configure` callback. pci-pf-stub has one
/// (`pci_sriov_configure_simple`, drivers/pci/pci-pf-stub.c); nvidia.ko has none, so NVIDIA
/// VFs are only enabled through pci-pf-stub (`sriov-manage`; kubevirt issue #17642,
/// gpu-operator issue #2594); vfio-pci only with enable_sriov=1, which the simulated host does
/// not set. Neither AMD driver has one: amdgpu (`amdgpu_kms_pci_driver` in amdgpu_drv.c) and
/// GIM, which enables VFs itself (see [`crate::gim`]; amd/MxGPU-Virtualization). Every
/// other default driver of a profile (igb, ixgbe, ...) has one.
fn sriov_driver_bound(state: &State, hw: &Hw, pf: PciAddress) -> bool {
    match state.pci.get(&pf).and_then(|p| p.driver.as_deref()) {
        Some(PCI_PF_STUB) => true,
        Some(NVIDIA | AMDGPU | GIM) => false,
        _ => state.bound_to_default(hw, pf),
    }
}

/// Creates `n` VFs: addresses from offset/stride, one new IOMMU group each, bound to the VF
/// driver (`sriov_drivers_autoprobe` is on).
pub(crate) fn enable_vfs(state: &mut State, hw: &Hw, pf: PciAddress, n: u32) -> Result<(), Errno> {
    let sriov = state.profile.sriov_of(pf).cloned().ok_or(ENOENT)?;
    for index in 0..n {
        let addr = vf_address(pf, &sriov, index).ok_or(EINVAL)?;
        let group = state.free_group(hw);
        let vf = VfState {
            pf,
            index,
            vgpu_type: None,
            gpu_instance: None,
        };
        state.pci.insert(
            addr,
            PciState {
                driver: None,
                driver_override: None,
                iommu_group: group,
                open: false,
                vf: Some(vf),
            },
        );
        let drivers = state.drivers(hw);
        let probe_ok = nvidia_vf_probe_ok(state, addr);
        if let Some(p) = state.pci.get_mut(&addr) {
            p.driver = sriov
                .vf_driver
                .clone()
                .filter(|d| drivers.contains(d) && (d != NVIDIA || probe_ok));
        }
    }
    Ok(())
}

pub(crate) fn remove_vfs(state: &mut State, pf: PciAddress) {
    state
        .pci
        .retain(|_, p| p.vf.as_ref().is_none_or(|v| v.pf != pf));
}

fn parse_u16(s: &str) -> Option<u16> {
    // kstrtou16 with base 0: decimal, 0x-hex or 0-octal.
    let s = s.strip_prefix('+').unwrap_or(s);
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u16::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u16::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// `<type>/create`: EINVAL for a malformed UUID, EEXIST for a UUID any parent already uses,
/// then the parent's capacity model decides ([`crate::mdev`]: EINVAL on NVIDIA, ENOSPC from
/// the samples' pools, EUSERS from the mdev core's own count).
pub(crate) fn write_mdev_create(
    state: &mut State,
    hw: &Hw,
    parent: &MdevParentName,
    type_id: &MdevTypeId,
    data: &[u8],
) -> Result<(), Errno> {
    // The kernel takes exactly 36 characters, or 37 with a newline.
    if data.len() != 36 && !(data.len() == 37 && data.last() == Some(&b'\n')) {
        return Err(EINVAL);
    }
    let uuid: MdevUuid = text(data)?.parse().map_err(|_| EINVAL)?;
    if state.mdevs.contains_key(&uuid) {
        return Err(EEXIST);
    }
    let rule = mdev::parent(state, parent).ok_or(ENODEV)?;
    if mdev::available(state, parent, type_id) == 0 {
        return Err(rule.exhausted_errno());
    }
    let group = state.free_group(hw);
    state.mdevs.insert(
        uuid,
        MdevState {
            parent: parent.clone(),
            type_id: type_id.clone(),
            iommu_group: group,
            open: false,
        },
    );
    Ok(())
}

/// `<mdev>/remove`: a non-zero number removes (EBUSY while a VM has it open), 0 does nothing.
pub(crate) fn write_mdev_remove(
    state: &mut State,
    uuid: MdevUuid,
    data: &[u8],
) -> Result<(), Errno> {
    let value = parse_ulong(text(data)?).ok_or(EINVAL)?;
    if value == 0 {
        return Ok(());
    }
    let m = state.mdevs.get(&uuid).ok_or(ENODEV)?;
    if m.open {
        return Err(EBUSY);
    }
    state.mdevs.remove(&uuid);
    Ok(())
}

fn parse_ulong(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// The vGPU types a VF could take now, in profile order.
pub(crate) fn creatable_vgpu_types<'a>(
    state: &State,
    model: &'a GpuModel,
    pf: PciAddress,
) -> Vec<&'a VgpuTypeSpec> {
    let Some(gpu) = state.gpus.get(&pf) else {
        return Vec::new();
    };
    let vfs = state.vfs_of(pf);
    let active: Vec<&VgpuTypeSpec> = vfs
        .iter()
        .filter_map(|(_, p)| p.vf.as_ref()?.vgpu_type)
        .filter_map(|id| model.vgpu_types.iter().find(|t| t.id == id))
        .collect();
    let count_of = |id: u32| active.iter().filter(|t| t.id == id).count() as u32;
    if gpu.mig_current {
        let family = model.mig;
        return model
            .vgpu_types
            .iter()
            .filter(|t| count_of(t.id) < t.max_instances)
            .filter(|t| t.mig_profile.is_some() && free_gi_for(state, family, pf, t).is_some())
            .collect();
    }
    let fb_total = model.vgpu_framebuffer_mib.unwrap_or(model.memory_mib);
    let fb_used: u64 = active.iter().map(|t| t.framebuffer_mib).sum();
    let size = active.first().map(|t| t.framebuffer_mib);
    model
        .vgpu_types
        .iter()
        .filter(|t| t.mig_profile.is_none())
        .filter(|t| size.is_none_or(|s| s == t.framebuffer_mib))
        .filter(|t| {
            fb_used + t.framebuffer_mib <= fb_total && (active.len() as u32) < t.max_instances
        })
        .collect()
}

/// The GPU instance the driver puts a new vGPU of a MIG-backed type into: the lowest-id GPU
/// instance of the type's profile that no vGPU occupies yet and that has no compute instance,
/// else the lowest-id one with compute instances.
///
/// The driver, not the writer, chooses the instance; `nvidia/gpu_instance_id` says which one
/// afterwards (bigstack-oss/cubecos's GPU configuration code, MIG-backed vGPU support of its PR
/// 1223: the instance a VF serves is decided by the driver). Instances with compute instances are accepted: cubecos
/// creates every instance with `nvidia-smi mig -cgi <id> -C` (a compute instance in each) and the
/// type writes succeeded, and NVIDIA's AI Enterprise vGPU configuration guide has both GPU and
/// compute instances created before MIG-backed vGPUs. Which free instance the driver prefers is
/// documented nowhere (issue 13 review): instances without compute instances first, then the
/// lowest id, is this simulator's choice.
fn free_gi_for(
    state: &State,
    family: Option<MigFamily>,
    pf: PciAddress,
    t: &VgpuTypeSpec,
) -> Option<u32> {
    let profile = family?.profile_named(t.mig_profile.as_ref()?)?;
    let taken: Vec<u32> = state
        .vfs_of(pf)
        .iter()
        .filter_map(|(_, p)| p.vf.as_ref()?.gpu_instance)
        .collect();
    let gpu = state.gpus.get(&pf)?;
    gpu.gis
        .iter()
        .filter(|g| g.profile_id == profile.info.id && !taken.contains(&g.id))
        .min_by_key(|g| (!g.cis.is_empty(), g.id))
        .map(|g| g.id)
}

/// What `<vf>/nvidia/gpu_instance_id` and `placement_id` read: the id and the start slot of the
/// GPU instance the VF's MIG-backed vGPU sits in; `None` (the driver answers ENXIO) while the VF
/// has no vGPU (cubecos's GPU configuration code: both read ENXIO until a vGPU exists);
/// bigstack-oss/cubecos issue 312 shows `gpu_instance_id` 3 and `placement_id` 0 right after a
/// type write. What `placement_id` counts is not settled: cubecos reads it as the vGPU's offset
/// inside its instance (which is 0 for a type that fills its instance), issue 13 as the
/// instance's start slot; this simulator gives the start slot, and the agent decides by the
/// instance id alone. A time-sliced vGPU has no instance: ENXIO too (assumed, issue 13 review).
pub(crate) fn vgpu_gpu_instance(state: &State, vf: &VfState) -> Option<(u32, u32)> {
    let id = vf.gpu_instance?;
    let gi = state.gpus.get(&vf.pf)?.gis.iter().find(|g| g.id == id)?;
    Some((gi.id, gi.start))
}

/// `<vf>/nvidia/current_vgpu_type`: an id creates (EBUSY if the VF has a type, EIO if the type
/// cannot be created now); 0 destroys (EBUSY or EPERM, per profile, while a VM has it open).
///
/// EIO, not EINVAL, is what recent vGPU host drivers answer for a type that cannot be created:
/// the driver logs "NVRM: Failed to add vgpu create request: 0x<status>" (the message of
/// `nv_vgpu_create_request`'s caller in NVIDIA's open kernel modules) and the write fails with
/// EIO (field report in bigstack-oss/cubecos's GPU configuration code: EIO with status 0x38 for a
/// MIG-backed type whose GPU instance was gone; the same message with an "I/O error" for a
/// time-sliced size that no longer fits on an R535 mdev host). The refusal of `0` while a VM
/// holds the VF reads `EBUSY` in some field reports and `EPERM` in others: `vgpu_in_use` in the
/// profile picks.
pub(crate) fn write_current_vgpu_type(
    state: &mut State,
    vf: PciAddress,
    data: &[u8],
) -> Result<(), Errno> {
    let id: u32 = text(data)?.trim().parse().map_err(|_| EINVAL)?;
    let p = state.pci.get(&vf).ok_or(ENODEV)?;
    let pf = p.vf.as_ref().ok_or(ENODEV)?.pf;
    let current = p.vf.as_ref().and_then(|v| v.vgpu_type);
    if id == 0 {
        if current.is_some() && p.open {
            return Err(in_use_errno(state, pf));
        }
        set_vf_type(state, vf, None, None);
        return Ok(());
    }
    if current.is_some() {
        return Err(EBUSY);
    }
    let (_, model) = state.gpu(pf).ok_or(ENODEV)?;
    let model = model.clone();
    let t = creatable_vgpu_types(state, &model, pf)
        .into_iter()
        .find(|t| t.id == id)
        .ok_or(EIO)?;
    let gi = match t.mig_profile {
        Some(_) => Some(free_gi_for(state, model.mig, pf, t).ok_or(EIO)?),
        None => None,
    };
    set_vf_type(state, vf, Some(id), gi);
    Ok(())
}

fn in_use_errno(state: &State, pf: PciAddress) -> Errno {
    match state.profile.sriov_of(pf).map(|s| s.vgpu_in_use) {
        Some(VgpuInUseErrno::Eperm) => EPERM,
        _ => EBUSY,
    }
}

fn set_vf_type(state: &mut State, vf: PciAddress, id: Option<u32>, gi: Option<u32>) {
    if let Some(v) = state.pci.get_mut(&vf).and_then(|p| p.vf.as_mut()) {
        v.vgpu_type = id;
        v.gpu_instance = gi;
    }
}

/// Which AMD partition axis a write changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartitionAxis {
    Compute,
    Memory,
}

/// `current_compute_partition` / `current_memory_partition`: EINVAL for a mode the GPU does not
/// offer, EBUSY while VFs are enabled. A compute mode applies at once. A memory (NPS) mode on
/// a PF bound to amdgpu is only requested, for the whole XGMI hive, and applies when the driver
/// next loads (kernel commits "drm/amdgpu: Add NPS switch support for GC 9.4.3" and "Place NPS
/// mode request on unload": `amdgpu_gmc_request_memory_partition` stores the hive's
/// `requested_nps_mode`, `amdgpu_xgmi_request_nps_change` places it for every device of the
/// hive at unload, "reload driver to complete the change"); asking for the current mode
/// withdraws the request. Elsewhere (GIM's host SMI) it applies at once.
pub(crate) fn set_partition(
    state: &mut State,
    gpu: PciAddress,
    axis: PartitionAxis,
    mode: &str,
) -> Result<(), Errno> {
    let (_, model) = state.gpu(gpu).ok_or(ENODEV)?;
    let amd = model.amd.as_ref().ok_or(ENODEV)?;
    let mode = mode.trim().to_ascii_uppercase();
    let offered = match axis {
        PartitionAxis::Compute => &amd.compute_modes,
        PartitionAxis::Memory => &amd.memory_modes,
    };
    if !offered.contains(&mode) {
        return Err(EINVAL);
    }
    if !state.vfs_of(gpu).is_empty() {
        return Err(EBUSY);
    }
    let on_amdgpu = state.pci.get(&gpu).and_then(|p| p.driver.as_deref()) == Some(AMDGPU);
    if axis == PartitionAxis::Memory && on_amdgpu {
        request_memory_partition(state, gpu, mode);
        return Ok(());
    }
    let g = state.gpus.get_mut(&gpu).ok_or(ENODEV)?;
    match axis {
        PartitionAxis::Compute => g.compute_partition = Some(mode),
        PartitionAxis::Memory => g.memory_partition = Some(mode),
    }
    Ok(())
}

/// Records an NPS request on the GPU and every other GPU of its XGMI hive (one request per
/// hive; see [`set_partition`]).
fn request_memory_partition(state: &mut State, gpu: PciAddress, mode: String) {
    for member in state.hive_of(gpu) {
        if let Some(g) = state.gpus.get_mut(&member) {
            let current = g.memory_partition.as_deref() == Some(mode.as_str());
            g.memory_partition_requested = (!current).then(|| mode.clone());
        }
    }
}

/// Unloads and reloads amdgpu (`modprobe -r amdgpu && modprobe amdgpu`, what
/// `amdsmi_gpu_driver_reload` does): every GPU bound to it takes its requested NPS mode. EBUSY
/// while a process holds one of them (AMD SMI reference, `amdsmi_gpu_driver_reload`:
/// `AMDSMI_STATUS_AMDGPU_RESTART_ERR` unless every process using the GPUs has stopped).
pub(crate) fn reload_amdgpu(state: &mut State) -> Result<Vec<PciAddress>, Errno> {
    let bound: Vec<PciAddress> = state
        .gpus
        .keys()
        .copied()
        .filter(|a| state.pci.get(a).and_then(|p| p.driver.as_deref()) == Some(AMDGPU))
        .collect();
    if bound.iter().any(|a| state.gpus[a].clients) {
        return Err(EBUSY);
    }
    let mut changed = Vec::new();
    for addr in bound {
        let g = state.gpus.get_mut(&addr).ok_or(ENODEV)?;
        if let Some(mode) = g.memory_partition_requested.take() {
            g.memory_partition = Some(mode);
            changed.push(addr);
        }
    }
    Ok(changed)
}

/// A sysfs write to a partition attribute.
pub(crate) fn write_partition(
    state: &mut State,
    gpu: PciAddress,
    axis: PartitionAxis,
    data: &[u8],
) -> Result<(), Errno> {
    let mode = text(data)?;
    set_partition(state, gpu, axis, mode)
}

/// Whether a VM could open this PCI function's VFIO group now.
pub(crate) fn vfio_openable(state: &State, addr: PciAddress) -> Result<(), &'static str> {
    let p = state.pci.get(&addr).ok_or("it is not present")?;
    if !state.is_vfio_function(addr) {
        return Err("it is not bound to vfio-pci and is not a typed NVIDIA VF");
    }
    // Every device of the group must be bound to a VFIO driver or unbound.
    let group = p.iommu_group;
    let viable = state
        .pci
        .iter()
        .filter(|(_, q)| q.iommu_group == group)
        .all(|(a, q)| {
            q.driver.is_none()
                || state.is_vfio_function(*a)
                || q.driver.as_deref() == Some(VFIO_PCI)
        });
    if viable {
        Ok(())
    } else {
        Err("its IOMMU group has a device bound to a host driver")
    }
}
