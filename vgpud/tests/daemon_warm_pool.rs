//! The warm pool end to end through `vgpud run` on a simulated dgx-a100 with `[warm_pool]` on:
//! nothing is made before the first request; after it the pool fills to its size and no
//! further; a request claims a pool slice (no new slice made) and the pool tops itself up again;
//! a request for every GPU whole gets them though the pool holds free slices there; a restart keeps the
//! pool at its size. The pool's counters are on `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

const POOL: usize = 3;
const CONFIG: &str = "[warm_pool]\nenabled = true\nsize = 3\ninterval_ms = 100\n";

/// The daemon, with what this test asks of it.
struct Daemon(common::SimDaemon);

impl std::ops::Deref for Daemon {
    type Target = common::SimDaemon;
    fn deref(&self) -> &common::SimDaemon {
        &self.0
    }
}

impl Daemon {
    fn start(dir: &Path, name: &str) -> Daemon {
        Daemon(common::SimDaemon::start(dir, "dgx-a100", name))
    }

    fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        let (status, _, body) = common::unix_request(&self.socket, method, path, body);
        (status, serde_json::from_str(&body).unwrap_or_default())
    }

    fn slices(&self) -> Vec<serde_json::Value> {
        let (status, v) = self.http("GET", "/v1/slices", None);
        assert_eq!(status, 200, "{v}");
        v.as_array().unwrap().clone()
    }

    /// The ids of the ready slices no allocation holds.
    fn free(&self) -> BTreeSet<String> {
        self.slices()
            .iter()
            .filter(|s| s["state"] == "ready" && s.get("allocation").is_none())
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until `POOL` slices are free, then checks a second of top-ups adds none.
    fn wait_for_full_pool(&self) -> BTreeSet<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.free().len() < POOL {
            assert!(
                Instant::now() < deadline,
                "the pool did not fill: {:?}\n{}",
                self.slices(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(1));
        let free = self.free();
        assert_eq!(free.len(), POOL, "the pool overfilled: {:?}", self.slices());
        free
    }

    fn allocate(&self, consumer: &str, kind: &str, count: u32) -> serde_json::Value {
        let body =
            format!(r#"{{"consumer":"{consumer}","request":{{"type":"{kind}","count":{count}}}}}"#);
        let (status, v) = self.http("POST", "/v1/allocations", Some(&body));
        assert_eq!(status, 201, "{v}\n{}", self.log_text());
        v
    }

    /// Releases an allocation and destroys its slices.
    fn release_and_destroy(&self, allocation: &serde_json::Value) {
        let path = format!("/v1/allocations/{}", allocation["id"].as_str().unwrap());
        assert_eq!(self.http("DELETE", &path, None).0, 204);
        for id in slice_ids(allocation) {
            assert_eq!(
                self.http("DELETE", &format!("/v1/slices/{id}"), None).0,
                204
            );
        }
    }

    fn stop(self) {
        self.0.stop();
    }
}

fn slice_ids(allocation: &serde_json::Value) -> BTreeSet<String> {
    allocation["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_pool_fills_from_demand_serves_requests_and_gives_way() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vgpud.toml"), CONFIG).unwrap();
    let d = Daemon::start(dir.path(), "first");

    // No request yet: no demand, no pool (ten top-up intervals).
    std::thread::sleep(Duration::from_secs(1));
    assert!(d.slices().is_empty(), "{:?}", d.slices());

    let first = d.allocate("vm1", "1g.10gb", 1);
    let pool = d.wait_for_full_pool();
    assert!(slice_ids(&first).is_disjoint(&pool));
    assert!(d.log_text().contains("warm pool: made a free slice"));

    // A request of a type the pool holds claims one of its slices: nothing new is made for it.
    let before: BTreeSet<String> = d
        .slices()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    let types: BTreeSet<String> = d
        .slices()
        .iter()
        .filter(|s| pool.contains(s["id"].as_str().unwrap()))
        .map(|s| s["type"].as_str().unwrap().to_owned())
        .collect();
    let kind = types.iter().next().unwrap().clone();
    let second = d.allocate("vm2", &kind, 1);
    assert!(slice_ids(&second).is_subset(&before), "{second}");
    assert!(slice_ids(&second).is_subset(&pool), "{second}");
    // ...and the pool makes up for it.
    d.wait_for_full_pool();

    // Every GPU whole, once vm1 and vm2 are gone: the pool's free slices give way, wherever
    // it put them.
    for a in [&first, &second] {
        d.release_and_destroy(a);
    }
    d.wait_for_full_pool();
    let big = d.allocate("vm3", "7g.80gb", 8);
    assert_eq!(slice_ids(&big).len(), 8);
    assert!(
        d.log_text()
            .contains("warm pool: gave up free slices for a request")
    );
    let (status, _, metrics) = common::unix_request(&d.socket, "GET", "/metrics", None);
    assert_eq!(status, 200);
    for event in ["made", "given_up"] {
        let needle = format!("vgpud_warm_pool_slices_total{{event=\"{event}\"");
        assert!(metrics.contains(&needle), "no {needle} in:\n{metrics}");
    }

    // A restart: the daemon comes back with the pool it had, still at its size.
    d.release_and_destroy(&big);
    let pool = d.wait_for_full_pool();
    d.stop();
    let d = Daemon::start(dir.path(), "second");
    assert_eq!(d.wait_for_full_pool(), pool, "{}", d.log_text());
    d.stop();
}
