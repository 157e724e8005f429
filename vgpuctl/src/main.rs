//! vgpuctl: the command-line client of vgpud's REST API over its unix socket.
//!
//! It owns presentation only (tables, `--json`, exit statuses); every decision is the server's.
//! Exit statuses: 0 success, 1 the server refused or failed (its error code is printed),
//! 2 usage error, 3 cannot connect.

mod cli;
mod import;
mod table;

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use serde_json::{Value, json};

use cli::{
    AllocCommand, Cli, Command, GpuCommand, LayoutsCommand, RequestArgs, ScoreArgs, SliceCommand,
};
use table::{Table, cell};
use vgpuctl::client::{Client, Failure};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpuctl: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&cli)) {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth reporting.
            let _ = out.write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!("vgpuctl: {f}");
            ExitCode::from(match f {
                Failure::Connect(_) => 3,
                Failure::Server { .. } | Failure::Other(_) => 1,
            })
        }
    }
}

async fn run(cli: &Cli) -> Result<String, Failure> {
    let client = Client::new(&cli.socket);
    let json = cli.json;
    match &cli.command {
        Command::Host => {
            let mut host = client.get("/v1/host").await?;
            // A daemon older than the Placement reporter has no such route: the host alone.
            if let Ok(placement) = client.get("/v1/placement").await {
                host["placement"] = placement;
            }
            show(json, host, host_text)
        }
        Command::Gpus => show(json, client.get("/v1/gpus").await?, gpus_text),
        Command::Gpu {
            action: Some(GpuCommand::Quarantine { address, reason }),
            ..
        } => {
            let path = format!("/v1/gpus/{}/quarantine", segment(address)?);
            let body = json!({ "reason": reason });
            let q = client.call("POST", &path, &[], Some(&body)).await?.body;
            show(json, q, |q| {
                format!(
                    "GPU {address} quarantined since {}: {}\n",
                    q["since"].as_str().unwrap_or("?"),
                    q["reason"].as_str().unwrap_or("")
                )
            })
        }
        Command::Gpu {
            action: Some(GpuCommand::Release { address }),
            ..
        } => {
            let path = format!("/v1/gpus/{}/release", segment(address)?);
            let q = client.call("POST", &path, &[], None).await?.body;
            show(json, q, |_| format!("GPU {address} released\n"))
        }
        Command::Gpu { address, .. } => show(
            json,
            client
                .get(&format!(
                    "/v1/gpus/{}",
                    segment(address.as_deref().unwrap_or_default())?
                ))
                .await?,
            gpu_text,
        ),
        Command::Slices => show(json, client.get("/v1/slices").await?, slices_text),
        Command::Slice(SliceCommand::Create {
            gpu,
            kind,
            consumer,
            vm,
        }) => {
            let mut body = json!({"gpu": gpu, "kind": parse_kind(kind)?});
            if let Some(c) = consumer {
                body["owner"] = json!({"consumer": c, "vm": vm});
            }
            let made = client
                .call("POST", "/v1/slices", &[], Some(&body))
                .await?
                .body;
            show(json, made, |v| slices_text(&json!([v])))
        }
        Command::Slice(SliceCommand::Destroy { id }) => {
            client
                .call("DELETE", &format!("/v1/slices/{}", segment(id)?), &[], None)
                .await?;
            Ok(done(json, &format!("slice {id} destroyed\n")))
        }
        Command::Alloc(AllocCommand::Create {
            consumer,
            vm,
            idempotency_key,
            placement_consumer,
            request,
        }) => {
            let mut body =
                json!({"consumer": consumer, "vm": vm, "request": request_json(request)});
            if let Some(p) = placement_consumer {
                body["placement_consumer"] = json!(p);
            }
            let headers: Vec<(&str, &str)> = idempotency_key
                .iter()
                .map(|k| ("idempotency-key", k.as_str()))
                .collect();
            let made = client
                .call("POST", "/v1/allocations", &headers, Some(&body))
                .await?
                .body;
            show(json, made, |v| allocations_text(&json!([v])))
        }
        Command::Alloc(AllocCommand::List) => {
            show(json, client.get("/v1/allocations").await?, allocations_text)
        }
        Command::Alloc(AllocCommand::Show { id }) => show(
            json,
            client
                .get(&format!("/v1/allocations/{}", segment(id)?))
                .await?,
            |v| allocations_text(&json!([v])),
        ),
        Command::Alloc(AllocCommand::Release { id }) => {
            client
                .call(
                    "DELETE",
                    &format!("/v1/allocations/{}", segment(id)?),
                    &[],
                    None,
                )
                .await?;
            Ok(done(json, &format!("allocation {id} released\n")))
        }
        Command::Layouts(LayoutsCommand::Get) => {
            show(json, client.get("/v1/layouts").await?, layouts_text)
        }
        Command::Layouts(LayoutsCommand::Set {
            file,
            if_match,
            no_wait,
        }) => set_layouts(&client, json, file, if_match.as_deref(), *no_wait).await,
        Command::Layouts(LayoutsCommand::Import(args)) => import::run(&client, json, args).await,
        Command::Score(ScoreArgs { mix: true, .. }) => {
            show(json, client.get("/v1/demand-mix").await?, mix_text)
        }
        Command::Score(ScoreArgs {
            request: Some(request),
            ..
        }) => {
            let score = client
                .call(
                    "POST",
                    "/v1/placement-score",
                    &[],
                    Some(&request_json(request)),
                )
                .await?
                .body;
            show(json, score, score_text)
        }
        Command::Score(ScoreArgs { request: None, .. }) => Err(Failure::Other(
            "score needs a request (--type ...) or --mix".into(),
        )),
        Command::Events { count } => events(&client, json, *count).await,
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "vgpuctl", &mut out);
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
        Command::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut out)
                .map_err(|e| Failure::Other(format!("rendering the man page: {e}")))?;
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
    }
}

/// An id or address for a URL path: what the user typed, but never a path separator (the server
/// refuses bad ids with its own error; this keeps `..` from changing which route is asked).
fn segment(s: &str) -> Result<String, Failure> {
    if s.is_empty()
        || s.contains(['/', '?', '#', '%'])
        || s.chars().any(|c| c.is_control() || c == ' ')
        || s == "."
        || s == ".."
    {
        return Err(Failure::Other(format!("{s:?} is not an id or PCI address")));
    }
    Ok(s.to_owned())
}

fn show(json: bool, value: Value, text: impl FnOnce(&Value) -> String) -> Result<String, Failure> {
    if json {
        let mut s =
            serde_json::to_string_pretty(&value).map_err(|e| Failure::Other(e.to_string()))?;
        s.push('\n');
        Ok(s)
    } else {
        Ok(text(&value))
    }
}

fn done(json: bool, message: &str) -> String {
    if json {
        "{}\n".to_owned()
    } else {
        message.to_owned()
    }
}

fn request_json(r: &RequestArgs) -> Value {
    let mut v = json!({"type": r.slice_type, "count": r.count});
    for (k, val) in [
        ("gpu", r.gpu.clone().map(Value::from)),
        ("numa_policy", r.numa_policy.clone().map(Value::from)),
        ("vcpus", r.vcpus.map(Value::from)),
        ("memory_mib", r.memory_mib.map(Value::from)),
    ] {
        if let Some(val) = val {
            v[k] = val;
        }
    }
    v
}

/// `mig:PROFILE[@START]`, `mdev:TYPE`, `vgpu:ID`, `vf`, `gpu`.
fn parse_kind(s: &str) -> Result<Value, Failure> {
    let bad = || {
        Failure::Other(format!(
            "kind {s:?}: use mig:PROFILE[@START], mdev:TYPE, vgpu:TYPE-ID, vf or gpu"
        ))
    };
    Ok(match s.split_once(':') {
        None if s == "vf" => json!({"backend": "sriov-vf"}),
        None if s == "gpu" => json!({"backend": "passthrough"}),
        Some(("mig", rest)) => match rest.split_once('@') {
            Some((p, start)) => {
                json!({"backend": "mig", "profile": p, "start": start.parse::<u32>().map_err(|_| bad())?})
            }
            None => json!({"backend": "mig", "profile": rest}),
        },
        Some(("mdev", t)) => json!({"backend": "mdev", "type_id": t}),
        Some(("vgpu", id)) => {
            json!({"backend": "nvidia-vfio", "vgpu_type": id.parse::<u32>().map_err(|_| bad())?})
        }
        _ => return Err(bad()),
    })
}

async fn set_layouts(
    client: &Client,
    json: bool,
    file: &std::path::Path,
    if_match: Option<&str>,
    no_wait: bool,
) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    read.map_err(|e| Failure::Other(format!("reading {}: {e}", file.display())))?;
    let body: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::Other(format!("{}: not JSON: {e}", file.display())))?;
    let headers: Vec<(&str, &str)> = if_match.iter().map(|e| ("if-match", *e)).collect();
    let accepted = client
        .call("PUT", "/v1/layouts", &headers, Some(&body))
        .await?;
    let location = accepted
        .headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut op = accepted.body;
    while !no_wait && op["state"] == "running" {
        tokio::time::sleep(Duration::from_millis(200)).await;
        op = client.get(&location).await?;
    }
    if op["state"] == "failed" {
        return Err(Failure::Server {
            status: hyper::StatusCode::OK,
            code: cell(&op["error"]["code"]),
            message: format!(
                "layout apply {} failed: {}",
                cell(&op["id"]),
                cell(&op["error"]["message"])
            ),
        });
    }
    show(json, op, |op| match op.get("result") {
        Some(view) if !view.is_null() => layouts_text(view),
        _ => format!("layout apply {} {}\n", cell(&op["id"]), cell(&op["state"])),
    })
}

async fn events(client: &Client, json: bool, count: Option<u64>) -> Result<String, Failure> {
    let mut seen = 0u64;
    let mut out = std::io::stdout();
    client
        .events(|name, data| {
            let line = if json {
                format!("{data}\n")
            } else {
                format!("{name:<20} {data}\n")
            };
            // Events are printed as they come, not collected.
            let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
            seen += 1;
            count.is_none_or(|c| seen < c)
        })
        .await?;
    Ok(String::new())
}

fn host_text(h: &Value) -> String {
    let mut out = format!("host {} ({})\n\n", cell(&h["hostname"]), cell(&h["source"]));
    let mut nodes = Table::new(&["NUMA", "CPUS", "MEMORY MiB", "FREE MiB"]);
    for n in h["numa_nodes"].as_array().into_iter().flatten() {
        nodes.row(vec![
            cell(&n["id"]),
            cell(&n["cpus"]),
            cell(&n["memory_mib"]),
            cell(&n["memory_free_mib"]),
        ]);
    }
    out.push_str(&nodes.render());
    out.push('\n');
    out.push_str(&gpus_text(&h["gpus"]));
    out.push_str(&placement_text(&h["placement"]));
    out
}

/// The Placement reporter's standing, when it reports: in sync, or since when not and why.
fn placement_text(p: &Value) -> String {
    if p["enabled"] != true {
        return String::new();
    }
    let mut out = format!(
        "\nplacement  {} (compute node {} {}), {} GPU providers\n",
        cell(&p["endpoint"]),
        cell(&p["root_name"]),
        cell(&p["root_uuid"]),
        cell(&p["gpu_providers"]),
    );
    if p["in_sync"] == true {
        out.push_str(&format!(
            "           in sync, last sync {}\n",
            cell(&p["last_success"])
        ));
    } else {
        out.push_str(&format!(
            "           OUT OF SYNC since {}: {}\n",
            cell(&p["pending_since"]),
            p["last_error"]
                .as_str()
                .unwrap_or("changes not reported yet")
        ));
    }
    let differences = [
        (
            "missing_in_placement",
            "allocations Placement does not hold",
        ),
        (
            "unknown_to_vgpud",
            "Placement consumers vgpud does not know",
        ),
        ("amount_mismatch", "allocations whose amounts differ"),
    ];
    for (key, what) in differences {
        if p[key].as_u64().unwrap_or(0) > 0 {
            out.push_str(&format!("           {} {what}\n", cell(&p[key])));
        }
    }
    for w in p["warnings"].as_array().into_iter().flatten() {
        out.push_str(&format!("           warning: {}\n", cell(w)));
    }
    out
}

fn gpus_text(gpus: &Value) -> String {
    let mut t = Table::new(&["GPU", "MODEL", "NUMA", "DRIVER", "MIG", "SLICES"]);
    for g in gpus.as_array().into_iter().flatten() {
        let mig = match &g["mig"] {
            Value::Null => "-".to_owned(),
            m if m["enabled"] == true => "on".to_owned(),
            _ => "off".to_owned(),
        };
        t.row(vec![
            cell(&g["pci_address"]),
            cell(&g["model"]),
            cell(&g["numa_node"]),
            cell(&g["driver"]),
            mig,
            g["slices"].as_array().map_or(0, Vec::len).to_string(),
        ]);
    }
    t.render()
}

fn gpu_text(g: &Value) -> String {
    let mut out = format!(
        "{}  {}\nnuma node  {}\nhealth     {}{}\n",
        cell(&g["pci_address"]),
        cell(&g["model"]),
        cell(&g["numa_node"]),
        cell(&g["health"]),
        g["health_reasons"]
            .as_array()
            .map(|r| format!(" ({})", r.iter().map(cell).collect::<Vec<_>>().join("; ")))
            .unwrap_or_default()
    );
    if let Some(u) = g.get("utilization").filter(|u| !u.is_null()) {
        out.push_str(&format!(
            "utilisation {}% gpu, {} MiB used, {} MiB free\n",
            cell(&u["gpu_pct"]),
            cell(&u["memory_used_mib"]),
            cell(&u["memory_free_mib"])
        ));
    }
    out.push('\n');
    let mut t = Table::new(&["TYPE", "BACKEND", "FREE", "CREATABLE"]);
    for c in g["capacity"].as_array().into_iter().flatten() {
        t.row(vec![
            cell(&c["type"]),
            cell(&c["backend"]),
            cell(&c["free"]),
            cell(&c["creatable"]),
        ]);
    }
    out.push_str(&t.render());
    out
}

fn handle(s: &Value) -> String {
    ["mdev_uuid", "pci_address"]
        .iter()
        .map(|k| &s[*k])
        .find(|v| !v.is_null())
        .map(cell)
        .unwrap_or_else(|| "-".to_owned())
}

fn slices_text(slices: &Value) -> String {
    let mut t = Table::new(&[
        "ID", "GPU", "TYPE", "BACKEND", "STATE", "CONSUMER", "HANDLE",
    ]);
    for s in slices.as_array().into_iter().flatten() {
        t.row(vec![
            cell(&s["id"]),
            cell(&s["gpu"]),
            cell(&s["type"]),
            cell(&s["backend"]),
            cell(&s["state"]),
            cell(&s["consumer"]),
            handle(s),
        ]);
    }
    t.render()
}

fn allocations_text(allocs: &Value) -> String {
    let mut t = Table::new(&[
        "ALLOCATION",
        "CONSUMER",
        "VM",
        "PLACEMENT",
        "SLICE",
        "GPU",
        "TYPE",
        "NUMA",
        "HANDLE",
    ]);
    for a in allocs.as_array().into_iter().flatten() {
        for s in a["slices"].as_array().into_iter().flatten() {
            t.row(vec![
                cell(&a["id"]),
                cell(&a["consumer"]),
                cell(&a["vm"]),
                cell(&a["placement_consumer"]),
                cell(&s["id"]),
                cell(&s["gpu"]),
                cell(&s["type"]),
                cell(&s["numa_node"]),
                handle(s),
            ]);
        }
    }
    t.render()
}

pub(crate) fn layouts_text(v: &Value) -> String {
    let mut out = format!("etag {}\n\n", cell(&v["etag"]));
    let mut t = Table::new(&["LAYOUT", "SLICES"]);
    for l in v["layouts"].as_array().into_iter().flatten() {
        let slices: Vec<String> = l["slices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| format!("{}x{}", cell(&e["count"]), cell(&e["type"])))
            .collect();
        t.row(vec![cell(&l["name"]), slices.join(" ")]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut s = Table::new(&["GPU", "LAYOUT", "STATE", "REASONS"]);
    for g in v["status"].as_array().into_iter().flatten() {
        let reasons: Vec<String> = g["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(cell)
            .collect();
        s.row(vec![
            cell(&g["gpu"]),
            cell(&g["layout"]),
            cell(&g["state"]),
            reasons.join("; "),
        ]);
    }
    out.push_str(&s.render());
    out
}

fn score_text(v: &Value) -> String {
    let mut out = format!(
        "feasible {}  score {}  numa local {}  policy {}\n",
        cell(&v["feasible"]),
        cell(&v["score"]),
        cell(&v["numa_local"]),
        cell(&v["policy"])
    );
    if let Some(r) = v["reason"].as_str() {
        out.push_str(&format!("reason   {r}\n"));
    }
    let mut t = Table::new(&["GPU", "TYPE", "START"]);
    for p in v["placements"].as_array().into_iter().flatten() {
        t.row(vec![cell(&p["gpu"]), cell(&p["type"]), cell(&p["start"])]);
    }
    out.push_str(&t.render());
    out
}

/// `score --mix`: the counts, then one row per shape with its share in percent.
fn mix_text(v: &Value) -> String {
    let share = |x: &Value| {
        x.as_f64()
            .map_or("-".to_owned(), |s| format!("{:.1}%", s * 100.0))
    };
    let mut out = format!(
        "requests seen {}  prior share {}  half-life {} requests\n",
        cell(&v["requests_seen"]),
        share(&v["prior_share"]),
        cell(&v["half_life_requests"])
    );
    let mut t = Table::new(&["SHARE", "SLICE", "COUNT", "CPU", "MEMORY MIB", "MODELS"]);
    for s in v["shapes"].as_array().into_iter().flatten() {
        let models: Vec<&str> = s["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let cpu = s["cpu_milli"]
            .as_f64()
            .map_or("-".to_owned(), |c| format!("{}", c / 1000.0));
        t.row(vec![
            share(&s["share"]),
            cell(&s["slice"]),
            cell(&s["count"]),
            cpu,
            cell(&s["memory_mib"]),
            if models.is_empty() {
                "any".to_owned()
            } else {
                models.join("|")
            },
        ]);
    }
    out.push_str(&t.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_shows_shares_in_percent_heaviest_first() {
        let v = json!({"requests_seen": 3, "prior_share": 0.25, "half_life_requests": 5000.0,
            "shapes": [
                {"slice": "mig:1g.10gb", "count": 1, "cpu_milli": 4000, "memory_mib": 8192,
                 "models": [], "share": 0.5},
                {"slice": "gpu", "count": 2, "cpu_milli": 0, "memory_mib": 0,
                 "models": ["A100", "H100"], "share": 0.25}]});
        let text = mix_text(&v);
        assert!(
            text.starts_with("requests seen 3  prior share 25.0%"),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert!(
            rows[0].contains("50.0%") && rows[0].contains("mig:1g.10gb"),
            "{text}"
        );
        assert!(
            rows[1].contains("A100|H100") && rows[1].contains(" 2 "),
            "{text}"
        );
    }

    #[test]
    fn kinds_parse() {
        assert_eq!(
            parse_kind("mig:3g.40gb@4").unwrap(),
            json!({"backend": "mig", "profile": "3g.40gb", "start": 4})
        );
        assert_eq!(parse_kind("vf").unwrap(), json!({"backend": "sriov-vf"}));
        assert_eq!(
            parse_kind("vgpu:1421").unwrap(),
            json!({"backend": "nvidia-vfio", "vgpu_type": 1421})
        );
        assert!(parse_kind("warp").is_err());
        assert!(parse_kind("vgpu:x").is_err());
    }

    #[test]
    fn ids_cannot_change_the_route() {
        assert!(segment("0000:07:00.0").is_ok());
        for bad in ["..", "../x", "a%2f", "a b", ""] {
            assert!(segment(bad).is_err(), "{bad}");
        }
    }
}
