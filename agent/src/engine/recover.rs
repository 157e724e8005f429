//! A lost state file and the host's own account of what vgpud made.
//!
//! With the file gone the engine would start empty and count every slice on the host as
//! foreign: allocations lost without a word, and devices vgpud made never cleaned up (issue 14,
//! defect 7). So an open that finds no file looks for slices carrying vgpud's mark
//! ([`super::marked`]) and refuses to start while there are any, naming them and
//! `vgpud state recover`. Recovery (here) rebuilds the ledger from the marks: it adopts the marked
//! mdevs as free owned slices, and lists what it cannot prove is vgpud's (MIG instances, typed
//! and bound VFs, passthrough GPUs carry no mark; mdevs without one) and what no host shows
//! (allocations, declared layouts). It only reads the host: nothing is created or destroyed.

use serde::{Deserialize, Serialize};

use super::error::Result;
use super::handle::EngineConfig;
use super::marked::{describe_owned, marked};
use super::model::SliceId;
use super::reconcile::describe;
use super::state::{self, Desired};
use super::timed_host::TimedHost;
use crate::metrics::Metrics;

/// What a recovery did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The state file written.
    pub state_file: String,
    /// Slices adopted into the ledger (free: allocations are not recovered).
    pub adopted: Vec<AdoptedSlice>,
    /// Slices on the host left out of the ledger (they stay, as foreign), with why.
    pub not_adopted: Vec<(String, String)>,
    /// What the host cannot tell and is therefore not recovered.
    pub not_recovered: Vec<String>,
}

/// One slice recovery adopted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptedSlice {
    /// Its new id (the old one was in the lost file).
    pub id: SliceId,
    /// What it is, e.g. `mdev 76677064-… (nvidia-222) on 0000:41:00.0`.
    pub description: String,
}

/// Slices on GPUs that no mark can be carried on: left foreign.
fn unmarkable(host: &TimedHost, notes: &mut Vec<(String, String)>) {
    let inv = inventory::discover(&host.access);
    for gpu in &inv.gpus {
        for slice in &gpu.slices {
            if matches!(slice, inventory::ExistingSlice::Mdev { .. }) {
                continue; // listed from /sys/bus/mdev/devices
            }
            notes.push((
                describe(gpu.pci_address, slice),
                "vgpud leaves no mark on MIG instances, typed or bound VFs and passthrough \
                 GPUs, so whose it is cannot be proven; left alone as foreign"
                    .into(),
            ));
        }
    }
}

impl super::handle::Engine {
    /// Rebuilds a lost state file from the host: takes the state directory's lock, refuses when
    /// the file exists, adopts the slices carrying vgpud's mark as free owned slices, and writes
    /// the file. Reads the host only; nothing on it changes. Run it with no daemon on the
    /// directory (its lock refuses otherwise).
    pub fn recover(config: EngineConfig) -> Result<RecoveryReport> {
        let mut store = store::Store::<Desired>::create_new(&config.state_dir, state::SCHEMA)?;
        let host = TimedHost::new(config.host, config.vendor_timeout, Metrics::default());
        let mut not_adopted = Vec::new();
        let owned = marked(&host, &mut not_adopted);
        unmarkable(&host, &mut not_adopted);
        let adopted = owned
            .iter()
            .map(|s| AdoptedSlice {
                id: s.id,
                description: describe_owned(s),
            })
            .collect();
        store.update(|d| {
            for s in owned {
                d.slices.insert(s.id, s);
            }
        })?;
        tracing::info!(path = %store.path().display(), "state file rebuilt from the host");
        Ok(RecoveryReport {
            state_file: store.path().display().to_string(),
            adopted,
            not_adopted,
            not_recovered: vec![
                "allocations: the host does not show who held a slice; every adopted slice is \
                 free, so check that no VM still uses one before clients allocate again"
                    .into(),
                "declared layouts: set them again".into(),
            ],
        })
    }
}
