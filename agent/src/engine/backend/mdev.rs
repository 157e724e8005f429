//! mdev: a mediated device of a type on the GPU (or on a virtual mdev parent such as the
//! kernel's `mtty`), named by a UUID the engine chooses.

use ids::{MdevTypeId, MdevUuid};

use super::{Backend, Observed, wrong_identity};
use crate::engine::error::{EngineError, Result};
use crate::engine::model::{BackendKind, Handles, Identity, SliceKind, SliceSpec};
use crate::engine::timed_host::TimedHost;

pub(crate) struct MdevBackend;

fn type_of(spec: &SliceSpec) -> Result<&MdevTypeId> {
    match &spec.kind {
        SliceKind::Mdev { type_id } => Ok(type_id),
        other => Err(EngineError::InvalidRequest(format!(
            "{other} is not an mdev slice"
        ))),
    }
}

fn uuid_of(id: &Identity) -> Result<MdevUuid> {
    match id {
        Identity::Mdev { uuid } => Ok(*uuid),
        other => Err(wrong_identity(BackendKind::Mdev, other)),
    }
}

fn handles(dev: &mdev::MdevDevice) -> Handles {
    Handles {
        mdev_uuid: Some(dev.uuid),
        vfio_group: dev.iommu_group,
        ..Handles::default()
    }
}

/// `None` when absent; the device when present.
fn read(host: &TimedHost, uuid: MdevUuid) -> Result<Option<mdev::MdevDevice>> {
    match mdev::read_device(host.fs(), uuid) {
        Ok(d) => Ok(Some(d)),
        Err(mdev::MdevError::NotFound { .. }) => Ok(None),
        Err(e) => Err(EngineError::from_mdev(
            format!("cannot read mdev {uuid}"),
            e,
        )),
    }
}

fn mismatch(spec: &SliceSpec, ty: &MdevTypeId, dev: &mdev::MdevDevice) -> Option<String> {
    let parent = spec.gpu.mdev_parent();
    (dev.parent != parent || &dev.type_id != ty).then(|| {
        format!(
            "mdev {} is a {} on {}, not a {ty} on {}",
            dev.uuid, dev.type_id, dev.parent, spec.gpu
        )
    })
}

impl Backend for MdevBackend {
    fn validate(&self, host: &TimedHost, spec: &SliceSpec) -> Result<()> {
        let ty = type_of(spec)?;
        let parent = spec.gpu.mdev_parent();
        mdev::read_type(host.fs(), &parent, ty)
            .map(|_| ())
            .map_err(|e| EngineError::from_mdev(format!("{} cannot make {ty}", spec.gpu), e))
    }

    fn plan(&self, host: &TimedHost, spec: &SliceSpec, reserved: &[Identity]) -> Result<Identity> {
        let ty = type_of(spec)?;
        let parent = spec.gpu.mdev_parent();
        let info = mdev::read_type(host.fs(), &parent, ty)
            .map_err(|e| EngineError::from_mdev(format!("{} cannot make {ty}", spec.gpu), e))?;
        if info.available_instances == Some(0) {
            return Err(EngineError::NoCapacity(format!(
                "{} has no {ty} instance left",
                spec.gpu
            )));
        }
        loop {
            // Marked, so that the host alone says it is vgpud's if the ledger is ever lost.
            let uuid = crate::engine::marks::new_mdev_uuid();
            let taken = reserved.contains(&Identity::Mdev { uuid }) || read(host, uuid)?.is_some();
            if !taken {
                return Ok(Identity::Mdev { uuid });
            }
        }
    }

    fn realize(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Handles> {
        let (ty, uuid) = (type_of(spec)?, uuid_of(id)?);
        if let Some(dev) = read(host, uuid)? {
            return match mismatch(spec, ty, &dev) {
                None => Ok(handles(&dev)),
                Some(why) => Err(EngineError::Conflict(why)),
            };
        }
        let parent = spec.gpu.mdev_parent();
        let dev = mdev::create(host.fs(), &parent, ty, uuid).map_err(|e| {
            EngineError::from_mdev(format!("cannot create {ty} mdev {uuid} on {}", spec.gpu), e)
        })?;
        Ok(handles(&dev))
    }

    fn destroy(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<()> {
        let (ty, uuid) = (type_of(spec)?, uuid_of(id)?);
        let Some(dev) = read(host, uuid)? else {
            return Ok(());
        };
        if let Some(why) = mismatch(spec, ty, &dev) {
            return Err(EngineError::Conflict(format!(
                "{why}; it is not ours to remove"
            )));
        }
        match mdev::remove(host.fs(), uuid) {
            Ok(()) | Err(mdev::MdevError::NotFound { .. }) => Ok(()),
            Err(e) if e.errno() == Some(libc::EBUSY) => Err(EngineError::Busy(format!(
                "mdev {uuid} is open (a VM holds it)"
            ))),
            Err(e) => Err(EngineError::from_mdev(
                format!("cannot remove mdev {uuid}"),
                e,
            )),
        }
    }

    fn observe(&self, host: &TimedHost, spec: &SliceSpec, id: &Identity) -> Result<Observed> {
        let (ty, uuid) = (type_of(spec)?, uuid_of(id)?);
        Ok(match read(host, uuid)? {
            None => Observed::Absent,
            Some(dev) => match mismatch(spec, ty, &dev) {
                None => Observed::Present(handles(&dev)),
                Some(why) => Observed::Changed(why),
            },
        })
    }
}
