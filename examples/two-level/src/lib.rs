//! Two-level scheduling over OpenStack Placement and vgpud (issue 16, item 5).
//!
//! A global scheduler in the style of Nova's ([`scheduler`]): for a request it asks Placement
//! for allocation candidates (`GET /allocation_candidates`), groups them by root provider (the
//! host, [`candidates`]), asks each candidate host's vgpud for its placement score (the REST
//! dry run, [`host`]) and takes the best; it claims the chosen candidate in Placement
//! (`PUT /allocations/{consumer}`, consumer type `INSTANCE`), then allocates on that host's
//! vgpud with the consumer UUID as `placement_consumer`. A vgpud that refuses gets the claim
//! deleted and the next candidate is tried. The policy "first candidate" is Nova without
//! weighers: Placement's first candidate host, no score call.
//!
//! The fleet benchmark ([`fleet`]) starts simulated hosts reporting to one Placement and
//! places a workload from the openb pod list, whose GPU requests become slice requests as
//! [`workload`] describes:
//! - whole GPUs → `gpu` (resource class `PGPU`), count `num_gpu` (several: one isolated
//!   request group per GPU);
//! - a share of a GPU (`gpu_milli` < 1000) → on each GPU kind of the fleet, the smallest slice
//!   at or above the share: the nearest MIG profile (compute slices over seven) on MIG hosts,
//!   the nearest vGPU type (one over its instances per GPU) on vGPU hosts; a share no slice
//!   holds takes a whole GPU.

pub mod candidates;
pub mod classes;
pub mod fleet;
pub mod host;
pub mod scheduler;
pub mod workload;
