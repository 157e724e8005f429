//! The agent's own counters and histograms: allocations, vendor calls, reconciles, API requests,
//! telemetry polls. Each is a `prometheus-client` metric (atomics behind an `Arc`), so recording
//! never blocks and a scrape reads them without a lock on anything the agent does.
//!
//! One [`Metrics`] lives in the engine ([`crate::engine::Engine::metrics`]); every clone shares
//! it. [`render`] turns it and the telemetry cache's latest snapshot into OpenMetrics text.

mod demand_mix;
mod labels;
mod placement;
pub mod process;
pub mod render;
mod snapshot_text;

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use labels::failure_reason;
pub use render::render;
pub use snapshot_text::SnapshotText;

/// Label pairs, in the order they are written.
pub type Labels = Vec<(String, String)>;

type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;
type FloatCounter = Counter<f64, std::sync::atomic::AtomicU64>;

/// Latency buckets from 1 ms to about 65 s: vendor calls answer in microseconds to seconds, an
/// allocation that creates slices takes seconds, a hung call is cut at the vendor timeout.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Every counter and histogram of the agent. Cheap to clone; clones share the values.
#[derive(Debug, Clone)]
pub struct Metrics {
    allocation_duration: HistogramFamily,
    allocation_wait: Histogram,
    allocation_requests: Family<Labels, Counter>,
    consumer_slice_seconds: Family<Labels, FloatCounter>,
    vendor_call_duration: HistogramFamily,
    vendor_call_errors: Family<Labels, Counter>,
    reconcile_runs: Family<Labels, Counter>,
    reconcile_drift: Counter,
    reconcile_duration: Histogram,
    api_requests: Family<Labels, Counter>,
    api_request_duration: HistogramFamily,
    telemetry_poll_duration: Histogram,
    telemetry_errors: Family<Labels, Counter>,
    placement_consumer_checks: Family<Labels, Counter>,
    warm_pool_slices: Family<Labels, Counter>,
    demand_mix: demand_mix::DemandMixGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        let family = || HistogramFamily::new_with_constructor(latency_histogram as fn() -> _);
        Self {
            allocation_duration: family(),
            allocation_wait: latency_histogram(),
            allocation_requests: Family::default(),
            consumer_slice_seconds: Family::default(),
            vendor_call_duration: family(),
            vendor_call_errors: Family::default(),
            reconcile_runs: Family::default(),
            reconcile_drift: Counter::default(),
            reconcile_duration: latency_histogram(),
            api_requests: Family::default(),
            api_request_duration: family(),
            telemetry_poll_duration: latency_histogram(),
            telemetry_errors: Family::default(),
            placement_consumer_checks: Family::default(),
            warm_pool_slices: Family::default(),
            demand_mix: demand_mix::DemandMixGauges::default(),
        }
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Metrics {
    /// An allocation that finished: `backend` of its slices, how long from request to ready.
    pub fn allocation_succeeded(&self, backend: &str, duration: Duration) {
        self.allocation_duration
            .get_or_create(&labels(&[("backend", backend)]))
            .observe(duration.as_secs_f64());
        self.allocation_requests
            .get_or_create(&labels(&[("outcome", "ok"), ("reason", "")]))
            .inc();
    }

    /// An allocation refused or failed, with its [`failure_reason`].
    pub fn allocation_failed(&self, reason: &str) {
        self.allocation_requests
            .get_or_create(&labels(&[("outcome", "failed"), ("reason", reason)]))
            .inc();
    }

    /// How long a request waited before the engine started on it.
    pub fn allocation_waited(&self, wait: Duration) {
        self.allocation_wait.observe(wait.as_secs_f64());
    }

    /// `seconds` more of one slice held by `consumer`.
    pub fn consumer_held(&self, consumer: &str, seconds: f64) {
        if seconds > 0.0 {
            self.consumer_slice_seconds
                .get_or_create(&labels(&[("consumer", consumer)]))
                .inc_by(seconds);
        }
    }

    /// One vendor library call: its name, how long it took, and its error code if it failed
    /// (a call cut at the timeout counts with the timeout's code).
    pub fn vendor_call(&self, call: &str, duration: Duration, error: Option<u32>) {
        self.vendor_call_duration
            .get_or_create(&labels(&[("call", call)]))
            .observe(duration.as_secs_f64());
        if let Some(code) = error {
            self.vendor_call_errors
                .get_or_create(&labels(&[("call", call), ("code", &code.to_string())]))
                .inc();
        }
    }

    /// One reconcile pass: whether it finished, the drift it found, how long it took.
    pub fn reconciled(&self, ok: bool, drift: usize, duration: Duration) {
        let outcome = if ok { "ok" } else { "failed" };
        self.reconcile_runs
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
        self.reconcile_drift.inc_by(drift as u64);
        self.reconcile_duration.observe(duration.as_secs_f64());
    }

    /// One API request: the front end (`rest`, `dbus`), the route template (`/v1/slices/{id}`)
    /// or method name, the HTTP method (or `call`), the status, and how long it took.
    pub fn api_request(
        &self,
        front_end: &str,
        route: &str,
        method: &str,
        status: &str,
        duration: Duration,
    ) {
        self.api_requests
            .get_or_create(&labels(&[
                ("front_end", front_end),
                ("route", route),
                ("method", method),
                ("status", status),
            ]))
            .inc();
        self.api_request_duration
            .get_or_create(&labels(&[("route", route)]))
            .observe(duration.as_secs_f64());
    }

    /// One telemetry poll of every GPU.
    pub fn telemetry_polled(&self, duration: Duration) {
        self.telemetry_poll_duration.observe(duration.as_secs_f64());
    }

    /// A GPU whose telemetry could not be read (failed or timed out).
    pub fn telemetry_error(&self, pci_bus_id: &str) {
        self.telemetry_errors
            .get_or_create(&labels(&[("pci_bus_id", pci_bus_id)]))
            .inc();
    }

    /// One check of an allocation request's Placement consumer: `match`, `mismatch` or
    /// `unavailable` (Placement could not be read).
    pub fn placement_consumer_checked(&self, outcome: &str) {
        self.placement_consumer_checks
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
    }

    /// Warm-pool slices of `slice_type`: `made` ahead of demand, or `given_up` for a request
    /// that needed their room.
    pub fn warm_pool(&self, event: &str, slice_type: &str, n: u64) {
        self.warm_pool_slices
            .get_or_create(&labels(&[("event", event), ("type", slice_type)]))
            .inc_by(n);
    }

    /// The demand mix the engine has learnt, shares included: at start and when it is saved.
    pub fn set_demand_mix(&self, mix: &sched::MixEstimator) {
        self.demand_mix.set(mix);
    }

    /// The demand mix's request count and prior share only, after each counted request.
    pub fn set_demand_mix_counts(&self, mix: &sched::MixEstimator) {
        self.demand_mix.set_counts(mix);
    }

    /// Registers every counter and histogram (shared, not copied) in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        self.demand_mix.register(registry);
        registry.register(
            "vgpud_allocation_duration_seconds",
            "Allocation requests from received to slices ready",
            self.allocation_duration.clone(),
        );
        registry.register(
            "vgpud_allocation_wait_seconds",
            "Time an allocation request waited before the engine started it",
            self.allocation_wait.clone(),
        );
        registry.register(
            "vgpud_allocation_requests",
            "Allocation requests by outcome and failure reason",
            self.allocation_requests.clone(),
        );
        registry.register(
            "vgpud_consumer_slice_seconds",
            "Slice-seconds held per consumer (divide by 3600 for slice-hours)",
            self.consumer_slice_seconds.clone(),
        );
        registry.register(
            "vgpud_vendor_call_duration_seconds",
            "Vendor library (NVML, AMD SMI) call latency by call",
            self.vendor_call_duration.clone(),
        );
        registry.register(
            "vgpud_vendor_call_errors",
            "Vendor library calls that failed, by call and return code",
            self.vendor_call_errors.clone(),
        );
        registry.register(
            "vgpud_reconcile_runs",
            "Reconcile passes by outcome",
            self.reconcile_runs.clone(),
        );
        registry.register(
            "vgpud_reconcile_drift",
            "Slices reconcile found out of line (recreated, failed, given up)",
            self.reconcile_drift.clone(),
        );
        registry.register(
            "vgpud_reconcile_duration_seconds",
            "Reconcile pass duration",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "vgpud_api_requests",
            "API requests by front end, route, method and status",
            self.api_requests.clone(),
        );
        registry.register(
            "vgpud_api_request_duration_seconds",
            "API request duration by route",
            self.api_request_duration.clone(),
        );
        registry.register(
            "vgpud_telemetry_poll_duration_seconds",
            "Duration of one telemetry poll of every GPU",
            self.telemetry_poll_duration.clone(),
        );
        registry.register(
            "vgpud_telemetry_errors",
            "Telemetry readings of a GPU that failed or timed out",
            self.telemetry_errors.clone(),
        );
        registry.register(
            "vgpud_placement_consumer_checks",
            "Checks of allocation requests' Placement consumers by outcome",
            self.placement_consumer_checks.clone(),
        );
        registry.register(
            "vgpud_warm_pool_slices",
            "Warm-pool slices made ahead of demand or given up for a request, by type",
            self.warm_pool_slices.clone(),
        );
    }
}
