//! `gpu-probe [--nvml-lib PATH] OUT_DIR`: records what this host's NVIDIA GPUs show, compares it
//! with the simulator's model of each, and writes `OUT_DIR/report.json` and `OUT_DIR/summary.txt`.
//! Read-only: no MIG mode change, no reset, no sysfs write, no `sriov-manage`.
//!
//! Exit status: 0 report written; 77 no GPU here (NVML not loadable, or no device), the
//! automake "skipped" code; 1 the probe failed; 2 usage.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpu::Nvml;
use gpu::nvml_real::NvmlLibrary;
use gpu_probe::nvml_extra::{NotModelled, NvmlExtra, RealExtra};
use gpu_probe::observe::Sources;
use gpu_probe::reads::{ReadNvml, ReadSysfs};
use gpu_probe::{model, pci_files, report};

/// The "skipped" exit status.
const NO_GPU: u8 = 77;

const USAGE: &str = "usage: gpu-probe [--nvml-lib PATH] OUT_DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (lib, out) = match args.as_slice() {
        [out] if !out.starts_with('-') => (None, PathBuf::from(out)),
        [flag, lib, out] if flag == "--nvml-lib" => (Some(PathBuf::from(lib)), PathBuf::from(out)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(lib.as_deref(), &out) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpu-probe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(lib: Option<&Path>, out: &Path) -> anyhow::Result<ExitCode> {
    let fs = sysfs::RealSysfs::host();
    let loaded = match lib {
        Some(lib) => NvmlLibrary::load_from(lib),
        None => NvmlLibrary::load(),
    };
    let nvml = match loaded {
        Ok(nvml) => nvml,
        Err(e) => return Ok(no_gpu(&fs, out, &format!("NVML not loadable: {e}"))),
    };
    match nvml.device_count() {
        Ok(0) => return Ok(no_gpu(&fs, out, "NVML lists no device")),
        Err(e) => return Ok(no_gpu(&fs, out, &format!("NVML lists no device: {e}"))),
        Ok(_) => {}
    }
    let real_extra = RealExtra::open(lib)
        .inspect_err(|e| eprintln!("gpu-probe: per-link NVLink and creatable types skipped: {e}"));
    let extra: &dyn NvmlExtra = match &real_extra {
        Ok(real) => real,
        Err(_) => &NotModelled,
    };
    let src = Sources {
        nvml: ReadNvml::new(&nvml),
        extra,
        sysfs: ReadSysfs::new(&fs),
    };
    let candidates = model::builtin_profiles()?;
    let report = report::probe(src, &candidates)?;
    report.write(out)?;
    print!("{}", report.summary());
    println!("report written to {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// Says there is no GPU, in the output folder too when it can, and returns 77.
fn no_gpu(fs: &sysfs::RealSysfs, out: &Path, why: &str) -> ExitCode {
    let functions = pci_files::nvidia_display_functions(ReadSysfs::new(fs));
    let listed: Vec<String> = functions.iter().map(ToString::to_string).collect();
    let message = format!(
        "gpu-probe: no NVIDIA GPU to probe ({why}); NVIDIA display functions in sysfs: {}\n",
        if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(" ")
        }
    );
    eprint!("{message}");
    if std::fs::create_dir_all(out).is_ok() {
        let _ = std::fs::write(out.join("summary.txt"), &message);
    }
    ExitCode::from(NO_GPU)
}
