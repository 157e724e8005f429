//! The human-readable form of an inventory: NUMA node → GPUs → slicing capabilities → slices.

use std::fmt::Write;

use crate::model::*;

/// Renders the inventory as an indented tree for a terminal.
pub fn render_tree(inv: &HostInventory) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "host {} ({})", inv.hostname, inv.source);
    for node in &inv.numa_nodes {
        let _ = writeln!(
            out,
            "  NUMA node {}: {} CPUs ({}), {} MiB memory",
            node.id, node.cpu_count, node.cpus, node.memory_mib
        );
        for gpu in inv.gpus.iter().filter(|g| g.numa_node == Some(node.id)) {
            render_gpu(&mut out, gpu);
        }
    }
    let unplaced: Vec<_> = inv
        .gpus
        .iter()
        .filter(|g| {
            g.numa_node
                .is_none_or(|n| !inv.numa_nodes.iter().any(|x| x.id == n))
        })
        .collect();
    if !unplaced.is_empty() {
        let _ = writeln!(out, "  NUMA locality unknown:");
        for gpu in unplaced {
            render_gpu(&mut out, gpu);
        }
    }
    if inv.gpus.is_empty() {
        let _ = writeln!(out, "  no GPUs");
    }
    for parent in &inv.other_mdev_parents {
        let _ = writeln!(out, "  mdev parent {}", parent.name);
        render_mdev_types(&mut out, &parent.types, "    ");
    }
    render_pci(&mut out, inv);
    let _ = writeln!(
        out,
        "  vendor libraries: NVML {}; AMD SMI {}",
        lib_text(&inv.vendor_libraries.nvml),
        lib_text(&inv.vendor_libraries.amd_smi)
    );
    for w in &inv.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    out
}

fn lib_text(s: &LibraryStatus) -> String {
    if s.available {
        format!("in use ({})", s.detail)
    } else {
        format!("not in use ({})", s.detail)
    }
}

fn render_gpu(out: &mut String, gpu: &Gpu) {
    let memory = gpu
        .memory_mib
        .map(|m| format!(", {} MiB", m))
        .unwrap_or_default();
    let group = gpu
        .iommu_group
        .map(|g| format!(", IOMMU group {g}"))
        .unwrap_or_default();
    let driver = gpu.driver.as_deref().unwrap_or("no driver");
    let numa = match gpu.numa_source {
        NumaSource::Device | NumaSource::Unknown => String::new(),
        NumaSource::Upstream => ", NUMA node from upstream bridge".to_owned(),
        NumaSource::Nvml => ", NUMA node from NVML".to_owned(),
    };
    let _ = writeln!(
        out,
        "    GPU {} {}{memory}{group}, {driver}{numa}",
        gpu.pci_address, gpu.model
    );
    if let Some(uuid) = &gpu.uuid {
        let _ = writeln!(out, "      uuid {uuid}");
    }
    if let Some(mig) = &gpu.mig {
        render_mig(out, mig);
    }
    render_mdev_types(out, &gpu.mdev_types, "      ");
    if let Some(sriov) = &gpu.sriov {
        render_sriov(out, sriov);
    }
    if !gpu.vgpu_types.is_empty() {
        let names: Vec<_> = gpu
            .vgpu_types
            .iter()
            .map(|t| format!("{} {}", t.id, t.name))
            .collect();
        let _ = writeln!(out, "      vGPU types: {}", names.join(", "));
    }
    if let Some(amd) = &gpu.amd {
        let _ = writeln!(
            out,
            "      partitions: compute {} of [{}], memory {} of [{}]; VFs {}/{}",
            amd.compute_partition.as_deref().unwrap_or("?"),
            amd.compute_partitions_available.join(", "),
            amd.memory_partition.as_deref().unwrap_or("?"),
            amd.memory_partitions_available.join(", "),
            amd.vfs_enabled
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
            amd.vfs_supported
                .map(|v| v.to_string())
                .unwrap_or_else(|| "?".into()),
        );
    }
    if !gpu.nvlink_peers.is_empty() {
        let _ = writeln!(out, "      NVLink peers: {}", gpu.nvlink_peers.len());
    }
    render_slices(out, &gpu.slices);
    for w in &gpu.warnings {
        let _ = writeln!(out, "      warning: {w}");
    }
}

fn render_mig(out: &mut String, mig: &MigInfo) {
    let state = match (mig.enabled, mig.pending) {
        (true, true) => "enabled",
        (true, false) => "enabled, disabled after reset",
        (false, true) => "disabled, enabled after reset",
        (false, false) => "disabled",
    };
    let _ = writeln!(out, "      MIG {state}");
    for p in &mig.profiles {
        let starts: Vec<_> = p.placements.iter().map(|pl| pl.start.to_string()).collect();
        let remaining = p
            .remaining
            .map(|r| format!(", {r} more fit"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "        {:<14} id {:>2}, up to {}, start slots {}{remaining}",
            p.name,
            p.id,
            p.max_instances,
            starts.join(",")
        );
    }
}

fn render_mdev_types(out: &mut String, types: &[MdevTypeInfo], indent: &str) {
    for t in types {
        let available = t
            .available_instances
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        let _ = writeln!(
            out,
            "{indent}mdev type {} {}: {available} available",
            t.id,
            t.name.as_deref().unwrap_or("")
        );
    }
}

fn render_sriov(out: &mut String, sriov: &SriovInfo) {
    let _ = writeln!(
        out,
        "      SR-IOV: {}/{} VFs enabled",
        sriov.enabled_vfs, sriov.total_vfs
    );
    for vf in &sriov.vfs {
        let driver = vf.driver.as_deref().unwrap_or("no driver");
        let vgpu = match vf.vgpu_type {
            Some(t) => format!(", vGPU type {t}"),
            None if !vf.creatable_vgpu_types.is_empty() => {
                let names: Vec<_> = vf
                    .creatable_vgpu_types
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect();
                format!(", creatable: {}", names.join(", "))
            }
            None => String::new(),
        };
        let _ = writeln!(out, "        VF {} {driver}{vgpu}", vf.pci_address);
    }
}

fn render_slices(out: &mut String, slices: &[ExistingSlice]) {
    for s in slices {
        let text = match s {
            ExistingSlice::Mdev { uuid, type_id, .. } => format!("mdev {uuid} ({type_id})"),
            ExistingSlice::Mig {
                gpu_instance_id,
                profile,
                start,
            } => {
                format!("MIG GPU instance {gpu_instance_id} {profile} at slot {start}")
            }
            ExistingSlice::NvidiaVfio { vf, vgpu_type } => format!("vGPU {vgpu_type} on VF {vf}"),
            ExistingSlice::SriovVf { vf } => format!("VF {vf} on vfio-pci"),
            ExistingSlice::Passthrough { .. } => "whole GPU on vfio-pci".to_owned(),
        };
        let _ = writeln!(out, "      slice: {text}");
    }
}

fn render_pci(out: &mut String, inv: &HostInventory) {
    let _ = writeln!(out, "  PCI functions: {}", inv.pci_devices.len());
    for d in &inv.pci_devices {
        let numa = d
            .numa_node
            .map(|n| format!(" node {n}"))
            .unwrap_or_default();
        let group = d
            .iommu_group
            .map(|g| format!(" group {g}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    {} [{}] {}:{} {}{numa}{group}",
            d.pci_address,
            d.class,
            d.vendor_id,
            d.device_id,
            d.driver.as_deref().unwrap_or("-")
        );
    }
}
