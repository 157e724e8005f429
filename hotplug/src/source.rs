//! Where events come from: the trait every host's event source implements.

use std::fmt;

use tokio::sync::mpsc;

use crate::error::HotplugError;
use crate::event::DeviceEvent;

/// How many parsed events may wait for the consumer. A burst beyond it loses events, which is
/// harmless: the consumer re-reads the host after any event (see the crate documentation).
pub const QUEUE: usize = 4096;

/// A running subscription: events arrive on `events` until the source stops (the channel
/// closes) or the subscription is dropped (the source's task ends at its next event).
#[derive(Debug)]
pub struct Subscription {
    /// Where the events come from, for the log (`netlink group "kernel" (no systemd-udevd)`).
    pub origin: String,
    /// The events.
    pub events: mpsc::Receiver<DeviceEvent>,
}

/// A host's device events.
pub trait EventSource: Send + Sync + fmt::Debug {
    /// Starts delivering events. Call it inside a Tokio runtime: the source's task runs there.
    fn subscribe(&self) -> Result<Subscription, HotplugError>;
}

/// The event source of a host that has none (a sysfs tree under another root: no kernel
/// announces its changes). Its subscription never delivers anything.
#[derive(Debug, Clone)]
pub struct Quiet {
    why: String,
}

impl Quiet {
    /// A quiet source, with why it is quiet.
    pub fn new(why: impl Into<String>) -> Self {
        Self { why: why.into() }
    }
}

impl EventSource for Quiet {
    fn subscribe(&self) -> Result<Subscription, HotplugError> {
        let (tx, events) = mpsc::channel(1);
        // Keeping the sender alive keeps the channel open: quiet is not "stopped".
        std::mem::forget(tx);
        Ok(Subscription {
            origin: format!("none ({})", self.why),
            events,
        })
    }
}
