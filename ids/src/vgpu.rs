use std::fmt;
use std::str::FromStr;

use crate::IdError;

/// An NVIDIA vGPU type id, as written to a VF's `nvidia/current_vgpu_type` and listed in
/// `creatable_vgpu_types` (`1414 : NVIDIA H200X-1-18C`). The id `0` means "no vGPU" in sysfs and
/// is therefore not a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VgpuTypeId(u32);

impl VgpuTypeId {
    /// A type id; `None` for 0.
    pub fn new(id: u32) -> Option<Self> {
        (id != 0).then_some(Self(id))
    }
    /// The numeric id.
    pub fn get(&self) -> u32 {
        self.0
    }
}

impl FromStr for VgpuTypeId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let t = s.trim();
        if t.is_empty() || t.len() > 10 || !t.chars().all(|c| c.is_ascii_digit()) {
            return Err(IdError::new("vGPU type id", s, "expected a decimal number"));
        }
        match t.parse::<u32>() {
            Ok(0) => Err(IdError::new(
                "vGPU type id",
                s,
                "0 means no vGPU, not a type",
            )),
            Ok(n) => Ok(Self(n)),
            Err(_) => Err(IdError::new("vGPU type id", s, "number is out of range")),
        }
    }
}

impl fmt::Display for VgpuTypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
// Travels as a number in JSON, like NVML and sysfs print it.
impl serde::Serialize for VgpuTypeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}
impl<'de> serde::Deserialize<'de> for VgpuTypeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let id = u32::deserialize(d)?;
        Self::new(id).ok_or_else(|| serde::de::Error::custom("vGPU type id 0 means no vGPU"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!("1414\n".parse::<VgpuTypeId>().unwrap().get(), 1414);
        assert!(
            "0".parse::<VgpuTypeId>()
                .unwrap_err()
                .reason
                .contains("no vGPU")
        );
        for bad in ["", "-1", "0x10", "99999999999", "nvidia-222"] {
            assert!(bad.parse::<VgpuTypeId>().is_err(), "{bad:?}");
        }
        assert_eq!(VgpuTypeId::new(0), None);
    }
}
