//! Test and tooling helpers: a builder for sysfs-shaped directory trees, a fixture host in a
//! temporary directory ([`TempHost`]), and [`Probe`], a sysfs wrapper that records writes and
//! injects failures.
//!
//! The tree is written to a real directory so [`crate::RealSysfs`] reads it through the same code
//! path as on a host, links included. Panics on I/O errors and poisoned locks: these are test
//! helpers, never used by the agent itself.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Op, RealSysfs, Sysfs, SysfsError};

/// The relative link target from directory `from_dir` to `to` (both absolute host paths), as the
/// kernel writes its links: `relative("/sys/bus/pci/devices", "/sys/devices/x")` is
/// `../../../devices/x`.
pub fn relative(from_dir: &str, to: &str) -> String {
    let from: Vec<&str> = from_dir.split('/').filter(|c| !c.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|c| !c.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    parts.join("/")
}

/// Writes files, directories and relative symbolic links under a root directory.
#[derive(Debug, Clone)]
pub struct Tree {
    root: PathBuf,
}

impl Tree {
    /// A builder writing under `root` (which should exist, e.g. a temporary directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    /// The backing directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    fn backing(&self, host_path: &str) -> PathBuf {
        self.root.join(host_path.trim_start_matches('/'))
    }
    /// Creates a directory and its parents.
    pub fn dir(&self, host_path: &str) -> &Self {
        fs::create_dir_all(self.backing(host_path)).expect("create fixture directory");
        self
    }
    /// Writes a text file, creating parent directories.
    pub fn file(&self, host_path: &str, contents: &str) -> &Self {
        self.bytes(host_path, contents.as_bytes())
    }
    /// Writes a file with raw bytes, creating parent directories.
    pub fn bytes(&self, host_path: &str, contents: &[u8]) -> &Self {
        let path = self.backing(host_path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create fixture parent");
        }
        fs::write(path, contents).expect("write fixture file");
        self
    }
    /// Creates a symbolic link at `host_path` whose stored target is `target` (kept verbatim,
    /// so relative targets behave as the kernel's do).
    pub fn link(&self, host_path: &str, target: &str) -> &Self {
        let path = self.backing(host_path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create fixture parent");
        }
        let _ = fs::remove_file(&path);
        std::os::unix::fs::symlink(target, path).expect("create fixture link");
        self
    }
    /// Creates a link at `host_path` to the absolute host path `target`, stored relative the way
    /// the kernel stores its links.
    pub fn link_to(&self, host_path: &str, target: &str) -> &Self {
        let dir = host_path.rsplit_once('/').map_or("/", |(d, _)| d);
        self.link(host_path, &relative(dir, target))
    }
}

/// A fixture host: a sysfs-shaped tree in its own temporary directory (removed when dropped),
/// read through [`RealSysfs`] as a host's would be. Device crates' tests build their fixture
/// hosts on it.
#[derive(Debug)]
pub struct TempHost {
    /// The temporary directory the host's `/` maps to.
    pub dir: tempfile::TempDir,
    /// Writes the host's files, directories and links.
    pub tree: Tree,
}

impl TempHost {
    /// An empty host.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("create fixture directory");
        let tree = Tree::new(dir.path());
        Self { dir, tree }
    }

    /// The host's sysfs.
    pub fn fs(&self) -> RealSysfs {
        RealSysfs::new(self.dir.path())
    }

    /// The host's sysfs behind a [`Probe`].
    pub fn probe(&self) -> Probe {
        Probe::new(self.fs())
    }

    /// Links `link` (absolute) to `target` (absolute) with a kernel-style relative target.
    pub fn link(&self, link: &str, target: &str) {
        self.tree.link_to(link, target);
    }

    /// Host path → backing path in the temporary directory.
    pub fn backing(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }
}

impl Default for TempHost {
    fn default() -> Self {
        Self::new()
    }
}

type Hook = Box<dyn Fn(&Path, &str) + Send + Sync>;

/// A fixture's sysfs with a log of writes, injected write errors, denied paths, and a hook run
/// after each successful write (to play the kernel's part where a test needs it, e.g. the driver
/// link changing after `drivers_probe`).
pub struct Probe {
    inner: RealSysfs,
    writes: Mutex<Vec<(PathBuf, String)>>,
    write_errors: Mutex<Vec<(PathBuf, i32)>>,
    denied: Mutex<Vec<PathBuf>>,
    hook: Option<Hook>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// Wraps a fixture's sysfs.
    pub fn new(inner: RealSysfs) -> Self {
        Self {
            inner,
            writes: Mutex::default(),
            write_errors: Mutex::default(),
            denied: Mutex::default(),
            hook: None,
        }
    }

    /// Runs `hook(path, value)` after every successful write.
    pub fn on_write(mut self, hook: impl Fn(&Path, &str) + Send + Sync + 'static) -> Self {
        self.hook = Some(Box::new(hook));
        self
    }

    /// The next writes to `path` fail with `errno`.
    pub fn fail_write(&self, path: &str, errno: i32) -> &Self {
        self.write_errors
            .lock()
            .unwrap()
            .push((PathBuf::from(path), errno));
        self
    }

    /// Reads, links and listings of `path` and everything below it fail with EACCES, as for a
    /// directory without read and search permission (tests run as root, so permissions alone
    /// cannot do it).
    pub fn deny(&self, path: &str) -> &Self {
        self.denied.lock().unwrap().push(PathBuf::from(path));
        self
    }

    /// The writes so far: (host path, value).
    pub fn writes(&self) -> Vec<(String, String)> {
        let log = self.writes.lock().unwrap();
        log.iter()
            .map(|(p, v)| (p.display().to_string(), v.clone()))
            .collect()
    }

    fn check_denied(&self, op: Op, path: &Path) -> Result<(), SysfsError> {
        let denied = self.denied.lock().unwrap();
        if denied.iter().any(|d| path.starts_with(d)) {
            return Err(SysfsError::errno_of(op, path, libc::EACCES));
        }
        Ok(())
    }
}

impl Sysfs for Probe {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        self.check_denied(Op::Read, path)?;
        self.inner.read(path, limit)
    }
    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
        let value = String::from_utf8_lossy(data).into_owned();
        self.writes
            .lock()
            .unwrap()
            .push((path.to_owned(), value.clone()));
        let injected = self
            .write_errors
            .lock()
            .unwrap()
            .iter()
            .find(|(p, _)| p == path)
            .map(|e| e.1);
        if let Some(errno) = injected {
            return Err(SysfsError::errno_of(Op::Write, path, errno));
        }
        self.inner.write(path, data)?;
        if let Some(hook) = &self.hook {
            hook(path, &value);
        }
        Ok(())
    }
    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        self.check_denied(Op::ReadLink, path)?;
        self.inner.read_link(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        self.check_denied(Op::ListDir, path)?;
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_targets_match_the_kernels() {
        assert_eq!(
            relative(
                "/sys/bus/pci/devices",
                "/sys/devices/pci0000:00/0000:00:01.0"
            ),
            "../../../devices/pci0000:00/0000:00:01.0"
        );
        assert_eq!(relative("/a/b", "/a/b/c"), "c");
    }

    #[test]
    fn probe_records_and_fails_writes() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        tree.file("/sys/x", "0").link_to("/sys/d/l", "/sys/x");
        let probe = Probe::new(RealSysfs::new(dir.path()));
        probe.write(Path::new("/sys/x"), b"1").unwrap();
        probe.fail_write("/sys/x", libc::EBUSY);
        let err = probe.write(Path::new("/sys/x"), b"2").unwrap_err();
        assert_eq!(err.errno(), Some(libc::EBUSY));
        assert_eq!(
            probe.writes(),
            vec![("/sys/x".into(), "1".into()), ("/sys/x".into(), "2".into())]
        );
        probe.deny("/sys/d");
        assert_eq!(
            probe.read_link(Path::new("/sys/d/l")).unwrap_err().errno(),
            Some(libc::EACCES)
        );
        assert_eq!(probe.read(Path::new("/sys/x"), 10).unwrap(), b"1");
    }
}
