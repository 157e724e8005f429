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
use placement::model::{Inventories, Inventory, Provider};
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

/// Brings Placement's view of this host to `desired()`, recomputed after every conflict.
pub fn sync_once(
    client: &Client,
    desired: &dyn Fn() -> DesiredTree,
    own_root: bool,
) -> Result<SyncOutcome, SyncError> {
    let want = desired();
    let mut out = SyncOutcome {
        warnings: want.warnings.clone(),
        ..SyncOutcome::default()
    };
    let root = find_root(client, &want.root_name, own_root, &mut out)?;
    out.root = Some(root.uuid);
    ensure_names(client, &want)?;
    let mut tree = Tree::read(client, root.uuid)?;
    let mut numa_parent = HashMap::new();
    for numa in &want.numa {
        let parent = tree.ensure_under(client, &numa.name, root.uuid, &mut out)?;
        if let Some(uuid) = parent {
            write_traits(client, uuid, &numa.name, &mut out, &|| {
                desired()
                    .numa
                    .into_iter()
                    .find(|n| n.name == numa.name)
                    .map(|n| n.traits)
                    .unwrap_or_default()
            })?;
            numa_parent.insert(numa.node, uuid);
        }
    }
    for gpu in &want.gpus {
        let parent = match gpu.numa_node {
            Some(node) => match numa_parent.get(&node) {
                Some(p) => *p,
                None => continue, // its NUMA provider is someone else's: warned above
            },
            None => root.uuid,
        };
        let Some(uuid) = tree.ensure_under(client, &gpu.name, parent, &mut out)? else {
            continue;
        };
        out.gpu_providers.insert(gpu.gpu, uuid);
        out.gpu_types.insert(gpu.gpu, gpu.types.clone());
        let pick = |t: DesiredTree| t.gpus.into_iter().find(|g| g.gpu == gpu.gpu);
        write_inventories(client, uuid, &gpu.name, &mut out, &|| pick(desired()))?;
        write_traits(client, uuid, &gpu.name, &mut out, &|| {
            pick(desired()).map(|g| g.traits).unwrap_or_default()
        })?;
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
    retry_conflicts(name, out, || {
        let now = client.traits(root.uuid)?;
        let mut all: BTreeSet<String> = now.traits.into_iter().collect();
        all.extend(owned.iter().cloned());
        let all: Vec<String> = all.into_iter().collect();
        client.set_traits(root.uuid, now.resource_provider_generation, &all)?;
        Ok(())
    })?;
    Ok(root)
}

/// Custom traits and resource classes must exist before a provider may name them.
fn ensure_names(client: &Client, want: &DesiredTree) -> Result<(), Error> {
    let traits: BTreeSet<&String> = want
        .gpus
        .iter()
        .flat_map(|g| &g.traits)
        .chain(want.numa.iter().flat_map(|n| &n.traits))
        .collect();
    for t in traits.into_iter().filter(|t| t.starts_with("CUSTOM_")) {
        client.ensure_trait(t)?;
    }
    let classes: BTreeSet<&String> = want
        .gpus
        .iter()
        .flat_map(|g| g.inventories.keys())
        .collect();
    for c in classes {
        client.ensure_resource_class(c)?;
    }
    Ok(())
}

/// The providers of this host's tree, by name, with whether vgpud owns each.
struct Tree {
    by_name: BTreeMap<String, (Provider, bool)>,
}

impl Tree {
    fn read(client: &Client, root: Uuid) -> Result<Self, Error> {
        let mut by_name = BTreeMap::new();
        for p in client.tree(root)? {
            if p.uuid == root {
                continue;
            }
            let owned = client
                .traits(p.uuid)?
                .traits
                .iter()
                .any(|t| t == OWNER_TRAIT);
            by_name.insert(p.name.clone(), (p, owned));
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
    ) -> Result<Option<Uuid>, SyncError> {
        if let Some((p, owned)) = self.by_name.get(name) {
            if !owned {
                out.warnings.push(format!(
                    "resource provider {name} ({}) is not vgpud's (no {OWNER_TRAIT} trait): left alone",
                    p.uuid
                ));
                return Ok(None);
            }
            if p.parent_provider_uuid == Some(parent) {
                return Ok(Some(p.uuid));
            }
            // The NUMA subtree setting changed: a provider moves by being made again, which
            // Placement refuses while it holds allocations.
            if !client.provider_allocations(p.uuid)?.allocations.is_empty() {
                out.warnings.push(format!(
                    "resource provider {name} has allocations: it stays under its old parent until they are released"
                ));
                return Ok(Some(p.uuid));
            }
            client.delete_provider(p.uuid)?;
            out.deleted += 1;
        }
        let made = client.create_provider(name, None, Some(parent))?;
        out.created += 1;
        let uuid = made.uuid;
        self.by_name.insert(name.to_owned(), (made, true));
        Ok(Some(uuid))
    }
}

/// Runs `write` until it does not meet a newer generation, re-reading each time.
fn retry_conflicts(
    name: &str,
    out: &mut SyncOutcome,
    mut write: impl FnMut() -> Result<(), Error>,
) -> Result<(), SyncError> {
    let mut wait = CONFLICT_BACKOFF;
    for _ in 0..CONFLICT_ATTEMPTS {
        match write() {
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

/// Writes the GPU's inventories when they differ from what `desired` computes now.
fn write_inventories(
    client: &Client,
    uuid: Uuid,
    name: &str,
    out: &mut SyncOutcome,
    desired: &dyn Fn() -> Option<DesiredGpu>,
) -> Result<(), SyncError> {
    let mut writes = 0;
    let mut kept = Vec::new();
    retry_conflicts(name, out, || {
        let now = client.inventories(uuid)?;
        let Some(gpu) = desired() else {
            return Ok(());
        };
        let mut want = gpu.inventories.clone();
        keep_in_use(&now, &mut want, &kept);
        if want == now.inventories {
            return Ok(());
        }
        match client.set_inventories(uuid, now.resource_provider_generation, &want) {
            Err(Error::Conflict { code, .. })
                if code.as_deref() == Some("placement.inventory.inuse") =>
            {
                // Classes the new layout drops still have consumers: keep them, closed.
                let gone: Vec<String> = now
                    .inventories
                    .keys()
                    .filter(|c| !gpu.inventories.contains_key(*c))
                    .cloned()
                    .collect();
                kept = gone;
                let mut closed = gpu.inventories.clone();
                keep_in_use(&now, &mut closed, &kept);
                let again = client.inventories(uuid)?;
                client.set_inventories(uuid, again.resource_provider_generation, &closed)?;
                writes += 1;
                Ok(())
            }
            other => {
                writes += 1;
                other.map(drop)
            }
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
fn keep_in_use(now: &Inventories, want: &mut BTreeMap<String, Inventory>, kept: &[String]) {
    for class in kept {
        if let (Some(inv), false) = (now.inventories.get(class), want.contains_key(class)) {
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

/// Writes a provider's traits when they differ from what `desired` computes now.
fn write_traits(
    client: &Client,
    uuid: Uuid,
    name: &str,
    out: &mut SyncOutcome,
    desired: &dyn Fn() -> BTreeSet<String>,
) -> Result<(), SyncError> {
    let mut writes = 0;
    retry_conflicts(name, out, || {
        let now = client.traits(uuid)?;
        let mut want = desired();
        want.insert(OWNER_TRAIT.to_owned());
        let have: BTreeSet<String> = now.traits.iter().cloned().collect();
        if want == have {
            return Ok(());
        }
        let want: Vec<String> = want.into_iter().collect();
        client.set_traits(uuid, now.resource_provider_generation, &want)?;
        writes += 1;
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
        .filter(|(p, owned)| *owned && !wanted.contains(p.name.as_str()))
        .map(|(p, _)| p)
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
        retry_conflicts(&p.name, out, || {
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
