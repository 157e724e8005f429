//! What the daemon tests share: one HTTP/1.1 request over the REST socket, and waiting for a
//! line in the daemon's log.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses part of it; tests may panic

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One request with `Connection: close` over the unix socket: status, head and body (a chunked
/// body keeps its chunk sizes; the bodies here are small).
pub fn unix_request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// Waits until `read()` (the log so far) contains `needle`; the text then. Fails the test after
/// `timeout`, showing the text.
pub fn wait_for_text(read: impl Fn() -> String, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = read();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
