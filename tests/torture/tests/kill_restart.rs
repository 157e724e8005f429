//! The daemon SIGKILLed at random moments under REST and D-Bus clients, on two simulated hosts.
//! `VGPUD_TORTURE_KILLS` sets the kills per host (default 50: 100 in CI), `VGPUD_TORTURE_SEED`
//! the seed (default: fixed, so a failure reproduces).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::time::Duration;

use torture::run::{Config, torture};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(profile: &str, types: &[&str], seed_offset: u64) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        profile: profile.into(),
        types: types.iter().map(|t| (*t).to_owned()).collect(),
        kills: u32::try_from(env_u64("VGPUD_TORTURE_KILLS", 50)).unwrap(),
        clients: 4,
        seed: env_u64("VGPUD_TORTURE_SEED", 14) + seed_offset,
        max_uptime: Duration::from_millis(400),
    };
    let report = torture(dir.path(), &cfg).unwrap();
    println!(
        "torture {profile}: {} kills, {} operations answered, {} unanswered, {} D-Bus reads, \
         {} allocation requests, {} allocations and {} releases acknowledged, {} held at the \
         end, {} resolved by retry, {} violations, {:.1} s (mean start {:.2} s)",
        report.kills,
        report.counts.answered,
        report.counts.unanswered,
        report.counts.dbus_reads,
        report.allocation_requests,
        report.counts.allocations_acked,
        report.counts.releases_acked,
        report.acknowledged,
        report.resolved_by_retry,
        report.violations.len(),
        report.elapsed.as_secs_f64(),
        report.mean_start.as_secs_f64()
    );
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
    assert!(
        report.counts.answered > u64::from(report.kills),
        "the clients did work: {report:?}"
    );
    assert!(
        report.counts.allocations_acked > 0 && report.counts.releases_acked > 0,
        "allocations and releases were acknowledged: {report:?}"
    );
    assert!(
        report.counts.unanswered > 0,
        "some requests were cut by a kill: {report:?}"
    );
}

#[test]
fn mig_host_survives_random_kills() {
    run("dgx-a100", &["1g.10gb", "2g.20gb", "3g.40gb"], 0);
}

#[test]
fn mixed_host_survives_random_kills() {
    run("vdi-mixed", &["nvidia-222", "nvidia-230", "vf"], 1000);
}
