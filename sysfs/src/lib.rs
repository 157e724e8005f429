//! Host access to sysfs (and the few `/dev` and `/proc` files the device crates look at).
//!
//! [`Sysfs`] is the one narrow trait through which vgpud reads and writes kernel attributes.
//! Paths are absolute, as on a real host (`/sys/bus/pci/devices/...`); an implementation decides
//! where they really live: [`RealSysfs`] under a root directory (`/` in production, a fixture
//! tree in tests), the simulator in `sim` in a behavioural model of the kernel.
//!
//! This crate knows nothing about devices; the device crates (`numa`, `vfio`, `mdev`, `gpu`)
//! interpret what is read here. Helpers in [`SysfsExt`] give every caller the same handling of
//! trailing newlines, garbage, missing optional files and non-UTF-8 names.

pub mod fixture;
mod real;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

pub use real::RealSysfs;

/// The largest attribute the helpers read: sysfs text attributes are at most one page, but some
/// lists (`creatable_vgpu_types`, `cpulist` on big hosts) can be longer, so allow 64 KiB.
pub const DEFAULT_READ_LIMIT: usize = 64 * 1024;

/// What was being done when a sysfs access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Reading a file.
    Read,
    /// Writing a file.
    Write,
    /// Reading a symbolic link.
    ReadLink,
    /// Listing a directory.
    ListDir,
    /// Parsing what was read.
    Parse,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::ReadLink => "read link",
            Op::ListDir => "list directory",
            Op::Parse => "parse",
        })
    }
}

/// A failed sysfs access. The kernel's errno is kept ([`SysfsError::errno`]) because callers act
/// on it: `EEXIST` for a duplicate mdev UUID, `EBUSY` for an SR-IOV count change, and so on.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}", path.display())]
pub struct SysfsError {
    /// What was being done.
    pub op: Op,
    /// The host path (as seen by the agent, not the implementation's backing path).
    pub path: PathBuf,
    /// The underlying error; for kernel refusals it carries the errno.
    #[source]
    pub source: io::Error,
}

impl SysfsError {
    /// Builds an error.
    pub fn new(op: Op, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self {
            op,
            path: path.into(),
            source,
        }
    }
    /// An error with a raw errno, as the kernel would return it.
    pub fn errno_of(op: Op, path: impl Into<PathBuf>, errno: i32) -> Self {
        Self::new(op, path, io::Error::from_raw_os_error(errno))
    }
    /// A parse failure of the file's contents.
    pub fn parse(path: impl Into<PathBuf>, what: impl fmt::Display) -> Self {
        Self::new(
            Op::Parse,
            path,
            io::Error::new(io::ErrorKind::InvalidData, what.to_string()),
        )
    }
    /// The kernel's errno, when the failure came from a system call.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
    /// True when the file or directory does not exist.
    pub fn is_not_found(&self) -> bool {
        self.errno() == Some(libc::ENOENT) || self.source.kind() == io::ErrorKind::NotFound
    }
}

/// Formats an error with its whole source chain on one line, for logs and JSON warnings.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        out.push_str(": ");
        out.push_str(&e.to_string());
        next = e.source();
    }
    out
}

/// Narrow access to kernel attribute files. Paths are absolute host paths.
pub trait Sysfs: Send + Sync + fmt::Debug {
    /// Reads the whole file, failing with `EFBIG` if it is longer than `limit` bytes.
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError>;
    /// Writes `data` in one write, as a shell redirect would; the kernel's errno is preserved.
    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError>;
    /// The target of a symbolic link, as stored (usually relative).
    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError>;
    /// The names in a directory, in no particular order, following a link to a directory.
    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError>;
    /// Whether the path exists (following links).
    fn exists(&self, path: &Path) -> bool;
}

/// Typed helpers over any [`Sysfs`]. Implemented for every `Sysfs`, including `dyn Sysfs`.
pub trait SysfsExt: Sysfs {
    /// The file's contents as UTF-8 text with surrounding whitespace removed.
    fn read_text(&self, path: &Path) -> Result<String, SysfsError> {
        let bytes = self.read(path, DEFAULT_READ_LIMIT)?;
        let text = String::from_utf8(bytes).map_err(|_| SysfsError::parse(path, "not UTF-8"))?;
        Ok(text.trim().to_owned())
    }
    /// Like [`SysfsExt::read_text`], but a missing file is `None` (an optional attribute).
    fn read_text_opt(&self, path: &Path) -> Result<Option<String>, SysfsError> {
        match self.read_text(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// Reads and parses the file; garbage is a parse error naming the file and the contents.
    fn read_parse<T>(&self, path: &Path) -> Result<T, SysfsError>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let text = self.read_text(path)?;
        text.parse::<T>().map_err(|e| {
            let shown: String = text.chars().take(40).collect();
            SysfsError::parse(path, format!("{shown:?}: {e}"))
        })
    }
    /// Like [`SysfsExt::read_parse`], but a missing file is `None`.
    fn read_parse_opt<T>(&self, path: &Path) -> Result<Option<T>, SysfsError>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.read_parse(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// Writes a text value.
    fn write_str(&self, path: &Path, value: &str) -> Result<(), SysfsError> {
        self.write(path, value.as_bytes())
    }
    /// The absolute path a link points to, resolved lexically against the link's directory.
    fn resolve_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        let target = self.read_link(path)?;
        let base = path.parent().unwrap_or(Path::new("/"));
        Ok(normalize(&base.join(target)))
    }
    /// The last component of a link's target (e.g. the IOMMU group number, the driver name).
    fn link_name(&self, path: &Path) -> Result<String, SysfsError> {
        let target = self.read_link(path)?;
        target
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .ok_or_else(|| SysfsError::parse(path, format!("link target {target:?} has no name")))
    }
    /// Like [`SysfsExt::link_name`], but a missing link is `None`.
    fn link_name_opt(&self, path: &Path) -> Result<Option<String>, SysfsError> {
        match self.link_name(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// Directory entries that are valid UTF-8, sorted; the others are returned as errors so the
    /// caller can report them without losing the rest.
    fn list_names(&self, path: &Path) -> Result<(Vec<String>, Vec<SysfsError>), SysfsError> {
        let mut names = Vec::new();
        let mut skipped = Vec::new();
        for name in self.list_dir(path)? {
            match name.into_string() {
                Ok(s) => names.push(s),
                Err(raw) => skipped.push(SysfsError::parse(
                    path.join(&raw),
                    format!("entry name {raw:?} is not UTF-8"),
                )),
            }
        }
        names.sort();
        Ok((names, skipped))
    }
    /// Like [`SysfsExt::list_names`], but a missing directory is empty.
    fn list_names_opt(&self, path: &Path) -> Result<(Vec<String>, Vec<SysfsError>), SysfsError> {
        match self.list_names(path) {
            Err(e) if e.is_not_found() => Ok((Vec::new(), Vec::new())),
            other => other,
        }
    }
}

impl<T: Sysfs + ?Sized> SysfsExt for T {}

/// Removes `.` and resolves `..` lexically; sysfs link targets are relative paths like
/// `../../../devices/pci0000:00/0000:00:01.0`.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Checks that a host path is absolute and free of `..`, so it cannot escape an implementation's
/// root. Paths are built from typed values; this is a second line of defence.
pub fn check_host_path(op: Op, path: &Path) -> Result<(), SysfsError> {
    let bad = !path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir));
    if bad {
        return Err(SysfsError::errno_of(op, path, libc::EINVAL));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_parents() {
        let p = normalize(Path::new(
            "/sys/bus/pci/devices/../../../devices/pci0000:00/0000:00:01.0",
        ));
        assert_eq!(p, Path::new("/sys/devices/pci0000:00/0000:00:01.0"));
        assert_eq!(normalize(Path::new("/../..")), Path::new("/"));
    }

    #[test]
    fn host_paths_are_checked() {
        assert!(check_host_path(Op::Read, Path::new("/sys/a")).is_ok());
        assert!(check_host_path(Op::Read, Path::new("sys/a")).is_err());
        let e = check_host_path(Op::Write, Path::new("/sys/../etc/passwd")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }

    #[test]
    fn error_chain_lists_sources() {
        let e = SysfsError::errno_of(Op::Write, "/sys/x", libc::EBUSY);
        let chain = error_chain(&e);
        assert!(chain.starts_with("cannot write /sys/x: "), "{chain}");
        assert!(chain.contains("busy"), "{chain}");
    }
}
