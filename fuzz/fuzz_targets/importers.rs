//! The importers behind `vgpuctl layouts import` (`POST /v1/layouts/import`): a mig-parted YAML
//! config (`agent::engine::import::mig_parted_import`, the shape and layout checks of
//! `ImportRequest::to_engine`) and mdevctl definitions, then the dry run on a simulated host.
//!
//! Input: the first byte picks the format. `0`: mig-parted, the rest is the YAML, the file's
//! only config; `1`: mig-parted, the first line names the config, the rest is the YAML; else
//! mdevctl, the rest is definitions cut at `\0`, each `<parent> <uuid>\n<JSON>`.
//!
//! Checks: nothing panics; a dry run changes nothing (the service's slices, allocations and
//! layouts, and the host's mdevs, are as before).
#![no_main]

use api::wire::import::{ImportFormat, ImportRequest, MdevctlDefinition};
use libfuzzer_sys::fuzz_target;
use vgpud_fuzz::host;

fn mig_parted(text: &str, named: bool) -> ImportRequest {
    let (config, content) = match text.split_once('\n') {
        Some((first, rest)) if named => (Some(first.to_owned()), rest),
        _ => (None, text),
    };
    ImportRequest {
        format: ImportFormat::MigParted,
        config,
        content: Some(content.to_owned()),
        definitions: Vec::new(),
        dry_run: true,
    }
}

fn mdevctl(text: &str) -> ImportRequest {
    let definitions = text
        .split('\0')
        .take(16)
        .map(|d| {
            let (head, content) = d.split_once('\n').unwrap_or((d, ""));
            let (parent, uuid) = head.split_once(' ').unwrap_or((head, ""));
            MdevctlDefinition {
                parent: parent.to_owned(),
                uuid: uuid.to_owned(),
                content: content.to_owned(),
            }
        })
        .collect();
    ImportRequest {
        format: ImportFormat::Mdevctl,
        config: None,
        content: None,
        definitions,
        dry_run: true,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (request, profile) = match mode {
        0 => (mig_parted(text, false), "dgx-a100"),
        1 => (mig_parted(text, true), "dgx-a100"),
        _ => (mdevctl(text), "vdi-mixed"),
    };
    let Ok(source) = request.to_engine() else {
        return;
    };
    let host = host::shared(profile);
    let fs = host.sim.sysfs();
    let mdevs = || {
        let mut names = fs
            .list_dir(std::path::Path::new("/sys/bus/mdev/devices"))
            .unwrap_or_default();
        names.sort();
        names
    };
    let (before, mdevs_before) = (host.snapshot(), mdevs());
    let _ = host.service.import_layouts(source, true);
    assert_eq!(
        before,
        host.snapshot(),
        "a dry run changed the service's state"
    );
    assert_eq!(mdevs_before, mdevs(), "a dry run changed the host's mdevs");
});
