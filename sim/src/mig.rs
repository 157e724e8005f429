//! NVIDIA MIG geometry: the GPU-instance profile tables of each GPU family and the placement
//! rules NVML enforces.
//!
//! A GPU has 8 memory slices (the placement axis) and 7 compute slices. Every table below names
//! its source next to it: profile names, instance counts, copy engines and NVDEC/JPEG/OFA per
//! profile are the NVIDIA MIG User Guide's "Supported MIG Profiles" tables (A100, H100, H100-94GB,
//! H200); MiB and SM counts, which the guide gives only as fractions, are what
//! `nvidia-smi mig -lgip` prints on that GPU in listings NVIDIA posted. Profile ids are the ones
//! `nvidia-smi mig -lgip` prints (the same on A100, H100 and H200 drivers); profile indexes are
//! NVML's `NVML_GPU_INSTANCE_PROFILE_*` constants. GPU-instance ids follow the driver's fixed
//! numbering by size and start slot (7g → 0; 4g → 1; 3g → 1, 2; 2-slice → 3..6; 1-slice →
//! 7..13), so ids are unique among instances that can coexist.

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

/// One row of a family's GPU-instance profile table, as `nvidia-smi mig -lgip` prints it.
struct Row {
    /// NVML's `NVML_GPU_INSTANCE_PROFILE_*` index.
    index: u32,
    /// The profile id NVML and `nvidia-smi` use to create instances.
    id: u32,
    name: &'static str,
    compute: u32,
    memory_slices: u32,
    count: u32,
    starts: &'static [u32],
    mib: u64,
    sms: u32,
    copy_engines: u32,
    decoders: u32,
    jpeg: u32,
    ofa: u32,
}

/// NVML's profile indexes (nvml.h `NVML_GPU_INSTANCE_PROFILE_*`: `_1_SLICE` 0, `_2_SLICE` 1,
/// `_3_SLICE` 2, `_4_SLICE` 3, `_7_SLICE` 4, `_1_SLICE_REV1` 7 (1g+me), `_1_SLICE_REV2` 9
/// (1 compute slice on 2 memory slices); the newer `_GFX` 10-12, `_NO_ME` 13-14 and `_ALL_ME`
/// 15-16 profiles (`+gfx`, `-me`, `+me.all`) appear on Blackwell boards only, not in the tables of
/// the GPUs below).
mod index {
    pub const ONE: u32 = 0;
    pub const TWO: u32 = 1;
    pub const THREE: u32 = 2;
    pub const FOUR: u32 = 3;
    pub const SEVEN: u32 = 4;
    pub const ONE_ME: u32 = 7;
    pub const ONE_TWO_MEM: u32 = 9;
}

const ALL_ONES: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const TWO_MEM_STARTS: &[u32] = &[0, 2, 4, 6];
const TWO_STARTS: &[u32] = &[0, 2, 4];
const FOUR_MEM_STARTS: &[u32] = &[0, 4];
const WHOLE: &[u32] = &[0];

/// Rows of one family, in NVML profile-index order. `mib` and `sms` per size; the engine counts
/// (copy engines, NVDEC, JPEG, OFA) and instance counts per profile come from `media`.
struct Sizes {
    names: [&'static str; 7],
    /// MiB for 1, 2, 4 and 8 memory slices.
    mib: [u64; 4],
    /// SMs of 1g (1 memory slice), 1g (2 memory slices), 2g, 3g, 4g and 7g.
    sms: [u32; 6],
    /// (copy engines, decoders, JPEG, OFA) of 1g, 1g+me, 1g (2 slices), 2g, 3g, 4g, 7g.
    media: [(u32, u32, u32, u32); 7],
}

fn rows(z: &Sizes) -> [Row; 7] {
    let shape = [
        (index::ONE, 19, 1, 1, 7, ALL_ONES, z.mib[0], z.sms[0]),
        (index::TWO, 14, 2, 2, 3, TWO_STARTS, z.mib[1], z.sms[2]),
        (
            index::THREE,
            9,
            3,
            4,
            2,
            FOUR_MEM_STARTS,
            z.mib[2],
            z.sms[3],
        ),
        (index::FOUR, 5, 4, 4, 1, WHOLE, z.mib[2], z.sms[4]),
        (index::SEVEN, 0, 7, 8, 1, WHOLE, z.mib[3], z.sms[5]),
        (index::ONE_ME, 20, 1, 1, 1, ALL_ONES, z.mib[0], z.sms[0]),
        (
            index::ONE_TWO_MEM,
            15,
            1,
            2,
            4,
            TWO_MEM_STARTS,
            z.mib[1],
            z.sms[1],
        ),
    ];
    // `names` and `media` are in table order (1g, 1g+me, 1g two-slice, 2g, 3g, 4g, 7g).
    let table_pos = [0, 3, 4, 5, 6, 1, 2];
    std::array::from_fn(|k| {
        let (index, id, compute, memory_slices, count, starts, mib, sms) = shape[k];
        let pos = table_pos[k];
        let (copy_engines, decoders, jpeg, ofa) = z.media[pos];
        Row {
            index,
            id,
            name: z.names[pos],
            compute,
            memory_slices,
            count,
            starts,
            mib,
            sms,
            copy_engines,
            decoders,
            jpeg,
            ofa,
        }
    })
}

/// Profile names of the 80 GB parts (A100 80GB and H100 80GB): the same rows, the same
/// memory proportions.
const NAMES_80GB: [&str; 7] = [
    "1g.10gb",
    "1g.10gb+me",
    "1g.20gb",
    "2g.20gb",
    "3g.40gb",
    "4g.40gb",
    "7g.80gb",
];

/// Ampere engines per profile: NVIDIA MIG User Guide, "Supported MIG Profiles", A100 table
/// (A100-SXM4-40GB; the 80GB product has the same rows with doubled memory): 1g.5gb
/// 0 NVDEC/0 JPEG/0 OFA, 1g.5gb+me 1/1/1, 1g.10gb 1/0/0, 2g.10gb 1/0/0, 3g.20gb 2/0/0,
/// 4g.20gb 2/0/0, 7g.40gb 5/1/1; copy engines 1, 1, 1, 2, 3, 4, 7.
const AMPERE_MEDIA: [(u32, u32, u32, u32); 7] = [
    (1, 0, 0, 0),
    (1, 1, 1, 1),
    (1, 1, 0, 0),
    (2, 1, 0, 0),
    (3, 2, 0, 0),
    (4, 2, 0, 0),
    (7, 5, 1, 1),
];

/// Hopper engines per profile: NVIDIA MIG User Guide, "Supported MIG Profiles", H100 table
/// (1g 1 NVDEC/1 JPEG/0 OFA, 1g+me 1/1/1, 2g 2/2/0, 3g 3/3/0, 4g 4/4/0, 7g 7/7/1; 8 copy engines
/// on 7g), the same as the CE/DEC/JPEG/OFA columns of `nvidia-smi mig -lgip` on H100 NVL
/// (NVIDIA/gpu-operator#900) and H200 (NVIDIA/mig-parted#120).
const HOPPER_MEDIA: [(u32, u32, u32, u32); 7] = [
    (1, 1, 1, 0),
    (1, 1, 1, 1),
    (1, 1, 1, 0),
    (2, 2, 2, 0),
    (3, 3, 3, 0),
    (4, 4, 4, 0),
    (8, 7, 7, 1),
];

/// Hopper SMs (1g, 1g two-slice, 2g, 3g, 4g, 7g) from `nvidia-smi mig -lgip` on H100 80GB, H100
/// NVL and H200 (NVIDIA/gpu-operator#900, NVIDIA/mig-parted#120): the two-slice 1g profile has
/// 26 SMs, not 16.
const HOPPER_SMS: [u32; 6] = [16, 26, 32, 60, 64, 132];

/// Ampere SMs (`nvidia-smi mig -lgip` in the MIG User Guide's "Getting Started" section).
const AMPERE_SMS: [u32; 6] = [14, 14, 28, 42, 56, 98];

impl MigFamily {
    fn sizes(self) -> Sizes {
        match self {
            // NVIDIA MIG User Guide, "Supported MIG Profiles", A100 table (A100-SXM4-40GB);
            // MiB as the driver reports them (unchanged from the earlier table).
            MigFamily::A100With40Gb => Sizes {
                names: [
                    "1g.5gb",
                    "1g.5gb+me",
                    "1g.10gb",
                    "2g.10gb",
                    "3g.20gb",
                    "4g.20gb",
                    "7g.40gb",
                ],
                mib: [4864, 9856, 19968, 40192],
                sms: AMPERE_SMS,
                media: AMPERE_MEDIA,
            },
            // Same guide table; "for A100-SXM4-80GB, the profile names will change according
            // to the memory proportion".
            MigFamily::A100With80Gb => Sizes {
                names: NAMES_80GB,
                mib: [9728, 19968, 40192, 81152],
                sms: AMPERE_SMS,
                media: AMPERE_MEDIA,
            },
            // NVIDIA MIG User Guide, "Supported MIG Profiles", H100 table (H100-80GB). MiB from
            // `nvidia-smi mig -lgip` on an H100 80GB: 9.75 / 19.62 / 39.50 GiB. The 7g row's
            // 80896 MiB is kept from the earlier table: no published listing was found for it.
            MigFamily::H100With80Gb => Sizes {
                names: NAMES_80GB,
                mib: [9984, 20096, 40448, 80896],
                sms: HOPPER_SMS,
                media: HOPPER_MEDIA,
            },
            // NVIDIA MIG User Guide, "Supported MIG Profiles", H100-94GB table. MiB from
            // `nvidia-smi mig -lgip` on an H100 NVL posted by NVIDIA (NVIDIA/gpu-operator#900,
            // NVIDIA/mig-parted#101): 10.75 / 21.62 / 46.38 GiB = 11008 / 22144 / 47488 MiB.
            // Issue 13 quoted about 10,875 / 22,016 / 47,226 MiB; the driver's listing is
            // followed. The 7g row (94,843 MiB) is issue 13's figure: no listing was found.
            MigFamily::H100With94Gb => Sizes {
                names: [
                    "1g.12gb",
                    "1g.12gb+me",
                    "1g.24gb",
                    "2g.24gb",
                    "3g.47gb",
                    "4g.47gb",
                    "7g.94gb",
                ],
                mib: [11008, 22144, 47488, 94843],
                sms: HOPPER_SMS,
                media: HOPPER_MEDIA,
            },
            // NVIDIA MIG User Guide, "Supported MIG Profiles", H200 table (H200-141GB). MiB
            // from `nvidia-smi mig -lgip` on an HGX H200 (NVIDIA/mig-parted#120): 16.00 / 32.25
            // / 69.50 / 139.75 GiB.
            MigFamily::H200With141Gb => Sizes {
                names: [
                    "1g.18gb",
                    "1g.18gb+me",
                    "1g.35gb",
                    "2g.35gb",
                    "3g.71gb",
                    "4g.71gb",
                    "7g.141gb",
                ],
                mib: [16384, 33024, 71168, 143104],
                sms: HOPPER_SMS,
                media: HOPPER_MEDIA,
            },
        }
    }

    /// Every GPU-instance profile of the family, in NVML profile-index order.
    pub(crate) fn profiles(self) -> Vec<GiProfile> {
        // Every name in the tables parses (a unit test checks all seven per family).
        rows(&self.sizes()).iter().filter_map(row_profile).collect()
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

fn row_profile(r: &Row) -> Option<GiProfile> {
    Some(GiProfile {
        info: GpuInstanceProfile {
            profile_index: r.index,
            id: r.id,
            name: r.name.parse::<MigProfileName>().ok()?,
            slice_count: r.compute,
            instance_count: r.count,
            memory_mib: r.mib,
            multiprocessor_count: r.sms,
            copy_engine_count: r.copy_engines,
            decoder_count: r.decoders,
            // No MIG profile of these GPUs has an NVENC (the guide's tables list none).
            encoder_count: 0,
            jpeg_count: r.jpeg,
            ofa_count: r.ofa,
        },
        memory_slices: r.memory_slices,
        starts: r.starts.to_vec(),
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
            assert_eq!(f.profiles().len(), 7, "{f:?}");
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
