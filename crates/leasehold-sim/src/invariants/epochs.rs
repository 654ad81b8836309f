//! **Epochs strictly increase.** Every acquisition of a partition, by any node, carries an
//! epoch greater than that of every earlier acquisition of the same partition, so epochs
//! are usable as fencing tokens.

use std::collections::BTreeMap;

use leasehold::{Epoch, PartitionId};

use super::Holder;

/// The highest epoch acquired per partition, and by whom.
#[derive(Debug, Default)]
pub struct EpochOrder {
    highest: BTreeMap<PartitionId, (Epoch, Holder)>,
}

impl EpochOrder {
    /// Records that `holder` acquired `partition` with `epoch`.
    ///
    /// Fails if an acquisition does not raise the partition's epoch, as one that reuses the
    /// epoch its record already carries does (`SimConfig::unsafe_epoch_reuse`).
    pub fn acquired(
        &mut self,
        partition: PartitionId,
        epoch: Epoch,
        holder: Holder,
    ) -> Result<(), String> {
        if let Some((highest, by)) = self.highest.get(&partition) {
            if epoch <= *highest {
                return Err(format!(
                    "{holder} acquired p{partition} with epoch {epoch}, \
                     but {by} had already acquired it with epoch {highest}"
                ));
            }
        }
        self.highest.insert(partition, (epoch, holder));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(node: usize, incarnation: u64) -> Holder {
        Holder { node, incarnation }
    }

    #[test]
    fn rising_epochs_are_accepted_per_partition() {
        let mut order = EpochOrder::default();
        for (partition, epoch, node) in [(0, 1, 1), (1, 1, 2), (0, 2, 2), (0, 5, 1), (1, 2, 1)] {
            order
                .acquired(PartitionId(partition), Epoch(epoch), holder(node, 1))
                .unwrap();
        }
    }

    #[test]
    fn a_reused_epoch_is_caught_even_by_the_same_node() {
        let mut order = EpochOrder::default();
        order
            .acquired(PartitionId(3), Epoch(4), holder(1, 1))
            .unwrap();
        let error = order
            .acquired(PartitionId(3), Epoch(4), holder(1, 2))
            .unwrap_err();
        assert!(error.contains("n1#2 acquired p3 with epoch 4"), "{error}");
        assert!(error.contains("n1#1 had already"), "{error}");
    }

    #[test]
    fn a_lower_epoch_is_caught() {
        let mut order = EpochOrder::default();
        order
            .acquired(PartitionId(0), Epoch(7), holder(1, 1))
            .unwrap();
        assert!(order
            .acquired(PartitionId(0), Epoch(6), holder(2, 1))
            .is_err());
    }
}
