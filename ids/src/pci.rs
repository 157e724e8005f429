use std::fmt;
use std::str::FromStr;

use crate::{IdError, serde_via_str};

/// A PCI function address. Canonical form `dddd:bb:dd.f`, lower-case hex, as the kernel names
/// devices under `/sys/bus/pci/devices`.
///
/// Parsing accepts the kernel form, NVML's 8-digit-domain form (`00000000:07:00.0`), upper case,
/// and domains wider than 16 bits (Intel VMD uses `10000:…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

const PCI: &str = "PCI address";

impl PciAddress {
    /// Builds an address from its parts; `device` must be below 32 and `function` below 8.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Result<Self, IdError> {
        let text = format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}");
        if device > 0x1f {
            return Err(IdError::new(PCI, &text, "device number must be at most 1f"));
        }
        if function > 7 {
            return Err(IdError::new(
                PCI,
                &text,
                "function number must be at most 7",
            ));
        }
        Ok(Self {
            domain,
            bus,
            device,
            function,
        })
    }
    /// PCI segment (domain).
    pub fn domain(&self) -> u32 {
        self.domain
    }
    /// Bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }
    /// Device (slot) number, 0–31.
    pub fn device(&self) -> u8 {
        self.device
    }
    /// Function number, 0–7.
    pub fn function(&self) -> u8 {
        self.function
    }
}

fn hex_field(input: &str, field: &str, what: &str, max_digits: usize) -> Result<u32, IdError> {
    if field.is_empty() || field.len() > max_digits {
        return Err(IdError::new(
            PCI,
            input,
            format!("{what} must be 1 to {max_digits} hex digits"),
        ));
    }
    if !field.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(IdError::new(
            PCI,
            input,
            format!("{what} {field:?} is not hexadecimal"),
        ));
    }
    u32::from_str_radix(field, 16)
        .map_err(|_| IdError::new(PCI, input, format!("{what} {field:?} is out of range")))
}

impl FromStr for PciAddress {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let (rest, function) = s
            .rsplit_once('.')
            .ok_or_else(|| IdError::new(PCI, s, "expected dddd:bb:dd.f"))?;
        let mut parts = rest.split(':');
        let (Some(domain), Some(bus), Some(device), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(IdError::new(PCI, s, "expected dddd:bb:dd.f"));
        };
        let domain = hex_field(s, domain, "domain", 8)?;
        let bus = hex_field(s, bus, "bus", 2)? as u8;
        let device = hex_field(s, device, "device", 2)?;
        let function = hex_field(s, function, "function", 1)?;
        if device > 0x1f {
            return Err(IdError::new(PCI, s, "device number must be at most 1f"));
        }
        if function > 7 {
            return Err(IdError::new(PCI, s, "function number must be at most 7"));
        }
        Ok(Self {
            domain,
            bus,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}
serde_via_str!(PciAddress);

macro_rules! pci_id {
    ($name:ident, $kind:literal, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Parses `0x10de` (the sysfs form) or `10de`; displays as four lower-case hex digits.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u16);

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                let t = s.trim();
                let digits = t
                    .strip_prefix("0x")
                    .or_else(|| t.strip_prefix("0X"))
                    .unwrap_or(t);
                if digits.len() != 4 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(IdError::new(
                        $kind,
                        s,
                        "expected four hex digits, e.g. 0x10de",
                    ));
                }
                u16::from_str_radix(digits, 16)
                    .map($name)
                    .map_err(|_| IdError::new($kind, s, "not a 16-bit hex number"))
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:04x}", self.0)
            }
        }
        serde_via_str!($name);
    };
}
pci_id!(
    PciVendorId,
    "PCI vendor id",
    "A PCI vendor id, e.g. `10de` for NVIDIA."
);
pci_id!(
    PciDeviceId,
    "PCI device id",
    "A PCI device id, e.g. `2335` for an H200."
);

impl PciVendorId {
    /// NVIDIA Corporation.
    pub const NVIDIA: Self = Self(0x10de);
    /// Advanced Micro Devices (ATI).
    pub const AMD: Self = Self(0x1002);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let a: PciAddress = "0000:07:00.0".parse().unwrap();
        assert_eq!(a.to_string(), "0000:07:00.0");
        assert_eq!(
            "0000:AB:1F.7".parse::<PciAddress>().unwrap().to_string(),
            "0000:ab:1f.7"
        );
        assert_eq!("00000000:07:00.0".parse::<PciAddress>().unwrap(), a);
        assert_eq!(
            "10000:e1:00.0".parse::<PciAddress>().unwrap().to_string(),
            "10000:e1:00.0"
        );
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "07:00.0",
            "0000:07:00",
            "0000:07:20.0",
            "0000:07:00.8",
            "0000:7g:00.0",
            "0000:07:00.0/..",
            "0000::00.0",
            "000000000:07:00.0",
            " 0000:07:00.0",
            "0000:07:00.0:1",
            "0000:107:00.0",
        ] {
            let err = bad.parse::<PciAddress>().unwrap_err();
            assert_eq!(err.kind, "PCI address", "{bad}");
        }
        let err = "0000:07:20.0".parse::<PciAddress>().unwrap_err();
        assert!(err.to_string().contains("device number"), "{err}");
    }

    #[test]
    fn vendor_ids() {
        assert_eq!(
            "0x10de".parse::<PciVendorId>().unwrap(),
            PciVendorId::NVIDIA
        );
        assert_eq!("10DE\n".parse::<PciVendorId>().unwrap().to_string(), "10de");
        assert!("0x10de0".parse::<PciVendorId>().is_err());
        assert!("nvidia".parse::<PciDeviceId>().is_err());
    }

    #[test]
    fn serde_round_trip() {
        let a: PciAddress = "0000:41:00.1".parse().unwrap();
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, "\"0000:41:00.1\"");
        assert_eq!(serde_json::from_str::<PciAddress>(&json).unwrap(), a);
        assert!(serde_json::from_str::<PciAddress>("\"41:00.1\"").is_err());
    }
}
