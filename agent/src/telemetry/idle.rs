//! Allocated slices that stay idle: utilisation under a threshold for longer than a window.
//! Each slice's idle spell starts at the first reading under the threshold and ends at the first
//! one at or above it, or when the slice is no longer allocated to the same consumer.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// When each allocated slice's current idle spell began.
#[derive(Debug, Default)]
pub(super) struct IdleTracker {
    since: HashMap<String, (String, Instant)>,
}

/// One allocated slice as a poll saw it.
pub(super) struct Held<'a> {
    pub slice: &'a str,
    pub consumer: &'a str,
    /// Utilisation 0..1, when the vendor reports it; a slice without a reading is never idle.
    pub utilization: Option<f64>,
}

impl IdleTracker {
    /// Takes one poll's readings and answers, per consumer, how many of its slices have been
    /// under `threshold` (0..1) for longer than `window`.
    pub(super) fn update(
        &mut self,
        held: &[Held<'_>],
        threshold: f64,
        window: Duration,
        now: Instant,
    ) -> BTreeMap<String, u64> {
        let mut next = HashMap::new();
        let mut idle = BTreeMap::new();
        for h in held {
            if !h.utilization.is_some_and(|u| u < threshold) {
                continue;
            }
            let start = match self.since.get(h.slice) {
                Some((consumer, start)) if consumer == h.consumer => *start,
                _ => now,
            };
            if now.duration_since(start) > window {
                *idle.entry(h.consumer.to_owned()).or_insert(0) += 1;
            }
            next.insert(h.slice.to_owned(), (h.consumer.to_owned(), start));
        }
        self.since = next;
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_is_idle_only_after_the_window_and_busy_resets_it() {
        let mut t = IdleTracker::default();
        let t0 = Instant::now();
        let w = Duration::from_secs(60);
        let quiet = |u| {
            vec![Held {
                slice: "s1",
                consumer: "c",
                utilization: Some(u),
            }]
        };
        assert!(t.update(&quiet(0.01), 0.05, w, t0).is_empty());
        assert!(t.update(&quiet(0.01), 0.05, w, t0 + w).is_empty());
        let idle = t.update(&quiet(0.0), 0.05, w, t0 + w + Duration::from_secs(1));
        assert_eq!(idle.get("c"), Some(&1));
        // Busy once: the spell starts again.
        assert!(t.update(&quiet(0.5), 0.05, w, t0 + 2 * w).is_empty());
        assert!(
            t.update(&quiet(0.0), 0.05, w, t0 + 2 * w + Duration::from_secs(1))
                .is_empty()
        );
        // No reading: never idle.
        let unknown = [Held {
            slice: "s1",
            consumer: "c",
            utilization: None,
        }];
        assert!(t.update(&unknown, 0.05, w, t0 + 10 * w).is_empty());
    }
}
