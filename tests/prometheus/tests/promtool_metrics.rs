//! Prometheus peer test: `promtool check metrics` on a scrape of the daemon's metrics listener.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use prometheus_peer::daemon::Daemon;
use prometheus_peer::{openmetrics, peer};

#[test]
fn promtool_check_metrics_accepts_a_scrape_of_the_daemon() {
    let Some(promtool) = peer::find("promtool") else {
        return;
    };
    let (d, _) = Daemon::start().unwrap();
    d.populate().unwrap();
    let (content_type, scrape) = d.scrape().unwrap();
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    assert!(
        scrape.ends_with("# EOF\n"),
        "not OpenMetrics-terminated:\n{scrape}"
    );

    let classic = openmetrics::to_classic(&scrape);
    let out = peer::run(&promtool, &["check", "metrics"], Some(&classic)).unwrap();
    // 0: clean; 3: lint findings (judged below); anything else: promtool could not parse it.
    assert!(
        out.code == 0 || out.code == 3,
        "promtool check metrics failed ({}): {}\nscrape (classic form):\n{classic}",
        out.code,
        out.text
    );
    let unexpected = openmetrics::unexpected_findings(&out.text, &classic);
    assert!(
        unexpected.is_empty(),
        "promtool check metrics found:\n{}\nscrape (classic form):\n{classic}",
        unexpected.join("\n")
    );
}
