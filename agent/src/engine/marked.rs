//! The slices on the host that carry vgpud's mark ([`super::marks`]), and the refusal to start
//! on a missing state file while there are any (issue 14, defect 7; recovery is
//! `recover.rs`). Read from sysfs alone: with the ledger gone the mark is all there is.

use super::error::{EngineError, Result};
use super::marks;
use super::model::{DeviceRef, Identity, SliceId, SliceKind, SliceSpec};
use super::state::{OwnedSlice, now};
use super::timed_host::TimedHost;

/// At most this many marked slices are named in the refusal to start.
const NAMED: usize = 5;

/// The marked mdevs on the host, as ledger entries with fresh ids.
pub(super) fn marked(host: &TimedHost, notes: &mut Vec<(String, String)>) -> Vec<OwnedSlice> {
    let (devices, errors) = match mdev::list_devices(host.fs()) {
        Ok(found) => found,
        Err(e) => {
            notes.push(("mdevs".into(), format!("cannot list them: {e}")));
            return Vec::new();
        }
    };
    for e in errors {
        notes.push(("an mdev".into(), format!("cannot be read: {e}")));
    }
    let mut owned = Vec::new();
    for dev in devices {
        let text = format!("mdev {} ({}) on {}", dev.uuid, dev.type_id, dev.parent);
        if !marks::is_vgpud_mdev(&dev.uuid) {
            notes.push((
                text,
                "its UUID carries no vgpud mark (another tool's, or made by a vgpud from before \
                 the marks)"
                    .into(),
            ));
            continue;
        }
        owned.push(OwnedSlice {
            id: SliceId::new_random(),
            spec: SliceSpec {
                gpu: DeviceRef::from(dev.parent),
                kind: SliceKind::Mdev {
                    type_id: dev.type_id,
                },
            },
            identity: Identity::Mdev { uuid: dev.uuid },
            created: now(),
        });
    }
    owned
}

pub(super) fn describe_owned(s: &OwnedSlice) -> String {
    match (&s.spec.kind, &s.identity) {
        (SliceKind::Mdev { type_id }, Identity::Mdev { uuid }) => {
            format!("mdev {uuid} ({type_id}) on {}", s.spec.gpu)
        }
        _ => format!("{} on {}", s.spec.kind, s.spec.gpu),
    }
}

/// Refuses an open that found no state file while the host shows marked slices.
pub(super) fn refuse_if_marked(host: &TimedHost, path: &std::path::Path) -> Result<()> {
    let found = marked(host, &mut Vec::new());
    if found.is_empty() {
        return Ok(());
    }
    let mut text = found
        .iter()
        .take(NAMED)
        .map(describe_owned)
        .collect::<Vec<_>>()
        .join(", ");
    if found.len() > NAMED {
        text.push_str(&format!(" and {} more", found.len() - NAMED));
    }
    Err(EngineError::Store(store::StoreError::Missing {
        path: path.to_owned(),
        found: text,
    }))
}
