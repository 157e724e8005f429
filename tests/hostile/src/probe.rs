//! The well-behaved client: `GET /healthz` on the unix socket, one connection per request, each
//! with a short deadline, timed.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::P99_LIMIT;

/// How long one well-behaved request may take before it counts as lost.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between two requests.
const SPACING: Duration = Duration::from_millis(5);

/// One timed `GET /healthz`: its latency, or why it failed.
pub fn healthz(socket: &Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut s = UnixStream::connect(socket).context("connect")?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    s.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: vgpud\r\nConnection: close\r\n\r\n")?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).context("read")?;
    let text = String::from_utf8_lossy(&answer);
    if !text.starts_with("HTTP/1.1 200") {
        bail!("not 200: {:?}", text.lines().next().unwrap_or(""));
    }
    Ok(started.elapsed())
}

/// Latency figures of a run.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed (refused, cut or too slow).
    pub failures: Vec<String>,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Worst latency.
    pub max: Duration,
}

/// Failures in a row after which a run gives up (a daemon that stopped answering would
/// otherwise cost `REQUEST_TIMEOUT` per request).
const GIVE_UP_AFTER: usize = 5;

/// `n` well-behaved requests in a row.
pub fn run(socket: &Path, n: usize) -> Figures {
    let mut times = Vec::with_capacity(n);
    let mut failures = Vec::new();
    let mut in_a_row = 0;
    for _ in 0..n {
        match healthz(socket) {
            Ok(t) => {
                times.push(t);
                in_a_row = 0;
            }
            Err(e) => {
                failures.push(format!("{e:#}"));
                in_a_row += 1;
                if in_a_row == GIVE_UP_AFTER {
                    break;
                }
            }
        }
        std::thread::sleep(SPACING);
    }
    times.sort();
    let at = |q: usize| {
        times
            .get((times.len() * q / 100).min(times.len().saturating_sub(1)))
            .copied()
            .unwrap_or(Duration::MAX)
    };
    Figures {
        requests: n,
        failures,
        p50: at(50),
        p99: at(99),
        max: times.last().copied().unwrap_or(Duration::MAX),
    }
}

impl Figures {
    /// Prints the figures with the attack's name and size, then asserts every request was
    /// answered and p99 is within [`P99_LIMIT`].
    pub fn check(&self, attack: &str) -> anyhow::Result<()> {
        eprintln!(
            "hostile: {attack}: well-behaved GET /healthz x{}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, failed {}",
            self.requests,
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.failures.len()
        );
        if !self.failures.is_empty() {
            bail!(
                "{attack}: {} of {} well-behaved requests failed, first: {}",
                self.failures.len(),
                self.requests,
                self.failures[0]
            );
        }
        if self.p99 > P99_LIMIT {
            bail!("{attack}: p99 {:.1} ms is over {P99_LIMIT:?}", ms(self.p99));
        }
        Ok(())
    }
}

/// Milliseconds with a fraction (NaN when no request was answered at all).
pub fn ms(d: Duration) -> f64 {
    if d == Duration::MAX {
        return f64::NAN;
    }
    d.as_secs_f64() * 1000.0
}
