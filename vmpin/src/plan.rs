//! Pin planning: which host CPUs a VM's vCPUs and emulator threads get and where its memory is
//! bound, given the host's NUMA nodes, what is reserved for the host and what other domains
//! already pinned. Pure: no I/O, so the scheduler and the engine can call it freely.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ids::{MdevUuid, NumaNodeId, PciAddress};
use numa::CpuSet;
use serde::{Deserialize, Serialize};

/// One host NUMA node as planning sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostNode {
    /// Node id.
    pub id: NumaNodeId,
    /// The node's CPUs.
    pub cpus: CpuSet,
    /// Memory VMs may be bound to on this node, MiB.
    pub memory_mib: u64,
}

/// The host as planning sees it: its nodes and the CPUs kept for the host itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTopology {
    /// NUMA nodes in id order.
    pub nodes: Vec<HostNode>,
    /// CPUs no VM may be pinned to (from the agent's configuration).
    pub reserved_cpus: CpuSet,
}

/// What one domain already holds on the host: pinned CPUs and memory bound per node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainUsage {
    /// Domain name.
    pub domain: String,
    /// CPUs its vCPUs and emulator threads are pinned to. Unpinned vCPUs float and hold none.
    pub pinned_cpus: CpuSet,
    /// Memory bound to each node through `<numatune>`, MiB. Unbound memory holds no node.
    pub memory_mib_by_node: BTreeMap<NumaNodeId, u64>,
}

/// A slice device handed to a VM.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SliceDevice {
    /// A mediated device, by UUID.
    Mdev {
        /// The mdev's UUID.
        uuid: MdevUuid,
    },
    /// A PCI function (VF or whole GPU).
    Pci {
        /// The function's address.
        address: PciAddress,
        /// `managed='yes'`: libvirt binds it to vfio-pci; `false` when the agent bound it.
        managed: bool,
    },
}

impl fmt::Display for SliceDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mdev { uuid } => write!(f, "mdev {uuid}"),
            Self::Pci { address, .. } => write!(f, "PCI device {address}"),
        }
    }
}

/// A slice and the host NUMA node it sits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slice {
    /// The device given to the VM.
    pub device: SliceDevice,
    /// Its host NUMA node.
    pub node: NumaNodeId,
}

/// How hard planning insists on NUMA locality.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Local or rejected.
    #[default]
    Required,
    /// Local where possible, otherwise spill to other nodes (the plan says so).
    Preferred,
    /// No pinning at all: only the devices are added.
    None,
}

/// libvirt's `<numatune><memory mode=...>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryMode {
    /// Allocation fails rather than leave the nodeset.
    #[default]
    Strict,
    /// Prefer the node, fall back elsewhere.
    Preferred,
    /// Interleave across the nodeset.
    Interleave,
    /// Like strict, but enforced by cgroups only (movable later).
    Restrictive,
}

impl MemoryMode {
    /// The attribute value libvirt uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Preferred => "preferred",
            Self::Interleave => "interleave",
            Self::Restrictive => "restrictive",
        }
    }

    /// Parses libvirt's attribute value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "strict" => Some(Self::Strict),
            "preferred" => Some(Self::Preferred),
            "interleave" => Some(Self::Interleave),
            "restrictive" => Some(Self::Restrictive),
            _ => None,
        }
    }

    /// libvirt's `virDomainNumatuneMemMode` number, used by the live NUMA parameters call.
    pub fn libvirt_code(self) -> i32 {
        match self {
            Self::Strict => 0,
            Self::Preferred => 1,
            Self::Interleave => 2,
            Self::Restrictive => 3,
        }
    }
}

/// Knobs for a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// `<numatune>` mode (strict by default).
    pub memory_mode: MemoryMode,
    /// Give the guest NUMA cells mirroring the host nodes when slices sit on more than one node.
    pub guest_numa: bool,
    /// Put each hostdev behind a `pcie-expander-bus` that carries its host node (q35 guests).
    pub expander_bus: bool,
    /// CPUs of the slices' first node kept for the emulator threads alone; 0 = the emulator
    /// shares the vCPUs' CPUs.
    pub dedicated_emulator_cpus: u32,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            memory_mode: MemoryMode::Strict,
            guest_numa: true,
            expander_bus: false,
            dedicated_emulator_cpus: 0,
        }
    }
}

/// What the VM needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinRequest {
    /// Every slice the VM will hold (earlier allocations on the same domain included).
    pub slices: Vec<Slice>,
    /// The domain's vCPU count.
    pub vcpus: u32,
    /// The domain's memory, KiB (as `<memory>` says), so guest cells add up exactly.
    pub memory_kib: u64,
    /// Locality policy.
    pub policy: Policy,
    /// Knobs.
    pub options: PlanOptions,
}

/// A guest NUMA cell mirroring a host node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCell {
    /// Guest cell id (0, 1, ...).
    pub id: u32,
    /// The host node it mirrors and whose memory backs it.
    pub host_node: NumaNodeId,
    /// Guest vCPU numbers in this cell.
    pub vcpus: CpuSet,
    /// Memory of the cell, KiB.
    pub memory_kib: u64,
}

/// Memory binding of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBinding {
    /// Mode.
    pub mode: MemoryMode,
    /// Host nodes.
    pub nodes: BTreeSet<NumaNodeId>,
}

impl MemoryBinding {
    /// The nodeset in libvirt's list form (`0-1`).
    pub fn nodeset(&self) -> String {
        CpuSet::from_cpus(self.nodes.iter().map(|n| u32::from(n.0))).to_string()
    }
}

/// The outcome of planning: what to write into `<cputune>`, `<numatune>` and `<cpu><numa>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinPlan {
    /// Host CPU of each vCPU (index = vCPU number); empty under policy `none`.
    pub vcpu_pins: Vec<u32>,
    /// Emulator thread CPUs; empty under policy `none`.
    pub emulator_cpus: CpuSet,
    /// Memory binding; `None` under policy `none`.
    pub memory: Option<MemoryBinding>,
    /// Guest cells; empty unless the slices sit on several nodes and guest NUMA is on.
    pub guest_cells: Vec<GuestCell>,
    /// Put hostdevs behind expander buses carrying their node.
    pub expander_bus: bool,
    /// Where policy `preferred` had to give up locality, why (empty when fully local).
    pub compromises: Vec<String>,
}

impl PinPlan {
    /// True when the plan pins nothing (policy `none`).
    pub fn is_unpinned(&self) -> bool {
        self.vcpu_pins.is_empty() && self.memory.is_none()
    }
}

/// Why a request cannot be placed NUMA-locally under policy `required` (or at all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Rejection {
    /// Nothing to be local to.
    NoSlices,
    /// The VM has no vCPUs.
    NoVcpus,
    /// A slice names a node the host does not have.
    UnknownNode {
        /// The node.
        node: NumaNodeId,
    },
    /// Not enough free CPUs on a node.
    InsufficientCpus {
        /// The node.
        node: NumaNodeId,
        /// CPUs needed there.
        needed: u32,
        /// CPUs free there.
        free: u32,
    },
    /// Not enough unbound memory on a node.
    InsufficientMemory {
        /// The node.
        node: NumaNodeId,
        /// MiB needed there.
        needed_mib: u64,
        /// MiB free there.
        free_mib: u64,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSlices => write!(f, "the request names no slices to be local to"),
            Self::NoVcpus => write!(f, "the VM has no vCPUs"),
            Self::UnknownNode { node } => write!(f, "NUMA node {node} does not exist on this host"),
            Self::InsufficientCpus { node, needed, free } => write!(
                f,
                "NUMA node {node} has {free} free CPUs, {needed} are needed for a local placement"
            ),
            Self::InsufficientMemory {
                node,
                needed_mib,
                free_mib,
            } => write!(
                f,
                "NUMA node {node} has {free_mib} MiB of unbound memory, {needed_mib} MiB are needed"
            ),
        }
    }
}

/// Free CPUs and memory of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAccount {
    /// Node id.
    pub node: NumaNodeId,
    /// All CPUs of the node.
    pub cpus: CpuSet,
    /// CPUs neither reserved for the host nor pinned by a domain.
    pub free_cpus: CpuSet,
    /// Memory of the node, MiB.
    pub memory_mib: u64,
    /// Memory not bound by any domain, MiB.
    pub free_memory_mib: u64,
}

/// Free CPUs and memory per node given the domains' pinning; the scheduler's NUMA input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaAccounting {
    nodes: Vec<NodeAccount>,
}

impl NumaAccounting {
    /// Accounts every domain in `usage`.
    pub fn new(topology: &HostTopology, usage: &[DomainUsage]) -> Self {
        Self::excluding(topology, usage, None)
    }

    /// Accounts every domain but `domain` itself: re-planning a VM must not count the pins it
    /// is about to replace.
    pub fn for_domain(topology: &HostTopology, usage: &[DomainUsage], domain: &str) -> Self {
        Self::excluding(topology, usage, Some(domain))
    }

    fn excluding(topology: &HostTopology, usage: &[DomainUsage], skip: Option<&str>) -> Self {
        let counted: Vec<&DomainUsage> = usage
            .iter()
            .filter(|u| Some(u.domain.as_str()) != skip)
            .collect();
        let taken: BTreeSet<u32> = counted.iter().flat_map(|u| u.pinned_cpus.iter()).collect();
        let nodes =
            topology
                .nodes
                .iter()
                .map(|n| {
                    let bound: u64 = counted
                        .iter()
                        .filter_map(|u| u.memory_mib_by_node.get(&n.id))
                        .sum();
                    NodeAccount {
                        node: n.id,
                        cpus: n.cpus.clone(),
                        free_cpus: CpuSet::from_cpus(n.cpus.iter().filter(|c| {
                            !topology.reserved_cpus.contains(*c) && !taken.contains(c)
                        })),
                        memory_mib: n.memory_mib,
                        free_memory_mib: n.memory_mib.saturating_sub(bound),
                    }
                })
                .collect();
        Self { nodes }
    }

    /// Every node's account, in id order.
    pub fn nodes(&self) -> &[NodeAccount] {
        &self.nodes
    }

    /// One node's account.
    pub fn node(&self, id: NumaNodeId) -> Option<&NodeAccount> {
        self.nodes.iter().find(|n| n.node == id)
    }

    /// Plans a VM. Under policy `required` every vCPU and all memory must be on the slices'
    /// nodes (split in proportion to the slices per node when they sit on several).
    pub fn plan(&self, req: &PinRequest) -> Result<PinPlan, Rejection> {
        if req.slices.is_empty() {
            return Err(Rejection::NoSlices);
        }
        for s in &req.slices {
            if self.node(s.node).is_none() {
                return Err(Rejection::UnknownNode { node: s.node });
            }
        }
        if req.policy == Policy::None {
            return Ok(PinPlan {
                expander_bus: req.options.expander_bus,
                ..PinPlan::default()
            });
        }
        if req.vcpus == 0 {
            return Err(Rejection::NoVcpus);
        }
        let mut weights: BTreeMap<NumaNodeId, u64> = BTreeMap::new();
        for s in &req.slices {
            *weights.entry(s.node).or_default() += 1;
        }
        let nodes: Vec<NumaNodeId> = weights.keys().copied().collect();
        let vcpu_split = split(
            u64::from(req.vcpus),
            &weights.values().copied().collect::<Vec<_>>(),
        );
        let shares: Vec<(NumaNodeId, u32)> = nodes
            .iter()
            .zip(&vcpu_split)
            .map(|(n, v)| (*n, *v as u32))
            .filter(|(_, v)| *v > 0)
            .collect();
        let mem_split = split(
            req.memory_kib,
            &shares
                .iter()
                .map(|(_, v)| u64::from(*v))
                .collect::<Vec<_>>(),
        );
        let mut plan = PinPlan {
            expander_bus: req.options.expander_bus,
            ..PinPlan::default()
        };
        let mut free: BTreeMap<NumaNodeId, Vec<u32>> = self
            .nodes
            .iter()
            .map(|n| (n.node, n.free_cpus.iter().collect()))
            .collect();
        let mut memory_nodes = BTreeSet::new();
        let mut memory_mode = req.options.memory_mode;
        for ((node, count), kib) in shares.iter().zip(&mem_split) {
            self.take_cpus(req.policy, *node, *count, &mut free, &mut plan)?;
            let needed_mib = kib.div_ceil(1024);
            let free_mib = self.node(*node).map_or(0, |n| n.free_memory_mib);
            if needed_mib > free_mib {
                if req.policy == Policy::Required {
                    return Err(Rejection::InsufficientMemory {
                        node: *node,
                        needed_mib,
                        free_mib,
                    });
                }
                plan.compromises.push(format!(
                    "NUMA node {node} has {free_mib} MiB of unbound memory for {needed_mib} MiB: memory mode relaxed to preferred"
                ));
                memory_mode = MemoryMode::Preferred;
            }
            memory_nodes.insert(*node);
        }
        if memory_mode == MemoryMode::Preferred && memory_nodes.len() > 1 {
            // libvirt accepts only a single node in mode preferred.
            let first = memory_nodes.iter().next().copied();
            memory_nodes.retain(|n| Some(*n) == first);
        }
        plan.emulator_cpus = CpuSet::from_cpus(plan.vcpu_pins.iter().copied());
        if req.options.dedicated_emulator_cpus > 0 {
            self.take_emulator_cpus(req, shares[0].0, &mut free, &mut plan)?;
        }
        if req.options.guest_numa && shares.len() > 1 {
            let mut first_vcpu = 0u32;
            for (i, ((node, count), kib)) in shares.iter().zip(&mem_split).enumerate() {
                plan.guest_cells.push(GuestCell {
                    id: i as u32,
                    host_node: *node,
                    vcpus: CpuSet::from_cpus(first_vcpu..first_vcpu + count),
                    memory_kib: *kib,
                });
                first_vcpu += count;
            }
        }
        plan.memory = Some(MemoryBinding {
            mode: memory_mode,
            nodes: memory_nodes,
        });
        Ok(plan)
    }

    fn take_cpus(
        &self,
        policy: Policy,
        node: NumaNodeId,
        count: u32,
        free: &mut BTreeMap<NumaNodeId, Vec<u32>>,
        plan: &mut PinPlan,
    ) -> Result<(), Rejection> {
        let local = free.get_mut(&node).map(std::mem::take).unwrap_or_default();
        if (local.len() as u64) < u64::from(count) && policy == Policy::Required {
            return Err(Rejection::InsufficientCpus {
                node,
                needed: count,
                free: local.len() as u32,
            });
        }
        let take = (count as usize).min(local.len());
        plan.vcpu_pins.extend(&local[..take]);
        free.insert(node, local[take..].to_vec());
        let mut missing = count as usize - take;
        if missing == 0 {
            return Ok(());
        }
        plan.compromises.push(format!(
            "NUMA node {node} has {take} free CPUs for {count} vCPUs: {missing} placed on other nodes"
        ));
        // Spill to the nodes with the most free CPUs first.
        let mut others: Vec<NumaNodeId> = free.keys().copied().filter(|n| *n != node).collect();
        others.sort_by_key(|n| std::cmp::Reverse(free.get(n).map_or(0, Vec::len)));
        for other in others {
            let Some(cpus) = free.get_mut(&other) else {
                continue;
            };
            let n = missing.min(cpus.len());
            plan.vcpu_pins.extend(cpus.drain(..n));
            missing -= n;
            if missing == 0 {
                return Ok(());
            }
        }
        // Not even the whole host has a free CPU per vCPU: share the CPUs already chosen.
        let pool: Vec<u32> = plan.vcpu_pins.clone();
        let fallback = self
            .node(node)
            .map(|n| n.cpus.iter().collect::<Vec<_>>())
            .unwrap_or_default();
        let pool = if pool.is_empty() { fallback } else { pool };
        if pool.is_empty() {
            return Err(Rejection::InsufficientCpus {
                node,
                needed: count,
                free: 0,
            });
        }
        plan.compromises.push(format!(
            "the host has no free CPU left for {missing} vCPUs: they share CPUs"
        ));
        for i in 0..missing {
            plan.vcpu_pins.push(pool[i % pool.len()]);
        }
        Ok(())
    }

    fn take_emulator_cpus(
        &self,
        req: &PinRequest,
        node: NumaNodeId,
        free: &mut BTreeMap<NumaNodeId, Vec<u32>>,
        plan: &mut PinPlan,
    ) -> Result<(), Rejection> {
        let want = req.options.dedicated_emulator_cpus as usize;
        let local = free.entry(node).or_default();
        if local.len() < want {
            if req.policy == Policy::Required {
                return Err(Rejection::InsufficientCpus {
                    node,
                    needed: req.vcpus + req.options.dedicated_emulator_cpus,
                    free: (local.len() + plan.vcpu_pins.len()) as u32,
                });
            }
            plan.compromises.push(format!(
                "NUMA node {node} has no {want} spare CPUs for the emulator: it shares the vCPUs' CPUs"
            ));
            return Ok(());
        }
        plan.emulator_cpus = CpuSet::from_cpus(local.drain(..want));
        Ok(())
    }
}

/// Splits `total` in proportion to `weights` (largest remainder; the parts add up to `total`).
fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u64 = weights.iter().sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(u64, u64)> = weights
        .iter()
        .map(|w| {
            let p = u128::from(total) * u128::from(*w);
            ((p / u128::from(sum)) as u64, (p % u128::from(sum)) as u64)
        })
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|i| (std::cmp::Reverse(exact[*i].1), *i));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u16, cpus: &str, mib: u64) -> HostNode {
        HostNode {
            id: NumaNodeId(id),
            cpus: cpus.parse().unwrap(),
            memory_mib: mib,
        }
    }

    fn two_nodes() -> HostTopology {
        HostTopology {
            nodes: vec![node(0, "0-7", 16384), node(1, "8-15", 16384)],
            reserved_cpus: "0-1".parse().unwrap(),
        }
    }

    fn mdev(n: u16) -> Slice {
        Slice {
            device: SliceDevice::Mdev {
                uuid: format!("0000000{n}-0000-4000-8000-000000000000")
                    .parse()
                    .unwrap(),
            },
            node: NumaNodeId(n),
        }
    }

    fn request(slices: Vec<Slice>, vcpus: u32, mib: u64, policy: Policy) -> PinRequest {
        PinRequest {
            slices,
            vcpus,
            memory_kib: mib * 1024,
            policy,
            options: PlanOptions::default(),
        }
    }

    #[test]
    fn splits_add_up() {
        assert_eq!(split(4, &[1, 1]), vec![2, 2]);
        assert_eq!(split(5, &[1, 1]), vec![3, 2]);
        assert_eq!(split(5, &[1, 2]), vec![2, 3]);
        assert_eq!(split(7, &[1, 1, 1]), vec![3, 2, 2]);
        assert_eq!(split(0, &[1, 1]), vec![0, 0]);
        assert_eq!(split(3, &[0, 0]), vec![0, 0]);
        assert_eq!(split(u64::MAX, &[1, 1]).iter().sum::<u64>(), u64::MAX);
    }

    #[test]
    fn pins_one_to_one_on_the_slice_node_skipping_reserved_and_taken() {
        let usage = [DomainUsage {
            domain: "other".into(),
            pinned_cpus: "8-9".parse().unwrap(),
            memory_mib_by_node: [(NumaNodeId(1), 4096)].into(),
        }];
        let acc = NumaAccounting::new(&two_nodes(), &usage);
        assert_eq!(
            acc.node(NumaNodeId(0)).unwrap().free_cpus.to_string(),
            "2-7"
        );
        assert_eq!(
            acc.node(NumaNodeId(1)).unwrap().free_cpus.to_string(),
            "10-15"
        );
        assert_eq!(acc.node(NumaNodeId(1)).unwrap().free_memory_mib, 12288);
        let plan = acc
            .plan(&request(vec![mdev(1)], 4, 8192, Policy::Required))
            .unwrap();
        assert_eq!(plan.vcpu_pins, vec![10, 11, 12, 13]);
        assert_eq!(plan.emulator_cpus.to_string(), "10-13");
        let mem = plan.memory.as_ref().unwrap();
        assert_eq!(
            (mem.mode, mem.nodeset()),
            (MemoryMode::Strict, "1".to_owned())
        );
        assert!(plan.guest_cells.is_empty() && plan.compromises.is_empty());
    }

    #[test]
    fn required_rejects_with_the_reason() {
        let acc = NumaAccounting::new(&two_nodes(), &[]);
        let err = acc
            .plan(&request(vec![mdev(0)], 7, 1024, Policy::Required))
            .unwrap_err();
        assert_eq!(
            err,
            Rejection::InsufficientCpus {
                node: NumaNodeId(0),
                needed: 7,
                free: 6
            }
        );
        assert!(err.to_string().contains("6 free CPUs"), "{err}");
        let err = acc
            .plan(&request(vec![mdev(1)], 2, 20000, Policy::Required))
            .unwrap_err();
        assert!(matches!(
            err,
            Rejection::InsufficientMemory {
                needed_mib: 20000,
                free_mib: 16384,
                ..
            }
        ));
        let err = acc
            .plan(&request(vec![mdev(3)], 2, 1, Policy::Required))
            .unwrap_err();
        assert_eq!(
            err,
            Rejection::UnknownNode {
                node: NumaNodeId(3)
            }
        );
        assert_eq!(
            acc.plan(&request(vec![], 2, 1, Policy::Required))
                .unwrap_err(),
            Rejection::NoSlices
        );
        assert_eq!(
            acc.plan(&request(vec![mdev(0)], 0, 1, Policy::Required))
                .unwrap_err(),
            Rejection::NoVcpus
        );
    }

    #[test]
    fn excludes_the_domain_being_replanned() {
        let usage = [DomainUsage {
            domain: "vm".into(),
            pinned_cpus: "2-7".parse().unwrap(),
            memory_mib_by_node: [(NumaNodeId(0), 16384)].into(),
        }];
        let all = NumaAccounting::new(&two_nodes(), &usage);
        assert!(
            all.plan(&request(vec![mdev(0)], 2, 1024, Policy::Required))
                .is_err()
        );
        let own = NumaAccounting::for_domain(&two_nodes(), &usage, "vm");
        assert_eq!(
            own.plan(&request(vec![mdev(0)], 2, 1024, Policy::Required))
                .unwrap()
                .vcpu_pins,
            vec![2, 3]
        );
    }

    #[test]
    fn preferred_spills_and_says_so() {
        let acc = NumaAccounting::new(&two_nodes(), &[]);
        let plan = acc
            .plan(&request(vec![mdev(0)], 8, 20000, Policy::Preferred))
            .unwrap();
        assert_eq!(plan.vcpu_pins, vec![2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(plan.compromises.len(), 2, "{:?}", plan.compromises);
        let mem = plan.memory.unwrap();
        assert_eq!(
            (mem.mode, mem.nodeset()),
            (MemoryMode::Preferred, "0".to_owned())
        );
    }

    #[test]
    fn policy_none_pins_nothing() {
        let acc = NumaAccounting::new(&two_nodes(), &[]);
        let plan = acc
            .plan(&request(vec![mdev(0)], 64, 1 << 30, Policy::None))
            .unwrap();
        assert!(plan.is_unpinned() && plan.guest_cells.is_empty());
    }

    #[test]
    fn two_nodes_split_proportionally_with_guest_cells() {
        let acc = NumaAccounting::new(&two_nodes(), &[]);
        let mut req = request(vec![mdev(0), mdev(1)], 4, 8192, Policy::Required);
        let plan = acc.plan(&req).unwrap();
        assert_eq!(plan.vcpu_pins, vec![2, 3, 8, 9]);
        assert_eq!(plan.memory.as_ref().unwrap().nodeset(), "0-1");
        assert_eq!(plan.guest_cells.len(), 2);
        assert_eq!(plan.guest_cells[0].vcpus.to_string(), "0-1");
        assert_eq!(plan.guest_cells[1].vcpus.to_string(), "2-3");
        assert_eq!(plan.guest_cells[1].host_node, NumaNodeId(1));
        assert_eq!(
            plan.guest_cells.iter().map(|c| c.memory_kib).sum::<u64>(),
            8192 * 1024
        );
        // Two slices on node 1, one on node 0: node 1 gets two thirds.
        req.slices.push(mdev(1));
        req.vcpus = 6;
        let plan = acc.plan(&req).unwrap();
        assert_eq!(plan.vcpu_pins, vec![2, 3, 8, 9, 10, 11]);
        assert_eq!(plan.guest_cells[1].vcpus.to_string(), "2-5");
        req.options.guest_numa = false;
        assert!(acc.plan(&req).unwrap().guest_cells.is_empty());
    }

    #[test]
    fn dedicated_emulator_cpus() {
        let acc = NumaAccounting::new(&two_nodes(), &[]);
        let mut req = request(vec![mdev(1)], 2, 1024, Policy::Required);
        req.options.dedicated_emulator_cpus = 2;
        let plan = acc.plan(&req).unwrap();
        assert_eq!(
            (plan.vcpu_pins.clone(), plan.emulator_cpus.to_string()),
            (vec![8, 9], "10-11".to_owned())
        );
        req.vcpus = 7;
        assert!(matches!(
            acc.plan(&req),
            Err(Rejection::InsufficientCpus {
                needed: 9,
                free: 8,
                ..
            })
        ));
    }
}
