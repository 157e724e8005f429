//! The exported objects: the manager, one object per GPU and one per slice.
//!
//! Each object is a handle (the shared state and a key); properties come from the last
//! published view, methods call the service through `spawn_blocking`. Mutating methods ask
//! polkit first and sync the objects before replying.

use std::collections::HashMap;
use std::sync::Arc;

use agent::engine::{
    AllocationId, AllocationRequest, CreateSlice, DeviceRef, Layout, NumaPolicy, OwnerRequest,
    SliceId, SliceKind, SliceRequest, SliceSpec,
};
use ids::PciAddress;
use serde::Serialize;
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::wire::ObjectPath;
use zbus::{Connection, OwnedObjectPath, OwnedVariant, fdo};

use super::error::DbusError;
use super::paths::slice_path;
use super::polkit::Action;
use super::sync::Shared;
use super::view::{GpuProps, SliceProps};

/// The largest layouts document `ApplyLayouts` accepts, bytes.
pub const MAX_LAYOUTS_JSON: usize = 1 << 20;

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

    /// The slices vgpud owns, as JSON (the REST API's form).
    async fn slices_json(&self) -> Result<String, DbusError> {
        to_json(&self.shared.blocking(|s| s.slices()).await?)
    }

    /// Every allocation, as JSON.
    async fn allocations_json(&self) -> Result<String, DbusError> {
        to_json(&self.shared.blocking(|s| s.allocations()).await?)
    }

    /// One allocation, as JSON.
    async fn allocation_json(&self, allocation: String) -> Result<String, DbusError> {
        let id = parse_allocation(&allocation)?;
        to_json(&self.shared.call(move |s| s.allocation(id)).await?)
    }

    /// The declared layouts and each GPU's apply status, as JSON.
    async fn layouts_json(&self) -> Result<String, DbusError> {
        to_json(&self.shared.blocking(|s| s.layouts()).await?)
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
        let id = parse_slice(&slice)?;
        self.run(conn, move |s| s.destroy_slice(id)).await
    }

    /// Allocates `count` slices of `type` (a MIG profile, mdev type id, vGPU type name or id,
    /// `vf` or `gpu`) to `consumer`, creating them if needed. Options: `vm`, `gpu` (a PCI
    /// address), `idempotency_key`, `numa_policy` (`required`, `preferred`, `none`) (all s),
    /// `vcpus` (u), `memory_mib` (t or u). Returns the allocation id and the slice objects.
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
        let id = parse_allocation(&allocation)?;
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
        if layouts.len() > MAX_LAYOUTS_JSON {
            return Err(DbusError::invalid(format!(
                "the layouts document is {} bytes; at most {MAX_LAYOUTS_JSON} are accepted",
                layouts.len()
            )));
        }
        let layouts: Vec<Layout> = serde_json::from_str(&layouts)
            .map_err(|e| DbusError::invalid(format!("invalid layouts document: {e}")))?;
        let view = self.run(conn, move |s| s.set_layouts(layouts)).await?;
        to_json(&view)
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
        use crate::wire::import::{ImportOutcome, ImportRequest};
        self.shared.authorize(conn, &header, Action::Layout).await?;
        if request.len() > MAX_LAYOUTS_JSON {
            return Err(DbusError::invalid(format!(
                "the import request is {} bytes; at most {MAX_LAYOUTS_JSON} are accepted",
                request.len()
            )));
        }
        let req: ImportRequest = serde_json::from_str(&request)
            .map_err(|e| DbusError::invalid(format!("invalid import request: {e}")))?;
        let source = req.to_engine().map_err(|e| match e {
            crate::error::ApiError::Engine(e) => DbusError::from(e),
            other => DbusError::invalid(other.to_string()),
        })?;
        let dry_run = req.dry_run;
        let outcome = self
            .run(conn, move |s| s.import_layouts(source, dry_run))
            .await?;
        to_json(&ImportOutcome::new(&outcome))
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

    /// This GPU's inventory entry as JSON (read now: MIG profiles with how many more fit,
    /// mdev types with their available instances, VFs, slices whoever made them).
    async fn json(&self) -> Result<String, DbusError> {
        let address = self.address;
        to_json(&self.shared.call(move |s| s.gpu(address)).await?)
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

    /// The slice as JSON (the REST API's form), read now.
    async fn json(&self) -> Result<String, DbusError> {
        let id = self.id;
        to_json(&self.shared.call(move |s| s.slice(id)).await?)
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

fn parse_slice(text: &str) -> Result<SliceId, DbusError> {
    text.parse().map_err(DbusError::invalid)
}

fn parse_allocation(text: &str) -> Result<AllocationId, DbusError> {
    text.parse().map_err(DbusError::invalid)
}

fn parse_gpu(text: &str) -> Result<PciAddress, DbusError> {
    text.parse()
        .map_err(|e: ids::IdError| DbusError::invalid(e.to_string()))
}

/// An `a{sv}` options argument: each key taken once, with its type checked; keys left over are
/// refused, so a misspelt option is an error rather than silently ignored.
struct Options(HashMap<String, OwnedVariant>);

impl Options {
    fn string(&mut self, key: &str) -> Result<Option<String>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                String::try_from(v)
                    .map_err(|_| DbusError::invalid(format!("option {key:?} must be a string (s)")))
            })
            .transpose()
    }

    fn u32(&mut self, key: &str) -> Result<Option<u32>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    DbusError::invalid(format!("option {key:?} must be an unsigned integer (u)"))
                })
            })
            .transpose()
    }

    fn u64(&mut self, key: &str) -> Result<Option<u64>, DbusError> {
        self.0
            .remove(key)
            .map(|v| {
                // A small number typed by hand arrives as `u`; accept it as well as `t`.
                let value = v.clone();
                u64::try_from(v)
                    .or_else(|_| u32::try_from(value).map(u64::from))
                    .map_err(|_| {
                        DbusError::invalid(format!(
                            "option {key:?} must be an unsigned integer (t or u)"
                        ))
                    })
            })
            .transpose()
    }

    fn finish(self, allowed: &str) -> Result<(), DbusError> {
        let mut unknown: Vec<&String> = self.0.keys().collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort();
        let shown: Vec<String> = unknown
            .iter()
            .take(4)
            .map(|k| format!("{:?}", k.chars().take(64).collect::<String>()))
            .collect();
        Err(DbusError::invalid(format!(
            "unknown option(s) {}; allowed: {allowed}",
            shown.join(", ")
        )))
    }
}

fn create_request(
    gpu: &str,
    backend: &str,
    slice_type: &str,
    options: HashMap<String, OwnedVariant>,
) -> Result<CreateSlice, DbusError> {
    let mut options = Options(options);
    // A GPU by PCI address, or a virtual mdev parent (`mtty`) by name.
    let gpu: DeviceRef = gpu.parse().map_err(DbusError::invalid)?;
    let start = options.u32("start")?;
    let consumer = options.string("consumer")?;
    let vm = options.string("vm")?;
    options.finish("start, consumer, vm")?;
    let needs_type = |what: &str| -> Result<(), DbusError> {
        if slice_type.is_empty() {
            Err(DbusError::invalid(format!(
                "backend {backend:?} needs a type ({what})"
            )))
        } else {
            Ok(())
        }
    };
    let no_type = || -> Result<(), DbusError> {
        if slice_type.is_empty() {
            Ok(())
        } else {
            Err(DbusError::invalid(format!(
                "backend {backend:?} takes no type; pass an empty string"
            )))
        }
    };
    let invalid = |e: ids::IdError| DbusError::invalid(e.to_string());
    let kind = match backend {
        "mdev" => {
            needs_type("an mdev type id such as nvidia-222")?;
            SliceKind::Mdev {
                type_id: slice_type.parse().map_err(invalid)?,
            }
        }
        "nvidia-vfio" => {
            needs_type("a vGPU type id")?;
            SliceKind::NvidiaVfio {
                vgpu_type: slice_type.parse().map_err(invalid)?,
                start,
            }
        }
        "mig" => {
            needs_type("a MIG profile such as 3g.40gb")?;
            SliceKind::Mig {
                profile: slice_type.parse().map_err(invalid)?,
                start,
            }
        }
        "sriov-vf" => {
            no_type()?;
            SliceKind::SriovVf
        }
        "passthrough" => {
            no_type()?;
            SliceKind::Passthrough
        }
        other => {
            let shown: String = other.chars().take(64).collect();
            return Err(DbusError::invalid(format!(
                "unknown backend {shown:?}: use mdev, nvidia-vfio, sriov-vf, mig or passthrough"
            )));
        }
    };
    if start.is_some() && !matches!(kind, SliceKind::Mig { .. } | SliceKind::NvidiaVfio { .. }) {
        return Err(DbusError::invalid(
            "option \"start\" is for MIG slices and MIG-backed vGPU types only",
        ));
    }
    let owner = match (consumer, vm) {
        (Some(consumer), vm) => Some(OwnerRequest { consumer, vm }),
        (None, None) => None,
        (None, Some(_)) => {
            return Err(DbusError::invalid(
                "option \"vm\" needs option \"consumer\" too",
            ));
        }
    };
    Ok(CreateSlice {
        spec: SliceSpec { gpu, kind },
        owner,
    })
}

fn allocation_request(
    consumer: String,
    slice_type: String,
    count: u32,
    options: HashMap<String, OwnedVariant>,
) -> Result<AllocationRequest, DbusError> {
    let mut options = Options(options);
    let vm = options.string("vm")?;
    let gpu = options.string("gpu")?.map(|g| parse_gpu(&g)).transpose()?;
    let idempotency_key = options.string("idempotency_key")?;
    let numa_policy = options
        .string("numa_policy")?
        .map(|p| parse_numa_policy(&p))
        .transpose()?;
    let vcpus = options.u32("vcpus")?;
    let memory_mib = options.u64("memory_mib")?;
    options.finish("vm, gpu, idempotency_key, numa_policy, vcpus, memory_mib")?;
    let mut request = SliceRequest::new(slice_type, count);
    request.gpu = gpu;
    request.idempotency_key = idempotency_key;
    request.numa_policy = numa_policy;
    request.vcpus = vcpus;
    request.memory_mib = memory_mib;
    Ok(AllocationRequest {
        consumer,
        vm,
        request,
    })
}

/// A NUMA policy by its JSON name, so D-Bus and REST accept the same words.
fn parse_numa_policy(text: &str) -> Result<NumaPolicy, DbusError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        let shown: String = text.chars().take(64).collect();
        DbusError::invalid(format!(
            "unknown numa_policy {shown:?}: use required, preferred or none"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Variant;

    fn opts(pairs: &[(&str, Variant<'static>)]) -> HashMap<String, OwnedVariant> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OwnedVariant::try_from(v.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn create_requests_name_a_gpu_or_a_virtual_mdev_parent() {
        let on_parent = create_request("mtty", "mdev", "mtty-2", opts(&[])).unwrap();
        assert_eq!(
            on_parent.spec.gpu,
            DeviceRef::MdevParent("mtty".parse().unwrap())
        );
        let mig_vgpu = create_request(
            "0000:07:00.0",
            "nvidia-vfio",
            "1414",
            opts(&[("start", Variant::from(2u32))]),
        )
        .unwrap();
        assert_eq!(mig_vgpu.spec.kind.start(), Some(2));
        let on_gpu = create_request("0000:07:00.0", "sriov-vf", "", opts(&[])).unwrap();
        assert_eq!(on_gpu.spec.gpu.pci(), Some("0000:07:00.0".parse().unwrap()));
        for bad in ["../mtty", "mt ty", ""] {
            let err = create_request(bad, "mdev", "mtty-2", opts(&[])).unwrap_err();
            assert!(
                format!("{err:?}").contains("mdev parent"),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn create_requests_are_typed_and_checked() {
        let req = create_request(
            "0000:07:00.0",
            "mig",
            "3g.40gb",
            opts(&[
                ("start", Variant::from(4u32)),
                ("consumer", Variant::from("nova")),
            ]),
        )
        .unwrap();
        assert_eq!(
            req.spec.kind,
            SliceKind::Mig {
                profile: "3g.40gb".parse().unwrap(),
                start: Some(4)
            }
        );
        assert_eq!(req.owner.unwrap().consumer, "nova");
        let vf = create_request("0000:07:00.0", "sriov-vf", "", HashMap::new()).unwrap();
        assert_eq!(vf.spec.kind, SliceKind::SriovVf);
        let bad = [
            create_request("0000:07:00", "mig", "3g.40gb", HashMap::new()),
            create_request("0000:07:00.0", "warp", "x", HashMap::new()),
            create_request("0000:07:00.0", "mdev", "", HashMap::new()),
            create_request("0000:07:00.0", "mdev", "../x", HashMap::new()),
            create_request("0000:07:00.0", "sriov-vf", "3g.40gb", HashMap::new()),
            create_request(
                "0000:07:00.0",
                "mdev",
                "nvidia-222",
                opts(&[("start", Variant::from(1u32))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("start", Variant::from("4"))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("vm", Variant::from("vm1"))]),
            ),
            create_request(
                "0000:07:00.0",
                "mig",
                "3g.40gb",
                opts(&[("stat", Variant::from(1u32))]),
            ),
        ];
        for (i, r) in bad.into_iter().enumerate() {
            let e = r.unwrap_err();
            assert_eq!(
                e.error_name(),
                "io.vgpud.Agent1.Error.InvalidRequest",
                "case {i}: {e}"
            );
        }
    }

    #[test]
    fn allocation_requests_take_known_options_only() {
        let req = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            2,
            opts(&[
                ("vm", Variant::from("vm-1")),
                ("gpu", Variant::from("0000:07:00.0")),
                ("idempotency_key", Variant::from("k")),
                ("numa_policy", Variant::from("required")),
                ("vcpus", Variant::from(8u32)),
                ("memory_mib", Variant::from(4096u32)),
            ]),
        )
        .unwrap();
        assert_eq!(req.vm.as_deref(), Some("vm-1"));
        assert_eq!(req.request.count, 2);
        assert_eq!(req.request.gpu, Some("0000:07:00.0".parse().unwrap()));
        assert_eq!(req.request.numa_policy, Some(NumaPolicy::Required));
        assert_eq!(req.request.vcpus, Some(8));
        assert_eq!(req.request.memory_mib, Some(4096));
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("numa_policy", Variant::from("strict"))]),
        )
        .unwrap_err();
        assert!(e.message().contains("numa_policy"), "{e}");
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("numa", Variant::from(1u32))]),
        )
        .unwrap_err();
        assert!(e.message().contains("\"numa\""), "{e}");
        let e = allocation_request(
            "nova".into(),
            "1g.10gb".into(),
            1,
            opts(&[("gpu", Variant::from("../../sys"))]),
        )
        .unwrap_err();
        assert_eq!(e.error_name(), "io.vgpud.Agent1.Error.InvalidRequest");
    }

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
        let sim = sim::SimHost::new(sim::Profile::builtin("single-gpu").unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = agent::engine::Engine::open(agent::engine::EngineConfig::new(
            dir.path(),
            agent::host::sim_access(&sim),
        ))
        .unwrap();
        let shared = Arc::new(Shared::new(
            agent::service::Service::new(engine),
            super::super::polkit::PolkitTimeouts::default(),
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
