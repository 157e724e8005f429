//! `gpu-probe`: a read-only look at a real NVIDIA host, compared with the simulator's model of
//! its GPUs.
//!
//! The probe changes nothing: it reaches NVML and sysfs only through [`reads`], whose traits
//! offer the read-only calls and nothing else (no MIG mode change, no instance, no sysfs write,
//! no `sriov-manage`). [`observe`] records what one GPU shows; [`model`] finds the simulator's
//! model of that GPU (a `sim` built-in profile) and observes a simulated host of it through the
//! same traits; [`compare`] sets the two side by side, item by item; [`report`] writes the JSON
//! report and its text summary. The format is documented in `tests/gpu/README.md`.

pub mod compare;
pub mod model;
pub mod nvml_extra;
pub mod observe;
pub mod paths;
pub mod pci_files;
pub mod reads;
pub mod report;
