//! What the daemon's heap keeps from the system after a burst of work.
//!
//! glibc's malloc gives each thread that finds an arena busy a new one, up to eight per core
//! (mallopt(3), `M_ARENA_MAX`), and a freed chunk goes back to its arena, not to the system:
//! after a connection burst the blocking pool's threads leave megabytes in arenas nothing uses
//! again (BENCHMARKS.md §6, "RSS after 5,000 connections": 4.4 MiB stayed, 2.7 MiB with one
//! arena). So the daemon caps the arenas and, while idle, hands free pages back with
//! malloc_trim(3), which since glibc 2.8 releases free memory inside every arena, not only at
//! the top of the main heap.
//!
//! Other C libraries (musl) keep no per-thread arenas: there both steps are skipped.
//!
//! The crate's one place for allocator FFI (two glibc calls, each on plain integers).
#![allow(unsafe_code)]

use std::time::Duration;

use agent::metrics::process::resident_anonymous_bytes;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Arenas the daemon's threads share. Its work is a few requests at a time; the allocator's
/// lock is not what bounds it (the throughput benchmark's 64 clients, BENCHMARKS.md).
#[cfg(target_env = "gnu")]
const ARENAS: libc::c_int = 2;

/// How often the daemon's resident heap is looked at.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Growth of the resident anonymous memory since the last trim that is worth a trim: below
/// it there is little to give back, and a trim walks every free chunk.
const TRIM_ABOVE: u64 = 1 << 20;

/// Caps malloc's arenas, before the runtime starts its threads; an operator's
/// `MALLOC_ARENA_MAX` (read by glibc itself) wins.
pub(crate) fn limit_arenas() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no memory is touched.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, ARENAS) };
    }
}

/// Now and every `TRIM_EVERY`, gives free heap pages back to the system when the resident
/// memory grew since the last time, until the daemon stops.
pub(crate) fn start_trimming(stop: &watch::Receiver<bool>) -> JoinHandle<()> {
    let mut stop = stop.clone();
    tokio::spawn(async move {
        // The first look is at once: start-up (discovery, the first reconcile) leaves the
        // most behind.
        let mut trimmer = Trimmer::default();
        loop {
            // The trim locks each arena in turn: off the async workers.
            // A look that panicked starts over.
            trimmer = tokio::task::spawn_blocking(move || trimmer.look())
                .await
                .unwrap_or_default();
            tokio::select! {
                () = tokio::time::sleep(TRIM_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}

/// The resident anonymous memory after the last trim (or lower, seen since).
#[derive(Debug, Default, Clone, Copy)]
struct Trimmer {
    after_last: Option<u64>,
}

impl Trimmer {
    /// One look: trims when the anonymous memory grew by `TRIM_ABOVE` since the last trim
    /// (or at the first look).
    fn look(mut self) -> Self {
        let Some(now) = resident_anonymous_bytes() else {
            return self;
        };
        let grown = self.after_last.is_none_or(|last| now >= last + TRIM_ABOVE);
        self.after_last = Some(if grown {
            trim();
            resident_anonymous_bytes().unwrap_or(now)
        } else {
            self.after_last.map_or(now, |last| last.min(now))
        });
        self
    }
}

fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases the allocator's own free pages, under its locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed memory stuck inside the heap (a live block above it keeps the top from
    /// shrinking) comes back to the system at the next look, and a look with nothing new
    /// does not trim.
    #[cfg(target_env = "gnu")]
    #[test]
    fn a_look_after_a_burst_gives_the_freed_heap_back() {
        let trimmer = Trimmer::default().look();
        let settled = trimmer.after_last.expect("/proc/self/statm is readable");
        // 32 MiB in blocks under malloc's mmap threshold (128 KiB), so they come from the
        // heap, each page written so that it is resident.
        let mut blocks: Vec<Vec<u8>> = (0..1024).map(|_| vec![1u8; 32 << 10]).collect();
        let pin = vec![1u8; 32 << 10];
        blocks.clear();
        let before = resident_anonymous_bytes().unwrap();
        assert!(
            before >= settled + (16 << 20),
            "the freed blocks are still resident: {before} vs {settled}"
        );
        let trimmer = trimmer.look();
        let after = trimmer.after_last.unwrap();
        assert!(
            after + (16 << 20) <= before,
            "the look gave the freed pages back: {before} -> {after}"
        );
        assert!(trimmer.look().after_last.unwrap() <= after + TRIM_ABOVE);
        drop(pin);
    }
}
