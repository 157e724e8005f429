//! One small module per slicing mechanism, behind one trait.
//!
//! A backend composes the primitive operations of `vfio`, `mdev` and `gpu`; it holds no state.
//! Every operation is given the slice's spec and identity: `plan` picks an identity without
//! touching the host, `realize` makes exactly that identity exist (already there: fine),
//! `destroy` removes it (already gone: fine; in use: `Busy`; something else in its place:
//! `Conflict`, never removed), `observe` says whether it is there.

mod choose;
mod mdev;
mod mig;
mod mig_vgpu;
mod nvidia_vfio;
mod passthrough;
mod sriov_vf;

pub(crate) use passthrough::refuse_if_passed_through;
mod vf_type;

use super::error::Result;
use super::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use super::timed_host::TimedHost;

/// What the host shows for a slice's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// It is there, with these handles.
    Present(Handles),
    /// It is not there (realize would make it).
    Absent,
    /// Something else occupies its place; the reason says what.
    Changed(String),
}

/// One slicing mechanism.
pub(crate) trait Backend: Sync {
    /// Checks that the GPU can make this kind at all (type offered, mode on), touching nothing.
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()>;
    /// Chooses an identity for a new slice, avoiding `reserved` (identities owned on this GPU,
    /// present or not).
    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity>;
    /// Makes the identity exist.
    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles>;
    /// Removes the identity.
    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()>;
    /// Looks at the identity on the host.
    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed>;
}

/// The backend that makes a new slice of `spec` (validate, plan). A vendor-VFIO type is
/// MIG-backed when NVML names the GPU-instance profile it occupies: it then has a backend of
/// its own, though its kind stays `nvidia-vfio`.
pub(crate) fn for_new(host: &TimedHost, spec: &SliceSpec) -> Result<&'static dyn Backend> {
    match &spec.kind {
        SliceKind::NvidiaVfio { vgpu_type, .. } => {
            let gpu = spec.pci()?;
            // A GPU that cannot carry vGPUs at all is refused by the time-sliced backend's
            // validation, before NVML is asked anything.
            let mig_backed = vf_type::vgpu_gpu(host, gpu).is_ok()
                && vf_type::mig_profile_id(host, gpu, *vgpu_type)?.is_some();
            Ok(if mig_backed {
                &mig_vgpu::MigVgpuBackend
            } else {
                &nvidia_vfio::NvidiaVfioBackend
            })
        }
        _ => Ok(by_kind(spec.kind.backend())),
    }
}

/// The backend that keeps a slice with an identity (realize, destroy, observe): a MIG-backed
/// vGPU is known by its identity.
pub(crate) fn of_slice(spec: &SliceSpec, id: &Identity) -> &'static dyn Backend {
    match (spec.kind.backend(), id) {
        (BackendKind::NvidiaVfio, Identity::MigVgpu { .. }) => &mig_vgpu::MigVgpuBackend,
        (kind, _) => by_kind(kind),
    }
}

/// The one backend of a kind; for `nvidia-vfio`, the time-sliced one.
fn by_kind(kind: BackendKind) -> &'static dyn Backend {
    match kind {
        BackendKind::Mdev => &mdev::MdevBackend,
        BackendKind::NvidiaVfio => &nvidia_vfio::NvidiaVfioBackend,
        BackendKind::SriovVf => &sriov_vf::SriovVfBackend,
        BackendKind::Mig => &mig::MigBackend,
        BackendKind::Passthrough => &passthrough::PassthroughBackend,
    }
}

/// Whether the kind lives on a VF (whose PF needs SR-IOV enabled first).
pub(crate) fn needs_vfs(kind: BackendKind) -> bool {
    matches!(kind, BackendKind::NvidiaVfio | BackendKind::SriovVf)
}

pub(crate) use mig::profile_by_name_on;
pub(crate) use vf_type::mig_profile_id;

/// An identity of the wrong kind for the backend: a bug or a hand-edited store.
pub(crate) fn wrong_identity(kind: BackendKind, id: &Identity) -> super::error::EngineError {
    super::error::EngineError::Conflict(format!(
        "identity {id:?} does not belong to a {kind} slice (was the state file edited?)"
    ))
}
