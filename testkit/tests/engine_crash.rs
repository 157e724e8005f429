//! Crash safety: a child process drives the engine and is killed with SIGKILL at random points
//! during 200+ acknowledged mixed operations, restarting each time. Afterwards nothing is
//! leaked, nothing is allocated twice, and nothing acknowledged is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agent::engine::{AllocationId, SliceId, SliceState};
use sim::{Profile, SimHost};
use testkit::*;

const CHILD: &str = env!("CARGO_BIN_EXE_engine-crash-child");
const TARGET_OPS: usize = 200;

/// What the children acknowledged, in order.
#[derive(Default)]
struct Acks {
    allocs: BTreeMap<AllocationId, Vec<SliceId>>,
    released: BTreeSet<AllocationId>,
    created: BTreeSet<SliceId>,
    destroyed: BTreeSet<SliceId>,
    /// Removals started, acknowledged or not.
    begun: BTreeSet<String>,
    count: usize,
}

impl Acks {
    fn take(&mut self, line: &str) {
        if let Some(what) = line.strip_prefix("BEGIN ") {
            self.begun.insert(what.to_owned());
            return;
        }
        let mut words = line.split_whitespace().skip(1);
        let (op, id) = (words.next().unwrap(), words.next().unwrap());
        match op {
            "alloc" => {
                let slices = words
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect();
                self.allocs.insert(id.parse().unwrap(), slices);
            }
            "release" => {
                self.released.insert(id.parse().unwrap());
            }
            "create" => {
                self.created.insert(id.parse().unwrap());
            }
            "destroy" => {
                self.destroyed.insert(id.parse().unwrap());
            }
            other => panic!("unknown ack {other}"),
        }
        self.count += 1;
    }
}

/// Runs one child until `kill_after` past its READY line, then SIGKILLs it.
fn run_child(
    host: &std::path::Path,
    state: &std::path::Path,
    mode: &str,
    seed: u64,
    kill_after: Duration,
    acks: &mut Acks,
) {
    let mut child = Command::new(CHILD)
        .arg(host)
        .arg(state)
        .arg(seed.to_string())
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the child never got ready");
    assert_eq!(ready, "READY");
    let deadline = Instant::now() + kill_after;
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    for line in lines
        .iter()
        .filter(|l| l.starts_with("ACK ") || l.starts_with("BEGIN "))
    {
        acks.take(line);
    }
}

#[test]
fn kill_nine_during_mdev_vf_and_passthrough_operations() {
    crash_test("vdi-mixed", "vdi", TARGET_OPS);
}

#[test]
fn kill_nine_during_mig_operations() {
    crash_test("dgx-a100", "mig", TARGET_OPS / 2);
}

#[test]
fn kill_nine_during_mig_backed_vgpu_operations() {
    crash_test("hgx-h200", "migvgpu", TARGET_OPS / 2);
}

/// Kills children at random points until they acknowledged `target` operations, then checks.
fn crash_test(profile: &str, mode: &str, target: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let mut p = Profile::builtin(profile).unwrap();
    if mode == "migvgpu" {
        // Two of the eight GPUs with 8 VFs each: the same slicing, a host small enough that an
        // operation takes milliseconds, not a second.
        p.gpus.truncate(2);
        for m in p.models.values_mut() {
            if let Some(s) = m.sriov.as_mut() {
                s.total_vfs = 8;
                s.boot_vfs = 8;
            }
        }
    }
    let h = SimHost::create(&host_dir, p).unwrap();
    if mode == "migvgpu" {
        for gpu in ["0000:18:00.0", "0000:2a:00.0"] {
            h.set_mig_mode(addr(gpu), true).unwrap();
        }
    }
    drop(h);
    let mut acks = Acks::default();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test {mode} seed {seed}");
    let mut runs = 0;
    while acks.count < target {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = Duration::from_micros(seed % 250_000);
        run_child(&host_dir, &state, mode, seed, kill_after, &mut acks);
        runs += 1;
        assert!(runs < 2000, "the children make no progress");
    }
    eprintln!(
        "{} acknowledged operations over {runs} killed runs",
        acks.count
    );

    let h = SimHost::open(&host_dir).unwrap();
    let e = engine(&h, &state);
    let report = e.reconcile().unwrap();
    assert!(
        report.foreign.is_empty(),
        "leaked (not in the ledger): {:?}",
        report.foreign
    );
    assert!(report.failed.is_empty(), "{report:?}");
    assert!(report.intents_pending.is_empty(), "{report:?}");
    assert_eq!(e.pending_intents(), 0);

    // Nothing allocated twice, and every allocated slice is there and allocated.
    let allocations = e.allocations();
    let mut held = BTreeSet::new();
    for a in &allocations {
        for s in &a.slices {
            assert!(held.insert(*s), "slice {s} is in two allocations");
            assert_eq!(e.slice(*s).unwrap().state, SliceState::Allocated);
        }
    }
    // Nothing acknowledged lost.
    let live: BTreeMap<AllocationId, Vec<SliceId>> = allocations
        .iter()
        .map(|a| (a.id, a.slices.clone()))
        .collect();
    for (id, slices) in &acks.allocs {
        if acks.released.contains(id) {
            assert!(!live.contains_key(id), "released allocation {id} is back");
        } else if !acks.begun.contains(&format!("release {id}")) {
            assert_eq!(
                live.get(id),
                Some(slices),
                "acknowledged allocation {id} lost"
            );
        }
    }
    let slices: BTreeMap<SliceId, SliceState> =
        e.slices().into_iter().map(|s| (s.id, s.state)).collect();
    for id in &acks.created {
        if acks.destroyed.contains(id) {
            assert!(!slices.contains_key(id), "destroyed slice {id} is back");
        } else if !acks.begun.contains(&format!("destroy {id}")) {
            assert!(slices.contains_key(id), "acknowledged slice {id} lost");
        }
    }
    assert!(
        slices
            .values()
            .all(|s| matches!(s, SliceState::Ready | SliceState::Allocated)),
        "{slices:?}"
    );
    // The host carries exactly the owned slices (a MIG-backed vGPU is a typed VF and the GPU
    // instance it occupies).
    let expected: usize = e
        .slices()
        .iter()
        .map(|s| match s.identity {
            agent::engine::Identity::MigVgpu { .. } => 2,
            _ => 1,
        })
        .sum();
    assert_eq!(host_slices(&h).len(), expected);
}

/// A partition change killed between its steps (the memory mode set, GIM's VF-count call
/// hanging) is finished by the reconciler of the next start, before the layouts.
#[test]
fn kill_nine_in_the_middle_of_an_amd_partition_change() {
    const MI300X: &str = "0000:c1:00.0";
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    let state = tmp.path().join("state");
    let h = SimHost::create(&host_dir, Profile::builtin("vdi-mixed").unwrap()).unwrap();
    h.inject_fault(
        format!("amd:amdsmi_set_num_vf@{MI300X}=hang:60000,times=1")
            .parse()
            .unwrap(),
    )
    .unwrap();
    let mut child = Command::new(CHILD)
        .arg(&host_dir)
        .arg(&state)
        .arg("1")
        .arg("partition")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let modes = |h: &SimHost| {
        let amd = h.amd();
        let p = amd.partition(addr(MI300X)).unwrap();
        (
            p.compute,
            p.memory,
            amd.num_vf(addr(MI300X)).unwrap().enabled,
        )
    };
    // Half way, and inside the hanging call: the simulator uses the fault up as the call starts
    // (killing before that would leave the hang for the next start to run into).
    let deadline = Instant::now() + Duration::from_secs(30);
    while modes(&h) != ("SPX".into(), "NPS4".into(), 1) || !h.faults().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the change never got half way");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL, while the VF-count call hangs
    child.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(
        !out.contains("ACK"),
        "killed before the layout returned: {out}"
    );

    let h = SimHost::open(&host_dir).unwrap();
    assert_eq!(modes(&h), ("SPX".into(), "NPS4".into(), 1), "left half way");
    let e = engine(&h, &state);
    assert_eq!(e.pending_intents(), 1, "the open partition intent survived");
    let mut events = e.subscribe();
    let report = e.reconcile().unwrap();
    assert_eq!(report.intents_resolved, 1, "{report:?}");
    assert!(report.intents_pending.is_empty(), "{report:?}");
    assert_eq!(e.pending_intents(), 0);
    assert_eq!(modes(&h), ("CPX".into(), "NPS4".into(), 8));
    // The intent was finished first; the layout then only made its slices.
    let first_layout_event = std::iter::from_fn(|| events.try_recv().ok())
        .find(|ev| matches!(ev, agent::engine::Event::LayoutStatus { .. }));
    assert!(matches!(
        first_layout_event,
        Some(agent::engine::Event::LayoutStatus {
            state: agent::engine::LayoutState::Applied,
            ..
        })
    ));
    assert_eq!(
        e.slices()
            .iter()
            .filter(|s| s.spec.gpu == addr(MI300X))
            .count(),
        8
    );
}
