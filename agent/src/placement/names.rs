//! Provider names, as Nova's libvirt driver makes them (FORMATS.md "OpenStack Placement"): the
//! root is the compute node, a GPU is `<root>_pci_<dddd>_<bb>_<dd>_<f>`, and a NUMA node (with
//! `numa_subtree`) is `<root>_numa_<n>`.

use ids::PciAddress;

/// The root provider's name: the configured compute node, else the host's name.
pub fn root_name(compute_node: &str, hostname: &str) -> String {
    if compute_node.is_empty() {
        hostname.trim().to_owned()
    } else {
        compute_node.to_owned()
    }
}

/// The NUMA provider of node `node` (`host1_numa_0`).
pub fn numa_provider(root: &str, node: u32) -> String {
    format!("{root}_numa_{node}")
}

/// The GPU provider of `gpu` (`host1_pci_0000_84_00_0`): Nova's spelling, the address with
/// `:` and `.` turned into `_`.
pub fn gpu_provider(root: &str, gpu: PciAddress) -> String {
    let address: String = gpu
        .to_string()
        .chars()
        .map(|c| if c == ':' || c == '.' { '_' } else { c })
        .collect();
    format!("{root}_pci_{address}")
}

/// The GPU a provider named by [`gpu_provider`] under `root` stands for.
pub fn gpu_of_provider(root: &str, name: &str) -> Option<PciAddress> {
    let address = name.strip_prefix(root)?.strip_prefix("_pci_")?;
    let (domain, rest) = address.split_once('_')?;
    let (bus, rest) = rest.split_once('_')?;
    let (device, function) = rest.split_once('_')?;
    let parsed: PciAddress = format!("{domain}:{bus}:{device}.{function}").parse().ok()?;
    // One spelling only: `0000_84_00_0`, never `0_84_0_0`.
    (gpu_provider(root, parsed) == name).then_some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_nova() {
        let gpu: PciAddress = "0000:84:00.0".parse().unwrap();
        assert_eq!(gpu_provider("host1", gpu), "host1_pci_0000_84_00_0");
        assert_eq!(numa_provider("host1", 1), "host1_numa_1");
        assert_eq!(root_name("", "host1\n"), "host1");
        assert_eq!(root_name("cn-7.example", "host1"), "cn-7.example");
    }

    #[test]
    fn provider_names_map_back_to_their_gpu() {
        let gpu: PciAddress = "0000:c1:1f.7".parse().unwrap();
        let name = gpu_provider("h_1", gpu);
        assert_eq!(gpu_of_provider("h_1", &name), Some(gpu));
        assert_eq!(gpu_of_provider("h_2", &name), None);
        assert_eq!(gpu_of_provider("h_1", "h_1_numa_0"), None);
        assert_eq!(gpu_of_provider("h_1", "h_1_pci_0_c1_1f_7"), None);
        assert_eq!(gpu_of_provider("h_1", "h_1_pci_0000_c1_1f_7_x"), None);
    }
}
