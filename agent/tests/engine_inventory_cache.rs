//! The engine's kept inventory (`inventory_cache`): current after the engine's own changes
//! to the host, and kept across a change made behind its back until it is told of one (a
//! device event, a reconcile).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use testkit::*;

const A100: &str = "0000:07:00.0";
const LAST: &str = "0000:bd:00.0";

fn slices_on(e: &agent::engine::Engine, gpu: &str) -> usize {
    let inv = e.inventory();
    let g = inv.gpus.iter().find(|g| g.pci_address == addr(gpu));
    g.expect("the GPU is in the inventory").slices.len()
}

#[test]
fn a_slice_the_engine_made_or_destroyed_shows_in_the_next_inventory() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    e.reconcile().unwrap();
    let before = slices_on(&e, A100);
    let s = create(&e, A100, mig_kind("1g.10gb", None)).unwrap();
    assert_eq!(slices_on(&e, A100), before + 1);
    e.destroy_slice(s.id).unwrap();
    assert_eq!(slices_on(&e, A100), before);
}

/// An engine on a reconciled dgx-a100 whose last GPU was then removed behind its back; the
/// GPU count it saw before.
fn reconciled_then_last_gpu_removed() -> (
    sim::SimHost,
    tempfile::TempDir,
    agent::engine::Engine,
    usize,
) {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    e.reconcile().unwrap();
    let gpus = e.inventory().gpus.len();
    h.remove_gpu(addr(LAST)).unwrap();
    (h, dir, e, gpus)
}

#[test]
fn a_change_behind_the_engines_back_shows_once_the_engine_is_told() {
    let (h, _dir, e, gpus) = reconciled_then_last_gpu_removed();
    // Kept: nothing announced the removal yet (the daemon's hot-plug loop would).
    assert_eq!(e.inventory().gpus.len(), gpus);
    e.host_changed();
    assert_eq!(e.inventory().gpus.len(), gpus - 1);
    h.add_gpu(addr(LAST)).unwrap();
    // A reconcile looks at the host as it is.
    e.reconcile().unwrap();
    assert_eq!(e.inventory().gpus.len(), gpus);
}

#[test]
fn an_unannounced_change_shows_after_the_backstop_without_a_reader_waiting_for_it() {
    let (_h, _dir, e, gpus) = reconciled_then_last_gpu_removed();
    std::thread::sleep(agent::engine::INVENTORY_MAX_AGE);
    // The first reader after the backstop still gets the kept one (the re-discovery runs on
    // a thread of its own); a later reader sees the host as it is.
    assert_eq!(e.inventory().gpus.len(), gpus);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while e.inventory().gpus.len() == gpus {
        assert!(
            std::time::Instant::now() < deadline,
            "the removal never showed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(e.inventory().gpus.len(), gpus - 1);
}

/// Another GPU of each profile below, whose `numa_node` is made unreadable after the first
/// inventory: a whole discovery then warns about it, a refresh of the changed GPU alone does not.
fn other_gpu(profile: &str) -> &'static str {
    match profile {
        "dgx-a100" => LAST,
        "hgx-h200" => "0000:2a:00.0",
        _ => "0000:42:00.0",
    }
}

/// Makes a slice of `kind` on `gpu` through the engine, then destroys it, and after each
/// compares the engine's inventory with a whole discovery of the host: the changed GPU and the
/// PCI functions read the same. Returns whether the engine read the other GPU again (a whole
/// discovery) after the create.
fn refreshed_like_a_discovery(profile: &str, gpu: &str, kind: agent::engine::SliceKind) -> bool {
    let h = sim(profile);
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    e.reconcile().unwrap();
    let _ = e.inventory();
    let other = other_gpu(profile);
    fault(
        &h,
        &format!("read:/sys/bus/pci/devices/{other}/numa_node=EIO"),
    );
    let warned = |inv: &inventory::HostInventory| {
        let g = inv.gpus.iter().find(|g| g.pci_address == addr(other));
        let g = g.expect("the other GPU is listed");
        g.warnings.iter().any(|w| w.contains("numa_node"))
    };
    let same = |when: &str| {
        let kept = e.inventory();
        let fresh = inventory::discover(&sim_access(&h));
        let find = |inv: &inventory::HostInventory| {
            inv.gpus
                .iter()
                .find(|g| g.pci_address == addr(gpu))
                .cloned()
        };
        assert_eq!(find(&kept), find(&fresh), "{profile} {gpu} {when}");
        let not_other = |inv: &inventory::HostInventory| {
            (inv.pci_devices.iter())
                .filter(|p| p.pci_address != addr(other))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(not_other(&kept), not_other(&fresh), "{profile} {when}");
        assert!(warned(&fresh), "the fault shows in a discovery");
        warned(&kept)
    };
    let s = e
        .create_slice(agent::engine::CreateSlice {
            spec: spec(gpu, kind),
            owner: None,
        })
        .unwrap();
    let rediscovered = same("after the create");
    e.destroy_slice(s.id).unwrap();
    same("after the destroy");
    rediscovered
}

#[test]
fn a_change_to_one_gpu_is_read_again_on_that_gpu_alone() {
    let vgpu = agent::engine::SliceKind::NvidiaVfio {
        vgpu_type: "1421".parse().unwrap(),
        start: None,
    };
    let cases = [
        ("dgx-a100", A100, mig_kind("1g.10gb", None)),
        ("vdi-mixed", "0000:41:00.0", mdev_kind("nvidia-222")),
        (
            "vdi-mixed",
            "0000:c1:00.0",
            agent::engine::SliceKind::SriovVf,
        ),
        ("hgx-h200", "0000:18:00.0", vgpu),
    ];
    for (profile, gpu, kind) in cases {
        assert!(
            !refreshed_like_a_discovery(profile, gpu, kind.clone()),
            "{profile} {gpu}: only the changed GPU is read again"
        );
    }
}

#[test]
fn a_gpu_that_changes_driver_makes_the_whole_host_read_again() {
    // NVML numbers the GPUs its driver holds: one that leaves it can renumber the others.
    let passthrough = agent::engine::SliceKind::Passthrough;
    assert!(refreshed_like_a_discovery(
        "vdi-mixed",
        "0000:41:00.0",
        passthrough
    ));
}

/// The GPUs a placement score for one slice of `t` weighs as offering it: its candidates and
/// those left out for want of room for the type (a GPU that does not offer it is left out
/// without naming the type).
fn gpus_weighed(s: &agent::service::Service, t: &str) -> Vec<ids::PciAddress> {
    let score = s
        .placement_score(agent::engine::SliceRequest::new(t, 1))
        .unwrap();
    let ex = score.explanation.expect("the score explains itself");
    let mut gpus: Vec<_> = (ex.candidates.iter())
        .flat_map(|c| c.placements.iter().map(|p| p.gpu))
        .chain(
            ex.excluded
                .iter()
                .filter(|v| v.reason.contains(t))
                .map(|v| v.gpu),
        )
        .collect();
    gpus.sort();
    gpus.dedup();
    gpus
}

#[test]
fn a_gpu_that_stops_offering_a_type_drops_out_of_the_kept_candidates() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let s = agent::service::Service::with_options(
        engine(&h, dir.path()),
        agent::service::ServiceOptions {
            policy: sched::Policy::default(),
            pinning: None,
            ..Default::default()
        },
    );
    let (t4, t4b) = (addr("0000:41:00.0"), addr("0000:42:00.0"));
    assert_eq!(gpus_weighed(&s, "nvidia-222"), vec![t4, t4b]);
    // Passed through, the second T4 has no mdev parent: it offers no mdev type.
    create(
        s.engine(),
        "0000:42:00.0",
        agent::engine::SliceKind::Passthrough,
    )
    .unwrap();
    assert_eq!(gpus_weighed(&s, "nvidia-222"), vec![t4]);
    // A slice of the type on the first T4 changes that GPU, which still offers it.
    create(s.engine(), "0000:41:00.0", mdev_kind("nvidia-222")).unwrap();
    assert_eq!(gpus_weighed(&s, "nvidia-222"), vec![t4]);
}
