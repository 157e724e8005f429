//! Slowloris: connections that send a partial request line, partial headers, headers one byte at
//! a time, or a short body, and then wait. The daemon must close each within its deadline
//! (the first head within `header_read_timeout_ms`, a body within `body_read_timeout_ms`, with
//! a `408` JSON answer when a partial request came), while serving a well-behaved client.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use hostile::daemon::Daemon;
use hostile::{probe, raw};

/// Attack connections per variant: under the per-uid cap (64), so none is evicted and every
/// one must meet its deadline.
const CONNECTIONS: usize = 40;
/// The deadlines set for the test (defaults: 5 s and 30 s).
const HEADER_MS: u64 = 2_000;
const BODY_MS: u64 = 2_000;
/// Slack over the deadline for a close to count as on time.
const SLACK: Duration = Duration::from_millis(2_500);

fn attack(name: &str, first: &[u8], trickle: Option<&'static [u8]>, deadline_ms: u64) {
    let d = Daemon::start(&format!(
        "header_read_timeout_ms = {HEADER_MS}\nbody_read_timeout_ms = {BODY_MS}"
    ))
    .unwrap();
    let before = d.allocations().unwrap();
    let started = Instant::now();
    let mut conns: Vec<UnixStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut s = UnixStream::connect(d.socket()).unwrap();
            s.write_all(first).unwrap();
            s
        })
        .collect();
    // Trickling: one more byte per connection every 200 ms, from one thread.
    let trickler = trickle.map(|bytes| {
        let mut clones: Vec<UnixStream> = conns.iter().map(|c| c.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            for b in bytes.iter().cycle().take(30) {
                std::thread::sleep(Duration::from_millis(200));
                for c in &mut clones {
                    let _ = c.write_all(&[*b]);
                }
            }
        })
    });
    let socket = d.socket();
    let prober = std::thread::spawn(move || probe::run(&socket, 150));
    let wait = Duration::from_millis(deadline_ms) + SLACK;
    let seen: Vec<raw::Seen> = conns
        .iter_mut()
        .map(|c| raw::watch(c, wait.saturating_sub(started.elapsed())))
        .collect();
    let figures = prober.join().unwrap();
    let closed = seen.iter().filter(|s| s.closed).count();
    let latest = started.elapsed();
    eprintln!(
        "hostile: slowloris {name}: {CONNECTIONS} connections, {closed} closed by the daemon within {:.1} s (deadline {deadline_ms} ms)",
        latest.as_secs_f64()
    );
    figures
        .check(&format!("slowloris {name} x{CONNECTIONS}"))
        .unwrap();
    assert_eq!(
        closed, CONNECTIONS,
        "{name}: connections still held after {wait:?}"
    );
    for s in &seen {
        assert_eq!(
            s.status(),
            Some(408),
            "{name}: {:?}",
            String::from_utf8_lossy(&s.bytes)
        );
        let body = s.json().expect("a JSON error body");
        assert_eq!(body["code"], "timeout", "{body}");
    }
    drop(trickler);
    assert_eq!(d.allocations().unwrap(), before, "state changed");
}

#[test]
fn a_partial_request_line_is_closed_with_408() {
    attack("partial request line", b"GET /heal", None, HEADER_MS);
}

#[test]
fn partial_headers_are_closed_with_408() {
    attack(
        "partial headers",
        b"GET /healthz HTTP/1.1\r\nHost: vgpud\r\n",
        None,
        HEADER_MS,
    );
}

#[test]
fn trickled_headers_are_closed_at_the_head_deadline() {
    // A byte every 200 ms would keep a per-read timeout happy forever; the deadline is total.
    attack(
        "trickled headers",
        b"GET /healthz HTTP/1.1\r\n",
        Some(b"X-a: b\r\n"),
        HEADER_MS,
    );
}

#[test]
fn a_short_body_is_closed_with_408() {
    attack(
        "short body",
        b"POST /v1/allocations HTTP/1.1\r\nHost: vgpud\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"consumer\"",
        None,
        BODY_MS,
    );
}
