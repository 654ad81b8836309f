//! Waiting on lease changes: the lease of one partition, and the stream of every change, the
//! same events the callbacks hear.

use tokio::sync::{broadcast, watch};

use super::{LeaseGuard, Loss, Participant, Shared};
use crate::types::PartitionId;

/// Events kept for a subscriber that has not read them yet; beyond it the oldest are
/// dropped for that subscriber, and it is told how many (see [`LeaseEvents::next`]).
pub(super) const EVENT_CAPACITY: usize = 4096;

/// A change to one of this node's leases, as [`crate::Callbacks`] hear it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// This node now holds the lease: start serving the partition.
    Acquired(LeaseGuard),
    /// This node is giving the lease up: start no new work on the partition. `Lost` follows
    /// once the permits already taken are dropped.
    HandingOff(LeaseGuard),
    /// This node no longer holds the lease.
    Lost(Loss),
}

impl LeaseEvent {
    /// The partition the event is about.
    pub fn partition(&self) -> PartitionId {
        match self {
            LeaseEvent::Acquired(lease) | LeaseEvent::HandingOff(lease) => lease.partition(),
            LeaseEvent::Lost(loss) => loss.partition,
        }
    }
}

/// Events this subscriber missed because it fell more than 4,096 events behind: the
/// leases it believes held may be out of date, so read them again ([`Participant::leases`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("missed {0} lease events")]
pub struct Missed(pub u64);

/// The lease events of one participant, from the moment of [`Participant::events`] on.
#[derive(Debug)]
pub struct LeaseEvents {
    events: broadcast::Receiver<LeaseEvent>,
    stopped: watch::Receiver<bool>,
}

impl LeaseEvents {
    /// The next event, in the order the node made the changes; `Err` when this subscriber
    /// fell behind and some were dropped; `None` once the participant has stopped and every
    /// event before that was read.
    pub async fn next(&mut self) -> Option<Result<LeaseEvent, Missed>> {
        loop {
            match self.events.try_recv() {
                Ok(event) => return Some(Ok(event)),
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    return Some(Err(Missed(missed)))
                }
                // The sender lives as long as any handle: `Closed` cannot come before the
                // participant stopped.
                Err(broadcast::error::TryRecvError::Closed) => return None,
                Err(broadcast::error::TryRecvError::Empty) => {}
            }
            if *self.stopped.borrow_and_update() {
                return None;
            }
            tokio::select! {
                received = self.events.recv() => match received {
                    Ok(event) => return Some(Ok(event)),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        return Some(Err(Missed(missed)))
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                // Round again: events sent before the task stopped are read first.
                _ = self.stopped.changed() => {}
            }
        }
    }
}

impl Shared {
    /// Sends the event `make` builds to every subscriber, building it only if there is one.
    pub(super) fn announce(&self, make: impl FnOnce() -> LeaseEvent) {
        let Some(events) = self.events.get() else {
            return;
        };
        if events.receiver_count() > 0 {
            // Refused only when the last subscriber left since the count: nobody to tell.
            let _ = events.send(make());
        }
    }
}

impl Participant {
    /// Waits until this node holds `partition` and serves it, and returns its lease: at
    /// once if it does already. `None` once the participant has stopped, or for a partition
    /// beyond the group's count. Bound it with a timeout where the partition may be held
    /// elsewhere for long.
    ///
    /// With one partition, this is leader election: the node that holds partition 0 leads,
    /// for as long as [`LeaseGuard::lost`] has not resolved.
    pub async fn acquired(&self, partition: PartitionId) -> Option<LeaseGuard> {
        if partition.0 >= self.inner.partitions {
            return None;
        }
        let shared = &self.inner.shared;
        let mut stopped = shared.stopped.subscribe();
        loop {
            // Registered before the lease is looked up, so that a take in between wakes it.
            let taken = shared.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            if let Some(lease) = self.lease(partition) {
                return Some(lease);
            }
            if *stopped.borrow_and_update() {
                return None;
            }
            tokio::select! {
                _ = taken => {}
                _ = stopped.changed() => {}
            }
        }
    }

    /// Every change to this node's leases from now on: acquired, being handed off, lost.
    /// Each subscriber gets every event, up to 4,096 unread ones.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use leasehold::{admin, LeaseEvent, MemoryStore, NodeId, Participant, ParticipantConfig};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 2);
    /// admin::init(&*store, &config.group, 2).await.unwrap();
    /// let participant = Participant::start(store, config, ()).unwrap();
    /// let mut events = participant.events();
    /// let mut held = 0;
    /// while held < 2 {
    ///     if let Some(Ok(LeaseEvent::Acquired(lease))) = events.next().await {
    ///         println!("serving partition {} under epoch {}", lease.partition(), lease.epoch());
    ///         held += 1;
    ///     }
    /// }
    /// participant.shutdown().await;
    /// // The shutdown's releases, then the end of the stream.
    /// let mut lost = 0;
    /// while let Some(event) = events.next().await {
    ///     if let Ok(LeaseEvent::Lost(_)) = event {
    ///         lost += 1;
    ///     }
    /// }
    /// assert_eq!(lost, 2);
    /// # });
    /// ```
    pub fn events(&self) -> LeaseEvents {
        let shared = &self.inner.shared;
        let events = shared
            .events
            .get_or_init(|| broadcast::Sender::new(EVENT_CAPACITY));
        LeaseEvents {
            events: events.subscribe(),
            stopped: shared.stopped.subscribe(),
        }
    }
}
