//! NVLink peers on the real library: the GPUs at the far end of a link, and every GPU on the
//! same NVSwitch fabric.
//!
//! On HGX/DGX boards each NVLink ends at an NVSwitch (`nvmlDeviceGetNvLinkRemoteDeviceType` says
//! `SWITCH`) and no link names a GPU, so following links alone finds no peer at all. The fabric
//! rule ([`NvlinkFabric`]) is shared with the simulator through [`fabric_peers`].

use ids::PciAddress;
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings as sys;

use super::{NvmlLibrary, is_not_applicable, parse_bus_id, raw, wrap};
use crate::nvml::{NvlinkFabric, NvmlCode, NvmlError, NvmlResult, fabric_peers};

/// What an active NVLink reaches.
enum LinkEnd {
    /// An NVSwitch.
    Switch,
    /// A GPU at this address.
    Gpu(PciAddress),
    /// Something else (an IBM NPU, a GPU NVML does not manage, an address that does not parse).
    Other,
}

/// The active links of one GPU: GPUs reached directly, and whether any link ends at a switch.
#[derive(Default)]
struct Links {
    gpus: Vec<PciAddress>,
    switch: bool,
}

impl NvmlLibrary {
    /// [`crate::Nvml::nvlink_peers`]: direct GPU peers plus the GPUs on this GPU's fabric.
    pub(super) fn nvlink_peers_of(&self, index: u32) -> NvmlResult<Vec<PciAddress>> {
        let device = self.device(index)?;
        let links = self.links(&device)?;
        let mut peers = links.gpus;
        let own = fabric(&device, links.switch)?;
        if matches!(
            own,
            NvlinkFabric::HostSwitches | NvlinkFabric::Registered { .. }
        ) {
            peers.extend(fabric_peers(own, &self.other_fabrics(index)?));
        }
        peers.sort();
        peers.dedup();
        Ok(peers)
    }

    /// Every active link of `device`, followed.
    fn links(&self, device: &Device<'_>) -> NvmlResult<Links> {
        let mut out = Links::default();
        for link in 0..sys::NVML_NVLINK_MAX_LINKS {
            let active = device.link_wrapper_for(link).is_active();
            let end = match active.map_err(wrap("nvmlDeviceGetNvLinkState")) {
                Ok(true) => self.link_end(device, link),
                Ok(false) => continue,
                Err(e) => Err(e),
            };
            match end {
                Ok(LinkEnd::Switch) => out.switch = true,
                Ok(LinkEnd::Gpu(a)) => out.gpus.push(a),
                Ok(LinkEnd::Other) => {}
                // No NVLink on this GPU, fewer links than the maximum, or a link NVML cannot
                // describe.
                Err(e) if is_not_applicable(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// What the far end of an active link is.
    fn link_end(&self, device: &Device<'_>, link: u32) -> NvmlResult<LinkEnd> {
        // The type first: an NVSwitch's PCI info is not worth reading (nor trusting).
        let kind = raw::nvlink_remote_device_type(device, link);
        if kind == Ok(raw::NVLINK_REMOTE_SWITCH) {
            return Ok(LinkEnd::Switch);
        }
        let remote = device
            .link_wrapper_for(link)
            .remote_pci_info()
            .map_err(wrap("nvmlDeviceGetNvLinkRemotePciInfo_v2"))?;
        let is_gpu = match kind {
            Ok(raw::NVLINK_REMOTE_GPU) => true,
            // Unknown type, or a driver without the query: a GPU is one NVML knows.
            _ => self
                .nvml
                .device_by_pci_bus_id(remote.bus_id.as_str())
                .is_ok(),
        };
        if !is_gpu {
            return Ok(LinkEnd::Other);
        }
        // A peer whose address does not parse is logged and left out, not fatal to the rest.
        Ok(
            parse_bus_id("nvmlDeviceGetNvLinkRemotePciInfo_v2", &remote.bus_id)
                .map_or(LinkEnd::Other, LinkEnd::Gpu),
        )
    }

    /// The fabric of every other GPU NVML manages. A GPU that cannot be read is left out (it is
    /// no peer this time) rather than failing the answer for this one.
    fn other_fabrics(&self, index: u32) -> NvmlResult<Vec<(PciAddress, NvlinkFabric)>> {
        let count = self
            .nvml
            .device_count()
            .map_err(wrap("nvmlDeviceGetCount_v2"))?;
        let mut out = Vec::new();
        for other in (0..count).filter(|i| *i != index) {
            match self.fabric_of_index(other) {
                Ok(entry) => out.push(entry),
                Err(e) => tracing::warn!(index = other, error = %e, "NVLink fabric unknown"),
            }
        }
        Ok(out)
    }

    fn fabric_of_index(&self, index: u32) -> NvmlResult<(PciAddress, NvlinkFabric)> {
        const PCI: &str = "nvmlDeviceGetPciInfo_v3";
        let device = self.device(index)?;
        let bus_id = device.pci_info().map_err(wrap(PCI))?.bus_id;
        let address = parse_bus_id(PCI, &bus_id)?;
        let links = self.links(&device)?;
        Ok((address, fabric(&device, links.switch)?))
    }
}

/// The fabric of a GPU with (or without) active links to NVSwitches. Without fabric info (a
/// pre-Hopper GPU, an older driver: `NOT_SUPPORTED` or no symbol) switch links join the host's
/// one fabric.
fn fabric(device: &Device<'_>, switch_links: bool) -> NvmlResult<NvlinkFabric> {
    if !switch_links {
        return Ok(NvlinkFabric::NoSwitch);
    }
    match raw::gpu_fabric_info(device) {
        Ok(f) => Ok(f),
        Err(e) if no_fabric_info(&e) => Ok(NvlinkFabric::HostSwitches),
        Err(e) => Err(e),
    }
}

fn no_fabric_info(e: &NvmlError) -> bool {
    e.code == NvmlCode::NOT_SUPPORTED || e.code == NvmlCode::FUNCTION_NOT_FOUND
}
