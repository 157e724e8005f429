//! `vgpuctl layouts import`: reads a mig-parted config or an mdevctl definitions directory here,
//! sends the content to `POST /v1/layouts/import` (the daemon never opens a path a client names)
//! and shows the diff the server answers.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::ImportArgs;
use crate::table::{Table, cell};
use vgpuctl::client::{Client, Failure};

/// The largest mig-parted config the server takes, characters (`wire::import::MAX_CONFIG_CHARS`).
const MAX_CONFIG_CHARS: u64 = 256 * 1024;

/// The largest mdevctl definition the server takes, characters (`MAX_DEFINITION_CHARS`).
const MAX_DEFINITION_CHARS: u64 = 4096;

/// Bytes a character may take in UTF-8: a file larger than this many per character allowed is
/// refused before it is read.
const MAX_UTF8: u64 = 4;

/// Runs the import; the text (or JSON) to print.
pub async fn run(client: &Client, json: bool, args: &ImportArgs) -> Result<String, Failure> {
    let body = request(args)?;
    let outcome = client
        .call("POST", "/v1/layouts/import", &[], Some(&body))
        .await?
        .body;
    if json {
        let mut s =
            serde_json::to_string_pretty(&outcome).map_err(|e| Failure::Other(e.to_string()))?;
        s.push('\n');
        return Ok(s);
    }
    Ok(outcome_text(&outcome))
}

/// The request body, from the file or directory named on the command line.
fn request(args: &ImportArgs) -> Result<Value, Failure> {
    let mut body = match (&args.mig_parted, &args.mdevctl) {
        (Some(file), _) => {
            let mut b = json!({"format": "mig-parted", "content": read_config(file)?});
            if let Some(name) = &args.config {
                b["config"] = json!(name);
            }
            b
        }
        (None, Some(dir)) => json!({"format": "mdevctl", "definitions": read_definitions(dir)?}),
        // clap requires one of the two.
        (None, None) => return Err(Failure::Other("--mig-parted or --mdevctl".into())),
    };
    body["dry_run"] = json!(args.dry_run);
    Ok(body)
}

fn local(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::Other(format!("{}: {e}", path.display()))
}

fn too_large(path: &Path, size: &str, limit: u64) -> Failure {
    Failure::Other(format!(
        "{} is too large: {size}; vgpud accepts at most {limit} characters",
        path.display()
    ))
}

/// Reads a text file of at most `limit` characters.
fn read_text(path: &Path, limit: u64) -> Result<String, Failure> {
    let len = std::fs::metadata(path).map_err(|e| local(path, e))?.len();
    if len > limit * MAX_UTF8 {
        return Err(too_large(path, &format!("{len} bytes"), limit));
    }
    let text = std::fs::read_to_string(path).map_err(|e| local(path, e))?;
    check_chars(path, &text, limit)?;
    Ok(text)
}

fn check_chars(path: &Path, text: &str, limit: u64) -> Result<(), Failure> {
    let chars = text.chars().count() as u64;
    if chars > limit {
        return Err(too_large(path, &format!("{chars} characters"), limit));
    }
    Ok(())
}

fn read_config(file: &Path) -> Result<String, Failure> {
    if file.as_os_str() != "-" {
        return read_text(file, MAX_CONFIG_CHARS);
    }
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_CONFIG_CHARS * MAX_UTF8 + 1)
        .read_to_string(&mut text)
        .map_err(|e| local(file, e))?;
    check_chars(file, &text, MAX_CONFIG_CHARS)?;
    Ok(text)
}

/// mdevctl's layout: `<dir>/<parent>/<uuid>`. Other entries (its `scripts.d`, editor backups)
/// are not definitions and are left out.
fn read_definitions(dir: &Path) -> Result<Vec<Value>, Failure> {
    let mut files: Vec<(String, String, PathBuf)> = Vec::new();
    for parent in std::fs::read_dir(dir).map_err(|e| local(dir, e))? {
        let parent = parent.map_err(|e| local(dir, e))?;
        let Some(pname) = parent.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if pname == "scripts.d" || !parent.path().is_dir() {
            continue;
        }
        let entries = std::fs::read_dir(parent.path()).map_err(|e| local(&parent.path(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| local(&parent.path(), e))?;
            let path = entry.path();
            match entry.file_name().to_str() {
                Some(name) if is_uuid(name) && path.is_file() => {
                    files.push((pname.clone(), name.to_owned(), path));
                }
                _ => {}
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|(parent, uuid, path)| {
            let content = read_text(&path, MAX_DEFINITION_CHARS)?;
            Ok(json!({"parent": parent, "uuid": uuid, "content": content}))
        })
        .collect()
}

/// A UUID as mdevctl names its files: hyphenated, lower case.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

fn entries_text(entries: &Value) -> String {
    let parts: Vec<String> = entries
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| format!("{}x{}", cell(&e["count"]), cell(&e["type"])))
        .collect();
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

fn mig_text(v: &Value) -> String {
    match v.as_bool() {
        Some(true) => "on".to_owned(),
        Some(false) => "off".to_owned(),
        None => "-".to_owned(),
    }
}

/// Slices to destroy, by type; an allocated one stays until it is released.
fn destroy_text(destroy: &Value) -> String {
    let mut counts: Vec<(String, bool, u32)> = Vec::new();
    for d in destroy.as_array().into_iter().flatten() {
        let key = (cell(&d["type"]), d["allocated"] == true);
        match counts
            .iter_mut()
            .find(|c| (c.0.as_str(), c.1) == (key.0.as_str(), key.1))
        {
            Some(c) => c.2 += 1,
            None => counts.push((key.0, key.1, 1)),
        }
    }
    if counts.is_empty() {
        return "-".to_owned();
    }
    counts
        .iter()
        .map(|(t, allocated, n)| {
            let held = if *allocated { " (allocated)" } else { "" };
            format!("{n}x{t}{held}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn outcome_text(o: &Value) -> String {
    let mut out = String::from(if o["dry_run"] == true {
        "dry run: nothing applied\n\n"
    } else {
        "applied\n\n"
    });
    if o["format"] == "mig-parted" {
        out.push_str(&layouts_diff_text(o));
    } else {
        out.push_str(&definitions_text(o));
    }
    out
}

fn layouts_diff_text(o: &Value) -> String {
    let changes = &o["layouts"];
    let mut t = Table::new(&["LAYOUT", "CHANGE", "SLICES", "MIG"]);
    for (key, word) in [("added", "added"), ("changed", "changed")] {
        for l in changes[key].as_array().into_iter().flatten() {
            t.row(vec![
                cell(&l["name"]),
                word.to_owned(),
                entries_text(&l["slices"]),
                mig_text(&l["mig"]),
            ]);
        }
    }
    for (key, word) in [("removed", "removed"), ("unchanged", "unchanged")] {
        for name in changes[key].as_array().into_iter().flatten() {
            t.row(vec![cell(name), word.to_owned(), "-".into(), "-".into()]);
        }
    }
    let mut out = t.render();
    out.push('\n');
    let mut g = Table::new(&["GPU", "LAYOUT", "CREATE", "DESTROY", "MIG"]);
    for p in o["gpus"].as_array().into_iter().flatten() {
        g.row(vec![
            cell(&p["gpu"]),
            cell(&p["layout"]),
            entries_text(&p["create"]),
            destroy_text(&p["destroy"]),
            mig_text(&p["mig"]),
        ]);
    }
    out.push_str(&g.render());
    for p in o["gpus"].as_array().into_iter().flatten() {
        out.push_str(&vf_enable_text(&p["gpu"], &p["vf_enable"]));
    }
    if let Some(view) = o.get("result").filter(|v| !v.is_null()) {
        out.push('\n');
        out.push_str(&crate::layouts_text(view));
    }
    out
}

/// The destructive VF step on one GPU, as its own line (none when the plan has none).
fn vf_enable_text(gpu: &Value, step: &Value) -> String {
    if step.is_null() {
        return String::new();
    }
    let list = |v: &Value| {
        v.as_array()
            .into_iter()
            .flatten()
            .map(cell)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = format!(
        "{}: enabling VFs destroys every MIG GPU instance: {}",
        cell(gpu),
        list(&step["destroys"])
    );
    match step["refused"].as_str() {
        Some(why) => line.push_str(&format!("; refused: {why}")),
        None if step["gives_up"].as_array().is_some_and(|a| !a.is_empty()) => {
            line.push_str(&format!(
                "; free slices destroyed first: {}",
                list(&step["gives_up"])
            ));
        }
        None => {}
    }
    line.push('\n');
    line
}

fn definitions_text(o: &Value) -> String {
    let mut t = Table::new(&["PARENT", "UUID", "TYPE", "ACTION", "REASON"]);
    for d in o["definitions"].as_array().into_iter().flatten() {
        t.row(vec![
            cell(&d["parent"]),
            cell(&d["uuid"]),
            cell(&d["type"]),
            cell(&d["action"]),
            cell(&d["reason"]),
        ]);
    }
    let mut out = t.render();
    if let Some(r) = o.get("report").filter(|v| !v.is_null()) {
        let n = |k: &str| r[k].as_array().map_or(0, Vec::len);
        out.push_str(&format!(
            "\nadopted {}, created {}, skipped {}\n",
            n("adopted"),
            n("created"),
            n("skipped")
        ));
        for s in r["skipped"].as_array().into_iter().flatten() {
            out.push_str(&format!("skipped: {}\n", cell(s)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mdevctl_file_names_are_definitions() {
        assert!(is_uuid("b1c7a1d2-0000-4000-8000-000000000001"));
        for bad in [
            "B1C7A1D2-0000-4000-8000-000000000001",
            "b1c7a1d2-0000-4000-8000-00000000000",
            "b1c7a1d2-0000-4000-8000-000000000001~",
            "scripts.d",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }

    #[test]
    fn the_diff_reads_as_tables() {
        let o = json!({
            "dry_run": true, "format": "mig-parted",
            "layouts": {"added": [{"name": "all-balanced#1", "slices": [{"type": "1g.10gb", "count": 2}], "mig": true}],
                        "changed": [], "removed": ["small"], "unchanged": []},
            "gpus": [{"gpu": "0000:07:00.0", "layout": "all-balanced#1",
                      "create": [{"type": "1g.10gb", "count": 2}],
                      "destroy": [{"slice": "x", "type": "7g.80gb", "allocated": true}], "mig": null}],
            "definitions": []
        });
        let text = outcome_text(&o);
        assert!(text.starts_with("dry run: nothing applied"), "{text}");
        assert!(
            text.contains("all-balanced#1  added    2x1g.10gb  on"),
            "{text}"
        );
        assert!(text.contains("small           removed"), "{text}");
        assert!(text.contains("1x7g.80gb (allocated)"), "{text}");
        assert!(!text.contains("enabling VFs"), "{text}");
    }

    #[test]
    fn the_vf_step_is_its_own_line() {
        let o = json!({
            "dry_run": true, "format": "mig-parted",
            "layouts": {"added": [], "changed": [], "removed": [], "unchanged": ["l"]},
            "gpus": [{"gpu": "0000:18:00.0", "layout": "l",
                      "create": [{"type": "NVIDIA H200X-1-18C", "count": 1}], "destroy": [],
                      "vf_enable": {"destroys": ["GPU instance 1 (start 0, size 1)"],
                                    "gives_up": [], "refused": "slice s is allocated"}},
                     {"gpu": "0000:19:00.0", "layout": "l", "create": [], "destroy": [],
                      "vf_enable": {"destroys": ["GPU instance 2 (start 6, size 1)"],
                                    "gives_up": ["s2"]}}],
            "definitions": []
        });
        let text = outcome_text(&o);
        assert!(
            text.contains(
                "0000:18:00.0: enabling VFs destroys every MIG GPU instance: GPU instance 1 \
                 (start 0, size 1); refused: slice s is allocated\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("0000:19:00.0: enabling VFs destroys every MIG GPU instance: GPU instance 2 (start 6, size 1); free slices destroyed first: s2\n"),
            "{text}"
        );
    }
}
