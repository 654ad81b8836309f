//! **Single owner.** At no true instant do two nodes believe they hold a valid lease on the
//! same partition.
//!
//! A node believes it holds partition p while `lease(p)` would answer `Some`: from
//! `on_acquired` until `on_lost`, a crash or a release, and never past its deadline — the
//! `valid_until` it keeps on its own drifting clock, mapped to true time with
//! [`leasehold::DriftClock::to_true`]. Renewals move that deadline; the simulator reads it
//! again at every callback and every store call the node makes (a renewal's reply is always
//! followed by one of those before the node does anything else) and at each sampling point,
//! so each belief interval `[acquired, min(deadline, lost))` is known as it grows. Two
//! intervals of different nodes (or of two processes of one node) on one partition must not
//! overlap by more than [`TOLERANCE`], the rounding of clock conversions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold::{Epoch, PartitionId};
use tokio::time::Instant;

use super::Holder;

/// Overlaps up to this long are rounding in the drift conversion, not two owners.
pub const TOLERANCE: Duration = Duration::from_micros(1);

#[derive(Debug, Clone)]
struct Belief {
    holder: Holder,
    epoch: Epoch,
    start: Instant,
    end: Instant,
    open: bool,
}

/// Every node's belief intervals, per partition.
#[derive(Debug)]
pub struct SingleOwner {
    origin: Instant,
    retention: Duration,
    /// Indexed by partition number: partitions are dense from zero, and every store call of
    /// every node looks its holdings up here.
    by_partition: Vec<Vec<Belief>>,
    open: BTreeMap<Holder, BTreeSet<PartitionId>>,
}

impl SingleOwner {
    /// Tracks beliefs for a run that started at `origin`. Closed intervals are forgotten
    /// `retention` after they end: nothing that starts or grows later can reach back that far.
    pub fn new(origin: Instant, retention: Duration) -> SingleOwner {
        SingleOwner {
            origin,
            retention,
            by_partition: Vec::new(),
            open: BTreeMap::new(),
        }
    }

    /// `holder` believes, at `now`, that it holds `partition` under `epoch` until `end`.
    ///
    /// Fails if another process's belief on the partition overlaps this one: a taker that
    /// waits less than a holder serves (`SimConfig::unsafe_timings`, or a node with mixed
    /// timings let past the group record, `SimConfig::unsafe_mixed_timings`).
    pub fn believe(
        &mut self,
        holder: Holder,
        partition: PartitionId,
        epoch: Epoch,
        now: Instant,
        end: Instant,
    ) -> Result<(), String> {
        let slot = partition.0 as usize;
        if slot >= self.by_partition.len() {
            self.by_partition.resize_with(slot + 1, Vec::new);
        }
        let beliefs = &mut self.by_partition[slot];
        let current = beliefs.iter().position(|b| b.open && b.holder == holder);
        let index = match current {
            Some(i) if beliefs[i].epoch == epoch && beliefs[i].end >= now => {
                // Already open, so already in `open`.
                beliefs[i].end = beliefs[i].end.max(end);
                i
            }
            other => {
                if let Some(i) = other {
                    close(&mut beliefs[i], now);
                }
                beliefs.push(Belief {
                    holder,
                    epoch,
                    start: now,
                    end,
                    open: true,
                });
                self.open.entry(holder).or_default().insert(partition);
                beliefs.len() - 1
            }
        };
        overlap(self.origin, partition, beliefs, index)
    }

    /// `holder` no longer believes it holds `partition`, as of `now`.
    pub fn disbelieve(&mut self, holder: Holder, partition: PartitionId, now: Instant) {
        if let Some(beliefs) = self.by_partition.get_mut(partition.0 as usize) {
            for belief in beliefs.iter_mut().filter(|b| b.open && b.holder == holder) {
                close(belief, now);
            }
        }
        if let Some(open) = self.open.get_mut(&holder) {
            open.remove(&partition);
            if open.is_empty() {
                self.open.remove(&holder);
            }
        }
    }

    /// Ends every belief of `holder` at `now` (its process is gone).
    pub fn end_all(&mut self, holder: Holder, now: Instant) {
        for partition in self.open_partitions(holder) {
            self.disbelieve(holder, partition, now);
        }
    }

    /// The partitions `holder` had an open belief on at the last look.
    pub fn open_partitions(&self, holder: Holder) -> Vec<PartitionId> {
        self.open
            .get(&holder)
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The partitions `holder` believes it holds at `at`: open beliefs whose deadline has not
    /// passed. A belief stays open past its deadline until the node next looks at its leases.
    pub fn held_at(&self, holder: Holder, at: Instant) -> Vec<PartitionId> {
        let mut held = self.open_partitions(holder);
        held.retain(|p| {
            self.by_partition[p.0 as usize]
                .iter()
                .any(|b| b.open && b.holder == holder && at < b.end)
        });
        held
    }

    /// Whether some node believed it held `partition` at some instant in `[from, to]`.
    pub fn owned_during(&self, partition: PartitionId, from: Instant, to: Instant) -> bool {
        self.by_partition
            .get(partition.0 as usize)
            .is_some_and(|beliefs| beliefs.iter().any(|b| b.start <= to && b.end > from))
    }

    /// Who believed they held `partition` at `at`.
    pub fn holders_at(&self, partition: PartitionId, at: Instant) -> Vec<Holder> {
        self.by_partition
            .get(partition.0 as usize)
            .map(|beliefs| {
                beliefs
                    .iter()
                    .filter(|b| b.start <= at && at < b.end)
                    .map(|b| b.holder)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets intervals that ended more than the retention before `now`.
    pub fn prune(&mut self, now: Instant) {
        let horizon = now.checked_sub(self.retention).unwrap_or(self.origin);
        for beliefs in &mut self.by_partition {
            beliefs.retain(|b| b.open || b.end >= horizon);
        }
    }
}

fn close(belief: &mut Belief, now: Instant) {
    belief.end = belief.end.min(now);
    belief.open = false;
}

fn overlap(
    origin: Instant,
    partition: PartitionId,
    beliefs: &[Belief],
    index: usize,
) -> Result<(), String> {
    let mine = &beliefs[index];
    for other in beliefs.iter().filter(|b| b.holder != mine.holder) {
        let start = mine.start.max(other.start);
        let end = mine.end.min(other.end);
        if start + TOLERANCE < end {
            let at = |t: Instant| t.saturating_duration_since(origin).as_secs_f64();
            return Err(format!(
                "p{partition}: {} believed it held epoch {} over [{:.6}s, {:.6}s) and {} \
                 believed it held epoch {} over [{:.6}s, {:.6}s): both for {:.6}s from {:.6}s",
                other.holder,
                other.epoch,
                at(other.start),
                at(other.end),
                mine.holder,
                mine.epoch,
                at(mine.start),
                at(mine.end),
                (end - start).as_secs_f64(),
                at(start)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(node: usize) -> Holder {
        Holder {
            node,
            incarnation: 1,
        }
    }

    #[test]
    fn successive_holders_pass_even_when_the_first_never_said_it_stopped() {
        let origin = Instant::now();
        let s = |secs: u64| origin + Duration::from_secs(secs);
        let mut beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        let p = PartitionId(1);
        beliefs
            .believe(holder(1), p, Epoch(1), s(0), s(30))
            .unwrap();
        // Renewed: the deadline moves on.
        beliefs
            .believe(holder(1), p, Epoch(1), s(10), s(40))
            .unwrap();
        // Paused past its deadline at 40, never told of its loss: the next holder may start.
        beliefs
            .believe(holder(2), p, Epoch(2), s(40), s(70))
            .unwrap();
        assert_eq!(beliefs.holders_at(p, s(39)), vec![holder(1)]);
        assert_eq!(beliefs.holders_at(p, s(40)), vec![holder(2)]);
        beliefs.disbelieve(holder(2), p, s(50));
        beliefs
            .believe(holder(1), p, Epoch(3), s(50), s(80))
            .unwrap();
    }

    #[test]
    fn two_holders_at_once_are_caught() {
        let origin = Instant::now();
        let s = |secs: u64| origin + Duration::from_secs(secs);
        let mut beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        let p = PartitionId(4);
        beliefs
            .believe(holder(1), p, Epoch(1), s(0), s(30))
            .unwrap();
        let error = beliefs
            .believe(holder(2), p, Epoch(2), s(20), s(50))
            .unwrap_err();
        assert!(
            error.starts_with("p4: n1#1 believed it held epoch 1"),
            "{error}"
        );
        assert!(
            error.contains("both for 10.000000s from 20.000000s"),
            "{error}"
        );
    }

    /// The tolerance is rounding, not slack: an overlap of one millisecond, far shorter
    /// than any lease, is two owners.
    #[test]
    fn an_overlap_of_one_millisecond_is_caught_and_one_of_rounding_is_not() {
        let origin = Instant::now();
        let s = |secs: u64| origin + Duration::from_secs(secs);
        let mut beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        let p = PartitionId(2);
        beliefs
            .believe(holder(1), p, Epoch(1), s(0), s(30))
            .unwrap();
        beliefs
            .believe(holder(2), p, Epoch(2), s(30) - TOLERANCE, s(60))
            .unwrap();
        let error = beliefs
            .believe(
                holder(3),
                p,
                Epoch(3),
                s(60) - Duration::from_millis(1),
                s(90),
            )
            .unwrap_err();
        assert!(error.contains("both for 0.001000s"), "{error}");
    }

    #[test]
    fn two_processes_of_one_node_count_as_two_holders() {
        let origin = Instant::now();
        let s = |secs: u64| origin + Duration::from_secs(secs);
        let mut beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        let p = PartitionId(0);
        beliefs
            .believe(holder(1), p, Epoch(1), s(0), s(30))
            .unwrap();
        let restarted = Holder {
            node: 1,
            incarnation: 2,
        };
        assert!(beliefs
            .believe(restarted, p, Epoch(2), s(10), s(40))
            .is_err());
    }
}
