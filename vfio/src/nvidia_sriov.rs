//! Enabling and disabling an NVIDIA GPU's SR-IOV VFs the way its vGPU host driver requires.
//!
//! `nvidia.ko` has no `sriov_configure`, so writing `sriov_numvfs` while it holds the PF fails
//! with `ENOENT` (drivers/pci/iov.c, `sriov_numvfs_store`). NVIDIA's `sriov-manage -e <bdf>`
//! (`/usr/lib/nvidia/sriov-manage`) does instead: take `/proc/driver/nvidia/gpus/<bdf>/unbindLock`,
//! unbind the PF, bind it to `pci-pf-stub` (which has `sriov_configure`), write the total to
//! `sriov_numvfs`, hand the PF back to `nvidia` (pci-pf-stub leaves SR-IOV enabled when it lets
//! go), and bind each VF to `nvidia`, which gives it its `nvidia/` vGPU files. `-d` reverses it.
//! When the host has `sriov-manage` it runs; otherwise (a simulated host, a host without the
//! tool) the plain `sriov_numvfs` write is tried first (one field report says it works) and, on
//! the kernel's `ENOENT`, the same sequence runs here through sysfs. Either way the count is read
//! back after.
//!
//! Handing the PF back to `nvidia` destroys every MIG GPU instance on the GPU: deciding whether
//! that is acceptable is the caller's business, before it calls.
//!
//! A process killed in the middle of the sysfs sequence leaves the PF off `nvidia` (on
//! pci-pf-stub, or unbound), with or without VFs: invisible to NVML and every vGPU tool
//! (bigstack-oss/cubecos issue 1459). [`interrupted_sequence`] recognises that state from sysfs
//! and [`finish_interrupted_sequence`] completes it either way (VFs on or off); which way is the
//! caller's decision.

use std::path::{Path, PathBuf};

use ids::PciAddress;
use sysfs::{Sysfs, SysfsExt};

use crate::bind::{DRIVERS_PROBE, driver_bind_path};
use crate::command::{CommandRunner, HostCommand, SRIOV_MANAGE, SriovManageAction};
use crate::{VfioError, device_dir};

/// NVIDIA's kernel driver.
pub const NVIDIA_DRIVER: &str = "nvidia";
/// The kernel's stub PF driver, the one NVIDIA's sequence enables VFs under.
pub const PCI_PF_STUB: &str = "pci-pf-stub";

/// Which way the VFs were set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SriovRoute {
    /// NVIDIA's `sriov-manage` ran.
    SriovManage,
    /// The same sequence through sysfs (the host has no `sriov-manage`).
    Sysfs,
}

/// What [`set_nvidia_vfs`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaSriovOutcome {
    /// How.
    pub route: SriovRoute,
    /// VFs enabled afterwards (read back).
    pub num_vfs: u32,
}

/// What [`interrupted_sequence`] found on a PF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StubState {
    /// Not an NVIDIA SR-IOV PF off `nvidia` (on it, on vfio-pci, not NVIDIA, ...): nothing to do.
    Clear,
    /// An NVIDIA PF the sequence left off `nvidia`: finish it.
    Interrupted {
        /// The PF's driver now: pci-pf-stub, or none.
        driver: Option<String>,
        /// VFs enabled now.
        num_vfs: u32,
    },
    /// An NVIDIA PF on pci-pf-stub (or unbound with its override naming it) that shows signs of
    /// another use than the sequence (`why`): left alone.
    Elsewhere(String),
}

/// `/proc/driver/nvidia/gpus/<bdf>/unbindLock`.
fn unbind_lock_path(pf: PciAddress) -> PathBuf {
    Path::new("/proc/driver/nvidia/gpus")
        .join(pf.to_string())
        .join("unbindLock")
}

/// Whether the host has NVIDIA's `sriov-manage` (looked up through the host's file view, so a
/// simulated host or a fixture tree answers for itself).
pub fn has_sriov_manage(fs: &dyn Sysfs) -> bool {
    fs.exists(Path::new(SRIOV_MANAGE))
}

/// Enables every VF of an NVIDIA GPU (`enable`), or disables them all, and returns how many the
/// kernel reports afterwards. A GPU already in the asked state is left untouched.
pub fn set_nvidia_vfs(
    fs: &dyn Sysfs,
    runner: &dyn CommandRunner,
    pf: PciAddress,
    enable: bool,
) -> Result<NvidiaSriovOutcome, VfioError> {
    let dir = device_dir(pf);
    if !fs.exists(&dir.join("sriov_totalvfs")) {
        return Err(if fs.exists(&dir) {
            VfioError::NotSriov(pf)
        } else {
            VfioError::DeviceNotFound(pf)
        });
    }
    let route = if has_sriov_manage(fs) {
        SriovRoute::SriovManage
    } else {
        SriovRoute::Sysfs
    };
    let current: u32 = fs.read_parse(&dir.join("sriov_numvfs"))?;
    if (current > 0) == enable {
        return Ok(NvidiaSriovOutcome {
            route,
            num_vfs: current,
        });
    }
    match route {
        SriovRoute::SriovManage => run_sriov_manage(runner, pf, enable)?,
        SriovRoute::Sysfs if write_numvfs_directly(fs, pf, enable)? => {}
        SriovRoute::Sysfs if enable => enable_through_stub(fs, pf)?,
        SriovRoute::Sysfs => disable_through_stub(fs, pf)?,
    }
    let num_vfs = fs.read_parse(&dir.join("sriov_numvfs"))?;
    Ok(NvidiaSriovOutcome { route, num_vfs })
}

/// The plain write first: one field report (cozystack issue #2608) enables NVIDIA VFs with
/// `sriov_numvfs` directly, which works if the driver bound has `sriov_configure`. `ENOENT` is
/// the kernel's answer when it has none (nvidia.ko as documented): then `false`, and the caller
/// runs the pci-pf-stub sequence. VFs that appeared this way are bound to `nvidia` if unbound.
fn write_numvfs_directly(fs: &dyn Sysfs, pf: PciAddress, enable: bool) -> Result<bool, VfioError> {
    let dir = device_dir(pf);
    let count = if enable {
        fs.read_parse::<u32>(&dir.join("sriov_totalvfs"))?
    } else {
        0
    };
    match fs.write_str(&dir.join("sriov_numvfs"), &count.to_string()) {
        Ok(()) if enable => bind_vfs_to_nvidia(fs, pf).map(|()| true),
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn run_sriov_manage(
    runner: &dyn CommandRunner,
    pf: PciAddress,
    enable: bool,
) -> Result<(), VfioError> {
    let action = if enable {
        SriovManageAction::Enable
    } else {
        SriovManageAction::Disable
    };
    let cmd = HostCommand::sriov_manage(action, pf);
    let out = runner.run(&cmd)?;
    if out.status != Some(0) {
        return Err(VfioError::CommandFailed {
            command: cmd.shown(),
            status: out.status,
            stderr: out.stderr,
        });
    }
    Ok(())
}

/// `sriov-manage -e`, step by step. Whatever step fails, the PF is handed back to `nvidia`
/// before returning (a GPU left on pci-pf-stub is invisible to NVML and to every vGPU tool).
fn enable_through_stub(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let dir = device_dir(pf);
    let total: u32 = fs.read_parse(&dir.join("sriov_totalvfs"))?;
    let enabled = move_to_stub(fs, pf).and_then(|()| {
        fs.write_str(&dir.join("sriov_numvfs"), &total.to_string())
            .map_err(VfioError::from)
    });
    let back = back_to_nvidia(fs, pf);
    enabled?;
    back?;
    bind_vfs_to_nvidia(fs, pf)
}

/// `sriov-manage -d`, step by step.
fn disable_through_stub(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let dir = device_dir(pf);
    // nvidia may have taken the VFs with it when it let go of the PF; write 0 only if not.
    let disabled = move_to_stub(fs, pf).and_then(|()| {
        match fs.read_parse::<u32>(&dir.join("sriov_numvfs"))? {
            0 => Ok(()),
            _ => Ok(fs.write_str(&dir.join("sriov_numvfs"), "0")?),
        }
    });
    let back = back_to_nvidia(fs, pf);
    disabled?;
    back
}

/// Takes the unbind lock, then moves the PF from `nvidia` to pci-pf-stub through
/// `driver_override` (set first, so nothing re-binds nvidia in between).
fn move_to_stub(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let dir = device_dir(pf);
    let bound = fs.link_name_opt(&dir.join("driver"))?;
    if bound.as_deref() == Some(NVIDIA_DRIVER) {
        take_unbind_lock(fs, pf)?;
    }
    let bdf = pf.to_string();
    fs.write_str(&dir.join("driver_override"), PCI_PF_STUB)?;
    if bound.is_some() {
        fs.write_str(&dir.join("driver").join("unbind"), &bdf)?;
    }
    fs.write_str(Path::new(DRIVERS_PROBE), &bdf)?;
    expect_driver(fs, pf, PCI_PF_STUB)
}

/// `1` to `unbindLock`, read back: the driver grants it only while no process holds the GPU.
fn take_unbind_lock(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let path = unbind_lock_path(pf);
    if !fs.exists(&path) {
        // An NVIDIA driver without the lock file: nothing to take.
        return Ok(());
    }
    fs.write_str(&path, "1")?;
    let held: u32 = fs.read_parse(&path)?;
    if held != 1 {
        return Err(VfioError::UnbindLockRefused(pf));
    }
    Ok(())
}

/// Clears the override, lets go of pci-pf-stub and binds `nvidia` to the PF.
fn back_to_nvidia(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let dir = device_dir(pf);
    let bdf = pf.to_string();
    fs.write_str(&dir.join("driver_override"), "\n")?;
    let bound = fs.link_name_opt(&dir.join("driver"))?;
    if bound.as_deref() == Some(NVIDIA_DRIVER) {
        return Ok(());
    }
    if bound.is_some() {
        fs.write_str(&dir.join("driver").join("unbind"), &bdf)?;
    }
    fs.write_str(&driver_bind_path(NVIDIA_DRIVER)?, &bdf)?;
    expect_driver(fs, pf, NVIDIA_DRIVER)
}

/// Binds every unbound VF of the PF to `nvidia` (the VFs that appeared while the PF was on
/// pci-pf-stub found no driver able to take them).
fn bind_vfs_to_nvidia(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    let bind = driver_bind_path(NVIDIA_DRIVER)?;
    for vf in crate::sriov::virtfns(fs, pf)? {
        let link = device_dir(vf).join("driver");
        if fs.link_name_opt(&link)?.is_none() {
            fs.write_str(&bind, &vf.to_string())?;
        }
        expect_driver(fs, vf, NVIDIA_DRIVER)?;
    }
    Ok(())
}

/// Whether `pf` is an NVIDIA GPU that NVIDIA's SR-IOV sequence left off `nvidia`, read from
/// sysfs alone (NVML no longer sees such a GPU).
///
/// The sequence's traces: the PF bound to pci-pf-stub (which binds no NVIDIA device by id,
/// drivers/pci/pci-pf-stub.c: only through `driver_override` or `new_id`), or bound to nothing
/// with its `driver_override` naming pci-pf-stub (killed between unbind and probe) or with VFs
/// (killed while handing it back: `nvidia`'s remove disables SR-IOV, pci-pf-stub's does not).
/// The assumption is that nothing else parks an NVIDIA GPU there on a vgpud host (the NVIDIA
/// driver cannot use it). What the sequence never does is reported as [`StubState::Elsewhere`]:
/// an override naming another driver, or a VF bound to any driver (under pci-pf-stub no driver
/// can take an NVIDIA VF for the sequence; someone who bound one, to vfio-pci say, uses it).
pub fn interrupted_sequence(fs: &dyn Sysfs, pf: PciAddress) -> Result<StubState, VfioError> {
    let dev = crate::read_device(fs, pf)?;
    let Some(sriov) = dev.sriov.as_ref() else {
        return Ok(StubState::Clear);
    };
    if dev.vendor != ids::PciVendorId::NVIDIA || dev.is_vf() {
        return Ok(StubState::Clear);
    }
    let on_stub = dev.driver.as_deref() == Some(PCI_PF_STUB);
    let override_stub = dev.driver_override.as_deref() == Some(PCI_PF_STUB);
    let unbound_mid = dev.driver.is_none() && (override_stub || sriov.num_vfs > 0);
    if !(on_stub || unbound_mid) {
        return Ok(StubState::Clear);
    }
    if let Some(other) = dev.driver_override.as_deref().filter(|o| *o != PCI_PF_STUB) {
        return Ok(StubState::Elsewhere(format!(
            "its driver_override names {other}"
        )));
    }
    for vf in &sriov.vfs {
        if let Some(d) = crate::bound_driver(fs, *vf)? {
            return Ok(StubState::Elsewhere(format!("its VF {vf} is bound to {d}")));
        }
    }
    Ok(StubState::Interrupted {
        driver: dev.driver.clone(),
        num_vfs: sriov.num_vfs,
    })
}

/// Completes a sequence [`interrupted_sequence`] found: with `want_vfs`, the VFs are enabled
/// (all of them, as `sriov-manage -e`) unless some are, the PF handed back to `nvidia` and every
/// VF bound to `nvidia`; without, the VFs are disabled and the PF handed back. Always through
/// sysfs: `sriov-manage` starts from a PF on `nvidia`. Whatever step fails, the PF is handed back
/// before returning. Returns the VF count read back.
pub fn finish_interrupted_sequence(
    fs: &dyn Sysfs,
    pf: PciAddress,
    want_vfs: bool,
) -> Result<u32, VfioError> {
    let dir = device_dir(pf);
    let now: u32 = fs.read_parse(&dir.join("sriov_numvfs"))?;
    let count = if want_vfs {
        fs.read_parse::<u32>(&dir.join("sriov_totalvfs"))?
    } else {
        0
    };
    let step = if (now > 0) == want_vfs {
        Ok(())
    } else {
        onto_stub(fs, pf).and_then(|()| {
            fs.write_str(&dir.join("sriov_numvfs"), &count.to_string())
                .map_err(VfioError::from)
        })
    };
    let back = back_to_nvidia(fs, pf);
    step?;
    back?;
    if want_vfs {
        bind_vfs_to_nvidia(fs, pf)?;
    }
    Ok(fs.read_parse(&dir.join("sriov_numvfs"))?)
}

/// Binds an unbound PF to pci-pf-stub (its `sriov_numvfs` needs a driver with
/// `sriov_configure`); one on pci-pf-stub already is left there.
fn onto_stub(fs: &dyn Sysfs, pf: PciAddress) -> Result<(), VfioError> {
    if fs.link_name_opt(&device_dir(pf).join("driver"))?.is_some() {
        return expect_driver(fs, pf, PCI_PF_STUB);
    }
    fs.write_str(&device_dir(pf).join("driver_override"), PCI_PF_STUB)?;
    fs.write_str(Path::new(DRIVERS_PROBE), &pf.to_string())?;
    expect_driver(fs, pf, PCI_PF_STUB)
}

fn expect_driver(fs: &dyn Sysfs, addr: PciAddress, driver: &str) -> Result<(), VfioError> {
    let now = fs.link_name_opt(&device_dir(addr).join("driver"))?;
    if now.as_deref() != Some(driver) {
        return Err(VfioError::NotBoundTo {
            address: addr,
            expected: driver.to_owned(),
            bound: now,
        });
    }
    Ok(())
}
