//! libvirt's NUMA cells of the host, kept for a while.
//!
//! Every placement score and every VM allocation plans against the host's cells (their CPUs and
//! memory), which libvirt answers from its capabilities: a call that renders the whole
//! capabilities document (CPU model, cache banks, security models, guest types) for us to parse
//! a few elements out of it. The cells change only when CPUs or memory are hot-plugged or
//! libvirtd restarts on changed hardware, so one reading is kept for [`KEEP_CELLS_FOR`]; what
//! the domains hold of them (their pins) is read fresh every time.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use vmpin::HostTopology;

/// How long one reading of the cells is used. A hot-plugged CPU is offered to VMs at most this
/// long after libvirt reports it; a removed one could be planned on for as long, and libvirt
/// then refuses the domain change, so the allocation fails and nothing is pinned.
pub(super) const KEEP_CELLS_FOR: Duration = Duration::from_secs(30);

/// The last reading of the host's cells (`None` inside: libvirt reports none).
#[derive(Debug, Default)]
pub(super) struct KeptCells {
    last: Mutex<Option<(Instant, Option<HostTopology>)>>,
}

impl KeptCells {
    /// The kept cells while they are young enough, else `read`'s answer, kept when it is one.
    /// The lock is not held over `read` (a libvirt call, up to its timeout).
    pub(super) fn get_or_read<E>(
        &self,
        read: impl FnOnce() -> Result<Option<HostTopology>, E>,
    ) -> Result<Option<HostTopology>, E> {
        if let Some((at, cells)) = self.lock().as_ref()
            && at.elapsed() < KEEP_CELLS_FOR
        {
            return Ok(cells.clone());
        }
        let cells = read()?;
        *self.lock() = Some((Instant::now(), cells.clone()));
        Ok(cells)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Option<HostTopology>)>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use vmpin::HostNode;

    fn one_node(cpus: &str) -> HostTopology {
        HostTopology {
            nodes: vec![HostNode {
                id: ids::NumaNodeId(0),
                cpus: cpus.parse().unwrap(),
                memory_mib: 1024,
            }],
            reserved_cpus: numa::CpuSet::default(),
        }
    }

    #[test]
    fn a_reading_is_used_again_and_a_failed_one_is_not_kept() {
        let kept = KeptCells::default();
        let failed: Result<_, &str> = kept.get_or_read(|| Err("libvirt is down"));
        assert_eq!(failed, Err("libvirt is down"));
        let first = kept.get_or_read(|| Ok::<_, ()>(Some(one_node("0-3"))));
        assert_eq!(first, Ok(Some(one_node("0-3"))));
        let again = kept.get_or_read(|| Ok::<_, ()>(Some(one_node("0-7"))));
        assert_eq!(again, first, "the kept reading, not a new call");
    }

    #[test]
    fn an_old_reading_is_read_again() {
        let kept = KeptCells::default();
        let old = Instant::now().checked_sub(KEEP_CELLS_FOR + Duration::from_secs(1));
        *kept.lock() = Some((old.unwrap(), Some(one_node("0-3"))));
        let now = kept.get_or_read(|| Ok::<_, ()>(Some(one_node("0-7"))));
        assert_eq!(now, Ok(Some(one_node("0-7"))));
    }
}
