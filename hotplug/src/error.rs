//! What can go wrong starting an event source.

/// An event source could not be started.
#[derive(Debug, thiserror::Error)]
pub enum HotplugError {
    /// The netlink monitor could not be opened (no permission, no netlink in this namespace).
    #[error("cannot open the {group} netlink monitor")]
    Monitor {
        /// Which netlink group (`udev` or `kernel`).
        group: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread that watches for events could not be started.
    #[error("cannot start the device event watcher")]
    Watcher(#[source] std::io::Error),
    /// The source must run inside a Tokio runtime.
    #[error("the event source must be started inside a Tokio runtime")]
    NoRuntime,
}
