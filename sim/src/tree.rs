//! The sysfs (and `/dev/vfio`, `/proc`) view of the model, rendered as a tree of nodes.
//!
//! The tree is rebuilt whenever the state changes and cached until the next change; reads
//! resolve paths in it, writes find the store handler ([`Store`]) of the attribute and apply the
//! kernel's rule to the state. Paths and formats are those of `docs/sysfs.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use ids::{MdevParentName, MdevTypeId, MdevUuid, PciAddress};

use crate::gim;
use crate::kernel::{self, PartitionAxis};
use crate::mdev;
use crate::state::{AMDGPU, Hw, HwDev, NVIDIA, State};
use crate::util::{format_cpulist, relative_link};

/// What a write to an attribute does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Store {
    DriverOverride(PciAddress),
    SriovNumvfs(PciAddress),
    Bind(String),
    Unbind(String),
    DriversProbe,
    MdevCreate(MdevParentName, MdevTypeId),
    MdevRemove(MdevUuid),
    VgpuType(PciAddress),
    Partition(PciAddress, PartitionAxis),
    /// GIM's `<pf>/memory_partition_mode`.
    GimMemoryMode(PciAddress),
    /// `/proc/driver/nvidia/gpus/<bdf>/unbindLock`.
    UnbindLock(PciAddress),
    /// `<bdf>/reset`: PCI function reset.
    Reset(PciAddress),
    /// `<dev>/remove`.
    Remove(PciAddress),
    /// `/sys/bus/pci/rescan`.
    Rescan,
}

/// One node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Dir(BTreeSet<String>),
    /// An attribute: contents when readable, store handler when writable.
    Attr {
        content: Option<String>,
        store: Option<Store>,
    },
    /// A symbolic link with its relative target.
    Link(String),
    /// A character device (`/dev/vfio/<n>`).
    CharDev,
    /// A read-only attribute whose read the driver fails with this errno for now.
    Unreadable(i32),
}

/// The rendered tree, keyed by absolute path.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    nodes: HashMap<String, Node>,
    /// Paths already resolved in this tree (it never changes once rendered: a change renders a
    /// new one), with whether the last link was followed: a caller reads the same few hundred
    /// paths again and again, and walking one component by component was a quarter of the
    /// simulator's cost per call.
    resolved: Mutex<HashMap<(String, bool), Result<String, i32>>>,
}

/// The most resolutions kept per tree; past it paths are walked every time.
const MAX_RESOLVED: usize = 8192;

fn parent_of(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

impl Tree {
    pub(crate) fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The canonical path `walk` resolves `path` to, walked once per tree.
    pub(crate) fn resolved(
        &self,
        path: &str,
        follow_last: bool,
        walk: impl FnOnce() -> Result<String, i32>,
    ) -> Result<String, i32> {
        let key = (path.to_owned(), follow_last);
        let memo = || self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = memo().get(&key) {
            return found.clone();
        }
        let found = walk();
        let mut kept = memo();
        if kept.len() < MAX_RESOLVED {
            kept.insert(key, found.clone());
        }
        found
    }

    fn dir(&mut self, path: &str) {
        if path == "/" {
            self.nodes
                .entry("/".to_owned())
                .or_insert_with(|| Node::Dir(BTreeSet::new()));
            return;
        }
        if matches!(self.nodes.get(path), Some(Node::Dir(_))) {
            return;
        }
        self.insert(path, Node::Dir(BTreeSet::new()));
    }

    fn insert(&mut self, path: &str, node: Node) {
        let (parent, name) = parent_of(path);
        self.dir(parent);
        if let Some(Node::Dir(names)) = self.nodes.get_mut(parent) {
            names.insert(name.to_owned());
        }
        self.nodes.insert(path.to_owned(), node);
    }

    fn ro(&mut self, path: &str, content: impl Into<String>) {
        self.insert(
            path,
            Node::Attr {
                content: Some(content.into()),
                store: None,
            },
        );
    }

    fn rw(&mut self, path: &str, content: impl Into<String>, store: Store) {
        self.insert(
            path,
            Node::Attr {
                content: Some(content.into()),
                store: Some(store),
            },
        );
    }

    fn wo(&mut self, path: &str, store: Store) {
        self.insert(
            path,
            Node::Attr {
                content: None,
                store: Some(store),
            },
        );
    }

    /// A link at `path` to the absolute `target`, stored relative like the kernel's.
    fn link(&mut self, path: &str, target: &str) {
        self.insert(path, Node::Link(relative_link(path, target)));
    }
}

/// Renders the whole tree.
pub(crate) fn render(state: &State, hw: &Hw) -> Tree {
    let mut t = Tree::default();
    t.dir("/");
    render_system(&mut t, state, hw);
    let dirs = device_dirs(state, hw);
    let listings = creatable_listings(state);
    for (addr, dir) in &dirs {
        render_device(&mut t, state, hw, *addr, dir, &dirs, &listings);
    }
    render_drivers(&mut t, state, hw, &dirs);
    render_groups(&mut t, state, hw, &dirs);
    render_mdev(&mut t, state, hw, &dirs);
    t
}

fn render_system(t: &mut Tree, state: &State, hw: &Hw) {
    let ids: BTreeSet<u32> = hw.nodes.iter().map(|n| u32::from(n.id)).collect();
    let online = format_cpulist(&ids);
    t.ro("/sys/devices/system/node/online", format!("{online}\n"));
    t.ro("/sys/devices/system/node/possible", format!("{online}\n"));
    let with_cpu: BTreeSet<u32> = hw
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| u32::from(n.id))
        .collect();
    t.ro(
        "/sys/devices/system/node/has_cpu",
        format!("{}\n", format_cpulist(&with_cpu)),
    );
    t.ro("/sys/devices/system/node/has_memory", format!("{online}\n"));
    for n in &hw.nodes {
        let dir = format!("/sys/devices/system/node/node{}", n.id);
        t.ro(
            &format!("{dir}/cpulist"),
            format!("{}\n", format_cpulist(&n.cpus)),
        );
        let dist: Vec<String> = n.distances.iter().map(u32::to_string).collect();
        t.ro(&format!("{dir}/distance"), format!("{}\n", dist.join(" ")));
        t.ro(
            &format!("{dir}/meminfo"),
            node_meminfo(n.id, n.memory_mib, n.memory_free_mib),
        );
    }
    let cpus = hw.all_cpus();
    t.ro(
        "/sys/devices/system/cpu/online",
        format!("{}\n", format_cpulist(&cpus)),
    );
    t.ro(
        "/sys/devices/system/cpu/possible",
        format!("{}\n", format_cpulist(&cpus)),
    );
    let total: u64 = hw.nodes.iter().map(|n| n.memory_mib).sum();
    let free: u64 = hw.nodes.iter().map(|n| n.memory_free_mib).sum();
    t.ro(
        "/proc/meminfo",
        format!(
            "MemTotal:       {:>10} kB\nMemFree:        {:>10} kB\nMemAvailable:   {:>10} kB\n",
            total * 1024,
            free * 1024,
            free * 1024
        ),
    );
    t.ro(
        "/proc/sys/kernel/hostname",
        format!("{}\n", state.profile.hostname),
    );
}

fn node_meminfo(id: u16, total_mib: u64, free_mib: u64) -> String {
    let (total, free) = (total_mib * 1024, free_mib * 1024);
    format!(
        "Node {id} MemTotal:       {total:>10} kB\nNode {id} MemFree:        {free:>10} kB\nNode {id} MemUsed:        {:>10} kB\n",
        total - free.min(total)
    )
}

/// The sysfs directory of every present function; a VF sits next to its PF.
pub(crate) fn device_dirs(state: &State, hw: &Hw) -> BTreeMap<PciAddress, String> {
    let mut dirs = BTreeMap::new();
    for (addr, p) in &state.pci {
        let dir = match &p.vf {
            None => hw.devices.get(addr).map(|d| d.dir.clone()),
            Some(vf) => hw.devices.get(&vf.pf).map(|d| {
                let (parent, _) = parent_of(&d.dir);
                format!("{parent}/{addr}")
            }),
        };
        if let Some(dir) = dir {
            dirs.insert(*addr, dir);
        }
    }
    dirs
}

/// The hardware description of a function: its own, or its PF's adjusted for a VF.
fn identity(state: &State, hw: &Hw, addr: PciAddress) -> Option<HwDev> {
    let p = state.pci.get(&addr)?;
    match &p.vf {
        None => hw.devices.get(&addr).cloned(),
        Some(vf) => {
            let mut d = hw.devices.get(&vf.pf)?.clone();
            let sriov = state.profile.sriov_of(vf.pf)?;
            d.device = sriov.vf_device.unwrap_or(d.device);
            Some(d)
        }
    }
}

/// What the tree shows of the GPUs' MIG GPU and compute instances, and nothing else: the
/// creatable vGPU types of each GPU's VFs and the instance each MIG-backed vGPU sits in (the
/// only parts of [`render`] that read instances). A change of instances alone that leaves
/// this equal leaves the rendered tree as it was (`Store`'s instance changes keep it).
pub(crate) fn instances_shown(state: &State) -> impl PartialEq + use<> {
    let in_vgpus: Vec<(PciAddress, Option<(u32, u32)>)> = (state.pci.iter())
        .filter_map(|(addr, p)| Some((*addr, kernel::vgpu_gpu_instance(state, p.vf.as_ref()?))))
        .collect();
    (creatable_listings(state), in_vgpus)
}

/// `creatable_vgpu_types` of an untyped VF, per PF: the same for every VF of a GPU.
fn creatable_listings(state: &State) -> BTreeMap<PciAddress, String> {
    let mut out = BTreeMap::new();
    for g in &state.profile.gpus {
        let Some(model) = state
            .profile
            .model_of(g)
            .filter(|m| !m.vgpu_types.is_empty())
        else {
            continue;
        };
        // Real drivers (vGPU 17+) print a header line before the types.
        let mut listing = String::from("ID    : vGPU Name\n");
        for ty in kernel::creatable_vgpu_types(state, model, g.address) {
            listing.push_str(&format!("{:<5} : {}\n", ty.id, ty.name));
        }
        out.insert(g.address, listing);
    }
    out
}

fn render_device(
    t: &mut Tree,
    state: &State,
    hw: &Hw,
    addr: PciAddress,
    dir: &str,
    dirs: &BTreeMap<PciAddress, String>,
    listings: &BTreeMap<PciAddress, String>,
) {
    let (Some(p), Some(id)) = (state.pci.get(&addr), identity(state, hw, addr)) else {
        return;
    };
    t.link(&format!("/sys/bus/pci/devices/{addr}"), dir);
    let f = |name: &str| format!("{dir}/{name}");
    t.ro(&f("vendor"), format!("0x{}\n", id.vendor));
    t.ro(&f("device"), format!("0x{}\n", id.device));
    t.ro(
        &f("subsystem_vendor"),
        format!("0x{}\n", id.subsystem_vendor),
    );
    t.ro(
        &f("subsystem_device"),
        format!("0x{}\n", id.subsystem_device),
    );
    t.ro(&f("class"), format!("0x{:06x}\n", id.class));
    t.ro(&f("numa_node"), format!("{}\n", id.numa_node));
    let near = u16::try_from(id.numa_node).ok();
    t.ro(
        &f("local_cpulist"),
        format!("{}\n", format_cpulist(&hw.cpus_near(near))),
    );
    for (name, value) in [
        ("current_link_speed", &id.link_speed),
        ("max_link_speed", &id.link_speed),
    ] {
        t.ro(&f(name), format!("{value}\n"));
    }
    t.ro(&f("current_link_width"), format!("{}\n", id.link_width));
    t.ro(&f("max_link_width"), format!("{}\n", id.link_width));
    let shown = p
        .driver_override
        .clone()
        .unwrap_or_else(|| "(null)".to_owned());
    t.rw(
        &f("driver_override"),
        format!("{shown}\n"),
        Store::DriverOverride(addr),
    );
    if let Some(d) = &p.driver {
        t.link(&f("driver"), &format!("/sys/bus/pci/drivers/{d}"));
    }
    t.link(
        &f("iommu_group"),
        &format!("/sys/kernel/iommu_groups/{}", p.iommu_group),
    );
    match &p.vf {
        Some(vf) => {
            if let Some(pf_dir) = dirs.get(&vf.pf) {
                t.link(&f("physfn"), pf_dir);
            }
            render_vendor_vfio(t, state, addr, dir, listings);
        }
        None => {
            // A VF's `remove` is not modelled (its PF's `sriov_numvfs` owns its life).
            t.wo(&f("remove"), Store::Remove(addr));
            render_pf_extras(t, state, hw, addr, dir, dirs);
        }
    }
}

fn render_pf_extras(
    t: &mut Tree,
    state: &State,
    hw: &Hw,
    addr: PciAddress,
    dir: &str,
    dirs: &BTreeMap<PciAddress, String>,
) {
    // Write-only (0200), present where the function can be reset (Documentation/ABI/testing/
    // sysfs-bus-pci, "reset"): every GPU of the profiles can.
    if state.gpus.contains_key(&addr) {
        t.wo(&format!("{dir}/reset"), Store::Reset(addr));
    }
    if let Some(s) = state.profile.sriov_of(addr) {
        let pf_device = hw.devices.get(&addr).map(|d| d.device);
        let vfs = state.vfs_of(addr);
        t.ro(
            &format!("{dir}/sriov_totalvfs"),
            format!("{}\n", s.total_vfs),
        );
        t.rw(
            &format!("{dir}/sriov_numvfs"),
            format!("{}\n", vfs.len()),
            Store::SriovNumvfs(addr),
        );
        t.ro(&format!("{dir}/sriov_offset"), format!("{}\n", s.offset));
        t.ro(&format!("{dir}/sriov_stride"), format!("{}\n", s.stride));
        t.ro(
            &format!("{dir}/sriov_vf_device"),
            format!(
                "{}\n",
                s.vf_device.or(pf_device).unwrap_or(ids::PciDeviceId(0))
            ),
        );
        t.ro(&format!("{dir}/sriov_drivers_autoprobe"), "1\n");
        for (vf_addr, vf) in &vfs {
            let (Some(target), Some(v)) = (dirs.get(vf_addr), vf.vf.as_ref()) else {
                continue;
            };
            t.link(&format!("{dir}/virtfn{}", v.index), target);
        }
    }
    let Some((_, model)) = state.gpu(addr) else {
        return;
    };
    render_nvidia_proc(t, state, addr);
    // amdgpu's attributes (amdgpu_gfx.c, amdgpu_gmc.c, amdgpu_xgmi.c); GIM has none of them.
    let on_amdgpu = state.pci.get(&addr).and_then(|p| p.driver.as_deref()) == Some(AMDGPU);
    if let (Some(hive), true) = (state.gpu(addr).and_then(|(s, _)| s.xgmi_hive), on_amdgpu) {
        t.ro(
            &format!("{dir}/xgmi_hive_info/xgmi_hive_id"),
            format!("{hive}\n"),
        );
    }
    if let (Some(_), Some(g), true) = (&model.amd, state.gpus.get(&addr), gim::on_gim(state, addr))
    {
        let mode = g.memory_partition.clone().unwrap_or_default();
        t.rw(
            &format!("{dir}/memory_partition_mode"),
            format!("memory_partition_mode: {mode}\n"),
            Store::GimMemoryMode(addr),
        );
    }
    if let (Some(amd), Some(g)) = (&model.amd, state.gpus.get(&addr))
        && on_amdgpu
    {
        let current = g.compute_partition.clone().unwrap_or_default();
        t.rw(
            &format!("{dir}/current_compute_partition"),
            format!("{current}\n"),
            Store::Partition(addr, PartitionAxis::Compute),
        );
        t.ro(
            &format!("{dir}/available_compute_partition"),
            format!("{}\n", amd.compute_modes.join(", ")),
        );
        let current = g.memory_partition.clone().unwrap_or_default();
        t.rw(
            &format!("{dir}/current_memory_partition"),
            format!("{current}\n"),
            Store::Partition(addr, PartitionAxis::Memory),
        );
        t.ro(
            &format!("{dir}/available_memory_partition"),
            format!("{}\n", amd.memory_modes.join(", ")),
        );
    }
}

/// `/proc/driver/nvidia/gpus/<bdf>/`: the NVIDIA driver's entry for each GPU it has bound;
/// `unbindLock` reads `1` while the lock is held. (The real entry also has `information`,
/// `registry` and `power`, which vgpud does not read.)
fn render_nvidia_proc(t: &mut Tree, state: &State, addr: PciAddress) {
    let bound = state.pci.get(&addr).and_then(|p| p.driver.as_deref()) == Some(NVIDIA);
    let Some(g) = state.gpus.get(&addr).filter(|_| bound) else {
        return;
    };
    t.rw(
        &format!("/proc/driver/nvidia/gpus/{addr}/unbindLock"),
        format!("{}\n", u8::from(g.unbind_lock)),
        Store::UnbindLock(addr),
    );
}

/// `<vf>/nvidia/`: present while the VF is bound to the NVIDIA driver of a vGPU-capable GPU.
fn render_vendor_vfio(
    t: &mut Tree,
    state: &State,
    addr: PciAddress,
    dir: &str,
    listings: &BTreeMap<PciAddress, String>,
) {
    let Some(p) = state.pci.get(&addr) else {
        return;
    };
    let Some(vf) = &p.vf else { return };
    let Some((_, model)) = state.gpu(vf.pf) else {
        return;
    };
    let vf_driver = model.sriov.as_ref().and_then(|s| s.vf_driver.as_deref());
    if model.vgpu_types.is_empty() || p.driver.is_none() || p.driver.as_deref() != vf_driver {
        return;
    }
    // A VF that already has a vGPU lists nothing: its type can only be destroyed.
    let listing = match vf.vgpu_type {
        None => listings.get(&vf.pf).cloned().unwrap_or_default(),
        Some(_) => String::from("ID    : vGPU Name\n"),
    };
    t.ro(&format!("{dir}/nvidia/creatable_vgpu_types"), listing);
    let current = vf.vgpu_type.unwrap_or(0);
    t.rw(
        &format!("{dir}/nvidia/current_vgpu_type"),
        format!("{current}\n"),
        Store::VgpuType(addr),
    );
    render_vgpu_gpu_instance(t, state, dir, vf);
}

/// `nvidia/gpu_instance_id` and `nvidia/placement_id`: ENXIO until the VF has a MIG-backed
/// vGPU, then the GPU instance the driver put it in (see [`kernel::vgpu_gpu_instance`]).
fn render_vgpu_gpu_instance(t: &mut Tree, state: &State, dir: &str, vf: &crate::state::VfState) {
    for (name, value) in [
        (
            "gpu_instance_id",
            kernel::vgpu_gpu_instance(state, vf).map(|(id, _)| id),
        ),
        (
            "placement_id",
            kernel::vgpu_gpu_instance(state, vf).map(|(_, start)| start),
        ),
    ] {
        let path = format!("{dir}/nvidia/{name}");
        match value {
            Some(v) => t.ro(&path, format!("{v}\n")),
            None => t.insert(&path, Node::Unreadable(libc::ENXIO)),
        }
    }
}

fn render_drivers(t: &mut Tree, state: &State, hw: &Hw, dirs: &BTreeMap<PciAddress, String>) {
    t.wo("/sys/bus/pci/drivers_probe", Store::DriversProbe);
    t.wo("/sys/bus/pci/rescan", Store::Rescan);
    t.ro("/sys/bus/pci/drivers_autoprobe", "1\n");
    for d in state.drivers(hw) {
        let base = format!("/sys/bus/pci/drivers/{d}");
        t.wo(&format!("{base}/bind"), Store::Bind(d.clone()));
        t.wo(&format!("{base}/unbind"), Store::Unbind(d.clone()));
    }
    for (addr, p) in &state.pci {
        if let (Some(d), Some(dir)) = (&p.driver, dirs.get(addr)) {
            t.link(&format!("/sys/bus/pci/drivers/{d}/{addr}"), dir);
        }
    }
}

fn render_groups(t: &mut Tree, state: &State, hw: &Hw, dirs: &BTreeMap<PciAddress, String>) {
    for (addr, p) in &state.pci {
        let Some(dir) = dirs.get(addr) else { continue };
        let g = format!("/sys/kernel/iommu_groups/{}", p.iommu_group);
        t.link(&format!("{g}/devices/{addr}"), dir);
        t.ro(&format!("{g}/type"), "DMA\n");
    }
    for (uuid, m) in &state.mdevs {
        let Some(parent) = parent_dir(state, dirs, &m.parent) else {
            continue;
        };
        let g = format!("/sys/kernel/iommu_groups/{}", m.iommu_group);
        t.link(&format!("{g}/devices/{uuid}"), &format!("{parent}/{uuid}"));
        t.ro(&format!("{g}/type"), "DMA\n");
    }
    let _ = hw;
    t.insert("/dev/vfio/vfio", Node::CharDev);
    for g in state.vfio_groups() {
        t.insert(&format!("/dev/vfio/{g}"), Node::CharDev);
    }
}

/// The directory of an mdev parent: its PCI function's, or its virtual device's.
pub(crate) fn parent_dir(
    state: &State,
    dirs: &BTreeMap<PciAddress, String>,
    name: &MdevParentName,
) -> Option<String> {
    match name.pci_address() {
        Some(addr) => dirs.get(&addr).cloned(),
        None => state
            .profile
            .mdev_parents
            .iter()
            .find(|p| &p.name == name)
            .and_then(|p| p.virtual_dir()),
    }
}

fn render_mdev(t: &mut Tree, state: &State, hw: &Hw, dirs: &BTreeMap<PciAddress, String>) {
    let mdev_capable = !state.profile.mdev_parents.is_empty()
        || state
            .profile
            .models
            .values()
            .any(|m| !m.mdev_types.is_empty());
    if !mdev_capable {
        return;
    }
    t.dir("/sys/class/mdev_bus");
    t.dir("/sys/bus/mdev/devices");
    for name in state.mdev_parents(hw) {
        let (Some(dir), Some(parent)) =
            (parent_dir(state, dirs, &name), mdev::parent(state, &name))
        else {
            continue;
        };
        t.link(&format!("/sys/class/mdev_bus/{name}"), &dir);
        for ty in parent.types() {
            let tdir = format!("{dir}/mdev_supported_types/{}", ty.id);
            t.ro(&format!("{tdir}/name"), format!("{}\n", ty.name));
            if let Some(d) = &ty.description {
                t.ro(&format!("{tdir}/description"), format!("{d}\n"));
            }
            t.ro(
                &format!("{tdir}/device_api"),
                format!("{}\n", ty.device_api),
            );
            let avail = mdev::available(state, &name, &ty.id);
            t.ro(&format!("{tdir}/available_instances"), format!("{avail}\n"));
            t.wo(
                &format!("{tdir}/create"),
                Store::MdevCreate(name.clone(), ty.id.clone()),
            );
            t.dir(&format!("{tdir}/devices"));
        }
    }
    for (uuid, m) in &state.mdevs {
        let Some(parent_dir) = parent_dir(state, dirs, &m.parent) else {
            continue;
        };
        let mdir = format!("{parent_dir}/{uuid}");
        let tdir = format!("{parent_dir}/mdev_supported_types/{}", m.type_id);
        t.link(&format!("{mdir}/mdev_type"), &tdir);
        t.link(
            &format!("{mdir}/iommu_group"),
            &format!("/sys/kernel/iommu_groups/{}", m.iommu_group),
        );
        t.wo(&format!("{mdir}/remove"), Store::MdevRemove(*uuid));
        t.link(&format!("{tdir}/devices/{uuid}"), &mdir);
        t.link(&format!("/sys/bus/mdev/devices/{uuid}"), &mdir);
    }
}
