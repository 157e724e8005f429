//! D-Bus argument parsing (`api::dbus::args`): positional arguments and an `a{sv}` of options
//! built from the fuzz input (strings, integers, booleans under known and unknown keys), and
//! the JSON documents `ApplyLayouts` and `ImportLayouts` take.
//!
//! Checks: nothing panics; every refusal carries one of vgpud's D-Bus error names; and
//! `ApplyLayouts` accepts a layouts array exactly when `PUT /v1/layouts` accepts the body
//! `{"layouts": <the same array>}` (both front ends accept and refuse the same requests).
#![no_main]

use std::collections::HashMap;

use api::dbus::{DbusError, ERROR_PREFIX, args};
use api::wire::layouts::LayoutsRequest;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zbus::{OwnedVariant, Str};

const KEYS: &[&str] = &[
    "start",
    "consumer",
    "vm",
    "gpu",
    "idempotency_key",
    "numa_policy",
    "vcpus",
    "memory_mib",
];

const BACKENDS: &[&str] = &["mdev", "nvidia-vfio", "sriov-vf", "mig", "passthrough"];

#[derive(Arbitrary, Debug)]
enum Arg {
    Str(String),
    U32(u32),
    U64(u64),
    I32(i32),
    Bool(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    method: u8,
    gpu: String,
    backend: (u8, Option<String>),
    text: String,
    count: u32,
    options: Vec<(u8, Option<String>, Arg)>,
}

fn options(input: &Input) -> HashMap<String, OwnedVariant> {
    input
        .options
        .iter()
        .map(|(k, name, arg)| {
            let key = name
                .clone()
                .unwrap_or_else(|| KEYS[usize::from(*k) % KEYS.len()].to_owned());
            let value = match arg {
                Arg::Str(s) => OwnedVariant::from(Str::from(s.clone())),
                Arg::U32(n) => OwnedVariant::from(*n),
                Arg::U64(n) => OwnedVariant::from(*n),
                Arg::I32(n) => OwnedVariant::from(*n),
                Arg::Bool(b) => OwnedVariant::from(*b),
            };
            (key, value)
        })
        .collect()
}

fn refused_properly<T>(result: Result<T, DbusError>) {
    if let Err(e) = result {
        assert!(
            e.error_name().starts_with(ERROR_PREFIX),
            "{} is not one of vgpud's errors",
            e.error_name()
        );
    }
}

fuzz_target!(|input: Input| {
    let backend = match &input.backend {
        (_, Some(name)) => name.as_str(),
        (i, None) => BACKENDS[usize::from(*i) % BACKENDS.len()],
    };
    match input.method % 4 {
        0 => refused_properly(args::create_request(
            &input.gpu,
            backend,
            &input.text,
            options(&input),
        )),
        1 => refused_properly(args::allocation_request(
            input.gpu.clone(),
            input.text.clone(),
            input.count,
            options(&input),
        )),
        2 => {
            let dbus = args::layouts(&input.text);
            // Only a document that is one JSON value can be put inside a REST body as is.
            if serde_json::from_str::<serde_json::Value>(&input.text).is_ok() {
                let body = format!("{{\"layouts\":{}}}", input.text);
                let rest = serde_json::from_str::<LayoutsRequest>(&body)
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.to_engine().map_err(|e| e.to_string()));
                assert_eq!(
                    dbus.as_ref().map_err(|_| ()),
                    rest.as_ref().map_err(|_| ()),
                    "D-Bus and REST disagree on {:?}",
                    input.text
                );
            }
            refused_properly(dbus);
        }
        _ => {
            if let Ok(req) = args::import_request(&input.text) {
                let _ = req.to_engine();
            }
            refused_properly(args::slice_id(&input.gpu));
            refused_properly(args::allocation_id(&input.gpu));
        }
    }
});
