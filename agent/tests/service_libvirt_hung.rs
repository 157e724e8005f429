//! A libvirtd that accepts connections and never answers (hung on a stuck QEMU monitor, say):
//! the agent's libvirt calls give up after `[libvirt] call_timeout_ms`, VM allocations fail with
//! `libvirt_unavailable` and leave nothing behind, and allocations that need no VM are served
//! meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::engine::NumaPolicy;
use agent::pinning::PinningConfig;
use agent::service::{Service, ServiceOptions};
use testkit::*;

/// A unix socket that takes every connection and never writes a byte, as a hung libvirtd's
/// socket does (the kernel completes `connect` from the listen backlog).
fn hung_libvirtd(path: &Path) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            match conn {
                Ok(c) => held.push(c),
                Err(_) => return,
            }
        }
    })
}

fn service(h: &sim::SimHost, dir: &Path, uri: &str, timeout: Duration) -> Service {
    let mut pinning = PinningConfig::new(uri);
    pinning.call_timeout = timeout;
    Service::with_options(
        engine(h, dir),
        ServiceOptions {
            policy: sched::Policy::default(),
            pinning: Some(pinning),
            ..Default::default()
        },
    )
}

#[test]
fn a_hung_libvirtd_costs_a_vm_allocation_the_timeout_and_blocks_nothing_else() {
    let h = sim("vdi-mixed");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("hung-libvirtd.sock");
    let _libvirtd = hung_libvirtd(&socket);
    let uri = format!("qemu+unix:///system?socket={}", socket.display());
    let timeout = Duration::from_millis(800);
    let s = Arc::new(service(&h, &dir.path().join("state"), &uri, timeout));
    let t4 = s
        .host()
        .gpus
        .iter()
        .find(|g| g.model.contains("T4"))
        .map(|g| g.mdev_types[0].id.to_string())
        .unwrap();

    // Two VM allocations at once: each waits at most about the timeout (they take turns
    // planning), never for libvirt itself.
    let started = Instant::now();
    let vm_allocations: Vec<_> = (0..2)
        .map(|i| {
            let (s, t4) = (s.clone(), t4.clone());
            std::thread::spawn(move || {
                let r = vm_request(&format!("tenant-{i}"), "vm-a", &t4, NumaPolicy::Required);
                (s.allocate(r), started.elapsed())
            })
        })
        .collect();

    // Meanwhile an allocation without a VM needs no libvirt and is served at once.
    std::thread::sleep(Duration::from_millis(100));
    let mut plain = vm_request("tenant-plain", "unused", &t4, NumaPolicy::None);
    plain.vm = None;
    let quick = Instant::now();
    let a = s.allocate(plain).unwrap();
    let plain_took = quick.elapsed();
    assert!(
        plain_took < timeout,
        "an allocation without a VM waited {plain_took:?} behind libvirt"
    );

    for handle in vm_allocations {
        let (result, at) = handle.join().unwrap();
        let err = result.unwrap_err();
        assert_eq!(err.code(), "libvirt_unavailable", "{err}");
        assert!(err.to_string().contains("call_timeout_ms"), "{err}");
        // Both are done within a few timeouts: connecting is the one call each makes.
        assert!(at < timeout * 4, "a VM allocation took {at:?}");
    }
    eprintln!(
        "hung libvirtd: VM allocations refused after <= {:?}, a plain allocation took {plain_took:?}",
        started.elapsed()
    );
    // Nothing was allocated for the VMs and no slice is left claimed for them.
    assert_eq!(s.allocations().len(), 1);
    assert_eq!(s.allocations()[0].id, a.id);
}
