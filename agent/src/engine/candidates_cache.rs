//! What slice types mean on each GPU, kept while nothing changed the host: the candidates for
//! a type string, and the types one GPU offers.
//!
//! Resolving a type string (`resolve::resolve`) reads every GPU's PCI device (dozens of
//! sysfs reads each) and asks NVML for its MIG mode, MIG profiles or vGPU types: on the
//! simulated DGX A100 that was over half of a placement score's time, and every allocation
//! and warm-pool pass resolves its type again. The types a GPU offers (`gpu_detail::offered`,
//! in a GPU's detail, Placement's inventories and every telemetry poll's capacity gauges)
//! resolve each of its types the same way. The answers change only when the host does, so
//! they are kept under the inventory's rule: for at most [`MAX_AGE`], until a change of the
//! whole host (a device event, a reconcile, a change made under no device's lock), and a
//! change of one GPU (`host_changes`) makes only that GPU's part be asked again. A kept answer
//! only names candidates: creating a slice on one still validates and plans it against the
//! host as it is then.
//!
//! Refusals are not kept (they are cheap to find again and name the request's own fault), and
//! at most [`MAX_KEPT`] answers are, so a client sending many type names grows nothing.

use std::time::Instant;

use ids::PciAddress;

use super::error::Result;
use super::gpu_detail::offered;
use super::handle::Engine;
use super::host_changes::Since;
use super::kept_map::KeptByCount;
use super::model::{DeviceRef, SliceKind, SliceSpec};
use super::resolve::{Resolved, check_type, kind_on, resolve};

/// The most resolved (type, GPU) requests kept: a host offers a few dozen types.
pub(crate) const MAX_KEPT: usize = 256;

/// Resolved types by (type string, GPU asked for).
pub(crate) type CandidatesCache = KeptByCount<(String, Option<PciAddress>), Resolved>;

/// The types each GPU offers, with the kind each means there.
pub(crate) type OfferedCache = KeptByCount<PciAddress, Vec<(String, SliceKind)>>;

impl Engine {
    /// The candidates for a type ([`resolve`]), kept while nothing changed the host (see
    /// the module documentation).
    pub(super) fn kept_candidates(
        &self,
        slice_type: &str,
        only: Option<PciAddress>,
    ) -> Result<Vec<SliceSpec>> {
        let t = check_type(slice_type)?;
        let key = (t.to_owned(), only);
        // Counted before resolving: a change meanwhile leaves the answer unkept.
        let count = self.host().changes().now();
        let cache = &self.inner.candidates;
        if let Some(k) = cache.get(&key) {
            if k.count == count {
                return Ok(k.value.specs);
            }
            if let Some(r) = self.re_resolved(t, only, k.count, &k.value) {
                cache.keep(key, count, k.at, r.clone());
                return Ok(r.specs);
            }
        }
        let r = resolve(self.host(), slice_type, only)?;
        cache.keep(key, count, Instant::now(), r.clone());
        Ok(r.specs)
    }

    /// `was` (read after `count`) with the GPUs changed since asked again; `None` when only a
    /// whole resolution answers the same: the whole host changed, a changed device was not one
    /// of the GPUs asked, or a GPU asked again does not answer.
    fn re_resolved(
        &self,
        t: &str,
        only: Option<PciAddress>,
        count: u64,
        was: &Resolved,
    ) -> Option<Resolved> {
        let devices = match self.host().changes().since(count) {
            Since::Whole => return None,
            Since::Nothing => return Some(was.clone()),
            Since::Devices(devices) => devices,
        };
        if let Some(gpu) = only {
            // The one GPU asked changed: its refusals are the whole answer's.
            return (!devices.contains(&DeviceRef::Pci(gpu))).then(|| was.clone());
        }
        let mut now = was.clone();
        for device in devices {
            let DeviceRef::Pci(addr) = device else {
                return None;
            };
            if !was.gpus.contains(&addr) {
                return None;
            }
            let dev = self.host().gpu_identity(addr).ok()?;
            let kind = kind_on(self.host(), &dev, t).ok()?;
            replace_spec(&mut now.specs, addr, kind);
        }
        // No candidate left: the whole resolution words the refusal.
        (!now.specs.is_empty()).then_some(now)
    }

    /// The types `gpu` offers, as requests name them, with the kind each means there; kept
    /// while nothing changed the GPU (or the whole host).
    pub(crate) fn offered_types(&self, gpu: &inventory::Gpu) -> Vec<(String, SliceKind)> {
        let addr = gpu.pci_address;
        let count = self.host().changes().now();
        let cache = &self.inner.offered;
        // Kept under the count it was read after: a later change of this GPU shows against it.
        if let Some(k) = cache.get(&addr)
            && !(self.host().changes()).changed_since(k.count, &DeviceRef::Pci(addr))
        {
            return k.value;
        }
        let types = offered(self, gpu);
        cache.keep(addr, count, Instant::now(), types.clone());
        types
    }
}

/// Puts `gpu`'s candidate (or none) in its place in `specs`: GPUs in address order, then the
/// virtual mdev parents.
fn replace_spec(specs: &mut Vec<SliceSpec>, gpu: PciAddress, kind: Option<SliceKind>) {
    specs.retain(|s| s.gpu.pci() != Some(gpu));
    if let Some(kind) = kind {
        let at = specs
            .iter()
            .position(|s| s.gpu.pci().is_none_or(|a| a > gpu))
            .unwrap_or(specs.len());
        specs.insert(
            at,
            SliceSpec {
                gpu: gpu.into(),
                kind,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(gpu: &str) -> SliceSpec {
        SliceSpec {
            gpu: gpu.parse::<PciAddress>().unwrap().into(),
            kind: SliceKind::Passthrough,
        }
    }

    #[test]
    fn a_gpu_s_candidate_goes_back_in_address_order_before_the_virtual_parents() {
        let mtty = SliceSpec {
            gpu: DeviceRef::MdevParent("mtty".parse().unwrap()),
            kind: SliceKind::Passthrough,
        };
        let mut specs = vec![spec("0000:07:00.0"), spec("0000:bd:00.0"), mtty.clone()];
        let mid: PciAddress = "0000:0f:00.0".parse().unwrap();
        replace_spec(&mut specs, mid, Some(SliceKind::Passthrough));
        assert_eq!(
            specs,
            vec![
                spec("0000:07:00.0"),
                spec("0000:0f:00.0"),
                spec("0000:bd:00.0"),
                mtty.clone()
            ]
        );
        replace_spec(&mut specs, mid, None);
        assert_eq!(
            specs.len(),
            3,
            "a GPU that no longer offers the type drops out"
        );
        let last: PciAddress = "0000:c1:00.0".parse().unwrap();
        replace_spec(&mut specs, last, Some(SliceKind::Passthrough));
        assert_eq!(
            specs[2],
            spec("0000:c1:00.0"),
            "after every GPU, before mtty"
        );
        assert_eq!(specs[3], mtty);
    }
}
