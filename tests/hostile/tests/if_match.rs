//! If-Match misuse on `PUT /v1/layouts`: a stale or made-up ETag is a `412` naming the current
//! one, a header that is not text a `400`; the declared layouts do not change.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hostile::daemon::Daemon;
use hostile::{probe, raw};

fn put(d: &Daemon, if_match: &[u8]) -> raw::Seen {
    let body = br#"{"layouts": []}"#;
    let mut req = b"PUT /v1/layouts HTTP/1.1\r\nHost: vgpud\r\nConnection: close\r\nContent-Type: application/json\r\nIf-Match: ".to_vec();
    req.extend_from_slice(if_match);
    req.extend_from_slice(format!("\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
    req.extend_from_slice(body);
    raw::send_unix(&d.socket(), &req, Duration::from_secs(10)).unwrap()
}

#[test]
fn stale_and_garbage_etags_change_nothing() {
    let d = Daemon::start("").unwrap();
    let layouts = d.get("/v1/layouts").unwrap();
    let allocations = d.allocations().unwrap();
    let current = layouts["etag"].as_str().unwrap().to_owned();
    let socket = d.socket();
    let prober = std::thread::spawn(move || probe::run(&socket, 150));
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"\"0000000000000000\"".to_vec(), 412),
        (b"W/\"stale\"".to_vec(), 412),
        (format!("{current}x").into_bytes(), 412),
        (b"garbage, more garbage".to_vec(), 412),
        (b"\xff\xfe".to_vec(), 400),
    ];
    let mut sent = 0;
    for _ in 0..10 {
        for (etag, status) in &cases {
            let seen = put(&d, etag);
            sent += 1;
            assert_eq!(
                seen.status(),
                Some(*status),
                "{:?}: {:?}",
                String::from_utf8_lossy(etag),
                String::from_utf8_lossy(&seen.bytes)
            );
            let body = seen.json().unwrap();
            if *status == 412 {
                assert_eq!(body["details"]["etag"], current.as_str(), "{body}");
            }
        }
    }
    let figures = prober.join().unwrap();
    eprintln!("hostile: If-Match misuse: {sent} PUTs with stale or garbage ETags");
    figures.check(&format!("If-Match misuse x{sent}")).unwrap();
    assert_eq!(d.get("/v1/layouts").unwrap(), layouts, "layouts changed");
    assert_eq!(d.allocations().unwrap(), allocations, "state changed");
}
