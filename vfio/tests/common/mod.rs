//! Fixture hosts for the vfio tests: PCI trees laid out as the kernel lays them out, and a
//! probe (`sysfs::fixture::Probe`) around the fixture's sysfs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub use sysfs::fixture::TempHost as Host;

/// PCI functions, bridges and SR-IOV on a fixture host.
pub trait PciHost: Sized {
    /// A host with a PCI bus and no devices yet.
    fn empty() -> Self;
    /// A PCI function at `/sys/devices/<path>` (e.g. `pci0000:40/0000:40:01.1/0000:41:00.0`),
    /// linked from `/sys/bus/pci/devices`, with vendor, device, class and the usual attributes.
    fn pci(&self, path: &str, vendor: &str, device: &str, class: &str) -> Dev<'_>;
    /// A PCIe root port / bridge at `/sys/devices/<path>` on NUMA node `numa`.
    fn bridge(&self, path: &str, numa: &str) -> Dev<'_>;
    /// A 2-socket host: root port 0000:40:01.1 (firmware says node 1) with an NVIDIA H200 at
    /// 0000:41:00.0 whose own `numa_node` is -1, bound to `nvidia`, IOMMU group 40; and an
    /// Intel NIC at 0000:00:1f.6 on node 0, unbound, group 12.
    fn two_socket() -> Self;
    /// [`PciHost::two_socket`] with the H200 an SR-IOV PF of 16 VFs, none enabled.
    fn two_socket_sriov() -> Self;
}

impl PciHost for Host {
    fn empty() -> Self {
        let host = Host::new();
        host.tree.file("/sys/bus/pci/drivers_probe", "");
        host
    }

    fn pci(&self, path: &str, vendor: &str, device: &str, class: &str) -> Dev<'_> {
        let sys = format!("/sys/devices/{path}");
        let addr = path.rsplit('/').next().unwrap().to_owned();
        let dev = Dev {
            host: self,
            sys,
            addr,
        };
        self.link(&format!("/sys/bus/pci/devices/{}", dev.addr), &dev.sys);
        dev.attr("vendor", vendor)
            .attr("device", device)
            .attr("class", class)
            .attr("subsystem_vendor", vendor)
            .attr("subsystem_device", "0x1234")
            .attr("driver_override", "(null)")
            .attr("numa_node", "-1")
            .attr("remove", "");
        dev
    }

    fn bridge(&self, path: &str, numa: &str) -> Dev<'_> {
        let dev = self.pci(path, "0x1022", "0x1483", "0x060400");
        dev.attr("numa_node", numa).driver("pcieport");
        dev
    }

    fn two_socket() -> Self {
        let host = Self::empty();
        host.bridge("pci0000:40/0000:40:01.1", "1").iommu_group(40);
        host.pci(
            "pci0000:40/0000:40:01.1/0000:41:00.0",
            "0x10de",
            "0x2335",
            "0x030200",
        )
        .driver("nvidia")
        .iommu_group(40)
        .attr("local_cpulist", "32-63,96-127")
        .link_attrs("32.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16");
        host.pci("pci0000:00/0000:00:1f.6", "0x8086", "0x15fa", "0x020000")
            .attr("numa_node", "0")
            .iommu_group(12);
        host
    }

    fn two_socket_sriov() -> Self {
        let host = Self::two_socket();
        host.pci(
            "pci0000:40/0000:40:01.1/0000:41:00.0",
            "0x10de",
            "0x2335",
            "0x030200",
        )
        .sriov(16, &[]);
        host
    }
}

/// A PCI function of a fixture host.
pub struct Dev<'a> {
    pub host: &'a Host,
    /// `/sys/devices/...`
    pub sys: String,
    pub addr: String,
}

impl Dev<'_> {
    pub fn attr(&self, name: &str, value: &str) -> &Self {
        self.host
            .tree
            .file(&format!("{}/{name}", self.sys), &format!("{value}\n"));
        self
    }

    pub fn no_attr(&self, name: &str) -> &Self {
        let path = self
            .host
            .dir
            .path()
            .join(format!("{}/{name}", self.sys).trim_start_matches('/'));
        let _ = std::fs::remove_file(path);
        self
    }

    /// Binds to `driver` (link into `/sys/bus/pci/drivers/<driver>` with bind/unbind files).
    pub fn driver(&self, driver: &str) -> &Self {
        let drv = format!("/sys/bus/pci/drivers/{driver}");
        self.host.tree.file(&format!("{drv}/bind"), "");
        self.host.tree.file(&format!("{drv}/unbind"), "");
        self.host.link(&format!("{}/driver", self.sys), &drv);
        self.host.link(&format!("{drv}/{}", self.addr), &self.sys);
        self
    }

    pub fn iommu_group(&self, n: u32) -> &Self {
        let group = format!("/sys/kernel/iommu_groups/{n}");
        self.host.tree.dir(&format!("{group}/devices"));
        self.host.link(&format!("{}/iommu_group", self.sys), &group);
        self.host
            .link(&format!("{group}/devices/{}", self.addr), &self.sys);
        self
    }

    pub fn link_attrs(&self, speed: &str, width: &str, max_speed: &str, max_width: &str) -> &Self {
        self.attr("current_link_speed", speed)
            .attr("current_link_width", width)
            .attr("max_link_speed", max_speed)
            .attr("max_link_width", max_width)
    }

    /// Makes this function an SR-IOV PF with `total` VFs, of which `vfs` (sibling addresses
    /// under the same parent) are enabled and linked both ways, in the given order.
    pub fn sriov(&self, total: u32, vfs: &[&str]) -> &Self {
        self.attr("sriov_totalvfs", &total.to_string());
        self.attr("sriov_numvfs", &vfs.len().to_string());
        let parent = self.sys.rsplit_once('/').unwrap().0;
        for (i, vf) in vfs.iter().enumerate() {
            let vf_sys = format!("{parent}/{vf}");
            let vf_path = vf_sys.strip_prefix("/sys/devices/").unwrap();
            let dev = self.host.pci(vf_path, "0x10de", "0x2336", "0x030200");
            self.host.link(&format!("{}/virtfn{i}", self.sys), &vf_sys);
            self.host.link(&format!("{}/physfn", dev.sys), &self.sys);
        }
        self
    }
}
