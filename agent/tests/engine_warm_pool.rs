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
        size: 2,
        ..Default::default()
    });
    // Three VMs of one type, released but not destroyed: three free slices outside the pool.
    let allocs: Vec<_> = (0..3)
        .map(|i| {
            e.allocate(request(&format!("vm{i}"), "1g.10gb", None))
                .unwrap()
        })
        .collect();
    for a in &allocs {
        e.release(a.id).unwrap();
    }
    let released: Vec<_> = allocs.iter().map(|a| a.slices[0]).collect();
    // The first pass only notes them (a client that destroys what it releases comes first);
    // three free is over the size: nothing is made.
    assert_eq!(pool.refill(&e), 0);
    assert!(e.warm_pool_free().is_empty());
    // The second takes them and trims the one over the size of two.
    assert_eq!(pool.refill(&e), 0);
    let kept = e.warm_pool_free();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.iter().all(|id| released.contains(id)), "{kept:?}");
    assert_eq!(e.slices().len(), 2, "the third was destroyed");
    // Kept slices are the pool's: they give way like the ones it made.
    let gpu = e.slice(kept[0]).unwrap().spec.gpu.to_string();
    let big = e.allocate(request("big", "7g.80gb", Some(&gpu))).unwrap();
    assert_eq!(big.slices.len(), 1);
    assert!(e.slice(kept[0]).is_err());
}
