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
