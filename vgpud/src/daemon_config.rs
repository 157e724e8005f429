//! The daemon's effective configuration: the file, then the command-line flags over it; what a
//! SIGHUP can change without a restart; and `vgpud check-config`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agent::config::{Config, DEFAULT_CONFIG};
use anyhow::Context;

use crate::daemon::RunArgs;

/// Keys a SIGHUP applies to the running daemon; every other change needs a restart.
pub const LIVE_KEYS: &[&str] = &["engine.reconcile_interval_s"];

/// Reads the configuration file and lays the flags over it.
pub fn load(args: &RunArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(&args.config)?;
    apply_flags(&mut config, args)?;
    // The flags can break what the file got right (a relative path, say): check the result.
    config.validate(&args.config)?;
    check_profile(&config)?;
    Ok(config)
}

/// The agent checks only the shape of `host.simulate`; here the profile is resolved, so that an
/// unknown name fails the start (and `check-config`) with the list of built-in profiles.
fn check_profile(config: &Config) -> anyhow::Result<()> {
    if !config.host.simulate.is_empty() {
        hostwire::load_profile(&config.host.simulate).context("host.simulate")?;
    }
    Ok(())
}

/// The simulated profile the daemon runs on, if any (`--sim` or `host.simulate`).
pub fn simulated(config: &Config) -> Option<&str> {
    Some(config.host.simulate.as_str()).filter(|p| !p.is_empty())
}

fn apply_flags(config: &mut Config, args: &RunArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.state_dir {
        config.state_dir = absolute(dir)?;
    }
    if let Some(socket) = &args.socket {
        config.api.socket = absolute(socket)?;
    }
    if let Some(profile) = &args.sim {
        // A profile file named on the command line may be relative to the working directory;
        // the configuration holds absolute paths only.
        config.host.simulate = if sim::Profile::builtin_names().contains(&profile.as_str()) {
            profile.clone()
        } else {
            absolute(Path::new(profile))?.display().to_string()
        };
    }
    if args.no_dbus {
        config.dbus.enabled = false;
    }
    Ok(())
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// What a re-read configuration changes, split by whether the running daemon can apply it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Dotted keys applied on the spot.
    pub live: Vec<String>,
    /// Dotted keys that take effect at the next start.
    pub need_restart: Vec<String>,
}

impl Changes {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.need_restart.is_empty()
    }
}

/// Compares two configurations key by key.
pub fn changes(old: &Config, new: &Config) -> Changes {
    let (old, new) = (leaves(old), leaves(new));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Changes::default();
    for key in keys {
        if old.get(key) == new.get(key) {
            continue;
        }
        if LIVE_KEYS.contains(&key.as_str()) {
            out.live.push(key.clone());
        } else {
            out.need_restart.push(key.clone());
        }
    }
    out
}

/// Every scalar of the configuration under its dotted key (`api.tcp.listen`).
fn leaves(config: &Config) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    // Serialising a plain struct of strings, numbers and paths cannot fail; an empty map would
    // only make every key look changed, which is the safe side.
    if let Ok(value) = serde_json::to_value(config) {
        flatten(String::new(), value, &mut out);
    }
    out
}

fn flatten(
    prefix: String,
    value: serde_json::Value,
    out: &mut BTreeMap<String, serde_json::Value>,
) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(key, v, out);
            }
        }
        other => {
            out.insert(prefix, other);
        }
    }
}

/// `vgpud check-config`: validates `file` and renders the effective configuration as TOML.
pub fn check_config(file: &Path) -> anyhow::Result<String> {
    let config = Config::load(file)?;
    check_profile(&config)?;
    let body = toml::to_string_pretty(&config).context("rendering the configuration")?;
    let head = if file == Path::new(DEFAULT_CONFIG) && !file.exists() {
        format!(
            "# {} does not exist: every key has its default.\n",
            file.display()
        )
    } else {
        format!("# {} is valid. Effective configuration:\n", file.display())
    };
    Ok(head + &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RunArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            run: RunArgs,
        }
        let mut argv = vec!["vgpud"];
        argv.extend_from_slice(extra);
        Wrap::parse_from(argv).run
    }

    #[test]
    fn flags_override_the_file_and_relative_paths_become_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vgpud.toml");
        std::fs::write(
            &file,
            "state_dir = \"/from/file\"\n[dbus]\nenabled = true\n",
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let c = load(&args(&["--config", file])).unwrap();
        assert_eq!(c.state_dir, Path::new("/from/file"));
        assert!(c.dbus.enabled);
        assert_eq!(c.libvirt.uri, "qemu:///system");

        let c = load(&args(&[
            "--config",
            file,
            "--state-dir",
            "rel/state",
            "--socket",
            "/tmp/x.sock",
            "--no-dbus",
            "--sim",
            "dgx-a100",
        ]))
        .unwrap();
        assert!(c.state_dir.is_absolute() && c.state_dir.ends_with("rel/state"));
        assert_eq!(c.api.socket, Path::new("/tmp/x.sock"));
        assert!(!c.dbus.enabled);
        assert_eq!(simulated(&c), Some("dgx-a100"));
    }

    #[test]
    fn the_file_can_choose_a_simulated_host_and_an_unknown_profile_fails() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vgpud.toml");
        std::fs::write(&file, "[host]\nsimulate = \"hgx-h200\"\n").unwrap();
        let c = load(&args(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(simulated(&c), Some("hgx-h200"));
        assert_eq!(simulated(&Config::default()), None);
        // The flag wins over the file.
        let c = load(&args(&[
            "--config",
            file.to_str().unwrap(),
            "--sim",
            "dgx-a100",
        ]))
        .unwrap();
        assert_eq!(simulated(&c), Some("dgx-a100"));

        std::fs::write(&file, "[host]\nsimulate = \"dgx-z9\"\n").unwrap();
        let e = format!("{:#}", check_config(&file).unwrap_err());
        assert!(e.contains("host.simulate") && e.contains("dgx-a100"), "{e}");
        assert!(load(&args(&["--config", file.to_str().unwrap()])).is_err());
    }

    #[test]
    fn changes_split_live_keys_from_restart_keys() {
        let old = Config::default();
        assert!(changes(&old, &old.clone()).is_empty());
        let mut new = old.clone();
        new.engine.reconcile_interval_s = 5;
        new.api.socket = PathBuf::from("/run/other.sock");
        new.metrics.listen = Some("127.0.0.1:9835".parse().unwrap());
        let c = changes(&old, &new);
        assert_eq!(c.live, ["engine.reconcile_interval_s"]);
        assert_eq!(c.need_restart, ["api.socket", "metrics.listen"]);
    }

    #[test]
    fn check_config_renders_toml_that_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vgpud.toml");
        std::fs::write(&file, "[engine]\nreconcile_interval_s = 7\n").unwrap();
        let text = check_config(&file).unwrap();
        assert!(
            text.starts_with(&format!("# {} is valid", file.display())),
            "{text}"
        );
        let back = Config::parse(&text, &file).unwrap();
        assert_eq!(back.engine.reconcile_interval_s, 7);
        assert_eq!(back.api, Config::default().api);
    }

    #[test]
    fn check_config_names_the_line_of_a_bad_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("vgpud.toml");
        std::fs::write(&file, "[engine]\n\nreconcile_every = 7\n").unwrap();
        let e = format!("{:#}", check_config(&file).unwrap_err());
        assert!(e.contains("line 3") && e.contains("reconcile_every"), "{e}");
    }
}
