//! `/etc/vgpud/vgpud.toml`: every key, its default, and validation with clear errors.
//!
//! Unknown keys are errors (a typo must not silently fall back to a default). The file may be
//! absent: every key has a default suitable for a systemd host. `vgpud check-config FILE` runs
//! the same parsing and validation and prints the effective configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod host;
mod kubernetes;
mod placement;

pub use kubernetes::{KubernetesConfig, check_resource_name};
pub use placement::{AUTH_STRATEGIES, INTERFACES, KeystoneConfig, MAX_ROOT_NAME, PlacementConfig};

/// Where the configuration file lives by default.
pub const DEFAULT_CONFIG: &str = "/etc/vgpud/vgpud.toml";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Desired-state directory (ownership ledger, allocations, layouts, intents).
    pub state_dir: PathBuf,
    /// Root of the sysfs tree (`/` on a host; a captured tree for tests).
    pub sysfs_root: PathBuf,
    /// Host resources.
    pub host: HostConfig,
    /// Slice engine.
    pub engine: EngineSettings,
    /// Placement policy.
    pub scheduler: SchedulerConfig,
    /// REST API.
    pub api: ApiConfig,
    /// Unauthenticated `/healthz` and `/metrics` listener.
    pub metrics: MetricsConfig,
    /// D-Bus API on the system bus.
    pub dbus: DbusConfig,
    /// VM pinning through libvirt.
    pub libvirt: LibvirtConfig,
    /// GPU health: Xid classification, quarantine, recovery.
    pub health: HealthConfig,
    /// Reporting this host to OpenStack Placement.
    pub placement: PlacementConfig,
    /// kubelet's device plugin.
    pub kubernetes: KubernetesConfig,
}

/// `[host]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// CPUs never given to VMs (kernel CPU list, e.g. `0-1,64-65`); empty for none.
    pub reserved_cpus: String,
    /// Run on a simulated host instead of this machine's hardware: a built-in profile name
    /// (`dgx-a100`) or an absolute path to a profile file; empty (the default) for the real
    /// host. The simulated host persists under `state_dir`/sim.
    pub simulate: String,
}

/// `[engine]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// Longest a vendor-library call (NVML, AMD SMI) may take before it is abandoned, ms.
    pub vendor_call_timeout_ms: u64,
    /// How often the reconciler runs besides start-up and hot-plug events, s.
    pub reconcile_interval_s: u64,
}

/// `[scheduler]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// `vgpud` (fragmentation-aware, NUMA-local; the default), `best-fit`, `first-fit` or `spread`.
    pub policy: String,
}

/// `[api]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Unix socket of the REST API.
    pub socket: PathBuf,
    /// Group allowed to connect to the socket (created by the package's sysusers file).
    pub socket_group: String,
    /// Socket permissions, octal.
    pub socket_mode: String,
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Longest a new connection may take to send its first request head, ms.
    pub header_read_timeout_ms: u64,
    /// Longest a request body may take to arrive, ms.
    pub body_read_timeout_ms: u64,
    /// Longest a kept-alive connection may wait for its next request, ms.
    pub idle_timeout_ms: u64,
    /// Longest a TLS handshake may take, ms.
    pub tls_handshake_timeout_ms: u64,
    /// Connections one listener holds at once.
    pub max_connections: usize,
    /// Connections one peer (uid on the socket, IP address over TCP) holds at once.
    pub max_connections_per_peer: usize,
    /// Optional TCP listener; TLS is mandatory there.
    pub tcp: Option<TcpConfig>,
}

/// `[api.tcp]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Server certificate chain (PEM).
    pub cert: PathBuf,
    /// Server private key (PEM).
    pub key: PathBuf,
    /// CA whose client certificates are accepted (PEM); enables client-certificate auth.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Client certificate subjects allowed (e.g. `CN=nova-compute`); empty allows any the CA signed.
    #[serde(default)]
    pub allowed_subjects: Vec<String>,
    /// File of bearer tokens, one per line; enables token auth.
    #[serde(default)]
    pub tokens_file: Option<PathBuf>,
}

/// `[metrics]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address for `/healthz` and `/metrics` without authentication; none to serve them only on
    /// the API socket.
    pub listen: Option<SocketAddr>,
    /// How often the telemetry poller reads every GPU (a scrape serves its latest reading).
    pub poll_interval_ms: u64,
    /// Utilisation, in percent, under which an allocated slice counts as idle.
    pub idle_utilization_pct: u32,
    /// How long an allocated slice must stay under `idle_utilization_pct` to count as idle.
    pub idle_window_s: u64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            listen: None,
            poll_interval_ms: 5000,
            idle_utilization_pct: 5,
            idle_window_s: 3600,
        }
    }
}

/// `[dbus]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbusConfig {
    /// Serve `io.vgpud.Agent1` on the system bus.
    pub enabled: bool,
}

/// `[libvirt]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LibvirtConfig {
    /// Connection URI; empty turns VM pinning off.
    pub uri: String,
    /// Memory binding mode: `strict`, `preferred` or `restrictive`.
    pub memory_mode: String,
    /// Show the slices' NUMA locality to guests (guest NUMA cells, pcie-expander-bus).
    pub guest_numa: bool,
    /// How long one libvirt call may take, ms; past it the request fails with
    /// `libvirt_unavailable` (a hung libvirtd blocks nobody for longer).
    pub call_timeout_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from("/var/lib/vgpud"),
            sysfs_root: PathBuf::from("/"),
            host: HostConfig::default(),
            engine: EngineSettings::default(),
            scheduler: SchedulerConfig::default(),
            api: ApiConfig::default(),
            metrics: MetricsConfig::default(),
            dbus: DbusConfig::default(),
            libvirt: LibvirtConfig::default(),
            health: HealthConfig::default(),
            placement: PlacementConfig::default(),
            kubernetes: KubernetesConfig::default(),
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            vendor_call_timeout_ms: 10_000,
            reconcile_interval_s: 60,
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            policy: "vgpud".to_owned(),
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/vgpud/api.sock"),
            socket_group: "vgpud".to_owned(),
            socket_mode: "0660".to_owned(),
            max_body_bytes: 1 << 20,
            header_read_timeout_ms: 5_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            tls_handshake_timeout_ms: 5_000,
            max_connections: 512,
            max_connections_per_peer: 64,
            tcp: None,
        }
    }
}

impl Default for DbusConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

impl Default for LibvirtConfig {
    fn default() -> Self {
        Self {
            uri: "qemu:///system".to_owned(),
            memory_mode: "strict".to_owned(),
            guest_numa: false,
            call_timeout_ms: 10_000,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed or has unknown keys or wrong types (the message names the line).
    #[error("{}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// toml's message, with line and column.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("{}: {key}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The offending key, dotted.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The scheduler policies vgpud knows.
pub const POLICIES: &[&str] = &["vgpud", "best-fit", "first-fit", "spread"];

impl Config {
    /// Reads and validates `path`; a missing file at the default location gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_CONFIG) =>
            {
                return Ok(Config::default());
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Self::parse(&text, path)
    }

    /// Parses and validates TOML text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks values serde cannot: ranges, paths, names, files TLS needs.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key, reason: String| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            reason,
        };
        for (key, p) in [
            ("state_dir", &self.state_dir),
            ("sysfs_root", &self.sysfs_root),
            ("api.socket", &self.api.socket),
        ] {
            if !p.is_absolute() {
                return Err(invalid(
                    key,
                    format!("{} is not an absolute path", p.display()),
                ));
            }
        }
        if let Err(e) = self.host.reserved_cpus.parse::<numa::CpuSet>() {
            return Err(invalid("host.reserved_cpus", e.to_string()));
        }
        host::validate_simulate(&self.host.simulate, &self.sysfs_root)
            .map_err(|(key, reason)| invalid(key, reason))?;
        if !(100..=600_000).contains(&self.engine.vendor_call_timeout_ms) {
            return Err(invalid(
                "engine.vendor_call_timeout_ms",
                "must be 100 to 600000".into(),
            ));
        }
        if !(1..=86_400).contains(&self.engine.reconcile_interval_s) {
            return Err(invalid(
                "engine.reconcile_interval_s",
                "must be 1 to 86400".into(),
            ));
        }
        if !POLICIES.contains(&self.scheduler.policy.as_str()) {
            let known = POLICIES.join(", ");
            return Err(invalid(
                "scheduler.policy",
                format!("{:?} is not one of {known}", self.scheduler.policy),
            ));
        }
        self.api_mode()
            .map_err(|reason| invalid("api.socket_mode", reason))?;
        if !(1024..=64 << 20).contains(&self.api.max_body_bytes) {
            return Err(invalid(
                "api.max_body_bytes",
                "must be 1 KiB to 64 MiB".into(),
            ));
        }
        validate_transport(&self.api).map_err(|(key, reason)| invalid(key, reason))?;
        validate_health(&self.health).map_err(|(key, reason)| invalid(key, reason))?;
        kubernetes::validate(&self.kubernetes).map_err(|(key, reason)| invalid(key, reason))?;
        if !["strict", "preferred", "restrictive"].contains(&self.libvirt.memory_mode.as_str()) {
            return Err(invalid(
                "libvirt.memory_mode",
                "must be strict, preferred or restrictive".into(),
            ));
        }
        if !(100..=600_000).contains(&self.libvirt.call_timeout_ms) {
            return Err(invalid(
                "libvirt.call_timeout_ms",
                "must be 100 ms to 10 minutes".into(),
            ));
        }
        if let Some(tcp) = &self.api.tcp {
            validate_tcp(tcp).map_err(|(key, reason)| invalid(key, reason))?;
        }
        validate_metrics(&self.metrics).map_err(|(key, reason)| invalid(key, reason))?;
        placement::validate_placement(&self.placement)
            .map_err(|(key, reason)| invalid(key, reason))?;
        Ok(())
    }

    /// The socket mode as a number.
    pub fn api_mode(&self) -> Result<u32, String> {
        let mode = &self.api.socket_mode;
        match u32::from_str_radix(mode, 8) {
            Ok(m) if m > 0o777 || m & 0o600 != 0o600 => Err(format!(
                "{mode} must be at most 0777 and give the owner read and write"
            )),
            // Anyone who can connect can allocate and release: access goes by group, never to
            // every local user.
            Ok(m) if m & 0o007 != 0 => Err(format!(
                "{mode} lets every local user drive the API; give access by socket_group \
                 (e.g. 0660) instead"
            )),
            Ok(m) => Ok(m),
            Err(_) => Err(format!("{mode:?} is not an octal mode such as 0660")),
        }
    }
}

/// The telemetry poller's interval and the idle-slice rule: a zero interval would spin, an
/// hour-long one would leave every gauge an hour stale.
fn validate_metrics(m: &MetricsConfig) -> Result<(), (&'static str, String)> {
    if !(100..=600_000).contains(&m.poll_interval_ms) {
        return Err((
            "metrics.poll_interval_ms",
            "must be 100 ms to 10 minutes".into(),
        ));
    }
    if m.idle_utilization_pct > 100 {
        return Err(("metrics.idle_utilization_pct", "must be 0 to 100".into()));
    }
    if !(1..=30 * 86_400).contains(&m.idle_window_s) {
        return Err(("metrics.idle_window_s", "must be 1 s to 30 days".into()));
    }
    Ok(())
}

/// The REST transport's timeouts and connection caps: a zero would make the daemon refuse
/// everyone; a huge one would disarm the limit.
fn validate_transport(api: &ApiConfig) -> Result<(), (&'static str, String)> {
    let timeouts = [
        ("api.header_read_timeout_ms", api.header_read_timeout_ms),
        ("api.body_read_timeout_ms", api.body_read_timeout_ms),
        ("api.idle_timeout_ms", api.idle_timeout_ms),
        ("api.tls_handshake_timeout_ms", api.tls_handshake_timeout_ms),
    ];
    for (key, ms) in timeouts {
        if !(100..=600_000).contains(&ms) {
            return Err((key, "must be 100 to 600000".into()));
        }
    }
    if !(1..=65_536).contains(&api.max_connections) {
        return Err(("api.max_connections", "must be 1 to 65536".into()));
    }
    if !(1..=api.max_connections).contains(&api.max_connections_per_peer) {
        return Err((
            "api.max_connections_per_peer",
            format!("must be 1 to api.max_connections ({})", api.max_connections),
        ));
    }
    Ok(())
}

/// `[health]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Watch Xid events and the GPUs' health signals, quarantine and recover.
    pub enabled: bool,
    /// Xids that do not quarantine (default: NVIDIA's device plugin's application errors 13,
    /// 31, 43, 45, 68, 109).
    pub ignored_xids: Vec<u64>,
    /// Xids that always quarantine, even when also in `ignored_xids`. Xids in neither list
    /// quarantine too.
    pub quarantine_xids: Vec<u64>,
    /// How long an automatically quarantined GPU must go without a new quarantining event
    /// before the probe runs, s.
    pub quiet_period_s: u64,
    /// How often the GPUs' health (GPU lost, ECC, retired pages, remapped rows, slowdown) is
    /// checked, s.
    pub check_interval_s: u64,
    /// Before a probe releases a GPU with no allocated slice, reset it (PCI function reset).
    pub reset_before_release: bool,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ignored_xids: crate::health::classify::APPLICATION_XIDS.to_vec(),
            quarantine_xids: Vec::new(),
            quiet_period_s: 300,
            check_interval_s: 10,
            reset_before_release: false,
        }
    }
}

fn validate_health(h: &HealthConfig) -> Result<(), (&'static str, String)> {
    if !(1..=86_400).contains(&h.quiet_period_s) {
        return Err(("health.quiet_period_s", "must be 1 to 86400".into()));
    }
    if !(1..=3_600).contains(&h.check_interval_s) {
        return Err(("health.check_interval_s", "must be 1 to 3600".into()));
    }
    for (key, list) in [
        ("health.ignored_xids", &h.ignored_xids),
        ("health.quarantine_xids", &h.quarantine_xids),
    ] {
        if list.len() > 1024 {
            return Err((key, "at most 1024 Xids".into()));
        }
        if let Some(x) = list.iter().find(|x| **x == 0 || **x > 65_535) {
            return Err((key, format!("{x} is not an Xid (1 to 65535)")));
        }
    }
    Ok(())
}

fn validate_tcp(tcp: &TcpConfig) -> Result<(), (&'static str, String)> {
    if tcp.client_ca.is_none() && tcp.tokens_file.is_none() {
        // Nothing mutating is ever anonymous: TCP needs a way to authenticate callers.
        return Err((
            "api.tcp",
            "set client_ca, tokens_file or both: TCP is never anonymous".into(),
        ));
    }
    for (i, entry) in tcp.allowed_subjects.iter().enumerate() {
        if let Err(why) = crate::subject_rule::SubjectRule::parse(entry) {
            return Err((
                "api.tcp.allowed_subjects",
                format!("entry {} ({entry:?}): {why}", i + 1),
            ));
        }
    }
    let files = [
        ("api.tcp.cert", Some(&tcp.cert)),
        ("api.tcp.key", Some(&tcp.key)),
        ("api.tcp.client_ca", tcp.client_ca.as_ref()),
        ("api.tcp.tokens_file", tcp.tokens_file.as_ref()),
    ];
    for (key, file) in files {
        if let Some(f) = file.filter(|f| !f.is_file()) {
            return Err((
                key,
                format!("{} does not exist or is not a file", f.display()),
            ));
        }
    }
    let secrets = [
        ("api.tcp.key", Some(&tcp.key)),
        ("api.tcp.tokens_file", tcp.tokens_file.as_ref()),
    ];
    for (key, file) in secrets {
        if let Some(f) = file {
            check_secret_mode(f).map_err(|why| (key, why))?;
        }
    }
    Ok(())
}

/// A private key or a tokens file must not be open to every user on the host, nor writable by
/// its group: either would hand the API to whoever reads (or rewrites) it. Group read stays
/// allowed for the usual `root:ssl-cert 0640` arrangement.
fn check_secret_mode(file: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o027 != 0 {
        return Err(format!(
            "{} has mode {mode:04o}: it holds a secret; make it 0600 or 0640 \
             (chmod o-rwx,g-w {})",
            file.display(),
            file.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.state_dir, Path::new("/var/lib/vgpud"));
        assert_eq!(c.api.socket, Path::new("/run/vgpud/api.sock"));
        assert_eq!(c.api_mode().unwrap(), 0o660);
        assert_eq!(c.metrics.poll_interval_ms, 5000);
        assert_eq!(c.metrics.idle_utilization_pct, 5);
        assert_eq!(c.metrics.idle_window_s, 3600);
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_line() {
        let e = parse("state_dir = \"/x\"\n[engine]\nvendor_call_timeout = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("vendor_call_timeout") && e.contains("line 3"),
            "{e}"
        );
        let e = parse("[dbus]\nenabled = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn values_are_validated() {
        let cases = [
            ("state_dir = \"var/lib\"", "state_dir"),
            ("[host]\nreserved_cpus = \"0-x\"", "host.reserved_cpus"),
            ("[host]\nsimulate = \"DGX A100\"", "host.simulate"),
            ("[host]\nsimulate = \"profiles/a.toml\"", "host.simulate"),
            (
                "sysfs_root = \"/srv/tree\"\n[host]\nsimulate = \"dgx-a100\"",
                "host.simulate",
            ),
            (
                "[engine]\nvendor_call_timeout_ms = 5",
                "engine.vendor_call_timeout_ms",
            ),
            ("[scheduler]\npolicy = \"worst-fit\"", "scheduler.policy"),
            ("[api]\nsocket_mode = \"0999\"", "api.socket_mode"),
            ("[api]\nsocket_mode = \"0066\"", "api.socket_mode"),
            ("[api]\nsocket_mode = \"0666\"", "api.socket_mode"),
            ("[api]\nsocket_mode = \"0662\"", "api.socket_mode"),
            ("[libvirt]\nmemory_mode = \"loose\"", "libvirt.memory_mode"),
            ("[libvirt]\ncall_timeout_ms = 0", "libvirt.call_timeout_ms"),
            ("[health]\nquiet_period_s = 0", "health.quiet_period_s"),
            ("[health]\ncheck_interval_s = 0", "health.check_interval_s"),
            ("[health]\nignored_xids = [0]", "health.ignored_xids"),
            (
                "[health]\nquarantine_xids = [70000]",
                "health.quarantine_xids",
            ),
            (
                "[metrics]\npoll_interval_ms = 0",
                "metrics.poll_interval_ms",
            ),
            (
                "[metrics]\npoll_interval_ms = 600001",
                "metrics.poll_interval_ms",
            ),
            (
                "[metrics]\nidle_utilization_pct = 101",
                "metrics.idle_utilization_pct",
            ),
            ("[metrics]\nidle_window_s = 0", "metrics.idle_window_s"),
            (
                "[api]\nheader_read_timeout_ms = 0",
                "api.header_read_timeout_ms",
            ),
            (
                "[api]\nbody_read_timeout_ms = 99",
                "api.body_read_timeout_ms",
            ),
            ("[api]\nidle_timeout_ms = 600001", "api.idle_timeout_ms"),
            (
                "[api]\ntls_handshake_timeout_ms = 0",
                "api.tls_handshake_timeout_ms",
            ),
            ("[api]\nmax_connections = 0", "api.max_connections"),
            (
                "[api]\nmax_connections = 10\nmax_connections_per_peer = 11",
                "api.max_connections_per_peer",
            ),
            (
                "[api]\nmax_connections_per_peer = 0",
                "api.max_connections_per_peer",
            ),
            (
                "[api.tcp]\nlisten = \"0.0.0.0:8443\"\ncert = \"/c\"\nkey = \"/k\"",
                "api.tcp",
            ),
            (
                "[api.tcp]\nlisten = \"0.0.0.0:8443\"\ncert = \"/nonexistent/c\"\nkey = \"/k\"\ntokens_file = \"/t\"",
                "api.tcp.cert",
            ),
            (
                "[api.tcp]\nlisten = \"0.0.0.0:8443\"\ncert = \"/c\"\nkey = \"/k\"\nclient_ca = \"/ca\"\nallowed_subjects = [\"CN=nova\", \"O:Example\"]",
                "api.tcp.allowed_subjects",
            ),
        ];
        for (text, key) in cases {
            match parse(text) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn placement_values_are_validated() {
        let on = "[placement]\nenabled = true\nendpoint = \"http://c:8778\"\ntoken = \"admin\"\n";
        parse(on).unwrap();
        let cases = [
            ("[placement]\nauth = \"basic\"", "placement.auth"),
            ("[placement]\ntimeout_ms = 0", "placement.timeout_ms"),
            (
                "[placement]\nsync_interval_s = 0",
                "placement.sync_interval_s",
            ),
            ("[placement]\ndebounce_ms = 0", "placement.debounce_ms"),
            ("[placement]\nheal_grace_s = 0", "placement.heal_grace_s"),
            (
                "[placement]\nendpoint = \"controller:8778\"",
                "placement.endpoint",
            ),
            (
                "[placement]\ncompute_node = \" h\"",
                "placement.compute_node",
            ),
            (
                "[placement]\non_demand_types = [\"a\", \"a\"]",
                "placement.on_demand_types",
            ),
            (
                "[placement]\non_demand_types = [\"\"]",
                "placement.on_demand_types",
            ),
            (
                "[placement.resource_classes]\n\"3g.40gb\" = \"MIG_3G\"",
                "placement.resource_classes",
            ),
            (
                "[placement.resource_classes]\n\"3g.40gb\" = \"CUSTOM_mig\"",
                "placement.resource_classes",
            ),
            (
                "[placement]\ndefault_type = \"a\"\n[placement.resource_classes]\na = \"CUSTOM_A\"",
                "placement.resource_classes",
            ),
            (
                "[placement]\ntoken_file = \"/nonexistent/t\"",
                "placement.token_file",
            ),
            ("[placement]\nca_file = \"ca.pem\"", "placement.ca_file"),
            (
                "[placement.keystone]\ninterface = \"private\"",
                "placement.keystone.interface",
            ),
            (
                "[placement]\nenabled = true\ntoken = \"admin\"",
                "placement.endpoint",
            ),
            (
                "[placement]\nenabled = true\nendpoint = \"http://c:8778\"",
                "placement.token",
            ),
            (
                "[placement]\nenabled = true\nendpoint = \"http://c:8778\"\nauth = \"token\"",
                "placement.token",
            ),
            (
                "[placement]\nenabled = true\nauth = \"keystone\"",
                "placement.keystone.auth_url",
            ),
            (
                "[placement]\nenabled = true\nauth = \"keystone\"\n[placement.keystone]\n\
                 auth_url = \"https://k:5000/v3\"\nusername = \"vgpud\"\nproject_name = \"service\"",
                "placement.keystone.password",
            ),
        ];
        for (text, key) in cases {
            match parse(text) {
                Err(ConfigError::Invalid { key: k, reason, .. }) => {
                    assert_eq!(k, key, "{text}");
                    assert!(!reason.is_empty());
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // Unknown keys are refused in the subsections too.
        let e = parse("[placement.keystone]\npasword = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pasword") && e.contains("line 2"), "{e}");
        // A disabled section may be half written; the endpoint's remedy is given when enabled.
        parse("[placement]\nauth = \"keystone\"").unwrap();
        let e = parse("[placement]\nenabled = true\ntoken = \"admin\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("http://controller:8778"), "{e}");
    }

    #[test]
    fn keystone_from_the_catalog_needs_no_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("password");
        std::fs::write(&secret, "s3cret\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "[placement]\nenabled = true\nauth = \"keystone\"\n[placement.keystone]\n\
             auth_url = \"https://k:5000/v3\"\nusername = \"vgpud\"\nproject_name = \"service\"\n\
             password_file = \"{}\"\n",
            secret.display()
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.placement.keystone.interface, "internal");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        match parse(&text) {
            Err(ConfigError::Invalid { key, .. }) => {
                assert_eq!(key, "placement.keystone.password_file")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn secrets_are_not_printed() {
        let mut c = Config::default();
        c.placement.token = "admin".into();
        c.placement.keystone.password = "hunter2".into();
        let text = toml::to_string(&c).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("\"admin\""),
            "{text}"
        );
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn secrets_open_to_other_users_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, mode: u32| {
            let p = dir.path().join(name);
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p.display().to_string()
        };
        let cert = file("cert", 0o644);
        let text = |key: &str, tokens: &str| {
            format!(
                "[api.tcp]\nlisten = \"127.0.0.1:8443\"\ncert = \"{cert}\"\nkey = \"{key}\"\n\
                 tokens_file = \"{tokens}\""
            )
        };
        let (key_ok, tokens_ok) = (file("key", 0o600), file("tokens", 0o640));
        parse(&text(&key_ok, &tokens_ok)).unwrap();
        for (key, tokens, refused) in [
            (file("key-644", 0o644), tokens_ok.clone(), "api.tcp.key"),
            (file("key-660", 0o660), tokens_ok.clone(), "api.tcp.key"),
            (
                key_ok.clone(),
                file("tokens-604", 0o604),
                "api.tcp.tokens_file",
            ),
        ] {
            match parse(&text(&key, &tokens)) {
                Err(ConfigError::Invalid { key: k, reason, .. }) => {
                    assert_eq!(k, refused);
                    assert!(reason.contains("chmod"), "{reason}");
                }
                other => panic!("{key} {tokens}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_shipped_example_documents_exactly_the_defaults() {
        let text = include_str!("../../systemd/vgpud.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
    }

    #[test]
    fn missing_default_file_is_the_defaults_but_a_named_missing_file_is_an_error() {
        assert!(matches!(
            Config::load(Path::new("/nonexistent/vgpud.toml")),
            Err(ConfigError::Read { .. })
        ));
    }
}
