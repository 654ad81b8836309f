//! The fenced resources work is submitted to, one per partition: each keeps the highest
//! epoch it accepted and refuses lower ones, and records every offer with its verdict for
//! [`crate::invariants::fencing`] to judge apart from this rule.

use leasehold::{Epoch, PartitionId};

use crate::invariants::fencing::Offer;
use crate::invariants::Holder;

/// Every partition's resource, and the record of what they were offered.
#[derive(Debug, Default)]
pub(crate) struct Resources {
    /// Indexed by partition number, as partitions are dense from zero.
    highest: Vec<Option<Epoch>>,
    /// Accept every epoch, stale ones included: the negative control of the fencing check.
    accepts_stale: bool,
    /// Offers not yet judged, in the order they arrived.
    record: Vec<Offer>,
}

impl Resources {
    /// Resources that follow the fencing rule, or, with `accepts_stale`, ignore it.
    pub fn new(accepts_stale: bool) -> Resources {
        Resources {
            accepts_stale,
            ..Resources::default()
        }
    }

    /// `writer` submits work on `partition` under `epoch`; returns whether it was accepted.
    pub fn offer(&mut self, partition: PartitionId, epoch: Epoch, writer: Holder) -> bool {
        let slot = partition.0 as usize;
        if slot >= self.highest.len() {
            self.highest.resize(slot + 1, None);
        }
        let highest = &mut self.highest[slot];
        let accepted = self.accepts_stale || highest.is_none_or(|highest| epoch >= highest);
        if accepted {
            *highest = Some(highest.map_or(epoch, |highest| highest.max(epoch)));
        }
        self.record.push(Offer {
            partition,
            epoch,
            writer,
            accepted,
        });
        accepted
    }

    /// The offers recorded since the last call, oldest first.
    pub fn take_record(&mut self) -> Vec<Offer> {
        std::mem::take(&mut self.record)
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
    fn a_resource_refuses_lower_epochs_and_records_every_offer() {
        let mut resources = Resources::new(false);
        let p = PartitionId(5);
        assert!(resources.offer(p, Epoch(2), holder(1)));
        assert!(resources.offer(p, Epoch(3), holder(2)));
        assert!(!resources.offer(p, Epoch(2), holder(1)));
        assert!(resources.offer(PartitionId(0), Epoch(1), holder(1)));
        let verdicts: Vec<bool> = resources.take_record().iter().map(|o| o.accepted).collect();
        assert_eq!(verdicts, [true, true, false, true]);
        assert!(resources.take_record().is_empty());
    }

    #[test]
    fn the_negative_control_accepts_stale_epochs() {
        let mut resources = Resources::new(true);
        let p = PartitionId(0);
        assert!(resources.offer(p, Epoch(3), holder(2)));
        assert!(resources.offer(p, Epoch(2), holder(1)));
    }
}
