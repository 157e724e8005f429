//! The slice engine: creates, keeps and hands out GPU slices, whatever happens.
//!
//! The engine is the only place with policy and state. It composes the primitive host
//! operations of `vfio`, `mdev` and `gpu` through one [`backend`] per slicing mechanism, keeps
//! what cannot be read back from the host (the ownership ledger, allocations, layouts, intents of
//! operations in flight) in a crash-safe [`store`], and reconciles the two ([`Engine::reconcile`]).
//! Operations on one GPU are serialised, different GPUs proceed in parallel; the kernel's or
//! NVML's answer is the commit point and state is re-read after every mutation. The design,
//! with the state machine, store format, intent protocol and error codes, is in
//! `docs/engine.md`.
//!
//! It must not parse HTTP or D-Bus (front ends adapt [`Engine`]'s API), and it never touches a
//! slice it did not create.

mod alloc;
mod backend;
mod candidates_cache;
mod capacity;
mod claim;
mod demand_mix;
mod dry_run;
mod error;
mod events;
mod gather;
mod gpu_detail;
mod handle;
mod health_access;
mod hold;
mod host_changes;
pub mod import;
mod inventory_cache;
mod kept_geometry;
mod kept_map;
pub mod layout;
mod layout_apply;
mod layout_mig_mode;
mod layout_partition;
pub mod limits;
mod locks;
mod marked;
mod marks;
mod mig_geometry;
pub mod model;
mod observation_cache;
mod ops;
mod placement_view;
mod presence;
mod quarantine;
pub mod quarantine_record;
mod reconcile;
mod recover;
pub mod reports;
mod resolve;
mod scheduling;
mod snapshot;
mod sriov_recovery;
mod state;
mod state_check;
mod telemetry_read;
mod timed_host;
mod vendor;
mod vfs;
mod view;
mod warm_pool;

pub use alloc::Finish;
pub use capacity::{GpuCapacity, TypeCapacity};
pub use demand_mix::{DemandMix, slice_name};
pub use error::{EngineError, Result};
pub use events::Event;
pub use handle::{Engine, EngineConfig};
pub use inventory_cache::MAX_AGE as INVENTORY_MAX_AGE;
pub use layout::{
    AmdPartition, GpuLayoutStatus, GpuSelector, Layout, LayoutEntry, LayoutState, LayoutsView,
};
pub use model::*;
pub use placement_view::Holdings;
pub use presence::DeviceChange;
pub use quarantine::{Quarantined, check_reason};
pub use reconcile::{ReconcileReport, StaleVmLink};
pub use recover::{AdoptedSlice, RecoveryReport};
pub use reports::{GpuDetail, GpuHealth, GpuUtilization, PlacementScore, SliceCapacity};
pub use scheduling::Scheduling;
pub use telemetry_read::GpuReading;

/// Where the desired state lives unless configured otherwise.
pub const DEFAULT_STATE_DIR: &str = store::DEFAULT_DIR;
