//! **Fencing.** Each partition has a simulated resource that remembers the highest epoch
//! it accepted and rejects work carrying a lower one. Nodes do work by checking
//! `lease(p)` and, a moment later (a pause may strike in between), submitting
//! `(partition, epoch)`. The property, checked over the log of accepted work: no accepted
//! submission has an epoch below the highest accepted before it, every accepted epoch was
//! acquired by the node submitting it, and no two nodes have work accepted under one epoch.
//! Rejections are expected after pauses and counted: they are the resource doing its job.

use std::collections::BTreeMap;

use leasehold::{Epoch, PartitionId};

use super::epochs::EpochOrder;
use super::Holder;

/// The resources of every partition and the log checks over what they accepted.
#[derive(Debug, Default)]
pub struct FencedResources {
    /// What each resource itself remembers: the highest epoch accepted and from whom.
    resources: BTreeMap<PartitionId, (Epoch, Holder)>,
    /// The highest epoch in the accepted log, tracked apart from the resources.
    accepted_log_highest: BTreeMap<PartitionId, Epoch>,
    /// Submissions accepted.
    pub accepted: u64,
    /// Submissions rejected as stale.
    pub rejected: u64,
}

impl FencedResources {
    /// `writer` submits work on `partition` under `epoch`. Returns whether the resource
    /// accepted it, or the broken property.
    pub fn submit(
        &mut self,
        partition: PartitionId,
        epoch: Epoch,
        writer: Holder,
        epochs: &EpochOrder,
    ) -> Result<bool, String> {
        if epochs.holder_of(partition, epoch) != Some(writer) {
            return Err(format!(
                "{writer} submitted work on p{partition} with epoch {epoch}, \
                 which it never acquired"
            ));
        }
        if let Some((highest, by)) = self.resources.get(&partition) {
            if epoch < *highest {
                self.rejected += 1;
                return Ok(false);
            }
            if epoch == *highest && *by != writer {
                return Err(format!(
                    "{writer} and {by} both had work on p{partition} accepted under epoch {epoch}"
                ));
            }
        }
        self.resources.insert(partition, (epoch, writer));
        self.accepted += 1;
        let highest = self.accepted_log_highest.entry(partition).or_default();
        if epoch < *highest {
            return Err(format!(
                "the resource of p{partition} accepted epoch {epoch} after accepting {highest}"
            ));
        }
        *highest = epoch;
        Ok(true)
    }
}
