//! The local affinity scheduler: where a GPU slice request goes on one host.
//!
//! This crate owns pure placement decisions from a capacity [`Snapshot`] and a [`Request`]. It
//! must not do I/O or touch the host: the engine builds the snapshot from the inventory, calls
//! [`decide`], creates the slices, and re-reads the host. It is also the per-host half of a
//! two-level scheduler: [`host_score`] tells an upstream scheduler (OpenStack Placement's
//! weigher, a cluster simulator) how well this host would take a request.
//!
//! # Using it from the engine
//! - `decide(&snapshot, &request, &Policy::default())` → `Ok(Decision)` with the GPU(s), the
//!   slice on each (MIG profile and start slot, vGPU type, mdev type, VF, whole GPU, share), the
//!   NUMA node for the VM's memory and the CPUs to pin; or `Err(Rejection)` with the reason and
//!   why each GPU was left out. Both carry an [`Explanation`] listing every candidate with its
//!   score components.
//! - `host_score(&snapshot, &request, &policy)` → a scalar for choosing between hosts.
//! - `defrag_advice(&snapshot, &request, &policy, allow_busy)` → for a rejected request, the
//!   cheapest re-layout of idle slices (or, if allowed, of named VMs' slices) that makes room.
//! - [`Snapshot::commit`] / [`Snapshot::release`] keep a snapshot current between re-reads.
//!
//! # Policies
//! - `first-fit`: the first GPU in snapshot order and its lowest free start slot.
//! - `best-fit`: the GPU left with the least free capacity.
//! - `spread`: the source design's `0.7 × (1 − occupancy) + 0.3 × locality`, highest wins
//!   (weights configurable). It is worst-fit: kept so operators can compare.
//! - `vgpud` (the default, [`Policy::FragAware`]), described next.
//!
//! # The default algorithm
//! 1. **Filter** GPUs: healthy, vendor and model accepted, hard affinity and anti-affinity
//!    rules kept, and at least one slice of the requested kind creatable now. The slice kinds
//!    follow the hardware rules: MIG instances only at their profile's start slots, without
//!    overlap, within 7 compute slices and the per-profile count; vendor-VFIO vGPUs only of the
//!    type already on the GPU (one size per GPU) and within its instance count and free VFs; a
//!    generic size maps to the smallest slice the host offers that holds it.
//! 2. **Candidates**: every (GPU, slot) for one slice; for `count` > 1 one GPU set per seed GPU,
//!    filled with NVLink peers first (all pairs linked when NVLink is required), then GPUs on
//!    the seed's NUMA node, then the fullest.
//! 3. **NUMA**: the VM's CPUs and memory go to the GPUs' NUMA node when it has room; with
//!    `required` a candidate without room there is dropped; with `preferred`/`none` another node
//!    is used and the candidate is marked non-local.
//! 4. **Rank**, lexicographically: NUMA-local before non-local (a hard preference: a non-local
//!    candidate wins only when no local one exists); fewer broken soft rules (soft affinity,
//!    NVLink preferred); least **expected waste added**; least **expected fragmentation
//!    added**; least free capacity left on the chosen GPU(s) (best fit, so whole GPUs stay
//!    whole); the **oldest neighbour** (see below); lowest telemetry utilisation; snapshot order.
//!
//! Expected waste (the `waste` module) is the free capacity the host will most likely never
//! allocate: on each fractional GPU, what is left after the best packing of the workload's
//! *common* sizes (whole GPUs, and the shares holding at least [`COMMON_SHARE`] of the capacity
//! its sub-GPU requests ask for) into its free capacity, plus [`STRANDED_WEIGHT`] × the fillable capacity its NUMA node's free CPUs could not
//! feed at the workload's CPU per GPU. Fragmentation looks one request ahead ("which shapes
//! could not use this remainder now?"); waste looks at the end state ("will anything common
//! ever fill it?"), which is what decides how much of a busy host is used. A 0.81 share on an
//! empty GPU adds 0.19 GPU of waste wherever it goes, but a 0.32 share added to a 0.47 one (0.21
//! left, which only rare shares fit) adds 0.15 where two 0.32 shares together (0.36 left, one
//! more 0.32 fits) add nothing. Rare sizes are left out because a size that arrives for one
//! remainder in ten cannot be counted on for all of them: on the openb trace counting the 0.16
//! share made every 0.81 share look harmless and cost 1.9 points. Waste is compared first
//! because on the openb replay it is worth 0.7 points of capacity over fragmentation alone
//! (4.46 % → 3.75 % unallocated, see BENCHMARKS.md); fragmentation still orders what waste
//! leaves equal, which is most choices while a host has room (then nothing is wasted yet).
//! When shares are what opens empty GPUs (at least 95 %, `SHARE_MIX_MIN`, of the mix's GPU
//! demand is sub-GPU: no whole-GPU work needs the empty ones), two more rules of the `pairing`
//! module apply: the stranded term is measured partly at the CPU the *pairing* shares (half a
//! GPU or less) ask, so pairs go to nodes whose CPUs can feed them, and an empty fractional GPU
//! on a node too CPU-poor for pairs already counts the waste the share opening it is expected
//! to leave, so the CPU-light large shares go there (openb `gpushare100`: 11.61 → 10.44 %
//! unallocated, BENCHMARKS.md §1).
//! Dead capacity is measured on fractional GPUs only: on MIG, "could some mix of profiles
//! fill these slices?" is nearly always yes, and ranked first it put small instances into the
//! slots large profiles need; there fragmentation (slot alignment) decides, as before.
//!
//! The oldest-neighbour rule: among candidates still tied, the one whose GPU holds the oldest
//! slice ([`Occupant::age_s`]; over a GPU set, the least of the GPUs' oldest) wins; unknown ages
//! count as zero. Slice lifetimes are heavy-tailed (on the openb trace a pod that has lived a
//! day is likely to live much longer), so the GPU with the oldest slice is the one likely to stay
//! busy longest: a new slice placed there is least likely to be left alone on a GPU when its
//! neighbours depart, which is how a GPU ends up blocked for a whole-GPU profile by one small
//! slice. It only orders candidates that fragmentation (compared to a millionth of a GPU), NUMA,
//! soft rules and best fit leave equal, so it cannot trade any of those for age. On the
//! one-host loss benchmark it cut the rejections a re-layout could have avoided from 0.8–1.2 %
//! to 0.2–0.4 % of all rejections (preferring the youngest neighbour instead raised them to
//! about 5 %); see BENCHMARKS.md. The engine passes the age of the slices it holds for an allocation.
//!
//! Expected fragmentation (FGD, Weng et al., ATC 2023, generalised to every slicing mode; see
//! the `frag` module) is the free GPU capacity the expected request mix ([`Workload`]) could not
//! use: for each request shape, the capacity on GPUs where it does not fit (wrong MIG slots,
//! another vGPU size on the GPU, a remainder too small, no CPU or memory left on the GPU's NUMA
//! node), or everything when the host cannot take that shape at all. The workload defaults to
//! every shape the host's GPUs offer, equally likely; the engine passes the mix it has learnt
//! from the requests it has seen ([`MixEstimator`], with that default as its prior).
//! Unlike FGD's scorer, the measure is compared exactly (no rounding to integer scores, no random
//! tie-breaking): ties go to best fit, which keeps empty GPUs empty for large requests. The CPU
//! and memory of each shape are part of the measure (a GPU whose NUMA node cannot feed a shape
//! is a fragment for it); without them the openb replay loses about a point.
//!
//! # Choosing between hosts
//! [`host_score`] evaluates the host as `decide` would and reports, for the winning candidate,
//! the waste and fragmentation it adds (`waste_added`, `frag_added`), the capacity left on the
//! GPU(s) it takes (`slice_free_after`) and on the whole host. An upstream scheduler should rank
//! hosts by `waste_added` (to a thousandth of a GPU), then by `frag_added` with differences
//! under about 0.05 GPU counted as equal, then by `slice_free_after` (best fit on the remainder,
//! the rule `decide` applies between GPUs), then keep a stable host order. The measured effect of each rule, and of the alternatives that did
//! not help (weighting shapes by GPU demand, a CPU-proportional fragment, packing or spreading
//! hosts, other tie widths), is in BENCHMARKS.md.

mod cap;
mod decide;
mod defrag;
mod edit;
mod error;
mod frag;
pub mod mig;
mod mix_estimate;
mod model;
mod pairing;
mod waste;

pub use decide::{
    CandidateScore, Decision, Explanation, GpuVerdict, HostMeasures, HostScore, Policy, Rejection,
    SpreadWeights, decide, host_score, scored_decision,
};
pub use defrag::{BUSY_MOVE_COST, DefragAdvice, DefragPlan, IDLE_MOVE_COST, Move, defrag_advice};
pub use edit::{add_slice, remove_slice, request_of, slices_of};
pub use error::SchedError;
pub use frag::{WorkItem, Workload};
pub use mix_estimate::{MEMORY_BUCKET_MIB, MixConfig, MixEstimator, MixState};
pub use model::{
    AffinityRule, AffinityScope, FractionalShare, GPU_UNITS, GpuMode, GpuState, LinkPolicy,
    MdevInstance, MdevOffer, MigGeometry, MigInstance, MigShape, NumaPolicy, NumaState, Occupant,
    Placement, Request, SliceChoice, SliceRequest, Snapshot, Vendor, VgpuInstance, VgpuOffer,
};
pub use waste::{COMMON_SHARE, STRANDED_WEIGHT};

/// Expected fragmentation of a host for `workload`, in GPUs (see the crate docs).
pub fn fragmentation(snapshot: &Snapshot, workload: &Workload) -> Result<f64, SchedError> {
    let host = host_caps(snapshot)?;
    Ok(frag::host_frag(snapshot, &host, workload))
}

/// Expected waste of a host for `workload`, in GPUs: free capacity no common request shape
/// could fill, plus [`STRANDED_WEIGHT`] × capacity its NUMA node's CPUs could not feed (see
/// the crate docs).
pub fn waste(snapshot: &Snapshot, workload: &Workload) -> Result<f64, SchedError> {
    let host = host_caps(snapshot)?;
    Ok(waste::WasteModel::new(snapshot, workload).host_waste(snapshot, &host))
}

fn host_caps(snapshot: &Snapshot) -> Result<frag::HostCaps, SchedError> {
    let caps = snapshot
        .gpus
        .iter()
        .map(cap::Cap::of)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(frag::HostCaps {
        caps,
        numa_cpu: snapshot.numa.iter().map(|n| n.cpu_milli()).collect(),
        numa_mem: snapshot.numa.iter().map(|n| n.free_memory_mib).collect(),
    })
}
