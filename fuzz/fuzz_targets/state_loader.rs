//! The state loader: `vgpud-state.json` from arbitrary bytes, opened by the engine as the
//! daemon opens it (`store` checks the header and checksum, the engine decodes the records),
//! then the views every front end reads (slices, allocations, layouts).
//!
//! Input: the first byte picks the form. `0`: the rest is the whole file; else the rest is the
//! body, under a header with the right format, version, length and SHA-256 (so the fuzzer
//! reaches the records instead of the checksum).
//!
//! Checks: loading refuses or loads and never panics; a refused file is left as it was.
#![no_main]

use agent::engine::{Engine, EngineConfig};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use vgpud_fuzz::host;

/// The engine's store schema (`agent::engine::state`): the file is `vgpud-state.json`.
const SCHEMA: store::Schema = store::Schema {
    name: "vgpud-state",
    version: 1,
};

/// `body` under the header `store::encode` would write for it.
fn frame(body: &[u8]) -> Vec<u8> {
    let sha256: String = Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let header = store::Header {
        format: SCHEMA.name.to_owned(),
        version: SCHEMA.version,
        length: body.len() as u64,
        sha256,
    };
    let mut file = serde_json::to_vec(&header).expect("a header encodes");
    file.push(b'\n');
    file.extend_from_slice(body);
    file
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = if mode == 0 {
        rest.to_vec()
    } else {
        frame(rest)
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("vgpud-state.json");
    std::fs::write(&path, &file).expect("the state file");
    let host = host::shared("vdi-mixed");
    let opened = Engine::open(EngineConfig::new(
        dir.path(),
        hostwire::sim_access(&host.sim),
    ));
    match opened {
        Ok(engine) => {
            let _ = engine.slices();
            let _ = engine.allocations();
            let _ = engine.layouts();
            let _ = engine.pending_intents();
        }
        Err(_) => {
            let after = std::fs::read(&path).expect("the state file is still there");
            assert_eq!(after, file, "a refused state file was changed");
        }
    }
});
