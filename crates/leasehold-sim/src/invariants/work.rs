//! **Work never overlaps.** Nodes run units of work under [`leasehold::WorkPermit`]s, of
//! random lengths, some outlasting the lease and its drain timeout. A unit's span runs in
//! true time from the moment its permit was taken to the moment the work ended: when the
//! worker dropped the permit, or, if the permit had stopped being valid by then, when it
//! stopped being valid (the lease's deadline on the holder's clock, the moment the holder
//! lost the lease to a conflict, or its process ending). The property: the spans of two
//! different processes on one partition never overlap. This is the rule the product promises
//! applications, stated about work rather than beliefs: a hand-off must wait for the work
//! in flight.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::{Epoch, PartitionId};
use tokio::time::Instant;

use super::Holder;

/// One unit of work, in true time.
#[derive(Debug, Clone, Copy)]
struct Span {
    holder: Holder,
    epoch: Epoch,
    start: Instant,
    end: Instant,
}

/// The spans of recent units per partition, and when tenures stopped being valid.
#[derive(Debug)]
pub struct WorkSpans {
    /// Longer than any unit can last, pauses included: what ended this long before a unit
    /// started cannot overlap it.
    horizon: Duration,
    spans: BTreeMap<PartitionId, Vec<Span>>,
    /// When a tenure was lost (conflict or expiry), in true time.
    lost: BTreeMap<(Holder, PartitionId, Epoch), Instant>,
    /// When a process ended.
    ended: BTreeMap<Holder, Instant>,
    /// Units that ran to their end.
    pub units: u64,
    /// Units whose permit stopped being valid before they ended.
    pub cut_short: u64,
}

impl WorkSpans {
    /// Spans kept for `horizon`, which must exceed the longest unit, pauses included.
    pub fn new(horizon: Duration) -> WorkSpans {
        WorkSpans {
            horizon,
            spans: BTreeMap::new(),
            lost: BTreeMap::new(),
            ended: BTreeMap::new(),
            units: 0,
            cut_short: 0,
        }
    }

    /// `holder` lost its tenure `epoch` of `partition` at `at`: its permits stop there.
    pub fn lost(&mut self, holder: Holder, partition: PartitionId, epoch: Epoch, at: Instant) {
        self.lost.insert((holder, partition, epoch), at);
    }

    /// `holder`'s process ended at `at`: its work stops there.
    pub fn process_ended(&mut self, holder: Holder, at: Instant) {
        self.ended.insert(holder, at);
    }

    /// A unit of `holder` on `partition` under `epoch` started at `start` and ended at `now`;
    /// `valid_until` is when its permit would run out by the deadline if it is no longer
    /// valid. Returns the broken property if the unit overlaps another process's.
    pub fn unit(
        &mut self,
        holder: Holder,
        partition: PartitionId,
        epoch: Epoch,
        start: Instant,
        now: Instant,
        valid_until: Option<Instant>,
    ) -> Result<(), String> {
        let end = match valid_until {
            None => now,
            Some(deadline) => {
                self.cut_short += 1;
                let lost = self.lost.get(&(holder, partition, epoch)).copied();
                let ended = self.ended.get(&holder).copied();
                [Some(deadline), lost, ended, Some(now)]
                    .into_iter()
                    .flatten()
                    .min()
                    .expect("now is always there")
            }
        };
        self.units += 1;
        let end = end.max(start);
        let spans = self.spans.entry(partition).or_default();
        // Units last at most a few leases: what ended long before this one started is done.
        spans.retain(|span| span.end + self.horizon >= start);
        for other in spans.iter() {
            if other.holder != holder && other.start < end && start < other.end {
                return Err(format!(
                    "work of {holder} on p{partition} epoch={epoch} overlapped work of {} \
                     under epoch={} by {:.3}s",
                    other.holder,
                    other.epoch,
                    end.min(other.end)
                        .duration_since(start.max(other.start))
                        .as_secs_f64()
                ));
            }
        }
        spans.push(Span {
            holder,
            epoch,
            start,
            end,
        });
        Ok(())
    }

    /// Forgets losses and ends older than the horizon before `now`.
    pub fn prune(&mut self, now: Instant) {
        let Some(before) = now.checked_sub(self.horizon) else {
            return;
        };
        self.lost.retain(|_, at| *at >= before);
        self.ended.retain(|_, at| *at >= before);
    }
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
    fn overlapping_units_of_two_processes_are_caught_and_touching_ones_are_not() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut spans = WorkSpans::new(Duration::from_secs(600));
        let p = PartitionId(3);
        spans
            .unit(holder(1), p, Epoch(1), s(0), s(10), None)
            .unwrap();
        // The next holder starts exactly when the first stopped.
        spans
            .unit(holder(2), p, Epoch(2), s(10), s(20), None)
            .unwrap();
        // The same process may overlap itself (two units under one tenure).
        spans
            .unit(holder(2), p, Epoch(2), s(15), s(25), None)
            .unwrap();
        let error = spans
            .unit(holder(1), p, Epoch(3), s(24), s(30), None)
            .unwrap_err();
        assert!(error.contains("overlapped"), "{error}");
    }

    #[test]
    fn a_unit_whose_permit_ran_out_stops_at_the_deadline_or_the_loss() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut spans = WorkSpans::new(Duration::from_secs(600));
        let p = PartitionId(0);
        // Paused past its deadline at 10: its work stopped there, not when it woke at 40.
        spans
            .unit(holder(1), p, Epoch(1), s(0), s(40), Some(s(10)))
            .unwrap();
        spans
            .unit(holder(2), p, Epoch(2), s(12), s(30), None)
            .unwrap();
        // Lost to a conflict at 31, before its deadline at 45.
        spans.lost(holder(2), p, Epoch(3), s(31));
        spans
            .unit(holder(2), p, Epoch(3), s(30), s(50), Some(s(45)))
            .unwrap();
        spans
            .unit(holder(3), p, Epoch(4), s(32), s(33), None)
            .unwrap();
        assert_eq!((spans.units, spans.cut_short), (4, 2));
    }
}
