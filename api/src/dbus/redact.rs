//! Tenants' names (consumers, VMs) are not for every local user: the system bus lets anyone
//! read vgpud's objects. The JSON methods show them only to callers authorised for
//! `io.vgpud.read-tenants` (root without asking); everyone else reads [`REDACTED`]. Object
//! properties and signals go to everyone alike (a property read has no per-caller answer a
//! `PropertiesChanged` signal could match), so they always carry [`REDACTED`] for a held slice.

use zbus::Connection;
use zbus::message::Header;

use super::polkit::{self, Action, PolkitTimeouts};
use crate::wire::slices::{Allocation, Slice};

/// What a redacted consumer or VM name reads as (a held slice; a free one reads `""`).
pub const REDACTED: &str = "(redacted)";

/// Whether the caller may read tenants' names: root (uid 0, asked of the bus, which cannot be
/// lied to) always; anyone else when polkit authorises `io.vgpud.read-tenants` without a
/// password prompt (a read is answered redacted rather than held for one).
pub(crate) async fn may_read_tenants(
    conn: &Connection,
    header: &Header<'_>,
    timeouts: PolkitTimeouts,
    root_asks_polkit: bool,
) -> bool {
    if !root_asks_polkit && caller_uid(conn, header).await == Some(0) {
        return true;
    }
    polkit::authorize_quietly(conn, header, Action::ReadTenants, timeouts)
        .await
        .is_ok()
}

async fn caller_uid(conn: &Connection, header: &Header<'_>) -> Option<u32> {
    let sender = header.sender()?;
    let dbus = zbus::fdo::DBusProxy::new(conn).await.ok()?;
    let name = zbus::names::BusName::Unique(sender.to_owned());
    dbus.get_connection_unix_user(name).await.ok()
}

/// A name as a public property or signal shows it.
pub(crate) fn public(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        REDACTED.to_owned()
    }
}

/// An allocation without its tenant's names.
pub(crate) fn allocation(a: &mut Allocation) {
    a.consumer = REDACTED.to_owned();
    if a.vm.is_some() {
        a.vm = Some(REDACTED.to_owned());
    }
    if let Some(p) = a.pinning.as_mut() {
        p.domain = REDACTED.to_owned();
    }
}

/// A slice without its holder's names.
pub(crate) fn slice(s: &mut Slice) {
    for name in [&mut s.consumer, &mut s.vm].into_iter().flatten() {
        *name = REDACTED.to_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_slice_stays_empty_and_a_held_one_is_redacted() {
        assert_eq!(public(""), "");
        assert_eq!(public("nova"), REDACTED);
    }
}
