//! Comparing vgpud's allocations with Placement's on vgpud's GPU providers, and choosing what
//! healing may remove. Pure: the reporter reads both sides and acts on the answer.
//!
//! Only allocations that name a Placement consumer are compared: slices held without one are
//! reported to Placement as `reserved`, not as any consumer's allocation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ids::PciAddress;
use placement::model::{ConsumerAllocations, ProviderAllocations};
use uuid::Uuid;

use super::consumer::ProviderMap;
use crate::engine::{Allocation, Slice};

/// What vgpud holds for one Placement consumer on one GPU: slices of one type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldHere {
    /// The Placement consumer.
    pub consumer: Uuid,
    /// The GPU the slices are on.
    pub gpu: PciAddress,
    /// Their type, as the allocation asked.
    pub slice_type: String,
    /// How many.
    pub count: u32,
}

/// vgpud's allocations that name a Placement consumer, counted per consumer, GPU and type (an
/// allocation whose slices sit on two GPUs counts on each).
pub fn held_here(allocations: &[Allocation], slices: &[Slice]) -> Vec<HeldHere> {
    let mut counts: BTreeMap<(Uuid, PciAddress, String), u32> = BTreeMap::new();
    for a in allocations {
        let (Some(consumer), Some(slice_type)) = (a.placement_consumer, &a.slice_type) else {
            continue;
        };
        for id in &a.slices {
            let Some(gpu) = slices
                .iter()
                .find(|s| s.id == *id)
                .and_then(|s| s.spec.gpu.pci())
            else {
                continue;
            };
            *counts
                .entry((consumer, gpu, slice_type.trim().to_owned()))
                .or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|((consumer, gpu, slice_type), count)| HeldHere {
            consumer,
            gpu,
            slice_type,
            count,
        })
        .collect()
}

/// Slices vgpud holds for a consumer that Placement does not show it holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingInPlacement {
    /// What vgpud holds.
    pub held: HeldHere,
    /// The GPU's provider; `None` when the GPU is not reported.
    pub provider: Option<Uuid>,
    /// The class the type is reported as on the GPU; `None` when it is not reported there.
    pub resource_class: Option<String>,
}

/// A consumer vgpud does not know holding resources on one of vgpud's GPU providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownConsumer {
    /// The Placement consumer.
    pub consumer: Uuid,
    /// The provider.
    pub provider: Uuid,
    /// Its GPU.
    pub gpu: PciAddress,
    /// Amounts by resource class.
    pub resources: BTreeMap<String, u32>,
}

/// A consumer both sides know, with another amount of a class on a GPU (0 on one side: the
/// consumer's slices or allocation are on another GPU or of another type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmountMismatch {
    /// The Placement consumer.
    pub consumer: Uuid,
    /// The provider.
    pub provider: Uuid,
    /// Its GPU.
    pub gpu: PciAddress,
    /// The resource class.
    pub resource_class: String,
    /// Slices vgpud holds for the consumer of the class's type on the GPU.
    pub vgpud: u32,
    /// The amount Placement holds for the consumer.
    pub placement: u32,
}

/// How vgpud's allocations and Placement's differ on vgpud's GPU providers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Differences {
    /// vgpud holds slices for a consumer Placement shows nothing of (of the class, on the GPU).
    pub missing_in_placement: Vec<MissingInPlacement>,
    /// Placement shows a consumer vgpud holds nothing for.
    pub unknown_to_vgpud: Vec<UnknownConsumer>,
    /// Both know the consumer; the amounts differ.
    pub amount_mismatch: Vec<AmountMismatch>,
}

impl Differences {
    /// Whether both sides agree.
    pub fn is_empty(&self) -> bool {
        self.missing_in_placement.is_empty()
            && self.unknown_to_vgpud.is_empty()
            && self.amount_mismatch.is_empty()
    }
}

/// Compares `held` (from [`held_here`]) with `placement`: each of vgpud's GPU providers' `GET
/// /resource_providers/{uuid}/allocations`, by provider UUID. Providers outside `map` are not
/// vgpud's and are skipped.
pub fn audit(
    map: &ProviderMap,
    held: &[HeldHere],
    placement: &BTreeMap<Uuid, ProviderAllocations>,
) -> Differences {
    let known: BTreeSet<Uuid> = held.iter().map(|h| h.consumer).collect();
    // (consumer, provider, its GPU, class) → (vgpud's count, Placement's amount).
    let mut both: BTreeMap<(Uuid, Uuid, PciAddress, String), (u32, u32)> = BTreeMap::new();
    let mut out = Differences::default();
    for h in held {
        let provider = map.provider_of(h.gpu);
        let class = map.class_of(h.gpu, &h.slice_type);
        match (provider, class) {
            (Some(p), Some(c)) => {
                both.entry((h.consumer, p, h.gpu, c.to_owned()))
                    .or_default()
                    .0 += h.count
            }
            _ => out.missing_in_placement.push(MissingInPlacement {
                held: h.clone(),
                provider,
                resource_class: class.map(str::to_owned),
            }),
        }
    }
    for (provider, allocations) in placement {
        let Some(gpu) = map.gpu_of(*provider) else {
            continue;
        };
        for (consumer, r) in &allocations.allocations {
            if !known.contains(consumer) {
                out.unknown_to_vgpud.push(UnknownConsumer {
                    consumer: *consumer,
                    provider: *provider,
                    gpu,
                    resources: r.resources.clone(),
                });
                continue;
            }
            for (class, amount) in &r.resources {
                both.entry((*consumer, *provider, gpu, class.clone()))
                    .or_default()
                    .1 += amount;
            }
        }
    }
    for ((consumer, provider, gpu, class), (vgpud, placed)) in both {
        if vgpud == placed {
            continue;
        }
        if placed == 0 {
            let slice_type = map.slice_type(gpu, &class).unwrap_or_default().to_owned();
            out.missing_in_placement.push(MissingInPlacement {
                held: HeldHere {
                    consumer,
                    gpu,
                    slice_type,
                    count: vgpud,
                },
                provider: Some(provider),
                resource_class: Some(class),
            });
        } else {
            out.amount_mismatch.push(AmountMismatch {
                consumer,
                provider,
                gpu,
                resource_class: class,
                vgpud,
                placement: placed,
            });
        }
    }
    out
}

/// Keeps `first_seen` in step with `differences`: a consumer newly unknown to vgpud is noted at
/// `now`, one no longer unknown is forgotten (its grace period starts again if it comes back).
pub fn note_unknown(
    first_seen: &mut BTreeMap<Uuid, Instant>,
    differences: &Differences,
    now: Instant,
) {
    let unknown: BTreeSet<Uuid> = differences
        .unknown_to_vgpud
        .iter()
        .map(|u| u.consumer)
        .collect();
    first_seen.retain(|c, _| unknown.contains(c));
    for c in unknown {
        first_seen.entry(c).or_insert(now);
    }
}

/// The consumers whose allocations on vgpud's providers healing removes: unknown to vgpud
/// (`differences.unknown_to_vgpud`) and first seen so ([`note_unknown`]) longer than `grace`
/// ago. Only their entries on vgpud's providers go ([`without_providers`]); the rest of each
/// consumer's allocation (VCPU on the compute node, another host's devices) is not vgpud's.
pub fn heal_plan(
    differences: &Differences,
    first_seen: &BTreeMap<Uuid, Instant>,
    now: Instant,
    grace: Duration,
) -> Vec<Uuid> {
    let unknown: BTreeSet<Uuid> = differences
        .unknown_to_vgpud
        .iter()
        .map(|u| u.consumer)
        .collect();
    unknown
        .into_iter()
        .filter(|c| {
            first_seen
                .get(c)
                .is_some_and(|seen| now.saturating_duration_since(*seen) > grace)
        })
        .collect()
}

/// The body for `PUT /allocations/{consumer}` that heals: the consumer's allocations less its
/// entries on vgpud's GPU providers, with its generation, project, user and type kept (Placement
/// refuses the write if the consumer changed since it was read: then read and plan again).
pub fn without_providers(held: &ConsumerAllocations, map: &ProviderMap) -> ConsumerAllocations {
    let mut out = held.clone();
    out.allocations.retain(|p, _| map.gpu_of(*p).is_none());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        AllocationId, DeviceRef, Handles, Identity, SliceId, SliceKind, SliceSpec, SliceState,
    };

    const GPU_A: &str = "0000:07:00.0";
    const GPU_B: &str = "0000:0f:00.0";
    const GPU_C: &str = "0000:47:00.0";
    const PROV_A: &str = "7d1b0c3a-5f4e-4b9a-9c1d-2e3f4a5b6c7d";
    const PROV_B: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
    const ROOT: &str = "c0ffee00-1111-4222-8333-444455556666";
    const VM1: &str = "11111111-1111-4111-8111-111111111111";
    const VM2: &str = "22222222-2222-4222-8222-222222222222";
    const VM3: &str = "33333333-3333-4333-8333-333333333333";

    fn pci(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    fn uuid(s: &str) -> Uuid {
        s.parse().unwrap()
    }

    fn map() -> ProviderMap {
        let mut m = ProviderMap::new();
        m.add_gpu(
            uuid(PROV_A),
            pci(GPU_A),
            [
                ("CUSTOM_MIG_3G_40GB", "3g.40gb"),
                ("CUSTOM_MIG_1G_10GB", "1g.10gb"),
            ],
        );
        m.add_gpu(
            uuid(PROV_B),
            pci(GPU_B),
            [("CUSTOM_MIG_3G_40GB", "3g.40gb")],
        );
        m
    }

    /// `GET /resource_providers/{uuid}/allocations` as Placement 1.39 answers it.
    fn provider_allocations(json: &str) -> ProviderAllocations {
        serde_json::from_str(&format!(
            r#"{{"resource_provider_generation": 12, "allocations": {json}}}"#
        ))
        .unwrap()
    }

    fn held(consumer: &str, gpu: &str, t: &str, count: u32) -> HeldHere {
        HeldHere {
            consumer: uuid(consumer),
            gpu: pci(gpu),
            slice_type: t.into(),
            count,
        }
    }

    fn slice(gpu: &str, profile: &str, start: u32) -> Slice {
        Slice {
            id: SliceId::new_random(),
            spec: SliceSpec {
                gpu: DeviceRef::Pci(pci(gpu)),
                kind: SliceKind::Mig {
                    profile: profile.parse().unwrap(),
                    start: Some(start),
                },
            },
            identity: Identity::Mig {
                start,
                profile: profile.parse().unwrap(),
            },
            handles: Handles::default(),
            numa_node: None,
            owner: None,
            state: SliceState::Allocated,
            reason: None,
        }
    }

    fn allocation(slices: &[&Slice], t: &str, consumer: Option<&str>) -> Allocation {
        Allocation {
            id: AllocationId::new_random(),
            consumer: "tenant".into(),
            vm: None,
            slices: slices.iter().map(|s| s.id).collect(),
            slice_type: Some(t.into()),
            idempotency_key: None,
            created: 0,
            pinning: None,
            request: None,
            placement_consumer: consumer.map(uuid),
        }
    }

    #[test]
    fn held_here_counts_per_consumer_gpu_and_type_and_skips_allocations_without_one() {
        let (a0, a4, b0, c0) = (
            slice(GPU_A, "3g.40gb", 0),
            slice(GPU_A, "3g.40gb", 4),
            slice(GPU_B, "3g.40gb", 0),
            slice(GPU_C, "3g.40gb", 0),
        );
        let allocations = [
            allocation(&[&a0, &a4, &b0], " 3g.40gb", Some(VM1)),
            allocation(&[&c0], "3g.40gb", None),
        ];
        let slices = [a0.clone(), a4.clone(), b0.clone(), c0.clone()];
        assert_eq!(
            held_here(&allocations, &slices),
            vec![
                held(VM1, GPU_A, "3g.40gb", 2),
                held(VM1, GPU_B, "3g.40gb", 1)
            ]
        );
    }

    #[test]
    fn agreeing_sides_have_no_differences() {
        let placement = BTreeMap::from([
            (
                uuid(PROV_A),
                provider_allocations(&format!(
                    r#"{{"{VM1}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 2}}}}}}"#
                )),
            ),
            // Not vgpud's: the compute node's VCPU allocations are none of its business.
            (
                uuid(ROOT),
                provider_allocations(&format!(r#"{{"{VM3}": {{"resources": {{"VCPU": 8}}}}}}"#)),
            ),
        ]);
        let d = audit(&map(), &[held(VM1, GPU_A, "3g.40gb", 2)], &placement);
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn each_kind_of_difference_is_found() {
        let placement = BTreeMap::from([
            (
                uuid(PROV_A),
                provider_allocations(&format!(
                    r#"{{"{VM1}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}},
                        "{VM3}": {{"resources": {{"CUSTOM_MIG_1G_10GB": 1}}}}}}"#
                )),
            ),
            (
                uuid(PROV_B),
                provider_allocations(&format!(
                    r#"{{"{VM2}": {{"resources": {{"CUSTOM_MIG_3G_40GB": 1}}}}}}"#
                )),
            ),
        ]);
        let held = [
            // Placement holds one 3g for VM1 on A: vgpud two.
            held(VM1, GPU_A, "3g.40gb", 2),
            // VM2's slice is on A here, its allocation on B in Placement.
            held(VM2, GPU_A, "3g.40gb", 1),
            // GPU C has no provider: Placement cannot hold it.
            held(VM2, GPU_C, "3g.40gb", 1),
            // A type not reported on B.
            held(VM1, GPU_B, "1g.10gb", 1),
        ];
        let d = audit(&map(), &held, &placement);
        assert_eq!(
            d.amount_mismatch,
            vec![
                AmountMismatch {
                    consumer: uuid(VM1),
                    provider: uuid(PROV_A),
                    gpu: pci(GPU_A),
                    resource_class: "CUSTOM_MIG_3G_40GB".into(),
                    vgpud: 2,
                    placement: 1,
                },
                // VM2's Placement allocation on B, where vgpud holds nothing for it.
                AmountMismatch {
                    consumer: uuid(VM2),
                    provider: uuid(PROV_B),
                    gpu: pci(GPU_B),
                    resource_class: "CUSTOM_MIG_3G_40GB".into(),
                    vgpud: 0,
                    placement: 1,
                }
            ]
        );
        assert_eq!(
            d.unknown_to_vgpud,
            vec![UnknownConsumer {
                consumer: uuid(VM3),
                provider: uuid(PROV_A),
                gpu: pci(GPU_A),
                resources: BTreeMap::from([("CUSTOM_MIG_1G_10GB".into(), 1)]),
            }]
        );
        let missing: Vec<(String, PciAddress, Option<String>)> = d
            .missing_in_placement
            .iter()
            .map(|m| {
                (
                    m.held.consumer.to_string(),
                    m.held.gpu,
                    m.resource_class.clone(),
                )
            })
            .collect();
        assert_eq!(missing.len(), 3, "{d:#?}");
        assert!(missing.contains(&(VM2.into(), pci(GPU_C), None)));
        assert!(missing.contains(&(VM1.into(), pci(GPU_B), None)));
        assert!(missing.contains(&(VM2.into(), pci(GPU_A), Some("CUSTOM_MIG_3G_40GB".into()))));
    }

    #[test]
    fn healing_waits_for_the_grace_period_and_forgets_consumers_that_came_back() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(300);
        let unknown = |consumers: &[&str]| Differences {
            unknown_to_vgpud: consumers
                .iter()
                .map(|c| UnknownConsumer {
                    consumer: uuid(c),
                    provider: uuid(PROV_A),
                    gpu: pci(GPU_A),
                    resources: BTreeMap::from([("CUSTOM_MIG_1G_10GB".into(), 1)]),
                })
                .collect(),
            ..Differences::default()
        };
        let mut seen = BTreeMap::new();
        let d = unknown(&[VM1]);
        note_unknown(&mut seen, &d, t0);
        assert_eq!(heal_plan(&d, &seen, t0, grace), Vec::<Uuid>::new());
        assert_eq!(heal_plan(&d, &seen, t0 + grace, grace), Vec::<Uuid>::new());
        // VM2 appears later: its own grace period.
        let d = unknown(&[VM1, VM2]);
        note_unknown(&mut seen, &d, t0 + Duration::from_secs(200));
        let later = t0 + grace + Duration::from_secs(1);
        assert_eq!(heal_plan(&d, &seen, later, grace), vec![uuid(VM1)]);
        // A consumer never noted is never healed.
        let d3 = unknown(&[VM3]);
        assert_eq!(heal_plan(&d3, &seen, later, grace), Vec::<Uuid>::new());
        // VM1 became known (vgpud allocated for it): forgotten; unknown again starts over.
        note_unknown(&mut seen, &unknown(&[VM2]), later);
        assert!(!seen.contains_key(&uuid(VM1)));
        let d = unknown(&[VM1, VM2]);
        note_unknown(&mut seen, &d, later);
        let much_later = t0 + Duration::from_secs(600);
        assert_eq!(heal_plan(&d, &seen, much_later, grace), vec![uuid(VM2)]);
    }

    #[test]
    fn healing_keeps_the_rest_of_the_consumers_allocation() {
        let held: ConsumerAllocations = serde_json::from_str(&format!(
            r#"{{"allocations": {{
                    "{ROOT}": {{"resources": {{"VCPU": 4, "MEMORY_MB": 4096}}, "generation": 7}},
                    "{PROV_A}": {{"resources": {{"CUSTOM_MIG_1G_10GB": 1}}, "generation": 12}}}},
                "consumer_generation": 3, "project_id": "p", "user_id": "u",
                "consumer_type": "INSTANCE"}}"#
        ))
        .unwrap();
        let body = without_providers(&held, &map());
        assert_eq!(
            body.allocations.keys().copied().collect::<Vec<_>>(),
            vec![uuid(ROOT)]
        );
        assert_eq!(body.consumer_generation, Some(3));
        assert_eq!(body.project_id.as_deref(), Some("p"));
        assert_eq!(body.consumer_type.as_deref(), Some("INSTANCE"));
    }
}
