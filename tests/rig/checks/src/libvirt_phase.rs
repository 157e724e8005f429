//! Issue 7 on a real libvirtd: `vmpin` hot-attaches an mdev and a VF to a running nested guest,
//! pins it to NUMA node 1 and releases it again, then gives a stopped guest slices on both nodes
//! with guest NUMA cells and `pcie-expander-bus` controllers and starts it.
//!
//! Runs inside the rig's guest, chrooted into a writable copy of the host's root where
//! `tests/rig/guest-libvirt` configured libvirt (QEMU as `libvirt-qemu`, no namespaces). It
//! starts `virtlogd` and `libvirtd` itself (and restarts libvirtd once, to prove `vmpin`
//! reconnects and `scan()` finds its records). The nested guest is `tests/rig/nested-guest.c`: it
//! only acknowledges PCI hot-unplug requests, so hot-detach completes without an operating system
//! (a Linux guest boots for minutes under nested emulation).
//!
//! Everything is checked from outside libvirt where the kernel can tell: the QEMU threads'
//! `Cpus_allowed_list`, the process's `Mems_allowed_list`, its memory policies in `numa_maps`
//! and its command line.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ids::{MdevParentName, MdevTypeId, MdevUuid, NumaNodeId, PciAddress};
use numa::CpuSet;
use sysfs::Sysfs;
use vmpin::xml::{Document, Element};
use vmpin::{
    HostTopology, Hypervisor, NumaAccounting, PinPlan, PinRequest, PlanOptions, Policy, Slice,
    SliceDevice, VmpinError,
};

use crate::Report;

const URI: &str = "qemu:///system";
const DOMAIN: &str = "rig-vm";
const LIVE_ALLOCATION: &str = "rig-live";
const EXPANDER_ALLOCATION: &str = "rig-live-expander";
const TWO_NODE_ALLOCATION: &str = "rig-two-nodes";
const VM_VCPUS: u32 = 2;
const VM_MEMORY_KIB: u64 = 96 * 1024;
const IMAGES: &str = "/var/lib/libvirt/images";
const SERIAL_LOG: &str = "/var/log/libvirt/qemu/rig-vm.serial";
const QEMU_PIDFILE: &str = "/run/libvirt/qemu/rig-vm.pid";
const LIBVIRTD_PIDFILE: &str = "/run/libvirtd.pid";
const SOCKET: &str = "/run/libvirt/libvirt-sock";
/// What the nested guest prints once it serves unplug requests.
const GUEST_READY: &str = "serving PCI hot-unplug requests";
/// What `Hypervisor::release` reports for a running domain whose memory was bound (docs/pinning.md).
const MEMORY_STAYS: &str = "the memory binding is lifted at the next start";
const EXPANDER_LATER: &str = "expander buses take effect at the next start";
const EXPANDER_STAYS: &str = "expander buses are removed at the next start";

/// The devices the phase hands to the guest.
struct Devices {
    mdev: MdevUuid,
    vf: PciAddress,
    vf_driver: Option<String>,
    pf: PciAddress,
}

/// One run of the phase: the transcript clock and the report.
struct Phase<'a> {
    t0: Instant,
    fs: &'a dyn Sysfs,
    r: &'a mut Report,
}

impl Phase<'_> {
    /// A transcript line, stamped with the time since the phase began.
    fn say(&self, what: impl AsRef<str>) {
        println!(
            "libvirt: [+{:.1}s] {}",
            self.t0.elapsed().as_secs_f64(),
            what.as_ref()
        );
    }

    fn check(&mut self, name: &str, passed: bool, detail: impl Into<String>) {
        let detail = detail.into();
        self.say(format!(
            "{} {name}: {detail}",
            if passed { "PASS" } else { "FAIL" }
        ));
        self.r.check(name, passed, detail);
    }
}

/// Runs the phase; `nested_kernel` is the nested guest's multiboot image.
pub fn run(fs: &dyn Sysfs, nested_kernel: &Path, r: &mut Report) -> anyhow::Result<()> {
    let mut p = Phase {
        t0: Instant::now(),
        fs,
        r,
    };
    start_daemons(&p)?;
    let hv = wait_for_libvirt(&p)?;
    let topology = host_topology(&mut p, &hv)?;
    let image = Path::new(IMAGES).join("nested-guest.elf");
    std::fs::create_dir_all(IMAGES)?;
    std::fs::copy(nested_kernel, &image)
        .with_context(|| format!("copying {}", nested_kernel.display()))?;
    hv.define(&domain_xml(&image))?;
    let original = hv.domain_xml(DOMAIN, true)?;
    p.say(format!(
        "defined {DOMAIN}: {VM_VCPUS} vCPUs, {} MiB, q35, TCG",
        VM_MEMORY_KIB / 1024
    ));
    start_domain(&mut p, &hv)?;
    let devices = make_devices(&mut p)?;
    let outcome = live_allocation(&mut p, &hv, &topology, &devices, &original)
        .and_then(|()| live_expander_allocation(&mut p, &hv, &topology, &devices, &original))
        .and_then(|()| two_node_allocation(&mut p, &hv, &topology, &devices, &original));
    if let Err(e) = &outcome {
        p.check("libvirt phase ran to the end", false, format!("{e:#}"));
    }
    let _ = hv.destroy(DOMAIN);
    cleanup(&mut p, &devices);
    Ok(())
}

fn start_daemons(p: &Phase) -> anyhow::Result<()> {
    for daemon in ["virtlogd", "libvirtd"] {
        let status = Command::new(daemon)
            .arg("-d")
            .status()
            .with_context(|| format!("starting {daemon}"))?;
        if !status.success() {
            bail!("{daemon} -d exited with {status}");
        }
    }
    p.say("virtlogd and libvirtd started (libvirtd -d, no systemd)");
    Ok(())
}

/// Opens `qemu:///system`, waiting for a (re)started libvirtd to answer.
fn wait_for_libvirt(p: &Phase) -> anyhow::Result<Hypervisor> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match Hypervisor::open(URI) {
            Ok(hv) => {
                p.say(format!("connected to {URI}"));
                return Ok(hv);
            }
            Err(e) if Instant::now() > deadline => {
                return Err(e).context("libvirtd never answered");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// libvirt's NUMA cells must be the kernel's: the planner trusts them.
fn host_topology(p: &mut Phase, hv: &Hypervisor) -> anyhow::Result<HostTopology> {
    let from_libvirt = hv
        .host_topology()?
        .context("libvirt's capabilities have no NUMA cells")?;
    let (nodes, _) = numa::nodes(p.fs)?;
    let cells: Vec<String> = from_libvirt
        .nodes
        .iter()
        .map(|n| format!("node {}: CPUs {}, {} MiB", n.id, n.cpus, n.memory_mib))
        .collect();
    let same = from_libvirt.nodes.len() == nodes.len()
        && from_libvirt
            .nodes
            .iter()
            .zip(&nodes)
            .all(|(l, k)| l.id == k.id && l.cpus == k.cpus);
    p.check(
        "host_topology() from libvirt's capabilities: the kernel's 2 nodes and their CPUs",
        same && nodes.len() == 2,
        cells.join("; "),
    );
    Ok(from_libvirt)
}

/// The nested guest: no disk, the multiboot image as kernel, two spare root ports for hot-plug.
fn domain_xml(kernel: &Path) -> String {
    let text = |name: &str, value: &str| Element::new(name).with_text(value);
    let root_port = || {
        Element::new("controller")
            .with_attr("type", "pci")
            .with_attr("model", "pcie-root-port")
    };
    let domain = Element::new("domain")
        .with_attr("type", "qemu")
        .with_child(text("name", DOMAIN))
        .with_child(text("memory", &VM_MEMORY_KIB.to_string()).with_attr("unit", "KiB"))
        .with_child(text("vcpu", &VM_VCPUS.to_string()))
        .with_child(
            Element::new("os")
                .with_child(
                    text("type", "hvm")
                        .with_attr("arch", "x86_64")
                        .with_attr("machine", "q35"),
                )
                .with_child(text("kernel", &kernel.to_string_lossy())),
        )
        .with_child(
            // libvirt 9.0 with QEMU 10 needs ACPI; a small translation cache keeps TCG's memory low.
            Element::new("features")
                .with_child(Element::new("acpi"))
                .with_child(
                    Element::new("tcg").with_child(text("tb-cache", "32").with_attr("unit", "MiB")),
                ),
        )
        .with_child(text("on_poweroff", "destroy"))
        .with_child(text("on_reboot", "destroy"))
        .with_child(
            Element::new("devices")
                .with_child(text("emulator", "/usr/bin/qemu-system-x86_64"))
                .with_child(
                    Element::new("controller")
                        .with_attr("type", "usb")
                        .with_attr("model", "none"),
                )
                .with_child(
                    Element::new("controller")
                        .with_attr("type", "pci")
                        .with_attr("model", "pcie-root"),
                )
                .with_child(root_port())
                .with_child(root_port())
                .with_child(
                    Element::new("serial")
                        .with_attr("type", "file")
                        .with_child(Element::new("source").with_attr("path", SERIAL_LOG)),
                )
                .with_child(Element::new("memballoon").with_attr("model", "none")),
        );
    domain.to_xml()
}

fn start_domain(p: &mut Phase, hv: &Hypervisor) -> anyhow::Result<()> {
    hv.start(DOMAIN)?;
    p.say(format!("started {DOMAIN} (QEMU pid {})", qemu_pid()?));
    let ready = wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(SERIAL_LOG).is_ok_and(|s| s.contains(GUEST_READY))
    });
    p.check(
        "the nested guest runs and serves hot-unplug requests",
        ready,
        serial_lines(),
    );
    Ok(())
}

fn serial_lines() -> String {
    std::fs::read_to_string(SERIAL_LOG)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("nested guest:"))
        .map(|l| l.trim_start_matches(|c: char| c != 'n').trim())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// An `mtty-2` mdev and an igb VF on vfio-pci, made with the project's own crates.
fn make_devices(p: &mut Phase) -> anyhow::Result<Devices> {
    let parent: MdevParentName = "mtty".parse()?;
    let ty: MdevTypeId = "mtty-2".parse()?;
    let mdev = MdevUuid::new_random();
    mdev::create(p.fs, &parent, &ty, mdev)?;
    let pf = crate::find_pf(p.fs).context("no SR-IOV PF in the guest")?;
    vfio::set_num_vfs(p.fs, pf, 1)?;
    let vf = vfio::read_device(p.fs, pf)?
        .sriov
        .and_then(|s| s.vfs.first().copied())
        .context("the PF shows no VF after enabling one")?;
    let binding = vfio::bind_to_vfio(p.fs, vf)?;
    p.say(format!(
        "made mdev {mdev} (mtty-2) and VF {vf} on vfio-pci (was {:?})",
        binding.previous_driver
    ));
    Ok(Devices {
        mdev,
        vf,
        vf_driver: binding.previous_driver,
        pf,
    })
}

fn plan(
    hv: &Hypervisor,
    topology: &HostTopology,
    slices: &[Slice],
    options: PlanOptions,
) -> anyhow::Result<PinPlan> {
    let usage = hv.usage()?;
    let accounting = NumaAccounting::for_domain(topology, &usage, DOMAIN);
    let request = PinRequest {
        slices: slices.to_vec(),
        vcpus: VM_VCPUS,
        memory_kib: VM_MEMORY_KIB,
        policy: Policy::Required,
        options,
    };
    accounting
        .plan(&request)
        .map_err(VmpinError::from)
        .map_err(Into::into)
}

fn mdev_slice(d: &Devices, node: u16) -> Slice {
    Slice {
        device: SliceDevice::Mdev { uuid: d.mdev },
        node: NumaNodeId(node),
    }
}

fn vf_slice(d: &Devices) -> Slice {
    Slice {
        device: SliceDevice::Pci {
            address: d.vf,
            managed: false,
        },
        node: NumaNodeId(1),
    }
}

/// Hot attach and pin a running domain to node 1, restart libvirtd, release.
fn live_allocation(
    p: &mut Phase,
    hv: &Hypervisor,
    topology: &HostTopology,
    d: &Devices,
    original: &str,
) -> anyhow::Result<()> {
    // The mtty parent is virtual and has no node of its own: the VM's slices are declared on
    // node 1, where the VF really is.
    let slices = [mdev_slice(d, 1), vf_slice(d)];
    let plan = plan(hv, topology, &slices, PlanOptions::default())?;
    p.say(format!(
        "plan: vCPUs -> {:?}, emulator {}, memory {:?}",
        plan.vcpu_pins, plan.emulator_cpus, plan.memory
    ));
    let report = hv.apply(DOMAIN, LIVE_ALLOCATION, &slices, &plan)?;
    for a in &report.live {
        p.say(format!(
            "  live: {} -> {}",
            a.what,
            a.error.as_deref().unwrap_or("ok")
        ));
    }
    p.check(
        "apply on the running domain: every live action accepted",
        report.active && !report.live.is_empty() && report.live.iter().all(|a| a.error.is_none()),
        format!("{} live actions", report.live.len()),
    );
    p.check(
        "apply: nothing waits for a guest restart (one node, no expander bus, mode unchanged)",
        report.restart_needed.is_empty(),
        format!("{:?}", report.restart_needed),
    );
    let live = live_hostdevs(hv)?;
    p.check(
        "the live XML has both hostdevs (mdev and VF)",
        live.contains(&d.mdev.to_string()) && live.contains(&d.vf.to_string()),
        live.join(", "),
    );
    check_threads(p, &plan.vcpu_pins, &plan.emulator_cpus)?;
    check_mems(p, "1")?;
    restart_libvirtd(p, hv)?;
    release_live(p, hv, original)
}

/// The same slices with `expander_bus` on the running domain: the expander bus waits for the next
/// start, the devices are hot-plugged now.
fn live_expander_allocation(
    p: &mut Phase,
    hv: &Hypervisor,
    topology: &HostTopology,
    d: &Devices,
    original: &str,
) -> anyhow::Result<()> {
    let slices = [mdev_slice(d, 1), vf_slice(d)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    let plan = plan(hv, topology, &slices, options)?;
    let report = hv.apply(DOMAIN, EXPANDER_ALLOCATION, &slices, &plan);
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            p.check(
                "apply with an expander bus on the running domain",
                false,
                sysfs::error_chain(&e),
            );
            return Ok(());
        }
    };
    for a in &report.live {
        p.say(format!(
            "  live: {} -> {}",
            a.what,
            a.error.as_deref().unwrap_or("ok")
        ));
    }
    let live = live_hostdevs(hv)?;
    p.check(
        "apply with an expander bus on the running domain: devices hot-plugged now, the bus at the next start",
        report.live.iter().all(|a| a.error.is_none())
            && report.restart_needed == [EXPANDER_LATER]
            && live.contains(&d.mdev.to_string())
            && live.contains(&d.vf.to_string()),
        format!("restart_needed {:?}; live hostdevs {live:?}", report.restart_needed),
    );
    let persistent = Document::parse(&hv.domain_xml(DOMAIN, true)?)?;
    p.check(
        "one node, no guest cells: the persistent expander bus names no guest node",
        expander_buses(&persistent)
            .iter()
            .map(|(_, n)| n)
            .eq([&None]),
        format!("{:?}", expander_buses(&persistent)),
    );
    let released = hv.release(DOMAIN, EXPANDER_ALLOCATION)?;
    let mut left = Vec::new();
    let detached = wait_until(Duration::from_secs(60), || {
        left = live_hostdevs(hv).unwrap_or_else(|e| vec![e.to_string()]);
        left.is_empty()
    });
    let now = hv.domain_xml(DOMAIN, true)?;
    p.check(
        "its release: hostdevs hot-unplugged, the definition as the original",
        released.live.iter().all(|a| a.error.is_none()) && detached && now == original,
        format!(
            "restart_needed {:?}; left {left:?}; {}",
            released.restart_needed,
            first_difference(original, &now)
        ),
    );
    p.check(
        "its release: restart_needed names the memory binding and the expander bus",
        released.restart_needed == [MEMORY_STAYS, EXPANDER_STAYS],
        format!("{:?}", released.restart_needed),
    );
    Ok(())
}

/// The hostdevs of the running domain, as mdev UUIDs and PCI addresses.
fn live_hostdevs(hv: &Hypervisor) -> anyhow::Result<Vec<String>> {
    let doc = Document::parse(&hv.domain_xml(DOMAIN, false)?)?;
    let Some(devices) = doc.root.child("devices") else {
        return Ok(Vec::new());
    };
    Ok(devices
        .elements()
        .filter(|e| e.name() == "hostdev")
        .filter_map(|h| {
            let a = h.child("source")?.child("address")?;
            if let Some(uuid) = a.attr("uuid") {
                return Some(uuid);
            }
            let hex = |k: &str| u32::from_str_radix(a.attr(k)?.trim_start_matches("0x"), 16).ok();
            Some(format!(
                "{:04x}:{:02x}:{:02x}.{:x}",
                hex("domain")?,
                hex("bus")?,
                hex("slot")?,
                hex("function")?
            ))
        })
        .collect())
}

fn qemu_pid() -> anyhow::Result<u32> {
    let text = std::fs::read_to_string(QEMU_PIDFILE).context("reading QEMU's pid file")?;
    Ok(text.trim().parse()?)
}

fn status_field(path: &Path, field: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|v| v.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

/// Every QEMU thread with its allowed CPUs: (name, CPUs).
fn threads() -> anyhow::Result<Vec<(String, CpuSet)>> {
    let task = Path::new("/proc")
        .join(qemu_pid()?.to_string())
        .join("task");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&task)? {
        let dir = entry?.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let cpus = status_field(&dir.join("status"), "Cpus_allowed_list")
            .and_then(|c| c.parse().ok())
            .unwrap_or_default();
        out.push((name.trim().to_owned(), cpus));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// vCPU `n` runs in the thread QEMU names `CPU n/TCG`; every other thread is the emulator's.
fn check_threads(p: &mut Phase, vcpu_pins: &[u32], emulator: &CpuSet) -> anyhow::Result<()> {
    let threads = threads()?;
    let shown: Vec<String> = threads.iter().map(|(n, c)| format!("{n}: {c}")).collect();
    let vcpus_ok = vcpu_pins.iter().enumerate().all(|(v, cpu)| {
        threads
            .iter()
            .any(|(n, c)| n == &format!("CPU {v}/TCG") && *c == CpuSet::from_cpus([*cpu]))
    });
    let emulator_ok = threads
        .iter()
        .filter(|(n, _)| !n.starts_with("CPU "))
        .all(|(_, c)| !c.is_empty() && c.iter().all(|cpu| emulator.contains(cpu)));
    p.check(
        &format!(
            "QEMU's vCPU threads pinned to {vcpu_pins:?}, its other threads within {emulator}"
        ),
        vcpus_ok && emulator_ok,
        shown.join(", "),
    );
    Ok(())
}

fn check_mems(p: &mut Phase, want: &str) -> anyhow::Result<()> {
    let status = Path::new("/proc")
        .join(qemu_pid()?.to_string())
        .join("status");
    let mems = status_field(&status, "Mems_allowed_list");
    p.check(
        &format!("/proc/<qemu>/status Mems_allowed_list = {want}"),
        mems.as_deref() == Some(want),
        format!("{mems:?}"),
    );
    Ok(())
}

/// Stops libvirtd under the open connection and starts it again: calls fail cleanly while it is
/// down, and the same `Hypervisor` reconnects and finds its record through `scan()`.
fn restart_libvirtd(p: &mut Phase, hv: &Hypervisor) -> anyhow::Result<()> {
    let pid = std::fs::read_to_string(LIBVIRTD_PIDFILE)?.trim().to_owned();
    Command::new("kill").arg(&pid).status()?;
    let gone = wait_until(Duration::from_secs(60), || {
        !Path::new("/proc").join(&pid).exists()
    });
    let _ = std::fs::remove_file(SOCKET);
    // The first call finds the connection broken (libvirt's RPC error) and drops it; the next
    // one tries to reconnect and is refused.
    let first = hv.domain_info(DOMAIN);
    let second = hv.domain_info(DOMAIN);
    p.check(
        "libvirtd stopped: vmpin calls fail at once, then with a connection error",
        gone && first.is_err() && matches!(second, Err(VmpinError::Connect { .. })),
        format!(
            "{:?}; then {:?}",
            first.map(|i| i.name).map_err(|e| sysfs::error_chain(&e)),
            second.map(|i| i.name).map_err(|e| sysfs::error_chain(&e))
        ),
    );
    Command::new("libvirtd").arg("-d").status()?;
    let found = wait_for_scan(hv);
    let record = found
        .iter()
        .find(|d| d.domain == DOMAIN)
        .and_then(|d| d.allocations.iter().find(|a| a.id == LIVE_ALLOCATION));
    p.say("libvirtd restarted");
    p.check(
        "after the restart the same Hypervisor reconnects; scan() finds the allocation's record",
        record.is_some_and(|a| a.slices.len() == 2 && a.pinning.is_some()),
        format!("{:?}", record.map(|a| (&a.id, a.slices.len(), &a.pinning))),
    );
    Ok(())
}

fn wait_for_scan(hv: &Hypervisor) -> Vec<vmpin::DomainAllocations> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match hv.scan() {
            Ok(found) if found.iter().any(|d| d.domain == DOMAIN) => return found,
            _ if Instant::now() > deadline => return Vec::new(),
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn release_live(p: &mut Phase, hv: &Hypervisor, original: &str) -> anyhow::Result<()> {
    let report = hv.release(DOMAIN, LIVE_ALLOCATION)?;
    for a in &report.live {
        p.say(format!(
            "  live: {} -> {}",
            a.what,
            a.error.as_deref().unwrap_or("ok")
        ));
    }
    p.check(
        "release on the running domain: every live action accepted",
        report.active && report.live.iter().all(|a| a.error.is_none()),
        format!("{} live actions", report.live.len()),
    );
    p.check(
        "release: restart_needed is only the memory binding (it cannot be lifted live)",
        report.restart_needed == [MEMORY_STAYS],
        format!("{:?}", report.restart_needed),
    );
    let mut left = Vec::new();
    let detached = wait_until(Duration::from_secs(60), || {
        left = live_hostdevs(hv).unwrap_or_else(|e| vec![e.to_string()]);
        left.is_empty()
    });
    p.check(
        "both hostdevs are gone from the live XML (the guest acknowledged the unplug)",
        detached,
        format!("left {left:?}; guest said: {}", serial_lines()),
    );
    let records = hv.allocations(DOMAIN)?;
    p.check(
        "the metadata record is gone",
        records.is_empty(),
        format!("{records:?}"),
    );
    let now = hv.domain_xml(DOMAIN, true)?;
    p.check(
        "the persistent definition equals the original, byte for byte",
        now == original,
        first_difference(original, &now),
    );
    let all = CpuSet::from_cpus(0..cpu_count(p.fs));
    let threads = threads()?;
    p.check(
        &format!("every QEMU thread may run on all CPUs ({all}) again"),
        !threads.is_empty() && threads.iter().all(|(_, c)| *c == all),
        threads
            .iter()
            .map(|(n, c)| format!("{n}: {c}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    Ok(())
}

fn cpu_count(fs: &dyn Sysfs) -> u32 {
    numa::nodes(fs).map_or(0, |(nodes, _)| {
        nodes.iter().map(|n| n.cpus.len() as u32).sum()
    })
}

fn first_difference(a: &str, b: &str) -> String {
    match a.lines().zip(b.lines()).position(|(x, y)| x != y) {
        None if a.len() == b.len() => "identical".into(),
        None => format!("{} vs {} lines", a.lines().count(), b.lines().count()),
        Some(i) => format!(
            "line {}: {:?} vs {:?}",
            i + 1,
            a.lines().nth(i).unwrap_or_default(),
            b.lines().nth(i).unwrap_or_default()
        ),
    }
}

/// Slices on both nodes of a stopped domain, with guest cells and expander buses, then a start.
fn two_node_allocation(
    p: &mut Phase,
    hv: &Hypervisor,
    topology: &HostTopology,
    d: &Devices,
    original: &str,
) -> anyhow::Result<()> {
    hv.destroy(DOMAIN)?;
    p.say(format!(
        "destroyed {DOMAIN}; next: slices on both nodes of the stopped domain"
    ));
    // The virtual mtty parent is declared on node 0 this time, the VF stays on node 1.
    let slices = [mdev_slice(d, 0), vf_slice(d)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    let plan = plan(hv, topology, &slices, options)?;
    let report = hv.apply(DOMAIN, TWO_NODE_ALLOCATION, &slices, &plan)?;
    p.say("the managed part of the persistent definition now:");
    for line in report.fragment.lines() {
        println!("libvirt:     {line}");
    }
    p.check(
        "apply on the stopped domain: no live actions, nothing waits for a restart",
        !report.active && report.live.is_empty() && report.restart_needed.is_empty(),
        format!("{:?}", report.restart_needed),
    );
    let started = hv.start(DOMAIN);
    p.check(
        "libvirt starts the domain with guest cells and expander buses",
        started.is_ok(),
        format!("{:?}", started.as_ref().map_err(|e| sysfs::error_chain(e))),
    );
    if started.is_ok() {
        check_two_node_guest(p, hv, &plan)?;
        hv.destroy(DOMAIN)?;
    }
    hv.release(DOMAIN, TWO_NODE_ALLOCATION)?;
    let now = hv.domain_xml(DOMAIN, true)?;
    p.check(
        "release on the stopped domain: the persistent definition equals the original",
        now == original,
        first_difference(original, &now),
    );
    Ok(())
}

fn check_two_node_guest(p: &mut Phase, hv: &Hypervisor, plan: &PinPlan) -> anyhow::Result<()> {
    let live = Document::parse(&hv.domain_xml(DOMAIN, false)?)?;
    let expanders = expander_buses(&live);
    let cells = live
        .root
        .child("cpu")
        .and_then(|c| c.child("numa"))
        .map_or(0, |n| n.elements().filter(|e| e.name() == "cell").count());
    p.check(
        "the running guest has 2 NUMA cells and an expander bus per node, with libvirt's busNr",
        cells == 2 && expanders.len() == 2 && expanders.iter().all(|(bus, _)| bus.is_some()),
        format!("cells {cells}, expanders (busNr, guest node) {expanders:?}"),
    );
    let cmdline = std::fs::read(
        Path::new("/proc")
            .join(qemu_pid()?.to_string())
            .join("cmdline"),
    )?;
    let pxbs: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .filter(|a| a.contains("pxb-pcie"))
        .collect();
    p.check(
        "QEMU runs a pxb-pcie per node with its guest NUMA node",
        pxbs.len() == 2 && pxbs.iter().all(|a| a.contains("numa_node")),
        pxbs.join(" "),
    );
    check_threads(p, &plan.vcpu_pins, &plan.emulator_cpus)?;
    check_mems(p, "0-1")?;
    let policies = memory_policies()?;
    p.check(
        "the guest RAM of cell 0 is bound to host node 0, of cell 1 to host node 1 (numa_maps)",
        policies.contains(&"bind:0".to_owned()) && policies.contains(&"bind:1".to_owned()),
        policies.join(", "),
    );
    Ok(())
}

/// (busNr, `<node>`) of each `pcie-expander-bus` in a live definition.
fn expander_buses(doc: &Document) -> Vec<(Option<String>, Option<String>)> {
    let Some(devices) = doc.root.child("devices") else {
        return Vec::new();
    };
    devices
        .elements()
        .filter(|e| {
            e.name() == "controller" && e.attr("model").as_deref() == Some("pcie-expander-bus")
        })
        .map(|e| {
            let target = e.child("target");
            (
                target.and_then(|t| t.attr("busNr")),
                target.and_then(|t| t.child("node")).map(Element::text),
            )
        })
        .collect()
}

/// The distinct memory policies of QEMU's mappings that have one (`bind:0`, ...).
fn memory_policies() -> anyhow::Result<Vec<String>> {
    let maps = std::fs::read_to_string(
        Path::new("/proc")
            .join(qemu_pid()?.to_string())
            .join("numa_maps"),
    )?;
    let mut policies: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|p| *p != "default")
        .map(str::to_owned)
        .collect();
    policies.sort();
    policies.dedup();
    Ok(policies)
}

/// Gives the devices back: the mdev removed, the VF to its driver, no VFs.
fn cleanup(p: &mut Phase, d: &Devices) {
    let removed = mdev::remove(p.fs, d.mdev);
    let released = vfio::release_from_vfio(p.fs, d.vf, d.vf_driver.as_deref());
    let disabled = vfio::set_num_vfs(p.fs, d.pf, 0);
    p.check(
        "the guest let go: the mdev is removed, the VF leaves vfio-pci, VFs disabled",
        removed.is_ok() && released.is_ok() && disabled.is_ok(),
        format!("{removed:?}, {released:?}, {disabled:?}"),
    );
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
