//! Idempotency misuse: the same `Idempotency-Key` with another request is a `409`, and many
//! concurrent requests with one key make one allocation, while the well-behaved client is served.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use torture::http;

use hostile::daemon::Daemon;
use hostile::probe;

const CONCURRENT: usize = 16;

fn count(d: &Daemon) -> usize {
    d.allocations().unwrap().as_array().map_or(0, Vec::len)
}

#[test]
fn a_reused_key_with_another_request_is_refused_and_concurrent_retries_make_one_allocation() {
    let d = Daemon::start("").unwrap();
    let socket = d.socket();
    let body = json!({"consumer": "tenant-a", "request": {"type": "1g.10gb", "count": 1}});
    let first = http::call(
        &socket,
        "POST",
        "/v1/allocations",
        Some("key-1"),
        Some(&body),
    )
    .unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    let id = first.body["id"].as_str().unwrap().to_owned();
    let after_first = d.allocations().unwrap();

    let prober = {
        let socket = socket.clone();
        std::thread::spawn(move || probe::run(&socket, 150))
    };
    // Keys belong to a consumer: another consumer's same key is another request altogether.
    let others = [
        json!({"consumer": "tenant-a", "request": {"type": "3g.40gb", "count": 1}}),
        json!({"consumer": "tenant-a", "request": {"type": "1g.10gb", "count": 2}}),
    ];
    let mut misuse = 0;
    for _ in 0..15 {
        for other in &others {
            let a = http::call(
                &socket,
                "POST",
                "/v1/allocations",
                Some("key-1"),
                Some(other),
            )
            .unwrap();
            misuse += 1;
            assert_eq!(a.status, 409, "{other} under a used key: {}", a.body);
            assert_eq!(a.body["code"], "conflict", "{}", a.body);
        }
    }
    assert_eq!(
        d.allocations().unwrap(),
        after_first,
        "a refused reuse changed state"
    );

    // Concurrent first use of a fresh key: exactly one allocation, every answer names it.
    let fresh = json!({"consumer": "tenant-c", "request": {"type": "1g.10gb", "count": 1}});
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CONCURRENT)
            .map(|_| {
                let (socket, fresh) = (&socket, &fresh);
                s.spawn(move || {
                    let a = http::call(
                        socket,
                        "POST",
                        "/v1/allocations",
                        Some("key-2"),
                        Some(fresh),
                    )
                    .unwrap();
                    assert!(matches!(a.status, 200 | 201), "{}: {}", a.status, a.body);
                    a.body
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: std::collections::BTreeSet<_> = answers.iter().map(|a| a["id"].to_string()).collect();
    let figures = prober.join().unwrap();
    eprintln!(
        "hostile: idempotency: {misuse} reuses with another request (all 409), {CONCURRENT} concurrent same-key requests -> {} allocation(s)",
        ids.len()
    );
    figures
        .check(&format!("idempotency misuse x{}", misuse + CONCURRENT))
        .unwrap();
    assert_eq!(ids.len(), 1, "concurrent same-key requests made {ids:?}");
    assert_eq!(count(&d), 2, "one allocation per key");
    let b = json!({"consumer": "tenant-b", "request": {"type": "1g.10gb", "count": 1}});
    let theirs = http::call(&socket, "POST", "/v1/allocations", Some("key-1"), Some(&b)).unwrap();
    assert_eq!(theirs.status, 201, "keys are per consumer: {}", theirs.body);
    let still = d.get(&format!("/v1/allocations/{id}")).unwrap();
    assert_eq!(still["consumer"], "tenant-a");
}
