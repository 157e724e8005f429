//! NVIDIA MIG geometry: the GPU-instance profile tables of each GPU family and the placement
//! rules NVML enforces.
//!
//! A GPU has 8 memory slices (the placement axis) and 7 compute slices. Profile ids are the ones
//! `nvidia-smi mig -lgip` prints on an A100-80GB (the same on H100 and H200 drivers); profile
//! indexes are NVML's `NVML_GPU_INSTANCE_PROFILE_*` constants. GPU-instance ids follow the
//! driver's fixed numbering by size and start slot (7g → 0; 4g → 1; 3g → 1, 2; 2-slice → 3..6;
//! 1-slice → 7..13), so ids are unique among instances that can coexist.

use gpu::{ComputeInstanceProfile, GpuInstanceProfile, NvmlCode, Placement};
use ids::MigProfileName;
use serde::{Deserialize, Serialize};

use crate::state::{CiState, GiState};

/// Compute slices of a whole GPU.
pub(crate) const COMPUTE_SLICES: u32 = 7;

/// The MIG profile table a GPU uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MigFamily {
    /// A100-SXM4-40GB / A100-PCIE-40GB.
    #[serde(rename = "a100-40gb")]
    A100With40Gb,
    /// A100 80GB.
    #[serde(rename = "a100-80gb")]
    A100With80Gb,
    /// H100 80GB (SXM5 and PCIe).
    #[serde(rename = "h100-80gb")]
    H100With80Gb,
    /// H100 NVL 94GB.
    #[serde(rename = "h100-94gb")]
    H100With94Gb,
    /// H200 141GB.
    #[serde(rename = "h200-141gb")]
    H200With141Gb,
}

/// One GPU-instance profile with its placement rule.
#[derive(Debug, Clone)]
pub(crate) struct GiProfile {
    pub info: GpuInstanceProfile,
    /// Memory slices one instance spans (the placement size).
    pub memory_slices: u32,
    /// Allowed start slots.
    pub starts: Vec<u32>,
}

struct Shape {
    index: u32,
    id: u32,
    compute: u32,
    memory_slices: u32,
    count: u32,
    starts: &'static [u32],
    suffix: &'static str,
}

/// The rows of FORMATS.md's table, in NVML profile-index order.
const SHAPES: &[Shape] = &[
    Shape {
        index: 0,
        id: 19,
        compute: 1,
        memory_slices: 1,
        count: 7,
        starts: &[0, 1, 2, 3, 4, 5, 6],
        suffix: "",
    },
    Shape {
        index: 1,
        id: 14,
        compute: 2,
        memory_slices: 2,
        count: 3,
        starts: &[0, 2, 4],
        suffix: "",
    },
    Shape {
        index: 2,
        id: 9,
        compute: 3,
        memory_slices: 4,
        count: 2,
        starts: &[0, 4],
        suffix: "",
    },
    Shape {
        index: 3,
        id: 5,
        compute: 4,
        memory_slices: 4,
        count: 1,
        starts: &[0],
        suffix: "",
    },
    Shape {
        index: 4,
        id: 0,
        compute: 7,
        memory_slices: 8,
        count: 1,
        starts: &[0],
        suffix: "",
    },
    Shape {
        index: 7,
        id: 20,
        compute: 1,
        memory_slices: 1,
        count: 1,
        starts: &[0, 1, 2, 3, 4, 5, 6],
        suffix: "+me",
    },
    Shape {
        index: 9,
        id: 15,
        compute: 1,
        memory_slices: 2,
        count: 4,
        starts: &[0, 2, 4, 6],
        suffix: "",
    },
];

struct FamilyData {
    /// Marketing GB in the name for 1, 2, 4 and 8 memory slices.
    name_gb: [u32; 4],
    /// MiB NVML reports for 1, 2, 4 and 8 memory slices.
    mib: [u64; 4],
    /// SMs for 1, 2, 3, 4 and 7 compute slices.
    sms: [u32; 5],
    hopper: bool,
}

impl MigFamily {
    fn data(self) -> FamilyData {
        match self {
            MigFamily::A100With40Gb => FamilyData {
                name_gb: [5, 10, 20, 40],
                mib: [4864, 9856, 19968, 40192],
                sms: [14, 28, 42, 56, 98],
                hopper: false,
            },
            MigFamily::A100With80Gb => FamilyData {
                name_gb: [10, 20, 40, 80],
                mib: [9728, 19968, 40192, 81152],
                sms: [14, 28, 42, 56, 98],
                hopper: false,
            },
            MigFamily::H100With80Gb => FamilyData {
                name_gb: [10, 20, 40, 80],
                mib: [10240, 20480, 40960, 80896],
                sms: [16, 32, 60, 64, 132],
                hopper: true,
            },
            MigFamily::H100With94Gb => FamilyData {
                name_gb: [12, 24, 47, 94],
                mib: [11008, 22016, 44032, 88064],
                sms: [16, 32, 60, 64, 132],
                hopper: true,
            },
            MigFamily::H200With141Gb => FamilyData {
                name_gb: [18, 35, 71, 141],
                mib: [17408, 34816, 69632, 140288],
                sms: [16, 32, 60, 64, 132],
                hopper: true,
            },
        }
    }

    /// Every GPU-instance profile of the family.
    pub(crate) fn profiles(self) -> Vec<GiProfile> {
        let d = self.data();
        // Every name in the table parses (a unit test checks all seven per family).
        SHAPES.iter().filter_map(|s| shape_profile(&d, s)).collect()
    }

    /// The profile with this NVML profile id.
    pub(crate) fn profile(self, id: u32) -> Option<GiProfile> {
        self.profiles().into_iter().find(|p| p.info.id == id)
    }

    /// The profile with this name (`1g.18gb`).
    pub(crate) fn profile_named(self, name: &MigProfileName) -> Option<GiProfile> {
        self.profiles().into_iter().find(|p| &p.info.name == name)
    }

    /// Whether the family has a GPU-instance profile of this name.
    pub fn has_profile(self, name: &MigProfileName) -> bool {
        self.profile_named(name).is_some()
    }

    /// The family of a MIG-capable GPU, guessed from the product name NVML reports and its
    /// framebuffer: `NVIDIA A100-SXM4-80GB` → `a100-80gb`, `NVIDIA H100 NVL` (94 GB) →
    /// `h100-94gb`. `None` for MIG-capable GPUs the simulator has no table for (A30, GH200, …).
    pub fn from_product_name(name: &str, memory_mib: u64) -> Option<MigFamily> {
        let upper = name.to_ascii_uppercase();
        if upper.contains("GH200") {
            return None;
        }
        // NVML reports a little less than the nominal size (80 GB reads 81920 MiB or less).
        let nominal_gb = memory_mib.div_ceil(1000);
        if upper.contains("H200") {
            Some(MigFamily::H200With141Gb)
        } else if upper.contains("H100") {
            let big = upper.contains("94GB") || upper.contains("NVL") || nominal_gb > 90;
            Some(if big {
                MigFamily::H100With94Gb
            } else {
                MigFamily::H100With80Gb
            })
        } else if upper.contains("A100") {
            let big = upper.contains("80GB") || nominal_gb > 50;
            Some(if big {
                MigFamily::A100With80Gb
            } else {
                MigFamily::A100With40Gb
            })
        } else {
            None
        }
    }
}

fn slot(memory_slices: u32) -> usize {
    match memory_slices {
        1 => 0,
        2 => 1,
        4 => 2,
        _ => 3,
    }
}

fn sm_slot(compute: u32) -> usize {
    match compute {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        _ => 4,
    }
}

fn shape_profile(d: &FamilyData, s: &Shape) -> Option<GiProfile> {
    let gb = d.name_gb[slot(s.memory_slices)];
    let text = format!("{}g.{}gb{}", s.compute, gb, s.suffix);
    let name = text.parse::<MigProfileName>().ok()?;
    let media = s.suffix == "+me";
    let whole = s.compute == COMPUTE_SLICES;
    let (decoders, jpeg) = if d.hopper {
        let n = match s.compute {
            1 => 1,
            2 => 1,
            3 | 4 => 2,
            _ => 7,
        };
        (n, n)
    } else {
        let dec = match s.compute {
            1 => u32::from(media || s.memory_slices == 2),
            2 => 1,
            3 | 4 => 2,
            _ => 5,
        };
        (dec, u32::from(media || whole))
    };
    let copy_engines = if whole && d.hopper { 8 } else { s.compute };
    Some(GiProfile {
        info: GpuInstanceProfile {
            profile_index: s.index,
            id: s.id,
            name,
            slice_count: s.compute,
            instance_count: s.count,
            memory_mib: d.mib[slot(s.memory_slices)],
            multiprocessor_count: d.sms[sm_slot(s.compute)],
            copy_engine_count: copy_engines,
            decoder_count: decoders,
            encoder_count: 0,
            jpeg_count: jpeg,
            ofa_count: u32::from(media || whole),
        },
        memory_slices: s.memory_slices,
        starts: s.starts.to_vec(),
    })
}

impl GiProfile {
    /// Every placement the profile allows, occupied or not.
    pub(crate) fn placements(&self) -> Vec<Placement> {
        self.starts
            .iter()
            .map(|&start| Placement {
                start,
                size: self.memory_slices,
            })
            .collect()
    }
}

/// The GPU-instance id the driver gives an instance of this size at this start slot.
pub(crate) fn gpu_instance_id(p: &GiProfile, start: u32) -> u32 {
    match (p.memory_slices, p.info.slice_count) {
        (8, _) => 0,
        (4, 4) => 1,
        (4, _) => 1 + start / 4,
        (2, _) => 3 + start / 2,
        _ => 7 + start,
    }
}

fn overlaps(a: Placement, b: Placement) -> bool {
    a.start < b.start + b.size && b.start < a.start + a.size
}

fn compute_used(gis: &[GiState]) -> u32 {
    gis.iter().map(|g| g.compute_slices).sum()
}

/// Why an instance of `p` cannot go at `placement` now (NVML's code), or its new id.
pub(crate) fn check_create(
    p: &GiProfile,
    gis: &[GiState],
    placement: Placement,
) -> Result<u32, NvmlCode> {
    if placement.size != p.memory_slices || !p.starts.contains(&placement.start) {
        return Err(NvmlCode::INVALID_ARGUMENT);
    }
    let same = gis.iter().filter(|g| g.profile_id == p.info.id).count() as u32;
    let taken = gis.iter().any(|g| overlaps(g.placement(), placement));
    let no_compute = compute_used(gis) + p.info.slice_count > COMPUTE_SLICES;
    if taken || same >= p.info.instance_count || no_compute {
        return Err(NvmlCode::INSUFFICIENT_RESOURCES);
    }
    Ok(gpu_instance_id(p, placement.start))
}

/// How many more instances of `p` fit (`nvmlDeviceGetGpuInstanceRemainingCapacity`).
pub(crate) fn remaining_capacity(p: &GiProfile, gis: &[GiState]) -> u32 {
    let same = gis.iter().filter(|g| g.profile_id == p.info.id).count() as u32;
    let by_count = p.info.instance_count.saturating_sub(same);
    let by_compute = (COMPUTE_SLICES.saturating_sub(compute_used(gis))) / p.info.slice_count.max(1);
    // Placements of one profile are aligned to their size, so taking free ones left to right
    // finds the most that fit together.
    let mut chosen: Vec<Placement> = Vec::new();
    for pl in p.placements() {
        let free = !gis.iter().any(|g| overlaps(g.placement(), pl))
            && !chosen.iter().any(|c| overlaps(*c, pl));
        if free {
            chosen.push(pl);
        }
    }
    (chosen.len() as u32).min(by_count).min(by_compute)
}

/// Compute-instance shapes of a GPU instance with `compute` slices: (slices, NVML profile index).
fn ci_shapes(compute: u32) -> Vec<(u32, u32)> {
    [(1, 0), (2, 1), (3, 2), (4, 3), (7, 4)]
        .into_iter()
        .filter(|&(c, _)| c <= compute && !(compute == 4 && c == 3))
        .collect()
}

/// The compute-instance profiles of a GPU instance.
pub(crate) fn ci_profiles(gi: &GiState) -> Vec<ComputeInstanceProfile> {
    ci_shapes(gi.compute_slices)
        .into_iter()
        .map(|(c, index)| ComputeInstanceProfile {
            profile_index: index,
            id: index,
            slice_count: c,
            instance_count: gi.compute_slices / c,
            multiprocessor_count: gi.multiprocessors * c / gi.compute_slices.max(1),
        })
        .collect()
}

/// Places a new compute instance of profile `profile_id` in `gi`: its id and placement.
pub(crate) fn place_ci(gi: &GiState, profile_id: u32) -> Result<(u32, Placement), NvmlCode> {
    let profile = ci_profiles(gi)
        .into_iter()
        .find(|p| p.id == profile_id)
        .ok_or(NvmlCode::INVALID_ARGUMENT)?;
    let same = gi.cis.iter().filter(|c| c.profile_id == profile_id).count() as u32;
    let used: u32 = gi.cis.iter().map(|c| c.placement.size).sum();
    if same >= profile.instance_count || used + profile.slice_count > gi.compute_slices {
        return Err(NvmlCode::INSUFFICIENT_RESOURCES);
    }
    let size = profile.slice_count;
    let placement = (0..profile.instance_count)
        .map(|k| Placement {
            start: k * size,
            size,
        })
        .find(|pl| !gi.cis.iter().any(|c: &CiState| overlaps(c.placement, *pl)))
        .ok_or(NvmlCode::INSUFFICIENT_RESOURCES)?;
    let id = (0..)
        .find(|id| !gi.cis.iter().any(|c| c.id == *id))
        .unwrap_or(0);
    Ok((id, placement))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_guessed_from_product_names() {
        let cases = [
            (
                "NVIDIA A100-SXM4-80GB",
                81920,
                Some(MigFamily::A100With80Gb),
            ),
            (
                "NVIDIA A100-PCIE-40GB",
                40960,
                Some(MigFamily::A100With40Gb),
            ),
            (
                "NVIDIA A100-SXM4-40GB",
                40536,
                Some(MigFamily::A100With40Gb),
            ),
            (
                "NVIDIA H100 80GB HBM3",
                81559,
                Some(MigFamily::H100With80Gb),
            ),
            ("NVIDIA H100 NVL", 95830, Some(MigFamily::H100With94Gb)),
            ("NVIDIA H200", 143771, Some(MigFamily::H200With141Gb)),
            ("NVIDIA A30", 24576, None),
            ("NVIDIA GH200 480GB", 97871, None),
            ("Tesla T4", 15360, None),
        ];
        for (name, mib, family) in cases {
            assert_eq!(MigFamily::from_product_name(name, mib), family, "{name}");
        }
        let p: MigProfileName = "1g.18gb".parse().unwrap();
        assert!(MigFamily::H200With141Gb.has_profile(&p));
        assert!(!MigFamily::A100With80Gb.has_profile(&p));
    }

    fn gi(p: &GiProfile, start: u32) -> GiState {
        GiState::new(gpu_instance_id(p, start), p, start)
    }

    #[test]
    fn a100_80gb_table_matches_nvidia_smi() {
        let names: Vec<(u32, String)> = MigFamily::A100With80Gb
            .profiles()
            .iter()
            .map(|p| (p.info.id, p.info.name.to_string()))
            .collect();
        for (id, name) in [
            (19, "1g.10gb"),
            (20, "1g.10gb+me"),
            (15, "1g.20gb"),
            (14, "2g.20gb"),
            (9, "3g.40gb"),
            (5, "4g.40gb"),
            (0, "7g.80gb"),
        ] {
            assert!(
                names.contains(&(id, name.to_owned())),
                "{id} {name} in {names:?}"
            );
        }
        for f in [
            MigFamily::A100With40Gb,
            MigFamily::A100With80Gb,
            MigFamily::H100With80Gb,
            MigFamily::H100With94Gb,
            MigFamily::H200With141Gb,
        ] {
            assert_eq!(f.profiles().len(), SHAPES.len(), "{f:?}");
        }
        let h200 = MigFamily::H200With141Gb.profile(0).unwrap();
        assert_eq!(h200.info.name.to_string(), "7g.141gb");
    }

    #[test]
    fn fragmentation_and_fill() {
        let f = MigFamily::A100With80Gb;
        let one = f.profile(19).unwrap();
        let two = f.profile(14).unwrap();
        let three = f.profile(9).unwrap();
        let gis = vec![gi(&one, 0), gi(&one, 1), gi(&two, 2)];
        assert_eq!(
            check_create(&three, &gis, Placement { start: 0, size: 4 }),
            Err(NvmlCode::INSUFFICIENT_RESOURCES)
        );
        assert_eq!(
            check_create(&three, &gis, Placement { start: 4, size: 4 }),
            Ok(2)
        );
        assert_eq!(
            check_create(&three, &gis, Placement { start: 2, size: 4 }),
            Err(NvmlCode::INVALID_ARGUMENT)
        );
        assert_eq!(remaining_capacity(&three, &gis), 1);
        let ids: Vec<u32> = gis.iter().map(|g| g.id).collect();
        assert_eq!(ids, vec![7, 8, 4]);
    }

    #[test]
    fn compute_instances_subdivide() {
        let f = MigFamily::A100With80Gb;
        let g = gi(&f.profile(9).unwrap(), 0);
        let shapes: Vec<(u32, u32)> = ci_profiles(&g)
            .iter()
            .map(|p| (p.slice_count, p.instance_count))
            .collect();
        assert_eq!(shapes, vec![(1, 3), (2, 1), (3, 1)]);
        let four = gi(&f.profile(5).unwrap(), 0);
        assert!(!ci_profiles(&four).iter().any(|p| p.slice_count == 3));
        assert_eq!(
            place_ci(&g, 2).unwrap(),
            (0, Placement { start: 0, size: 3 })
        );
        assert_eq!(place_ci(&g, 4), Err(NvmlCode::INVALID_ARGUMENT));
    }
}
