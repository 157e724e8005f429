//! Host discovery: one HostInventory value from every device crate.
