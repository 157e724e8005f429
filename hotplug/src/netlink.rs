//! The real event source: a netlink monitor through libudev.
//!
//! Two netlink groups carry uevents (sd-device's monitor, systemd's src/libsystemd/sd-device/
//! device-monitor.c): `kernel`, where the kernel broadcasts each uevent as it happens, and
//! `udev`, where systemd-udevd re-broadcasts it once its rules have run (the device node and
//! the driver's setup are then in place). With systemd-udevd running vgpud listens on `udev`, so
//! it looks at a device after udev's rules; without it (a minimal system, the test rig's guest)
//! only `kernel` carries anything. systemd-udevd running is told by its control socket
//! `/run/udev/control`, the check systemd's own `udev_available()` makes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use crate::error::HotplugError;
use crate::parse::{SUBSYSTEMS, parse};
use crate::source::{EventSource, QUEUE, Subscription};

/// Which netlink group to listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// systemd-udevd's re-broadcast, after its rules.
    Udev,
    /// The kernel's own broadcast.
    Kernel,
}

impl Group {
    /// `udev` when systemd-udevd runs on this machine, else `kernel`.
    pub fn detect() -> Self {
        if Path::new("/run/udev/control").exists() {
            Group::Udev
        } else {
            Group::Kernel
        }
    }

    fn name(self) -> &'static str {
        match self {
            Group::Udev => "udev",
            Group::Kernel => "kernel",
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Group::Udev => f.write_str("netlink group \"udev\" (systemd-udevd runs)"),
            Group::Kernel => f.write_str("netlink group \"kernel\" (no systemd-udevd)"),
        }
    }
}

/// The netlink monitor for subsystems `pci` and `mdev`.
#[derive(Debug, Clone, Copy)]
pub struct NetlinkSource {
    group: Group,
}

impl NetlinkSource {
    /// A monitor on the group [`Group::detect`] picks.
    pub fn detect() -> Self {
        Self::on(Group::detect())
    }

    /// A monitor on a chosen group.
    pub fn on(group: Group) -> Self {
        Self { group }
    }

    fn open(&self) -> std::io::Result<tokio_udev::AsyncMonitorSocket> {
        let mut builder = match self.group {
            Group::Udev => udev::MonitorBuilder::new()?,
            Group::Kernel => udev::MonitorBuilder::new_kernel()?,
        };
        for subsystem in SUBSYSTEMS {
            builder = builder.match_subsystem(subsystem)?;
        }
        tokio_udev::AsyncMonitorSocket::new(builder.listen()?)
    }
}

/// A uevent's properties as text (the kernel's are ASCII; anything else is kept lossily and
/// then fails to parse as a name).
fn properties(event: &udev::Event) -> BTreeMap<String, String> {
    event
        .properties()
        .map(|p| {
            (
                p.name().to_string_lossy().into_owned(),
                p.value().to_string_lossy().into_owned(),
            )
        })
        .collect()
}

impl EventSource for NetlinkSource {
    fn subscribe(&self) -> Result<Subscription, HotplugError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| HotplugError::NoRuntime)?;
        let group = self.group.name();
        let mut socket = self
            .open()
            .map_err(|source| HotplugError::Monitor { group, source })?;
        let (tx, events) = mpsc::channel(QUEUE);
        runtime.spawn(async move {
            while let Some(received) = socket.next().await {
                let event = match received {
                    Ok(e) => e,
                    // ENOBUFS: the socket's buffer overflowed and events were lost. The next
                    // event (or the periodic reconcile) re-reads the host anyway.
                    Err(e) => {
                        tracing::warn!("netlink monitor ({group}): {e}; events may have been lost");
                        continue;
                    }
                };
                match parse(&properties(&event)) {
                    Ok(e) => {
                        if tx.is_closed() {
                            return;
                        }
                        if tx.try_send(e).is_err() {
                            tracing::debug!("device event queue full: event dropped");
                        }
                    }
                    Err(why) => tracing::debug!("uevent ignored: {why}"),
                }
            }
        });
        Ok(Subscription {
            origin: self.group.to_string(),
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_the_monitor_refuses_with_why() {
        let e = NetlinkSource::on(Group::Kernel).subscribe().unwrap_err();
        assert!(matches!(e, HotplugError::NoRuntime), "{e:?}");
    }

    #[test]
    fn the_group_says_which_in_the_log() {
        assert_eq!(
            Group::Kernel.to_string(),
            "netlink group \"kernel\" (no systemd-udevd)"
        );
        assert_eq!(
            Group::detect() == Group::Udev,
            Path::new("/run/udev/control").exists()
        );
    }
}
