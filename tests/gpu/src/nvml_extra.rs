//! Read-only NVML queries `gpu::Nvml` does not offer: each NVLink one by one, and the vGPU
//! types the PF says are creatable now. The real source is the driver's library through
//! `nvml-wrapper`; the simulator models neither, so its source answers `None` and the
//! comparison says "not modelled".
//!
//! The remote end's type is not read with `nvmlDeviceGetNvLinkRemoteDeviceType`: nvml-wrapper
//! 0.13's `NvLink::remote_device_type` passes NVML a temporary as the out-parameter and so always
//! answers `Unknown`. The probe says instead whether NVML knows the remote PCI address as one of
//! its GPUs (an NVSwitch is not one).

use nvml_wrapper::Nvml as Wrapper;
use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

/// An answer from nvml-wrapper: the value, or its error as text (`{"ok": …}` / `{"error": …}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply<T> {
    /// The call succeeded.
    Ok(T),
    /// The call failed.
    Error(String),
}

impl<T, E: std::fmt::Display> From<Result<T, E>> for Reply<T> {
    fn from(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Error(e.to_string()),
        }
    }
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkObservation {
    /// Link number.
    pub link: u32,
    /// `nvmlDeviceGetNvLinkState`: active or not; an NVML error as text.
    pub state: Reply<bool>,
    /// `nvmlDeviceGetNvLinkRemotePciInfo_v2` bus id of an active link's far end.
    pub remote_pci: Option<Reply<String>>,
    /// Whether NVML has a GPU at that bus id (`nvmlDeviceGetHandleByPciBusId_v2`).
    pub remote_is_gpu: Option<bool>,
}

/// The queries, by NVML device index.
pub trait NvmlExtra {
    /// Every link NVML answers for; `None` when the source does not model links.
    fn links(&self, index: u32) -> Option<Vec<LinkObservation>>;
    /// Names of the vGPU types creatable now (`nvmlDeviceGetCreatableVgpus`); `None` when the
    /// source does not model it.
    fn creatable_vgpu_types(&self, index: u32) -> Option<Reply<Vec<String>>>;
}

/// The simulator's answer: neither is modelled.
#[derive(Debug, Default)]
pub struct NotModelled;

impl NvmlExtra for NotModelled {
    fn links(&self, _: u32) -> Option<Vec<LinkObservation>> {
        None
    }
    fn creatable_vgpu_types(&self, _: u32) -> Option<Reply<Vec<String>>> {
        None
    }
}

/// The driver's NVML, opened a second time (NVML counts its initialisations).
pub struct RealExtra {
    nvml: Wrapper,
}

impl std::fmt::Debug for RealExtra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealExtra").finish_non_exhaustive()
    }
}

impl RealExtra {
    /// Opens NVML from `lib` (default: the library path's `libnvidia-ml.so.1`).
    pub fn open(lib: Option<&std::path::Path>) -> Result<Self, String> {
        let mut builder = Wrapper::builder();
        if let Some(lib) = lib {
            builder.lib_path(lib.as_os_str());
        }
        builder
            .init()
            .map(|nvml| Self { nvml })
            .map_err(|e| e.to_string())
    }

    fn link(&self, device: &nvml_wrapper::Device<'_>, link: u32) -> Option<LinkObservation> {
        let wrapper = device.link_wrapper_for(link);
        let state = match wrapper.is_active() {
            // No such link on this GPU: stop listing it.
            Err(nvml_wrapper::error::NvmlError::InvalidArg)
            | Err(nvml_wrapper::error::NvmlError::NotSupported) => return None,
            other => Reply::from(other),
        };
        let remote_pci = (state == Reply::Ok(true))
            .then(|| Reply::from(wrapper.remote_pci_info().map(|pci| pci.bus_id)));
        let remote_is_gpu = match &remote_pci {
            Some(Reply::Ok(bus)) => Some(self.nvml.device_by_pci_bus_id(bus.as_str()).is_ok()),
            _ => None,
        };
        Some(LinkObservation {
            link,
            state,
            remote_pci,
            remote_is_gpu,
        })
    }
}

impl NvmlExtra for RealExtra {
    fn links(&self, index: u32) -> Option<Vec<LinkObservation>> {
        let device = self.nvml.device_by_index(index).ok()?;
        Some(
            (0..sys::NVML_NVLINK_MAX_LINKS)
                .filter_map(|link| self.link(&device, link))
                .collect(),
        )
    }

    fn creatable_vgpu_types(&self, index: u32) -> Option<Reply<Vec<String>>> {
        let device = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => return Some(Reply::Error(e.to_string())),
        };
        let names = device.vgpu_creatable_types().and_then(|types| {
            types
                .iter()
                .map(nvml_wrapper::vgpu::VgpuType::name)
                .collect::<Result<Vec<_>, _>>()
        });
        Some(names.into())
    }
}
