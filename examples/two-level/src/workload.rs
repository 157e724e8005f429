//! What a pod of the openb trace asks vgpud's hosts for.
//!
//! The trace asks for GPUs (`num_gpu`) and, for a shared GPU, a share of one (`gpu_milli`
//! thousandths). A fleet offers slices of fixed sizes, one menu per kind of GPU ([`Offer`]), so
//! each pod becomes one request per menu that can hold it ([`wants`]):
//! - whole GPUs (`gpu_milli` = 1000): `gpu` (resource class `PGPU`), count `num_gpu`;
//! - a share: on each menu, the smallest slice whose share of its GPU is at or above the pod's
//!   (a MIG profile's share is its compute slices over the GPU's seven; a vGPU type's is one
//!   over its instances per GPU); a menu whose largest slice is below the share is skipped;
//! - a share no menu holds takes a whole GPU (`gpu`, count 1): the pod cannot share.
//!
//! The requests keep the menus' order, which is the order the scheduler asks Placement in.

use crate::classes::class_of;

/// A slice type one kind of GPU in the fleet offers, with its share of that GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    /// The type as vgpud's requests spell it (`3g.40gb`, `nvidia-232`, `NVIDIA H200X-35C`).
    pub slice_type: String,
    /// Its share of one GPU, in thousandths.
    pub milli: u32,
}

/// The slice sizes one kind of GPU offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// For tables and logs (`a100-mig`).
    pub name: String,
    /// Its slices, any order.
    pub slices: Vec<Slice>,
}

impl Offer {
    /// An offer from `(type, share in thousandths)` pairs.
    pub fn new(name: &str, slices: &[(&str, u32)]) -> Offer {
        Offer {
            name: name.to_owned(),
            slices: slices
                .iter()
                .map(|(t, m)| Slice {
                    slice_type: (*t).to_owned(),
                    milli: *m,
                })
                .collect(),
        }
    }

    /// The smallest slice holding `milli` thousandths of a GPU.
    fn fitting(&self, milli: u32) -> Option<&Slice> {
        self.slices
            .iter()
            .filter(|s| s.milli >= milli)
            .min_by_key(|s| (s.milli, s.slice_type.clone()))
    }
}

/// One request to the fleet: a slice type, how many, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// The slice type, as vgpud's allocation requests spell it.
    pub slice_type: String,
    /// The Placement resource class vgpud reports it under.
    pub class: String,
    /// How many slices.
    pub count: u32,
    /// Traits every GPU provider must have (`required`).
    pub required: Vec<String>,
    /// With 2+ whole GPUs: all under one NUMA provider (`same_subtree`).
    pub same_numa: bool,
}

impl Want {
    /// `count` slices of `slice_type`, no traits, any NUMA node.
    pub fn new(slice_type: &str, count: u32) -> Want {
        Want {
            slice_type: slice_type.to_owned(),
            class: class_of(slice_type),
            count,
            required: Vec::new(),
            same_numa: false,
        }
    }

    /// Whether each slice is a GPU provider of its own: whole GPUs (`PGPU` has total 1 per
    /// GPU, and Placement never splits one class's amount across providers).
    pub fn one_provider_each(&self) -> bool {
        self.slice_type == "gpu" && self.count > 1
    }

    /// The `GET /allocation_candidates` query: one unnumbered group, or (several whole GPUs)
    /// one granular group per GPU with `group_policy=isolate`, under one NUMA provider with
    /// `same_numa`.
    pub fn query(&self, limit: u32) -> Vec<(String, String)> {
        let mut q = Vec::new();
        let required = self.required.join(",");
        if self.one_provider_each() {
            let groups: Vec<String> = (1..=self.count).map(|g| format!("_G{g}")).collect();
            for g in &groups {
                q.push((format!("resources{g}"), format!("{}:1", self.class)));
                if !required.is_empty() {
                    q.push((format!("required{g}"), required.clone()));
                }
            }
            q.push(("group_policy".to_owned(), "isolate".to_owned()));
            if self.same_numa {
                // `same_subtree` wants the common ancestor among the providers of its groups:
                // a resourceless group (1.35) names the NUMA provider, as Nova asks for it.
                q.push(("required_NUMA".to_owned(), "HW_NUMA_ROOT".to_owned()));
                q.push((
                    "same_subtree".to_owned(),
                    format!("_NUMA,{}", groups.join(",")),
                ));
            }
        } else {
            q.push((
                "resources".to_owned(),
                format!("{}:{}", self.class, self.count),
            ));
            if !required.is_empty() {
                q.push(("required".to_owned(), required));
            }
        }
        q.push(("limit".to_owned(), limit.to_string()));
        q
    }
}

/// The requests that could hold a pod of `num_gpu` GPUs at `gpu_milli` thousandths each, one
/// per offer that holds it (module doc); empty for a CPU-only pod.
pub fn wants(num_gpu: u32, gpu_milli: u32, offers: &[Offer]) -> Vec<Want> {
    if num_gpu == 0 || gpu_milli == 0 {
        return Vec::new();
    }
    if gpu_milli >= 1000 {
        return vec![Want::new("gpu", num_gpu)];
    }
    let mut out: Vec<Want> = Vec::new();
    for slice in offers.iter().filter_map(|o| o.fitting(gpu_milli)) {
        if !out.iter().any(|w| w.slice_type == slice.slice_type) {
            out.push(Want::new(&slice.slice_type, 1));
        }
    }
    if out.is_empty() {
        out.push(Want::new("gpu", 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offers() -> Vec<Offer> {
        vec![
            Offer::new(
                "a100-mig",
                &[("1g.10gb", 142), ("2g.20gb", 285), ("3g.40gb", 428)],
            ),
            Offer::new("h200-vgpu", &[("NVIDIA H200X-35C", 250)]),
        ]
    }

    #[test]
    fn whole_gpus_are_pgpu_with_the_pods_count() {
        assert_eq!(wants(4, 1000, &offers()), vec![Want::new("gpu", 4)]);
        assert_eq!(wants(4, 1000, &offers())[0].class, "PGPU");
    }

    #[test]
    fn a_share_takes_the_smallest_slice_at_or_above_it_on_each_offer() {
        let w = wants(1, 250, &offers());
        let types: Vec<&str> = w.iter().map(|w| w.slice_type.as_str()).collect();
        assert_eq!(types, ["2g.20gb", "NVIDIA H200X-35C"]);
        assert_eq!(w[0].class, "CUSTOM_MIG_2G_20GB");
        assert_eq!(w[1].class, "CUSTOM_NVIDIA_H200X_35C");
        // Exactly one slice's share: that slice, not the next.
        assert_eq!(wants(1, 142, &offers())[0].slice_type, "1g.10gb");
    }

    #[test]
    fn an_offer_too_small_is_skipped_and_a_share_none_holds_takes_a_gpu() {
        let w = wants(1, 400, &offers());
        assert_eq!(w, vec![Want::new("3g.40gb", 1)]);
        assert_eq!(wants(1, 500, &offers()), vec![Want::new("gpu", 1)]);
        assert!(wants(0, 0, &offers()).is_empty());
    }

    #[test]
    fn several_whole_gpus_ask_one_isolated_group_each_under_one_numa_node() {
        let mut w = Want::new("gpu", 2);
        w.same_numa = true;
        w.required = vec!["CUSTOM_VGPUD_OWNED".to_owned()];
        let q = w.query(10);
        let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("resources_G1"), Some("PGPU:1"));
        assert_eq!(get("resources_G2"), Some("PGPU:1"));
        assert_eq!(get("required_G2"), Some("CUSTOM_VGPUD_OWNED"));
        assert_eq!(get("group_policy"), Some("isolate"));
        assert_eq!(get("required_NUMA"), Some("HW_NUMA_ROOT"));
        assert_eq!(get("same_subtree"), Some("_NUMA,_G1,_G2"));
        assert_eq!(get("resources"), None);
        let one = Want::new("3g.40gb", 2).query(5);
        assert_eq!(
            one[0],
            ("resources".to_owned(), "CUSTOM_MIG_3G_40GB:2".to_owned())
        );
    }
}
