//! **Fencing.** Each partition has a simulated resource (see `resource`) that keeps the
//! highest epoch it accepted and refuses work carrying a lower one. Nodes do work by checking
//! `lease(p)` and submitting `(partition, epoch)` once the work is done, a cycle later (a
//! pause may strike in between). The resource records every offer and whether it accepted
//! it; this module judges that record on its own, without trusting the resource's rule:
//!
//! - no accepted offer carries an epoch below the highest accepted before it;
//! - no offer is refused unless its epoch is below the highest accepted before it;
//! - every accepted epoch was acquired by the node submitting under it;
//! - no two processes have work accepted under one epoch of a partition.
//!
//! Refusals are expected after pauses, and counted: they are the resource doing its job.

use std::collections::{BTreeMap, BTreeSet};

use leasehold::{Epoch, PartitionId};

use super::Holder;

/// One submission to a partition's resource, and the resource's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// The partition whose resource was written.
    pub partition: PartitionId,
    /// The fencing token the work carried.
    pub epoch: Epoch,
    /// Who submitted it.
    pub writer: Holder,
    /// Whether the resource took the work.
    pub accepted: bool,
}

/// What the judge knows: the acquisitions the nodes reported and the offers judged so far.
#[derive(Debug, Default)]
pub struct FencingJudge {
    /// Who acquired each epoch of each partition, from the acquisition callbacks.
    acquired: BTreeMap<(PartitionId, Epoch), BTreeSet<Holder>>,
    /// Per partition, the highest epoch accepted so far and whose work it carried.
    accepted_highest: BTreeMap<PartitionId, (Epoch, Holder)>,
    /// Every process that had work accepted under each epoch.
    writers: BTreeMap<(PartitionId, Epoch), Holder>,
    /// Offers accepted.
    pub accepted: u64,
    /// Offers refused as stale.
    pub refused: u64,
}

impl FencingJudge {
    /// `holder` acquired `partition` under `epoch`: it may submit work under that token.
    pub fn acquired(&mut self, partition: PartitionId, epoch: Epoch, holder: Holder) {
        self.acquired
            .entry((partition, epoch))
            .or_default()
            .insert(holder);
    }

    /// Judges the resource's next recorded offer, returning the broken property.
    pub fn judge(&mut self, offer: &Offer) -> Result<(), String> {
        let Offer {
            partition,
            epoch,
            writer,
            accepted,
        } = *offer;
        let highest = self.accepted_highest.get(&partition).copied();
        let stale = highest.is_some_and(|(highest, _)| epoch < highest);
        if !accepted {
            return self.refused(offer, highest, stale);
        }
        self.accepted += 1;
        // Fails if the resource accepts a stale epoch (`SimConfig::unsafe_stale_fencing`).
        if let (true, Some((highest, by))) = (stale, highest) {
            return Err(format!(
                "the resource of p{partition} accepted work of {writer} under epoch {epoch} \
                 after accepting work of {by} under epoch {highest}"
            ));
        }
        // Fails if work is accepted under a token its writer was never given.
        let given = self
            .acquired
            .get(&(partition, epoch))
            .is_some_and(|holders| holders.contains(&writer));
        if !given {
            return Err(format!(
                "the resource of p{partition} accepted work of {writer} under epoch {epoch}, \
                 which {writer} never acquired"
            ));
        }
        // Fails if two tenures share one token (acquisitions that reuse the record's epoch,
        // `SimConfig::unsafe_epoch_reuse`): the resource cannot tell their writers apart.
        let first = *self.writers.entry((partition, epoch)).or_insert(writer);
        if first != writer {
            return Err(format!(
                "the resource of p{partition} accepted work of both {first} and {writer} \
                 under epoch {epoch}"
            ));
        }
        self.accepted_highest.insert(partition, (epoch, writer));
        Ok(())
    }

    /// Fails if the resource refuses work that was not stale: a resource refusing everything
    /// would otherwise pass every other check, having accepted nothing.
    fn refused(
        &mut self,
        offer: &Offer,
        highest: Option<(Epoch, Holder)>,
        stale: bool,
    ) -> Result<(), String> {
        self.refused += 1;
        if stale {
            return Ok(());
        }
        let Offer {
            partition,
            epoch,
            writer,
            ..
        } = *offer;
        Err(match highest {
            Some((highest, by)) => format!(
                "the resource of p{partition} refused work of {writer} under epoch {epoch}, \
                 not below the highest it had accepted, {highest} from {by}"
            ),
            None => format!(
                "the resource of p{partition} refused work of {writer} under epoch {epoch} \
                 before accepting any"
            ),
        })
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

    fn offer(epoch: u64, node: usize, accepted: bool) -> Offer {
        Offer {
            partition: PartitionId(2),
            epoch: Epoch(epoch),
            writer: holder(node),
            accepted,
        }
    }

    /// Two tenures, the first holder paused across the hand-over and refused when it wakes.
    fn judge_with_two_tenures() -> FencingJudge {
        let mut judge = FencingJudge::default();
        judge.acquired(PartitionId(2), Epoch(1), holder(1));
        judge.acquired(PartitionId(2), Epoch(2), holder(2));
        judge
    }

    #[test]
    fn a_history_with_a_stale_writer_refused_is_accepted() {
        let mut judge = judge_with_two_tenures();
        for offer in [
            offer(1, 1, true),
            offer(1, 1, true),
            offer(2, 2, true),
            offer(1, 1, false),
            offer(2, 2, true),
        ] {
            judge.judge(&offer).unwrap();
        }
        assert_eq!((judge.accepted, judge.refused), (4, 1));
    }

    #[test]
    fn a_stale_epoch_accepted_is_caught() {
        let mut judge = judge_with_two_tenures();
        judge.judge(&offer(1, 1, true)).unwrap();
        judge.judge(&offer(2, 2, true)).unwrap();
        let error = judge.judge(&offer(1, 1, true)).unwrap_err();
        assert!(error.contains("under epoch 1 after accepting"), "{error}");
    }

    #[test]
    fn a_current_writer_refused_is_caught() {
        let mut judge = judge_with_two_tenures();
        let error = judge.judge(&offer(1, 1, false)).unwrap_err();
        assert!(error.contains("before accepting any"), "{error}");
        let mut judge = judge_with_two_tenures();
        judge.judge(&offer(1, 1, true)).unwrap();
        let error = judge.judge(&offer(2, 2, false)).unwrap_err();
        assert!(error.contains("not below the highest"), "{error}");
    }

    #[test]
    fn work_under_a_token_never_acquired_is_caught() {
        let mut judge = judge_with_two_tenures();
        let error = judge.judge(&offer(2, 1, true)).unwrap_err();
        assert!(error.contains("never acquired"), "{error}");
    }

    #[test]
    fn two_writers_under_one_epoch_are_caught() {
        let mut judge = FencingJudge::default();
        judge.acquired(PartitionId(2), Epoch(4), holder(1));
        judge.acquired(PartitionId(2), Epoch(4), holder(2));
        judge.judge(&offer(4, 1, true)).unwrap();
        let error = judge.judge(&offer(4, 2, true)).unwrap_err();
        assert!(error.contains("both n1#1 and n2#1"), "{error}");
    }
}
