//! Hot-plug on the real kernel: the igb PF is removed through sysfs (`echo 1 > …/remove`) and
//! brought back by a bus rescan (`echo 1 > /sys/bus/pci/rescan`), and the netlink monitor the
//! daemon uses must see both. Like the daemon, each burst of device events is followed by a
//! reconcile: after the removal the PF's allocated sriov-vf slice is failed with the reason, a
//! `device_removed` event names it and the allocation stays; after the rescan `device_added`
//! comes and the slice is re-created (its VF back on vfio-pci) and still allocated.
//!
//! Runs on a clean PF (after phase `verify`, which hands everything back), with its own state
//! directory. The same phase runs on the simulator (`rig-checks sim-hotplug`) and its
//! observations (the uevents for the PF and the slice's VF, the slice's states) must equal the
//! kernel's.

use std::path::Path;
use std::time::{Duration, Instant};

use agent::engine::{
    CreateSlice, Engine, EngineConfig, Event, OwnerRequest, Slice, SliceId, SliceKind, SliceSpec,
    SliceState,
};
use hotplug::{Action, Device, DeviceEvent, Group, Subscription};
use ids::PciAddress;
use inventory::HostAccess;
use sysfs::Sysfs;
use tokio::sync::broadcast;

use crate::Report;

/// The daemon's coalescing (vgpud/src/daemon_hotplug.rs).
const QUIET: Duration = Duration::from_millis(250);
const LONGEST: Duration = Duration::from_secs(2);
/// Software emulation is slow: how long the kernel may take to finish a removal or a rescan.
const SETTLE: Duration = Duration::from_secs(60);

fn slice_now(engine: &Engine, id: SliceId) -> Option<Slice> {
    engine.slice(id).ok()
}

fn drain(events: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

/// Receives bursts until one holds `want` for the PF (or the time is up), reconciling after
/// each burst as the daemon does, until `done` holds. Returns the device events seen.
async fn follow(
    sub: &mut Subscription,
    engine: &Engine,
    want: &dyn Fn(&DeviceEvent) -> bool,
    done: &dyn Fn(&Engine) -> bool,
) -> (Vec<DeviceEvent>, bool) {
    let deadline = Instant::now() + SETTLE;
    let mut seen = Vec::new();
    let mut wanted = false;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let batch = hotplug::next_batch(&mut sub.events, QUIET, LONGEST);
        let Ok(Some(batch)) = tokio::time::timeout(left, batch).await else {
            break;
        };
        wanted |= batch.iter().any(want);
        seen.extend(batch);
        if let Err(e) = engine.reconcile() {
            println!("kernel: (reconcile after device events failed: {e})");
        }
        if wanted && done(engine) {
            return (seen, true);
        }
    }
    (seen, false)
}

fn describe(events: &[DeviceEvent]) -> String {
    let mut s: Vec<String> = events.iter().take(12).map(ToString::to_string).collect();
    if events.len() > 12 {
        s.push(format!("… {} in all", events.len()));
    }
    s.join("; ")
}

/// The PF's and the slice's VF's events, in order, named by role (`VF unbind`, `PF add`, …).
fn roles(events: &[DeviceEvent], pf: PciAddress, vf: Option<PciAddress>) -> String {
    events
        .iter()
        .filter_map(|e| {
            let role = match &e.device {
                Device::Pci(a) if *a == pf => "PF",
                Device::Pci(a) if Some(*a) == vf => "VF",
                _ => return None,
            };
            let action = match &e.action {
                Action::Added => "add".to_owned(),
                Action::Removed => "remove".to_owned(),
                Action::Bound { driver } => format!("bind {driver}"),
                Action::Unbound => "unbind".to_owned(),
                Action::Changed => "change".to_owned(),
            };
            Some(format!("{role} {action}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The phase on a host (the rig's guest, or the simulator of it).
pub fn run(
    access: HostAccess,
    pf: PciAddress,
    state_dir: &Path,
    r: &mut Report,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(phase(access, pf, state_dir, r))
}

async fn phase(
    access: HostAccess,
    pf: PciAddress,
    state_dir: &Path,
    r: &mut Report,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(state_dir)?;
    let source = access.events.clone();
    let fs_handle = access.sysfs.clone();
    let fs: &dyn Sysfs = fs_handle.as_ref();
    let on_kernel = access.source == "host:/";
    let engine = Engine::open(EngineConfig::new(state_dir, access))?;
    engine.reconcile()?;
    if on_kernel {
        r.check(
            "hotplug: no systemd-udevd in the guest, so the kernel's netlink group is used",
            Group::detect() == Group::Kernel,
            format!("{:?}", Group::detect()),
        );
    }
    let mut sub = match source.subscribe() {
        Ok(s) => s,
        Err(e) => {
            r.check(
                "hotplug: the netlink monitor opens",
                false,
                format!("{e:#}", e = anyhow::Error::from(e)),
            );
            return Ok(());
        }
    };
    r.check(
        "hotplug: the netlink monitor opens",
        true,
        sub.origin.clone(),
    );

    let made = engine.create_slice(CreateSlice {
        spec: SliceSpec {
            gpu: pf.into(),
            kind: SliceKind::SriovVf,
        },
        owner: Some(OwnerRequest {
            consumer: "rig-hotplug".into(),
            vm: None,
        }),
    });
    let slice = match made {
        Ok(s) if s.state == SliceState::Allocated => s,
        other => {
            r.check(
                "hotplug: an allocated sriov-vf slice on the PF",
                false,
                format!("{:?}", other.map(|s| s.state).map_err(|e| e.to_string())),
            );
            return Ok(());
        }
    };
    let vf = slice.handles.pci_address;
    r.check(
        "hotplug: an allocated sriov-vf slice on the PF",
        true,
        format!("VF {vf:?}"),
    );
    // Creating it emitted events of its own (VFs enabled, one bound to vfio-pci): let them pass.
    while tokio::time::timeout(
        Duration::from_secs(3),
        hotplug::next_batch(&mut sub.events, QUIET, LONGEST),
    )
    .await
    .is_ok_and(|b| b.is_some())
    {}
    let mut engine_events = engine.subscribe();

    fs.write(
        Path::new(&format!("/sys/bus/pci/devices/{pf}/remove")),
        b"1",
    )?;
    let removed_pf = |e: &DeviceEvent| e.action == Action::Removed && e.device == Device::Pci(pf);
    let failed = |e: &Engine| slice_now(e, slice.id).is_some_and(|s| s.state == SliceState::Failed);
    let (seen, ok) = follow(&mut sub, &engine, &removed_pf, &failed).await;
    r.check(
        "hotplug: removing the PF through sysfs is seen by the netlink monitor",
        seen.iter().any(removed_pf),
        describe(&seen),
    );
    // The kernel removes the PF's VFs (igb disables SR-IOV in its remove) before the PF.
    let position = |d: PciAddress| {
        seen.iter()
            .position(|e| e.action == Action::Removed && e.device == Device::Pci(d))
    };
    let vf_first = vf
        .and_then(position)
        .zip(position(pf))
        .is_some_and(|(v, p)| v < p);
    r.check(
        "hotplug: the slice's VF is removed before the PF",
        vf_first,
        format!("{vf:?}"),
    );
    r.observe(
        "hotplug: remove: uevents of the PF and the slice's VF",
        roles(&seen, pf, vf),
    );
    let now = slice_now(&engine, slice.id);
    r.observe(
        "hotplug: remove: the slice",
        format!("{:?}", now.as_ref().map(|s| (&s.state, &s.reason))),
    );
    let why = format!("GPU {pf} was removed from the PCI bus");
    r.check(
        "hotplug: after the removal the slice is failed with the reason",
        ok && now
            .as_ref()
            .is_some_and(|s| s.reason.as_deref() == Some(why.as_str())),
        format!("{:?}", now.as_ref().map(|s| (&s.state, &s.reason))),
    );
    let raised = drain(&mut engine_events).into_iter().any(|e| {
        matches!(&e, Event::DeviceRemoved { device, slices, .. }
            if device.pci() == Some(pf) && slices == &vec![slice.id])
    });
    r.check(
        "hotplug: a device_removed event names the PF and the slice",
        raised,
        "",
    );
    let kept = engine
        .allocations()
        .iter()
        .any(|a| a.consumer == "rig-hotplug" && a.slices == vec![slice.id]);
    r.check(
        "hotplug: the allocation is kept while the PF is gone",
        kept,
        "",
    );

    fs.write(Path::new("/sys/bus/pci/rescan"), b"1")?;
    let added_pf = |e: &DeviceEvent| e.action == Action::Added && e.device == Device::Pci(pf);
    let back =
        |e: &Engine| slice_now(e, slice.id).is_some_and(|s| s.state == SliceState::Allocated);
    let (seen, ok) = follow(&mut sub, &engine, &added_pf, &back).await;
    r.check(
        "hotplug: the rescan's re-added PF is seen by the netlink monitor",
        seen.iter().any(added_pf),
        describe(&seen),
    );
    let bound = seen.iter().any(|e| {
        e.device == Device::Pci(pf)
            && matches!(&e.action, Action::Bound { driver } if driver == "igb")
    });
    r.check("hotplug: and igb binding it again", bound, "");
    r.observe("hotplug: rescan: uevents of the PF", roles(&seen, pf, None));
    let now = slice_now(&engine, slice.id);
    let on_vfio = now
        .as_ref()
        .and_then(|s| s.handles.pci_address)
        .is_some_and(|v| {
            vfio::read_device(fs, v).is_ok_and(|d| d.driver.as_deref() == Some(vfio::VFIO_PCI))
        });
    r.check(
        "hotplug: after the rescan the slice is re-created on vfio-pci and still allocated",
        ok && on_vfio,
        format!(
            "{:?}",
            now.as_ref()
                .map(|s| (&s.state, s.handles.pci_address, &s.reason))
        ),
    );
    r.observe(
        "hotplug: rescan: the slice",
        format!(
            "{:?} on vfio-pci {on_vfio}",
            now.as_ref()
                .map(|s| (&s.state, s.handles.pci_address == vf))
        ),
    );
    let raised = drain(&mut engine_events).into_iter().any(|e| {
        matches!(&e, Event::DeviceAdded { device, slices } if device.pci() == Some(pf) && slices == &vec![slice.id])
    });
    r.check(
        "hotplug: a device_added event names the PF and the slice",
        raised,
        "",
    );

    // Hand the PF back as it was.
    if let Some(a) = engine
        .allocations()
        .into_iter()
        .find(|a| a.consumer == "rig-hotplug")
    {
        let cleaned = engine
            .release(a.id)
            .and_then(|_| engine.destroy_slice(slice.id));
        r.check(
            "hotplug: release and destroy afterwards",
            cleaned.is_ok(),
            format!("{cleaned:?}"),
        );
    }
    Ok(())
}
