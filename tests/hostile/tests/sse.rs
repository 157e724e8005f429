//! SSE subscribers that never read: many `GET /v1/events` streams whose clients read nothing
//! while events keep coming (allocations made and released). The daemon keeps serving and its
//! memory stays bounded.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;

use serde_json::json;
use torture::http;

use hostile::daemon::Daemon;
use hostile::probe;

/// Subscribers: under the per-uid cap (64) so the well-behaved client, of the same uid in this
/// test, keeps a place.
const SUBSCRIBERS: usize = 48;
/// Allocate/release rounds that make events while nobody reads them.
const ROUNDS: usize = 60;
/// Growth of the daemon's resident memory allowed over the attack, KiB.
const RSS_GROWTH_LIMIT_KIB: u64 = 64 * 1024;

#[test]
fn subscribers_that_never_read_do_not_stall_or_bloat_the_daemon() {
    let d = Daemon::start("").unwrap();
    let before = d.allocations().unwrap();
    let subscribers: Vec<UnixStream> = (0..SUBSCRIBERS)
        .map(|_| {
            let mut s = UnixStream::connect(d.socket()).unwrap();
            s.write_all(
                b"GET /v1/events HTTP/1.1\r\nHost: vgpud\r\nAccept: text/event-stream\r\n\r\n",
            )
            .unwrap();
            s
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let rss_before = d.rss_kib();
    let socket = d.socket();
    let prober = std::thread::spawn(move || probe::run(&socket, 150));
    let body = json!({"consumer": "sse-load", "request": {"type": "1g.10gb", "count": 1}});
    for _ in 0..ROUNDS {
        let a = http::call(&d.socket(), "POST", "/v1/allocations", None, Some(&body)).unwrap();
        assert_eq!(a.status, 201, "{}", a.body);
        let id = a.body["id"].as_str().unwrap();
        let r = http::call(
            &d.socket(),
            "DELETE",
            &format!("/v1/allocations/{id}"),
            None,
            None,
        )
        .unwrap();
        assert!(r.status < 300, "{}", r.body);
    }
    let figures = prober.join().unwrap();
    let rss_after = d.rss_kib();
    eprintln!(
        "hostile: SSE: {SUBSCRIBERS} subscribers never reading, {ROUNDS} allocate/release rounds; daemon RSS {rss_before} -> {rss_after} KiB"
    );
    figures
        .check(&format!("SSE never-reading subscribers x{SUBSCRIBERS}"))
        .unwrap();
    assert!(
        rss_after <= rss_before + RSS_GROWTH_LIMIT_KIB,
        "memory grew by {} KiB",
        rss_after.saturating_sub(rss_before)
    );
    drop(subscribers);
    assert_eq!(d.allocations().unwrap(), before, "state changed");
}
