//! Connection floods over the default file-descriptor limit: the daemon runs with a soft
//! `RLIMIT_NOFILE` of 1,024 and gets 1,500 silent connections on its unix socket, or on its TLS
//! port; the caps must keep it under the limit and serving the well-behaved client.

// Helpers outside #[test] functions fail the test on any error, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hostile::daemon::{self, Daemon, NOFILE};
use hostile::{probe, raw};

const FLOOD: usize = 1_500;
/// The attacker's connections must be taken (and closed, or held) at once: a listener that
/// stops accepting lets the kernel's backlog fill, and then every client's connect waits.
const OPEN_LIMIT: Duration = Duration::from_secs(30);

fn check_flood<T>(name: &str, open: impl FnOnce(&Daemon) -> Vec<T>) {
    daemon::raise_own_nofile();
    let mut d = Daemon::start("").unwrap();
    let before = d.allocations().unwrap();
    let started = Instant::now();
    let held = open(&d);
    let opened = started.elapsed();
    let fds = d.fds();
    let figures = probe::run(&d.socket(), 150);
    let fds_after = d.fds();
    eprintln!(
        "hostile: {name} flood: {} of {FLOOD} connections opened in {:.2} s; daemon fds {fds}, {fds_after} (limit {NOFILE})",
        held.len(),
        opened.as_secs_f64()
    );
    figures.check(&format!("{name} flood x{FLOOD}")).unwrap();
    assert!(
        opened < OPEN_LIMIT,
        "the listener stopped accepting: connects took {opened:?}"
    );
    assert!(
        fds.max(fds_after) < NOFILE as usize,
        "the daemon neared its fd limit"
    );
    drop(held);
    d.assert_alive().unwrap();
    assert_eq!(d.allocations().unwrap(), before, "state changed");
}

#[test]
fn a_flood_of_silent_unix_connections_leaves_the_socket_serving() {
    check_flood("unix", |d| raw::silent_unix(&d.socket(), FLOOD));
}

#[test]
fn a_flood_of_silent_tcp_connections_to_the_tls_port_leaves_the_socket_serving() {
    check_flood("TCP (no handshake)", |d| raw::silent_tcp(d.tls_port, FLOOD));
}

#[test]
fn a_flood_of_silent_tls_connections_leaves_the_socket_serving() {
    // Handshake done, then nothing: before any authentication, which comes with a request.
    check_flood("TLS (handshake done)", |d| {
        raw::silent_tls(d.tls_port, &d.cert(), FLOOD).unwrap()
    });
}
