//! The MIG mode a layout's slices need (on for MIG slices and MIG-backed vGPU types, off for
//! time-sliced types and whole GPUs), and the step that gets the GPU there: asked for only
//! while the GPU carries nothing, read back, and left to a GPU reset (which vgpud never does)
//! when NVML keeps it pending.
//!
//! On an NVIDIA vGPU host the order is VFs off, mode change, GPU reset, VFs on, GPU instances
//! (issue 13, fact 4): the driver refuses a change while the GPU has VFs (the step turns unused
//! VFs off and asks again), and the change waits for a reset, which NVML cannot do (it has no
//! reset call): the layout reports `pending` with the reset to do. After it the next apply or
//! reconcile finds the mode on and creates the slices, which enable the VFs again.

use gpu::{MigActivation, NvmlCode};
use ids::PciAddress;

use super::backend::mig_profile_id;
use super::error::{EngineError, Result, chain};
use super::handle::Engine;
use super::model::SliceKind;
use super::resolve::mig_mode;
use super::vfs;

/// Where a GPU's MIG mode is for a layout.
pub(super) enum ModeStep {
    /// As the layout needs it: the slices can be made.
    Ready,
    /// Not yet, with why (slices on the GPU, a GPU reset to come).
    Wait(String),
    /// Cannot be, with why.
    Fail(String),
}

impl Engine {
    /// The MIG mode the kinds need: on for MIG slices and MIG-backed vGPU types, off for
    /// time-sliced vGPU types and the whole GPU, `None` when they do not care; `declared` (the
    /// layout's `mig`) decides when they do not care and must agree when they do. Both at once
    /// is `invalid_request`.
    pub(super) fn wanted_mig_mode(
        &self,
        gpu: PciAddress,
        kinds: &[SliceKind],
        declared: Option<bool>,
    ) -> Result<Option<bool>> {
        let needed = self.mig_mode_needed(gpu, kinds)?;
        match (needed, declared) {
            (Some((need, why)), Some(said)) if need != said => {
                Err(EngineError::InvalidRequest(format!(
                    "GPU {gpu}: {why} needs MIG mode {}, but the layout sets it {}",
                    on_off(need),
                    on_off(said)
                )))
            }
            (Some((need, _)), _) => Ok(Some(need)),
            (None, said) => Ok(said),
        }
    }

    /// What the kinds need of MIG mode, with the kind that needs it.
    pub(super) fn mig_mode_needed(
        &self,
        gpu: PciAddress,
        kinds: &[SliceKind],
    ) -> Result<Option<(bool, String)>> {
        let (mut on, mut off) = (None, None);
        for kind in kinds {
            let needs_on = match kind {
                SliceKind::Mig { .. } => true,
                SliceKind::NvidiaVfio { vgpu_type, .. } => {
                    mig_profile_id(self.host(), gpu, *vgpu_type)?.is_some()
                }
                SliceKind::Passthrough => false,
                SliceKind::Mdev { .. } | SliceKind::SriovVf => continue,
            };
            let slot = if needs_on { &mut on } else { &mut off };
            slot.get_or_insert_with(|| kind.to_string());
        }
        match (on, off) {
            (Some(a), Some(b)) => Err(EngineError::InvalidRequest(format!(
                "GPU {gpu}: {a} needs MIG mode on and {b} needs it off; one GPU cannot carry both"
            ))),
            (Some(a), None) => Ok(Some((true, a))),
            (None, Some(b)) => Ok(Some((false, b))),
            (None, None) => Ok(None),
        }
    }

    /// Brings the GPU's MIG mode to `on`: only while the GPU carries no slice (`blocked`: the
    /// layout already waits for one), never by resetting the GPU. Called with the GPU lock held.
    pub(super) fn mig_mode_step(
        &self,
        gpu: PciAddress,
        on: bool,
        blocked: bool,
    ) -> Result<ModeStep> {
        let host = self.host();
        let what = if on { "on" } else { "off" };
        let mode = match mig_mode(host, gpu) {
            Ok(Some(m)) => m,
            // No MIG, or NVML does not see the GPU (bound to vfio-pci): nothing to turn off.
            Ok(None) if !on => return Ok(ModeStep::Ready),
            Ok(None) => {
                return Ok(ModeStep::Fail(format!(
                    "GPU {gpu} has no MIG mode NVML can set"
                )));
            }
            Err(e) => return Ok(ModeStep::Fail(chain(&e))),
        };
        let (nvml, index) = (host.nvml()?, host.nvml_index(gpu)?);
        let set = |why: &str| {
            nvml.set_mig_mode(index, on).map_err(|e| {
                chain(&host.nvml_err(
                    format!("cannot turn MIG mode {what} on GPU {gpu}{why}"),
                    gpu,
                    e,
                ))
            })
        };
        if mode.current == on {
            // Someone asked for the other mode: withdraw it before a reset makes it happen.
            if mode.pending != on
                && let Err(why) = set(" (withdrawing a pending change)")
            {
                return Ok(ModeStep::Fail(why));
            }
            return Ok(ModeStep::Ready);
        }
        if mode.pending == on {
            return Ok(waits_for_reset(gpu, index, MigActivation::PendingReset));
        }
        if blocked {
            return Ok(ModeStep::Wait(format!(
                "GPU {gpu}: turning MIG mode {what} waits for them"
            )));
        }
        let carried = self.carried(gpu);
        if !carried.is_empty() {
            return Ok(ModeStep::Wait(format!(
                "GPU {gpu}: MIG mode cannot turn {what} while the GPU carries {}",
                carried.join(", ")
            )));
        }
        let activation = match nvml.set_mig_mode(index, on) {
            Ok(a) => a,
            // A vGPU host refuses the change while the GPU has VFs: turn them off (nothing uses
            // them: the GPU carries nothing) and ask again (issue 13, fact 4).
            Err(e) if e.code == NvmlCode::IN_USE && !host.vfs(gpu)?.is_empty() => {
                if let Err(e) = vfs::disable_if_unused(host, gpu, &[]) {
                    return Ok(ModeStep::Wait(format!(
                        "GPU {gpu}: MIG mode {what} waits for its VFs to be turned off: {}",
                        chain(&e)
                    )));
                }
                tracing::info!(%gpu, "VFs turned off for a MIG mode change");
                match set("") {
                    Ok(a) => a,
                    Err(why) => return Ok(ModeStep::Fail(why)),
                }
            }
            Err(e) => {
                return Ok(ModeStep::Fail(chain(&host.nvml_err(
                    format!("cannot turn MIG mode {what} on GPU {gpu}"),
                    gpu,
                    e,
                ))));
            }
        };
        // NVML's answer is the commit point: read the mode back.
        match mig_mode(host, gpu) {
            Ok(Some(m)) if m.current == on => {
                tracing::info!(%gpu, mode = what, "MIG mode changed for a layout");
                Ok(ModeStep::Ready)
            }
            Ok(_) => {
                tracing::info!(%gpu, mode = what, status = ?activation, "MIG mode change pending");
                Ok(waits_for_reset(gpu, index, activation))
            }
            Err(e) => Ok(ModeStep::Fail(chain(&e))),
        }
    }

    /// What the host shows on the GPU now, owned or not: mdevs, typed or vfio-bound VFs, GPU
    /// instances, the GPU on vfio-pci.
    pub(super) fn carried(&self, gpu: PciAddress) -> Vec<String> {
        self.gpu_now(gpu)
            .iter()
            .flat_map(|g| &g.slices)
            .map(|s| super::reconcile::describe(gpu, s))
            .collect()
    }
}

/// The wait for a GPU reset, with the action it needs: NVML has no reset call, so an operator
/// resets the GPU (or reboots the host); the next apply or reconcile continues from there.
fn waits_for_reset(gpu: PciAddress, index: u32, activation: MigActivation) -> ModeStep {
    let why = match activation {
        MigActivation::InUse => "(vgpud never resets a GPU)".to_owned(),
        other => format!(
            "(reset required, NVML activation status {}): reset the GPU (`nvidia-smi -r -i \
             {index}`) or reboot the host; vgpud never resets a GPU",
            other.code()
        ),
    };
    ModeStep::Wait(format!(
        "GPU {gpu}: MIG mode change waits for a GPU reset {why}"
    ))
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}
