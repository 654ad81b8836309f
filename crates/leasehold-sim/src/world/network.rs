//! The world as each node's store connection sees it: the faults decide each request's
//! fate from the world's seeded randomness, and every request is counted and taken as a
//! moment to look at the node's beliefs.

use std::future::Future;
use std::time::Duration;

use leasehold::{MemoryStore, NodeId, PartitionId, Version};
use tokio::time::Instant;

use super::World;
use crate::faults::{self, Fate};
use crate::invariants::Holder;
use crate::store::Network;

impl Network for World {
    fn store(&self) -> &MemoryStore {
        &self.store
    }

    fn change_notices(&self) -> bool {
        self.config.change_notices
    }

    /// A reply processed since the last look may have moved a deadline.
    fn sending(&self, holder: Holder, write: bool, rows: usize) {
        let mut state = self.lock();
        if write {
            state.traffic.write_calls += 1;
            state.traffic.rows_written += rows as u64;
        } else {
            state.traffic.read_calls += 1;
        }
        self.sample(&mut state, holder);
    }

    fn latency(&self, holder: Holder) -> Duration {
        let max = self.config.faults.max_latency;
        let mut state = self.lock();
        let link = state.faults.link_latency(holder.node);
        if max.is_zero() {
            return link;
        }
        link + max.mul_f64(state.rng.next_f64())
    }

    fn fate(&self, holder: Holder, write: bool) -> Fate {
        let mut state = self.lock();
        let state = &mut *state;
        let store_timeout = self.timings.store_timeout;
        let fate = state.faults.decide(
            &self.config.faults,
            store_timeout,
            &mut state.rng,
            holder.node,
            write,
        );
        if let Some(what) = fate.count(&mut state.counts) {
            let kind = if write { "write" } else { "read" };
            self.event(state, format!("{holder} {kind} {what}"));
            // A failed call may delay a scan, a renewal or a take: the fleet is not settled.
            state.recorder.changed(Instant::now());
        }
        fate
    }

    fn apply_later(&self, delay: Duration, write: impl Future<Output = ()> + Send + 'static) {
        let mut state = self.lock();
        self.spawn(&mut state, faults::apply_later(delay, write));
    }

    fn store_wall(&self, spent: Duration) {
        self.lock().traffic.store_wall_seconds += spent.as_secs_f64();
    }

    fn rows_read(&self, rows: usize) {
        self.lock().traffic.rows_read += rows as u64;
    }

    fn lease_listing(&self, rows: usize) {
        let mut state = self.lock();
        state.traffic.rows_read += rows as u64;
        state.traffic.lease_listings += 1;
    }

    /// From the moment the faults stop, as if the nodes stopped taking partitions then.
    fn stops_taking(&self, _holder: Holder) -> bool {
        self.config.unsafe_stop_acquiring && Instant::now() >= self.origin + self.config.quiet_at()
    }

    fn take_refused(&self, holder: Holder, partition: PartitionId) {
        let mut state = self.lock();
        let text = format!("{holder} take of p{partition} refused: nodes stopped taking");
        self.event(&mut state, text);
    }

    /// Node `n0`, in every incarnation, so that a restart does not cure it.
    fn hides_members(&self, holder: Holder) -> bool {
        self.config.unsafe_ignore_members && holder.node == 0
    }

    fn garbled_member(&self, holder: Holder) -> Option<NodeId> {
        let state = self.lock();
        let (reader, member, until) = state.garbled.as_ref()?;
        (*reader == holder.node && Instant::now() < *until).then(|| member.clone())
    }

    fn member_written(&self, holder: Holder, version: Option<Version>, conditioned: bool) {
        let mut state = self.lock();
        if conditioned {
            state.own_members.insert(holder, version);
        } else {
            state.own_members.remove(&holder);
        }
    }
}
