//! What slice types mean on each GPU, kept while nothing changed the host: the candidates for
//! a type string, and the types one GPU offers.
//!
//! Resolving a type string (`resolve::candidates`) reads every GPU's PCI device (dozens of
//! sysfs reads each) and asks NVML for its MIG mode, MIG profiles or vGPU types: on the
//! simulated DGX A100 that was over half of a placement score's time, and every allocation
//! and warm-pool pass resolves its type again. The types a GPU offers (`gpu_detail::offered`,
//! in a GPU's detail, Placement's inventories and every telemetry poll's capacity gauges)
//! resolve each of its types the same way. The answers change only when the host does, so
//! they are kept under the inventory's rule (`kept_map`: until the engine changes the host, a
//! device event or a reconcile, at most 5 s). A kept answer only names candidates: creating a
//! slice on one still validates and plans it against the host as it is then.
//!
//! Refusals are not kept (they are cheap to find again and name the request's own fault), and
//! at most [`MAX_KEPT`] answers are, so a client sending many type names grows nothing.

use ids::PciAddress;

use super::error::Result;
use super::gpu_detail::offered;
use super::handle::Engine;
use super::kept_map::KeptMap;
use super::model::{SliceKind, SliceSpec};
use super::resolve::{candidates, check_type};

/// The most resolved (type, GPU) requests kept: a host offers a few dozen types.
pub(crate) const MAX_KEPT: usize = 256;

/// Resolved types by (type string, GPU asked for).
pub(crate) type CandidatesCache = KeptMap<u64, (String, Option<PciAddress>), Vec<SliceSpec>>;

/// The types each GPU offers, with the kind each means there.
pub(crate) type OfferedCache = KeptMap<u64, PciAddress, Vec<(String, SliceKind)>>;

impl Engine {
    /// [`candidates`], kept while nothing changed the host (see the module documentation).
    pub(super) fn kept_candidates(
        &self,
        slice_type: &str,
        only: Option<PciAddress>,
    ) -> Result<Vec<SliceSpec>> {
        let key = (check_type(slice_type)?.to_owned(), only);
        // Counted before resolving: a change meanwhile leaves the answer unkept.
        let epoch = self.host().changes().now();
        let cache = &self.inner.candidates;
        if let Some(specs) = cache.get(epoch, &key, |_| true) {
            return Ok(specs);
        }
        let specs = candidates(self.host(), slice_type, only)?;
        cache.keep(epoch, key, specs.clone());
        Ok(specs)
    }

    /// The types `gpu` offers, as requests name them, with the kind each means there; kept
    /// while nothing changed the host.
    pub(crate) fn offered_types(&self, gpu: &inventory::Gpu) -> Vec<(String, SliceKind)> {
        let epoch = self.host().changes().now();
        let cache = &self.inner.offered;
        if let Some(types) = cache.get(epoch, &gpu.pci_address, |_| true) {
            return types;
        }
        let types = offered(self, gpu);
        cache.keep(epoch, gpu.pci_address, types.clone());
        types
    }
}
