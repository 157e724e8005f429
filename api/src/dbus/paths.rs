//! Object paths from typed ids, and back.
//!
//! An object path element may only hold `[A-Za-z0-9_]`. The ids named in paths have one canonical
//! spelling each (`PciAddress` prints `0000:07:00.0`, `SliceId` a lower-case hyphenated UUID), so
//! replacing their separators by `_` is injective and keeps the paths readable enough to type
//! into `busctl`: `/io/vgpud/Agent1/gpu/0000_07_00_0`,
//! `/io/vgpud/Agent1/slice/6f1c2b7a_0d3e_4c5b_9a8f_1e2d3c4b5a69`. Parsing goes through the
//! typed parsers and insists on the round trip, so no other spelling maps onto an object.

use agent::engine::SliceId;
use ids::PciAddress;
use zbus::OwnedObjectPath;
use zbus::wire::ObjectPath;

/// The manager object's path (the bus name as a path, as the D-Bus conventions suggest).
pub const MANAGER_PATH: &str = "/io/vgpud/Agent1";
/// Parent of the GPU objects.
pub const GPU_PREFIX: &str = "/io/vgpud/Agent1/gpu/";
/// Parent of the slice objects.
pub const SLICE_PREFIX: &str = "/io/vgpud/Agent1/slice/";

/// The object path of a GPU.
pub fn gpu_path(gpu: &PciAddress) -> OwnedObjectPath {
    owned(format!("{GPU_PREFIX}{}", element(&gpu.to_string())))
}

/// The object path of a slice.
pub fn slice_path(slice: &SliceId) -> OwnedObjectPath {
    owned(format!("{SLICE_PREFIX}{}", element(&slice.to_string())))
}

/// The GPU an object path names, if it names one in canonical form.
pub fn parse_gpu_path(path: &str) -> Option<PciAddress> {
    let elem = path.strip_prefix(GPU_PREFIX)?;
    let parts: Vec<&str> = elem.split('_').collect();
    let [domain, bus, device, function] = parts.as_slice() else {
        return None;
    };
    let gpu: PciAddress = format!("{domain}:{bus}:{device}.{function}").parse().ok()?;
    (gpu_path(&gpu).as_str() == path).then_some(gpu)
}

/// The slice an object path names, if it names one in canonical form.
pub fn parse_slice_path(path: &str) -> Option<SliceId> {
    let elem = path.strip_prefix(SLICE_PREFIX)?;
    let id: SliceId = elem.replace('_', "-").parse().ok()?;
    (slice_path(&id).as_str() == path).then_some(id)
}

/// A canonical id's text as a path element: separators become `_`.
fn element(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn owned(path: String) -> OwnedObjectPath {
    // Built from a constant prefix and `element`'s output, which only holds characters an object
    // path allows (the tests check the result with the checked parser).
    ObjectPath::from_string_unchecked(path).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_paths_round_trip_and_reject_other_spellings() {
        let gpu: PciAddress = "0000:07:00.0".parse().unwrap();
        let path = gpu_path(&gpu);
        assert_eq!(path.as_str(), "/io/vgpud/Agent1/gpu/0000_07_00_0");
        assert_eq!(parse_gpu_path(path.as_str()), Some(gpu));
        let wide: PciAddress = "10000:e3:1f.7".parse().unwrap();
        assert_eq!(parse_gpu_path(gpu_path(&wide).as_str()), Some(wide));
        for bad in [
            "/io/vgpud/Agent1/gpu/0000_07_00",
            "/io/vgpud/Agent1/gpu/0000_07_00_0_1",
            "/io/vgpud/Agent1/gpu/0000_07_00_8",
            "/io/vgpud/Agent1/gpu/0000_07_0_0",
            "/io/vgpud/Agent1/gpu/0000_0A_00_0",
            "/io/vgpud/Agent1/gpu/",
            "/io/vgpud/Agent1/slice/0000_07_00_0",
            "/io/vgpud/Agent1/gpu/0000_07_00_0/x",
        ] {
            assert_eq!(parse_gpu_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn slice_paths_round_trip_and_reject_other_spellings() {
        let id = SliceId::new_random();
        let path = slice_path(&id);
        assert!(path.as_str().starts_with(SLICE_PREFIX));
        assert!(!path.as_str().contains('-'));
        assert_eq!(parse_slice_path(path.as_str()), Some(id));
        let upper = path
            .as_str()
            .to_uppercase()
            .replace("/IO/VGPUD/AGENT1/SLICE/", SLICE_PREFIX);
        assert_eq!(
            parse_slice_path(&upper),
            None,
            "upper case is not canonical"
        );
        let plain = format!("{SLICE_PREFIX}{}", id.to_string().replace('-', ""));
        assert_eq!(parse_slice_path(&plain), None, "separators are required");
        assert_eq!(
            parse_slice_path(&format!(
                "{SLICE_PREFIX}00000000_0000_0000_0000_000000000000"
            )),
            None
        );
    }

    #[test]
    fn every_path_is_a_valid_object_path() {
        for _ in 0..50 {
            let p = slice_path(&SliceId::new_random());
            assert!(ObjectPath::try_from(p.as_str()).is_ok());
        }
        let p = gpu_path(&"ffff:ff:1f.7".parse().unwrap());
        assert_eq!(p.as_str(), "/io/vgpud/Agent1/gpu/ffff_ff_1f_7");
    }
}
