//! Allocation requests naming a Placement consumer, as the service handles them on the simulated
//! DGX A100: pinned to the GPU whose provider holds the consumer's allocation, refused under
//! strict checking when it holds none (or Placement cannot be read), warned about and allocated
//! as asked otherwise, and counted by outcome. The check here judges fixed
//! `GET /allocations/{consumer}` documents; the real Placement is the lead's integration tests'.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ::placement::model::ConsumerAllocations;
use agent::engine::{AllocationRequest, EngineError, SliceRequest};
use agent::placement::consumer::{ConsumerCheck, ConsumerVerdict, ProviderMap, judge};
use agent::service::Service;
use testkit::*;
use uuid::Uuid;

const GPU_FIRST: &str = "0000:07:00.0";
const GPU_LAST: &str = "0000:bd:00.0";
const PROV_FIRST: &str = "7d1b0c3a-5f4e-4b9a-9c1d-2e3f4a5b6c7d";
const PROV_LAST: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
const ROOT: &str = "c0ffee00-1111-4222-8333-444455556666";
const INSTANCE: &str = "9b3e2f1a-0c4d-4e5f-8a6b-7c8d9e0f1a2b";

/// Placement as fixed documents: what each consumer holds, or down.
#[derive(Debug)]
struct FixedPlacement {
    map: ProviderMap,
    held: Mutex<BTreeMap<Uuid, ConsumerAllocations>>,
    down: AtomicBool,
    reporting: bool,
    strict: bool,
    calls: AtomicUsize,
}

impl FixedPlacement {
    fn new(strict: bool) -> Arc<Self> {
        let mut map = ProviderMap::new();
        for (p, g) in [(PROV_FIRST, GPU_FIRST), (PROV_LAST, GPU_LAST)] {
            map.add_gpu(
                p.parse().unwrap(),
                addr(g),
                [
                    ("CUSTOM_MIG_3G_40GB", "3g.40gb"),
                    ("CUSTOM_MIG_1G_10GB", "1g.10gb"),
                ],
            );
        }
        Arc::new(Self {
            map,
            held: Mutex::default(),
            down: AtomicBool::new(false),
            reporting: true,
            strict,
            calls: AtomicUsize::new(0),
        })
    }

    /// The consumer's `GET /allocations/{consumer}` answer from now on.
    fn holds(&self, consumer: &str, allocations: &str) {
        let doc: ConsumerAllocations = serde_json::from_str(&format!(
            r#"{{"allocations": {allocations}, "consumer_generation": 1,
                "project_id": "6f70656e", "user_id": "admin", "consumer_type": "INSTANCE"}}"#
        ))
        .unwrap();
        self.held
            .lock()
            .unwrap()
            .insert(consumer.parse().unwrap(), doc);
    }
}

impl ConsumerCheck for FixedPlacement {
    fn check(
        &self,
        consumer: Uuid,
        request: &SliceRequest,
    ) -> Result<Option<ConsumerVerdict>, EngineError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.reporting {
            return Ok(None);
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(EngineError::PlacementUnavailable(
                "connecting to http://controller:8778: connection refused".into(),
            ));
        }
        let held = self
            .held
            .lock()
            .unwrap()
            .get(&consumer)
            .cloned()
            .unwrap_or_default();
        Ok(Some(judge(&self.map, &held, request)))
    }

    fn strict(&self) -> bool {
        self.strict
    }
}

fn checked(check: Arc<FixedPlacement>) -> (sim::SimHost, Service, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (h, s) = service("dgx-a100", dir.path());
    (h, s.with_consumer_check(check), dir)
}

fn ask(t: &str, count: u32, consumer: Option<&str>) -> AllocationRequest {
    AllocationRequest {
        consumer: "nova".into(),
        vm: None,
        request: SliceRequest::new(t, count),
        placement_consumer: consumer.map(|c| c.parse().unwrap()),
    }
}

fn gpus_of(s: &Service, a: &agent::engine::Allocation) -> Vec<ids::PciAddress> {
    a.slices
        .iter()
        .map(|id| s.slice(*id).unwrap().spec.gpu.pci().unwrap())
        .collect()
}

fn checks(s: &Service, outcome: &str) -> Option<f64> {
    let text = s.metrics_text().unwrap();
    let prefix = format!("vgpud_placement_consumer_checks_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

#[test]
fn a_matching_allocation_pins_the_request_to_its_gpu_and_is_recorded() {
    let placement = FixedPlacement::new(true);
    placement.holds(
        INSTANCE,
        &format!(
            r#"{{"{ROOT}": {{"resources": {{"VCPU": 8, "MEMORY_MB": 16384}}}},
                "{PROV_LAST}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 2}}}}}}"#
        ),
    );
    let (_h, s, _d) = checked(placement.clone());
    // Left to itself the scheduler puts the first request elsewhere.
    let free = s.allocate(ask("3g.40gb", 2, None)).unwrap();
    assert_ne!(gpus_of(&s, &free), vec![addr(GPU_LAST); 2]);
    assert_eq!(
        placement.calls.load(Ordering::SeqCst),
        0,
        "no consumer, no check"
    );
    s.release(free.id).unwrap();

    let a = s.allocate(ask("3g.40gb", 2, Some(INSTANCE))).unwrap();
    assert_eq!(gpus_of(&s, &a), vec![addr(GPU_LAST); 2]);
    assert_eq!(a.placement_consumer, Some(INSTANCE.parse().unwrap()));
    // As asked: the pin is Placement's, not the request's.
    assert_eq!(a.request.as_ref().unwrap().gpu, None);
    assert_eq!(
        s.allocation(a.id).unwrap().placement_consumer,
        a.placement_consumer
    );
    assert_eq!(checks(&s, "match"), Some(1.0));
    assert_eq!(checks(&s, "mismatch"), None);
}

#[test]
fn strict_refuses_a_mismatch_and_allocates_nothing() {
    let placement = FixedPlacement::new(true);
    placement.holds(
        INSTANCE,
        &format!(r#"{{"{PROV_FIRST}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#),
    );
    let (_h, s, _d) = checked(placement);
    let slices_before = s.slices().len();
    // Another count than Placement holds.
    let err = s.allocate(ask("3g.40gb", 2, Some(INSTANCE))).unwrap_err();
    assert_eq!(err.code(), "placement_mismatch", "{err}");
    assert!(err.to_string().contains(INSTANCE), "{err}");
    assert!(err.to_string().contains("asks for 2"), "{err}");
    // Another type.
    let err = s.allocate(ask("1g.10gb", 1, Some(INSTANCE))).unwrap_err();
    assert_eq!(err.code(), "placement_mismatch", "{err}");
    // Another GPU than Placement's.
    let mut r = ask("3g.40gb", 1, Some(INSTANCE));
    r.request.gpu = Some(addr(GPU_LAST));
    let err = s.allocate(r).unwrap_err();
    assert_eq!(err.code(), "placement_mismatch", "{err}");
    assert!(err.to_string().contains("names GPU 0000:bd:00.0"), "{err}");
    // A consumer Placement knows nothing of.
    let err = s
        .allocate(ask(
            "3g.40gb",
            1,
            Some("00000000-0000-4000-8000-00000000abcd"),
        ))
        .unwrap_err();
    assert_eq!(err.code(), "placement_mismatch", "{err}");
    assert!(s.allocations().is_empty());
    assert_eq!(s.slices().len(), slices_before, "nothing made");
    assert_eq!(checks(&s, "mismatch"), Some(4.0));
    assert_eq!(checks(&s, "match"), None);
    // The request as Placement holds it goes through.
    let a = s.allocate(ask("3g.40gb", 1, Some(INSTANCE))).unwrap();
    assert_eq!(gpus_of(&s, &a), vec![addr(GPU_FIRST)]);
}

#[test]
fn without_strict_a_mismatch_is_allocated_as_asked_and_counted() {
    let placement = FixedPlacement::new(false);
    placement.holds(
        INSTANCE,
        &format!(r#"{{"{PROV_FIRST}": {{"resources": {{"CUSTOM_MIG_1G_10GB": 1}}}}}}"#),
    );
    let (_h, s, _d) = checked(placement);
    let mut r = ask("3g.40gb", 1, Some(INSTANCE));
    r.request.gpu = Some(addr(GPU_LAST));
    let a = s.allocate(r).unwrap();
    assert_eq!(gpus_of(&s, &a), vec![addr(GPU_LAST)], "where it asked");
    assert_eq!(a.placement_consumer, Some(INSTANCE.parse().unwrap()));
    assert_eq!(checks(&s, "mismatch"), Some(1.0));
}

#[test]
fn placement_down_refuses_under_strict_and_is_warned_about_otherwise() {
    let strict = FixedPlacement::new(true);
    strict.down.store(true, Ordering::SeqCst);
    let (_h, s, _d) = checked(strict);
    let err = s.allocate(ask("1g.10gb", 1, Some(INSTANCE))).unwrap_err();
    assert_eq!(err.code(), "placement_unavailable", "{err}");
    assert!(err.to_string().contains("connection refused"), "{err}");
    assert!(s.allocations().is_empty());
    assert_eq!(checks(&s, "unavailable"), Some(1.0));

    let lenient = FixedPlacement::new(false);
    lenient.down.store(true, Ordering::SeqCst);
    let (_h, s, _d) = checked(lenient);
    let a = s.allocate(ask("1g.10gb", 1, Some(INSTANCE))).unwrap();
    assert_eq!(a.placement_consumer, Some(INSTANCE.parse().unwrap()));
    assert_eq!(checks(&s, "unavailable"), Some(1.0));
}

#[test]
fn reporting_off_checks_nothing() {
    let off = Arc::new(FixedPlacement {
        reporting: false,
        ..Arc::into_inner(FixedPlacement::new(true)).unwrap()
    });
    let (_h, s, _d) = checked(off.clone());
    let a = s.allocate(ask("1g.10gb", 1, Some(INSTANCE))).unwrap();
    assert_eq!(a.placement_consumer, Some(INSTANCE.parse().unwrap()));
    assert_eq!(off.calls.load(Ordering::SeqCst), 1);
    for outcome in ["match", "mismatch", "unavailable"] {
        assert_eq!(checks(&s, outcome), None, "{outcome}");
    }
}

#[test]
fn a_retry_with_the_key_is_the_same_request_only_with_the_same_consumer() {
    let placement = FixedPlacement::new(false);
    placement.holds(
        INSTANCE,
        &format!(r#"{{"{PROV_LAST}": {{"resources": {{"CUSTOM_MIG_1G_10GB": 1}}}}}}"#),
    );
    let (_h, s, _d) = checked(placement.clone());
    let keyed = |consumer: Option<&str>| {
        let mut r = ask("1g.10gb", 1, consumer);
        r.request.idempotency_key = Some("boot-1".into());
        r
    };
    let first = s.allocate(keyed(Some(INSTANCE))).unwrap();
    assert_eq!(gpus_of(&s, &first), vec![addr(GPU_LAST)]);
    // Placement down at the retry: still the same request, the same allocation.
    placement.down.store(true, Ordering::SeqCst);
    let again = s.allocate(keyed(Some(INSTANCE))).unwrap();
    assert_eq!(again.id, first.id);
    placement.down.store(false, Ordering::SeqCst);
    // The key with another consumer, or none, is another request.
    for other in [Some("00000000-0000-4000-8000-00000000abcd"), None] {
        let err = s.allocate(keyed(other)).unwrap_err();
        assert_eq!(err.code(), "conflict", "{other:?}: {err}");
    }
    assert_eq!(s.allocations().len(), 1);
}

#[test]
fn an_allocation_placement_split_over_two_gpus_is_made_on_both() {
    // `resources_A=CUSTOM_MIG_3G_40GB:1&resources_B=CUSTOM_MIG_3G_40GB:1&group_policy=isolate`:
    // one slice on each GPU, where the scheduler alone would pack both on one.
    let check = FixedPlacement::new(true);
    check.holds(
        INSTANCE,
        &format!(
            r#"{{"{PROV_FIRST}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}},
                "{PROV_LAST}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
        ),
    );
    let (_h, s, _dir) = checked(check);
    let a = s.allocate(ask("3g.40gb", 2, Some(INSTANCE))).unwrap();
    let mut on = gpus_of(&s, &a);
    on.sort();
    assert_eq!(on, vec![addr(GPU_FIRST), addr(GPU_LAST)]);
}
