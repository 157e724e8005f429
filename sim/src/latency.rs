//! A latency model for the device operations whose duration decides how long a VM waits for
//! its slice: off by default (tests stay fast), on when `VGPUD_SIM_LATENCY` holds a scale
//! factor (`1` = the published durations, `0.01` = a hundredth of them, for benchmarks).
//!
//! The pause runs on the calling thread, outside the model's locks, so an operation on one
//! GPU never delays an unrelated request. Each value says where it comes from; the ones marked
//! *estimate* have no published per-call measurement yet and should be replaced by one.

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that turns the model on, with its scale factor.
pub const ENV: &str = "VGPUD_SIM_LATENCY";

/// A device operation the model times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceOp {
    /// `nvmlDeviceCreateGpuInstanceWithPlacement`.
    GiCreate,
    /// `nvmlGpuInstanceDestroy`.
    GiDestroy,
    /// `nvmlGpuInstanceCreateComputeInstance`.
    CiCreate,
    /// `nvmlComputeInstanceDestroy`.
    CiDestroy,
    /// A non-zero write to `sriov_numvfs` (VF enable, one GPU).
    VfEnable,
    /// A write to a VF's `nvidia/current_vgpu_type`.
    VgpuTypeWrite,
    /// A `bind` write to vfio-pci.
    VfioBind,
}

impl DeviceOp {
    /// The duration at scale 1.
    pub fn published(self) -> Duration {
        match self {
            // Estimate: no published per-call figure found (NVIDIA's MIG user guide gives none);
            // one second per GPU-instance create, half for the rest, pending a measurement.
            DeviceOp::GiCreate => Duration::from_millis(1000),
            DeviceOp::GiDestroy | DeviceOp::CiCreate => Duration::from_millis(500),
            DeviceOp::CiDestroy => Duration::from_millis(200),
            // NVIDIA/gpu-operator PR #2002 (2025-12): `sriov-manage -e` enabling 160 VFs on the
            // 8 GPUs of a DGX A100, one GPU after another, "can take 30+ seconds": 30 s / 8.
            DeviceOp::VfEnable => Duration::from_millis(3750),
            // Estimate: NVIDIA/gpu-driver-container PR #29 waits 15-30 s for the vGPU manager
            // to settle after load, a one-off; the per-VF type write itself is unmeasured.
            DeviceOp::VgpuTypeWrite => Duration::from_millis(500),
            // PCIe Base Spec 6.6.2: software waits 100 ms after a function-level reset, which
            // vfio-pci issues when it takes the device (the kernel's pcie_flr() sleeps 100 ms);
            // kata-containers issue #11708's dmesg shows "resetting" to "reset done" in 106 ms.
            DeviceOp::VfioBind => Duration::from_millis(106),
        }
    }
}

/// The model: published durations times a scale factor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    scale: f64,
}

impl Latency {
    /// The model at `scale`; `None` for a scale that is not a finite positive number.
    pub fn with_scale(scale: f64) -> Option<Latency> {
        (scale.is_finite() && scale > 0.0).then_some(Latency { scale })
    }

    /// The model `VGPUD_SIM_LATENCY`'s text asks for (`None`: off).
    pub fn parse(text: &str) -> Option<Latency> {
        text.trim().parse().ok().and_then(Latency::with_scale)
    }

    /// How long `op` takes under this model.
    pub fn duration(&self, op: DeviceOp) -> Duration {
        op.published().mul_f64(self.scale)
    }
}

/// The model of this process, read from the environment once.
pub fn current() -> Option<Latency> {
    static MODEL: OnceLock<Option<Latency>> = OnceLock::new();
    *MODEL.get_or_init(|| std::env::var(ENV).ok().as_deref().and_then(Latency::parse))
}

/// Sleeps for `op` on the calling thread when the model is on. Callers hold no model lock.
pub(crate) fn pause(op: DeviceOp) {
    if let Some(m) = current() {
        std::thread::sleep(m.duration(op));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_scale_multiplies_every_published_value() {
        let m = Latency::parse("0.01").unwrap();
        assert_eq!(
            m.duration(DeviceOp::VfEnable),
            Duration::from_micros(37_500)
        );
        assert_eq!(m.duration(DeviceOp::VfioBind), Duration::from_micros(1_060));
        assert_eq!(m.duration(DeviceOp::GiCreate), Duration::from_millis(10));
    }

    #[test]
    fn a_bad_scale_turns_the_model_off() {
        for text in ["", "0", "-1", "nan", "inf", "fast"] {
            assert_eq!(Latency::parse(text), None, "{text:?}");
        }
    }
}
