//! The shipped Grafana dashboard (`packaging/grafana/vgpud.json`): its queries, its template
//! variables, and both made into plain PromQL the way Grafana would before it sends them.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::server::Prometheus;

/// One query of a panel.
#[derive(Debug, Clone)]
pub struct Query {
    /// The panel's title and the target's `refId`, to name it in messages.
    pub panel: String,
    /// The PromQL as written in the dashboard.
    pub expr: String,
}

/// A `query` template variable.
#[derive(Debug, Clone)]
pub struct Variable {
    /// Its name (`$name` in queries).
    pub name: String,
    /// Its query, e.g. `label_values(up{job="vgpud"}, instance)`.
    pub query: String,
}

/// The dashboard JSON.
pub fn load() -> anyhow::Result<Value> {
    let path = crate::packaging("grafana/vgpud.json");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(serde_json::from_str(&text)?)
}

/// Every `targets[].expr` of every panel, rows' nested panels included.
pub fn queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    collect(&dashboard["panels"], &mut out);
    out
}

fn collect(panels: &Value, out: &mut Vec<Query>) {
    for panel in panels.as_array().into_iter().flatten() {
        collect(&panel["panels"], out);
        for t in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push(Query {
                    panel: format!(
                        "{} / {}",
                        panel["title"].as_str().unwrap_or("?"),
                        t["refId"].as_str().unwrap_or("?")
                    ),
                    expr: expr.to_owned(),
                });
            }
        }
    }
}

/// The dashboard's `query` variables in order (a later one may use an earlier one).
pub fn variables(dashboard: &Value) -> Vec<Variable> {
    dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| {
            // Grafana writes the query as a string (older) or as {query, refId} (10 and later).
            let query = v["query"]["query"].as_str().or(v["query"].as_str())?;
            Some(Variable {
                name: v["name"].as_str()?.to_owned(),
                query: query.to_owned(),
            })
        })
        .collect()
}

/// Grafana's interval macros, replaced by what it would send for a short range on a server
/// scraping every second: `$__rate_interval` is at least four scrape intervals (15 s keeps a
/// margin on a loaded machine), `$__range` the time range shown.
const MACROS: &[(&str, &str)] = &[
    ("$__rate_interval", "15s"),
    ("${__rate_interval}", "15s"),
    ("$__interval", "5s"),
    ("${__interval}", "5s"),
    ("$__range", "1m"),
    ("${__range}", "1m"),
];

/// `expr` with the macros and the variables in; `values` holds each variable's text as it goes
/// into the query (see [`as_regex`]).
pub fn substitute(expr: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = expr.to_owned();
    for (macro_name, value) in MACROS {
        out = out.replace(macro_name, value);
    }
    // Longer names first, so `$gpu_type` is not taken for `$gpu` followed by `_type`.
    let mut names: Vec<&String> = values.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        let text = &values[name];
        out = out
            .replace(&format!("${{{name}}}"), text)
            .replace(&format!("[[{name}]]"), text)
            .replace(&format!("${name}"), text);
    }
    out
}

/// A multi-value variable's values as Grafana sends them into `=~`: `(a|b)`, each value
/// regex-escaped.
pub fn as_regex(values: &[String]) -> String {
    let escaped: Vec<String> = values.iter().map(|v| regex_escape(v)).collect();
    format!("({})", escaped.join("|"))
}

/// A value as a regex inside a PromQL string: the regex escape `\.` must itself be escaped
/// there (`\\.`), as Grafana's Prometheus data source does.
fn regex_escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push_str(r"\\");
        }
        out.push(c);
    }
    out
}

/// The values of `variable` from the server (`label_values(selector, label)` or
/// `label_values(label)`), with the earlier variables substituted.
pub fn resolve(
    prometheus: &Prometheus,
    variable: &Variable,
    earlier: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let query = substitute(&variable.query, earlier);
    let Some(args) = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    else {
        bail!(
            "variable {}: only label_values() is supported: {query}",
            variable.name
        );
    };
    let (selector, label) = match args.rsplit_once(',') {
        Some((selector, label)) => (selector.trim().to_owned(), label.trim()),
        None => (format!("{{{}!=\"\"}}", args.trim()), args.trim()),
    };
    prometheus.label_values(&selector, label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_macros_become_plain_promql() {
        let values = BTreeMap::from([
            (
                "instance".to_owned(),
                as_regex(&["127.0.0.1:9835".to_owned()]),
            ),
            (
                "gpu".to_owned(),
                as_regex(&["0".to_owned(), "1".to_owned()]),
            ),
        ]);
        let expr = r#"rate(x{instance=~"$instance", gpu=~"${gpu}"}[$__rate_interval])"#;
        assert_eq!(
            substitute(expr, &values),
            r#"rate(x{instance=~"(127\\.0\\.0\\.1:9835)", gpu=~"(0|1)"}[15s])"#
        );
    }

    #[test]
    fn the_shipped_dashboard_has_queries_and_both_variables() {
        let d = load().unwrap();
        assert!(queries(&d).len() > 30);
        let names: Vec<String> = variables(&d).into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["instance", "gpu"]);
    }

    /// Grafana lays panels on a 24-column grid; overlapping ones are drawn over each other and
    /// a duplicate id makes it edit the wrong panel.
    #[test]
    fn panels_have_unique_ids_and_do_not_overlap() {
        let d = load().unwrap();
        let panels = d["panels"].as_array().unwrap();
        let mut ids = std::collections::BTreeSet::new();
        let mut boxes: Vec<(String, [i64; 4])> = Vec::new();
        for p in panels {
            let title = p["title"].as_str().unwrap().to_owned();
            assert!(
                ids.insert(p["id"].as_i64().unwrap()),
                "duplicate id: {title}"
            );
            let g = &p["gridPos"];
            let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| g[k].as_i64().unwrap());
            assert!(
                x >= 0 && w > 0 && x + w <= 24 && h > 0,
                "{title} off the grid: {g}"
            );
            for (other, [ox, oy, ow, oh]) in &boxes {
                let apart = x + w <= *ox || *ox + ow <= x || y + h <= *oy || *oy + oh <= y;
                assert!(apart, "{title} overlaps {other}");
            }
            boxes.push((title, [x, y, w, h]));
        }
    }

    #[test]
    fn every_panel_uses_the_datasource_variable_and_every_query_the_instance() {
        let d = load().unwrap();
        for panel in d["panels"].as_array().unwrap() {
            if panel["type"] != "row" {
                assert_eq!(
                    panel["datasource"]["uid"], "${datasource}",
                    "{}",
                    panel["title"]
                );
            }
        }
        for q in queries(&d) {
            assert!(q.expr.contains("$instance"), "{}: {}", q.panel, q.expr);
        }
    }
}
