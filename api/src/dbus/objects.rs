//! The exported objects: the manager, one object per GPU and one per slice.
//!
//! Each object is a handle (the shared state and a key); properties come from the last
//! published view, methods call the service through `spawn_blocking`. Mutating methods ask
//! polkit first and sync the objects before replying.

use std::collections::HashMap;
use std::sync::Arc;

use agent::engine::SliceId;
use ids::PciAddress;
use serde::Serialize;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::wire::ObjectPath;
use zbus::{Connection, OwnedObjectPath, OwnedVariant, fdo};

use super::args::{self, allocation_id, allocation_request, create_request, slice_id};
use super::error::DbusError;
use super::paths::slice_path;
use super::polkit::Action;
use super::redact;
use super::sync::Shared;
use super::view::{GpuProps, SliceProps};
use crate::wire;

/// `io.vgpud.Agent1.Manager` at `/io/vgpud/Agent1`.
#[derive(Debug, Clone)]
pub(crate) struct ManagerObject {
    shared: Arc<Shared>,
}

impl ManagerObject {
    pub(crate) const NAME: &'static str = "io.vgpud.Agent1.Manager";

    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    async fn run<T, F>(&self, conn: &Connection, f: F) -> Result<T, DbusError>
    where
        T: Send + 'static,
        F: FnOnce(&agent::service::Service) -> agent::service::Result<T> + Send + 'static,
    {
        run(&self.shared, conn, f).await
    }
}

/// Runs a mutating call (authorized already), then syncs the objects; also when the call failed,
/// since a failed operation may still have changed something (a slice marked failed).
async fn run<T, F>(shared: &Arc<Shared>, conn: &Connection, f: F) -> Result<T, DbusError>
where
    T: Send + 'static,
    F: FnOnce(&agent::service::Service) -> agent::service::Result<T> + Send + 'static,
{
    let result = shared.call(f).await;
    shared.sync(conn, false).await;
    result
}

#[zbus::interface(name = "io.vgpud.Agent1.Manager")]
impl ManagerObject {
    /// The agent's version.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }

    /// The host's name.
    #[zbus(property)]
    fn hostname(&self) -> String {
        self.shared.view(|v| v.manager.hostname.clone())
    }

    /// Where the host description comes from: `host:/` on a real host, `sim:<profile>` on a
    /// simulated one.
    #[zbus(property)]
    fn source(&self) -> String {
        self.shared.view(|v| v.manager.source.clone())
    }

    /// The GPU objects.
    #[zbus(property)]
    fn gpus(&self) -> Vec<OwnedObjectPath> {
        self.shared.view(|v| v.manager.gpus.clone())
    }

    /// The slice objects (slices vgpud owns).
    #[zbus(property)]
    fn slices(&self) -> Vec<OwnedObjectPath> {
        self.shared.view(|v| v.manager.slices.clone())
    }

    /// The ids of the allocations.
    #[zbus(property)]
    fn allocations(&self) -> Vec<String> {
        self.shared.view(|v| v.manager.allocations.clone())
    }

    /// The host inventory as JSON (what `vgpud inventory --json` prints).
    async fn inventory_json(&self) -> Result<String, DbusError> {
        let inventory = self.shared.blocking(|s| s.host()).await?;
        to_json(&inventory)
    }

    /// The slices vgpud owns, as JSON (as `GET /v1/slices` shows them).
    /// Consumer and VM names need `io.vgpud.read-tenants` (root: always); else `(redacted)`.
    async fn slices_json(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, DbusError> {
        let slices = self.shared.blocking(|s| s.slices()).await?;
        let names = self.shared.may_read_tenants(conn, &header).await;
        let mut wire: Vec<_> = slices.iter().map(wire::slices::Slice::from).collect();
        if !names {
            wire.iter_mut().for_each(redact::slice);
        }
        to_json(&wire)
    }

    /// Every allocation, as JSON (as `GET /v1/allocations` shows them).
    /// Consumer and VM names need `io.vgpud.read-tenants` (root: always); else `(redacted)`.
    async fn allocations_json(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, DbusError> {
        let (allocations, slices) = self
            .shared
            .blocking(|s| {
                let allocations = s.allocations();
                let slices = s.slices_held(&allocations);
                (allocations, slices)
            })
            .await?;
        let mut wire: Vec<_> = allocations
            .iter()
            .map(|a| wire::slices::Allocation::new(a, &slices))
            .collect();
        if !self.shared.may_read_tenants(conn, &header).await {
            wire.iter_mut().for_each(redact::allocation);
        }
        to_json(&wire)
    }

    /// One allocation, as JSON (as `GET /v1/allocations/{id}` shows it).
    /// Consumer and VM names need `io.vgpud.read-tenants` (root: always); else `(redacted)`.
    async fn allocation_json(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        allocation: String,
    ) -> Result<String, DbusError> {
        let id = allocation_id(&allocation)?;
        let (allocation, slices) = self
            .shared
            .call(move |s| {
                let allocation = s.allocation(id)?;
                let slices = s.slices_held(std::slice::from_ref(&allocation));
                Ok((allocation, slices))
            })
            .await?;
        let mut wire = wire::slices::Allocation::new(&allocation, &slices);
        if !self.shared.may_read_tenants(conn, &header).await {
            redact::allocation(&mut wire);
        }
        to_json(&wire)
    }

    /// The declared layouts and each GPU's apply status, as JSON (as `GET /v1/layouts` shows
    /// them).
    async fn layouts_json(&self) -> Result<String, DbusError> {
        let view = self.shared.blocking(|s| s.layouts()).await?;
        to_json(&wire::layouts::LayoutsView::new(&view))
    }

    /// Creates a slice on `gpu` (a GPU's PCI address, or the name of an mdev parent that is not a
    /// PCI device, such as `mtty`). `backend` is `mdev`, `nvidia-vfio`, `sriov-vf`, `mig` or `passthrough`;
    /// `type` the mdev type id, vGPU type id or MIG profile (empty for the other two). Options:
    /// `start` (u, MIG placement, also of a MIG-backed vGPU type's GPU instance), `consumer` and `vm` (s, hand the slice over at once).
    /// Needs `io.vgpud.manage`.
    async fn create_slice(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        gpu: String,
        backend: String,
        r#type: String,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<OwnedObjectPath, DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let req = create_request(&gpu, &backend, &r#type, options)?;
        let slice = self.run(conn, move |s| s.create_slice(req)).await?;
        Ok(slice_path(&slice.id))
    }

    /// Destroys an owned, unallocated slice (by id). Needs `io.vgpud.manage`.
    async fn destroy_slice(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        slice: String,
    ) -> Result<(), DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let id = slice_id(&slice)?;
        self.run(conn, move |s| s.destroy_slice(id)).await
    }

    /// Allocates `count` slices of `type` (a MIG profile, mdev type id, vGPU type name or id,
    /// `vf` or `gpu`) to `consumer`, creating them if needed. Options: `vm`, `gpu` (a PCI
    /// address), `idempotency_key`, `numa_policy` (`required`, `preferred`, `none`),
    /// `placement_consumer` (a UUID) (all s), `vcpus` (u), `memory_mib` (t or u). Returns the
    /// allocation id and the slice objects.
    /// Needs `io.vgpud.manage`.
    #[zbus(out_args("allocation", "slices"))]
    async fn allocate(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        consumer: String,
        r#type: String,
        count: u32,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<(String, Vec<OwnedObjectPath>), DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let req = allocation_request(consumer, r#type, count, options)?;
        let allocation = self.run(conn, move |s| s.allocate(req)).await?;
        let paths = allocation.slices.iter().map(slice_path).collect();
        Ok((allocation.id.to_string(), paths))
    }

    /// Releases an allocation (its slices stay, free). Needs `io.vgpud.manage`.
    async fn release(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        allocation: String,
    ) -> Result<(), DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let id = allocation_id(&allocation)?;
        self.run(conn, move |s| s.release(id)).await
    }

    /// Replaces the declared layouts (a JSON array, as `PUT /v1/layouts` takes) and applies them;
    /// returns the layouts with each GPU's status as JSON. Needs `io.vgpud.layout`.
    async fn apply_layouts(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        layouts: String,
    ) -> Result<String, DbusError> {
        self.shared.authorize(conn, &header, Action::Layout).await?;
        let layouts = args::layouts(&layouts)?;
        // As REST's PUT /v1/layouts: the host's checks first, and the one apply slot (shared
        // with REST) held across the apply, so a concurrent apply from either side is `conflict`.
        let view = self
            .run(conn, move |s| {
                s.check_layouts(&layouts)?;
                let _claim = s.claim_apply(&format!("dbus-{}", uuid::Uuid::new_v4()))?;
                s.set_layouts(layouts)
            })
            .await?;
        to_json(&wire::layouts::LayoutsView::new(&view))
    }

    /// Imports a mig-parted config or mdevctl definitions: `request` is the JSON body of
    /// `POST /v1/layouts/import` (at most 1 MiB; `dry_run` only shows the diff); returns that
    /// route's answer as JSON. Needs `io.vgpud.layout`.
    async fn import_layouts(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        request: String,
    ) -> Result<String, DbusError> {
        self.shared.authorize(conn, &header, Action::Layout).await?;
        let req = args::import_request(&request)?;
        let source = req.to_engine()?;
        let dry_run = req.dry_run;
        let outcome = self
            .run(conn, move |s| {
                // Replacing the layouts takes the one apply slot, as ApplyLayouts does.
                let applies =
                    !dry_run && matches!(source, agent::engine::import::ImportSource::Layouts(_));
                let _claim = match applies {
                    true => Some(s.claim_apply(&format!("dbus-{}", uuid::Uuid::new_v4()))?),
                    false => None,
                };
                s.import_layouts(source, dry_run)
            })
            .await?;
        to_json(&crate::wire::import::ImportOutcome::new(&outcome))
    }

    /// Brings the host in line with the desired state now; returns the report as JSON. Needs
    /// `io.vgpud.manage`.
    async fn reconcile(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let report = self.run(conn, |s| s.reconcile()).await?;
        to_json(&report)
    }

    /// A slice was created (or re-created after the host lost it).
    #[zbus(signal)]
    pub(crate) async fn slice_created(
        emitter: &SignalEmitter<'_>,
        slice: ObjectPath<'_>,
        id: &str,
        gpu: &str,
        backend: &str,
    ) -> zbus::Result<()>;

    /// A slice was destroyed.
    #[zbus(signal)]
    pub(crate) async fn slice_destroyed(
        emitter: &SignalEmitter<'_>,
        slice: ObjectPath<'_>,
        id: &str,
        gpu: &str,
    ) -> zbus::Result<()>;

    /// Slices were allocated to a consumer.
    #[zbus(signal)]
    pub(crate) async fn allocation_created(
        emitter: &SignalEmitter<'_>,
        allocation: &str,
        consumer: &str,
        slices: Vec<OwnedObjectPath>,
    ) -> zbus::Result<()>;

    /// An allocation was released.
    #[zbus(signal)]
    pub(crate) async fn allocation_released(
        emitter: &SignalEmitter<'_>,
        allocation: &str,
    ) -> zbus::Result<()>;

    /// An owned slice was changed or removed behind vgpud's back.
    #[zbus(signal)]
    pub(crate) async fn drift(
        emitter: &SignalEmitter<'_>,
        slice: ObjectPath<'_>,
        id: &str,
        gpu: &str,
        reason: &str,
    ) -> zbus::Result<()>;

    /// A slice vgpud did not create was found (it is left alone).
    #[zbus(signal)]
    pub(crate) async fn foreign_found(
        emitter: &SignalEmitter<'_>,
        gpu: &str,
        slice: &str,
    ) -> zbus::Result<()>;

    /// A GPU's layout status changed (`applied`, `pending`, `failed`).
    #[zbus(signal)]
    pub(crate) async fn layout_status(
        emitter: &SignalEmitter<'_>,
        gpu: &str,
        state: &str,
        reasons: Vec<String>,
    ) -> zbus::Result<()>;

    /// A libvirt domain records vgpud pinning for an allocation, or slices of one, that no
    /// longer exist (left for the operator).
    #[zbus(signal)]
    pub(crate) async fn stale_vm_link(
        emitter: &SignalEmitter<'_>,
        domain: &str,
        allocation: &str,
        reason: &str,
    ) -> zbus::Result<()>;

    /// A GPU was quarantined (`source`: `auto` or `operator`): no new slices or allocations on
    /// it.
    #[zbus(signal)]
    pub(crate) async fn gpu_quarantined(
        emitter: &SignalEmitter<'_>,
        gpu: &str,
        reason: &str,
        source: &str,
    ) -> zbus::Result<()>;

    /// A quarantined GPU returned to service (`how`: `probe` or `operator`).
    #[zbus(signal)]
    pub(crate) async fn gpu_released(
        emitter: &SignalEmitter<'_>,
        gpu: &str,
        how: &str,
    ) -> zbus::Result<()>;

    /// A PCI device with owned slices left the bus: the slices are failed, their allocations
    /// kept.
    #[zbus(signal)]
    pub(crate) async fn device_removed(
        emitter: &SignalEmitter<'_>,
        device: &str,
        slices: Vec<OwnedObjectPath>,
        reason: &str,
    ) -> zbus::Result<()>;

    /// A PCI device with owned slices is back on the bus: its slices are being re-created.
    #[zbus(signal)]
    pub(crate) async fn device_added(
        emitter: &SignalEmitter<'_>,
        device: &str,
        slices: Vec<OwnedObjectPath>,
    ) -> zbus::Result<()>;

    /// A reconcile pass finished.
    #[zbus(signal)]
    pub(crate) async fn reconcile_done(
        emitter: &SignalEmitter<'_>,
        recreated: u32,
        intents_resolved: u32,
        failed: u32,
        foreign: u32,
    ) -> zbus::Result<()>;
}

/// `io.vgpud.Agent1.Gpu` at `/io/vgpud/Agent1/gpu/<address>`.
#[derive(Debug, Clone)]
pub(crate) struct GpuObject {
    shared: Arc<Shared>,
    address: PciAddress,
}

impl GpuObject {
    pub(crate) const NAME: &'static str = "io.vgpud.Agent1.Gpu";

    pub(crate) fn new(shared: Arc<Shared>, address: PciAddress) -> Self {
        Self { shared, address }
    }

    fn prop<T>(&self, f: impl FnOnce(&GpuProps) -> T) -> fdo::Result<T> {
        self.shared
            .view(|v| v.gpus.get(&self.address).map(f))
            .ok_or_else(|| fdo::Error::UnknownObject(format!("GPU {} is gone", self.address)))
    }
}

#[zbus::interface(name = "io.vgpud.Agent1.Gpu")]
impl GpuObject {
    /// The PCI address of the physical function.
    #[zbus(property)]
    fn address(&self) -> fdo::Result<String> {
        self.prop(|p| p.address.clone())
    }

    /// `nvidia`, `amd`, `intel` or `other`.
    #[zbus(property)]
    fn vendor(&self) -> fdo::Result<String> {
        self.prop(|p| p.vendor.clone())
    }

    /// The PCI vendor id.
    #[zbus(property)]
    fn vendor_id(&self) -> fdo::Result<String> {
        self.prop(|p| p.vendor_id.clone())
    }

    /// The PCI device id.
    #[zbus(property)]
    fn device_id(&self) -> fdo::Result<String> {
        self.prop(|p| p.device_id.clone())
    }

    /// The product name.
    #[zbus(property)]
    fn model(&self) -> fdo::Result<String> {
        self.prop(|p| p.model.clone())
    }

    /// The vendor's UUID (`GPU-…`), empty when unknown.
    #[zbus(property)]
    fn uuid(&self) -> fdo::Result<String> {
        self.prop(|p| p.uuid.clone())
    }

    /// The NUMA node, -1 when unknown.
    #[zbus(property)]
    fn numa_node(&self) -> fdo::Result<i32> {
        self.prop(|p| p.numa_node)
    }

    /// The IOMMU group, -1 without an IOMMU.
    #[zbus(property)]
    fn iommu_group(&self) -> fdo::Result<i32> {
        self.prop(|p| p.iommu_group)
    }

    /// Framebuffer memory in MiB, 0 when unknown.
    #[zbus(property)]
    fn memory_mib(&self) -> fdo::Result<u64> {
        self.prop(|p| p.memory_mib)
    }

    /// The kernel driver bound now, empty when none.
    #[zbus(property)]
    fn driver(&self) -> fdo::Result<String> {
        self.prop(|p| p.driver.clone())
    }

    /// Whether MIG mode is on.
    #[zbus(property)]
    fn mig_enabled(&self) -> fdo::Result<bool> {
        self.prop(|p| p.mig_enabled)
    }

    /// The slice objects on this GPU that vgpud owns.
    #[zbus(property)]
    fn slices(&self) -> fdo::Result<Vec<OwnedObjectPath>> {
        self.prop(|p| p.slices.clone())
    }

    /// Whether the GPU is quarantined (no new slices or allocations on it).
    #[zbus(property)]
    fn quarantined(&self) -> fdo::Result<bool> {
        self.prop(|p| p.quarantined)
    }

    /// Since when and why it is quarantined; empty when it is not.
    #[zbus(property)]
    fn quarantine_reason(&self) -> fdo::Result<String> {
        self.prop(|p| p.quarantine_reason.clone())
    }

    /// This GPU's inventory entry as JSON (read now: MIG profiles with how many more fit,
    /// mdev types with their available instances, VFs, slices whoever made them).
    async fn json(&self) -> Result<String, DbusError> {
        let address = self.address;
        let detail = self.shared.call(move |s| s.gpu(address)).await?;
        to_json(&wire::inventory::GpuDetail::from(&detail))
    }

    /// Quarantines this GPU by hand (as `POST /v1/gpus/{id}/quarantine`): no new slices or
    /// allocations on it until an operator releases it. Returns the quarantine as JSON. Needs
    /// `io.vgpud.manage`.
    async fn quarantine(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        reason: String,
    ) -> Result<String, DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let req = wire::health::QuarantineRequest { reason };
        let reason = req.reason()?.to_owned();
        let address = self.address;
        let record = run(&self.shared, conn, move |s| {
            s.quarantine_gpu(address, &reason)
        })
        .await?;
        to_json(&wire::health::Quarantine::from(&record))
    }

    /// Returns this quarantined GPU to service (as `POST /v1/gpus/{id}/release`); returns the
    /// quarantine that ended as JSON. Needs `io.vgpud.manage`.
    async fn release(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let address = self.address;
        let record = run(&self.shared, conn, move |s| s.release_gpu(address)).await?;
        to_json(&wire::health::Quarantine::from(&record))
    }
}

/// `io.vgpud.Agent1.Slice` at `/io/vgpud/Agent1/slice/<id>`.
#[derive(Debug, Clone)]
pub(crate) struct SliceObject {
    shared: Arc<Shared>,
    id: SliceId,
}

impl SliceObject {
    pub(crate) const NAME: &'static str = "io.vgpud.Agent1.Slice";

    pub(crate) fn new(shared: Arc<Shared>, id: SliceId) -> Self {
        Self { shared, id }
    }

    fn prop<T>(&self, f: impl FnOnce(&SliceProps) -> T) -> fdo::Result<T> {
        self.shared
            .view(|v| v.slices.get(&self.id).map(f))
            .ok_or_else(|| fdo::Error::UnknownObject(format!("slice {} is gone", self.id)))
    }
}

#[zbus::interface(name = "io.vgpud.Agent1.Slice")]
impl SliceObject {
    /// The slice id (a UUID, stable across re-creations).
    #[zbus(property)]
    fn id(&self) -> fdo::Result<String> {
        self.prop(|p| p.id.clone())
    }

    /// The GPU object.
    #[zbus(property)]
    fn gpu(&self) -> fdo::Result<OwnedObjectPath> {
        self.prop(|p| p.gpu.clone())
    }

    /// The GPU's PCI address.
    #[zbus(property)]
    fn gpu_address(&self) -> fdo::Result<String> {
        self.prop(|p| p.gpu_address.clone())
    }

    /// `mdev`, `nvidia-vfio`, `sriov-vf`, `mig` or `passthrough`.
    #[zbus(property)]
    fn backend(&self) -> fdo::Result<String> {
        self.prop(|p| p.backend.clone())
    }

    /// The type as an allocation request names it (`3g.40gb`, `nvidia-222`, `vf`, `gpu`).
    #[zbus(property, name = "Type")]
    fn slice_type(&self) -> fdo::Result<String> {
        self.prop(|p| p.slice_type.clone())
    }

    /// `creating`, `ready`, `allocated`, `releasing` or `failed`.
    #[zbus(property)]
    fn state(&self) -> fdo::Result<String> {
        self.prop(|p| p.state.clone())
    }

    /// Why the slice is in its state, when that is not obvious; empty otherwise.
    #[zbus(property)]
    fn reason(&self) -> fdo::Result<String> {
        self.prop(|p| p.reason.clone())
    }

    /// The GPU's NUMA node, -1 when unknown.
    #[zbus(property)]
    fn numa_node(&self) -> fdo::Result<i32> {
        self.prop(|p| p.numa_node)
    }

    /// The mdev UUID, for an mdev; empty otherwise.
    #[zbus(property)]
    fn mdev_uuid(&self) -> fdo::Result<String> {
        self.prop(|p| p.mdev_uuid.clone())
    }

    /// The PCI function handed to a VM (a VF, or the GPU itself); empty otherwise.
    #[zbus(property)]
    fn pci_address(&self) -> fdo::Result<String> {
        self.prop(|p| p.pci_address.clone())
    }

    /// The IOMMU group (`/dev/vfio/<n>`), -1 when none.
    #[zbus(property)]
    fn vfio_group(&self) -> fdo::Result<i32> {
        self.prop(|p| p.vfio_group)
    }

    /// The consumer holding the slice; empty when free.
    #[zbus(property)]
    fn consumer(&self) -> fdo::Result<String> {
        self.prop(|p| p.consumer.clone())
    }

    /// The VM holding the slice; empty when free or not given.
    #[zbus(property)]
    fn vm(&self) -> fdo::Result<String> {
        self.prop(|p| p.vm.clone())
    }

    /// The allocation holding the slice; empty when free.
    #[zbus(property)]
    fn allocation(&self) -> fdo::Result<String> {
        self.prop(|p| p.allocation.clone())
    }

    /// The slice as JSON (as `GET /v1/slices/{id}` shows it), read now. Consumer and VM names
    /// need `io.vgpud.read-tenants` (root: always); else `(redacted)`.
    async fn json(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, DbusError> {
        let id = self.id;
        let slice = self.shared.call(move |s| s.slice(id)).await?;
        let mut wire = wire::slices::Slice::from(&slice);
        if !self.shared.may_read_tenants(conn, &header).await {
            redact::slice(&mut wire);
        }
        to_json(&wire)
    }

    /// Destroys the slice (it must be free). Needs `io.vgpud.manage`.
    async fn destroy(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), DbusError> {
        self.shared.authorize(conn, &header, Action::Manage).await?;
        let id = self.id;
        run(&self.shared, conn, move |s| s.destroy_slice(id)).await
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<String, DbusError> {
    serde_json::to_string(value).map_err(|e| DbusError::failed(format!("JSON encoding: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The property names in an interface's introspection data.
    fn served(iface: &dyn zbus::object_server::Interface) -> Vec<String> {
        let mut xml = String::new();
        iface.introspect_to_writer(&mut xml, 0);
        let mut names: Vec<String> = xml
            .split("<property name=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    }

    fn sorted(names: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_announced_properties_are_the_served_ones() {
        use super::super::view::ManagerProps;
        let dir = tempfile::tempdir().unwrap();
        let sim = testkit::sim("single-gpu");
        let engine = testkit::engine_with(&sim, dir.path(), std::time::Duration::from_secs(10));
        let shared = Arc::new(Shared::new(
            agent::service::Service::new(engine),
            super::super::DbusOptions::default(),
        ));
        let mut manager = served(&ManagerObject::new(shared.clone()));
        manager.retain(|n| n != "Version"); // constant, never announced
        assert_eq!(manager, sorted(ManagerProps::NAMES));
        let gpu = GpuObject::new(shared.clone(), "0000:01:00.0".parse().unwrap());
        assert_eq!(served(&gpu), sorted(GpuProps::NAMES));
        let slice = SliceObject::new(shared, SliceId::new_random());
        assert_eq!(served(&slice), sorted(SliceProps::NAMES));
    }

    #[test]
    fn interface_names_match_the_constants() {
        use zbus::object_server::Interface;
        assert_eq!(ManagerObject::name().as_str(), ManagerObject::NAME);
        assert_eq!(GpuObject::name().as_str(), GpuObject::NAME);
        assert_eq!(SliceObject::name().as_str(), SliceObject::NAME);
    }
}
