//! What the D-Bus objects show: property values per object, built from the service's state, and
//! the difference between two such views (what PropertiesChanged announces).
//!
//! Property getters read the last published [`View`] rather than calling the service: reading a
//! property never blocks on sysfs or a vendor library, and what a client reads is exactly what
//! the last PropertiesChanged said.

use std::collections::BTreeMap;

use agent::engine::{Allocation, Slice, SliceId, SliceKind};
use agent::health::quarantine::Quarantine;
use ids::PciAddress;
use inventory::HostInventory;
use serde::Serialize;
use zbus::{OwnedObjectPath, Variant};

use super::paths::{gpu_path, slice_path};
use super::redact;

/// Declares the property values of one interface, with the D-Bus name of each and the diff.
macro_rules! props {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty => $dbus:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub(crate) struct $name {
            $($(#[$fmeta])* pub(crate) $field: $ty,)*
        }

        impl $name {
            /// The D-Bus names of the properties that change (the interface's getters).
            #[cfg(test)]
            pub(crate) const NAMES: &'static [&'static str] = &[$($dbus),*];

            /// The properties whose values differ in `new`, with the new values.
            pub(crate) fn changes(&self, new: &Self) -> Vec<(&'static str, Variant<'static>)> {
                let mut changed = Vec::new();
                $(
                    if self.$field != new.$field {
                        changed.push(($dbus, Variant::from(new.$field.clone())));
                    }
                )*
                changed
            }
        }
    };
}

props!(
    /// `io.vgpud.Agent1.Manager`.
    ManagerProps {
        hostname: String => "Hostname",
        source: String => "Source",
        gpus: Vec<OwnedObjectPath> => "Gpus",
        slices: Vec<OwnedObjectPath> => "Slices",
        allocations: Vec<String> => "Allocations",
    }
);

props!(
    /// `io.vgpud.Agent1.Gpu`.
    GpuProps {
        address: String => "Address",
        vendor: String => "Vendor",
        vendor_id: String => "VendorId",
        device_id: String => "DeviceId",
        model: String => "Model",
        uuid: String => "Uuid",
        /// -1 when unknown.
        numa_node: i32 => "NumaNode",
        /// -1 without an IOMMU.
        iommu_group: i32 => "IommuGroup",
        /// 0 when unknown.
        memory_mib: u64 => "MemoryMib",
        driver: String => "Driver",
        mig_enabled: bool => "MigEnabled",
        slices: Vec<OwnedObjectPath> => "Slices",
        quarantined: bool => "Quarantined",
        /// Empty when not quarantined.
        quarantine_reason: String => "QuarantineReason",
    }
);

props!(
    /// `io.vgpud.Agent1.Slice`.
    SliceProps {
        id: String => "Id",
        gpu: OwnedObjectPath => "Gpu",
        gpu_address: String => "GpuAddress",
        backend: String => "Backend",
        slice_type: String => "Type",
        state: String => "State",
        reason: String => "Reason",
        numa_node: i32 => "NumaNode",
        mdev_uuid: String => "MdevUuid",
        pci_address: String => "PciAddress",
        vfio_group: i32 => "VfioGroup",
        consumer: String => "Consumer",
        vm: String => "Vm",
        allocation: String => "Allocation",
    }
);

/// What the inventory says about the host, kept between refreshes (discovery is the expensive
/// part of a sync, and GPUs come and go far more rarely than slices).
#[derive(Debug, Clone, Default)]
pub(crate) struct HostFacts {
    hostname: String,
    source: String,
    gpus: BTreeMap<PciAddress, GpuProps>,
}

impl HostFacts {
    /// The facts of an inventory.
    pub(crate) fn from_inventory(inv: &HostInventory) -> Self {
        let gpus = inv
            .gpus
            .iter()
            .map(|g| {
                let props = GpuProps {
                    address: g.pci_address.to_string(),
                    vendor: wire_name(&g.vendor),
                    vendor_id: g.vendor_id.clone(),
                    device_id: g.device_id.clone(),
                    model: g.model.clone(),
                    uuid: g.uuid.clone().unwrap_or_default(),
                    numa_node: g.numa_node.map_or(-1, |n| i32::from(n.0)),
                    iommu_group: g
                        .iommu_group
                        .and_then(|n| i32::try_from(n.0).ok())
                        .unwrap_or(-1),
                    memory_mib: g.memory_mib.unwrap_or(0),
                    driver: g.driver.clone().unwrap_or_default(),
                    mig_enabled: g.mig.as_ref().is_some_and(|m| m.enabled),
                    slices: Vec::new(),
                    quarantined: false,
                    quarantine_reason: String::new(),
                };
                (g.pci_address, props)
            })
            .collect();
        Self {
            hostname: inv.hostname.clone(),
            source: inv.source.clone(),
            gpus,
        }
    }
}

/// Every object's properties at one moment.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    pub(crate) manager: ManagerProps,
    pub(crate) gpus: BTreeMap<PciAddress, GpuProps>,
    pub(crate) slices: BTreeMap<SliceId, SliceProps>,
}

impl View {
    /// The view of the host with these slices, allocations and quarantines.
    pub(crate) fn build(
        host: &HostFacts,
        slices: &[Slice],
        allocations: &[Allocation],
        quarantines: &[Quarantine],
    ) -> View {
        let mut gpus = host.gpus.clone();
        for q in quarantines {
            if let Some(g) = gpus.get_mut(&q.gpu) {
                g.quarantined = true;
                g.quarantine_reason = q.refusal();
            }
        }
        let mut slice_props = BTreeMap::new();
        for s in slices {
            if let Some(g) = s.spec.gpu.pci().and_then(|a| gpus.get_mut(&a)) {
                g.slices.push(slice_path(&s.id));
            }
            slice_props.insert(s.id, slice_view(s));
        }
        let mut allocation_ids: Vec<String> =
            allocations.iter().map(|a| a.id.to_string()).collect();
        allocation_ids.sort();
        let manager = ManagerProps {
            hostname: host.hostname.clone(),
            source: host.source.clone(),
            gpus: gpus.keys().map(gpu_path).collect(),
            slices: slice_props.keys().map(slice_path).collect(),
            allocations: allocation_ids,
        };
        View {
            manager,
            gpus,
            slices: slice_props,
        }
    }
}

fn slice_view(s: &Slice) -> SliceProps {
    let owner = s.owner.as_ref();
    SliceProps {
        id: s.id.to_string(),
        // A slice on a virtual mdev parent has no GPU object: D-Bus's null path `/`.
        gpu: s.spec.gpu.pci().map_or_else(
            || zbus::ObjectPath::from_static_str_unchecked("/").into(),
            |a| gpu_path(&a),
        ),
        gpu_address: s.spec.gpu.to_string(),
        backend: s.spec.kind.backend().as_str().to_owned(),
        slice_type: type_name(&s.spec.kind),
        state: wire_name(&s.state),
        reason: s.reason.clone().unwrap_or_default(),
        numa_node: s.numa_node.map_or(-1, |n| i32::from(n.0)),
        mdev_uuid: s
            .handles
            .mdev_uuid
            .map(|u| u.to_string())
            .unwrap_or_default(),
        pci_address: s
            .handles
            .pci_address
            .map(|a| a.to_string())
            .unwrap_or_default(),
        vfio_group: s
            .handles
            .vfio_group
            .and_then(|g| i32::try_from(g.0).ok())
            .unwrap_or(-1),
        // Public (every local user reads properties and signals): names redacted.
        consumer: owner
            .map(|o| redact::public(&o.consumer))
            .unwrap_or_default(),
        vm: owner
            .and_then(|o| o.vm.as_deref().map(redact::public))
            .unwrap_or_default(),
        allocation: owner.map(|o| o.allocation.to_string()).unwrap_or_default(),
    }
}

/// The slice's type in the words of an allocation request (`3g.40gb`, `nvidia-222`, `vf`, `gpu`).
pub(crate) fn type_name(kind: &SliceKind) -> String {
    match kind {
        SliceKind::Mdev { type_id } => type_id.to_string(),
        SliceKind::NvidiaVfio { vgpu_type, .. } => vgpu_type.to_string(),
        SliceKind::SriovVf => "vf".to_owned(),
        SliceKind::Mig { profile, .. } => profile.to_string(),
        SliceKind::Passthrough => "gpu".to_owned(),
    }
}

/// A unit enum's name in its JSON form (`allocated`, `nvidia`), so D-Bus and REST agree.
pub(crate) fn wire_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_only_what_differs() {
        let old = SliceProps {
            state: "ready".into(),
            numa_node: 0,
            ..Default::default()
        };
        let mut new = old.clone();
        assert!(old.changes(&new).is_empty());
        new.state = "allocated".into();
        new.consumer = "nova".into();
        let changed = old.changes(&new);
        let names: Vec<&str> = changed.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["State", "Consumer"]);
        assert_eq!(changed[0].1, Variant::from("allocated"));
    }

    #[test]
    fn enum_names_are_the_json_ones() {
        assert_eq!(
            wire_name(&agent::engine::SliceState::Allocated),
            "allocated"
        );
        assert_eq!(wire_name(&inventory::Vendor::Nvidia), "nvidia");
    }
}
