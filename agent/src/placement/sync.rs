//! One sync pass: read this host's tree from Placement, compare it with the desired tree, and
//! write only what differs, each write carrying the generation it was read at.
//!
//! Rules (issue 16, and Placement's own: <https://docs.openstack.org/placement/latest/user/>):
//! - the root provider is the compute node; vgpud only reads it, unless it created it
//!   (`own_root`), and even then it writes only its own owner trait;
//! - a provider with one of vgpud's names but without vgpud's owner trait is someone else's
//!   (Nova's libvirt driver makes the same `<root>_pci_…` names): left alone, reported;
//! - a stale generation (409 `placement.concurrent_update`) means another writer changed the
//!   provider: re-read, recompute, retry with backoff;
//! - an inventory that allocations still use cannot be deleted (409 `placement.inventory.inuse`):
//!   it is kept with `reserved = total`, so nothing new lands on it, until its consumers leave.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::thread::sleep;
use std::time::Duration;

use ids::PciAddress;
use placement::model::{Inventory, Provider};
use placement::{Client, Error};
use uuid::Uuid;

use super::desired::{DesiredGpu, DesiredTree};
use super::traits::OWNER_TRAIT;

/// How often one provider write is retried after a generation conflict.
const CONFLICT_ATTEMPTS: u32 = 5;
/// The first wait after a conflict; doubled each time (50, 100, 200, 400 ms).
const CONFLICT_BACKOFF: Duration = Duration::from_millis(50);

/// What a pass found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// The root provider.
    pub root: Option<Uuid>,
    /// Each GPU's provider, for the consumer check and the audit.
    pub gpu_providers: BTreeMap<PciAddress, Uuid>,
    /// Each reported GPU's classes, with the slice type each stands for.
    pub gpu_types: BTreeMap<PciAddress, BTreeMap<String, String>>,
    /// Providers created.
    pub created: u32,
    /// Inventory and trait writes.
    pub writes: u32,
    /// Writes retried after another writer bumped a generation.
    pub conflicts: u32,
    /// Providers deleted (vgpud's, for GPUs that are gone).
    pub deleted: u32,
    /// Problems that did not stop the pass: providers that are someone else's, inventories
    /// kept because allocations use them.
    pub warnings: Vec<String>,
}

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The compute node's provider is not in Placement and vgpud may not create it.
    #[error(
        "the compute node's resource provider {0:?} is not in Placement: start nova-compute first, or set [placement] own_root = true"
    )]
    RootMissing(String),
    /// A Placement call failed.
    #[error("{0}")]
    Placement(#[from] Error),
    /// A write kept meeting newer generations.
    #[error(
        "resource provider {0} kept changing under vgpud ({CONFLICT_ATTEMPTS} attempts); retried on the next pass"
    )]
    Contended(String),
}

/// Brings Placement's view of this host (under the compute node `root_name`) to `desired()`.
///
/// The tree is read first (each provider with its traits and inventories), then `desired()`
/// computed once (it reads the engine: every GPU's capacity), then only what differs is
/// written, each write with the generation read. A write that meets a newer generation
/// re-reads that provider and recomputes `desired()` before retrying: the only case where the
/// engine is asked again.
pub fn sync_once(
    client: &Client,
    root_name: &str,
    desired: &dyn Fn() -> DesiredTree,
    own_root: bool,
) -> Result<SyncOutcome, SyncError> {
    let mut out = SyncOutcome::default();
    let root = find_root(client, root_name, own_root, &mut out)?;
    out.root = Some(root.uuid);
    let mut tree = Tree::read(client, root.uuid)?;
    let want = desired();
    out.warnings.clone_from(&want.warnings);
    let mut numa_parent = HashMap::new();
    for numa in &want.numa {
        let Some(known) = tree.ensure_under(client, &numa.name, root.uuid, &mut out)? else {
            continue;
        };
        numa_parent.insert(numa.node, known.provider.uuid);
        let again = || {
            desired()
                .numa
                .into_iter()
                .find(|n| n.name == numa.name)
                .map(|n| n.traits)
                .unwrap_or_default()
        };
        converge_traits(client, known, &numa.traits, &again, &mut out)?;
    }
    for gpu in &want.gpus {
        let parent = match gpu.numa_node {
            Some(node) => match numa_parent.get(&node) {
                Some(p) => *p,
                None => continue, // its NUMA provider is someone else's: warned above
            },
            None => root.uuid,
        };
        let Some(known) = tree.ensure_under(client, &gpu.name, parent, &mut out)? else {
            continue;
        };
        out.gpu_providers.insert(gpu.gpu, known.provider.uuid);
        out.gpu_types.insert(gpu.gpu, gpu.types.clone());
        let again = || desired().gpus.into_iter().find(|g| g.gpu == gpu.gpu);
        converge_inventories(client, known, gpu, &again, &mut out)?;
        let again_traits = || again().map(|g| g.traits).unwrap_or_default();
        converge_traits(client, known, &gpu.traits, &again_traits, &mut out)?;
    }
    remove_stale(client, &tree, &want, root.uuid, &mut out)?;
    Ok(out)
}

/// The compute node's provider, created (with vgpud's owner trait) only when vgpud owns it.
fn find_root(
    client: &Client,
    name: &str,
    own_root: bool,
    out: &mut SyncOutcome,
) -> Result<Provider, SyncError> {
    if let Some(root) = client.provider_named(name)? {
        return Ok(root);
    }
    if !own_root {
        return Err(SyncError::RootMissing(name.to_owned()));
    }
    client.ensure_trait(OWNER_TRAIT)?;
    let root = client.create_provider(name, None, None)?;
    out.created += 1;
    tracing::info!(provider = %root.uuid, name, "created the compute node's resource provider ([placement] own_root)");
    let owned = [OWNER_TRAIT.to_owned()];
    retry_conflicts(name, out, |_| {
        let now = client.traits(root.uuid)?;
        let mut all: BTreeSet<String> = now.traits.into_iter().collect();
        all.extend(owned.iter().cloned());
        let all: Vec<String> = all.into_iter().collect();
        client.set_traits(root.uuid, now.resource_provider_generation, &all)?;
        Ok(())
    })?;
    Ok(root)
}

/// One of this host's providers as the pass last read or wrote it.
struct Known {
    provider: Provider,
    /// It carries vgpud's owner trait.
    owned: bool,
    traits: BTreeSet<String>,
    inventories: BTreeMap<String, Inventory>,
    /// The generation the next write must carry.
    generation: u64,
}

impl Known {
    /// Reads `provider`'s traits and inventories. The generation kept is the first read's: a
    /// writer that moved the provider between the two reads makes the next write conflict, and
    /// that re-reads both.
    fn read(client: &Client, provider: Provider) -> Result<Self, Error> {
        let read = client.traits(provider.uuid)?;
        let inventories = client.inventories(provider.uuid)?.inventories;
        let traits: BTreeSet<String> = read.traits.into_iter().collect();
        Ok(Self {
            owned: traits.contains(OWNER_TRAIT),
            generation: read.resource_provider_generation,
            inventories,
            traits,
            provider,
        })
    }

    /// Reads the provider's traits and inventories again, after another writer moved it.
    fn refresh(&mut self, client: &Client) -> Result<(), Error> {
        *self = Self::read(client, self.provider.clone())?;
        Ok(())
    }
}

/// The providers of this host's tree, by name.
struct Tree {
    by_name: BTreeMap<String, Known>,
}

impl Tree {
    /// The tree under `root` with each provider's traits (which say whose it is) and
    /// inventories.
    fn read(client: &Client, root: Uuid) -> Result<Self, Error> {
        let mut by_name = BTreeMap::new();
        for provider in client.tree(root)? {
            if provider.uuid == root {
                continue;
            }
            let known = Known::read(client, provider)?;
            by_name.insert(known.provider.name.clone(), known);
        }
        Ok(Self { by_name })
    }

    /// vgpud's provider `name` under `parent`, created when missing; `None` when the name is
    /// someone else's (warned) or the provider cannot be moved (it holds allocations).
    fn ensure_under(
        &mut self,
        client: &Client,
        name: &str,
        parent: Uuid,
        out: &mut SyncOutcome,
    ) -> Result<Option<&mut Known>, SyncError> {
        if let Some(k) = self.by_name.get(name) {
            if !k.owned {
                out.warnings.push(format!(
                    "resource provider {name} ({}) is not vgpud's (no {OWNER_TRAIT} trait): left alone",
                    k.provider.uuid
                ));
                return Ok(None);
            }
            if k.provider.parent_provider_uuid != Some(parent) && !self.moved(client, name, out)? {
                return Ok(self.by_name.get_mut(name));
            }
        }
        if !self.by_name.contains_key(name) {
            let made = client.create_provider(name, None, Some(parent))?;
            out.created += 1;
            let known = Known {
                owned: false, // until its first trait write carries the owner trait
                traits: BTreeSet::new(),
                inventories: BTreeMap::new(),
                generation: made.generation,
                provider: made,
            };
            self.by_name.insert(name.to_owned(), known);
        }
        Ok(self.by_name.get_mut(name))
    }

    /// Deletes `name` so it can be made again under its new parent (the NUMA subtree setting
    /// changed); false, with a warning, while it holds allocations (Placement refuses then).
    fn moved(&mut self, client: &Client, name: &str, out: &mut SyncOutcome) -> Result<bool, Error> {
        let Some(k) = self.by_name.get(name) else {
            return Ok(true);
        };
        if !client
            .provider_allocations(k.provider.uuid)?
            .allocations
            .is_empty()
        {
            out.warnings.push(format!(
                "resource provider {name} has allocations: it stays under its old parent until they are released"
            ));
            return Ok(false);
        }
        client.delete_provider(k.provider.uuid)?;
        out.deleted += 1;
        self.by_name.remove(name);
        Ok(true)
    }
}

/// Runs `write(attempt)` until it does not meet a newer generation; from the second attempt
/// on, the write must re-read what it compares against.
fn retry_conflicts(
    name: &str,
    out: &mut SyncOutcome,
    mut write: impl FnMut(u32) -> Result<(), Error>,
) -> Result<(), SyncError> {
    let mut wait = CONFLICT_BACKOFF;
    for attempt in 0..CONFLICT_ATTEMPTS {
        match write(attempt) {
            Err(e) if e.is_generation_conflict() => {
                out.conflicts += 1;
                tracing::debug!(provider = name, "generation conflict; re-reading");
                sleep(wait);
                wait *= 2;
            }
            other => return other.map_err(SyncError::from),
        }
    }
    Err(SyncError::Contended(name.to_owned()))
}

/// Writes the GPU's inventories when they differ from `first`; after a conflict, from what
/// `again` computes then.
fn converge_inventories(
    client: &Client,
    known: &mut Known,
    first: &DesiredGpu,
    again: &dyn Fn() -> Option<DesiredGpu>,
    out: &mut SyncOutcome,
) -> Result<(), SyncError> {
    let name = known.provider.name.clone();
    let mut writes = 0;
    let mut kept = Vec::new();
    retry_conflicts(&name, out, |attempt| {
        let gpu = if attempt == 0 {
            Some(first.clone())
        } else {
            known.refresh(client)?;
            again()
        };
        let Some(gpu) = gpu else {
            return Ok(());
        };
        let now = known.inventories.clone();
        let mut want = gpu.inventories.clone();
        keep_in_use(&now, &mut want, &kept);
        if want == now {
            return Ok(());
        }
        for class in want.keys().filter(|c| !now.contains_key(*c)) {
            client.ensure_resource_class(class)?;
        }
        writes += 1;
        match client.set_inventories(known.provider.uuid, known.generation, &want) {
            Ok(written) => {
                known.generation = written.resource_provider_generation;
                known.inventories = want;
                Ok(())
            }
            Err(Error::Conflict { code, .. })
                if code.as_deref() == Some("placement.inventory.inuse") =>
            {
                // Classes the new layout drops still have consumers: keep them, closed.
                kept = now
                    .keys()
                    .filter(|c| !gpu.inventories.contains_key(*c))
                    .cloned()
                    .collect();
                let mut closed = gpu.inventories.clone();
                keep_in_use(&now, &mut closed, &kept);
                let written =
                    client.set_inventories(known.provider.uuid, known.generation, &closed)?;
                known.generation = written.resource_provider_generation;
                known.inventories = closed;
                Ok(())
            }
            Err(e) => Err(e),
        }
    })?;
    for class in &kept {
        out.warnings.push(format!(
            "{name}: {class} is no longer offered but allocations still use it: kept with reserved = total until they are released"
        ));
    }
    out.writes += writes;
    Ok(())
}

/// Classes in `kept` that Placement has and `want` lacks stay, fully reserved.
fn keep_in_use(
    now: &BTreeMap<String, Inventory>,
    want: &mut BTreeMap<String, Inventory>,
    kept: &[String],
) {
    for class in kept {
        if let (Some(inv), false) = (now.get(class), want.contains_key(class)) {
            want.insert(
                class.clone(),
                Inventory {
                    reserved: inv.total,
                    ..inv.clone()
                },
            );
        }
    }
}

/// Writes a provider's traits (with the owner trait) when they differ from `first`; after a
/// conflict, from what `again` computes then.
fn converge_traits(
    client: &Client,
    known: &mut Known,
    first: &BTreeSet<String>,
    again: &dyn Fn() -> BTreeSet<String>,
    out: &mut SyncOutcome,
) -> Result<(), SyncError> {
    let name = known.provider.name.clone();
    let mut writes = 0;
    retry_conflicts(&name, out, |attempt| {
        let mut want = if attempt == 0 {
            first.clone()
        } else {
            known.refresh(client)?;
            again()
        };
        want.insert(OWNER_TRAIT.to_owned());
        if want == known.traits {
            return Ok(());
        }
        for t in want
            .difference(&known.traits)
            .filter(|t| t.starts_with("CUSTOM_"))
        {
            client.ensure_trait(t)?;
        }
        let list: Vec<String> = want.iter().cloned().collect();
        writes += 1;
        let written = client.set_traits(known.provider.uuid, known.generation, &list)?;
        known.generation = written.resource_provider_generation;
        known.traits = want;
        known.owned = true;
        Ok(())
    })?;
    out.writes += writes;
    Ok(())
}

/// vgpud's providers for GPUs or NUMA nodes no longer desired (a GPU left the host, the NUMA
/// subtree was turned off): deleted when nothing is allocated on them, else closed.
fn remove_stale(
    client: &Client,
    tree: &Tree,
    want: &DesiredTree,
    root: Uuid,
    out: &mut SyncOutcome,
) -> Result<(), SyncError> {
    let wanted: BTreeSet<&str> = want
        .gpus
        .iter()
        .map(|g| g.name.as_str())
        .chain(want.numa.iter().map(|n| n.name.as_str()))
        .collect();
    // Children before parents: a NUMA provider with children cannot be deleted.
    let mut stale: Vec<&Provider> = tree
        .by_name
        .values()
        .filter(|k| k.owned && !wanted.contains(k.provider.name.as_str()))
        .map(|k| &k.provider)
        .collect();
    stale.sort_by_key(|p| p.parent_provider_uuid == Some(root));
    for p in stale {
        if client.provider_allocations(p.uuid)?.allocations.is_empty() {
            match client.delete_provider(p.uuid) {
                Ok(()) | Err(Error::NotFound(_)) => out.deleted += 1,
                Err(Error::Conflict { detail, .. }) => out
                    .warnings
                    .push(format!("cannot delete {}: {detail}", p.name)),
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        retry_conflicts(&p.name, out, |_| {
            let now = client.inventories(p.uuid)?;
            let closed: BTreeMap<String, Inventory> = now
                .inventories
                .iter()
                .map(|(c, i)| {
                    (
                        c.clone(),
                        Inventory {
                            reserved: i.total,
                            ..i.clone()
                        },
                    )
                })
                .collect();
            if closed == now.inventories {
                return Ok(());
            }
            client.set_inventories(p.uuid, now.resource_provider_generation, &closed)?;
            Ok(())
        })?;
        out.warnings.push(format!(
            "{} is gone from this host but still has allocations: kept with reserved = total",
            p.name
        ));
    }
    Ok(())
}
