//! Prometheus peer tests: the shipped scrape job and alert rules under promtool
//! (`check config`, `check rules`, `test rules`), and unit tests that cover every alert.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeSet;

use prometheus_peer::{packaging, peer};

fn promtool_ok(args: &[&str]) {
    let Some(promtool) = peer::find("promtool") else {
        return;
    };
    let out = peer::run(&promtool, args, None).unwrap();
    assert_eq!(out.code, 0, "promtool {}:\n{}", args.join(" "), out.text);
}

#[test]
fn promtool_check_config_accepts_the_scrape_job() {
    let file = packaging("prometheus/vgpud-scrape.yml");
    promtool_ok(&["check", "config", file.to_str().unwrap()]);
}

#[test]
fn promtool_check_rules_accepts_the_alert_rules() {
    let file = packaging("prometheus/vgpud-alerts.yml");
    promtool_ok(&["check", "rules", file.to_str().unwrap()]);
}

#[test]
fn promtool_test_rules_passes_the_alert_unit_tests() {
    let file = packaging("prometheus/vgpud-alerts.test.yml");
    promtool_ok(&["test", "rules", file.to_str().unwrap()]);
}

fn yaml(rel: &str) -> serde_norway::Value {
    serde_norway::from_str(&std::fs::read_to_string(packaging(rel)).unwrap()).unwrap()
}

/// A rule without a unit test that fires it, or one that proves it silent, is untested: a
/// wrong threshold or a typo in a metric name would go unseen.
#[test]
fn every_alert_has_a_firing_and_a_silent_unit_test() {
    let rules = yaml("prometheus/vgpud-alerts.yml");
    let alerts: BTreeSet<String> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(alerts.len(), 6, "{alerts:?}");
    for rule in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let name = rule["alert"].as_str().unwrap();
        assert!(rule["for"].as_str().is_some(), "{name} has no for:");
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for a in ["summary", "description"] {
            assert!(
                rule["annotations"][a].as_str().is_some(),
                "{name} has no {a}"
            );
        }
    }
    let tests = yaml("prometheus/vgpud-alerts.test.yml");
    let mut fired = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for t in tests["tests"].as_sequence().unwrap() {
        for case in t["alert_rule_test"].as_sequence().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_owned();
            match case["exp_alerts"].as_sequence() {
                Some(e) if !e.is_empty() => fired.insert(name),
                _ => silent.insert(name),
            };
        }
    }
    let unfired: Vec<_> = alerts.difference(&fired).collect();
    let unsilenced: Vec<_> = alerts.difference(&silent).collect();
    assert!(unfired.is_empty(), "no test makes these fire: {unfired:?}");
    assert!(
        unsilenced.is_empty(),
        "no test proves these silent: {unsilenced:?}"
    );
}
