//! The C structs and enum values of GIM's host `amdsmi.h` that vgpud exchanges, restated.
//!
//! Source: `smi-lib/interface/amdsmi.h` in AMD's MxGPU-Virtualization repository
//! (@195468d60fdadd49dbf8a8172a5e333d6e80f1ec), x86_64 layout. The header is not available at
//! build time, so each struct's size (and the offsets of the fields read) is asserted below: a
//! mistyped field fails the build instead of reading the wrong bytes. Fields vgpud never reads
//! are kept (as `_name`) only to hold their place.
#![allow(unsafe_code)]

use std::mem::{offset_of, size_of};

/// `AMDSMI_INIT_AMD_GPUS`. The host library ignores the flags; the header says only this one
/// is supported.
pub(crate) const INIT_AMD_GPUS: u64 = 1 << 1;
/// `AMDSMI_LINK_TYPE_XGMI` (`amdsmi_link_type_t`: INTERNAL 0, PCIE 1, XGMI 2).
pub(crate) const LINK_TYPE_XGMI: u32 = 2;
/// `AMDSMI_GPU_UUID_SIZE`: the library refuses smaller buffers.
pub(crate) const UUID_SIZE: usize = 38;
/// Length of the fixed `char[]` fields (`AMDSMI_256_LENGTH`).
pub(crate) const NAME_LENGTH: usize = 256;
/// `AMDSMI_MAX_ACCELERATOR_PROFILE`: entries in a profile config.
pub(crate) const MAX_PROFILES: usize = 32;
/// `AMDSMI_MAX_CP_PROFILE_RESOURCES`.
const MAX_RESOURCE_PROFILES: usize = 32;
/// `AMDSMI_MAX_ACCELERATOR_PARTITIONS`.
const MAX_PARTITIONS: usize = 8;
/// `AMDSMI_MAX_NUM_NUMA_NODES`.
const MAX_NUMA_NODES: usize = 32;
/// Handles in `amdsmi_topology_nearest_t.processor_list`.
pub(crate) const MAX_NEAREST: usize = 32;

/// Structs whose every field is an integer or an array of integers, so all-zero bytes are a
/// valid value of them.
///
/// # Safety
/// Implement only for such structs.
pub(crate) unsafe trait Plain: Sized {
    /// A zeroed value on the heap (some are tens of KiB).
    fn zeroed() -> Box<Self> {
        // SAFETY: `Self: Plain`, so all-zero bytes are a valid `Self`.
        unsafe { Box::<Self>::new_zeroed().assume_init() }
    }
}

/// `amdsmi_asic_info_t` (896 bytes).
#[repr(C)]
pub(crate) struct AsicInfo {
    pub(crate) market_name: [u8; NAME_LENGTH],
    _vendor_id: u32,
    _vendor_name: [u8; NAME_LENGTH],
    _subvendor_id: u32,
    _device_id: u64,
    _rev_id: u32,
    _asic_serial: [u8; NAME_LENGTH],
    _oam_id: u32,
    _num_of_compute_units: u32,
    _target_graphics_version: u64,
    _subsystem_id: u32,
    _reserved: [u32; 21],
}

/// `amdsmi_vram_info_t` (584 bytes); `vram_size` is in MB.
#[repr(C)]
pub(crate) struct VramInfo {
    _vram_type: u32,
    _vram_vendor: [u8; NAME_LENGTH],
    pub(crate) vram_size_mb: u64,
    _vram_bit_width: u32,
    _vram_max_bandwidth: u64,
    _reserved: [u64; 37],
}

/// `amdsmi_accelerator_partition_profile_t` (1152 bytes).
#[repr(C)]
pub(crate) struct Profile {
    /// `amdsmi_accelerator_partition_type_t`: SPX 1, DPX 2, TPX 3, QPX 4, CPX 5.
    pub(crate) profile_type: u32,
    _num_partitions: u32,
    /// `amdsmi_nps_caps_t`: the memory modes this profile allows.
    _memory_caps: u32,
    /// The index `amdsmi_set_gpu_accelerator_partition_profile` takes for this profile.
    pub(crate) profile_index: u32,
    _num_resources: u32,
    _resources: [[u32; MAX_RESOURCE_PROFILES]; MAX_PARTITIONS],
    _reserved: [u64; 13],
}

/// `amdsmi_accelerator_partition_resource_profile_t` (64 bytes).
#[repr(C)]
struct ResourceProfile {
    _profile_index: u32,
    _resource_type: u32,
    _partition_resource: u32,
    _num_partitions_share_resource: u32,
    _reserved: [u64; 6],
}

/// `amdsmi_accelerator_partition_profile_config_t` (39168 bytes): the profiles valid for the
/// GPU's current VF count, numbered 0..`num_profiles`.
#[repr(C)]
pub(crate) struct ProfileConfig {
    pub(crate) num_profiles: u32,
    _num_resource_profiles: u32,
    _resource_profiles: [ResourceProfile; MAX_RESOURCE_PROFILES],
    _default_profile_index: u32,
    pub(crate) profiles: [Profile; MAX_PROFILES],
    _reserved: [u64; 30],
}

/// `amdsmi_accelerator_partition_profile_global_t` (1208 bytes): a profile with the VF counts
/// it takes.
#[repr(C)]
pub(crate) struct GlobalProfile {
    pub(crate) profile: Profile,
    /// `amdsmi_vf_mode_t` bits: bit N set = N VFs allowed (MODE_1 = 1 << 1 ... MODE_8 = 1 << 8).
    pub(crate) vf_mode: u32,
    _reserved: [u64; 6],
}

/// `amdsmi_accelerator_partition_profile_config_global_t` (40960 bytes): every profile of the
/// GPU, whatever the VF count (host only).
#[repr(C)]
pub(crate) struct GlobalProfileConfig {
    pub(crate) num_profiles: u32,
    _num_resource_profiles: u32,
    _resource_profiles: [ResourceProfile; MAX_RESOURCE_PROFILES],
    _default_profile_index: u32,
    pub(crate) profiles: [GlobalProfile; MAX_PROFILES],
    _reserved: [u64; 30],
}

/// `amdsmi_numa_range_t` inside the memory partition config (24 bytes).
#[repr(C)]
struct NumaRange {
    _memory_type: u32,
    _start: u64,
    _end: u64,
}

/// `amdsmi_memory_partition_config_t` (872 bytes).
#[repr(C)]
pub(crate) struct MemoryConfig {
    /// `amdsmi_nps_caps_t`: bit 0 NPS1, bit 1 NPS2, bit 2 NPS4, bit 3 NPS8.
    pub(crate) nps_caps: u32,
    /// `amdsmi_memory_partition_type_t`: NPS1 1, NPS2 2, NPS4 4, NPS8 8.
    pub(crate) mp_mode: u32,
    _num_numa_ranges: u32,
    _numa_range: [NumaRange; MAX_NUMA_NODES],
    _reserved: [u64; 11],
}

/// `amdsmi_topology_nearest_t`: the processors linked to one by a given link type.
#[repr(C)]
pub(crate) struct TopologyNearest {
    pub(crate) count: u32,
    pub(crate) processor_list: [*mut std::ffi::c_void; MAX_NEAREST],
    _reserved: [u64; 15],
}

// SAFETY: every field of these structs is an integer or an array of integers (or of such
// structs); a null pointer is all-zero bytes.
unsafe impl Plain for AsicInfo {}
// SAFETY: as above.
unsafe impl Plain for VramInfo {}
// SAFETY: as above.
unsafe impl Plain for ProfileConfig {}
// SAFETY: as above.
unsafe impl Plain for Profile {}
// SAFETY: as above.
unsafe impl Plain for MemoryConfig {}
// SAFETY: as above.
unsafe impl Plain for GlobalProfileConfig {}
// SAFETY: as above (the handle array holds raw pointers, for which zero is null).
unsafe impl Plain for TopologyNearest {}

// Sizes and offsets from gim-facts (checked there with gcc on a re-typed header).
const _: () = assert!(size_of::<AsicInfo>() == 896);
const _: () = assert!(offset_of!(AsicInfo, _device_id) == 520);
const _: () = assert!(offset_of!(AsicInfo, _target_graphics_version) == 800);
const _: () = assert!(size_of::<VramInfo>() == 584);
const _: () = assert!(offset_of!(VramInfo, vram_size_mb) == 264);
const _: () = assert!(size_of::<Profile>() == 1152);
const _: () = assert!(offset_of!(Profile, profile_index) == 12);
const _: () = assert!(offset_of!(Profile, _reserved) == 1048);
const _: () = assert!(size_of::<ResourceProfile>() == 64);
const _: () = assert!(size_of::<ProfileConfig>() == 39168);
const _: () = assert!(offset_of!(ProfileConfig, _default_profile_index) == 2056);
const _: () = assert!(offset_of!(ProfileConfig, profiles) == 2064);
const _: () = assert!(offset_of!(ProfileConfig, _reserved) == 38928);
const _: () = assert!(size_of::<GlobalProfile>() == 1208);
const _: () = assert!(offset_of!(GlobalProfile, vf_mode) == 1152);
const _: () = assert!(offset_of!(GlobalProfile, _reserved) == 1160);
const _: () = assert!(size_of::<GlobalProfileConfig>() == 40960);
const _: () = assert!(offset_of!(GlobalProfileConfig, profiles) == 2064);
const _: () = assert!(offset_of!(GlobalProfileConfig, _reserved) == 40720);
const _: () = assert!(size_of::<NumaRange>() == 24);
const _: () = assert!(size_of::<MemoryConfig>() == 872);
const _: () = assert!(offset_of!(MemoryConfig, mp_mode) == 4);
const _: () = assert!(offset_of!(MemoryConfig, _numa_range) == 16);
const _: () = assert!(offset_of!(MemoryConfig, _reserved) == 784);
const _: () = assert!(offset_of!(TopologyNearest, processor_list) == 8);
// 4 + 4 padding + 32 pointers + 15 u64: computed from the field list, the facts give no size.
const _: () = assert!(size_of::<TopologyNearest>() == 384);
