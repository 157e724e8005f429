//! The simulated host's libvirt: the test driver over a host file written from the simulated
//! topology, which VM pinning plans against (the daemon's `--sim` wiring).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::config::Config;
use agent::engine::{AllocationRequest, NumaPolicy, SliceRequest};
use agent::service::{Service, ServiceOptions};
use testkit::{engine, sim, vm_request};

fn request(vm: &str, t: &str, policy: NumaPolicy) -> AllocationRequest {
    vm_request(&format!("tenant-{vm}"), vm, t, policy)
}

#[test]
fn simulation_mode_pins_the_demo_vm_on_a_host_file_of_the_simulated_host() {
    let h = sim("dgx-a100");
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.host.reserved_cpus = "0-3,64-67".into();
    let e = engine(&h, dir.path());
    let mut options = ServiceOptions::from_config(&config).unwrap();
    hostwire::pin_to_test_host(&mut options, &e.inventory(), &e.state_dir());
    let s = Service::with_options(e, options);
    let uri = s.libvirt_uri().unwrap();
    assert!(
        uri.starts_with("test:///") && uri.ends_with("libvirt-test-host.xml"),
        "{uri}"
    );
    let mut r = request(vmpin::testhost::DEMO_VM, "3g.40gb", NumaPolicy::Required);
    r.request.count = 2;
    let a = s.allocate(r).unwrap();
    let nodes: Vec<_> = a
        .slices
        .iter()
        .map(|id| s.slice(*id).unwrap().numa_node.unwrap())
        .collect();
    assert_eq!(nodes[0], nodes[1], "two slices of one VM share a node");
    let p = a.pinning.clone().unwrap();
    assert_eq!(p.vcpus.len(), vmpin::testhost::DEMO_VM_VCPUS as usize);
    // The simulated node's CPUs, less the reserved ones.
    let node_cpus: numa::CpuSet = s
        .host()
        .numa_nodes
        .iter()
        .find(|n| n.id == nodes[0])
        .unwrap()
        .cpus
        .parse()
        .unwrap();
    for v in &p.vcpus {
        assert!(node_cpus.contains(v.cpu), "{v:?} not on node {}", nodes[0]);
        assert!(
            ![0, 1, 2, 3, 64, 65, 66, 67].contains(&v.cpu),
            "{v:?} is reserved"
        );
    }
    assert_eq!(p.memory.unwrap().nodes, nodes[0].to_string());
    // MIG instances have no VM device of their own: pinning only.
    assert!(!p.xml_fragment.contains("<hostdev"), "{}", p.xml_fragment);
    assert!(p.xml_fragment.contains("<numatune>"), "{}", p.xml_fragment);
    s.release(a.id).unwrap();
    assert!(s.allocations().is_empty());
    // The placement score sees the same NUMA room libvirt accounts.
    let mut big = SliceRequest::new("1g.10gb", 1);
    big.numa_policy = Some(NumaPolicy::Required);
    big.vcpus = Some(1000);
    let score = s.placement_score(big).unwrap();
    assert!(!score.feasible, "{score:?}");
}
