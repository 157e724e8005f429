//! Fixture hosts for the mdev tests: mdev parents laid out as the kernel lays them out, and a
//! [`Probe`] around the fixture's sysfs that records writes in order and injects failures.
//! (The `Probe` is the same as in the vfio tests; a shared copy would belong in `sysfs::fixture`.)
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sysfs::fixture::Tree;
use sysfs::{Op, RealSysfs, Sysfs, SysfsError};
use tempfile::TempDir;

/// The relative link target the kernel would store in `from_dir` for `to` (both absolute).
pub fn relative(from_dir: &str, to: &str) -> String {
    let from: Vec<&str> = from_dir.split('/').filter(|c| !c.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|c| !c.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts = vec![".."; from.len() - common];
    parts.extend(&to[common..]);
    parts.join("/")
}

pub const MTTY: &str = "/sys/devices/virtual/mtty/mtty";
pub const T4: &str = "/sys/devices/pci0000:00/0000:00:03.0/0000:3b:00.0";
pub const T4_NAME: &str = "0000:3b:00.0";
/// An mdev that exists on the T4 from the start.
pub const EXISTING: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

/// A fixture host under a temporary directory.
pub struct Host {
    pub dir: TempDir,
    pub tree: Tree,
}

impl Host {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tree = Tree::new(dir.path());
        Self { dir, tree }
    }

    /// The kernel's `mtty` sample parent (types mtty-1, mtty-2) and an NVIDIA T4 at
    /// 0000:3b:00.0 (types nvidia-222, nvidia-223) with one nvidia-222 mdev in IOMMU group 70.
    pub fn standard() -> Self {
        let host = Self::new();
        host.parent("mtty", MTTY);
        host.mdev_type(MTTY, "mtty-1", "Single port serial", "vfio-pci", "24");
        host.mdev_type(MTTY, "mtty-2", "Dual port serial", "vfio-pci", "12");
        host.parent(T4_NAME, T4);
        host.mdev_type(T4, "nvidia-222", "GRID T4-1B", "vfio-pci", "15");
        host.tree.file(
            &format!("{T4}/mdev_supported_types/nvidia-222/description"),
            "num_heads=4, frl_config=45, framebuffer=1024M, max_resolution=5120x2880, max_instance=16\n",
        );
        host.mdev_type(T4, "nvidia-223", "GRID T4-2B", "vfio-pci", "7");
        host.mdev(T4, "nvidia-222", EXISTING, Some(70));
        host
    }

    pub fn fs(&self) -> RealSysfs {
        RealSysfs::new(self.dir.path())
    }

    pub fn probe(&self) -> Probe {
        Probe::new(self.fs())
    }

    /// Links `link` (absolute) to `target` (absolute) with a kernel-style relative target.
    pub fn link(&self, link: &str, target: &str) {
        link_in(&self.tree, link, target);
    }

    pub fn parent(&self, name: &str, device: &str) {
        self.tree.dir(&format!("{device}/mdev_supported_types"));
        self.link(&format!("/sys/class/mdev_bus/{name}"), device);
    }

    pub fn mdev_type(&self, parent: &str, id: &str, name: &str, api: &str, available: &str) {
        let dir = format!("{parent}/mdev_supported_types/{id}");
        self.tree.file(&format!("{dir}/name"), &format!("{name}\n"));
        self.tree
            .file(&format!("{dir}/device_api"), &format!("{api}\n"));
        self.tree.file(
            &format!("{dir}/available_instances"),
            &format!("{available}\n"),
        );
        self.tree.file(&format!("{dir}/create"), "");
        self.tree.dir(&format!("{dir}/devices"));
    }

    /// An mdev as the kernel shows it once created.
    pub fn mdev(&self, parent: &str, ty: &str, uuid: &str, group: Option<u32>) {
        add_mdev(&self.tree, parent, ty, uuid, group);
    }

    /// Host path → backing path in the temporary directory.
    pub fn backing(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }
}

fn link_in(tree: &Tree, link: &str, target: &str) {
    let (dir, _) = link.rsplit_once('/').unwrap();
    tree.link(link, &relative(dir, target));
}

/// Lays out an mdev as the kernel shows it once created: its directory under the parent, the
/// type and group links, and the links to it from the type and the mdev bus.
pub fn add_mdev(tree: &Tree, parent: &str, ty: &str, uuid: &str, group: Option<u32>) {
    let dev = format!("{parent}/{uuid}");
    let type_dir = format!("{parent}/mdev_supported_types/{ty}");
    tree.file(&format!("{dev}/remove"), "");
    link_in(tree, &format!("{dev}/mdev_type"), &type_dir);
    if let Some(n) = group {
        let g = format!("/sys/kernel/iommu_groups/{n}");
        tree.dir(&format!("{g}/devices"));
        link_in(tree, &format!("{dev}/iommu_group"), &g);
        link_in(tree, &format!("{g}/devices/{uuid}"), &dev);
    }
    link_in(tree, &format!("{type_dir}/devices/{uuid}"), &dev);
    link_in(tree, &format!("/sys/bus/mdev/devices/{uuid}"), &dev);
}

type Hook = Box<dyn Fn(&Path, &str) + Send + Sync>;

/// The fixture's sysfs with a log of writes, injected errors, and a hook run after each
/// successful write (to play the kernel's part where a test needs it, e.g. the driver link
/// changing after `drivers_probe`).
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
    pub fn new(inner: RealSysfs) -> Self {
        Self {
            inner,
            writes: Mutex::default(),
            write_errors: Mutex::default(),
            denied: Mutex::default(),
            hook: None,
        }
    }

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
    /// directory without read and search permission.
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
