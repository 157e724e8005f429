//! vgpud as a kubelet device plugin.
