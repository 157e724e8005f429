//! Defragmentation advice: for a request that does not fit, whether re-laying slices would make
//! room, and the cheapest such plan.
//!
//! For each GPU the planner frees slices one at a time (idle ones first, then the smallest busy
//! ones) until the request fits there, then re-places every freed slice on the host with the
//! same policy. A plan's cost counts 1 per idle slice re-laid and 10 per slice of a running VM
//! moved; the cheapest plan wins. It is a greedy search: "no plan" means none was found this way.

use serde::{Deserialize, Serialize};

use crate::decide::{Policy, decide};
use crate::edit::{add_slice, remove_slice, request_of, slices_of};
use crate::model::{Occupant, Placement, Request, Snapshot};

/// Cost of re-laying a slice no VM uses.
pub const IDLE_MOVE_COST: u32 = 1;
/// Cost of moving a running VM's slice (the VM must be migrated or restarted).
pub const BUSY_MOVE_COST: u32 = 10;

/// One slice to move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// Holder of the slice.
    pub consumer: String,
    /// Whether a running VM uses it.
    pub busy: bool,
    /// Where it is now.
    pub from: Placement,
    /// Where it goes.
    pub to: Placement,
}

/// A re-layout that makes room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefragPlan {
    /// Moves, in order.
    pub moves: Vec<Move>,
    /// Where the request goes once the moves are done.
    pub then: Vec<Placement>,
    /// Total cost (see [`IDLE_MOVE_COST`], [`BUSY_MOVE_COST`]).
    pub cost: u32,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefragAdvice {
    /// The request fits without moving anything.
    FitsNow,
    /// Moving these slices makes it fit.
    Plan(DefragPlan),
    /// No re-layout found.
    NoPlan {
        /// Why.
        reason: String,
    },
}

/// Plans the cheapest re-layout that would let `request` fit. `allow_busy` lets the plan move
/// slices of running VMs (named in the plan); otherwise only idle slices are re-laid.
pub fn defrag_advice(
    snapshot: &Snapshot,
    request: &Request,
    policy: &Policy,
    allow_busy: bool,
) -> DefragAdvice {
    if decide(snapshot, request, policy).is_ok() {
        return DefragAdvice::FitsNow;
    }
    if request.count != 1 {
        return DefragAdvice::NoPlan {
            reason: "re-layout is planned for single-GPU requests only".to_owned(),
        };
    }
    let mut best: Option<DefragPlan> = None;
    for gi in 0..snapshot.gpus.len() {
        if let Some(plan) = plan_on(snapshot, request, policy, allow_busy, gi)
            && best.as_ref().is_none_or(|b| plan.cost < b.cost)
        {
            best = Some(plan);
        }
    }
    match best {
        Some(p) => DefragAdvice::Plan(p),
        None => DefragAdvice::NoPlan {
            reason: if allow_busy {
                "no re-layout of the host's slices makes room".to_owned()
            } else {
                "re-laying idle slices does not make room".to_owned()
            },
        },
    }
}

fn plan_on(
    snap: &Snapshot,
    req: &Request,
    policy: &Policy,
    allow_busy: bool,
    gi: usize,
) -> Option<DefragPlan> {
    let gpu = snap.gpus.get(gi)?;
    if !gpu.usable() {
        return None;
    }
    let mut order: Vec<(usize, Occupant, crate::model::SliceChoice)> = slices_of(gpu)
        .into_iter()
        .enumerate()
        .map(|(i, (o, c))| (i, o, c))
        .filter(|(_, o, _)| allow_busy || o.idle)
        .collect();
    order.sort_by_key(|(_, o, c)| (!o.idle, crate::cap::Cap::units(gpu, c)));
    for n in 1..=order.len() {
        let freed = order.get(..n)?;
        let mut work = snap.clone();
        let mut idx: Vec<usize> = freed.iter().map(|(i, _, _)| *i).collect();
        idx.sort_unstable_by(|a, b| b.cmp(a));
        if let Some(g) = work.gpus.get_mut(gi) {
            for i in idx {
                remove_slice(g, i);
            }
        }
        // The request must land on this GPU: hide the others from the first decision.
        let mut only = work.clone();
        for (j, g) in only.gpus.iter_mut().enumerate() {
            g.healthy = g.healthy && j == gi;
        }
        let Ok(dec) = decide(&only, req, policy) else {
            continue;
        };
        work.commit(req, &dec);
        let mut moves = Vec::new();
        let mut ok = true;
        for (_, occ, choice) in freed {
            let mut r = Request::new(&occ.consumer, request_of(choice));
            r.vendor = Some(gpu.vendor);
            match decide(&work, &r, policy) {
                Ok(d) => {
                    for p in &d.placements {
                        if let Some(g) = work.gpus.iter_mut().find(|g| g.address == p.gpu) {
                            add_slice(g, &p.slice, occ.clone());
                        }
                        moves.push(Move {
                            consumer: occ.consumer.clone(),
                            busy: !occ.idle,
                            from: Placement {
                                gpu: gpu.address,
                                slice: choice.clone(),
                            },
                            to: p.clone(),
                        });
                    }
                }
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            let cost = moves
                .iter()
                .map(|m| {
                    if m.busy {
                        BUSY_MOVE_COST
                    } else {
                        IDLE_MOVE_COST
                    }
                })
                .sum();
            return Some(DefragPlan {
                moves,
                then: dec.placements,
                cost,
            });
        }
    }
    None
}
