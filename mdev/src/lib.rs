//! Mediated devices: parents, types, create and remove through sysfs.
