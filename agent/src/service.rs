//! The one internal service interface of vgpud. REST, D-Bus and the CLI are thin adapters over
//! [`Service`]: they translate wire formats and errors, nothing more. Every method blocks (sysfs,
//! vendor calls, fsync, libvirt); async callers use `spawn_blocking`.
//!
//! The service joins the slice engine with what sits beside it: the scheduler's view of the host
//! and VM pinning through libvirt.

use ids::PciAddress;
use inventory::HostInventory;
use tokio::sync::broadcast;

use crate::engine::{
    Allocation, AllocationId, AllocationRequest, CreateSlice, Engine, EngineError, Event, Layout,
    LayoutsView, ReconcileReport, Slice, SliceId,
};

/// Result of a service call; errors carry stable machine codes ([`EngineError::code`]).
pub type Result<T> = std::result::Result<T, EngineError>;

/// The agent's operations, as every front end sees them.
#[derive(Debug, Clone)]
pub struct Service {
    engine: Engine,
}

impl Service {
    /// A service over an open engine.
    pub fn new(engine: Engine) -> Self {
        Self { engine }
    }

    /// The engine underneath (for the daemon's own housekeeping: reconcile loop, shutdown).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The host: NUMA nodes, GPUs with their slicing capabilities and slices, PCI functions.
    pub fn host(&self) -> HostInventory {
        self.engine.inventory()
    }

    /// One GPU of the inventory.
    pub fn gpu(&self, address: PciAddress) -> Result<inventory::Gpu> {
        self.host()
            .gpus
            .into_iter()
            .find(|g| g.pci_address == address)
            .ok_or_else(|| EngineError::NotFound(format!("GPU {address}")))
    }

    /// Slices vgpud owns.
    pub fn slices(&self) -> Vec<Slice> {
        self.engine.slices()
    }

    /// One owned slice.
    pub fn slice(&self, id: SliceId) -> Result<Slice> {
        self.engine.slice(id)
    }

    /// Creates a slice (explicit GPU, type and optional placement).
    pub fn create_slice(&self, req: CreateSlice) -> Result<Slice> {
        self.engine.create_slice(req)
    }

    /// Destroys an owned, unallocated slice.
    pub fn destroy_slice(&self, id: SliceId) -> Result<()> {
        self.engine.destroy_slice(id)
    }

    /// Allocates slices to a consumer (and VM).
    pub fn allocate(&self, req: AllocationRequest) -> Result<Allocation> {
        self.engine.allocate(req)
    }

    /// Releases an allocation.
    pub fn release(&self, id: AllocationId) -> Result<()> {
        self.engine.release(id)
    }

    /// Every allocation.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.engine.allocations()
    }

    /// One allocation.
    pub fn allocation(&self, id: AllocationId) -> Result<Allocation> {
        self.engine.allocation(id)
    }

    /// Declared layouts with their apply status per GPU.
    pub fn layouts(&self) -> LayoutsView {
        self.engine.layouts()
    }

    /// Replaces the declared layouts and applies them (diff-based; allocated slices stay).
    pub fn set_layouts(&self, layouts: Vec<Layout>) -> Result<LayoutsView> {
        self.engine.set_layouts(layouts)
    }

    /// Brings the host in line with the desired state.
    pub fn reconcile(&self) -> Result<ReconcileReport> {
        self.engine.reconcile()
    }

    /// Slice, allocation, drift, layout and health events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.engine.subscribe()
    }
}
