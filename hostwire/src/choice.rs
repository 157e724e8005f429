//! Which host a command works on, and opening it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use inventory::HostAccess;
use sim::{Profile, SimHost};

use crate::access::{real_access, sim_access};

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
