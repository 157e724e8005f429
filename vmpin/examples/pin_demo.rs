//! Pins the demo VM on a libvirt host and prints the resulting domain XML fragment.
//!
//! `cargo run -p vmpin --example pin_demo [URI]` (default `test:///default`, libvirt's built-in
//! fake host with two NUMA cells). The VM gets one mdev on node 1; when node 1 cannot hold it
//! under policy `required`, the demo prints why and falls back to `preferred`.

use std::process::ExitCode;

use ids::NumaNodeId;
use vmpin::testhost::{DEMO_VM, demo_vm_xml};
use vmpin::{
    Hypervisor, NumaAccounting, PinRequest, PlanOptions, Policy, Slice, SliceDevice, VmpinError,
};

fn run(uri: &str) -> Result<(), Box<dyn std::error::Error>> {
    let hv = Hypervisor::open(uri)?;
    if matches!(hv.domain_info(DEMO_VM), Err(VmpinError::NoDomain(_))) {
        hv.define(&demo_vm_xml())?;
    }
    let topology = hv
        .host_topology()?
        .ok_or("this libvirt host reports no NUMA cells; use a vgpud test host file")?;
    let info = hv.domain_info(DEMO_VM)?;
    let slices = vec![Slice {
        device: SliceDevice::Mdev {
            uuid: "9d2c7a1e-5b4f-4c1a-8e2d-0a1b2c3d4e5f".parse()?,
        },
        node: NumaNodeId(1),
    }];
    let accounting = NumaAccounting::for_domain(&topology, &hv.usage()?, DEMO_VM);
    let mut request = PinRequest {
        slices: slices.clone(),
        vcpus: info.vcpus,
        memory_kib: info.memory_kib,
        policy: Policy::Required,
        options: PlanOptions::default(),
    };
    let plan = match accounting.plan(&request) {
        Ok(plan) => plan,
        Err(rejection) => {
            println!("policy required: rejected: {rejection}");
            request.policy = Policy::Preferred;
            accounting.plan(&request).map_err(VmpinError::from)?
        }
    };
    for note in &plan.compromises {
        println!("policy preferred: {note}");
    }
    let report = hv.apply(DEMO_VM, "demo", &slices, &plan)?;
    println!(
        "pinned {DEMO_VM} on {uri}: vCPU -> host CPU {:?}",
        plan.vcpu_pins
    );
    println!("{}", report.fragment);
    hv.release(DEMO_VM, "demo")?;
    println!("released: the definition is back as it was");
    Ok(())
}

fn main() -> ExitCode {
    let uri = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "test:///default".into());
    match run(&uri) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pin_demo: {e}");
            ExitCode::FAILURE
        }
    }
}
