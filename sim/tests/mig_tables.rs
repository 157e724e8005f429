//! The simulator's MIG profile tables as NVML reports them, row by row, for every GPU family:
//! each row is the NVIDIA MIG User Guide's "Supported MIG Profiles" table of that GPU (profile
//! names, instance counts, copy engines, NVDEC/JPEG/OFA) with the memory and SM counts
//! `nvidia-smi mig -lgip` prints on that GPU (sources in `sim/src/mig.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use sim::{MigFamily, Profile, SimHost};

/// (name, NVML profile index, profile id, compute slices, instances, MiB, SMs, CE, NVDEC, JPEG,
/// OFA), in NVML profile-index order.
type Row = (String, u32, u32, u32, u32, u64, u32, u32, u32, u32, u32);
/// A [`Row`] as the tests write it.
type RowStr = (
    &'static str,
    u32,
    u32,
    u32,
    u32,
    u64,
    u32,
    u32,
    u32,
    u32,
    u32,
);

/// The expected rows, names written as `&str`.
fn rows(want: &[RowStr]) -> Vec<Row> {
    want.iter()
        .map(|&(n, a, b, c, d, e, f, g, h, i, j)| (n.to_owned(), a, b, c, d, e, f, g, h, i, j))
        .collect()
}

/// dgx-a100 with every GPU turned into `family` (`name` as NVML reports it), MIG mode on.
fn host_of(family: MigFamily, name: &str) -> SimHost {
    let mut p = Profile::builtin("dgx-a100").unwrap();
    for m in p.models.values_mut() {
        m.mig = Some(family);
        m.name = name.to_owned();
    }
    SimHost::new(p).unwrap()
}

fn table(family: MigFamily, name: &str) -> Vec<Row> {
    let h = host_of(family, name);
    let nvml = h.nvml();
    assert!(nvml.mig_mode(0).unwrap().current);
    nvml.gpu_instance_profiles(0)
        .unwrap()
        .into_iter()
        .map(|p| {
            (
                p.name.to_string(),
                p.profile_index,
                p.id,
                p.slice_count,
                p.instance_count,
                p.memory_mib,
                p.multiprocessor_count,
                p.copy_engine_count,
                p.decoder_count,
                p.jpeg_count,
                p.ofa_count,
            )
        })
        .collect()
}

#[test]
fn a100_40gb_rows() {
    let want = rows(&[
        ("1g.5gb", 0, 19, 1, 7, 4864, 14, 1, 0, 0, 0),
        ("2g.10gb", 1, 14, 2, 3, 9856, 28, 2, 1, 0, 0),
        ("3g.20gb", 2, 9, 3, 2, 19968, 42, 3, 2, 0, 0),
        ("4g.20gb", 3, 5, 4, 1, 19968, 56, 4, 2, 0, 0),
        ("7g.40gb", 4, 0, 7, 1, 40192, 98, 7, 5, 1, 1),
        ("1g.5gb+me", 7, 20, 1, 1, 4864, 14, 1, 1, 1, 1),
        ("1g.10gb", 9, 15, 1, 4, 9856, 14, 1, 1, 0, 0),
    ]);
    assert_eq!(
        table(MigFamily::A100With40Gb, "NVIDIA A100-SXM4-40GB"),
        want
    );
}

#[test]
fn a100_80gb_rows() {
    let want = rows(&[
        ("1g.10gb", 0, 19, 1, 7, 9728, 14, 1, 0, 0, 0),
        ("2g.20gb", 1, 14, 2, 3, 19968, 28, 2, 1, 0, 0),
        ("3g.40gb", 2, 9, 3, 2, 40192, 42, 3, 2, 0, 0),
        ("4g.40gb", 3, 5, 4, 1, 40192, 56, 4, 2, 0, 0),
        ("7g.80gb", 4, 0, 7, 1, 81152, 98, 7, 5, 1, 1),
        ("1g.10gb+me", 7, 20, 1, 1, 9728, 14, 1, 1, 1, 1),
        ("1g.20gb", 9, 15, 1, 4, 19968, 14, 1, 1, 0, 0),
    ]);
    assert_eq!(
        table(MigFamily::A100With80Gb, "NVIDIA A100-SXM4-80GB"),
        want
    );
}

#[test]
fn h100_80gb_rows() {
    let want = rows(&[
        ("1g.10gb", 0, 19, 1, 7, 9984, 16, 1, 1, 1, 0),
        ("2g.20gb", 1, 14, 2, 3, 20096, 32, 2, 2, 2, 0),
        ("3g.40gb", 2, 9, 3, 2, 40448, 60, 3, 3, 3, 0),
        ("4g.40gb", 3, 5, 4, 1, 40448, 64, 4, 4, 4, 0),
        ("7g.80gb", 4, 0, 7, 1, 80896, 132, 8, 7, 7, 1),
        ("1g.10gb+me", 7, 20, 1, 1, 9984, 16, 1, 1, 1, 1),
        ("1g.20gb", 9, 15, 1, 4, 20096, 26, 1, 1, 1, 0),
    ]);
    assert_eq!(
        table(MigFamily::H100With80Gb, "NVIDIA H100 80GB HBM3"),
        want
    );
}

#[test]
fn h100_94gb_rows() {
    let want = rows(&[
        ("1g.12gb", 0, 19, 1, 7, 11008, 16, 1, 1, 1, 0),
        ("2g.24gb", 1, 14, 2, 3, 22144, 32, 2, 2, 2, 0),
        ("3g.47gb", 2, 9, 3, 2, 47488, 60, 3, 3, 3, 0),
        ("4g.47gb", 3, 5, 4, 1, 47488, 64, 4, 4, 4, 0),
        ("7g.94gb", 4, 0, 7, 1, 94843, 132, 8, 7, 7, 1),
        ("1g.12gb+me", 7, 20, 1, 1, 11008, 16, 1, 1, 1, 1),
        ("1g.24gb", 9, 15, 1, 4, 22144, 26, 1, 1, 1, 0),
    ]);
    assert_eq!(table(MigFamily::H100With94Gb, "NVIDIA H100 NVL"), want);
}

#[test]
fn h200_141gb_rows() {
    let want = rows(&[
        ("1g.18gb", 0, 19, 1, 7, 16384, 16, 1, 1, 1, 0),
        ("2g.35gb", 1, 14, 2, 3, 33024, 32, 2, 2, 2, 0),
        ("3g.71gb", 2, 9, 3, 2, 71168, 60, 3, 3, 3, 0),
        ("4g.71gb", 3, 5, 4, 1, 71168, 64, 4, 4, 4, 0),
        ("7g.141gb", 4, 0, 7, 1, 143104, 132, 8, 7, 7, 1),
        ("1g.18gb+me", 7, 20, 1, 1, 16384, 16, 1, 1, 1, 1),
        ("1g.35gb", 9, 15, 1, 4, 33024, 26, 1, 1, 1, 0),
    ]);
    assert_eq!(table(MigFamily::H200With141Gb, "NVIDIA H200"), want);
}

#[test]
fn the_two_slice_1g_profile_sits_on_even_slots() {
    // The guide's placement diagrams: 1g.20gb (H100) spans two memory slices, four instances.
    let h = host_of(MigFamily::H100With80Gb, "NVIDIA H100 80GB HBM3");
    let starts: Vec<u32> = h
        .nvml()
        .gpu_instance_possible_placements(0, 15)
        .unwrap()
        .iter()
        .map(|p| p.start)
        .collect();
    assert_eq!(starts, vec![0, 2, 4, 6]);
}
