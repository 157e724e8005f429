//! The host-access implementations of the real host (or a tree shaped like one) and of a
//! simulated host.

use std::path::Path;
use std::sync::Arc;

use inventory::HostAccess;
use sim::SimHost;
use sysfs::RealSysfs;

use crate::sim_events::SimEvents;

/// Access to a simulated host.
pub fn sim_access(sim: &SimHost) -> HostAccess {
    let nvml = sim.nvml();
    // A simulated host without NVIDIA GPUs is like a real one without the driver: NVML is absent,
    // which is normal, rather than a library that answers with errors.
    let nvml = match nvml.driver_version() {
        Err(e) if e.code == gpu::NvmlCode::DRIVER_NOT_LOADED => Err(e.to_string()),
        _ => Ok(nvml),
    };
    HostAccess {
        source: format!("sim:{}", sim.profile_name()),
        sysfs: sim.sysfs(),
        nvml,
        amd: Ok((sim.amd(), "simulated AMD SMI".to_owned())),
        hostname: Some(sim.hostname()),
        events: Arc::new(SimEvents::new(sim.clone())),
    }
}

/// Access to the real host (or a tree shaped like one under `root`).
pub fn real_access(root: &Path) -> HostAccess {
    let fs: Arc<dyn sysfs::Sysfs> = Arc::new(RealSysfs::new(root));
    let on_host = root == Path::new("/");
    // The vendor libraries describe the machine we run on; pairing them with a fixture tree
    // under another root would mix two hosts.
    let nvml: Result<Arc<dyn gpu::Nvml>, String> = if on_host {
        gpu::nvml_real::NvmlLibrary::load()
            .map(|n| Arc::new(n) as Arc<dyn gpu::Nvml>)
            .map_err(|e| e.to_string())
    } else {
        Err(format!("not loaded for a tree under {}", root.display()))
    };
    // AMD SMI is optional: the sysfs backend answers on every host, the library only adds to it.
    let amd = Ok(if on_host {
        gpu::amd_backend::amd_backend(fs.clone())
    } else {
        (
            Arc::new(gpu::amd_sysfs::AmdSysfs::new(fs.clone())) as Arc<dyn gpu::AmdSmi>,
            "sysfs".to_owned(),
        )
    });
    let source = if on_host {
        "host:/".to_owned()
    } else {
        format!("root:{}", root.display())
    };
    let events: Arc<dyn hotplug::EventSource> = if on_host {
        Arc::new(hotplug::NetlinkSource::detect())
    } else {
        Arc::new(hotplug::Quiet::new(format!(
            "no kernel announces changes to a tree under {}",
            root.display()
        )))
    };
    HostAccess {
        source,
        sysfs: fs,
        nvml,
        amd,
        hostname: None,
        events,
    }
}
