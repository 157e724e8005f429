//! libvirt calls under a deadline. The libvirt client has no per-call timeout: a libvirtd that
//! accepts the connection and then never answers (hung on a stuck QEMU monitor, a full disk,
//! a deadlock) blocks the caller until its keepalive gives up, or forever where keepalive is
//! off. Each call therefore runs on a worker thread (kept between calls, `call_pool`), and the
//! caller waits at most the configured time and answers `libvirt_unavailable`.
//!
//! A worker whose caller gave up keeps running until libvirt answers. If its call changed a
//! domain after all, the change is undone there (the allocation it was for was refused), so a
//! late answer never leaves a VM pinned for an allocation that does not exist. The number of
//! workers still waiting on libvirt is capped: past the cap, calls are refused at once instead
//! of piling up threads behind a daemon that does not answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::call_pool::Pool;
use crate::engine::{EngineError, Result};

/// Workers at most waiting on libvirt at one time (each holds one thread).
pub(crate) const MAX_STUCK_CALLS: usize = 16;

/// Runs libvirt calls with a deadline each.
#[derive(Debug)]
pub(crate) struct Deadline {
    timeout: Duration,
    in_flight: Arc<AtomicUsize>,
    /// The worker threads, kept between calls (starting one for each of a placement score's
    /// two calls was about a tenth of its time).
    pool: Pool,
}

/// What the worker and the caller agree on when the answer comes late.
enum Handover {
    /// The caller is still waiting.
    Waiting,
    /// The caller gave up: a late success is undone by the worker.
    Abandoned,
    /// The worker delivered (over the channel).
    Delivered,
}

impl Deadline {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            in_flight: Arc::new(AtomicUsize::new(0)),
            pool: Pool::new("libvirt-call"),
        }
    }

    /// Runs `call` (named `what` in errors) with the deadline; a call that answers `Ok` after
    /// the deadline passes its value to `undo` on the worker thread.
    pub(crate) fn run<T, F, U>(&self, what: &str, call: F, undo: U) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T> + Send + 'static,
        U: FnOnce(T) + Send + 'static,
    {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_STUCK_CALLS {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(EngineError::LibvirtUnavailable(format!(
                "{what}: {MAX_STUCK_CALLS} earlier libvirt calls are still unanswered; \
                 libvirtd is not responding"
            )));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let handover = Arc::new(Mutex::new(Handover::Waiting));
        let (worker_handover, in_flight) = (handover.clone(), self.in_flight.clone());
        // Everything, a late answer's undo included, runs before the worker is idle again.
        let spawned = self.pool.spawn(
            move || {
                let result = call();
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let mut state = worker_handover
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match (&*state, result) {
                    (Handover::Abandoned, Ok(value)) => undo(value),
                    (Handover::Abandoned, Err(_)) => {}
                    (_, result) => {
                        *state = Handover::Delivered;
                        let _ = tx.send(result);
                    }
                }
            },
            |()| {},
        );
        if let Err(e) = spawned {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(EngineError::LibvirtUnavailable(format!(
                "{what}: no thread for the libvirt call: {e}"
            )));
        }
        match rx.recv_timeout(self.timeout) {
            Ok(result) => result,
            Err(_) => {
                let mut state = handover.lock().unwrap_or_else(PoisonError::into_inner);
                if let Handover::Delivered = *state {
                    // Answered between the timeout and the lock: the answer stands.
                    drop(state);
                    return rx.recv().unwrap_or_else(|_| Err(self.timed_out(what)));
                }
                *state = Handover::Abandoned;
                tracing::warn!(
                    call = what,
                    timeout_ms = self.timeout.as_millis() as u64,
                    "libvirt did not answer in time"
                );
                Err(self.timed_out(what))
            }
        }
    }

    fn timed_out(&self, what: &str) -> EngineError {
        EngineError::LibvirtUnavailable(format!(
            "{what}: libvirt did not answer within {} ms ([libvirt] call_timeout_ms)",
            self.timeout.as_millis()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    #[test]
    fn a_prompt_answer_is_returned() {
        let d = Deadline::new(Duration::from_secs(5));
        assert_eq!(d.run("quick", || Ok(7), |_| {}).unwrap(), 7);
        let refused = d.run::<(), _, _>(
            "refused",
            || Err(EngineError::NotFound("no VM".into())),
            |_| {},
        );
        assert!(matches!(refused, Err(EngineError::NotFound(_))));
    }

    #[test]
    fn a_hung_call_times_out_and_its_late_success_is_undone() {
        let d = Deadline::new(Duration::from_millis(100));
        let undone = Arc::new(AtomicBool::new(false));
        let seen = undone.clone();
        let (release, wait) = mpsc::channel::<()>();
        let started = Instant::now();
        let err = d
            .run(
                "applying",
                move || {
                    let _ = wait.recv();
                    Ok("pinned")
                },
                move |_| seen.store(true, Ordering::SeqCst),
            )
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            matches!(err, EngineError::LibvirtUnavailable(ref t) if t.contains("call_timeout_ms")),
            "{err:?}"
        );
        release.send(()).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while !undone.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(undone.load(Ordering::SeqCst), "the late success was undone");
    }

    #[test]
    fn past_the_cap_calls_are_refused_at_once() {
        let d = Deadline::new(Duration::from_millis(20));
        let (release, wait) = mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        for _ in 0..MAX_STUCK_CALLS {
            let wait = wait.clone();
            let _ = d.run(
                "stuck",
                move || {
                    let _ = wait.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    Ok(())
                },
                |_| {},
            );
        }
        let started = Instant::now();
        let err = d.run("one more", || Ok(()), |_| {}).unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(20));
        assert!(format!("{err}").contains("still unanswered"), "{err}");
        drop(release);
    }
}
