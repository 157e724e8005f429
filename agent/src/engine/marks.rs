//! The mark vgpud leaves on what it creates, so the host alone can say a slice is vgpud's when
//! the ledger is gone (a deleted or lost state file; `vgpud state recover`).
//!
//! Only an mdev can carry one: its UUID is chosen by its creator and shown by the kernel as the
//! device's name (`/sys/bus/mdev/devices/<uuid>`, Documentation/driver-api/vfio-mediated-device.rst).
//! vgpud's are UUIDv8 (RFC 9562 §5.8: "custom" UUIDs whose 122 bits the creator lays out) with
//! the first 32 bits `76677064` ("vgpd" in ASCII): version 8 is what no random (v4) or
//! time-based UUID has, so `uuidgen`, mdevctl and libvirt never make one, and the prefix tells
//! vgpud's from another tool's v8 UUIDs; 74 random bits remain. MIG instances (NVML has no
//! label for a GPU instance), typed VFs and vfio-pci bindings have nothing that could carry a
//! mark, so whose they are cannot be proven from the host.

use ids::MdevUuid;

/// The first 32 bits of a vgpud mdev UUID: "vgpd" in ASCII.
const PREFIX: [u8; 4] = *b"vgpd";

/// A fresh mdev UUID carrying vgpud's mark.
pub(crate) fn new_mdev_uuid() -> MdevUuid {
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    bytes[..4].copy_from_slice(&PREFIX);
    let marked = uuid::Builder::from_custom_bytes(bytes).into_uuid();
    // Never nil: the prefix is not zero.
    MdevUuid::from_uuid(marked).unwrap_or_else(MdevUuid::new_random)
}

/// Whether an mdev UUID carries vgpud's mark.
pub(crate) fn is_vgpud_mdev(uuid: &MdevUuid) -> bool {
    let u = uuid.as_uuid();
    u.get_version_num() == 8 && u.as_bytes()[..4] == PREFIX
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn marked_uuids_are_recognised_and_random_ones_are_not() {
        let a = new_mdev_uuid();
        assert_ne!(a, new_mdev_uuid());
        assert!(is_vgpud_mdev(&a));
        let text = a.to_string();
        assert!(text.starts_with("76677064-"), "{text}");
        assert_eq!(&text[14..15], "8", "{text}");
        assert_eq!(text.parse::<MdevUuid>().unwrap(), a);
        assert!(!is_vgpud_mdev(&MdevUuid::new_random()));
        // The prefix alone is not the mark: a v4 UUID may start with it by chance.
        let v4: MdevUuid = "76677064-1111-4222-8333-444455556666".parse().unwrap();
        assert!(!is_vgpud_mdev(&v4));
        let other_v8: MdevUuid = "12345678-1111-8222-8333-444455556666".parse().unwrap();
        assert!(!is_vgpud_mdev(&other_v8));
    }
}
