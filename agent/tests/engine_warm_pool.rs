//! The warm pool in the engine: a pool slice is made where the scheduler would place the type,
//! on GPUs no layout selects; a request claims it without creating anything; a request that
//! needs the room of free pool slices gets it (they are destroyed, never it refused); the pool
//! is remembered across a restart; a released slice joins the pool after one pass free, and a
//! pool over its size is trimmed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use testkit::*;

const A100: &str = "0000:07:00.0";

#[test]
fn pool_slices_are_claimed_by_requests_and_give_way_to_bigger_ones() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let made = e.warm_one("1g.10gb").unwrap().expect("room for a 1g.10gb");
    assert_eq!(e.warm_pool_free(), vec![made]);
    let slice = e.slice(made).unwrap();
    assert!(slice.owner.is_none(), "{slice:?}");

    // A request for the type claims the pool slice: nothing new is made.
    let before = e.slices().len();
    let alloc = e.allocate(request("vm1", "1g.10gb", None)).unwrap();
    assert_eq!(alloc.slices, vec![made]);
    assert_eq!(e.slices().len(), before);
    assert!(e.warm_pool_free().is_empty());
    // Released, it is the pool's again.
    e.release(alloc.id).unwrap();
    assert_eq!(e.warm_pool_free(), vec![made]);

    // Fill one GPU's free room with pool slices of the small type (the scheduler packs them)...
    let gpu_of = |id| e.slice(id).unwrap().spec.gpu.to_string();
    let mut on_gpu = vec![made];
    while on_gpu.len() < 7 {
        let id = e.warm_one("1g.10gb").unwrap().expect("room");
        if gpu_of(id) == gpu_of(made) {
            on_gpu.push(id);
        }
    }
    // ...then a whole-GPU MIG profile on that GPU: the pool gives way, the request is served.
    let target = gpu_of(made);
    let big = e
        .allocate(request("vm2", "7g.80gb", Some(&target)))
        .unwrap();
    assert_eq!(big.slices.len(), 1);
    for id in &on_gpu {
        assert!(e.slice(*id).is_err(), "pool slice {id} still there");
    }
    // The pool is remembered across a restart.
    e.warm_one("1g.10gb").unwrap().expect("room on another GPU");
    let left = e.warm_pool_free();
    assert_eq!(left.len(), 1);
    drop(e);
    let e = engine(&h, dir.path());
    assert_eq!(e.warm_pool_free(), left);
}

#[test]
fn the_pool_stays_off_gpus_a_layout_selects() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    e.set_layouts(vec![gpu_layout(A100, &[("1g.10gb", 1)])])
        .unwrap();
    for _ in 0..10 {
        let id = e.warm_one("1g.10gb").unwrap().expect("room elsewhere");
        assert_ne!(e.slice(id).unwrap().spec.gpu.to_string(), A100);
    }
}

#[test]
fn released_slices_join_the_pool_and_a_pool_over_its_size_is_trimmed() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let pool = agent::warm_pool::WarmPool::new(agent::config::WarmPoolConfig {
        enabled: true,
        size: 3,
        ..Default::default()
    });
    // No demand yet: nothing made (the pass starts the engine tracking releases).
    assert_eq!(pool.refill(&e), 0);
    // A slice a client made itself and never allocated is never the pool's.
    let own = create(&e, A100, mig_kind("2g.20gb", None)).unwrap().id;
    // Four VMs of another type, released but not destroyed: five free slices, over the size.
    let allocs: Vec<_> = (0..4)
        .map(|i| {
            e.allocate(request(&format!("vm{i}"), "1g.10gb", None))
                .unwrap()
        })
        .collect();
    for a in &allocs {
        e.release(a.id).unwrap();
    }
    let released: Vec<_> = allocs.iter().map(|a| a.slices[0]).collect();
    // The first pass only notes them (a client that destroys what it releases comes first).
    assert_eq!(pool.refill(&e), 0);
    assert!(e.warm_pool_free().is_empty());
    // The second takes them and trims what the pool's three slots do not want (how many of
    // them are 1g.10gb depends on the prior still in the mix after four requests; the client's
    // slice is over the size too, but it is not the pool's to destroy).
    assert_eq!(pool.refill(&e), 0);
    let kept = e.warm_pool_free();
    assert!((1..4).contains(&kept.len()), "{kept:?}");
    assert!(kept.iter().all(|id| released.contains(id)), "{kept:?}");
    assert_eq!(e.slices().len(), kept.len() + 1, "the rest was destroyed");
    assert!(e.slice(own).is_ok(), "the client's own slice stays");
    // Kept slices are the pool's (the same record as the ones it made, so they give way the
    // same): the next request of the type claims one.
    let next = e.allocate(request("vm9", "1g.10gb", None)).unwrap();
    assert!(kept.contains(&next.slices[0]), "{next:?}");
}
