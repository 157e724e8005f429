//! Injected faults: which access they hit, what they do instead, how often.
//!
//! # One-line form
//!
//! ```text
//! fault   = target "=" action [",times=" N]
//! target  = "write:" PATH | "read:" PATH
//!         | "nvml:" CALL ["@" BDF] | "amd:" CALL ["@" BDF]
//! action  = ERRNO | NVML-CODE | AMD-STATUS | "hang:" MILLIS | "partial:" N
//! ```
//!
//! * `PATH` is an absolute host path, matched exactly, or a prefix when it ends in `*`
//!   (`write:/sys/class/mdev_bus/*`). It is compared with the path the caller used and with the
//!   path after links are followed, so `/sys/bus/pci/devices/<bdf>/…` and the
//!   `/sys/devices/pci…/<bdf>/…` spelling both match. `read:` faults hit reads, link reads and
//!   directory listings; `exists` is never faulted.
//! * `CALL` is the vendor function name (`nvmlDeviceCreateGpuInstanceWithPlacement`,
//!   `amdsmi_set_num_vf`) or `*` for every call; `@BDF` limits it to one GPU (calls that name no
//!   GPU, such as `nvmlDeviceGetCount_v2`, only match faults without `@`).
//! * `ERRNO` is a name (`EBUSY`, `EIO`, `ENOSPC`, …) or a positive number, for `write:`/`read:`.
//!   `NVML-CODE` is a name with or without `NVML_ERROR_` (`IN_USE`, `NVML_ERROR_GPU_IS_LOST`) or a
//!   number, for `nvml:`. `AMD-STATUS` is a name with or without `AMDSMI_STATUS_` (`BUSY`,
//!   `INVAL`) or a number, for `amd:`.
//! * `hang:MILLIS` sleeps that long, then lets the access proceed normally (it may still fail by
//!   the normal rules). `partial:N` makes an SR-IOV enable (`sriov_numvfs` write,
//!   `amdsmi_set_num_vf`) report success but enable at most `N` VFs.
//! * `times=N` removes the fault after it fired `N` times; without it the fault stays until
//!   cleared (or the host reboots).
//!
//! Examples: `write:/sys/bus/pci/devices/0000:07:00.0/sriov_numvfs=EBUSY`,
//! `nvml:nvmlDeviceCreateGpuInstanceWithPlacement@0000:07:00.0=INSUFFICIENT_RESOURCES,times=1`,
//! `write:/sys/class/mdev_bus/*=hang:5000`, `write:/sys/bus/pci/devices/0000:18:00.0/sriov_numvfs=partial:2`.

use std::fmt;
use std::str::FromStr;

use ids::PciAddress;
use serde::{Deserialize, Serialize};

use crate::SimError;

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Which access it hits.
    pub target: FaultTarget,
    /// What happens instead.
    pub action: FaultAction,
    /// How many more times it fires; `None` until cleared.
    #[serde(default)]
    pub times: Option<u32>,
}

/// Which access a fault hits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultTarget {
    /// A sysfs write: exact host path, or a prefix ending in `*`.
    SysfsWrite {
        /// The path or prefix.
        path: String,
    },
    /// A sysfs read, link read or directory listing: exact path or prefix ending in `*`.
    SysfsRead {
        /// The path or prefix.
        path: String,
    },
    /// An NVML call, by function name or `*`, optionally on one GPU.
    Nvml {
        /// The NVML function name, or `*`.
        call: String,
        /// Only calls on this GPU.
        #[serde(default)]
        gpu: Option<PciAddress>,
    },
    /// An AMD SMI call, by function name or `*`, optionally on one GPU.
    Amd {
        /// The AMD SMI function name, or `*`.
        call: String,
        /// Only calls on this GPU.
        #[serde(default)]
        gpu: Option<PciAddress>,
    },
}

/// What a fault does instead of the normal behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultAction {
    /// The sysfs access fails with this errno.
    Errno(i32),
    /// The NVML call returns this `nvmlReturn_t` code.
    NvmlCode(u32),
    /// The AMD SMI call returns this `amdsmi_status_t` status.
    AmdStatus(u32),
    /// The access sleeps, then proceeds normally.
    Hang {
        /// How long, in milliseconds.
        millis: u64,
    },
    /// An SR-IOV enable reports success but enables at most this many VFs.
    PartialVfs {
        /// VFs actually enabled.
        enabled: u32,
    },
}

/// What kind of access is being checked against the faults.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access<'a> {
    SysfsWrite {
        paths: [&'a str; 2],
    },
    SysfsRead {
        paths: [&'a str; 2],
    },
    Nvml {
        calls: &'a [&'static str],
        gpu: Option<PciAddress>,
    },
    Amd {
        call: &'static str,
        gpu: Option<PciAddress>,
    },
}

fn path_matches(pattern: &str, paths: &[&str; 2]) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => paths.iter().any(|p| p.starts_with(prefix)),
        None => paths.contains(&pattern),
    }
}

fn call_matches(
    pattern: &str,
    want_gpu: Option<PciAddress>,
    call: &str,
    gpu: Option<PciAddress>,
) -> bool {
    (pattern == "*" || pattern == call) && (want_gpu.is_none() || want_gpu == gpu)
}

impl FaultTarget {
    /// Whether this target covers the access; for NVML, the call name that matched.
    pub(crate) fn matches(&self, access: &Access<'_>) -> Option<&'static str> {
        match (self, access) {
            (FaultTarget::SysfsWrite { path }, Access::SysfsWrite { paths })
            | (FaultTarget::SysfsRead { path }, Access::SysfsRead { paths }) => {
                path_matches(path, paths).then_some("")
            }
            (FaultTarget::Nvml { call, gpu }, Access::Nvml { calls, gpu: at }) => calls
                .iter()
                .copied()
                .find(|c| call_matches(call, *gpu, c, *at)),
            (FaultTarget::Amd { call, gpu }, Access::Amd { call: c, gpu: at }) => {
                call_matches(call, *gpu, c, *at).then_some(*c)
            }
            _ => None,
        }
    }
}

impl Fault {
    /// Checks that the action makes sense for the target and the pattern is well formed.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |reason: &str| Err(SimError::invalid_fault(self.to_string(), reason));
        if self.times == Some(0) {
            return bad("times must be at least 1");
        }
        match &self.target {
            FaultTarget::SysfsWrite { path } | FaultTarget::SysfsRead { path } => {
                if !path.starts_with('/') {
                    return bad("the path must be absolute");
                }
                if path.trim_end_matches('*').contains('*') {
                    return bad("'*' is only allowed at the end of the path");
                }
            }
            FaultTarget::Nvml { call, .. } | FaultTarget::Amd { call, .. } => {
                let ok = call == "*"
                    || (!call.is_empty()
                        && call.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                if !ok {
                    return bad("the call must be a function name or '*'");
                }
            }
        }
        let fits = match (&self.target, self.action) {
            (_, FaultAction::Hang { .. }) => true,
            (FaultTarget::SysfsWrite { path }, FaultAction::PartialVfs { .. }) => {
                path.ends_with("sriov_numvfs") || path.ends_with('*')
            }
            (FaultTarget::Amd { call, .. }, FaultAction::PartialVfs { .. }) => {
                call == "amdsmi_set_num_vf" || call == "*"
            }
            (
                FaultTarget::SysfsWrite { .. } | FaultTarget::SysfsRead { .. },
                FaultAction::Errno(errno),
            ) => errno > 0,
            (FaultTarget::Nvml { .. }, FaultAction::NvmlCode(code)) => code != 0,
            (FaultTarget::Amd { .. }, FaultAction::AmdStatus(status)) => status != 0,
            _ => false,
        };
        if !fits {
            return bad(
                "this action cannot apply to this target (errno for sysfs, NVML code for nvml, AMD status for amd, partial only for SR-IOV enables, no success codes)",
            );
        }
        Ok(())
    }
}

impl FromStr for Fault {
    type Err = SimError;
    fn from_str(spec: &str) -> Result<Self, SimError> {
        let bad = |reason: &str| SimError::invalid_fault(spec, reason);
        let (body, times) = match spec.rsplit_once(",times=") {
            Some((body, n)) => (
                body,
                Some(
                    n.parse::<u32>()
                        .map_err(|_| bad("times must be a positive number"))?,
                ),
            ),
            None => (spec, None),
        };
        let (target, action) = body
            .rsplit_once('=')
            .ok_or_else(|| bad("expected <target>=<action>"))?;
        let (kind, what) = target
            .split_once(':')
            .ok_or_else(|| bad("the target must start with write:, read:, nvml: or amd:"))?;
        let split_gpu = |what: &str| -> Result<(String, Option<PciAddress>), SimError> {
            match what.split_once('@') {
                Some((call, gpu)) => Ok((
                    call.to_owned(),
                    Some(gpu.parse().map_err(|e: ids::IdError| bad(&e.to_string()))?),
                )),
                None => Ok((what.to_owned(), None)),
            }
        };
        let target = match kind {
            "write" => FaultTarget::SysfsWrite {
                path: what.to_owned(),
            },
            "read" => FaultTarget::SysfsRead {
                path: what.to_owned(),
            },
            "nvml" => {
                let (call, gpu) = split_gpu(what)?;
                FaultTarget::Nvml { call, gpu }
            }
            "amd" => {
                let (call, gpu) = split_gpu(what)?;
                FaultTarget::Amd { call, gpu }
            }
            other => {
                return Err(bad(&format!(
                    "unknown target kind {other:?}: use write, read, nvml or amd"
                )));
            }
        };
        let action = parse_action(&target, action).map_err(|r| bad(&r))?;
        let fault = Fault {
            target,
            action,
            times,
        };
        fault.validate().map_err(|e| match e {
            SimError::InvalidFault { reason, .. } => bad(&reason),
            other => other,
        })?;
        Ok(fault)
    }
}

fn parse_action(target: &FaultTarget, text: &str) -> Result<FaultAction, String> {
    if let Some(ms) = text.strip_prefix("hang:") {
        let millis = ms
            .parse()
            .map_err(|_| format!("hang needs milliseconds, not {ms:?}"))?;
        return Ok(FaultAction::Hang { millis });
    }
    if let Some(n) = text.strip_prefix("partial:") {
        let enabled = n
            .parse()
            .map_err(|_| format!("partial needs a VF count, not {n:?}"))?;
        return Ok(FaultAction::PartialVfs { enabled });
    }
    let number = text.parse::<u32>().ok();
    match target {
        FaultTarget::SysfsWrite { .. } | FaultTarget::SysfsRead { .. } => {
            let errno = match number {
                Some(n) => i32::try_from(n).map_err(|_| format!("errno {n} is out of range"))?,
                None => {
                    errno_by_name(text).ok_or_else(|| format!("unknown errno name {text:?}"))?
                }
            };
            Ok(FaultAction::Errno(errno))
        }
        FaultTarget::Nvml { .. } => {
            let code = number
                .or_else(|| nvml_code_by_name(text))
                .ok_or_else(|| format!("unknown NVML return code {text:?}"))?;
            Ok(FaultAction::NvmlCode(code))
        }
        FaultTarget::Amd { .. } => {
            let status = number
                .or_else(|| amd_status_by_name(text))
                .ok_or_else(|| format!("unknown AMD SMI status {text:?}"))?;
            Ok(FaultAction::AmdStatus(status))
        }
    }
}

impl fmt::Display for FaultTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_gpu =
            |f: &mut fmt::Formatter<'_>, kind: &str, call: &str, gpu: &Option<PciAddress>| {
                write!(f, "{kind}:{call}")?;
                if let Some(g) = gpu {
                    write!(f, "@{g}")?;
                }
                Ok(())
            };
        match self {
            FaultTarget::SysfsWrite { path } => write!(f, "write:{path}"),
            FaultTarget::SysfsRead { path } => write!(f, "read:{path}"),
            FaultTarget::Nvml { call, gpu } => with_gpu(f, "nvml", call, gpu),
            FaultTarget::Amd { call, gpu } => with_gpu(f, "amd", call, gpu),
        }
    }
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FaultAction::Errno(errno) => match errno_name(errno) {
                Some(name) => f.write_str(name),
                None => write!(f, "{errno}"),
            },
            FaultAction::NvmlCode(code) => match nvml_code_name(code) {
                Some(name) => f.write_str(name),
                None => write!(f, "{code}"),
            },
            FaultAction::AmdStatus(status) => match amd_status_name(status) {
                Some(name) => f.write_str(name),
                None => write!(f, "{status}"),
            },
            FaultAction::Hang { millis } => write!(f, "hang:{millis}"),
            FaultAction::PartialVfs { enabled } => write!(f, "partial:{enabled}"),
        }
    }
}

impl fmt::Display for Fault {
    /// The one-line form, which [`Fault::from_str`] parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.target, self.action)?;
        if let Some(n) = self.times {
            write!(f, ",times={n}")?;
        }
        Ok(())
    }
}

const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("ENODEV", libc::ENODEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("EROFS", libc::EROFS),
    ("ERANGE", libc::ERANGE),
    ("EDEADLK", libc::EDEADLK),
    ("ENOSYS", libc::ENOSYS),
    ("ELOOP", libc::ELOOP),
    ("EUSERS", libc::EUSERS),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("EDQUOT", libc::EDQUOT),
    ("ENOMEDIUM", libc::ENOMEDIUM),
];

/// The errno for a name such as `EBUSY`.
pub fn errno_by_name(name: &str) -> Option<i32> {
    ERRNOS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, e)| *e)
}

/// The name of an errno the grammar knows.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    ERRNOS.iter().find(|(_, e)| *e == errno).map(|(n, _)| *n)
}

const NVML_CODES: &[(&str, u32)] = &[
    ("UNINITIALIZED", 1),
    ("INVALID_ARGUMENT", 2),
    ("NOT_SUPPORTED", 3),
    ("NO_PERMISSION", 4),
    ("ALREADY_INITIALIZED", 5),
    ("NOT_FOUND", 6),
    ("INSUFFICIENT_SIZE", 7),
    ("INSUFFICIENT_POWER", 8),
    ("DRIVER_NOT_LOADED", 9),
    ("TIMEOUT", 10),
    ("IRQ_ISSUE", 11),
    ("LIBRARY_NOT_FOUND", 12),
    ("FUNCTION_NOT_FOUND", 13),
    ("CORRUPTED_INFOROM", 14),
    ("GPU_IS_LOST", 15),
    ("RESET_REQUIRED", 16),
    ("OPERATING_SYSTEM", 17),
    ("LIB_RM_VERSION_MISMATCH", 18),
    ("IN_USE", 19),
    ("MEMORY", 20),
    ("NO_DATA", 21),
    ("VGPU_ECC_NOT_SUPPORTED", 22),
    ("INSUFFICIENT_RESOURCES", 23),
    ("FREQ_NOT_SUPPORTED", 24),
    ("ARGUMENT_VERSION_MISMATCH", 25),
    ("DEPRECATED", 26),
    ("NOT_READY", 27),
    ("GPU_NOT_FOUND", 28),
    ("INVALID_STATE", 29),
    ("UNKNOWN", 999),
];

/// The NVML return code for a name, with or without the `NVML_ERROR_` prefix.
pub fn nvml_code_by_name(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("NVML_ERROR_").unwrap_or(&upper);
    NVML_CODES.iter().find(|(n, _)| *n == bare).map(|(_, c)| *c)
}

/// The short name of an NVML return code.
pub fn nvml_code_name(code: u32) -> Option<&'static str> {
    NVML_CODES.iter().find(|(_, c)| *c == code).map(|(n, _)| *n)
}

const AMD_STATUSES: &[(&str, u32)] = &[
    ("INVAL", 1),
    ("NOT_SUPPORTED", 2),
    ("NOT_YET_IMPLEMENTED", 3),
    ("FAIL_LOAD_MODULE", 4),
    ("FAIL_LOAD_SYMBOL", 5),
    ("DRM_ERROR", 6),
    ("API_FAILED", 7),
    ("TIMEOUT", 8),
    ("RETRY", 9),
    ("NO_PERM", 10),
    ("INTERRUPT", 11),
    ("IO", 12),
    ("ADDRESS_FAULT", 13),
    ("FILE_ERROR", 14),
    ("OUT_OF_RESOURCES", 15),
    ("INTERNAL_EXCEPTION", 16),
    ("INPUT_OUT_OF_BOUNDS", 17),
    ("INIT_ERROR", 18),
    ("REFCOUNT_OVERFLOW", 19),
    ("BUSY", 30),
    ("NOT_FOUND", 31),
    ("NOT_INIT", 32),
    ("NO_SLOT", 33),
    ("UNKNOWN", 0xFFFF_FFFF),
];

/// The AMD SMI status for a name, with or without the `AMDSMI_STATUS_` prefix.
pub fn amd_status_by_name(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("AMDSMI_STATUS_").unwrap_or(&upper);
    let bare = if bare == "UNKNOWN_ERROR" {
        "UNKNOWN"
    } else {
        bare
    };
    AMD_STATUSES
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|(_, s)| *s)
}

/// The short name of an AMD SMI status.
pub fn amd_status_name(status: u32) -> Option<&'static str> {
    AMD_STATUSES
        .iter()
        .find(|(_, s)| *s == status)
        .map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_examples_and_round_trips() {
        for spec in [
            "write:/sys/bus/pci/devices/0000:07:00.0/sriov_numvfs=EBUSY",
            "nvml:nvmlDeviceCreateGpuInstanceWithPlacement=IN_USE",
            "nvml:nvmlDeviceCreateGpuInstanceWithPlacement@0000:07:00.0=INSUFFICIENT_RESOURCES,times=1",
            "write:/sys/class/mdev_bus/*=hang:5000",
            "write:/sys/bus/pci/devices/0000:18:00.0/sriov_numvfs=partial:2",
            "read:/sys/devices/system/node/online=EIO,times=3",
            "amd:amdsmi_set_num_vf@0000:c1:00.0=BUSY",
            "amd:*=hang:10",
        ] {
            let f: Fault = spec.parse().unwrap();
            assert_eq!(f.to_string(), spec);
            assert_eq!(f.to_string().parse::<Fault>().unwrap(), f);
        }
        let f: Fault = "nvml:*=NVML_ERROR_GPU_IS_LOST".parse().unwrap();
        assert_eq!(f.action, FaultAction::NvmlCode(15));
        let f: Fault = "write:/sys/x=16".parse().unwrap();
        assert_eq!(f.action, FaultAction::Errno(libc::EBUSY));
        let f: Fault = "amd:x=AMDSMI_STATUS_BUSY".parse().unwrap();
        assert_eq!(f.action, FaultAction::AmdStatus(30));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in [
            "",
            "write:/sys/x",
            "write:/sys/x=EWHAT",
            "write:relative=EIO",
            "write:/sys/*/x=EIO",
            "nvml:create=EBUSY",
            "write:/sys/x=IN_USE",
            "disk:/x=EIO",
            "write:/sys/x=partial:2",
            "nvml:x=partial:2",
            "nvml:x@0000:07=IN_USE",
            "nvml:bad call=IN_USE",
            "write:/sys/x=EIO,times=0",
            "write:/sys/x=EIO,times=-1",
            "nvml:x=0",
            "write:/sys/x=hang:soon",
        ] {
            let err = bad.parse::<Fault>().unwrap_err();
            assert!(matches!(err, SimError::InvalidFault { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn matching() {
        let t = FaultTarget::SysfsWrite {
            path: "/sys/class/mdev_bus/*".into(),
        };
        let hit = Access::SysfsWrite {
            paths: ["/sys/class/mdev_bus/0000:3b:00.0/x/create", "/y"],
        };
        assert!(t.matches(&hit).is_some());
        let miss = Access::SysfsRead {
            paths: ["/sys/class/mdev_bus/a", "/b"],
        };
        assert!(t.matches(&miss).is_none());
        let gpu: PciAddress = "0000:07:00.0".parse().unwrap();
        let other: PciAddress = "0000:0f:00.0".parse().unwrap();
        let t = FaultTarget::Nvml {
            call: "*".into(),
            gpu: Some(gpu),
        };
        let calls = ["nvmlDeviceGetMigMode"];
        assert_eq!(
            t.matches(&Access::Nvml {
                calls: &calls,
                gpu: Some(gpu)
            }),
            Some("nvmlDeviceGetMigMode")
        );
        assert_eq!(
            t.matches(&Access::Nvml {
                calls: &calls,
                gpu: Some(other)
            }),
            None
        );
        assert_eq!(
            t.matches(&Access::Nvml {
                calls: &calls,
                gpu: None
            }),
            None
        );
    }

    #[test]
    fn serde_form() {
        let f: Fault = "write:/sys/x=EBUSY,times=2".parse().unwrap();
        let json = serde_json::to_string(&f).unwrap();
        assert!(json.contains("\"sysfs_write\""), "{json}");
        assert_eq!(serde_json::from_str::<Fault>(&json).unwrap(), f);
    }
}
