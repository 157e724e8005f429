//! NUMA nodes: CPUs, memory, distances, read from sysfs.
