//! Typed id parsers (`ids`, and the engine's slice and allocation ids): every id that parses
//! prints its canonical form, and that form parses to the same value, prints the same, and
//! survives serde's JSON round trip. The REST layer's canonical-only parsers accept exactly the
//! strings that are their own canonical form.
#![no_main]

use std::fmt::{Debug, Display};
use std::str::FromStr;

use agent::engine::{AllocationId, DeviceRef, SliceId};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn round_trip<T>(text: &str) -> Option<T>
where
    T: FromStr + Display + PartialEq + Debug,
    T::Err: Display,
{
    let value = text.parse::<T>().ok()?;
    let printed = value.to_string();
    let again: T = printed
        .parse()
        .unwrap_or_else(|e| panic!("{printed:?} (from {text:?}) does not parse: {e}"));
    assert_eq!(value, again, "{text:?} printed as {printed:?}");
    assert_eq!(
        printed,
        again.to_string(),
        "canonical form of {text:?} is not stable"
    );
    Some(value)
}

fn serde_round_trip<T>(text: &str)
where
    T: FromStr + Display + PartialEq + Debug + Serialize + DeserializeOwned,
    T::Err: Display,
{
    let Some(value) = round_trip::<T>(text) else {
        return;
    };
    let json = serde_json::to_string(&value).expect("an id serialises");
    let again: T =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json} does not decode: {e}"));
    assert_eq!(value, again, "JSON round trip of {text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    serde_round_trip::<ids::PciAddress>(text);
    round_trip::<ids::PciVendorId>(text);
    round_trip::<ids::PciDeviceId>(text);
    serde_round_trip::<ids::MdevUuid>(text);
    serde_round_trip::<ids::MdevTypeId>(text);
    serde_round_trip::<ids::MdevParentName>(text);
    serde_round_trip::<ids::MigProfileName>(text);
    serde_round_trip::<ids::NumaNodeId>(text);
    serde_round_trip::<ids::IommuGroupId>(text);
    serde_round_trip::<ids::VgpuTypeId>(text);
    serde_round_trip::<SliceId>(text);
    serde_round_trip::<AllocationId>(text);
    // The REST parsers take the canonical spelling only.
    if let Ok(addr) = api::wire::parse_pci("gpu", text) {
        assert_eq!(
            addr.to_string(),
            text,
            "parse_pci accepted a non-canonical {text:?}"
        );
    }
    match api::wire::parse_device("gpu", text) {
        Ok(DeviceRef::Pci(addr)) => assert_eq!(addr.to_string(), text),
        Ok(DeviceRef::MdevParent(name)) => {
            assert_eq!(name.to_string(), text);
            assert!(!text.contains(':'), "a parent name with a colon: {text:?}");
        }
        Err(_) => {}
    }
    if let Ok(id) = api::wire::slices::slice_id(text) {
        assert_eq!(id.to_string(), text, "slice id {text:?} is not canonical");
    }
});
