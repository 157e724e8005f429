//! [`SimSysfs`]: the model seen through the [`sysfs::Sysfs`] trait.
//!
//! Reads resolve the path in the rendered tree, following links like the kernel's VFS (at most
//! 40 hops, then `ELOOP`). Errors: a missing path is `ENOENT`, a file used as a directory
//! `ENOTDIR`, reading a directory `EISDIR`, reading a write-only attribute or writing a
//! read-only one `EACCES`, reading an attribute the driver cannot answer yet its errno (`ENXIO`
//! for a VF's `nvidia/gpu_instance_id` before it has a vGPU), reading or writing a `/dev/vfio` node `EINVAL`, `read_link` on a
//! non-link `EINVAL`, a read longer than the limit `EFBIG`. A fault is looked up before the
//! kernel's rule runs; see [`crate::fault`].

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use libc::{EACCES, EFBIG, EINVAL, EISDIR, ELOOP, ENOENT, ENOTDIR};
use sysfs::{Op, Sysfs, SysfsError, check_host_path, error_chain};

use crate::SimError;
use crate::fault::{Access, FaultAction};
use crate::host::SimHost;
use crate::kernel;
use crate::tree::{Node, Store, Tree};

/// The simulated host's sysfs.
#[derive(Debug, Clone)]
pub struct SimSysfs {
    host: SimHost,
}

const MAX_HOPS: usize = 40;

/// Resolves `path` in the tree: the canonical path (links followed) and its node.
fn resolve<'t>(tree: &'t Tree, path: &str, follow_last: bool) -> Result<(String, &'t Node), i32> {
    let canon = tree.resolved(path, follow_last, || {
        walk(tree, path, follow_last).map(|(canon, _)| canon)
    })?;
    let node = tree.get(&canon).ok_or(ENOENT)?;
    Ok((canon, node))
}

/// Resolves `path` component by component, following links (the last one only with
/// `follow_last`), as the kernel's path walk does.
fn walk<'t>(tree: &'t Tree, path: &str, follow_last: bool) -> Result<(String, &'t Node), i32> {
    let mut pending: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
        .collect();
    pending.reverse();
    let mut cur = String::from("/");
    let mut hops = 0;
    while let Some(comp) = pending.pop() {
        let cand = if cur == "/" {
            format!("/{comp}")
        } else {
            format!("{cur}/{comp}")
        };
        match tree.get(&cand).ok_or(ENOENT)? {
            Node::Link(target) if follow_last || !pending.is_empty() => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(ELOOP);
                }
                let base = if cur == "/" {
                    PathBuf::from("/")
                } else {
                    PathBuf::from(&cur)
                };
                let absolute = sysfs::normalize(&base.join(target));
                let mut parts: Vec<String> = absolute
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => n.to_str().map(str::to_owned),
                        _ => None,
                    })
                    .collect();
                parts.reverse();
                pending.extend(parts);
                cur = String::from("/");
            }
            Node::Dir(_) | Node::Link(_) => cur = cand,
            Node::Attr { .. } | Node::CharDev | Node::Unreadable(_) if !pending.is_empty() => {
                return Err(ENOTDIR);
            }
            Node::Attr { .. } | Node::CharDev | Node::Unreadable(_) => cur = cand,
        }
    }
    let node = tree.get(&cur).ok_or(ENOENT)?;
    Ok((cur, node))
}

fn access_of(op: Op, paths: [&str; 2]) -> Access<'_> {
    if op == Op::Write {
        Access::SysfsWrite { paths }
    } else {
        Access::SysfsRead { paths }
    }
}

/// What a resolved read found.
enum Found {
    Bytes(Vec<u8>),
    Link(PathBuf),
    Names(Vec<OsString>),
    Store(Store),
}

impl SimSysfs {
    pub(crate) fn new(host: SimHost) -> Self {
        Self { host }
    }

    fn sim_err(op: Op, path: &Path, e: &SimError) -> SysfsError {
        SysfsError::new(op, path, io::Error::other(error_chain(e)))
    }

    /// Looks the path up, checks faults, then hands the node to `pick`. Returns what `pick`
    /// found and, for a `partial:N` fault, the VF limit the write must apply.
    fn access(
        &self,
        op: Op,
        path: &Path,
        follow_last: bool,
        pick: impl Fn(&Node) -> Result<Found, i32>,
    ) -> Result<(Found, Option<u32>), SysfsError> {
        check_host_path(op, path)?;
        let errno = |e: i32| SysfsError::errno_of(op, path, e);
        let sim = |e: SimError| Self::sim_err(op, path, &e);
        let Some(text) = path.to_str() else {
            return Err(errno(ENOENT));
        };
        let lookup = || -> Result<(Result<Found, i32>, String, bool), SimError> {
            self.host.store().read(|v| {
                let tree = v.tree();
                let resolved = resolve(&tree, text, follow_last);
                let canon = resolved
                    .as_ref()
                    .map_or_else(|_| text.to_owned(), |(c, _)| c.clone());
                let found = resolved.and_then(|(_, node)| pick(node));
                let faulty = v.state.has_fault(&access_of(op, [text, &canon]));
                (found, canon, faulty)
            })
        };
        let (found, canon, faulty) = lookup().map_err(sim)?;
        if !faulty {
            return found.map(|f| (f, None)).map_err(errno);
        }
        let access = access_of(op, [text, &canon]);
        let action = self
            .host
            .change(|st, _| Ok(st.take_fault(&access).map(|(a, _)| a)))
            .map_err(sim)?;
        match action {
            Some(FaultAction::Errno(e)) => Err(errno(e)),
            Some(FaultAction::Hang { millis }) => {
                std::thread::sleep(Duration::from_millis(millis));
                // Look again: the host may have changed while this access hung.
                let (found, _, _) = lookup().map_err(sim)?;
                found.map(|f| (f, None)).map_err(errno)
            }
            Some(FaultAction::PartialVfs { enabled }) => {
                found.map(|f| (f, Some(enabled))).map_err(errno)
            }
            _ => found.map(|f| (f, None)).map_err(errno),
        }
    }
}

impl Sysfs for SimSysfs {
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, SysfsError> {
        let (found, _) = self.access(Op::Read, path, true, |node| match node {
            Node::Attr {
                content: Some(c), ..
            } => Ok(Found::Bytes(c.as_bytes().to_vec())),
            Node::Attr { content: None, .. } => Err(EACCES),
            Node::Unreadable(errno) => Err(*errno),
            Node::Dir(_) => Err(EISDIR),
            Node::CharDev | Node::Link(_) => Err(EINVAL),
        })?;
        match found {
            Found::Bytes(b) if b.len() > limit => Err(SysfsError::errno_of(Op::Read, path, EFBIG)),
            Found::Bytes(b) => Ok(b),
            _ => Err(SysfsError::errno_of(Op::Read, path, EINVAL)),
        }
    }

    fn write(&self, path: &Path, data: &[u8]) -> Result<(), SysfsError> {
        let (found, partial) = self.access(Op::Write, path, true, |node| match node {
            Node::Attr { store: Some(s), .. } => Ok(Found::Store(s.clone())),
            Node::Attr { store: None, .. } | Node::Unreadable(_) => Err(EACCES),
            Node::Dir(_) => Err(EISDIR),
            Node::CharDev | Node::Link(_) => Err(EINVAL),
        })?;
        let Found::Store(store) = found else {
            return Err(SysfsError::errno_of(Op::Write, path, EINVAL));
        };
        if let Some(op) = timed_op(&store, data) {
            // Outside the model's locks: an operation on one device delays no other.
            crate::latency::pause(op);
        }
        let outcome = self
            .host
            .store()
            .write(|st, hw| apply(st, hw, &store, data, partial));
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SysfsError::errno_of(Op::Write, path, e)),
            Err(e) => Err(Self::sim_err(Op::Write, path, &e)),
        }
    }

    fn read_link(&self, path: &Path) -> Result<PathBuf, SysfsError> {
        let (found, _) = self.access(Op::ReadLink, path, false, |node| match node {
            Node::Link(t) => Ok(Found::Link(PathBuf::from(t))),
            _ => Err(EINVAL),
        })?;
        match found {
            Found::Link(t) => Ok(t),
            _ => Err(SysfsError::errno_of(Op::ReadLink, path, EINVAL)),
        }
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<OsString>, SysfsError> {
        let (found, _) = self.access(Op::ListDir, path, true, |node| match node {
            Node::Dir(names) => Ok(Found::Names(names.iter().map(OsString::from).collect())),
            _ => Err(ENOTDIR),
        })?;
        match found {
            Found::Names(n) => Ok(n),
            _ => Err(SysfsError::errno_of(Op::ListDir, path, ENOTDIR)),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        let Some(text) = path.to_str() else {
            return false;
        };
        if check_host_path(Op::Read, path).is_err() {
            return false;
        }
        self.host
            .store()
            .read(|v| resolve(&v.tree(), text, true).is_ok())
            .unwrap_or(false)
    }
}

/// The device operation a write is, for the latency model: a VF enable (a non-zero
/// `sriov_numvfs`), a vGPU type write, a bind to vfio-pci.
fn timed_op(store: &Store, data: &[u8]) -> Option<crate::latency::DeviceOp> {
    use crate::latency::DeviceOp;
    let text = String::from_utf8_lossy(data);
    match store {
        Store::SriovNumvfs(_) if text.trim() != "0" => Some(DeviceOp::VfEnable),
        Store::VgpuType(_) => Some(DeviceOp::VgpuTypeWrite),
        Store::Bind(driver) if driver == "vfio-pci" => Some(DeviceOp::VfioBind),
        _ => None,
    }
}

/// Runs the kernel's store handler for an attribute.
fn apply(
    st: &mut crate::state::State,
    hw: &crate::state::Hw,
    store: &Store,
    data: &[u8],
    partial: Option<u32>,
) -> Result<(), i32> {
    match store {
        Store::DriverOverride(a) => kernel::write_driver_override(st, *a, data),
        Store::SriovNumvfs(a) => kernel::write_sriov_numvfs(st, hw, *a, data, partial),
        Store::Bind(d) => kernel::write_bind(st, hw, d, data),
        Store::Unbind(d) => kernel::write_unbind(st, hw, d, data),
        Store::DriversProbe => kernel::write_drivers_probe(st, hw, data),
        Store::MdevCreate(parent, ty) => kernel::write_mdev_create(st, hw, parent, ty, data),
        Store::MdevRemove(uuid) => kernel::write_mdev_remove(st, *uuid, data),
        Store::VgpuType(vf) => kernel::write_current_vgpu_type(st, *vf, data),
        Store::Partition(gpu, axis) => kernel::write_partition(st, *gpu, *axis, data),
        Store::GimMemoryMode(gpu) => crate::gim::write_memory_partition_mode(st, *gpu, data),
        Store::UnbindLock(gpu) => kernel::write_unbind_lock(st, *gpu, data),
        Store::Reset(gpu) => kernel::write_reset(st, *gpu, data),
        Store::Remove(addr) => crate::pci_hotplug::write_remove(st, hw, *addr, data),
        Store::Rescan => crate::pci_hotplug::write_rescan(st, hw, data),
    }
}
