//! OpenStack Placement: keeping Placement's view of this host true.
//!
//! The reporter keeps, in Placement, one provider per physical GPU under the compute node's
//! root provider (optionally under one provider per NUMA node), each with inventories that
//! never promise more than vgpud can make, traits saying what the GPU is and can do, and
//! `reserved` covering what Placement cannot see being used (a quarantined GPU: everything).
//!
//! The rule: never touch what another service owns. The root provider and its inventories and
//! traits are Nova's; a child with vgpud's name but without [`traits::OWNER_TRAIT`] is someone
//! else's (Nova's libvirt driver makes the same names) and is left alone, reported as a
//! conflict. vgpud writes only providers carrying its owner trait.
//!
//! [`desired`] computes the tree from the engine alone (no HTTP); [`names`], [`classes`] and
//! [`traits`] are Nova's and vgpud's naming rules; [`settings`] is `[placement]` parsed.
//! [`sync`] writes the difference to Placement, [`reporter`] runs it on changes and
//! periodically, with the standing in [`status`]. [`consumer`] checks the allocation an
//! upstream scheduler claimed for a request; [`audit`] compares vgpud's allocations with
//! Placement's.

pub mod allocations;
pub mod audit;
pub mod classes;
pub mod consumer;
pub mod desired;
pub mod names;
pub mod reporter;
pub mod settings;
pub mod status;
pub mod sync;
pub mod traits;

pub use desired::{
    DesiredGpu, DesiredNuma, DesiredTree, GpuFacts, HostFacts, desired_from, desired_tree,
};
pub use settings::{AuthSettings, KeystoneSettings, PlacementSettings, Secret};
