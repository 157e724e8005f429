//! NVIDIA SR-IOV on fixture hosts: with `sriov-manage` present the command runs (asserted as
//! data) and sysfs is only read; the sysfs sequence itself is exercised on the simulator
//! (agent/tests/engine_nvidia_sriov.rs), which reacts to the binding steps as the kernel does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Mutex;

use common::{Host, PciHost};
use ids::PciAddress;
use vfio::*;

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

/// Records the commands it is given and answers with a fixed output.
#[derive(Debug, Default)]
struct FakeRunner {
    ran: Mutex<Vec<HostCommand>>,
    status: Option<i32>,
    stderr: String,
}

impl CommandRunner for FakeRunner {
    fn run(&self, cmd: &HostCommand) -> Result<CommandOutput, VfioError> {
        self.ran.lock().unwrap().push(cmd.clone());
        Ok(CommandOutput {
            status: self.status,
            stderr: self.stderr.clone(),
        })
    }
}

fn nvidia_host(with_tool: bool) -> Host {
    let host = Host::two_socket_sriov();
    if with_tool {
        host.tree.file(SRIOV_MANAGE, "#!/bin/sh\n");
    }
    host
}

#[test]
fn sriov_manage_runs_when_the_host_has_it() {
    let host = nvidia_host(true);
    let probe = host.probe();
    assert!(has_sriov_manage(&probe));
    let runner = FakeRunner {
        status: Some(0),
        ..FakeRunner::default()
    };
    let out = set_nvidia_vfs(&probe, &runner, addr("0000:41:00.0"), true).unwrap();
    assert_eq!(out.route, SriovRoute::SriovManage);
    assert_eq!(
        *runner.ran.lock().unwrap(),
        vec![HostCommand::sriov_manage(
            SriovManageAction::Enable,
            addr("0000:41:00.0")
        )]
    );
    assert!(probe.writes().is_empty(), "sriov-manage does the writing");
    assert_eq!(out.num_vfs, 0, "the count is read back, not assumed");
}

#[test]
fn a_failed_sriov_manage_keeps_its_words() {
    let host = nvidia_host(true);
    let probe = host.probe();
    let runner = FakeRunner {
        status: Some(1),
        stderr: "Cannot obtain unbindLock for 0000:41:00.0".to_owned(),
        ..FakeRunner::default()
    };
    let err = set_nvidia_vfs(&probe, &runner, addr("0000:41:00.0"), true).unwrap_err();
    let text = sysfs::error_chain(&err);
    assert!(text.contains("sriov-manage -e 0000:41:00.0"), "{text}");
    assert!(text.contains("exit status 1"), "{text}");
    assert!(text.contains("Cannot obtain unbindLock"), "{text}");
}

#[test]
fn the_asked_state_already_there_runs_nothing() {
    let host = nvidia_host(true);
    let probe = host.probe();
    let runner = FakeRunner::default();
    let out = set_nvidia_vfs(&probe, &runner, addr("0000:41:00.0"), false).unwrap();
    assert_eq!(out.num_vfs, 0);
    assert!(runner.ran.lock().unwrap().is_empty());
}

#[test]
fn without_the_tool_the_plain_write_is_tried_first() {
    let host = nvidia_host(false);
    let probe = host.probe();
    let runner = FakeRunner::default();
    // A fixture takes the write (as a driver with sriov_configure would): nothing else runs.
    let out = set_nvidia_vfs(&probe, &runner, addr("0000:41:00.0"), true).unwrap();
    assert_eq!(out.route, SriovRoute::Sysfs);
    assert_eq!(
        probe.writes(),
        vec![(
            "/sys/bus/pci/devices/0000:41:00.0/sriov_numvfs".to_owned(),
            "16".to_owned()
        )]
    );
}

#[test]
fn on_enoent_the_sysfs_sequence_starts_with_the_override() {
    let host = nvidia_host(false);
    let probe = host.probe();
    assert!(!has_sriov_manage(&probe));
    probe.fail_write(
        "/sys/bus/pci/devices/0000:41:00.0/sriov_numvfs",
        libc::ENOENT,
    );
    let runner = FakeRunner::default();
    // A fixture does not react to binding: the PF never reaches pci-pf-stub, and that is
    // reported after the steps were written, with the PF handed back.
    let err = set_nvidia_vfs(&probe, &runner, addr("0000:41:00.0"), true).unwrap_err();
    assert!(matches!(err, VfioError::NotBoundTo { .. }), "{err}");
    assert!(runner.ran.lock().unwrap().is_empty());
    let writes = probe.writes();
    assert_eq!(
        writes[1],
        (
            "/sys/bus/pci/devices/0000:41:00.0/driver_override".to_owned(),
            "pci-pf-stub".to_owned()
        )
    );
}

/// The fixture's H200 as an interrupted sequence left it: on pci-pf-stub with two VFs (the
/// VFs unbound, as nothing can take an NVIDIA VF while its PF is off `nvidia`).
fn left_on_stub() -> Host {
    let host = Host::two_socket();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .sriov(16, &["0000:41:00.4", "0000:41:00.5"])
    .driver("pci-pf-stub")
    .attr("driver_override", "pci-pf-stub");
    host
}

#[test]
fn an_nvidia_pf_left_on_pci_pf_stub_is_an_interrupted_sequence() {
    let host = left_on_stub();
    assert_eq!(
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap(),
        StubState::Interrupted {
            driver: Some("pci-pf-stub".to_owned()),
            num_vfs: 2
        }
    );
    // Reading is all it does.
    let probe = host.probe();
    interrupted_sequence(&probe, addr("0000:41:00.0")).unwrap();
    assert!(probe.writes().is_empty());
}

#[test]
fn unbound_with_the_stub_override_or_with_vfs_is_interrupted_too() {
    // Killed between the unbind and the probe: no driver, the override still set.
    let host = Host::two_socket_sriov();
    std::fs::remove_file(host.backing("/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/driver"))
        .unwrap();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .attr("driver_override", "pci-pf-stub");
    assert!(matches!(
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap(),
        StubState::Interrupted {
            driver: None,
            num_vfs: 0
        }
    ));
    // Unbound, no override, no VFs: nothing says the sequence ran (an operator's unbind).
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    );
    assert_eq!(
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap(),
        StubState::Clear
    );
}

#[test]
fn a_pf_on_nvidia_or_not_nvidias_is_clear() {
    let host = Host::two_socket_sriov();
    assert_eq!(
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap(),
        StubState::Clear
    );
    // An Intel NIC's PF on pci-pf-stub is not NVIDIA's sequence.
    host.pci("pci0000:00/0000:00:1f.6", "0x8086", "0x15fa", "0x020000")
        .sriov(8, &[])
        .driver("pci-pf-stub")
        .attr("driver_override", "pci-pf-stub");
    assert_eq!(
        interrupted_sequence(&host.probe(), addr("0000:00:1f.6")).unwrap(),
        StubState::Clear
    );
}

#[test]
fn a_bound_vf_or_another_override_means_someone_else_uses_the_stub() {
    let host = left_on_stub();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.5",
        "0x10de",
        "0x2336",
        "0x030200",
    )
    .driver("vfio-pci");
    let StubState::Elsewhere(why) =
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap()
    else {
        panic!("a VF on vfio-pci is someone's")
    };
    assert!(why.contains("0000:41:00.5 is bound to vfio-pci"), "{why}");
    let host = left_on_stub();
    host.pci(
        "pci0000:40/0000:40:01.1/0000:41:00.0",
        "0x10de",
        "0x2335",
        "0x030200",
    )
    .attr("driver_override", "vfio-pci");
    assert!(matches!(
        interrupted_sequence(&host.probe(), addr("0000:41:00.0")).unwrap(),
        StubState::Elsewhere(why) if why.contains("vfio-pci")
    ));
}
