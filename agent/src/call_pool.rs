//! Helper threads for calls a caller must be able to stop waiting for, kept between calls.
//!
//! Every NVML and AMD SMI call (`engine::vendor`) and every libvirt call (`pinning::deadline`)
//! runs on a helper thread so that its caller can stop waiting. Starting a thread per call cost
//! more than the calls themselves: a discovery of an 8-GPU host makes a few hundred vendor
//! calls, and a placement score two libvirt calls. So a worker that finished its call waits for the
//! next one; a call that finds no idle worker starts a new one (a worker still inside an
//! abandoned, hung call is never handed work), and a worker idle for [`IDLE_EXIT`] exits, so
//! an idle daemon keeps none. A worker leaves only while it is listed idle, under the list's
//! lock: a caller that took it from the list always reaches it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long a worker waits for another call before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(10);
/// At most this many workers wait idle; one finishing its call beyond that exits (a burst of
/// concurrent calls does not leave its threads behind).
const MAX_IDLE: usize = 8;

/// A call, which returns how to deliver its answer.
type Job = Box<dyn FnOnce() -> Deliver + Send + 'static>;
type Deliver = Box<dyn FnOnce() + Send + 'static>;

/// An idle worker: its number and the sender of its own job channel.
type Idle = Vec<(u64, Sender<Job>)>;

/// Idle workers.
#[derive(Debug)]
pub(crate) struct Pool {
    /// The workers' thread name (`ps -L`, `perf`).
    name: &'static str,
    idle: Arc<Mutex<Idle>>,
    started: AtomicU64,
}

impl Pool {
    /// A pool with no worker yet, whose threads are named `name`.
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            idle: Arc::default(),
            started: AtomicU64::new(0),
        }
    }

    /// Runs `call` on an idle worker, or on a new one, then `deliver` with its answer; an error
    /// when no thread could start. The worker is back in the pool before `deliver` runs, so a
    /// caller that makes its next call as soon as it has the answer finds it idle.
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
        deliver: impl FnOnce(T) + Send + 'static,
    ) -> std::io::Result<()> {
        let mut job: Job = Box::new(move || {
            let out = call();
            Box::new(move || deliver(out))
        });
        while let Some(worker) = self.pop_idle() {
            match worker.send(job) {
                Ok(()) => return Ok(()),
                // A worker that panicked in a call is gone: try the next.
                Err(mpsc::SendError(back)) => job = back,
            }
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let idle = self.idle.clone();
        let me = self.started.fetch_add(1, Ordering::Relaxed);
        tx.send(job)
            .map_err(|_| std::io::Error::other("worker channel closed"))?;
        std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || work(me, &rx, &tx, &idle))?;
        Ok(())
    }

    fn pop_idle(&self) -> Option<Sender<Job>> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .map(|(_, tx)| tx)
    }
}

/// A worker: runs its jobs, offering itself back to the pool between them.
fn work(me: u64, rx: &Receiver<Job>, tx: &Sender<Job>, idle: &Mutex<Idle>) {
    loop {
        let deliver = match rx.recv_timeout(IDLE_EXIT) {
            Ok(job) => job(),
            // Still listed: nobody holds this worker's sender, it may go. Not listed: a caller
            // took it and its job is on the way.
            Err(RecvTimeoutError::Timeout) if leave(idle, me) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let stay = {
            let mut list = idle.lock().unwrap_or_else(PoisonError::into_inner);
            let stay = list.len() < MAX_IDLE;
            if stay {
                list.push((me, tx.clone()));
            }
            stay
        };
        deliver();
        if !stay {
            return;
        }
    }
}

/// Takes an idle worker out of the list; false when a caller took it first.
fn leave(idle: &Mutex<Idle>, me: u64) -> bool {
    let mut list = idle.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(at) = list.iter().position(|(n, _)| *n == me) else {
        return false;
    };
    list.swap_remove(at);
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn worker_of(pool: &Pool) -> std::thread::ThreadId {
        let (tx, rx) = mpsc::channel();
        pool.spawn(
            || std::thread::current().id(),
            move |id| tx.send(id).unwrap(),
        )
        .unwrap();
        rx.recv().unwrap()
    }

    #[test]
    fn a_finished_worker_takes_the_next_call() {
        let pool = Pool::new("test-pool");
        let first = worker_of(&pool);
        // Back in the pool before the answer came: the next call at once finds it.
        assert_eq!(worker_of(&pool), first);
        assert_eq!(worker_of(&pool), first);
    }

    #[test]
    fn a_busy_worker_is_not_handed_a_second_call() {
        let pool = Pool::new("test-pool");
        let (release, hold) = mpsc::channel::<()>();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        pool.spawn(
            move || {
                hold.recv().unwrap();
                d.fetch_add(1, Ordering::SeqCst);
            },
            |()| {},
        )
        .unwrap();
        // The first worker is blocked (a hung call): this call must still run.
        let (tx, rx) = mpsc::channel();
        pool.spawn(|| (), move |()| tx.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 0);
        release.send(()).unwrap();
    }
}
