//! Slow TLS handshakes: hundreds of clients that open a TCP connection to the TLS port and send
//! nothing, or half a ClientHello. Each handshake has its own deadline and none waits for
//! another: a real TLS client (curl) still completes its handshake at once, and the unix socket
//! keeps serving.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use hostile::daemon::{self, Daemon, TOKEN};
use hostile::{probe, raw};

const SILENT: usize = 300;
const HALF_HELLO: usize = 300;
/// A handshake slower than this, with the attackers waiting, means it queued behind them.
const HANDSHAKE_LIMIT: f64 = 1.0;

/// A TLS record header announcing a 512-byte ClientHello, and its first few bytes.
const HALF_CLIENT_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

fn curl(d: &Daemon) -> (String, f64) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "15"])
        .args(["-w", "%{http_code} %{time_appconnect}"])
        .arg("--cacert")
        .arg(d.cert())
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .arg(format!("https://127.0.0.1:{}/v1/host", d.tls_port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = text.split_whitespace();
    let code = it.next().unwrap_or("").to_owned();
    let t = it.next().and_then(|t| t.parse().ok()).unwrap_or(f64::MAX);
    (code, t)
}

#[test]
fn slow_handshakes_do_not_delay_other_clients() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("hostile: curl is not installed; skipped");
        return;
    }
    daemon::raise_own_nofile();
    let d = Daemon::start("").unwrap();
    let before = d.allocations().unwrap();
    let (code, _) = curl(&d);
    assert_eq!(code, "200", "a TLS client is served before the attack");
    let mut held = raw::silent_tcp(d.tls_port, SILENT);
    let mut half = raw::silent_tcp(d.tls_port, HALF_HELLO);
    for s in &mut half {
        let _ = s.write_all(HALF_CLIENT_HELLO);
    }
    held.append(&mut half);
    std::thread::sleep(Duration::from_millis(200));
    let mut worst: f64 = 0.0;
    for _ in 0..5 {
        let (code, t) = curl(&d);
        assert_eq!(code, "200", "a TLS client during the attack");
        worst = worst.max(t);
    }
    let figures = probe::run(&d.socket(), 150);
    eprintln!(
        "hostile: TLS slow handshakes: {SILENT} silent + {HALF_HELLO} half ClientHello; curl handshake worst {:.1} ms",
        worst * 1000.0
    );
    figures
        .check(&format!("TLS slow handshakes x{}", SILENT + HALF_HELLO))
        .unwrap();
    assert!(
        worst < HANDSHAKE_LIMIT,
        "a handshake waited {worst:.2} s behind the slow ones"
    );
    drop(held);
    assert_eq!(d.allocations().unwrap(), before, "state changed");
}
