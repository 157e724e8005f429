//! PCI devices, IOMMU groups, SR-IOV and vfio-pci binding through sysfs.
