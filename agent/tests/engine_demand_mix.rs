//! The demand mix the default policy learns: every request the scheduler is asked to place
//! counts (granted or refused, an idempotent retry not again), the estimate survives a
//! restart through the state store, and `/metrics` shows it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use testkit::*;

const T4: &str = "0000:41:00.0";
const A100: &str = "0000:07:00.0";

fn share_of(mix: &agent::engine::DemandMix, slice: &str) -> f64 {
    mix.mix
        .items
        .iter()
        .filter(|i| agent::engine::slice_name(&i.slice) == slice)
        .map(|i| i.weight)
        .sum()
}

#[test]
fn granted_and_refused_requests_count_once_and_a_restart_keeps_them() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let e = engine(&h, dir.path());
        // Nothing seen: the prior alone, every offered shape.
        let empty = e.demand_mix();
        assert_eq!((empty.seen, empty.prior_share), (0, 1.0));
        assert!(empty.mix.items.len() > 1, "{:?}", empty.mix);
        let mut keyed = request("c0", "nvidia-222", Some(T4));
        keyed.request.idempotency_key = Some("k".into());
        e.allocate(keyed.clone()).unwrap();
        // The retry is answered from the store: not a new request.
        e.allocate(keyed).unwrap();
        for i in 1..16 {
            e.allocate(request(&format!("c{i}"), "nvidia-222", Some(T4)))
                .unwrap();
        }
        // The T4 holds 16 of them: the 17th is refused, and still counts.
        let refused = e
            .allocate(request("late", "nvidia-222", Some(T4)))
            .unwrap_err();
        assert_eq!(refused.code(), "no_capacity");
        let m = e.demand_mix();
        assert_eq!(m.seen, 17);
        // 17 requests against a prior worth 20: the learnt shape holds about 17/37 plus its
        // part of the prior, far above any other shape.
        let learnt = share_of(&m, "mdev:nvidia-222");
        assert!(learnt > 0.45 && learnt < 0.6, "{learnt}");
        assert_eq!(
            agent::engine::slice_name(&m.mix.items[0].slice),
            "mdev:nvidia-222"
        );
        let total: f64 = m.mix.items.iter().map(|i| i.weight).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        m
    };
    let text = std::fs::read_to_string(dir.path().join("vgpud-state.json")).unwrap();
    let header = text.lines().next().unwrap();
    assert!(header.contains("\"version\":2"), "{header}");
    assert!(text.contains("\"demand_mix\""));
    let e = engine(&h, dir.path());
    let after = e.demand_mix();
    assert_eq!(after.seen, before.seen);
    assert_eq!(after.mix.items.len(), before.mix.items.len());
    for (a, b) in after.mix.items.iter().zip(&before.mix.items) {
        assert_eq!(a.slice, b.slice);
        assert!((a.weight - b.weight).abs() < 1e-12, "{a:?} {b:?}");
    }
}

#[test]
fn metrics_show_the_learnt_shares() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    let text = s.metrics_text().unwrap();
    assert!(text.contains("vgpud_demand_mix_requests 0"), "{text}");
    assert!(text.contains("vgpud_demand_mix_prior_share 1.0"), "{text}");
    s.allocate(request("m", "1g.10gb", Some(A100))).unwrap();
    s.allocate(request("n", "1g.10gb", Some(A100))).unwrap();
    let text = s.metrics_text().unwrap();
    assert!(text.contains("vgpud_demand_mix_requests 2"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("vgpud_demand_mix_share{"))
        .expect("a share row");
    assert!(row.contains("slice=\"mig:1g.10gb\""), "{row}");
    assert!(row.ends_with(" 1.0"), "{row}");
    let prior: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("vgpud_demand_mix_prior_share "))
        .unwrap()
        .parse()
        .unwrap();
    // Two requests against a prior of 20 pseudo-requests.
    assert!((prior - 20.0 / 22.0).abs() < 1e-3, "{prior}");
}

/// What the store holds of the mix: the number of requests counted, read from the file.
fn stored_seen(dir: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("vgpud-state.json")).unwrap();
    let (_header, body) = text.split_once('\n').unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    body["demand_mix"]["seen"].as_u64().unwrap_or(0)
}

/// Refused requests count, but a client sending them does not make the daemon write the disk
/// for each: the counts go to the store at most every few seconds, and all of them when the
/// engine closes.
#[test]
fn counts_are_saved_at_most_every_interval_and_when_the_engine_closes() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(&h, dir.path());
        e.allocate(request("first", "nvidia-222", Some(T4)))
            .unwrap();
        assert_eq!(stored_seen(dir.path()), 1);
        // The T4 holds 16 of them; the 20 after those are refused by the scheduler.
        for i in 1..36 {
            let _ = e.allocate(request(&format!("c{i}"), "nvidia-222", Some(T4)));
        }
        assert_eq!(e.demand_mix().seen, 36);
        assert_eq!(stored_seen(dir.path()), 1, "saved before the interval");
    }
    assert_eq!(stored_seen(dir.path()), 36, "saved when the engine closed");
}

#[test]
fn metrics_count_every_request_and_keep_the_shares_between_saves() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, s) = service("dgx-a100", dir.path());
    s.allocate(request("m", "1g.10gb", Some(A100))).unwrap();
    s.allocate(request("n", "2g.20gb", Some(A100))).unwrap();
    s.allocate(request("o", "2g.20gb", Some(A100))).unwrap();
    let text = s.metrics_text().unwrap();
    // The count moves with every request ...
    assert!(text.contains("vgpud_demand_mix_requests 3"), "{text}");
    // ... the shares are those of the first request's save (the next is due 10 s later), and
    // they are still shown.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("vgpud_demand_mix_share{"))
        .collect();
    assert_eq!(rows.len(), 1, "{text}");
    assert!(rows[0].contains("slice=\"mig:1g.10gb\""), "{}", rows[0]);
}
