//! **Epochs strictly increase.** Every acquisition of a partition, by any node, carries an
//! epoch greater than that of every earlier acquisition of the same partition, so epochs
//! are usable as fencing tokens.

use std::collections::BTreeMap;

use leasehold::{Epoch, PartitionId};

use super::Holder;

/// The highest epoch acquired per partition, and who acquired each epoch.
#[derive(Debug, Default)]
pub struct EpochOrder {
    highest: BTreeMap<PartitionId, (Epoch, Holder)>,
    tokens: BTreeMap<(PartitionId, Epoch), Holder>,
}

impl EpochOrder {
    /// Records that `holder` acquired `partition` with `epoch`.
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
        self.tokens.insert((partition, epoch), holder);
        Ok(())
    }

    /// Who acquired `partition` with `epoch`, if anyone did.
    pub fn holder_of(&self, partition: PartitionId, epoch: Epoch) -> Option<Holder> {
        self.tokens.get(&(partition, epoch)).copied()
    }
}
