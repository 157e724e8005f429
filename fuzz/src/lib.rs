//! Helpers the fuzz targets share: an in-memory sysfs whose every file the fuzzer writes
//! ([`fs::FuzzFs`]), and the simulated service built once per process ([`host::Host`]).
//!
//! The targets themselves are in `fuzz_targets/`; each calls the product's own entry points.

pub mod fs;
pub mod host;
