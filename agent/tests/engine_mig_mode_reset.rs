//! A MIG-backed layout on an NVIDIA vGPU host (issue 13, fact 4): the driver refuses a MIG mode
//! change while the GPU has VFs and applies it only at a GPU reset, so the layout goes VFs off
//! → MIG mode (pending reset) → reset (the operator's; the simulator's `reset_gpu`) → VFs on →
//! GPU instances → vGPU types, and says which step it waits for.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use agent::engine::{Identity, LayoutState};
use sim::SimHost;
use testkit::*;

const H200: &str = "0000:18:00.0";

/// `sriov-manage -e` by hand (an operator's earlier set-up): every VF on, all on `nvidia`.
fn sriov_manage_enable(h: &SimHost) {
    let dev = |a: &str| format!("/sys/bus/pci/devices/{H200}/{a}");
    write(
        h,
        &format!("/proc/driver/nvidia/gpus/{H200}/unbindLock"),
        "1",
    );
    write(h, &dev("driver_override"), "pci-pf-stub");
    write(h, &dev("driver/unbind"), H200);
    write(h, "/sys/bus/pci/drivers_probe", H200);
    write(h, &dev("sriov_numvfs"), "32");
    write(h, &dev("driver_override"), "\n");
    write(h, &dev("driver/unbind"), H200);
    write(h, "/sys/bus/pci/drivers/nvidia/bind", H200);
    for i in 0..32 {
        let vf = sysfs::SysfsExt::link_name(
            fs(h).as_ref(),
            std::path::Path::new(&dev(&format!("virtfn{i}"))),
        )
        .unwrap();
        write(h, "/sys/bus/pci/drivers/nvidia/bind", &vf);
    }
}

#[test]
fn a_mig_backed_layout_waits_for_a_reset_then_makes_vfs_instances_and_types() {
    let h = sim("hgx-h200-vgpu");
    sriov_manage_enable(&h);
    assert_eq!(numvfs(&h, H200), 32);
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());

    // Step 1: VFs off, MIG mode asked for, pending a reset the layout names.
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-1-18C", 2)])])
        .unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons.iter().any(|r| r.contains("reset required")
            && r.contains("nvidia-smi -r -i 0")
            && r.contains("MIG mode change waits for a GPU reset")),
        "{st:?}"
    );
    assert_eq!(
        numvfs(&h, H200),
        0,
        "the VFs were turned off for the change"
    );
    assert_eq!(mig_mode(&h, H200), (false, true));
    assert!(e.slices().is_empty());

    // Applying again waits the same way: nothing else changes.
    let report = e.reconcile().unwrap();
    assert_eq!(report.layouts[0].state, LayoutState::Pending);
    assert_eq!((numvfs(&h, H200), mig_mode(&h, H200)), (0, (false, true)));

    // Step 2: the operator resets the GPU (`vgpud sim reset-gpu` here).
    h.reset_gpu(addr(H200)).unwrap();
    assert_eq!(mig_mode(&h, H200), (true, true));
    assert_eq!(numvfs(&h, H200), 0);
    assert!(h.nvml().gpu_instances(0).unwrap().is_empty());

    // Step 3: the next reconcile finishes it: VFs on, GPU instances, types.
    let report = e.reconcile().unwrap();
    assert_eq!(report.layouts[0].state, LayoutState::Applied, "{report:?}");
    assert_eq!(numvfs(&h, H200), 32);
    let gis = h.nvml().gpu_instances(0).unwrap();
    assert_eq!(gis.len(), 2, "{gis:?}");
    let slices = e.slices();
    assert_eq!(slices.len(), 2);
    for s in &slices {
        let Identity::MigVgpu { address: vf, .. } = &s.identity else {
            panic!("{:?}", s.identity)
        };
        assert_eq!(
            read(
                &h,
                &format!("/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type")
            ),
            "1414"
        );
    }
}

#[test]
fn vfs_in_use_keep_the_mig_mode_change_waiting() {
    let h = sim("hgx-h200-vgpu");
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&h, dir.path());
    // A time-sliced vGPU of someone's VM: its VF is in use.
    let held = e
        .allocate(request("vm1", "NVIDIA H200X-35C", Some(H200)))
        .unwrap();
    assert_eq!(numvfs(&h, H200), 32);
    let view = e
        .set_layouts(vec![gpu_layout(H200, &[("NVIDIA H200X-1-18C", 1)])])
        .unwrap();
    let st = &view.status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons
            .iter()
            .any(|r| r.contains("allocated to \"vm1\"")),
        "{st:?}"
    );
    assert_eq!(numvfs(&h, H200), 32, "VFs stay while one is allocated");
    assert_eq!(mig_mode(&h, H200), (false, false), "nothing asked");
    // Released: VFs off, the change pending a reset.
    e.release(held.id).unwrap();
    let st = &e.layouts().status[0];
    assert_eq!(st.state, LayoutState::Pending, "{st:?}");
    assert!(
        st.reasons.iter().any(|r| r.contains("reset required")),
        "{st:?}"
    );
    assert_eq!((numvfs(&h, H200), mig_mode(&h, H200)), (0, (false, true)));
}
