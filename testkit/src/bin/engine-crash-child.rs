//! Test driver for the engine's crash test: drives an engine over a persisted simulated host
//! with random mixed operations and prints one `ACK` line per operation that returned success,
//! so the test can SIGKILL it at any point and check afterwards that nothing acknowledged was
//! lost. Not part of the product.
//!
//! Usage: `engine-crash-child HOST_DIR STATE_DIR SEED MODE`, MODE `vdi` (mdev, VFs and
//! passthrough on the `vdi-mixed` profile), `mig` (MIG instances on `dgx-a100`) or `migvgpu`
//! (MIG-backed vendor-VFIO vGPUs on `hgx-h200`, MIG mode on for its first two GPUs), or
//! `partition` (one layout that moves the `vdi-mixed` MI300X to CPX/NPS4 with 8 VFs, then
//! idles: the test kills it part-way through the partition change).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use agent::engine::{
    AllocationRequest, CreateSlice, Engine, EngineConfig, Layout, SliceKind, SliceRequest,
    SliceSpec,
};

/// A small deterministic generator (xorshift64*): no dependency for a test driver.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine-crash-child: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [host_dir, state_dir, seed, mode] = args.as_slice() else {
        anyhow::bail!(
            "usage: engine-crash-child HOST_DIR STATE_DIR SEED vdi|mig|migvgpu|partition"
        );
    };
    if mode == "partition" {
        return partition(host_dir, state_dir);
    }
    let ops = match mode.as_str() {
        "vdi" => &VDI,
        "mig" => &MIG,
        "migvgpu" => &MIG_VGPU,
        other => anyhow::bail!("unknown mode {other:?}"),
    };
    let host = sim::SimHost::open(&PathBuf::from(host_dir))?;
    let engine = Engine::open(EngineConfig::new(state_dir, hostwire::sim_access(&host)))?;
    engine.reconcile()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY")?;
    out.flush()?;
    let mut rng = Rng(seed.parse::<u64>()?.max(1));
    loop {
        if let Some(line) = step(&engine, ops, &mut rng, &mut out) {
            writeln!(out, "ACK {line}")?;
            out.flush()?;
        }
    }
}

/// Applies one AMD partition layout and idles; prints `ACK layout` when it returned.
fn partition(host_dir: &str, state_dir: &str) -> anyhow::Result<()> {
    let host = sim::SimHost::open(&PathBuf::from(host_dir))?;
    let engine = Engine::open(EngineConfig::new(state_dir, hostwire::sim_access(&host)))?;
    engine.reconcile()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY")?;
    out.flush()?;
    let layout: Layout = serde_json::from_str(
        r#"{"name": "mi300x", "selector": {"addresses": ["0000:c1:00.0"]},
            "slices": [{"type": "vf", "count": 8}],
            "amd": {"compute": "CPX", "memory": "NPS4", "vfs": 8}}"#,
    )?;
    engine.set_layouts(vec![layout])?;
    writeln!(out, "ACK layout")?;
    out.flush()?;
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// What one mode allocates and creates.
struct Ops {
    /// Allocation types, optionally pinned to a GPU.
    allocate: &'static [(&'static str, Option<&'static str>)],
    /// Slices created directly, on a GPU.
    create: &'static [(&'static str, &'static str)],
}

const VDI: Ops = Ops {
    allocate: &[
        ("nvidia-222", Some("0000:41:00.0")),
        ("nvidia-700", None),
        ("vf", None),
    ],
    create: &[
        ("mdev:nvidia-704", "0000:85:00.0"),
        ("passthrough", "0000:86:00.0"),
        ("passthrough", "0000:85:00.0"),
    ],
};

const MIG: Ops = Ops {
    allocate: &[
        ("1g.10gb", Some("0000:07:00.0")),
        ("2g.20gb", Some("0000:07:00.0")),
        ("3g.40gb", Some("0000:0f:00.0")),
    ],
    create: &[
        ("mig:1g.10gb", "0000:0f:00.0"),
        ("mig:7g.80gb", "0000:47:00.0"),
        ("mig:3g.40gb", "0000:07:00.0"),
    ],
};

const MIG_VGPU: Ops = Ops {
    allocate: &[
        ("NVIDIA H200X-1-18C", Some("0000:18:00.0")),
        ("NVIDIA H200X-2-35C", Some("0000:2a:00.0")),
        ("NVIDIA H200X-1-35C", Some("0000:18:00.0")),
    ],
    create: &[
        ("vgpu:1414", "0000:2a:00.0"),
        ("vgpu:1417", "0000:18:00.0"),
        ("vgpu:1415", "0000:2a:00.0"),
    ],
};

fn kind(text: &str) -> Option<SliceKind> {
    Some(match text.split_once(':') {
        Some(("mdev", t)) => SliceKind::Mdev {
            type_id: t.parse().ok()?,
        },
        Some(("mig", p)) => SliceKind::Mig {
            profile: p.parse().ok()?,
            start: None,
        },
        Some(("vgpu", t)) => SliceKind::NvidiaVfio {
            vgpu_type: t.parse().ok()?,
            start: None,
        },
        _ => SliceKind::Passthrough,
    })
}

/// Announces an operation that removes something before it starts: if the child dies before
/// its acknowledgement, the removal may or may not have happened.
fn begin(out: &mut impl Write, what: &str) -> Option<()> {
    writeln!(out, "BEGIN {what}").ok()?;
    out.flush().ok()
}

/// One random operation; the acknowledgement line when it succeeded.
fn step(engine: &Engine, ops: &Ops, rng: &mut Rng, out: &mut impl Write) -> Option<String> {
    match rng.below(10) {
        0..=3 => {
            let (t, gpu) = ops.allocate[rng.below(ops.allocate.len())];
            let a = engine
                .allocate(AllocationRequest {
                    consumer: format!("c{}", rng.below(1000)),
                    vm: None,
                    request: SliceRequest {
                        slice_type: t.into(),
                        count: 1,
                        gpu: gpu.and_then(|g| g.parse().ok()),
                        idempotency_key: None,
                        numa_policy: None,
                        vcpus: None,
                        memory_mib: None,
                    },
                    placement_consumer: None,
                })
                .ok()?;
            let slices: Vec<String> = a.slices.iter().map(ToString::to_string).collect();
            Some(format!("alloc {} {}", a.id, slices.join(",")))
        }
        4..=6 => {
            let all = engine.allocations();
            let a = all.get(rng.below(all.len()))?;
            begin(out, &format!("release {}", a.id))?;
            engine.release(a.id).ok()?;
            Some(format!("release {}", a.id))
        }
        7 | 8 => {
            let (k, gpu) = ops.create[rng.below(ops.create.len())];
            let (kind, gpu) = (kind(k)?, gpu.parse().ok()?);
            let s = engine
                .create_slice(CreateSlice {
                    spec: SliceSpec { gpu, kind },
                    owner: None,
                })
                .ok()?;
            Some(format!("create {}", s.id))
        }
        _ => {
            let free: Vec<_> = engine
                .slices()
                .into_iter()
                .filter(|s| s.owner.is_none())
                .collect();
            let s = free.get(rng.below(free.len()))?;
            begin(out, &format!("destroy {}", s.id))?;
            engine.destroy_slice(s.id).ok()?;
            Some(format!("destroy {}", s.id))
        }
    }
}
