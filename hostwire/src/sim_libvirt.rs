//! libvirt for a simulated host: its test driver, given a host file that describes the simulated
//! NUMA nodes, CPUs, memory and GPUs (and the demo VM), so VM pinning is checked against the
//! topology the scheduler sees.
//!
//! libvirt's test driver reports no NUMA cells in its capabilities for a custom host file, so the
//! topology written to the file is also handed to pinning ([`agent::pinning::PinningConfig`]'s
//! `topology`), read back from the file as libvirt reads it.

use std::path::Path;

use agent::pinning::{PinningConfig, topology_of};
use agent::service::ServiceOptions;
use ids::NumaNodeId;
use inventory::HostInventory;
use numa::CpuSet;

/// The host file's name in the daemon's state directory.
pub const TEST_HOST_FILE: &str = "libvirt-test-host.xml";

/// Writes a libvirt test-driver host file for a (simulated) host: its NUMA nodes, CPUs and
/// memory, its GPUs as PCI node devices, and the demo VM; returns the `test:///` URI.
pub fn write_test_host(
    inventory: &HostInventory,
    reserved: &CpuSet,
    path: &Path,
) -> anyhow::Result<String> {
    let topology = topology_of(inventory, reserved).map_err(|e| anyhow::anyhow!("{e}"))?;
    let gpus: Vec<vmpin::testhost::TestGpu> = inventory
        .gpus
        .iter()
        .map(|g| vmpin::testhost::TestGpu {
            address: g.pci_address,
            node: g.numa_node.unwrap_or(NumaNodeId(0)),
            vendor_id: hex16(&g.vendor_id),
            device_id: hex16(&g.device_id),
            product: g.model.clone(),
        })
        .collect();
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(vmpin::testhost::write_host_file(
        &path, &topology, &gpus, true,
    )?)
}

/// Points VM pinning at libvirt's test driver over a host file of the simulated host, written to
/// `<state_dir>/libvirt-test-host.xml`; the configured reserved CPUs, memory mode and guest NUMA
/// stay. A simulated host without NUMA nodes has nothing to pin to: pinning is turned off, with a
/// warning.
pub fn pin_to_test_host(options: &mut ServiceOptions, inventory: &HostInventory, state_dir: &Path) {
    let reserved = options
        .pinning
        .as_ref()
        .map(|p| p.reserved_cpus.clone())
        .unwrap_or_default();
    let path = state_dir.join(TEST_HOST_FILE);
    let opened = write_test_host(inventory, &reserved, &path).and_then(|uri| {
        let topology = vmpin::testhost::read_topology(&path)?;
        Ok((uri, topology))
    });
    match opened {
        Ok((uri, topology)) => {
            let mut pinning = options
                .pinning
                .take()
                .unwrap_or_else(|| PinningConfig::new(&uri));
            pinning.uri = uri;
            pinning.topology = Some(topology);
            options.pinning = Some(pinning);
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "no libvirt test host for the simulated host; VM pinning is off");
            options.pinning = None;
        }
    }
}

fn hex16(s: &str) -> u16 {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}
