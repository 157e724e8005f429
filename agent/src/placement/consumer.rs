//! Checking an allocation request against what its Placement consumer holds on this host
//! (two-level scheduling: the upstream scheduler claimed resources in Placement, then asks
//! vgpud for the slices).
//!
//! Placement never splits one resource class's amount across providers within one request
//! group (its API reference, "Allocation candidates": each resource of a group comes from one
//! provider), so `VGPU:2` sits on one GPU provider. The request matches when, on exactly one of
//! this host's GPU providers, the consumer holds the requested type's class with an amount equal
//! to the requested count; the allocation is then made on that GPU.

use std::collections::BTreeMap;

use ids::PciAddress;
use placement::model::ConsumerAllocations;
use uuid::Uuid;

use crate::engine::{EngineError, SliceRequest};

/// What the agent knows of its providers: provider UUID → GPU, and per GPU class → slice type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderMap {
    gpus: BTreeMap<Uuid, PciAddress>,
    types: BTreeMap<PciAddress, BTreeMap<String, String>>,
}

impl ProviderMap {
    /// An empty map: no GPU provider known (every consumer mismatches).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a GPU's provider and the classes reported on it, each with the slice type it
    /// stands for (`VGPU` → `nvidia-222`, `CUSTOM_MIG_3G_40GB` → `3g.40gb`).
    pub fn add_gpu<C, T>(
        &mut self,
        provider: Uuid,
        gpu: PciAddress,
        classes: impl IntoIterator<Item = (C, T)>,
    ) where
        C: Into<String>,
        T: Into<String>,
    {
        self.gpus.insert(provider, gpu);
        self.types.insert(
            gpu,
            classes
                .into_iter()
                .map(|(c, t)| (c.into(), t.into()))
                .collect(),
        );
    }

    /// The GPU a provider stands for; `None` for a provider that is not one of this host's GPU
    /// providers (the compute node, a NUMA provider, another host's).
    pub fn gpu_of(&self, provider: Uuid) -> Option<PciAddress> {
        self.gpus.get(&provider).copied()
    }

    /// The provider of a GPU.
    pub fn provider_of(&self, gpu: PciAddress) -> Option<Uuid> {
        self.gpus.iter().find(|(_, g)| **g == gpu).map(|(p, _)| *p)
    }

    /// The slice type a class stands for on a GPU.
    pub fn slice_type(&self, gpu: PciAddress, class: &str) -> Option<&str> {
        self.types.get(&gpu)?.get(class).map(String::as_str)
    }

    /// The class a slice type is reported as on a GPU (types compared trimmed, as the engine
    /// records them).
    pub fn class_of(&self, gpu: PciAddress, slice_type: &str) -> Option<&str> {
        let wanted = slice_type.trim();
        self.types
            .get(&gpu)?
            .iter()
            .find(|(_, t)| t.as_str() == wanted)
            .map(|(c, _)| c.as_str())
    }

    /// Every GPU provider: UUID and GPU.
    pub fn providers(&self) -> impl Iterator<Item = (Uuid, PciAddress)> + '_ {
        self.gpus.iter().map(|(p, g)| (*p, *g))
    }
}

/// What a consumer's Placement allocation says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerVerdict {
    /// The consumer holds the request's type and count on these GPUs: allocate there, that
    /// many on each (a request of several groups, `group_policy=isolate`, spans GPUs).
    Matches {
        /// Each GPU whose provider holds part of the allocation, with how many slices.
        gpus: Vec<(PciAddress, u32)>,
    },
    /// It does not; why, for the operator and the caller.
    Mismatch(String),
}

/// One entry of the consumer's allocation on one of this host's GPU providers, read as slices.
struct HeldOnGpu<'a> {
    gpu: PciAddress,
    class: &'a str,
    slice_type: Option<&'a str>,
    amount: u32,
}

/// Whether `held` (the consumer's `GET /allocations/{consumer}`) matches `request`: the entries
/// on providers outside `map` are not this host's and are ignored.
pub fn judge(
    map: &ProviderMap,
    held: &ConsumerAllocations,
    request: &SliceRequest,
) -> ConsumerVerdict {
    let here = held_here(map, held);
    if here.is_empty() {
        return ConsumerVerdict::Mismatch(
            "the Placement consumer holds no allocation on this host's GPU providers".into(),
        );
    }
    let wanted = request.slice_type.trim();
    let of_type: Vec<&HeldOnGpu<'_>> = here
        .iter()
        .filter(|h| h.slice_type == Some(wanted))
        .collect();
    if of_type.is_empty() {
        return ConsumerVerdict::Mismatch(format!(
            "the Placement consumer holds {} on this host, none of type {wanted:?}",
            describe(&here)
        ));
    }
    let held: u32 = of_type.iter().map(|h| h.amount).sum();
    if held != request.count {
        return ConsumerVerdict::Mismatch(format!(
            "the Placement consumer holds {} of type {wanted:?} on this host; the request asks for {}",
            describe_refs(&of_type),
            request.count
        ));
    }
    let on: Vec<(PciAddress, u32)> = of_type.iter().map(|h| (h.gpu, h.amount)).collect();
    match request.gpu {
        Some(asked) if on.iter().any(|(g, _)| *g != asked) => ConsumerVerdict::Mismatch(format!(
            "the request names GPU {asked}, but the Placement consumer's allocation of {} {wanted:?} is on {}",
            request.count,
            gpus(&of_type)
        )),
        _ => ConsumerVerdict::Matches { gpus: on },
    }
}

fn held_here<'a>(map: &'a ProviderMap, held: &'a ConsumerAllocations) -> Vec<HeldOnGpu<'a>> {
    held.allocations
        .iter()
        .filter_map(|(provider, a)| map.gpu_of(*provider).map(|gpu| (gpu, a)))
        .flat_map(|(gpu, a)| {
            a.resources.iter().map(move |(class, amount)| HeldOnGpu {
                gpu,
                class,
                slice_type: map.slice_type(gpu, class),
                amount: *amount,
            })
        })
        .collect()
}

fn describe(held: &[HeldOnGpu<'_>]) -> String {
    describe_refs(&held.iter().collect::<Vec<_>>())
}

fn describe_refs(held: &[&HeldOnGpu<'_>]) -> String {
    held.iter()
        .map(|h| match h.slice_type {
            Some(t) => format!("{}:{} ({t}) on GPU {}", h.class, h.amount, h.gpu),
            None => format!("{}:{} on GPU {}", h.class, h.amount, h.gpu),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn gpus(held: &[&HeldOnGpu<'_>]) -> String {
    held.iter()
        .map(|h| h.gpu.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the service asks about a request's Placement consumer (the daemon's implementation reads
/// `GET /allocations/{consumer}` and [`judge`]s it).
pub trait ConsumerCheck: Send + Sync + std::fmt::Debug {
    /// Ok(None): nothing to check (Placement reporting off).
    fn check(
        &self,
        consumer: Uuid,
        request: &SliceRequest,
    ) -> Result<Option<ConsumerVerdict>, EngineError>;
    /// Whether a mismatch or an unreachable Placement refuses the allocation
    /// (`[placement] strict_consumers`); else it is warned about and allocated as asked.
    fn strict(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU_A: &str = "0000:07:00.0";
    const GPU_B: &str = "0000:0f:00.0";
    const PROV_A: &str = "7d1b0c3a-5f4e-4b9a-9c1d-2e3f4a5b6c7d";
    const PROV_B: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    const ROOT: &str = "c0ffee00-1111-4222-8333-444455556666";
    const OTHER_HOST: &str = "deadbeef-0000-4000-8000-000000000001";

    fn pci(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    fn map() -> ProviderMap {
        let mut m = ProviderMap::new();
        m.add_gpu(
            PROV_A.parse().unwrap(),
            pci(GPU_A),
            [("CUSTOM_MIG_3G_40GB", "3g.40gb"), ("VGPU", "1g.10gb")],
        );
        m.add_gpu(
            PROV_B.parse().unwrap(),
            pci(GPU_B),
            [("CUSTOM_MIG_3G_40GB", "3g.40gb")],
        );
        m
    }

    /// `GET /allocations/{consumer}` as Placement 1.39 answers it.
    fn held(allocations: &str) -> ConsumerAllocations {
        serde_json::from_str(&format!(
            r#"{{"allocations": {allocations}, "consumer_generation": 1,
                "project_id": "6f70656e-7374-6163-6b20-70726f6a6563", "user_id": "admin",
                "consumer_type": "INSTANCE"}}"#
        ))
        .unwrap()
    }

    fn ask(t: &str, count: u32, gpu: Option<&str>) -> SliceRequest {
        let mut r = SliceRequest::new(t, count);
        r.gpu = gpu.map(pci);
        r
    }

    fn mismatch(v: ConsumerVerdict) -> String {
        match v {
            ConsumerVerdict::Mismatch(why) => why,
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn an_allocation_of_the_class_and_count_on_one_gpu_pins_the_request_there() {
        let h = held(&format!(
            r#"{{"{ROOT}": {{"resources": {{"VCPU": 4, "MEMORY_MB": 8192}}, "generation": 9}},
                "{PROV_B}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 2}}, "generation": 3}}}}"#
        ));
        assert_eq!(
            judge(&map(), &h, &ask("3g.40gb", 2, None)),
            ConsumerVerdict::Matches {
                gpus: vec![(pci(GPU_B), 2)]
            }
        );
        // The type as a request may spell it, with blanks around.
        assert_eq!(
            judge(&map(), &h, &ask(" 3g.40gb ", 2, Some(GPU_B))),
            ConsumerVerdict::Matches {
                gpus: vec![(pci(GPU_B), 2)]
            }
        );
    }

    #[test]
    fn a_consumer_with_nothing_here_mismatches() {
        let empty: ConsumerAllocations = serde_json::from_str(r#"{"allocations": {}}"#).unwrap();
        let why = mismatch(judge(&map(), &empty, &ask("3g.40gb", 1, None)));
        assert!(why.contains("no allocation on this host"), "{why}");
        let elsewhere = held(&format!(
            r#"{{"{OTHER_HOST}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
        ));
        let why = mismatch(judge(&map(), &elsewhere, &ask("3g.40gb", 1, None)));
        assert!(why.contains("no allocation on this host"), "{why}");
    }

    #[test]
    fn another_type_or_an_unknown_class_mismatches_naming_what_is_held() {
        let h = held(&format!(
            r#"{{"{PROV_A}": {{"resources": {{"VGPU": 1, "CUSTOM_SOMETHING": 1}}}}}}"#
        ));
        let why = mismatch(judge(&map(), &h, &ask("3g.40gb", 1, None)));
        assert!(
            why.contains("VGPU:1 (1g.10gb) on GPU 0000:07:00.0"),
            "{why}"
        );
        assert!(why.contains("CUSTOM_SOMETHING:1 on GPU"), "{why}");
        assert!(why.contains("none of type \"3g.40gb\""), "{why}");
    }

    #[test]
    fn another_amount_mismatches() {
        let h = held(&format!(
            r#"{{"{PROV_A}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
        ));
        let why = mismatch(judge(&map(), &h, &ask("3g.40gb", 2, None)));
        assert!(why.contains("CUSTOM_MIG_3G_40GB:1"), "{why}");
        assert!(why.contains("asks for 2"), "{why}");
    }

    #[test]
    fn a_request_naming_another_gpu_mismatches() {
        let h = held(&format!(
            r#"{{"{PROV_A}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
        ));
        let why = mismatch(judge(&map(), &h, &ask("3g.40gb", 1, Some(GPU_B))));
        assert!(why.contains("names GPU 0000:0f:00.0"), "{why}");
        assert!(why.contains("is on 0000:07:00.0"), "{why}");
    }

    #[test]
    fn an_allocation_across_two_gpus_is_made_on_both() {
        // Two request groups (`resources_A=…&resources_B=…&group_policy=isolate`) land one
        // class on two providers: the allocation takes that many on each.
        let h = held(&format!(
            r#"{{"{PROV_A}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}},
                "{PROV_B}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
        ));
        let mut both = match judge(&map(), &h, &ask("3g.40gb", 2, None)) {
            ConsumerVerdict::Matches { gpus } => gpus,
            other => panic!("{other:?}"),
        };
        both.sort();
        assert_eq!(both, vec![(pci(GPU_A), 1), (pci(GPU_B), 1)]);
        // Fewer than Placement holds, or all of it on one named GPU, is not what was claimed.
        let why = mismatch(judge(&map(), &h, &ask("3g.40gb", 1, None)));
        assert!(why.contains("asks for 1"), "{why}");
        let why = mismatch(judge(&map(), &h, &ask("3g.40gb", 2, Some(GPU_A))));
        assert!(why.contains("names GPU 0000:07:00.0"), "{why}");
    }

    #[test]
    fn the_map_answers_both_ways() {
        let m = map();
        assert_eq!(m.gpu_of(PROV_A.parse().unwrap()), Some(pci(GPU_A)));
        assert_eq!(m.gpu_of(ROOT.parse().unwrap()), None);
        assert_eq!(m.provider_of(pci(GPU_B)), Some(PROV_B.parse().unwrap()));
        assert_eq!(m.class_of(pci(GPU_A), "1g.10gb"), Some("VGPU"));
        assert_eq!(m.class_of(pci(GPU_B), "1g.10gb"), None);
        assert_eq!(
            m.slice_type(pci(GPU_B), "CUSTOM_MIG_3G_40GB"),
            Some("3g.40gb")
        );
        assert_eq!(m.providers().count(), 2);
    }
}
