//! A real Prometheus server scraping the daemon every second with the shipped scrape job
//! (`packaging/prometheus/vgpud-scrape.yml`, its target and interval replaced) and the shipped
//! alert rules loaded, and its HTTP API.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::http::{encode, get};

/// How long the server may take to start and find the target up.
const UP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an alert may take to go pending once its condition holds.
const ALERT_TIMEOUT: Duration = Duration::from_secs(20);
/// The scrape (and rule evaluation) interval of the test server.
pub const SCRAPE_INTERVAL_S: u64 = 1;

/// A running Prometheus server; killed when dropped.
pub struct Prometheus {
    dir: tempfile::TempDir,
    child: Child,
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
}

impl Prometheus {
    /// Starts `binary` scraping `127.0.0.1:target_port` and waits until it is ready.
    pub fn start(binary: &Path, target_port: u16) -> anyhow::Result<Prometheus> {
        Self::start_scraping(binary, &[target_port])
    }

    /// As [`Prometheus::start`], scraping every daemon of `target_ports` in the one job.
    pub fn start_scraping(binary: &Path, target_ports: &[u16]) -> anyhow::Result<Prometheus> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, config_text(target_ports)?)?;
        let port = crate::peer::free_port()?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log"))?)
            .spawn()
            .context("spawn prometheus")?;
        let mut p = Prometheus { dir, child, port };
        p.wait_ready()?;
        Ok(p)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + UP_TIMEOUT;
        loop {
            if get(self.port, "/-/ready").is_ok_and(|a| a.status == 200) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("prometheus exited with {status}:\n{}", self.log());
            }
            if Instant::now() > deadline {
                bail!("prometheus not ready in {UP_TIMEOUT:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the vgpud target has been scraped successfully at least once after `since`
    /// (Unix seconds): its `up` is 1 and the scrape's timestamp is later.
    pub fn wait_scraped_after(&self, since: f64) -> anyhow::Result<()> {
        let deadline = Instant::now() + UP_TIMEOUT;
        loop {
            let fresh = self
                .query(r#"timestamp(up{job="vgpud"} == 1)"#)
                .ok()
                .and_then(|r| first_value(&r))
                .is_some_and(|t| t > since);
            if fresh {
                return Ok(());
            }
            if Instant::now() > deadline {
                let targets = get(self.port, "/api/v1/targets").map(|a| a.body);
                bail!(
                    "the vgpud target was not scraped after {since} in {UP_TIMEOUT:?}: {targets:?}\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until `alert` is pending or firing on a series whose labels include `labels`
    /// (PromQL matchers, e.g. `pci_bus_id="0000:47:00.0"`); its `ALERTS` series. The rules
    /// are evaluated every second: 20 s is ample.
    pub fn wait_alert(&self, alert: &str, labels: &str) -> anyhow::Result<Vec<Value>> {
        let sep = if labels.is_empty() { "" } else { ", " };
        let query = format!(r#"ALERTS{{alertname="{alert}"{sep}{labels}}}"#);
        let deadline = Instant::now() + ALERT_TIMEOUT;
        loop {
            match self.query(&query) {
                Ok(r) if !r.is_empty() => return Ok(r),
                _ if Instant::now() > deadline => {
                    bail!(
                        "no {query} in {ALERT_TIMEOUT:?}; rules: {}",
                        self.rule_states()?
                    )
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Every loaded rule as `name: state (health)`, for messages.
    pub fn rule_states(&self) -> anyhow::Result<String> {
        let body = self.api("/api/v1/rules")?;
        let rules = body["data"]["groups"].as_array().into_iter().flatten();
        Ok(rules
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .map(|r| format!("{}: {} ({})", r["name"], r["state"], r["health"]))
            .collect::<Vec<_>>()
            .join(", "))
    }

    /// An instant query at the server's now: `data.result`, or why there is none.
    pub fn query(&self, promql: &str) -> anyhow::Result<Vec<Value>> {
        let body = self.api(&format!("/api/v1/query?query={}", encode(promql)))?;
        match body["data"]["result"].as_array() {
            Some(r) => Ok(r.clone()),
            None => bail!("no result: {body}"),
        }
    }

    /// `GET path` on the API: the `data` member of a `success` answer.
    pub fn api(&self, path: &str) -> anyhow::Result<Value> {
        let answer = get(self.port, path)?;
        let body: Value = serde_json::from_str(&answer.body)
            .with_context(|| format!("{path}: {} {}", answer.status, answer.body))?;
        if body["status"] != "success" {
            bail!("{} {}", answer.status, body);
        }
        Ok(body)
    }

    /// The values of `label` over the series `selector` selects (Grafana's `label_values`).
    pub fn label_values(&self, selector: &str, label: &str) -> anyhow::Result<Vec<String>> {
        let body = self.api(&format!(
            "/api/v1/label/{}/values?match[]={}",
            encode(label),
            encode(selector)
        ))?;
        Ok(body["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The numeric value of a vector's first sample.
pub fn first_value(result: &[Value]) -> Option<f64> {
    result.first()?["value"][1].as_str()?.parse().ok()
}

/// The sum of a vector's sample values.
pub fn sum(result: &[Value]) -> f64 {
    result
        .iter()
        .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
        .sum()
}

/// The test server's configuration: the shipped scrape job as it is, but for its targets and
/// interval, plus the shipped alert rules (evaluated every second as well).
fn config_text(target_ports: &[u16]) -> anyhow::Result<String> {
    let shipped = crate::packaging("prometheus/vgpud-scrape.yml");
    let text = std::fs::read_to_string(&shipped)?;
    let mut config: serde_norway::Value = serde_norway::from_str(&text)?;
    let job = config
        .get_mut("scrape_configs")
        .and_then(|s| s.get_mut(0))
        .context("vgpud-scrape.yml has no scrape job")?;
    let interval = serde_norway::Value::from(format!("{SCRAPE_INTERVAL_S}s"));
    job["scrape_interval"] = interval.clone();
    job["scrape_timeout"] = interval.clone();
    let targets: Vec<String> = target_ports
        .iter()
        .map(|p| format!("'127.0.0.1:{p}'"))
        .collect();
    job["static_configs"] =
        serde_norway::from_str(&format!("[{{targets: [{}]}}]", targets.join(", ")))?;
    config["global"] = serde_norway::from_str(&format!(
        "{{scrape_interval: {SCRAPE_INTERVAL_S}s, evaluation_interval: {SCRAPE_INTERVAL_S}s}}"
    ))?;
    let rules = crate::packaging("prometheus/vgpud-alerts.yml");
    config["rule_files"] = serde_norway::Value::Sequence(vec![rules.display().to_string().into()]);
    Ok(serde_norway::to_string(&config)?)
}
