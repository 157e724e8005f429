//! Plausible GPU telemetry: a bounded random walk, one step per sample, persisted with the host
//! so values continue across agent restarts. Deterministic for a given profile seed.

use gpu::Telemetry;
use ids::PciAddress;

use crate::profile::GpuModel;
use crate::state::{State, TelemetryState};
use crate::util::fnv1a;

/// Advances the walk by one sample (nominally one second).
pub(crate) fn step(t: &mut TelemetryState, seed: u64, gpu: PciAddress, model: &GpuModel) {
    let mix = seed ^ fnv1a(gpu.to_string().as_bytes()) ^ t.tick.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rng = fastrand::Rng::with_seed(mix);
    if t.tick == 0 {
        t.gpu_util = rng.u32(0..10);
        t.temperature_c = 30 + rng.u32(0..5);
    }
    t.tick += 1;
    let util = i64::from(t.gpu_util) + rng.i64(-12..=12);
    t.gpu_util = util.clamp(0, 100) as u32;
    let mem = i64::from(t.gpu_util) * 6 / 10 + rng.i64(-5..=5);
    t.mem_util = mem.clamp(0, 100) as u32;
    // Temperature follows load with lag: move a third of the way to the load's level.
    let target = 30 + i64::from(t.gpu_util) / 2;
    let temp =
        i64::from(t.temperature_c) + (target - i64::from(t.temperature_c)) / 3 + rng.i64(-1..=1);
    t.temperature_c = temp.clamp(25, 90) as u32;
    let idle = u64::from(model.idle_power_w) * 1000;
    let limit = u64::from(model.power_limit_w.max(model.idle_power_w)) * 1000;
    let load = idle + (limit - idle) * u64::from(t.gpu_util) / 100;
    let jitter = load / 50;
    let power = load.saturating_sub(jitter) + rng.u64(0..=jitter * 2);
    t.power_mw = u32::try_from(power.min(limit)).unwrap_or(u32::MAX);
    // One sample stands for one second: mW × 1 s = mJ.
    t.energy_mj += u64::from(t.power_mw);
}

/// Keeps in `loaded` each GPU's walk from `mine` where `mine` is further along: a handle that
/// reloads the state file (another handle changed the host) while it holds samples the file
/// does not would otherwise hand out older figures than it already did (an energy counter
/// going back, which NVML's never does: `nvmlDeviceGetTotalEnergyConsumption` counts "since
/// the driver was last reloaded").
pub(crate) fn keep_newer(loaded: &mut State, mine: &State) {
    for (addr, g) in &mut loaded.gpus {
        if let Some(m) = mine.gpus.get(addr)
            && m.telemetry.tick > g.telemetry.tick
        {
            g.telemetry = m.telemetry.clone();
        }
    }
}

/// The sample NVML reports for the walk's current position.
pub(crate) fn sample(t: &TelemetryState, model: &GpuModel, fb_used_mib: u64) -> Telemetry {
    let used = fb_used_mib.min(model.memory_mib);
    Telemetry {
        gpu_util_pct: t.gpu_util,
        mem_copy_util_pct: t.mem_util,
        fb_used_mib: used,
        fb_free_mib: model.memory_mib - used,
        temperature_c: t.temperature_c,
        power_mw: t.power_mw,
        energy_mj: t.energy_mj,
        sm_clock_mhz: model.sm_clock_mhz * (60 + 40 * t.gpu_util / 100) / 100,
        mem_clock_mhz: model.mem_clock_mhz,
        pcie_link_gen: link_generation(&model.link_speed),
        pcie_link_width: model.link_width,
    }
}

/// The PCIe generation of a sysfs `current_link_speed` (`16.0 GT/s PCIe`): 2.5, 5, 8, 16, 32 and
/// 64 GT/s are generations 1 to 6 (PCI-SIG base specification, per generation's data rate);
/// NVML reports the same number (`nvmlDeviceGetCurrPcieLinkGeneration`). 0 when unknown.
fn link_generation(speed: &str) -> u32 {
    let rate: f64 = speed
        .split_whitespace()
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0.0);
    match rate {
        r if r >= 64.0 => 6,
        r if r >= 32.0 => 5,
        r if r >= 16.0 => 4,
        r if r >= 8.0 => 3,
        r if r >= 5.0 => 2,
        r if r >= 2.5 => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::link_generation;

    #[test]
    fn link_speeds_name_their_generation() {
        assert_eq!(link_generation("16.0 GT/s PCIe"), 4);
        assert_eq!(link_generation("32.0 GT/s PCIe"), 5);
        assert_eq!(link_generation("2.5 GT/s PCIe"), 1);
        assert_eq!(link_generation("Unknown"), 0);
    }
}
