//! REST body decoding: every request body type of `api::wire` from arbitrary bytes, as the
//! routes decode it (serde_json), then its validation into the engine's request.
//!
//! Checks: nothing panics; a body that decodes serialises back to JSON that decodes to the
//! same value, and that value validates exactly as the original did (the wire types lose
//! nothing a check depends on).
#![no_main]

use std::fmt::Debug;

use api::wire::IdempotencyKey;
use api::wire::import::ImportRequest;
use api::wire::layouts::LayoutsRequest;
use api::wire::slices::{AllocationRequest, CreateSliceRequest, SliceRequest};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decodes `body` as `T`; if it decodes, checks the round trip and that `check` answers the
/// same on the original and on the copy.
fn body<T, R: Debug>(body: &[u8], check: impl Fn(&T) -> R)
where
    T: DeserializeOwned + Serialize + PartialEq + Debug,
{
    let Ok(value) = serde_json::from_slice::<T>(body) else {
        return;
    };
    let first = format!("{:?}", check(&value));
    let text = serde_json::to_string(&value).expect("a decoded body serialises");
    let again: T =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text} does not decode again: {e}"));
    assert_eq!(value, again, "round trip through {text}");
    assert_eq!(
        first,
        format!("{:?}", check(&again)),
        "validation of {text}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => body(rest, CreateSliceRequest::to_engine),
        1 => body(rest, |r: &AllocationRequest| r.to_engine(None)),
        2 => body(rest, |r: &SliceRequest| r.to_engine("", None)),
        3 => body(rest, LayoutsRequest::to_engine),
        4 => body(rest, ImportRequest::to_engine),
        _ => {
            // The `Idempotency-Key` header as the allocation route reads it, then the request.
            let (key, req) = rest.split_at(rest.iter().position(|b| *b == b'\n').unwrap_or(0));
            let key = String::from_utf8_lossy(key);
            if let Ok(k) = IdempotencyKey::parse("Idempotency-Key", &key) {
                assert_eq!(k.clone().into_inner(), key, "a key is kept as sent");
                body(req, |r: &AllocationRequest| r.to_engine(Some(k.clone())));
            }
        }
    }
});
