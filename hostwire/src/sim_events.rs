//! A simulated host's device events: the uevents its model records (`sim`'s `uevent` module),
//! read as a netlink monitor would receive them and parsed by the same parser.
//!
//! The simulator has no netlink socket, and the model may be changed by another process (`vgpud
//! sim remove-gpu`) through the shared state directory, so a watcher thread asks the model for
//! uevents past the last sequence number it saw. Asking is one `stat` of the state file while
//! nothing changed.

use std::time::Duration;

use hotplug::{EventSource, HotplugError, QUEUE, Subscription};
use sim::SimHost;
use tokio::sync::mpsc;

/// How often the watcher looks: under half the daemon's 250 ms quiet period, so a burst still
/// arrives as one batch (every 50 ms, the looks were a fifth of an idle daemon's CPU).
const POLL: Duration = Duration::from_millis(100);

/// The event source of a simulated host.
#[derive(Debug, Clone)]
pub(crate) struct SimEvents {
    host: SimHost,
}

impl SimEvents {
    pub(crate) fn new(host: SimHost) -> Self {
        Self { host }
    }
}

impl EventSource for SimEvents {
    fn subscribe(&self) -> Result<Subscription, HotplugError> {
        // From now on, as a monitor socket opened now: earlier uevents are not replayed.
        let mut seen = self.host.uevent_seqnum().unwrap_or(0);
        let (tx, events) = mpsc::channel(QUEUE);
        let host = self.host.clone();
        std::thread::Builder::new()
            .name("sim-uevents".into())
            .spawn(move || {
                while !tx.is_closed() {
                    std::thread::sleep(POLL);
                    let uevents = match host.uevents_since(seen) {
                        Ok(u) => u,
                        Err(e) => {
                            tracing::debug!("simulated uevents not readable now: {e}");
                            continue;
                        }
                    };
                    for u in uevents {
                        seen = seen.max(u.seqnum);
                        match hotplug::parse(&u.properties) {
                            Ok(e) => {
                                if tx.try_send(e).is_err() {
                                    tracing::debug!("device event queue full: event dropped");
                                }
                            }
                            Err(why) => tracing::debug!("uevent ignored: {why}"),
                        }
                    }
                }
            })
            .map_err(HotplugError::Watcher)?;
        Ok(Subscription {
            origin: format!(
                "the simulated kernel's uevents (polled every {} ms)",
                POLL.as_millis()
            ),
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hotplug::{Action, Device};

    #[tokio::test]
    async fn a_removal_by_another_handle_arrives_as_parsed_events() {
        let dir = tempfile::tempdir().unwrap();
        let profile = sim::Profile::builtin("dgx-a100").unwrap();
        let daemon_side = SimHost::create(dir.path(), profile).unwrap();
        let mut sub = SimEvents::new(daemon_side).subscribe().unwrap();
        let gpu: ids::PciAddress = "0000:47:00.0".parse().unwrap();
        // As `vgpud sim remove-gpu` would: another handle on the same directory.
        SimHost::open(dir.path()).unwrap().remove_gpu(gpu).unwrap();
        let batch = hotplug::next_batch(
            &mut sub.events,
            Duration::from_millis(250),
            Duration::from_secs(5),
        );
        let batch = tokio::time::timeout(Duration::from_secs(10), batch)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            batch.last().map(|e| (&e.action, &e.device)),
            Some((&Action::Removed, &Device::Pci(gpu))),
            "{batch:?}"
        );
    }
}
