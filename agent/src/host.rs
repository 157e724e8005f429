//! Chooses and opens the host-access implementations: the real host, a fixture tree, or the
//! simulator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use inventory::HostAccess;
use sim::{Profile, SimHost};
use sysfs::RealSysfs;

/// Which host to work on.
#[derive(Debug, Clone)]
pub enum HostChoice {
    /// The machine itself, sysfs under `root` (`/` normally).
    Real {
        /// Root directory of the sysfs tree.
        root: PathBuf,
    },
    /// A simulated host from a profile, optionally persisted in a state directory.
    Sim {
        /// Built-in profile name or a path to a profile file.
        profile: String,
        /// Where the simulated host's state lives; in memory when absent.
        state_dir: Option<PathBuf>,
    },
    /// An existing simulated host in a state directory.
    SimDir {
        /// The state directory.
        state_dir: PathBuf,
    },
}

/// Resolves a profile argument: a built-in name, or a path to a TOML file.
pub fn load_profile(arg: &str) -> anyhow::Result<Profile> {
    if Profile::builtin_names().contains(&arg) {
        return Ok(Profile::builtin(arg)?);
    }
    let path = Path::new(arg);
    if path.exists() {
        return Profile::load(path).with_context(|| format!("loading profile {}", path.display()));
    }
    anyhow::bail!(
        "unknown simulated host profile {arg:?}: use one of {} or a path to a profile file",
        Profile::builtin_names().join(", ")
    )
}

/// Opens the simulated host a choice names.
pub fn open_sim(choice: &HostChoice) -> anyhow::Result<Option<SimHost>> {
    Ok(match choice {
        HostChoice::Real { .. } => None,
        HostChoice::Sim {
            profile,
            state_dir: None,
        } => Some(SimHost::new(load_profile(profile)?)?),
        HostChoice::Sim {
            profile,
            state_dir: Some(dir),
        } => Some(SimHost::open_or_create(dir, load_profile(profile)?)?),
        HostChoice::SimDir { state_dir } => Some(
            SimHost::open(state_dir)
                .with_context(|| format!("opening simulated host in {}", state_dir.display()))?,
        ),
    })
}

/// The host-access implementations for a choice.
pub fn open(choice: &HostChoice) -> anyhow::Result<HostAccess> {
    if let Some(sim) = open_sim(choice)? {
        return Ok(sim_access(&sim));
    }
    let HostChoice::Real { root } = choice else {
        anyhow::bail!("internal: a simulated host choice produced no simulator");
    };
    Ok(real_access(root))
}

/// Access to a simulated host.
pub fn sim_access(sim: &SimHost) -> HostAccess {
    let nvml = sim.nvml();
    // A simulated host without NVIDIA GPUs is like a real one without the driver: NVML is absent,
    // which is normal, rather than a library that answers with errors.
    let nvml = match nvml.driver_version() {
        Err(e) if e.code == gpu::NvmlCode::DRIVER_NOT_LOADED => Err(e.to_string()),
        _ => Ok(nvml),
    };
    HostAccess {
        source: format!("sim:{}", sim.profile_name()),
        sysfs: sim.sysfs(),
        nvml,
        amd: Ok((sim.amd(), "simulated AMD SMI".to_owned())),
        hostname: Some(sim.hostname()),
    }
}

/// Access to the real host (or a tree shaped like one under `root`).
pub fn real_access(root: &Path) -> HostAccess {
    let fs: Arc<dyn sysfs::Sysfs> = Arc::new(RealSysfs::new(root));
    let on_host = root == Path::new("/");
    // The vendor libraries describe the machine we run on; pairing them with a fixture tree
    // under another root would mix two hosts.
    let nvml: Result<Arc<dyn gpu::Nvml>, String> = if on_host {
        gpu::nvml_real::NvmlLibrary::load()
            .map(|n| Arc::new(n) as Arc<dyn gpu::Nvml>)
            .map_err(|e| e.to_string())
    } else {
        Err(format!("not loaded for a tree under {}", root.display()))
    };
    // AMD SMI is optional: the sysfs backend answers on every host, the library only adds to it.
    let amd = Ok(if on_host {
        gpu::amd_sysfs::amd_backend(fs.clone())
    } else {
        (
            Arc::new(gpu::amd_sysfs::AmdSysfs::new(fs.clone())) as Arc<dyn gpu::AmdSmi>,
            "sysfs".to_owned(),
        )
    });
    let source = if on_host {
        "host:/".to_owned()
    } else {
        format!("root:{}", root.display())
    };
    HostAccess {
        source,
        sysfs: fs,
        nvml,
        amd,
        hostname: None,
    }
}
