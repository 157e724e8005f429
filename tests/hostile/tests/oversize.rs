//! Oversize and malformed declarations: a 100 MB `Content-Length` is refused with `413` before
//! any of the body is sent; a 10,000-byte path, 200 headers, a bad `Content-Length` and
//! HTTP/0.9 get the documented JSON error body (not hyper's empty one), quickly.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hostile::daemon::Daemon;
use hostile::{probe, raw};

/// An answer slower than this counts as waiting for the body.
const FAST: Duration = Duration::from_secs(1);

fn cases() -> Vec<(&'static str, Vec<u8>, u16)> {
    let headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    vec![
        (
            "Content-Length: 100 MB, no body",
            b"POST /v1/allocations HTTP/1.1\r\nHost: vgpud\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n".to_vec(),
            413,
        ),
        (
            "10,000-byte path",
            format!("GET /{} HTTP/1.1\r\nHost: vgpud\r\n\r\n", "a".repeat(10_000)).into_bytes(),
            414,
        ),
        (
            "200 headers",
            format!("GET /healthz HTTP/1.1\r\nHost: vgpud\r\n{headers}\r\n").into_bytes(),
            431,
        ),
        (
            "Content-Length: abc",
            b"POST /v1/allocations HTTP/1.1\r\nHost: vgpud\r\nContent-Length: abc\r\n\r\n".to_vec(),
            400,
        ),
        (
            "two Content-Lengths",
            b"POST /v1/allocations HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec(),
            400,
        ),
        ("HTTP/0.9", b"GET /healthz\r\n\r\n".to_vec(), 400),
        ("garbage", b"\x00\x01\x02 nonsense\r\n\r\n".to_vec(), 400),
    ]
}

#[test]
fn oversize_and_malformed_heads_get_fast_json_errors() {
    let d = Daemon::start("").unwrap();
    let before = d.allocations().unwrap();
    let socket = d.socket();
    let prober = std::thread::spawn(move || {
        let mut all = Vec::new();
        for _ in 0..3 {
            all.push(probe::run(&socket, 50));
        }
        all
    });
    let mut sent = 0;
    for round in 0..20 {
        for (name, bytes, status) in cases() {
            let seen = raw::send_unix(&d.socket(), &bytes, Duration::from_secs(5)).unwrap();
            sent += 1;
            assert!(seen.closed && seen.after < FAST, "{name}: {seen:?}");
            assert_eq!(
                seen.status(),
                Some(status),
                "{name}: {:?}",
                String::from_utf8_lossy(&seen.bytes)
            );
            let body = seen
                .json()
                .unwrap_or_else(|| panic!("{name}: no JSON body: {seen:?}"));
            assert!(
                body["code"].is_string() && body["message"].is_string(),
                "{name}: {body}"
            );
            if round == 0 {
                eprintln!(
                    "hostile: {name}: {status} {} in {:.1} ms",
                    body["code"],
                    probe::ms(seen.after)
                );
            }
        }
    }
    for f in prober.join().unwrap() {
        f.check(&format!("oversize declarations x{sent}")).unwrap();
    }
    assert_eq!(d.allocations().unwrap(), before, "state changed");
}
