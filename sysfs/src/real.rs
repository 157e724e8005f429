use std::ffi::OsString;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::{Op, Sysfs, SysfsError, check_host_path};

/// The real host's sysfs, with every absolute path taken relative to `root`.
///
/// `root` is `/` in production; tests point it at a fixture tree (see [`crate::fixture`]) and the
/// real-kernel rig at the guest's `/`. Relative link targets inside the tree resolve the same way
/// they do on a host, so a tree captured from a real machine works unchanged.
#[derive(Debug, Clone)]
pub struct RealSysfs {
    root: PathBuf,
}

impl RealSysfs {
    /// Accesses paths under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    /// The host's own `/`.
    pub fn host() -> Self {
        Self::new("/")
    }
    /// The directory host paths are taken relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }
    fn backing(&self, op: Op, path: &Path) -> Result<PathBuf, SysfsError> {
        check_host_path(op, path)?;
        Ok(self.root.join(path.strip_prefix("/").unwrap_or(path)))
    }
}

impl Default for RealSysfs {
    fn default() -> Self {
        Self::host()
    }
}

impl Sysfs for RealSysfs {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        let real = self.backing(Op::Read, path)?;
        let err = |e| SysfsError::new(Op::Read, path, e);
        let file = fs::File::open(real).map_err(err)?;
        let mut buf = Vec::new();
        // Read one byte past the limit to tell "exactly the limit" from "longer".
        file.take(limit as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(err)?;
        if buf.len() > limit {
            return Err(SysfsError::errno_of(Op::Read, path, libc::EFBIG));
        }
        Ok(buf)
    }

    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
        let real = self.backing(Op::Write, path)?;
        let err = |e| SysfsError::new(Op::Write, path, e);
        // No O_CREAT: writing to an attribute that does not exist is an error, as on sysfs.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(real)
            .map_err(err)?;
        // One write(2): sysfs store handlers see the whole value at once. A short write is
        // reported rather than retried, because a retry would deliver half a value.
        let written = file.write(data).map_err(err)?;
        if written != data.len() {
            return Err(SysfsError::errno_of(Op::Write, path, libc::EIO));
        }
        Ok(())
    }

    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        let real = self.backing(Op::ReadLink, path)?;
        fs::read_link(real).map_err(|e| SysfsError::new(Op::ReadLink, path, e))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        let real = self.backing(Op::ListDir, path)?;
        let err = |e| SysfsError::new(Op::ListDir, path, e);
        fs::read_dir(real)
            .map_err(err)?
            .map(|entry| entry.map(|e| e.file_name()).map_err(err))
            .collect()
    }

    fn exists(&self, path: &Path) -> bool {
        self.backing(Op::Read, path)
            .map(|p| p.exists())
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SysfsExt;
    use crate::fixture::Tree;

    #[test]
    fn reads_writes_and_links_under_root() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        tree.file("/sys/devices/pci0000:00/0000:00:02.0/numa_node", "-1\n");
        tree.link(
            "/sys/bus/pci/devices/0000:00:02.0",
            "../../../devices/pci0000:00/0000:00:02.0",
        );
        let fs = RealSysfs::new(dir.path());
        let dev = Path::new("/sys/bus/pci/devices/0000:00:02.0");
        assert_eq!(fs.read_text(&dev.join("numa_node")).unwrap(), "-1");
        assert_eq!(
            fs.resolve_link(dev).unwrap(),
            Path::new("/sys/devices/pci0000:00/0000:00:02.0")
        );
        fs.write_str(&dev.join("numa_node"), "1").unwrap();
        assert_eq!(fs.read_parse::<i32>(&dev.join("numa_node")).unwrap(), 1);
        let missing = fs.write_str(&dev.join("nope"), "1").unwrap_err();
        assert!(missing.is_not_found());
        assert_eq!(fs.read_text_opt(&dev.join("nope")).unwrap(), None);
    }

    #[test]
    fn bounded_read_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        tree.file("/big", &"x".repeat(100));
        tree.file("/garbage", "\u{1}zz\n");
        tree.bytes("/binary", &[0xff, 0xfe]);
        let fs = RealSysfs::new(dir.path());
        assert_eq!(fs.read(Path::new("/big"), 100).unwrap().len(), 100);
        assert_eq!(
            fs.read(Path::new("/big"), 99).unwrap_err().errno(),
            Some(libc::EFBIG)
        );
        let e = fs.read_parse::<u32>(Path::new("/garbage")).unwrap_err();
        assert_eq!(e.op, Op::Parse);
        assert!(crate::error_chain(&e).contains("/garbage"));
        assert_eq!(
            fs.read_text(Path::new("/binary")).unwrap_err().op,
            Op::Parse
        );
        assert_eq!(
            fs.read(Path::new("/../etc/passwd"), 10)
                .unwrap_err()
                .errno(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn non_utf8_names_are_reported_not_lost() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        tree.file("/d/good", "1");
        fs::write(
            dir.path()
                .join("d")
                .join(std::ffi::OsStr::from_bytes(b"bad\xff")),
            "",
        )
        .unwrap();
        let fs = RealSysfs::new(dir.path());
        let (names, skipped) = fs.list_names(Path::new("/d")).unwrap();
        assert_eq!(names, vec!["good"]);
        assert_eq!(skipped.len(), 1);
        assert!(fs.list_names_opt(Path::new("/none")).unwrap().0.is_empty());
    }
}
