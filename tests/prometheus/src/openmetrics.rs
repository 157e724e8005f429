//! From the OpenMetrics text vgpud serves to the classic Prometheus text format (0.0.4) that
//! `promtool check metrics` reads, and which of promtool's lint findings are expected.
//!
//! promtool 2.42's linter parses only the classic format: there an OpenMetrics counter family
//! `x` (samples `x_total`) must be named `x_total` in `# HELP`/`# TYPE`, `info` and `stateset`
//! are not types, and `# UNIT`/`# EOF` are mere comments. The mapping below is the one the
//! OpenMetrics specification gives for exposing to the classic format ("Compatibility with
//! Prometheus text format"); the samples themselves are passed through unchanged, so every name,
//! label and value promtool lints is the one the daemon served.

use std::collections::{BTreeSet, HashMap};

/// The label names dcgm-exporter uses that are not snake_case. FORMATS.md requires dcgm's exact
/// labels so that existing dashboards work; promtool flags them, and only them, as camelCase.
pub const DCGM_CAMEL_CASE_LABELS: &[&str] = &["modelName"];

/// promtool's finding for a camelCase label name.
const CAMEL_CASE_LABEL: &str = "label names should be written in 'snake_case' not 'camelCase'";

/// `text` (OpenMetrics) in the classic text format.
pub fn to_classic(text: &str) -> String {
    let types: HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect();
    let classic_name = |family: &str| -> String {
        match types.get(family).copied() {
            Some("counter") => format!("{family}_total"),
            Some("info") => format!("{family}_info"),
            _ => family.to_owned(),
        }
    };
    let mut out = String::new();
    for line in text.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|r| r.split_once(' ')) {
            let kind = match kind {
                "info" | "stateset" => "gauge",
                "unknown" | "gaugehistogram" => "untyped",
                other => other,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", classic_name(family)));
        } else if let Some((family, help)) =
            line.strip_prefix("# HELP ").and_then(|r| r.split_once(' '))
        {
            // OpenMetrics escapes `"` in HELP; the classic format knows only `\\` and `\n`.
            let help = help.replace("\\\"", "\"");
            out.push_str(&format!("# HELP {} {help}\n", classic_name(family)));
        } else if !line.starts_with('#') && is_created_sample(line, &types) {
            // `_created` is OpenMetrics' creation time of a counter or histogram; the classic
            // format has no place for it (Prometheus drops it on ingestion too).
        } else {
            out.push_str(strip_exemplar(line));
            out.push('\n');
        }
    }
    out
}

fn is_created_sample(line: &str, types: &HashMap<&str, &str>) -> bool {
    sample_name(line)
        .strip_suffix("_created")
        .and_then(|family| types.get(family))
        .is_some_and(|t| matches!(*t, "counter" | "histogram" | "summary"))
}

/// A sample line without its exemplar (` # {…} value`), which the classic format lacks.
fn strip_exemplar(line: &str) -> &str {
    // Label values may contain " # {": look for it only after the label set.
    let after_labels = labels_end(line);
    match line[after_labels..].find(" # {") {
        Some(at) => &line[..after_labels + at],
        None => line,
    }
}

/// Where a sample line's label set ends (just past its `}`), or where its name ends when it
/// has none. Quoted label values may hold `}` and escaped quotes.
fn labels_end(line: &str) -> usize {
    let name_end = sample_name(line).len();
    if !line[name_end..].starts_with('{') {
        return name_end;
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line.char_indices().skip(name_end + 1) {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return i + 1,
            _ => {}
        }
    }
    line.len()
}

/// The metric name of a sample line.
pub fn sample_name(line: &str) -> &str {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    &line[..end]
}

/// Label names that appear on the samples of each metric name (classic names).
pub fn label_names(text: &str) -> HashMap<String, BTreeSet<String>> {
    let mut out: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = sample_name(line).to_owned();
        let entry = out.entry(name).or_default();
        if let Some(labels) = line
            .split_once('{')
            .and_then(|(_, rest)| rest.rsplit_once('}'))
        {
            entry.extend(label_keys(labels.0));
        }
    }
    out
}

/// The keys of a label set `a="x",b="y\"z"` (values may hold escaped quotes and commas).
fn label_keys(labels: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = labels;
    while let Some((key, after)) = rest.split_once("=\"") {
        keys.push(key.trim_start_matches(',').trim().to_owned());
        let mut escaped = false;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i;
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = after.get(end + 1..).unwrap_or("");
    }
    keys
}

/// The lines of promtool's lint report (`<metric> <problem>`) that are not expected for
/// `classic`: a camelCase-label finding is expected only where every camelCase label of the
/// metric is one of dcgm-exporter's ([`DCGM_CAMEL_CASE_LABELS`]).
pub fn unexpected_findings(report: &str, classic: &str) -> Vec<String> {
    let labels = label_names(classic);
    report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|line| {
            let Some((metric, problem)) = line.split_once(' ') else {
                return true;
            };
            if problem != CAMEL_CASE_LABEL {
                return true;
            }
            let camel: Vec<&String> = labels
                .iter()
                .filter(|(name, _)| family_of(name) == metric || name.as_str() == metric)
                .flat_map(|(_, keys)| keys)
                .filter(|k| is_camel_case(k))
                .collect();
            camel.is_empty()
                || camel
                    .iter()
                    .any(|k| !DCGM_CAMEL_CASE_LABELS.contains(&k.as_str()))
        })
        .map(str::to_owned)
        .collect()
}

/// A histogram or summary sample's family (`x_bucket` → `x`); other names unchanged.
fn family_of(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// promlint's test: a lower-case letter followed by an upper-case one.
fn is_camel_case(name: &str) -> bool {
    name.as_bytes()
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str = "# HELP vgpud_allocation_requests Allocation requests by \\\"outcome\\\".
# TYPE vgpud_allocation_requests counter
vgpud_allocation_requests_total{outcome=\"ok\",reason=\"\"} 3 # {trace_id=\"x\"} 1.0
vgpud_allocation_requests_created{outcome=\"ok\",reason=\"\"} 1700000000.0
# HELP vgpud_slice Slices and their VMs.
# TYPE vgpud_slice info
vgpud_slice_info{slice=\"s1\",vm_name=\"a # {b}\"} 1
# HELP vgpud_allocation_duration_seconds Request to ready.
# TYPE vgpud_allocation_duration_seconds histogram
# UNIT vgpud_allocation_duration_seconds seconds
vgpud_allocation_duration_seconds_bucket{le=\"+Inf\"} 1
vgpud_allocation_duration_seconds_sum 0.5
vgpud_allocation_duration_seconds_count 1
# HELP vgpud_gpu_health Health state.
# TYPE vgpud_gpu_health stateset
vgpud_gpu_health{gpu=\"0\",vgpud_gpu_health=\"ok\"} 1
# EOF
";

    #[test]
    fn families_are_renamed_the_way_the_classic_format_names_them() {
        let classic = to_classic(OPEN);
        assert!(
            classic.contains("# TYPE vgpud_allocation_requests_total counter\n"),
            "{classic}"
        );
        assert!(
            classic.contains(
                "# HELP vgpud_allocation_requests_total Allocation requests by \"outcome\".\n"
            ),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE vgpud_slice_info gauge\n"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE vgpud_gpu_health gauge\n"),
            "{classic}"
        );
        assert!(classic.contains("# TYPE vgpud_allocation_duration_seconds histogram\n"));
        for gone in ["# EOF", "# UNIT", "_created", "trace_id"] {
            assert!(!classic.contains(gone), "{gone} left in {classic}");
        }
    }

    #[test]
    fn samples_pass_through_unchanged() {
        let classic = to_classic(OPEN);
        for kept in [
            "vgpud_allocation_requests_total{outcome=\"ok\",reason=\"\"} 3\n",
            "vgpud_slice_info{slice=\"s1\",vm_name=\"a # {b}\"} 1\n",
            "vgpud_allocation_duration_seconds_count 1\n",
        ] {
            assert!(classic.contains(kept), "{kept} missing from {classic}");
        }
    }

    #[test]
    fn only_dcgm_camel_case_labels_are_forgiven() {
        let classic = "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",modelName=\"A100\"} 1\nvgpud_x{fooBar=\"1\",modelName=\"A\"} 1\nvgpud_y{badName=\"1\"} 1\n";
        let report =
            "DCGM_FI_DEV_GPU_UTIL label names should be written in 'snake_case' not 'camelCase'
vgpud_x label names should be written in 'snake_case' not 'camelCase'
vgpud_y label names should be written in 'snake_case' not 'camelCase'
vgpud_z counter metrics should have \"_total\" suffix
";
        let left = unexpected_findings(report, classic);
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.iter().all(|l| !l.starts_with("DCGM_")), "{left:?}");
    }

    #[test]
    fn label_keys_survive_quotes_and_commas_in_values() {
        assert_eq!(
            label_keys(r#"a="x,b=\"y",c="",UUID="GPU-1""#),
            vec!["a", "c", "UUID"]
        );
    }
}
