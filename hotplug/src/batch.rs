//! Coalescing a burst of events into one batch.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::event::DeviceEvent;

/// Waits for the next event, then collects those that follow until `quiet` passes without one
/// or `longest` has passed since the first (a steady stream still gets handled). `None` once the
/// source has stopped and nothing is left.
///
/// Why a quiet period: enabling N VFs makes the kernel emit `add` and `bind` for each VF, a
/// removal emits `unbind` and `remove` for the PF and each VF; one look at the host after the
/// burst sees all of it.
pub async fn next_batch(
    events: &mut mpsc::Receiver<DeviceEvent>,
    quiet: Duration,
    longest: Duration,
) -> Option<Vec<DeviceEvent>> {
    let first = events.recv().await?;
    let deadline = Instant::now() + longest;
    let mut batch = vec![first];
    loop {
        let until = (Instant::now() + quiet).min(deadline);
        match tokio::time::timeout_at(until, events.recv()).await {
            Ok(Some(e)) => batch.push(e),
            // Stopped: hand over what came.
            Ok(None) | Err(_) => return Some(batch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Action, Device};

    fn event(n: u64) -> DeviceEvent {
        DeviceEvent {
            action: Action::Added,
            device: Device::Pci("0000:47:00.0".parse().unwrap()),
            seqnum: Some(n),
        }
    }

    const QUIET: Duration = Duration::from_millis(250);
    const LONGEST: Duration = Duration::from_secs(2);

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_one_batch_and_a_later_event_the_next() {
        let (tx, mut rx) = mpsc::channel(16);
        let sender = tokio::spawn(async move {
            for n in 0..5 {
                tx.send(event(n)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            tx.send(event(9)).await.unwrap();
        });
        let first = next_batch(&mut rx, QUIET, LONGEST).await.unwrap();
        assert_eq!(
            first.iter().map(|e| e.seqnum.unwrap()).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        let second = next_batch(&mut rx, QUIET, LONGEST).await.unwrap();
        assert_eq!(second.len(), 1);
        sender.await.unwrap();
        assert!(next_batch(&mut rx, QUIET, LONGEST).await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_is_cut_at_the_longest_wait() {
        let (tx, mut rx) = mpsc::channel(64);
        tokio::spawn(async move {
            for n in 0..40 {
                if tx.send(event(n)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let start = Instant::now();
        let batch = next_batch(&mut rx, QUIET, LONGEST).await.unwrap();
        assert!(start.elapsed() <= LONGEST + Duration::from_millis(1));
        assert!(batch.len() >= 20 && batch.len() <= 21, "{}", batch.len());
    }
}
