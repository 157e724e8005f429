//! The simulator's own cost per call: what a sysfs read, an NVML query and a whole discovery
//! cost on the simulated DGX A100, kept in memory and kept in a state directory (as
//! `vgpud run --sim` keeps it), so the daemon's figures can be read as vgpud's and not the
//! simulator's.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use sim::{Profile, SimHost};

/// One measured call: mean microseconds over `n`.
fn per_call(n: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
}

/// Measures `n` calls of each kind on both kinds of simulated host.
pub fn run(n: usize, dir: &Path) -> anyhow::Result<Value> {
    let profile = Profile::builtin("dgx-a100")?;
    crate::daemon_proc::fresh_dir(dir)?;
    let hosts = [
        ("in memory", SimHost::new(profile.clone())?),
        (
            "state directory",
            SimHost::create(&dir.join("sim"), profile)?,
        ),
    ];
    println!("\n## simulator cost per call on dgx-a100, µs (mean of {n})");
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>12}",
        "host", "sysfs read", "list_dir", "NVML query", "discovery"
    );
    let mut rows = Vec::new();
    for (name, host) in hosts {
        let access = hostwire::sim_access(&host);
        let fs = host.sysfs();
        let nvml = host.nvml();
        let attr = Path::new("/sys/bus/pci/devices/0000:07:00.0/vendor");
        let devices = Path::new("/sys/bus/pci/devices");
        let read = per_call(n, || drop(fs.read(attr, 4096)));
        let list = per_call(n, || drop(fs.list_dir(devices)));
        let query = per_call(n, || drop(nvml.gpu_instances(0)));
        let discovery = per_call(n.div_ceil(100), || drop(inventory::discover(&access)));
        println!("{name:<16} {read:>12.2} {list:>12.2} {query:>12.2} {discovery:>12.0}");
        rows.push(json!({"host": name, "sysfs_read_us": read, "list_dir_us": list, "nvml_query_us": query, "discovery_us": discovery}));
    }
    Ok(Value::Array(rows))
}
