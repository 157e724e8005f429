//! Keeping the warm pool topped up (`[warm_pool]`): the pool's size shared among slice types
//! by the demand mix the engine has learnt from the requests it was asked to place, and one
//! pass making the slices the pool lacks most. The engine part (where pool slices go, how they
//! give way to requests) is `engine::warm_pool`.

use std::collections::BTreeMap;

use crate::config::WarmPoolConfig;
use crate::engine::{DemandMix, Engine, SliceState};

/// The type a request names for a learnt shape; `None` for shapes no slice type stands for
/// (fractions and generic sizes are resolved per request).
fn type_of(slice: &sched::SliceRequest) -> Option<String> {
    match slice {
        sched::SliceRequest::Mig(p) => Some(p.to_string()),
        sched::SliceRequest::Vgpu(t) => Some(t.to_string()),
        sched::SliceRequest::Mdev(t) => Some(t.to_string()),
        sched::SliceRequest::Vf => Some("vf".to_owned()),
        sched::SliceRequest::Whole => Some("gpu".to_owned()),
        sched::SliceRequest::Fraction(_) | sched::SliceRequest::Generic { .. } => None,
    }
}

/// How many free slices of each type the pool should hold: `size` shared by each shape's
/// weight times the slices a request of it takes, largest remainders first, so the targets
/// add up to `size`. Nothing before the first request: the prior alone is no evidence.
pub fn targets(mix: &DemandMix, size: u32) -> BTreeMap<String, u32> {
    let mut demand: BTreeMap<String, f64> = BTreeMap::new();
    if mix.seen == 0 {
        return BTreeMap::new();
    }
    for item in &mix.mix.items {
        if let Some(t) = type_of(&item.slice) {
            *demand.entry(t).or_default() += item.weight * f64::from(item.count.max(1));
        }
    }
    let total: f64 = demand.values().sum();
    if total <= 0.0 {
        return BTreeMap::new();
    }
    let exact: Vec<(String, f64)> = demand
        .into_iter()
        .map(|(t, d)| (t, d / total * f64::from(size)))
        .collect();
    let mut out: BTreeMap<String, u32> = exact
        .iter()
        .map(|(t, x)| (t.clone(), x.floor() as u32))
        .collect();
    let mut by_remainder = exact.clone();
    by_remainder.sort_by(|a, b| (b.1 - b.1.floor()).total_cmp(&(a.1 - a.1.floor())));
    let mut left = size.saturating_sub(out.values().sum());
    for (t, _) in by_remainder {
        if left == 0 {
            break;
        }
        *out.entry(t).or_default() += 1;
        left -= 1;
    }
    out.retain(|_, n| *n > 0);
    out
}

/// Free slices by type now (the pool's and any other free one: each serves the next request).
fn free_by_type(engine: &Engine) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for s in engine.slices() {
        if s.state == SliceState::Ready && s.owner.is_none() {
            *out.entry(s.spec.kind.type_label()).or_default() += 1;
        }
    }
    out
}

/// The types one top-up makes, most wanted first: up to `creates` slices, each of the type then
/// furthest below its target.
fn plan(want: &BTreeMap<String, u32>, have: &BTreeMap<String, u32>, creates: u32) -> Vec<String> {
    let mut have = have.clone();
    let mut out = Vec::new();
    for _ in 0..creates {
        let short = want
            .iter()
            .map(|(t, n)| {
                (
                    t,
                    i64::from(*n) - i64::from(have.get(t).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, gap)| *gap > 0)
            .min_by_key(|(_, gap)| std::cmp::Reverse(*gap));
        let Some((t, _)) = short else { break };
        *have.entry(t.clone()).or_default() += 1;
        out.push(t.clone());
    }
    out
}

/// One top-up: while fewer than `size` slices are free, makes the slices of [`plan`] at once, one thread each (creates on different
/// GPUs overlap; two on one GPU wait for its lock in turn); a type that finds no room is left
/// for the next pass. Returns how many were made.
pub fn refill(engine: &Engine, config: &WarmPoolConfig) -> usize {
    let want = targets(&engine.demand_mix(), config.size);
    let have = free_by_type(engine);
    // `size` caps the free slices on the host, whatever their type: the mix moves (and a
    // restart may load an older one), and slices of a type no longer wanted still count.
    let room = config.size.saturating_sub(have.values().sum());
    let todo = plan(&want, &have, room.min(config.creates_per_pass));
    std::thread::scope(|scope| {
        let makers: Vec<_> = todo
            .iter()
            .map(|t| scope.spawn(move || (t, engine.warm_one(t))))
            .collect();
        makers
            .into_iter()
            .filter_map(|m| m.join().ok())
            .filter(|(t, made)| match made {
                Ok(Some(_)) => true,
                Ok(None) => false,
                Err(e) => {
                    tracing::warn!(slice_type = %t, "warm pool: cannot make a slice: {e}");
                    false
                }
            })
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(seen: u64, items: Vec<sched::WorkItem>) -> DemandMix {
        DemandMix {
            seen,
            effective: seen as f64,
            prior_share: 0.0,
            config: sched::MixConfig::default(),
            mix: sched::Workload { items },
        }
    }

    fn mig(p: &str, weight: f64) -> sched::WorkItem {
        sched::WorkItem::slice(sched::SliceRequest::Mig(p.parse().unwrap()), weight)
    }

    #[test]
    fn the_pool_is_shared_by_demand_and_adds_up_to_its_size() {
        let m = mix(
            100,
            vec![
                mig("1g.10gb", 0.5),
                mig("3g.40gb", 0.3),
                mig("7g.80gb", 0.2),
            ],
        );
        let t = targets(&m, 4);
        assert_eq!(t.values().sum::<u32>(), 4, "{t:?}");
        // 2.0, 1.2 and 0.8: the largest remainder takes the fourth.
        let get = |k: &str| t.get(k).copied().unwrap_or(0);
        assert_eq!(
            (get("1g.10gb"), get("3g.40gb"), get("7g.80gb")),
            (2, 1, 1),
            "{t:?}"
        );
        // A two-slice request weighs twice; fractions name no type and are left out.
        let mut pair = mig("2g.20gb", 0.5);
        pair.count = 2;
        let m = mix(
            10,
            vec![
                pair,
                mig("1g.10gb", 0.5),
                sched::WorkItem::slice(sched::SliceRequest::Fraction(250), 1.0),
            ],
        );
        let t = targets(&m, 3);
        assert_eq!((t["2g.20gb"], t["1g.10gb"]), (2, 1), "{t:?}");
        // Nothing seen: no pool, whatever the prior says.
        assert!(targets(&mix(0, vec![mig("1g.10gb", 1.0)]), 4).is_empty());
    }

    #[test]
    fn a_top_up_makes_what_is_most_short_first_and_stops_at_the_targets() {
        let want: BTreeMap<String, u32> = [("a".to_owned(), 3), ("b".to_owned(), 2)].into();
        let have: BTreeMap<String, u32> = [("a".to_owned(), 1), ("c".to_owned(), 5)].into();
        assert_eq!(plan(&want, &have, 1), ["a"]);
        // a is 2 short, b 2: a first (ties go to the first), then b, then a and b are 1 short.
        assert_eq!(plan(&want, &have, 3), ["a", "b", "a"]);
        assert_eq!(plan(&want, &have, 64), ["a", "b", "a", "b"]);
        assert!(plan(&want, &want, 4).is_empty());
    }
}
