use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::IdError;

/// An IOMMU group number: the file name of a device's `iommu_group` link target and of its
/// `/dev/vfio/<group>` node. Parsed as an integer before it is used in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IommuGroupId(pub u32);

impl IommuGroupId {
    /// The VFIO character device for this group.
    pub fn vfio_device(&self) -> PathBuf {
        PathBuf::from(format!("/dev/vfio/{}", self.0))
    }
}

impl FromStr for IommuGroupId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        let t = s.trim();
        if t.is_empty() || t.len() > 10 || !t.chars().all(|c| c.is_ascii_digit()) {
            return Err(IdError::new(
                "IOMMU group",
                s,
                "expected a decimal group number",
            ));
        }
        t.parse::<u32>()
            .map(Self)
            .map_err(|_| IdError::new("IOMMU group", s, "group number is out of range"))
    }
}

impl fmt::Display for IommuGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl serde::Serialize for IommuGroupId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}
impl<'de> serde::Deserialize<'de> for IommuGroupId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u32::deserialize(d).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_builds_device_path() {
        let g: IommuGroupId = "42".parse().unwrap();
        assert_eq!(g.vfio_device(), PathBuf::from("/dev/vfio/42"));
        for bad in ["", "../1", "-1", "1a"] {
            assert!(bad.parse::<IommuGroupId>().is_err(), "{bad:?}");
        }
    }
}
