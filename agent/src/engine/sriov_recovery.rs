//! Finishing an NVIDIA SR-IOV sequence that a crash interrupted.
//!
//! NVIDIA's sequence (`vfio::set_nvidia_vfs`) moves the PF to pci-pf-stub, writes
//! `sriov_numvfs` and hands the PF back to `nvidia`. An agent killed in between leaves the PF
//! off `nvidia`, with or without VFs: NVML no longer sees the GPU, its VFs have no vGPU files,
//! and no other step of the reconciler can work on it. So the reconciler finishes the sequence
//! first, on every NVIDIA PF that sysfs shows in that state (`vfio::interrupted_sequence`; the
//! sysfs steps are `vfio::finish_interrupted_sequence`). Which way is decided from what vgpud
//! owns: a slice of ours on one of the GPU's VFs wants the VFs (they are enabled, if needed, and
//! bound to `nvidia` with the PF); otherwise they are disabled and the PF handed back alone.
//!
//! Assumption: on a vgpud host nothing else runs the sequence while vgpud runs (a boot unit's
//! `sriov-manage -e ALL` finishes before vgpud starts), and nobody parks an NVIDIA GPU on
//! pci-pf-stub for its own use; what vgpud can detect of such a use (a VF bound to a driver, an
//! override naming another driver) leaves the GPU alone and is reported.

use ids::PciAddress;

use super::error::chain;
use super::handle::Engine;
use super::locks::lock;
use super::model::SliceId;
use super::reconcile::ReconcileReport;

impl Engine {
    /// Finds NVIDIA PFs an interrupted sequence left off `nvidia` and finishes the sequence on
    /// each; what it found and did goes into the report (and the log).
    pub(super) fn finish_interrupted_sriov(&self, report: &mut ReconcileReport) {
        let fs = self.host().fs();
        let addrs = match vfio::list_devices(fs) {
            Ok((addrs, _unreadable)) => addrs,
            Err(e) => {
                tracing::warn!(error = %chain(&e), "cannot list PCI devices to look for interrupted SR-IOV sequences");
                return;
            }
        };
        for pf in addrs {
            if vfio::is_virtual_function(fs, pf) || self.stub_state(pf) == vfio::StubState::Clear {
                continue;
            }
            // vgpud's own sequences run under the GPU lock: one in flight is not interrupted.
            let _gpu = self.inner.gpu_locks.lock(pf);
            match self.stub_state(pf) {
                vfio::StubState::Clear => {}
                vfio::StubState::Elsewhere(why) => self.leave_stub(pf, &why, report),
                vfio::StubState::Interrupted { driver, num_vfs } => {
                    self.finish_on(pf, driver.as_deref(), num_vfs, report);
                }
            }
        }
    }

    fn stub_state(&self, pf: PciAddress) -> vfio::StubState {
        vfio::interrupted_sequence(self.host().fs(), pf).unwrap_or_else(|e| {
            tracing::debug!(%pf, error = %chain(&e), "cannot read the PF's SR-IOV state");
            vfio::StubState::Clear
        })
    }

    /// Someone else's use of pci-pf-stub: reported every pass, logged once.
    fn leave_stub(&self, pf: PciAddress, why: &str, report: &mut ReconcileReport) {
        let text = format!(
            "GPU {pf} is off the NVIDIA driver but {why}: not an interrupted SR-IOV sequence, left alone"
        );
        if lock(&self.inner.foreign_seen).insert(text.clone()) {
            tracing::warn!(gpu = %pf, "{text}");
        }
        report.interrupted_sriov.push(text);
    }

    fn finish_on(
        &self,
        pf: PciAddress,
        driver: Option<&str>,
        num_vfs: u32,
        report: &mut ReconcileReport,
    ) {
        let users = self.vf_slices_on(pf);
        let found = format!(
            "GPU {pf} was left on {} with {num_vfs} VFs by an interrupted SR-IOV sequence",
            driver.unwrap_or("no driver")
        );
        let want = !users.is_empty();
        let text = match vfio::finish_interrupted_sequence(self.host().fs(), pf, want) {
            Ok(now) if want => format!(
                "{found}; {} owned slices use its VFs: the PF and its {now} VFs are bound to nvidia again",
                users.len()
            ),
            Ok(_) => format!(
                "{found}; no owned slice uses its VFs: VFs disabled, the PF bound to nvidia again"
            ),
            Err(e) => {
                let why = format!("{found}; cannot finish it: {}", chain(&e));
                for id in users {
                    self.set_failure(id, Some(why.clone()));
                    report.failed.push((id, why.clone()));
                }
                tracing::error!(gpu = %pf, "{why}");
                report.interrupted_sriov.push(why);
                return;
            }
        };
        tracing::warn!(gpu = %pf, "{text}");
        report.interrupted_sriov.push(text);
    }

    /// Owned slices on one of the GPU's VFs (plain, vendor-VFIO, MIG-backed).
    fn vf_slices_on(&self, pf: PciAddress) -> Vec<SliceId> {
        self.read(|d| {
            d.slices
                .values()
                .filter(|s| s.spec.gpu.pci() == Some(pf) && s.identity.vf().is_some())
                .map(|s| s.id)
                .collect()
        })
    }
}
