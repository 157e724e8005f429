//! Against a real peer: libvirt's test driver (`test:///default` and generated host files).
//!
//! Each test opens its own host file, so tests running in parallel never share domains
//! (connections to `test:///default` within one process share one in-memory host).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{mdev, vf};
use ids::NumaNodeId;
use vmpin::testhost::{self, DEMO_VM, TestGpu};
use vmpin::{
    DomainXml, HostNode, HostTopology, Hypervisor, NumaAccounting, PinRequest, PlanOptions, Policy,
    Slice, VmpinError,
};

/// A two-socket host shaped like the simulator's DGX-class profile, scaled down.
fn topology() -> HostTopology {
    HostTopology {
        nodes: vec![
            HostNode {
                id: NumaNodeId(0),
                cpus: "0-15,32-47".parse().unwrap(),
                memory_mib: 65536,
            },
            HostNode {
                id: NumaNodeId(1),
                cpus: "16-31,48-63".parse().unwrap(),
                memory_mib: 65536,
            },
        ],
        reserved_cpus: "0-1,16-17".parse().unwrap(),
    }
}

fn gpus() -> Vec<TestGpu> {
    vec![
        TestGpu {
            address: "0000:41:00.0".parse().unwrap(),
            node: NumaNodeId(0),
            vendor_id: 0x10de,
            device_id: 0x2335,
            product: "H200".into(),
        },
        TestGpu {
            address: "0000:c1:00.0".parse().unwrap(),
            node: NumaNodeId(1),
            vendor_id: 0x10de,
            device_id: 0x2335,
            product: "H200".into(),
        },
    ]
}

fn host(dir: &Path) -> Hypervisor {
    let uri = testhost::write_host_file(&dir.join("host.xml"), &topology(), &gpus(), true).unwrap();
    Hypervisor::open(&uri).unwrap()
}

const M1: &str = "3b1e0c9a-0000-4a4a-8b8b-000000000001";
const M2: &str = "3b1e0c9a-0000-4a4a-8b8b-000000000002";

fn plan_for(
    hv: &Hypervisor,
    domain: &str,
    slices: &[Slice],
    options: PlanOptions,
) -> vmpin::PinPlan {
    let info = hv.domain_info(domain).unwrap();
    let acc = NumaAccounting::for_domain(&topology(), &hv.usage().unwrap(), domain);
    acc.plan(&PinRequest {
        slices: slices.to_vec(),
        vcpus: info.vcpus,
        memory_kib: info.memory_kib,
        policy: Policy::Required,
        options,
    })
    .unwrap()
}

#[test]
fn generated_two_node_host_file_is_loaded_by_the_test_driver() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let (nodes, cpus, memory_kib) = hv.node_summary().unwrap();
    assert_eq!((nodes, cpus, memory_kib), (2, 64, 2 * 65536 * 1024));
    // libvirt has no per-cell topology for file hosts; ours travels in the file.
    assert_eq!(hv.host_topology().unwrap(), None);
    assert_eq!(
        testhost::read_topology(&dir.path().join("host.xml")).unwrap(),
        topology()
    );
    let demo = hv.domain_info(DEMO_VM).unwrap();
    assert_eq!(
        (demo.vcpus, demo.memory_kib, demo.active, demo.persistent),
        (4, 8 * 1024 * 1024, false, true)
    );
    // The GPUs are node devices carrying their NUMA node.
    let gpu_xml = hv.node_device_xml("pci_0000_c1_00_0").unwrap();
    assert!(gpu_xml.contains("<numa node='1'/>"), "{gpu_xml}");
}

#[test]
fn default_driver_reports_its_two_cells() {
    let hv = Hypervisor::open("test:///default").unwrap();
    let topo = hv.host_topology().unwrap().unwrap();
    assert_eq!(topo.nodes.len(), 2);
    assert_eq!(topo.nodes[1].cpus.to_string(), "8-15");
}

#[test]
fn shut_off_domain_gets_hostdevs_and_pinning_and_release_restores_it_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let original = hv.domain_xml(DEMO_VM, true).unwrap();
    let slices = [mdev(M1, 1), vf("0000:c1:00.5", 1)];
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let report = hv.apply(DEMO_VM, "alloc-1", &slices, &plan).unwrap();
    assert!(!report.active && report.live.is_empty() && report.restart_needed.is_empty());
    let stored = hv.domain_xml(DEMO_VM, true).unwrap();
    for want in [
        "<vcpupin vcpu='0' cpuset='18'/>",
        "<vcpupin vcpu='3' cpuset='21'/>",
        "<emulatorpin cpuset='18-21'/>",
        "<memory mode='strict' nodeset='1'/>",
        &format!("<address uuid='{M1}'/>"),
        "<hostdev mode='subsystem' type='pci' managed='no'>",
        "<address domain='0x0000' bus='0xc1' slot='0x00' function='0x5'/>",
        "<vgpud:allocation id=\"alloc-1\">",
    ] {
        assert!(stored.contains(want), "missing {want} in\n{stored}");
    }
    assert_eq!(hv.allocations(DEMO_VM).unwrap()[0].slices, slices);
    hv.release(DEMO_VM, "alloc-1").unwrap();
    assert_eq!(hv.domain_xml(DEMO_VM, true).unwrap(), original);
}

#[test]
fn running_domain_is_pinned_live_and_hostdevs_wait_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    hv.start(DEMO_VM).unwrap();
    let original_persistent = hv.domain_xml(DEMO_VM, true).unwrap();
    let slices = [mdev(M1, 1)];
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let report = hv.apply(DEMO_VM, "live-1", &slices, &plan).unwrap();
    assert!(report.active);
    // The test driver cannot hot-attach: the report says so, and the hostdev is persistent.
    let attach = &report.live[0];
    assert!(
        attach.what.starts_with("attach mdev") && attach.error.is_some(),
        "{attach:?}"
    );
    assert!(
        report
            .restart_needed
            .iter()
            .any(|r| r.starts_with("attach mdev")),
        "{:?}",
        report.restart_needed
    );
    assert!(
        report.live[1..].iter().all(|a| a.error.is_none()),
        "{:?}",
        report.live
    );
    let live = hv.domain_xml(DEMO_VM, false).unwrap();
    assert!(live.contains("<vcpupin vcpu='0' cpuset='18'/>"), "{live}");
    assert!(live.contains("<vcpupin vcpu='3' cpuset='21'/>"), "{live}");
    assert!(live.contains("<emulatorpin cpuset='18-21'/>"), "{live}");
    assert!(live.contains("nodeset='1'"), "{live}");
    assert!(!live.contains(M1), "the running domain has no hostdev yet");
    assert!(hv.domain_xml(DEMO_VM, true).unwrap().contains(M1));
    // The running domain's pins count for other VMs' planning.
    let acc = NumaAccounting::new(&topology(), &hv.usage().unwrap());
    assert_eq!(
        acc.node(NumaNodeId(1)).unwrap().free_cpus.to_string(),
        "22-31,48-63"
    );

    let released = hv.release(DEMO_VM, "live-1").unwrap();
    assert!(
        released
            .live
            .iter()
            .any(|a| a.what == "unpin vCPU 0" && a.error.is_none()),
        "{:?}",
        released.live
    );
    assert!(
        released
            .restart_needed
            .iter()
            .any(|r| r.contains("memory binding")),
        "{:?}",
        released.restart_needed
    );
    assert_eq!(hv.domain_xml(DEMO_VM, true).unwrap(), original_persistent);
    hv.destroy(DEMO_VM).unwrap();
}

/// A release cannot lift a running domain's memory binding; libvirt 9.0's QEMU driver then
/// refuses any live nodeset change unless the mode is restrictive (seen in the rig). Binding the
/// same nodes again is no change, and is not attempted.
#[test]
fn reapplying_on_the_same_node_keeps_the_live_memory_binding() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    hv.start(DEMO_VM).unwrap();
    let slices = [mdev(M1, 1)];
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let first = hv.apply(DEMO_VM, "first", &slices, &plan).unwrap();
    assert!(
        first.live.iter().any(|a| a.what == "bind memory to node 1"),
        "{:?}",
        first.live
    );
    hv.release(DEMO_VM, "first").unwrap();
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let again = hv.apply(DEMO_VM, "again", &slices, &plan).unwrap();
    assert!(
        again
            .live
            .iter()
            .any(|a| a.what == "memory already bound to node 1" && a.error.is_none()),
        "{:?}",
        again.live
    );
    assert!(
        !again.live.iter().any(|a| a.what.starts_with("bind memory")),
        "{:?}",
        again.live
    );
    hv.release(DEMO_VM, "again").unwrap();
    hv.destroy(DEMO_VM).unwrap();
}

#[test]
fn two_allocations_on_one_domain_release_in_either_order() {
    for order in [["a", "b"], ["b", "a"]] {
        let dir = tempfile::tempdir().unwrap();
        let hv = host(dir.path());
        let original = hv.domain_xml(DEMO_VM, true).unwrap();
        let a = [mdev(M1, 0)];
        let b = [mdev(M2, 1)];
        hv.apply(
            DEMO_VM,
            "a",
            &a,
            &plan_for(&hv, DEMO_VM, &a, PlanOptions::default()),
        )
        .unwrap();
        let both: Vec<Slice> = a.iter().chain(&b).cloned().collect();
        let plan_b = plan_for(&hv, DEMO_VM, &both, PlanOptions::default());
        assert_eq!(plan_b.guest_cells.len(), 2);
        let report = hv.apply(DEMO_VM, "b", &b, &plan_b).unwrap();
        assert!(
            report
                .fragment
                .contains("<cell id='1' cpus='2-3' memory='4194304' unit='KiB'/>"),
            "{}",
            report.fragment
        );
        assert_eq!(hv.allocations(DEMO_VM).unwrap().len(), 2);
        hv.release(DEMO_VM, order[0]).unwrap();
        hv.release(DEMO_VM, order[1]).unwrap();
        assert_eq!(
            hv.domain_xml(DEMO_VM, true).unwrap(),
            original,
            "order {order:?}"
        );
    }
}

#[test]
fn a_domain_with_foreign_metadata_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let foreign = testhost::demo_vm_xml()
        .replace("vgpud-demo-vm", "tenant-vm")
        .replace(
            "<memory",
            "<metadata>\n    <nova:instance xmlns:nova=\"http://openstack.org/xmlns/libvirt/nova/1.1\"><nova:name>a &amp; b</nova:name></nova:instance>\n  </metadata>\n  <memory",
        );
    hv.define(&foreign).unwrap();
    let original = hv.domain_xml("tenant-vm", true).unwrap();
    assert!(
        original.contains("<nova:name>a &amp; b</nova:name>"),
        "{original}"
    );
    let slices = [vf("0000:41:00.4", 0)];
    let options = PlanOptions {
        expander_bus: true,
        ..PlanOptions::default()
    };
    hv.apply(
        "tenant-vm",
        "x",
        &slices,
        &plan_for(&hv, "tenant-vm", &slices, options),
    )
    .unwrap();
    let applied = hv.domain_xml("tenant-vm", true).unwrap();
    assert!(
        applied.contains("<nova:name>a &amp; b</nova:name>"),
        "{applied}"
    );
    assert!(applied.contains("model='pcie-expander-bus'"), "{applied}");
    // Another domain's scan shows only its own records; this one shows ours.
    let scan = hv.scan().unwrap();
    let mine = scan.iter().find(|d| d.domain == "tenant-vm").unwrap();
    assert_eq!(mine.allocations[0].id, "x");
    assert!(
        scan.iter()
            .find(|d| d.domain == DEMO_VM)
            .unwrap()
            .allocations
            .is_empty()
    );
    hv.release("tenant-vm", "x").unwrap();
    assert_eq!(hv.domain_xml("tenant-vm", true).unwrap(), original);
}

#[test]
fn scan_reports_unreadable_records_per_domain() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let broken = testhost::demo_vm_xml().replace("vgpud-demo-vm", "broken-vm").replace(
        "<memory",
        "<metadata>\n    <v:pinning xmlns:v=\"https://vgpud.io/xmlns/pinning/1\"><v:allocation/></v:pinning>\n  </metadata>\n  <memory",
    );
    hv.define(&broken).unwrap();
    let scan = hv.scan().unwrap();
    let b = scan.iter().find(|d| d.domain == "broken-vm").unwrap();
    assert!(b.problem.as_deref().unwrap().contains("no id"), "{b:?}");
    assert!(
        scan.iter()
            .find(|d| d.domain == DEMO_VM)
            .unwrap()
            .problem
            .is_none()
    );
}

#[test]
fn planning_rejection_under_required() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    // Another VM already holds most of node 1.
    let hog = testhost::demo_vm_xml()
        .replace("vgpud-demo-vm", "hog")
        .replace(
            "<vcpu>4</vcpu>",
            "<vcpu>28</vcpu>\n  <cputune>\n    <emulatorpin cpuset='18-31,48-61'/>\n  </cputune>",
        );
    hv.define(&hog).unwrap();
    let acc = NumaAccounting::for_domain(&topology(), &hv.usage().unwrap(), DEMO_VM);
    let err = acc
        .plan(&PinRequest {
            slices: vec![mdev(M1, 1)],
            vcpus: 4,
            memory_kib: 8 << 20,
            policy: Policy::Required,
            options: PlanOptions::default(),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "NUMA node 1 has 2 free CPUs, 4 are needed for a local placement"
    );
}

#[test]
fn unknown_domain_and_duplicate_allocation_are_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let slices = [mdev(M1, 0)];
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let no_domain = hv.apply("nope", "a", &slices, &plan).unwrap_err();
    assert!(
        matches!(no_domain, VmpinError::NoDomain(_)),
        "{no_domain:?}"
    );
    assert!(!no_domain.libvirt_unavailable(), "a refusal, not an outage");
    hv.apply(DEMO_VM, "a", &slices, &plan).unwrap();
    let before = hv.domain_xml(DEMO_VM, true).unwrap();
    assert!(matches!(
        hv.apply(DEMO_VM, "a", &slices, &plan),
        Err(VmpinError::AllocationExists { .. })
    ));
    assert!(matches!(
        hv.release(DEMO_VM, "zzz"),
        Err(VmpinError::AllocationNotFound { .. })
    ));
    assert_eq!(hv.domain_xml(DEMO_VM, true).unwrap(), before);
}

#[test]
fn libvirtd_down_is_a_clean_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-libvirtd.sock");
    let uri = format!("qemu+unix:///system?socket={}", socket.display());
    let err = Hypervisor::open(&uri).unwrap_err();
    assert!(matches!(err, VmpinError::Connect { .. }), "{err:?}");
    assert!(err.libvirt_unavailable(), "worth a retry: {err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot connect to libvirt at {uri}")
    );
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("no-libvirtd.sock"), "{cause}");
}

/// Prints what a pinned demo VM looks like (run with `--nocapture` to see it).
#[test]
fn transcript_pin_the_demo_vm() {
    let dir = tempfile::tempdir().unwrap();
    let hv = host(dir.path());
    let slices = [mdev(M1, 1)];
    let plan = plan_for(&hv, DEMO_VM, &slices, PlanOptions::default());
    let report = hv.apply(DEMO_VM, "demo-alloc", &slices, &plan).unwrap();
    println!("== vmpin transcript: {} on {}", DEMO_VM, hv.uri());
    println!(
        "plan: vCPU -> host CPU {:?}, emulator {}, memory {} on node {}",
        plan.vcpu_pins,
        plan.emulator_cpus,
        plan.memory.as_ref().unwrap().mode.as_str(),
        plan.memory.as_ref().unwrap().nodeset()
    );
    println!("resulting domain XML fragment:\n{}", report.fragment);
    let xml = DomainXml::parse(&hv.domain_xml(DEMO_VM, true).unwrap()).unwrap();
    assert_eq!(xml.current_pinning().vcpu_pins, plan.vcpu_pins);
    assert!(report.fragment.contains("<vcpupin vcpu='0' cpuset='18'/>"));
}

#[test]
fn the_connection_can_move_to_a_blocking_thread() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Hypervisor>();
    let hv = std::sync::Arc::new(Hypervisor::open("test:///default").unwrap());
    let other = std::sync::Arc::clone(&hv);
    let nodes = std::thread::spawn(move || other.node_summary().unwrap().0)
        .join()
        .unwrap();
    assert_eq!(nodes, 2);
}
