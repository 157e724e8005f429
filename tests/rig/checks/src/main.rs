//! `rig-checks kernel` runs the scenarios on the host it runs on (the rig's guest) and prints the
//! checks, the summary and one `RIG-OBSERVATIONS <json>` line. `rig-checks sim --profile FILE
//! --kernel OBSERVATIONS` runs them on the simulator and compares with the kernel's.
//! `rig-checks libvirt --nested-kernel FILE` pins a nested guest through a real libvirtd.
//! `rig-checks bench ...` is the real-kernel benchmark (`tests/rig/bench`, BENCHMARKS.md §7):
//! it prints one `RIG-BENCH <json>` line, which `rig-checks bench-table` renders on the host.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context;

const MARKER: &str = "RIG-OBSERVATIONS ";
const HOTPLUG_MARKER: &str = "RIG-HOTPLUG-OBSERVATIONS ";
const BENCH_MARKER: &str = "RIG-BENCH ";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rig-checks: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> anyhow::Result<bool> {
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["kernel"] => {
            let report = rig_checks::run_all(&sysfs::RealSysfs::host());
            report.print("kernel");
            println!("{MARKER}{}", serde_json::to_string(&report.observations)?);
            Ok(report.failures() == 0)
        }
        ["inventory", "--console", console] => inventory(console),
        ["engine", phase @ ("create" | "verify"), "--state-dir", dir] => engine(phase, dir),
        ["hotplug", "--state-dir", dir] => hotplug(dir),
        [
            "sim-hotplug",
            "--profile",
            profile,
            "--kernel",
            observations,
        ] => sim_hotplug(profile, observations),
        ["sim", "--profile", profile, "--kernel", observations] => compare(profile, observations),
        ["libvirt", "--nested-kernel", kernel] => libvirt(kernel),
        ["bench", rest @ ..] => bench(rest),
        ["bench-table", "--console", console, rest @ ..] => bench_table(console, rest),
        _ => anyhow::bail!(
            "usage: rig-checks kernel | rig-checks engine create|verify --state-dir DIR | rig-checks hotplug --state-dir DIR | rig-checks sim-hotplug --profile FILE --kernel OBSERVATIONS | rig-checks inventory --console FILE | rig-checks sim --profile FILE --kernel OBSERVATIONS | rig-checks libvirt --nested-kernel FILE | rig-checks bench --vgpud BIN --vgpuctl BIN [--mdevctl BIN] [--mdev-reps N] [--vf-reps N] [--list-reps N] [--max-mdevs N] | rig-checks bench-table --console FILE [--json OUT]"
        ),
    }
}

/// Runs the benchmark on the host it runs on (the rig's guest) and prints its marker line.
fn bench(args: &[&str]) -> anyhow::Result<bool> {
    let mut o = rig_checks::bench::Options {
        vgpud: Default::default(),
        vgpuctl: Default::default(),
        mdevctl: None,
        mdev_reps: 40,
        vf_reps: 5,
        list_reps: 11,
        max_mdevs: 64,
    };
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            anyhow::bail!("bench: {pair:?} has no value");
        };
        let count = || {
            value
                .parse::<usize>()
                .with_context(|| format!("{flag} {value}"))
        };
        match *flag {
            "--vgpud" => o.vgpud = value.into(),
            "--vgpuctl" => o.vgpuctl = value.into(),
            "--mdevctl" => o.mdevctl = Some(value.into()),
            "--mdev-reps" => o.mdev_reps = count()?,
            "--vf-reps" => o.vf_reps = count()?,
            "--list-reps" => o.list_reps = count()?,
            "--max-mdevs" => o.max_mdevs = count()?,
            _ => anyhow::bail!("bench: unknown flag {flag}"),
        }
    }
    anyhow::ensure!(
        !o.vgpud.as_os_str().is_empty() && !o.vgpuctl.as_os_str().is_empty(),
        "bench needs --vgpud and --vgpuctl"
    );
    let result = rig_checks::bench::run(&o)?;
    println!("{BENCH_MARKER}{result}");
    Ok(true)
}

/// Renders the guest's benchmark line from its console as a table; `--json OUT` keeps it.
fn bench_table(console: &str, rest: &[&str]) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(console).with_context(|| format!("reading {console}"))?;
    let json = text
        .lines()
        .find_map(|l| l.split_once(BENCH_MARKER).map(|(_, j)| j.trim()))
        .context("no RIG-BENCH line in the guest's output")?;
    let result: serde_json::Value = serde_json::from_str(json).context("RIG-BENCH is not JSON")?;
    match rest {
        [] => {}
        ["--json", out] => std::fs::write(out, serde_json::to_string_pretty(&result)? + "\n")
            .with_context(|| format!("writing {out}"))?,
        _ => anyhow::bail!("bench-table: unexpected {rest:?}"),
    }
    print!("{}", rig_checks::bench::table(&result));
    Ok(true)
}

/// Runs one engine phase on the host it runs on (the rig's guest).
fn engine(phase: &str, dir: &str) -> anyhow::Result<bool> {
    let fs = sysfs::RealSysfs::host();
    let pf = rig_checks::find_pf(&fs).context("no SR-IOV PF in the guest")?;
    let mut report = rig_checks::Report::default();
    let dir = std::path::Path::new(dir);
    match phase {
        "create" => rig_checks::engine_phases::create(&fs, pf, dir, &mut report)?,
        _ => rig_checks::engine_phases::verify(&fs, pf, dir, &mut report)?,
    }
    report.print("kernel");
    Ok(report.failures() == 0)
}

/// Runs the hot-plug phase on the host it runs on (the rig's guest): PF removal and rescan.
fn hotplug(dir: &str) -> anyhow::Result<bool> {
    let fs = sysfs::RealSysfs::host();
    let pf = rig_checks::find_pf(&fs).context("no SR-IOV PF in the guest")?;
    let mut report = rig_checks::Report::default();
    let access = hostwire::real_access(std::path::Path::new("/"));
    rig_checks::hotplug_phase::run(access, pf, std::path::Path::new(dir), &mut report)?;
    report.print("kernel");
    println!(
        "{HOTPLUG_MARKER}{}",
        serde_json::to_string(&report.observations)?
    );
    Ok(report.failures() == 0)
}

/// Runs the hot-plug phase on the simulator of the guest and compares with the kernel's.
fn sim_hotplug(profile: &str, observations: &str) -> anyhow::Result<bool> {
    let kernel = read_observations(observations, HOTPLUG_MARKER)?;
    let host = sim::SimHost::new(sim::Profile::load(std::path::Path::new(profile))?)?;
    let fs = host.sysfs();
    let pf = rig_checks::find_pf(fs.as_ref()).context("no SR-IOV PF in the simulated guest")?;
    let state = std::env::temp_dir().join(format!("rig-sim-hotplug-{}", std::process::id()));
    let mut report = rig_checks::Report::default();
    let ran = rig_checks::hotplug_phase::run(hostwire::sim_access(&host), pf, &state, &mut report);
    let _ = std::fs::remove_dir_all(&state);
    ran?;
    report.print("simulator hotplug");
    let diffs = rig_checks::compare(&kernel, &report.observations);
    for d in &diffs {
        println!("sim-vs-kernel hotplug: DIFFERS {d}");
    }
    println!(
        "sim-vs-kernel hotplug: {} observations, {} agree, {} differ",
        kernel.len(),
        kernel.len().saturating_sub(diffs.len()),
        diffs.len()
    );
    Ok(diffs.is_empty() && report.failures() == 0)
}

fn read_observations(path: &str, marker: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the kernel's observations {path}"))?;
    let json = text
        .lines()
        .find_map(|l| l.split_once(marker).map(|(_, j)| j))
        .with_context(|| format!("no {} line in the kernel's output", marker.trim()))?;
    Ok(serde_json::from_str(json.trim())?)
}

/// Runs the libvirt phase on the host it runs on (the rig's guest, chrooted with libvirt set up).
fn libvirt(kernel: &str) -> anyhow::Result<bool> {
    let fs = sysfs::RealSysfs::host();
    let mut report = rig_checks::Report::default();
    rig_checks::libvirt_phase::run(&fs, std::path::Path::new(kernel), &mut report)?;
    report.print_summary("libvirt");
    Ok(report.failures() == 0)
}

/// Checks the guest's `vgpud inventory --json`, printed between markers on the console.
fn inventory(console: &str) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(console).with_context(|| format!("reading {console}"))?;
    let json = text
        .split_once("RIG-INVENTORY-BEGIN")
        .and_then(|(_, rest)| rest.split_once("RIG-INVENTORY-END"))
        .map(|(json, _)| json)
        .context("no inventory in the guest's output")?;
    let inv: serde_json::Value = serde_json::from_str(json).context("the inventory is not JSON")?;
    let mut report = rig_checks::Report::default();
    let nodes = inv["numa_nodes"].as_array().map_or(0, Vec::len);
    report.check(
        "vgpud inventory: 2 NUMA nodes",
        nodes == 2,
        format!("{nodes}"),
    );
    let devices = inv["pci_devices"].as_array().cloned().unwrap_or_default();
    let pf = devices
        .iter()
        .find(|d| d["vendor_id"] == "8086" && d["device_id"] == "10c9");
    let pf_node = pf.map(|d| d["numa_node"].clone());
    report.check(
        "vgpud inventory: the igb PF on NUMA node 1",
        pf_node == Some(serde_json::json!(1)),
        format!("{pf_node:?}"),
    );
    let grouped = devices.iter().filter(|d| d["iommu_group"].is_u64()).count();
    report.check(
        "vgpud inventory: every PCI device with its IOMMU group",
        grouped == devices.len() && grouped > 0,
        format!("{grouped} of {}", devices.len()),
    );
    let parents: Vec<_> = inv["other_mdev_parents"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    report.check(
        "vgpud inventory: mdev parents mtty, mdpy, mbochs",
        ["mtty", "mdpy", "mbochs"]
            .iter()
            .all(|p| parents.contains(p)),
        parents.join(","),
    );
    report.print("inventory");
    Ok(report.failures() == 0)
}

fn compare(profile: &str, observations: &str) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(observations)
        .with_context(|| format!("reading the kernel's observations {observations}"))?;
    let json = text
        .lines()
        .find_map(|l| l.split_once(MARKER).map(|(_, j)| j))
        .context("no RIG-OBSERVATIONS line in the kernel's output")?;
    let kernel: BTreeMap<String, String> = serde_json::from_str(json.trim())?;
    let host = sim::SimHost::new(sim::Profile::load(std::path::Path::new(profile))?)?;
    let report = rig_checks::run_all(host.sysfs().as_ref());
    report.print("simulator");
    let diffs = rig_checks::compare(&kernel, &report.observations);
    for d in &diffs {
        println!("sim-vs-kernel: DIFFERS {d}");
    }
    println!(
        "sim-vs-kernel: {} observations, {} agree, {} differ",
        kernel.len(),
        kernel.len().saturating_sub(diffs.len()),
        diffs.len()
    );
    Ok(diffs.is_empty() && report.failures() == 0)
}
