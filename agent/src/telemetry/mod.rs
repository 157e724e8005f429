//! The telemetry cache behind `/metrics`: a poller reads every GPU on its own interval through
//! the time-bounded vendor calls, joins the readings with the engine's slices, allocations and
//! capacity, and swaps one immutable [`TelemetrySnapshot`] into the [`TelemetryCache`]. A scrape
//! renders the latest snapshot and never waits on the vendor library, sysfs or the engine.

mod cache;
mod idle;
mod poller;
mod snapshot;

pub use cache::TelemetryCache;
pub use poller::{Poller, PollerHandle, PollerSettings};
pub use snapshot::{GpuSnapshot, MigSnapshot, SliceSnapshot, TelemetrySnapshot};
