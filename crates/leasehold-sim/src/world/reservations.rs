//! Follows the store's lease writes for the reservation check: a record written reserved
//! for a node restarting in place, and what is written over it next.

use std::sync::Arc;

use leasehold::{Change, LeaseState, LeaseStore, PartitionId};
use tokio::time::Instant;

use super::World;
use crate::invariants::Invariant;

impl World {
    /// Reads the store's change notices until the run ends, checking each lease write that
    /// may make or end a reservation.
    pub(crate) async fn follow_reservations(self: Arc<World>) {
        let Ok(mut feed) = self.store.watch(&self.group).await else {
            return;
        };
        while let Some(change) = feed.next().await {
            match change {
                // A renewal or a take: it matters only where a reservation stands.
                Change::LeaseWritten {
                    partition,
                    state: LeaseState::Held,
                } => {
                    if self.lock().reservations.contains(partition) {
                        self.lease_written(partition).await;
                    }
                }
                Change::LeaseWritten { partition, .. } | Change::Lease(partition) => {
                    self.lease_written(partition).await;
                }
                Change::Unknown => {
                    let reserved = self.lock().reservations.partitions();
                    for partition in reserved {
                        self.lease_written(partition).await;
                    }
                }
                Change::Member(_) | Change::MemberUpdated(_) => {}
            }
        }
    }

    /// Checks the record of `partition` as it stands now against the reservations.
    async fn lease_written(&self, partition: PartitionId) {
        // A record that cannot be decoded is no reservation, nor a take.
        let stored = self
            .store
            .get_lease(&self.group, partition)
            .await
            .ok()
            .flatten();
        let now = Instant::now();
        let mut state = self.lock();
        let window = self.timings.restart_window();
        let checked = state.reservations.written(
            partition,
            stored.as_ref().map(|s| (&s.value, &s.version)),
            now,
            window,
            self.timings.max_clock_drift,
        );
        if let Err(details) = checked {
            self.violate(&mut state, Invariant::Reservation, details);
        }
    }
}
