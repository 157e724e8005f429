//! Keeping the warm pool topped up (`[warm_pool]`): which free slices are worth holding, from
//! the demand mix the engine has learnt from the requests it was asked to place and the pace
//! the pool measures (requests per second, how long its refills take), and one pass making
//! the most useful ones it lacks. The engine part (where pool slices go, how they
//! give way to requests) is `engine::warm_pool`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::WarmPoolConfig;
use crate::engine::{DemandMix, Engine, Slice, SliceId, SliceState};

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

/// The pool's slots, most useful first: `(type, k)` is the `k`-th free slice of a type, worth
/// the share of all requests it would serve. The first serves every request for the type (the
/// pool makes another after each claim): the type's share of the demand. The `k`-th serves a
/// request only when `k - 1` others of the type came since the pool last refilled: with
/// Poisson arrivals, the share times `P(N ≥ k - 1)`, `N` Poisson with mean `share ×
/// per_refill` (`per_refill`: the requests that come in one refill time). A share is a shape's
/// weight in the learnt mix times the slices one request takes. So one slice of each common
/// type comes before a second of the commonest, and a second only as requests come faster
/// than the pool refills. `size` slots (the operator's cap); nothing before the first request
/// (the prior alone is no evidence).
pub fn slots(mix: &DemandMix, size: u32, per_refill: f64) -> Vec<(String, u32)> {
    let mut demand: BTreeMap<String, f64> = BTreeMap::new();
    if mix.seen == 0 {
        return Vec::new();
    }
    for item in &mix.mix.items {
        if let Some(t) = type_of(&item.slice) {
            *demand.entry(t).or_default() += item.weight * f64::from(item.count.max(1));
        }
    }
    let total: f64 = demand.values().sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let mut ranked: Vec<(f64, f64, u32, String)> = Vec::new();
    for (t, d) in demand {
        let share = d / total;
        for k in 1..=size {
            let value = if k == 1 {
                share
            } else {
                share * at_least(k - 1, share * per_refill)
            };
            ranked.push((value, share, k, t.clone()));
        }
    }
    // Most useful first; equal values (none left to serve) by share, then k, then type, so
    // the same mix gives the same pool.
    ranked.sort_by(|a, b| {
        (b.0.total_cmp(&a.0))
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
            .then_with(|| a.3.cmp(&b.3))
    });
    ranked.truncate(size as usize);
    ranked.into_iter().map(|(_, _, k, t)| (t, k)).collect()
}

/// `P(N ≥ k)` for `N` Poisson with mean `mean`.
fn at_least(k: u32, mean: f64) -> f64 {
    let mut term = (-mean).exp();
    let mut below = 0.0;
    for i in 0..k {
        below += term;
        term *= mean / f64::from(i + 1);
    }
    (1.0 - below).max(0.0)
}

/// Free slices by type now (the pool's and any other free one: each serves the next request).
fn free_by_type(slices: &[Slice]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for s in slices {
        if s.state == SliceState::Ready && s.owner.is_none() {
            *out.entry(s.spec.kind.type_label()).or_default() += 1;
        }
    }
    out
}

/// The types one top-up makes: up to `creates` of the slots not filled yet, most useful first.
fn plan(slots: &[(String, u32)], have: &BTreeMap<String, u32>, creates: u32) -> Vec<String> {
    slots
        .iter()
        .filter(|(t, k)| have.get(t).copied().unwrap_or(0) < *k)
        .take(creates as usize)
        .map(|(t, _)| t.clone())
        .collect()
}

/// Which free pool slices (`pool`, ids and types) to destroy when `have` (free slices by type)
/// holds more than the pool's size: up to `n`, each of the type then furthest over what the
/// slots want (a type they do not name first of all).
fn trim(
    slots: &[(String, u32)],
    have: &BTreeMap<String, u32>,
    pool: &[(SliceId, String)],
    n: u32,
) -> Vec<(SliceId, String)> {
    let mut want: BTreeMap<&str, u32> = BTreeMap::new();
    for (t, k) in slots {
        let w = want.entry(t.as_str()).or_default();
        *w = (*w).max(*k);
    }
    let mut over: BTreeMap<&str, i64> = have
        .iter()
        .map(|(t, h)| {
            let w = want.get(t.as_str()).copied().unwrap_or(0);
            (t.as_str(), i64::from(*h) - i64::from(w))
        })
        .collect();
    let mut left: Vec<&(SliceId, String)> = pool.iter().collect();
    let mut out = Vec::new();
    while out.len() < n as usize {
        let Some((at, _)) = left
            .iter()
            .enumerate()
            .map(|(i, (_, t))| (i, over.get(t.as_str()).copied().unwrap_or(0)))
            .filter(|(_, excess)| *excess > 0)
            .max_by_key(|(i, excess)| (*excess, std::cmp::Reverse(*i)))
        else {
            break;
        };
        let chosen = left.remove(at);
        if let Some(e) = over.get_mut(chosen.1.as_str()) {
            *e -= 1;
        }
        out.push(chosen.clone());
    }
    out
}

/// What the pool has measured of its host: how fast requests come and how long a refill
/// takes, the two halves of "requests per refill" that [`slots`] ranks by.
#[derive(Debug, Default)]
struct Pace {
    /// The last pass: when, and the mix's request count then.
    last: Option<(Instant, u64)>,
    /// Requests per second, smoothed over passes.
    rate: Option<f64>,
    /// Seconds a pass that made slices took, smoothed.
    making_s: Option<f64>,
}

/// How much a new measurement moves a smoothed one.
const SMOOTHING: f64 = 0.2;

fn smooth(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + SMOOTHING * (new - o))
}

impl Pace {
    /// Counts the requests seen since the last pass.
    fn arrivals(&mut self, now: Instant, seen: u64) {
        if let Some((then, before)) = self.last {
            let dt = now.duration_since(then).as_secs_f64();
            if dt > 0.0 {
                let n = seen.saturating_sub(before) as f64;
                self.rate = Some(smooth(self.rate, n / dt));
            }
        }
        self.last = Some((now, seen));
    }

    /// Requests expected in one refill time (the interval a claimed slice waits for the next
    /// pass, plus the pass's own making); one until both are measured.
    fn per_refill(&self, interval: Duration) -> f64 {
        match (self.rate, self.making_s) {
            (Some(rate), Some(making)) => rate * (interval.as_secs_f64() + making),
            _ => 1.0,
        }
    }
}

/// The warm pool's top-up, one [`WarmPool::refill`] per interval (the daemon's task).
#[derive(Debug)]
pub struct WarmPool {
    config: WarmPoolConfig,
    pace: Mutex<Pace>,
    /// The free slices outside the pool at the last pass (see `adopt_released`).
    free_before: Mutex<BTreeSet<SliceId>>,
}

impl WarmPool {
    /// A pool kept by `config`, its pace not measured yet.
    pub fn new(config: WarmPoolConfig) -> Self {
        WarmPool {
            config,
            pace: Mutex::new(Pace::default()),
            free_before: Mutex::new(BTreeSet::new()),
        }
    }

    /// One top-up: while fewer than `size` slices are free, makes the slices of [`plan`] at
    /// once, one thread each (creates on different GPUs overlap; two on one GPU wait for its
    /// lock in turn); a type that finds no room is left for the next pass. Returns how many
    /// were made.
    pub fn refill(&self, engine: &Engine) -> usize {
        let mix = engine.demand_mix();
        let per_refill = {
            let mut pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
            pace.arrivals(Instant::now(), mix.seen);
            pace.per_refill(Duration::from_millis(self.config.interval_ms))
        };
        let slots = slots(&mix, self.config.size, per_refill);
        // One listing of the host for the whole pass (each observes every owned slice).
        let slices = engine.slices();
        self.adopt_released(engine, &slices);
        let have = free_by_type(&slices);
        let over = have.values().sum::<u32>().saturating_sub(self.config.size);
        if over > 0 {
            let pool = engine.warm_pool_free_typed(&slices);
            let trim = trim(&slots, &have, &pool, over.min(self.config.creates_per_pass));
            engine.trim_warm_pool(&trim);
            return 0;
        }
        // `size` caps the free slices on the host, whatever their type: the mix moves (and a
        // restart may load an older one), and slices of a type no longer wanted still count.
        let room = self.config.size.saturating_sub(have.values().sum());
        let todo = plan(&slots, &have, room.min(self.config.creates_per_pass));
        let began = Instant::now();
        let made = make(engine, &todo);
        if made > 0 {
            let mut pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
            pace.making_s = Some(smooth(pace.making_s, began.elapsed().as_secs_f64()));
        }
        made
    }
}

impl WarmPool {
    /// Takes into the pool the slices allocations released that were free at the last pass
    /// too: a released slice waits one interval, so a client that destroys what it releases
    /// gets to do so first.
    fn adopt_released(&self, engine: &Engine, slices: &[Slice]) {
        let now = engine.released_outside_pool(slices);
        let mut before = self
            .free_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let both: BTreeSet<SliceId> = now.intersection(&before).copied().collect();
        let joined = engine.adopt_into_pool(&both);
        if joined > 0 {
            tracing::debug!(slices = joined, "warm pool: keeps released slices");
        }
        *before = now.difference(&both).copied().collect();
    }
}

/// Makes one slice of each type of `todo`, at once; how many were made.
fn make(engine: &Engine, todo: &[String]) -> usize {
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

    fn slot(t: &str, k: u32) -> (String, u32) {
        (t.to_owned(), k)
    }

    #[test]
    fn poisson_tails() {
        assert!((at_least(1, 1.0) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert!((at_least(2, 1.0) - (1.0 - 2.0 * (-1.0f64).exp())).abs() < 1e-12);
        assert_eq!(at_least(1, 0.0), 0.0);
        assert!(at_least(3, 50.0) > 0.999);
    }

    #[test]
    fn slots_follow_demand_with_diminishing_returns() {
        let m = mix(
            100,
            vec![
                mig("7g.80gb", 0.45),
                mig("4g.40gb", 0.33),
                mig("3g.40gb", 0.13),
                mig("2g.20gb", 0.08),
                mig("1g.10gb", 0.01),
            ],
        );
        // About one request per refill: one of each common type first, but a second of the
        // two commonest before a third-rarest, and a 1 % type not in eight.
        let s = slots(&m, 8, 1.0);
        assert_eq!(
            s[..6],
            [
                slot("7g.80gb", 1),
                slot("4g.40gb", 1),
                slot("7g.80gb", 2),
                slot("3g.40gb", 1),
                slot("4g.40gb", 2),
                slot("2g.20gb", 1),
            ],
            "{s:?}"
        );
        assert_eq!(s.len(), 8, "{s:?}");
        assert!(s.iter().all(|(t, _)| t != "1g.10gb"), "{s:?}");
        // Five requests per refill: later slots of the common types are taken almost as
        // surely as their first, and the pool follows the demand.
        let s = slots(&m, 8, 5.0);
        let of = |t: &str| s.iter().filter(|(x, _)| x == t).count();
        assert_eq!(
            (of("7g.80gb"), of("4g.40gb"), of("3g.40gb")),
            (4, 3, 1),
            "{s:?}"
        );
        // None in a refill: the one type seen still fills the pool to its size.
        let one = mix(1, vec![mig("1g.10gb", 1.0)]);
        assert_eq!(slots(&one, 3, 0.0).len(), 3);
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
        let s = slots(&m, 3, 3.0);
        assert_eq!(s[0], slot("2g.20gb", 1), "{s:?}");
        assert!(s.iter().all(|(t, _)| t != "fraction"), "{s:?}");
        // Nothing seen: no pool, whatever the prior says.
        assert!(slots(&mix(0, vec![mig("1g.10gb", 1.0)]), 4, 1.0).is_empty());
    }

    #[test]
    fn a_top_up_makes_the_most_useful_missing_slots_first() {
        let s = [slot("a", 1), slot("b", 1), slot("a", 2), slot("b", 2)];
        let have: BTreeMap<String, u32> = [("a".to_owned(), 1), ("c".to_owned(), 5)].into();
        assert_eq!(plan(&s, &have, 1), ["b"]);
        assert_eq!(plan(&s, &have, 64), ["b", "a", "b"]);
        let full: BTreeMap<String, u32> = [("a".to_owned(), 2), ("b".to_owned(), 2)].into();
        assert!(plan(&s, &full, 4).is_empty());
    }

    #[test]
    fn a_pool_over_its_size_trims_what_the_slots_want_least() {
        let id = |n: u32| {
            format!("00000000-0000-4000-8000-{n:012}")
                .parse::<SliceId>()
                .unwrap()
        };
        let s = [slot("a", 1), slot("b", 1), slot("a", 2)];
        let have: BTreeMap<String, u32> = [
            ("a".to_owned(), 3),
            ("b".to_owned(), 1),
            ("c".to_owned(), 1),
        ]
        .into();
        let pool = [
            (id(1), "a".to_owned()),
            (id(2), "b".to_owned()),
            (id(3), "a".to_owned()),
            (id(4), "c".to_owned()),
            (id(5), "a".to_owned()),
        ];
        // c is not wanted (1 over), a is 1 over its two: one of each; b never.
        let t = trim(&s, &have, &pool, 2);
        let types: Vec<&str> = t.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(types.len(), 2, "{t:?}");
        assert!(types.contains(&"a") && types.contains(&"c"), "{t:?}");
        assert_eq!(
            trim(&s, &have, &pool, 9).len(),
            2,
            "no more than the excess"
        );
    }

    #[test]
    fn the_pace_counts_requests_per_refill() {
        let mut pace = Pace::default();
        let t0 = Instant::now();
        assert_eq!(pace.per_refill(Duration::from_secs(1)), 1.0, "unmeasured");
        pace.arrivals(t0, 10);
        pace.arrivals(t0 + Duration::from_secs(10), 15);
        pace.making_s = Some(1.5);
        // 0.5 requests a second, a refill of 1 s wait + 1.5 s making.
        assert!((pace.per_refill(Duration::from_secs(1)) - 1.25).abs() < 1e-9);
    }
}
