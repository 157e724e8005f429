//! Asking polkit whether a caller may change something.
//!
//! The subject is the caller's unique bus name (`system-bus-name`): polkitd asks the bus who is
//! behind it, so a caller cannot claim another identity. Anything but a clear "yes" is a "no":
//! polkit missing from the bus, an error reply, a malformed reply or no reply in time all deny
//! (fail closed).

use std::collections::HashMap;
use std::time::Duration;

use zbus::Connection;
use zbus::Variant;
use zbus::message::{Flags, Header};

use super::error::DbusError;

const POLKIT_NAME: &str = "org.freedesktop.PolicyKit1";
const POLKIT_PATH: &str = "/org/freedesktop/PolicyKit1/Authority";
const POLKIT_INTERFACE: &str = "org.freedesktop.PolicyKit1.Authority";
/// `CheckAuthorizationFlags.AllowUserInteraction`.
const ALLOW_USER_INTERACTION: u32 = 1;

/// What a mutating method asks polkit for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Create, destroy, allocate, release, reconcile.
    Manage,
    /// Replace the declared layouts.
    Layout,
    /// Read tenants' consumer and VM names (redacted otherwise: `redact.rs`).
    ReadTenants,
}

impl Action {
    /// The polkit action id (declared in `systemd/io.vgpud.policy`).
    pub fn id(self) -> &'static str {
        match self {
            Action::Manage => "io.vgpud.manage",
            Action::Layout => "io.vgpud.layout",
            Action::ReadTenants => "io.vgpud.read-tenants",
        }
    }
}

/// How long to wait for polkit.
#[derive(Debug, Clone, Copy)]
pub struct PolkitTimeouts {
    /// When the caller did not allow interactive authorization (polkit decides alone).
    pub plain: Duration,
    /// When it did (polkit may wait for a person to type a password).
    pub interactive: Duration,
}

impl Default for PolkitTimeouts {
    fn default() -> Self {
        Self {
            plain: Duration::from_secs(25),
            interactive: Duration::from_secs(120),
        }
    }
}

/// Polkit's answer (`(bba{ss})`).
type Reply = (bool, bool, HashMap<String, String>);

/// Succeeds only when polkit authorizes the sender of `header` for `action`.
pub async fn authorize(
    conn: &Connection,
    header: &Header<'_>,
    action: Action,
    timeouts: PolkitTimeouts,
) -> Result<(), DbusError> {
    let interactive = header
        .primary()
        .flags()
        .contains(Flags::ALLOW_INTERACTIVE_AUTH);
    check(conn, header, action, timeouts, interactive).await
}

/// As [`authorize`] but never prompting: for reads, which fall back to redacted names rather
/// than wait for a person to type a password.
pub async fn authorize_quietly(
    conn: &Connection,
    header: &Header<'_>,
    action: Action,
    timeouts: PolkitTimeouts,
) -> Result<(), DbusError> {
    check(conn, header, action, timeouts, false).await
}

async fn check(
    conn: &Connection,
    header: &Header<'_>,
    action: Action,
    timeouts: PolkitTimeouts,
    interactive: bool,
) -> Result<(), DbusError> {
    let Some(sender) = header.sender() else {
        return Err(DbusError::access_denied(
            "the call has no sender to ask polkit about",
        ));
    };
    let mut subject_details: HashMap<&str, Variant<'_>> = HashMap::new();
    subject_details.insert("name", Variant::from(sender.as_str()));
    let details: HashMap<&str, &str> = HashMap::new();
    let flags = if interactive {
        ALLOW_USER_INTERACTION
    } else {
        0
    };
    let body = (
        ("system-bus-name", subject_details),
        action.id(),
        details,
        flags,
        "",
    );
    let wait = if interactive {
        timeouts.interactive
    } else {
        timeouts.plain
    };
    let call = conn.call_method(
        Some(POLKIT_NAME),
        POLKIT_PATH,
        Some(POLKIT_INTERFACE),
        "CheckAuthorization",
        &body,
    );
    let reply = match tokio::time::timeout(wait, call).await {
        Err(_) => return Err(denied(action, "polkit did not answer in time")),
        Ok(Err(e)) => return Err(denied(action, &format!("polkit could not answer: {e}"))),
        Ok(Ok(reply)) => reply,
    };
    let (authorized, challenge, _details): Reply = reply
        .body()
        .deserialize()
        .map_err(|e| denied(action, &format!("polkit's answer was malformed: {e}")))?;
    tracing::debug!(
        sender = sender.as_str(),
        action = action.id(),
        authorized,
        challenge,
        "polkit decision"
    );
    match (authorized, challenge) {
        (true, _) => Ok(()),
        // Every refusal is AccessDenied, so scripts have one name to match; the message says
        // how to get the password prompt. (The D-Bus specification's
        // InteractiveAuthorizationRequired would also be allowed here.)
        (false, true) if !interactive => Err(denied(
            action,
            "authentication is required: call again allowing interactive authorization \
             (busctl does by default) with a polkit agent running",
        )),
        _ => Err(denied(action, "not authorized by polkit")),
    }
}

fn denied(action: Action, why: &str) -> DbusError {
    DbusError::access_denied(format!("{} refused: {why}", action.id()))
}
