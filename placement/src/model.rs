//! Placement's documents, as its API reference writes them (microversion 1.39).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The microversion every request asks for: 1.36 brings `same_subtree`, 1.38 consumer types,
/// 1.39 `any-traits` (`in:`) in `required`.
pub const MICROVERSION: &str = "1.39";

/// A resource provider (`GET /resource_providers/{uuid}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provider {
    /// Its UUID.
    pub uuid: Uuid,
    /// Its name, unique in the Placement service.
    pub name: String,
    /// Bumped by every change to the provider, its inventories or its traits; every write must
    /// carry the generation it read.
    pub generation: u64,
    /// Its parent, for a nested provider (1.14).
    #[serde(default)]
    pub parent_provider_uuid: Option<Uuid>,
    /// The root of its tree (1.14).
    #[serde(default)]
    pub root_provider_uuid: Option<Uuid>,
}

/// One resource class's inventory on a provider. Placement's defaults: `reserved` 0,
/// `min_unit` 1, `max_unit` = `total`, `step_size` 1, `allocation_ratio` 1.0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Units the provider has.
    pub total: u32,
    /// Units not available to allocations (from 1.26 it may equal `total`).
    #[serde(default)]
    pub reserved: u32,
    /// Smallest amount one allocation may take.
    #[serde(default = "one")]
    pub min_unit: u32,
    /// Largest amount one allocation may take.
    pub max_unit: u32,
    /// Allocations take multiples of this.
    #[serde(default = "one")]
    pub step_size: u32,
    /// Overcommit: capacity is `(total - reserved) * allocation_ratio`.
    #[serde(default = "ratio_one")]
    pub allocation_ratio: f64,
}

fn one() -> u32 {
    1
}

fn ratio_one() -> f64 {
    1.0
}

impl Inventory {
    /// `total` units, any amount up to all of them per allocation, no overcommit, none reserved.
    pub fn whole(total: u32) -> Self {
        Self {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total,
            step_size: 1,
            allocation_ratio: 1.0,
        }
    }
}

/// A provider's inventories with the generation they were read at
/// (`GET /resource_providers/{uuid}/inventories`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventories {
    /// The provider's generation.
    pub resource_provider_generation: u64,
    /// By resource class.
    pub inventories: BTreeMap<String, Inventory>,
}

/// A provider's traits with the generation they were read at
/// (`GET /resource_providers/{uuid}/traits`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traits {
    /// The provider's generation.
    pub resource_provider_generation: u64,
    /// The trait names.
    pub traits: Vec<String>,
}

/// What one consumer holds on one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocation {
    /// Amounts by resource class.
    pub resources: BTreeMap<String, u32>,
    /// The provider's generation (in answers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// A consumer's allocations (`GET /allocations/{consumer_uuid}`); empty when it holds none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConsumerAllocations {
    /// By provider UUID.
    pub allocations: BTreeMap<Uuid, ProviderAllocation>,
    /// The consumer's generation (1.28); absent when the consumer does not exist.
    #[serde(default)]
    pub consumer_generation: Option<u64>,
    /// Its project (1.12).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Its user (1.12).
    #[serde(default)]
    pub user_id: Option<String>,
    /// Its type (1.38), e.g. `INSTANCE`.
    #[serde(default)]
    pub consumer_type: Option<String>,
}

/// The allocations against one provider (`GET /resource_providers/{uuid}/allocations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderAllocations {
    /// The provider's generation.
    pub resource_provider_generation: u64,
    /// By consumer UUID: amounts by resource class.
    pub allocations: BTreeMap<Uuid, ConsumerResources>,
}

/// Amounts by resource class, as one consumer holds them on one provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerResources {
    /// Amounts by resource class.
    pub resources: BTreeMap<String, u32>,
}

/// `GET /allocation_candidates`: the ways the request could be met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationCandidates {
    /// Each a complete allocation that could be written with `PUT /allocations/{consumer}`.
    pub allocation_requests: Vec<AllocationRequest>,
    /// What each provider involved has and uses, by UUID.
    pub provider_summaries: BTreeMap<Uuid, serde_json::Value>,
}

/// One candidate: amounts by provider, and (from 1.34) which request group each provider
/// satisfies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRequest {
    /// By provider UUID.
    pub allocations: BTreeMap<Uuid, ConsumerResources>,
    /// Request group suffix → providers (1.34).
    #[serde(default)]
    pub mappings: BTreeMap<String, Vec<Uuid>>,
}
