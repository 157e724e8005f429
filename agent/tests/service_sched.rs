//! The scheduler as the service uses it: placement choices visible through allocate, the
//! placement score, GPU detail and defragmentation advice, on simulated hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{AllocationRequest, Identity, NumaPolicy, Slice, SliceKind, SliceRequest};
use agent::service::{GpuHealth, Service, ServiceOptions};
use testkit::*;

const GPU0: &str = "0000:07:00.0";

fn service(profile: &str, policy: sched::Policy) -> (Service, sim::SimHost, tempfile::TempDir) {
    let h = sim(profile);
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let s = Service::with_options(
        e,
        ServiceOptions {
            policy,
            pinning: None,
            ..Default::default()
        },
    );
    (s, h, dir)
}

fn alloc(s: &Service, consumer: &str, t: &str) -> Vec<Slice> {
    let a = s
        .allocate(AllocationRequest {
            consumer: consumer.into(),
            vm: None,
            request: SliceRequest::new(t, 1),
            placement_consumer: None,
        })
        .unwrap();
    a.slices.iter().map(|id| s.slice(*id).unwrap()).collect()
}

/// The default policy with a fixed mix: the A100's seven MIG profiles, equally likely (what the
/// learnt mix starts from).
fn offered_a100_profiles() -> sched::Policy {
    let items = [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    .iter()
    .map(|p| sched::WorkItem::slice(sched::SliceRequest::Mig(p.parse().unwrap()), 1.0))
    .collect();
    sched::Policy::FragAware(sched::Workload { items })
}

fn mig_start(slice: &Slice) -> u32 {
    match &slice.identity {
        Identity::Mig { start, .. } => *start,
        other => panic!("not MIG: {other:?}"),
    }
}

#[test]
fn mig_1g_then_4g_share_a_gpu_under_the_default_policy_but_not_first_fit() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let one = alloc(&s, "a", "1g.10gb");
    let four = alloc(&s, "b", "4g.40gb");
    // The 1g keeps out of slots 0-3, so the 4g (which only starts at 0) fits beside it and the
    // other seven GPUs stay empty.
    assert!(mig_start(&one[0]) >= 4, "{:?}", one[0].identity);
    assert_eq!(four[0].spec.gpu, one[0].spec.gpu);
    assert_eq!(mig_start(&four[0]), 0);
    // A 3g after another 1g goes to the same GPU's free half rather than to an empty GPU, when
    // every offered profile is equally likely. (The default policy learns the mix from the
    // requests: after these two, 1g and 3g count more, and the 3g then goes to an empty GPU,
    // keeping 0-3 free beside the 1g for another 3g or a 4g.)
    let (s, _h, _d) = service("dgx-a100", offered_a100_profiles());
    let one = alloc(&s, "a", "1g.10gb");
    let three = alloc(&s, "b", "3g.40gb");
    assert_eq!(three[0].spec.gpu, one[0].spec.gpu);
    assert_eq!(mig_start(&three[0]), 0);

    // First fit puts the 1g at slot 0 and the 4g has to break a second GPU.
    let (s, _h, _d) = service("dgx-a100", sched::Policy::FirstFit);
    let one = alloc(&s, "a", "1g.10gb");
    let four = alloc(&s, "b", "4g.40gb");
    assert_eq!(mig_start(&one[0]), 0);
    assert_ne!(four[0].spec.gpu, one[0].spec.gpu);
}

#[test]
fn several_slices_pack_and_an_explicit_gpu_is_kept() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let a = s
        .allocate(AllocationRequest {
            consumer: "vm".into(),
            vm: None,
            request: SliceRequest::new("3g.40gb", 2),
            placement_consumer: None,
        })
        .unwrap();
    let gpus: Vec<_> = a
        .slices
        .iter()
        .map(|id| s.slice(*id).unwrap().spec.gpu)
        .collect();
    assert_eq!(gpus[0], gpus[1], "two 3g fill one GPU: {gpus:?}");
    let mut req = SliceRequest::new("1g.10gb", 1);
    req.gpu = Some(addr("0000:bd:00.0"));
    let b = s
        .allocate(AllocationRequest {
            consumer: "pinned".into(),
            vm: None,
            request: req,
            placement_consumer: None,
        })
        .unwrap();
    assert_eq!(s.slice(b.slices[0]).unwrap().spec.gpu, addr("0000:bd:00.0"));
}

#[test]
fn free_layout_slices_are_reused_before_new_ones_are_made() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    // Two free 1g slices on the last GPU (explicit placements).
    for start in [0, 1] {
        create(s.engine(), "0000:bd:00.0", mig_kind("1g.10gb", Some(start))).unwrap();
    }
    let before: Vec<_> = s.slices().iter().map(|x| x.id).collect();
    let got = alloc(&s, "a", "1g.10gb");
    assert!(before.contains(&got[0].id), "a free slice was reused");
    assert_eq!(s.slices().len(), 2, "nothing new was made");
}

#[test]
fn required_numa_without_room_is_refused_and_nothing_is_made() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let mut req = SliceRequest::new("3g.40gb", 1);
    req.numa_policy = Some(NumaPolicy::Required);
    req.vcpus = Some(500);
    let err = s
        .allocate(AllocationRequest {
            consumer: "big".into(),
            vm: None,
            request: req.clone(),
            placement_consumer: None,
        })
        .unwrap_err();
    assert_eq!(err.code(), "no_capacity", "{err}");
    assert!(err.to_string().contains("NUMA"), "{err}");
    assert!(s.slices().is_empty());
    assert!(s.allocations().is_empty());
    // Preferred: placed anyway.
    req.numa_policy = Some(NumaPolicy::Preferred);
    req.vcpus = Some(16);
    s.allocate(AllocationRequest {
        consumer: "ok".into(),
        vm: None,
        request: req,
        placement_consumer: None,
    })
    .unwrap();
}

#[test]
fn placement_score_is_a_dry_run() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let score = s.placement_score(SliceRequest::new("3g.40gb", 1)).unwrap();
    assert!(score.feasible, "{score:?}");
    assert!(score.numa_local);
    assert_eq!(score.policy, "vgpud");
    assert_eq!(score.placements.len(), 1);
    assert!(score.explanation.as_ref().unwrap().candidates.len() >= 8);
    assert!((score.host_free_after - 7.5).abs() < 1e-9, "{score:?}");
    // MIG slices leave no dead capacity (sched measures it on fractional GPUs) and the
    // default workload asks for no CPUs, so the score is fragmentation and fullness alone.
    assert_eq!(score.waste_added, 0.0, "{score:?}");
    assert!(
        (score.score + score.fragmentation_added + 0.001 * score.host_free_after).abs() < 1e-9,
        "{score:?}"
    );
    assert!(s.slices().is_empty(), "nothing was made");

    // After a 1g on one GPU, a second 1g scores best on that GPU, and fragments less than the
    // first did on an empty host.
    let one = alloc(&s, "a", "1g.10gb");
    let again = s.placement_score(SliceRequest::new("1g.10gb", 1)).unwrap();
    assert_eq!(again.placements[0].gpu, one[0].spec.gpu);

    // A whole-GPU profile on that GPU: infeasible, with the reason.
    let mut seven = SliceRequest::new("7g.80gb", 1);
    seven.gpu = one[0].spec.gpu.pci();
    let no = s.placement_score(seven).unwrap();
    assert!(!no.feasible);
    assert!(no.reason.unwrap().contains(&one[0].spec.gpu.to_string()));
    // A type no GPU offers is a bad request, not a score.
    assert_eq!(
        s.placement_score(SliceRequest::new("9g.99gb", 1))
            .unwrap_err()
            .code(),
        "invalid_request"
    );
}

#[test]
fn gpu_detail_has_health_utilisation_and_capacity_per_type() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let d = s.gpu(addr(GPU0)).unwrap();
    assert_eq!(d.health, GpuHealth::Ok, "{:?}", d.health_reasons);
    assert!(d.utilization.is_some());
    let cap = |d: &agent::service::GpuDetail, t: &str| {
        d.capacity
            .iter()
            .find(|c| c.slice_type == t)
            .cloned()
            .unwrap_or_else(|| panic!("{t} missing: {:?}", d.capacity))
    };
    assert_eq!(cap(&d, "3g.40gb").creatable, 2);
    assert_eq!(cap(&d, "1g.10gb").creatable, 7);
    assert_eq!(cap(&d, "7g.80gb").creatable, 1);
    let three = SliceKind::Mig {
        profile: "3g.40gb".parse().unwrap(),
        start: Some(0),
    };
    create(s.engine(), GPU0, three).unwrap();
    let d = s.gpu(addr(GPU0)).unwrap();
    assert_eq!(cap(&d, "3g.40gb").creatable, 1);
    assert_eq!(cap(&d, "3g.40gb").free, 1);
    assert_eq!(cap(&d, "7g.80gb").creatable, 0);
    // The JSON form keeps the inventory's fields at the top level.
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["pci_address"], GPU0);
    assert_eq!(json["health"], "ok");
    assert_eq!(s.gpu(addr("0000:99:00.0")).unwrap_err().code(), "not_found");
}

#[test]
fn defrag_advice_moves_idle_slices() {
    let (s, _h, _d) = service("dgx-a100", sched::Policy::default());
    let gpus: Vec<_> = s.host().gpus.iter().map(|g| g.pci_address).collect();
    // An idle 1g at slot 0 of every GPU: no 7g fits anywhere.
    for g in &gpus {
        create(s.engine(), &g.to_string(), mig_kind("1g.10gb", Some(0))).unwrap();
    }
    let seven = SliceRequest::new("7g.80gb", 1);
    assert!(!s.placement_score(seven.clone()).unwrap().feasible);
    match s.defrag_advice(seven.clone(), false).unwrap() {
        sched::DefragAdvice::Plan(p) => {
            assert_eq!(p.moves.len(), 1, "{p:?}");
            assert_eq!(p.cost, sched::IDLE_MOVE_COST);
            assert_eq!(p.then.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    let small = SliceRequest::new("1g.10gb", 1);
    assert_eq!(
        s.defrag_advice(small, false).unwrap(),
        sched::DefragAdvice::FitsNow
    );
}

#[test]
fn whole_gpus_and_mdevs_are_scheduled_too() {
    let (s, _h, _d) = service("vdi-mixed", sched::Policy::default());
    let a = alloc(&s, "a", "gpu");
    assert_eq!(a[0].spec.kind, SliceKind::Passthrough);
    // An mdev type of the T4s: the scheduler picks one of them.
    let t4 = s
        .host()
        .gpus
        .iter()
        .find(|g| g.model.contains("T4") && g.pci_address != a[0].spec.gpu)
        .map(|g| g.mdev_types[0].id.to_string())
        .unwrap();
    let m = alloc(&s, "b", &t4);
    assert!(m[0].handles.mdev_uuid.is_some());
}
