//! The comparison on simulated hosts, through the same read-only traits the real probe uses:
//! a simulated host against its own profile is all "equal", an altered model "differs".
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic on failure

use gpu_probe::compare::{Item, Verdict};
use gpu_probe::model::{MatchedBy, builtin_profiles};
use gpu_probe::nvml_extra::NotModelled;
use gpu_probe::observe::Sources;
use gpu_probe::reads::{ReadNvml, ReadSysfs};
use gpu_probe::report::{Report, probe};
use sim::{MigFamily, Profile, SimHost};

fn probe_host(host: &SimHost, candidates: &[Profile]) -> Report {
    let nvml = host.nvml();
    let sysfs = host.sysfs();
    let src = Sources {
        nvml: ReadNvml::new(&*nvml),
        extra: &NotModelled,
        sysfs: ReadSysfs::new(&*sysfs),
    };
    probe(src, candidates).unwrap()
}

/// hgx-h200 with MIG on and no VFs at boot, so that NVML lists the MIG tables.
fn h200_mig_on() -> Profile {
    let mut p = Profile::builtin("hgx-h200").unwrap();
    for gpu in &mut p.gpus {
        gpu.mig_enabled = true;
    }
    for model in p.models.values_mut() {
        if let Some(sriov) = model.sriov.as_mut() {
            sriov.boot_vfs = 0;
        }
    }
    p
}

fn items<'a>(report: &'a Report, prefix: &str) -> Vec<&'a Item> {
    report
        .gpus
        .iter()
        .flat_map(|g| &g.comparison)
        .filter(|i| i.name.starts_with(prefix))
        .collect()
}

fn assert_only(report: &Report, allowed: &[Verdict]) {
    for gpu in &report.gpus {
        for i in &gpu.comparison {
            assert!(allowed.contains(&i.verdict), "{i:?}");
        }
    }
}

#[test]
fn each_builtin_profile_matches_itself() {
    let candidates = builtin_profiles().unwrap();
    for profile in &candidates {
        // The probe is NVIDIA's: a host without an NVIDIA GPU has no NVML driver to probe.
        if !profile
            .models
            .values()
            .any(|m| m.vendor == ids::PciVendorId::NVIDIA)
        {
            continue;
        }
        let host = SimHost::new(profile.clone()).unwrap();
        let report = probe_host(&host, &candidates);
        for gpu in &report.gpus {
            if gpu
                .observation
                .info
                .ok()
                .is_some_and(|i| !i.name.contains("NVIDIA"))
            {
                continue;
            }
            let model = gpu
                .model
                .as_ref()
                .unwrap_or_else(|| panic!("{}: {gpu:?}", profile.name));
            assert_eq!(model.matched_by, MatchedBy::ProductName);
            for i in &gpu.comparison {
                // Runtime state the probed host may not show: MIG tables while MIG is off, VFs
                // while none are enabled (`hgx-h200-vgpu` boots without them). All else is equal.
                let runtime = i.name.starts_with("mig.") || i.name.starts_with("pci.vf.");
                let ok =
                    i.verdict == Verdict::Equal || (i.verdict == Verdict::NotObserved && runtime);
                assert!(ok, "{}: {i:?}", profile.name);
            }
        }
    }
}

#[test]
fn h200_with_mig_on_is_all_equal_including_the_mig_tables() {
    let host = SimHost::new(h200_mig_on()).unwrap();
    let report = probe_host(&host, &builtin_profiles().unwrap());
    assert_eq!(report.gpus.len(), 8);
    // No VFs on the probed host: their items are not observed; everything else is equal.
    for i in items(&report, "") {
        let ok = i.verdict == Verdict::Equal
            || (i.verdict == Verdict::NotObserved && i.name.starts_with("pci.vf."));
        assert!(ok, "{i:?}");
    }
    let mig = items(&report, "mig.profile.");
    assert!(!mig.is_empty());
    assert!(mig.iter().all(|i| i.verdict == Verdict::Equal));
    assert!(!items(&report, "mig.placements.").is_empty());
    assert!(!items(&report, "vgpu.type.").is_empty());
    // However the simulator models NVLink, a host of the profile agrees with the profile.
    let nvlink = items(&report, "nvlink.gpu_peer_count");
    assert_eq!(nvlink.len(), 8);
}

#[test]
fn an_altered_model_differs_with_both_values() {
    let mut altered = Profile::builtin("hgx-h200").unwrap();
    let model = altered.models.get_mut("h200").unwrap();
    // Another MIG family; its MIG-backed vGPU types would name profiles it lacks.
    model.mig = Some(MigFamily::H100With94Gb);
    model.vgpu_types.retain(|t| t.mig_profile.is_none());
    let t = model
        .vgpu_types
        .iter_mut()
        .find(|t| t.name == "NVIDIA H200X-18C")
        .unwrap();
    t.framebuffer_mib += 1024;
    let sriov = model.sriov.as_mut().unwrap();
    sriov.total_vfs = 16;
    sriov.boot_vfs = 16;

    let host = SimHost::new(h200_mig_on()).unwrap();
    let report = probe_host(&host, &[altered]);
    let gpu = &report.gpus[0];
    let named = |name: &str| gpu.comparison.iter().find(|i| i.name == name).unwrap();

    let vgpu = named("vgpu.type.NVIDIA H200X-18C");
    assert_eq!(vgpu.verdict, Verdict::Differs);
    assert_eq!(vgpu.real.as_ref().unwrap()["framebuffer_mib"], 18432);
    assert_eq!(vgpu.sim.as_ref().unwrap()["framebuffer_mib"], 18432 + 1024);
    assert_eq!(named("vgpu.type.NVIDIA H200X-35C").verdict, Verdict::Equal);
    let dropped = named("vgpu.type.NVIDIA H200X-1-18C");
    assert_eq!(dropped.verdict, Verdict::Differs);
    assert_eq!(dropped.sim, Some(serde_json::Value::Null));

    let total = named("pci.pf.sriov_totalvfs");
    assert_eq!(total.verdict, Verdict::Differs);
    assert_eq!(total.real, Some(serde_json::json!({"text": "32"})));
    assert_eq!(total.sim, Some(serde_json::json!({"text": "16"})));

    // Another family's table: profiles it lacks are null on its side.
    let mig: Vec<&Item> = gpu
        .comparison
        .iter()
        .filter(|i| i.name.starts_with("mig.profile."))
        .collect();
    assert!(mig.iter().any(|i| i.verdict == Verdict::Differs));
    assert!(mig.iter().any(|i| i.sim == Some(serde_json::Value::Null)));
    assert!(gpu.tally.get(&Verdict::Differs).copied().unwrap_or(0) > 3);
    let summary = report.summary();
    assert!(summary.contains("DIFFERS"), "{summary}");
    assert!(summary.contains("vgpu.type.NVIDIA H200X-18C"), "{summary}");
}

#[test]
fn a_gpu_without_a_model_is_not_modelled_throughout() {
    let host = SimHost::new(Profile::builtin("hgx-h200").unwrap()).unwrap();
    let report = probe_host(&host, &[]);
    let gpu = &report.gpus[0];
    assert!(gpu.model.is_none());
    assert!(gpu.model_note.as_deref().unwrap().contains("no sim model"));
    assert_only(&report, &[Verdict::NotModelled]);
    assert!(!gpu.comparison.is_empty());
}

#[test]
fn the_report_round_trips_through_json_and_is_written() {
    let host = SimHost::new(h200_mig_on()).unwrap();
    let report = probe_host(&host, &builtin_profiles().unwrap());
    let dir = tempfile::tempdir().unwrap();
    report.write(dir.path()).unwrap();
    let json = std::fs::read_to_string(dir.path().join("report.json")).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    let summary = std::fs::read_to_string(dir.path().join("summary.txt")).unwrap();
    assert!(summary.starts_with("vgpud-gpu-probe/1\n"), "{summary}");
    assert!(
        summary.contains("model: sim profile hgx-h200 model h200"),
        "{summary}"
    );
}

#[test]
fn a_gpu_of_another_model_with_the_same_mig_family_compares_the_mig_table_only() {
    // The probed GPU is renamed and given another device id; the candidates only know the
    // original model, whose MIG family `sim` guesses from the new name and memory.
    let mut renamed = h200_mig_on();
    let model = renamed.models.get_mut("h200").unwrap();
    model.name = "NVIDIA H200 NVL".to_owned();
    model.device = "233b".parse().unwrap();
    let host = SimHost::new(renamed).unwrap();
    let report = probe_host(&host, &[Profile::builtin("hgx-h200").unwrap()]);
    let gpu = &report.gpus[0];
    assert_eq!(gpu.model.as_ref().unwrap().matched_by, MatchedBy::MigFamily);
    let mig: Vec<&Item> = gpu
        .comparison
        .iter()
        .filter(|i| i.name.starts_with("mig.profile."))
        .collect();
    assert!(!mig.is_empty());
    assert!(mig.iter().all(|i| i.verdict == Verdict::Equal), "{mig:?}");
    for i in gpu
        .comparison
        .iter()
        .filter(|i| !i.name.starts_with("mig."))
    {
        assert_eq!(i.verdict, Verdict::NotModelled, "{i:?}");
    }
}
