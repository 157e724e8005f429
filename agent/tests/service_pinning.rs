//! VM pinning through the service against a real peer: libvirt's test driver
//! (`test:///default`, whose in-memory host every connection in this process shares).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::sync::{Mutex, MutexGuard};

use agent::engine::{AllocationRequest, Event, NumaPolicy};
use agent::pinning::PinningConfig;
use agent::service::{Service, ServiceOptions};
use testkit::*;
use vmpin::Hypervisor;

/// `test:///default` is one host for the whole process: tests that pin on it take turns.
static DEFAULT_HOST: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    DEFAULT_HOST.lock().unwrap_or_else(|e| e.into_inner())
}

fn domain_xml(name: &str, vcpus: u32, memory_mib: u64) -> String {
    format!(
        "<domain type='test'>\n  <name>{name}</name>\n  <memory unit='KiB'>{}</memory>\n  <vcpu placement='static'>{vcpus}</vcpu>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n  <devices>\n  </devices>\n</domain>\n",
        memory_mib * 1024
    )
}

/// A fresh domain on `test:///default` (an earlier run's leftover is replaced).
fn define(hv: &Hypervisor, name: &str, vcpus: u32, memory_mib: u64) -> String {
    hv.define(&domain_xml(name, vcpus, memory_mib)).unwrap();
    hv.domain_xml(name, true).unwrap()
}

fn service(h: &sim::SimHost, dir: &std::path::Path, uri: &str) -> Service {
    Service::with_options(
        engine(h, dir),
        ServiceOptions {
            policy: sched::Policy::default(),
            pinning: Some(PinningConfig::new(uri)),
            ..Default::default()
        },
    )
}

fn t4_type(s: &Service) -> String {
    s.host()
        .gpus
        .iter()
        .find(|g| g.model.contains("T4"))
        .map(|g| g.mdev_types[0].id.to_string())
        .unwrap()
}

fn request(vm: &str, t: &str, policy: NumaPolicy) -> AllocationRequest {
    vm_request(&format!("tenant-{vm}"), vm, t, policy)
}

#[test]
fn pinning_is_applied_recorded_and_released_exactly() {
    let _turn = turn();
    let hv = Hypervisor::open("test:///default").unwrap();
    let original = define(&hv, "svc-pin-apply", 2, 512);
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let s = service(&h, dir.path(), "test:///default");
    let t4 = t4_type(&s);

    let a = s
        .allocate(request("svc-pin-apply", &t4, NumaPolicy::Required))
        .unwrap();
    let slice = s.slice(a.slices[0]).unwrap();
    let uuid = slice.handles.mdev_uuid.unwrap();
    assert_eq!(slice.numa_node.map(|n| n.0), Some(0), "T4s sit on node 0");
    let p = a.pinning.clone().expect("pinning in the allocation");
    assert_eq!(p.domain, "svc-pin-apply");
    assert_eq!(p.policy, NumaPolicy::Required);
    assert_eq!(p.vcpus.len(), 2);
    // test:///default's node 0 is CPUs 0-7.
    assert!(p.vcpus.iter().all(|v| v.cpu < 8), "{p:?}");
    let memory = p.memory.clone().unwrap();
    assert_eq!(
        (memory.mode.as_str(), memory.nodes.as_str()),
        ("strict", "0")
    );
    assert!(p.xml_fragment.contains("<vcpupin"), "{}", p.xml_fragment);
    // The allocation keeps it (it is in the store) and libvirt's definition has it all.
    assert_eq!(s.allocation(a.id).unwrap().pinning, Some(p.clone()));
    let stored = hv.domain_xml("svc-pin-apply", true).unwrap();
    for want in [
        format!("<address uuid='{uuid}'/>"),
        format!("<vgpud:allocation id=\"{}\">", a.id),
        "<memory mode='strict' nodeset='0'/>".to_owned(),
        format!("<vcpupin vcpu='0' cpuset='{}'/>", p.vcpus[0].cpu),
    ] {
        assert!(stored.contains(&want), "missing {want} in\n{stored}");
    }

    s.release(a.id).unwrap();
    assert_eq!(hv.domain_xml("svc-pin-apply", true).unwrap(), original);
    assert!(s.allocations().is_empty());
}

#[test]
fn required_that_cannot_be_local_allocates_nothing_and_preferred_spills() {
    let _turn = turn();
    let hv = Hypervisor::open("test:///default").unwrap();
    // Node 0 of test:///default has 8 CPUs: 12 vCPUs cannot be local to a T4.
    let original = define(&hv, "svc-pin-big", 12, 512);
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let s = service(&h, dir.path(), "test:///default");
    let t4 = t4_type(&s);
    let err = s
        .allocate(request("svc-pin-big", &t4, NumaPolicy::Required))
        .unwrap_err();
    assert_eq!(err.code(), "no_capacity", "{err}");
    assert!(err.to_string().contains("NUMA"), "{err}");
    assert!(s.allocations().is_empty());
    assert!(s.slices().is_empty(), "nothing was made");
    assert!(host_slices(&h).is_empty());
    assert_eq!(hv.domain_xml("svc-pin-big", true).unwrap(), original);

    // With an explicit GPU the NUMA room is checked all the same.
    let gpu = s
        .host()
        .gpus
        .iter()
        .find(|g| g.model.contains("T4"))
        .unwrap()
        .pci_address;
    let mut r = request("svc-pin-big", &t4, NumaPolicy::Required);
    r.request.gpu = Some(gpu);
    let err = s.allocate(r).unwrap_err();
    assert_eq!(err.code(), "no_capacity", "{err}");
    assert!(s.allocations().is_empty() && s.slices().is_empty());
    assert!(host_slices(&h).is_empty());
    assert_eq!(hv.domain_xml("svc-pin-big", true).unwrap(), original);

    let a = s
        .allocate(request("svc-pin-big", &t4, NumaPolicy::Preferred))
        .unwrap();
    let p = a.pinning.clone().unwrap();
    assert_eq!(p.vcpus.len(), 12);
    assert!(!p.compromises.is_empty(), "{p:?}");
    s.release(a.id).unwrap();
    assert_eq!(hv.domain_xml("svc-pin-big", true).unwrap(), original);
}

#[test]
fn a_vm_that_is_not_a_domain_or_libvirt_down_changes_nothing() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-libvirtd.sock");
    let down = format!("qemu+unix:///system?socket={}", socket.display());
    let s = service(&h, &dir.path().join("state"), &down);
    let t4 = t4_type(&s);
    let err = s
        .allocate(request("any-vm", &t4, NumaPolicy::Required))
        .unwrap_err();
    assert_eq!(err.code(), "libvirt_unavailable", "{err}");
    assert!(s.allocations().is_empty() && s.slices().is_empty());
    // Without a VM there is nothing to pin: libvirt is not needed.
    let mut r = request("any-vm", &t4, NumaPolicy::Required);
    r.vm = None;
    let a = s.allocate(r).unwrap();
    assert!(a.pinning.is_none());
    // libvirt down is not fatal to a reconcile: the links wait for the next pass.
    s.reconcile().unwrap();

    let _turn = turn();
    // A host of its own: on this one the first service's marked mdev would stop a second
    // state directory from opening (a missing state file on a host with vgpud's slices).
    let h = sim("vdi-mixed");
    let s = service(&h, &dir.path().join("state2"), "test:///default");
    let err = s
        .allocate(request("no-such-domain", &t4, NumaPolicy::Required))
        .unwrap_err();
    assert_eq!(err.code(), "not_found", "{err}");
}

#[test]
fn a_restart_rebuilds_links_and_reports_stale_records() {
    let _turn = turn();
    let hv = Hypervisor::open("test:///default").unwrap();
    let original = define(&hv, "svc-pin-links", 2, 256);
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let s = service(&h, dir.path(), "test:///default");
        let a = s
            .allocate(request(
                "svc-pin-links",
                &t4_type(&s),
                NumaPolicy::Preferred,
            ))
            .unwrap();
        a.id
    };
    // A new agent on the same state: the domain's record is matched with the allocation.
    let s = service(&h, dir.path(), "test:///default");
    let report = s.reconcile().unwrap();
    assert!(report.stale_vm_links.is_empty(), "{report:?}");
    let links = s.vm_links();
    assert!(
        links
            .links
            .iter()
            .any(|l| l.allocation == id && l.domain == "svc-pin-links"),
        "{links:?}"
    );
    assert!(s.allocation(id).unwrap().pinning.is_some());

    // The allocation goes behind the service's back: the domain's record is now stale.
    s.engine().release(id).unwrap();
    let mut events = s.subscribe();
    let report = s.reconcile().unwrap();
    let stale = report
        .stale_vm_links
        .iter()
        .find(|l| l.allocation == id.to_string())
        .unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(stale.domain, "svc-pin-links");
    assert!(stale.reason.contains("no longer exists"), "{stale:?}");
    let seen = std::iter::from_fn(|| events.try_recv().ok()).any(
        |e| matches!(e, Event::StaleVmLink { ref allocation, .. } if *allocation == id.to_string()),
    );
    assert!(seen, "a stale_vm_link event");
    hv.release("svc-pin-links", &id.to_string()).unwrap();
    assert_eq!(hv.domain_xml("svc-pin-links", true).unwrap(), original);
}

#[test]
fn a_failed_last_step_undoes_the_allocation() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    let t4 = t4_type(&Service::new(e.clone()));
    // One free slice to reuse, and one the allocation has to make.
    let kept = create(
        &e,
        &e.inventory()
            .gpus
            .iter()
            .find(|g| g.model.contains("T4"))
            .unwrap()
            .pci_address
            .to_string(),
        mdev_kind(&t4),
    )
    .unwrap();
    let mut r = request("vm", &t4, NumaPolicy::None);
    r.request.count = 2;
    let mut seen = Vec::new();
    let mut fail = |a: &agent::engine::Allocation| {
        seen.extend(a.slices.clone());
        Err(agent::engine::EngineError::LibvirtUnavailable(
            "test".into(),
        ))
    };
    let err = e
        .allocate_with(r, &agent::engine::Scheduling::default(), Some(&mut fail))
        .unwrap_err();
    assert_eq!(err.code(), "libvirt_unavailable");
    assert_eq!(seen.len(), 2);
    assert!(seen.contains(&kept.id), "the free slice was reused");
    assert!(e.allocations().is_empty());
    let left: Vec<_> = e.slices().into_iter().map(|s| s.id).collect();
    assert_eq!(
        left,
        vec![kept.id],
        "the slice made for it is gone, the reused one stays"
    );
    assert_eq!(host_slices(&h).len(), 1);
}
