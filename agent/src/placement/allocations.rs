//! After each sync: read Placement's allocations on vgpud's GPU providers, compare them with
//! vgpud's ([`super::audit`]), and, with `[placement] heal`, remove from consumers vgpud does
//! not know (after the grace period) their entries on vgpud's providers — never the rest of
//! their allocations, which belong to Nova or to other hosts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use placement::{Client, Error};
use uuid::Uuid;

use super::audit::{Differences, audit, heal_plan, held_here, note_unknown, without_providers};
use super::consumer::ProviderMap;
use crate::engine::Engine;

/// What one audit found and healed.
#[derive(Debug, Clone, Default)]
pub struct AuditOutcome {
    /// How the two sides differ.
    pub differences: Differences,
    /// Consumers whose entries on vgpud's providers were removed.
    pub healed: Vec<Uuid>,
}

/// Audits vgpud's allocations against Placement's; heals when `heal` is `Some(grace)`.
/// `first_seen` carries, between passes, when each unknown consumer was first seen.
pub fn audit_and_heal(
    client: &Client,
    engine: &Engine,
    map: &ProviderMap,
    heal: Option<Duration>,
    first_seen: &mut BTreeMap<Uuid, Instant>,
) -> Result<AuditOutcome, Error> {
    let mut placed = BTreeMap::new();
    for (provider, _) in map.providers() {
        placed.insert(provider, client.provider_allocations(provider)?);
    }
    let held = held_here(&engine.allocations(), &engine.slices());
    let differences = audit(map, &held, &placed);
    let now = Instant::now();
    note_unknown(first_seen, &differences, now);
    let mut healed = Vec::new();
    if let Some(grace) = heal {
        for consumer in heal_plan(&differences, first_seen, now, grace) {
            heal_one(client, map, consumer)?;
            first_seen.remove(&consumer);
            healed.push(consumer);
        }
    }
    Ok(AuditOutcome {
        differences,
        healed,
    })
}

/// Removes `consumer`'s entries on vgpud's providers, keeping the rest of its allocation;
/// a consumer that changed meanwhile (409) is left for the next pass.
fn heal_one(client: &Client, map: &ProviderMap, consumer: Uuid) -> Result<(), Error> {
    let held = client.consumer_allocations(consumer)?;
    let rest = without_providers(&held, map);
    let written = if rest.allocations.is_empty() {
        client.delete_consumer_allocations(consumer)
    } else {
        client.put_consumer_allocations(consumer, &rest)
    };
    match written {
        Ok(()) | Err(Error::NotFound(_)) => {
            tracing::warn!(%consumer, "removed a Placement consumer's allocation on this host's GPUs: vgpud holds nothing for it ([placement] heal)");
            Ok(())
        }
        Err(e) if e.is_generation_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}
