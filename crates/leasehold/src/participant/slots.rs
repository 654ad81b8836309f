//! The lock-free index of a participant's tenures by partition, allocated in small chunks as
//! partitions are first taken: a node holds a few dozen of a group's partitions, and a slot
//! for every one of 65,536 cost half a megabyte per participant (half a gigabyte for a
//! thousand in one process, as the simulator runs them).

use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;

use super::Tenure;
use crate::types::PartitionId;

/// Partitions per chunk: a node's partitions are scattered over the table, so most chunks it
/// touches hold one of them, and a small chunk wastes little.
const CHUNK: usize = 64;

/// The most partitions given a slot: 16,384 chunk pointers. Partitions beyond it, in a
/// group too large to hold much of anyway, are looked up in the participant's map.
const MAX_SLOTS: u32 = 1 << 20;

/// [`CHUNK`] consecutive slots, allocated when one of them is first written.
type Chunk = OnceLock<Box<[ArcSwapOption<Tenure>]>>;

/// One slot per partition of the group (up to [`MAX_SLOTS`]), each an atomic pointer to the
/// tenure held on it, so that a lookup is two atomic loads and no lock.
pub(super) struct Slots {
    chunks: Box<[Chunk]>,
    covered: u32,
}

impl Slots {
    /// Slots for a group of `partitions`, none allocated yet.
    pub(super) fn new(partitions: u32) -> Slots {
        let covered = partitions.min(MAX_SLOTS);
        Slots {
            chunks: (0..(covered as usize).div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            covered,
        }
    }

    /// Whether `partition` has a slot; one without is looked up in the map instead.
    pub(super) fn covers(&self, partition: PartitionId) -> bool {
        partition.0 < self.covered
    }

    /// The slot of `partition`, if it has one that was ever written: a covered partition
    /// without one has never been held.
    pub(super) fn get(&self, partition: PartitionId) -> Option<&ArcSwapOption<Tenure>> {
        if !self.covers(partition) {
            return None;
        }
        let index = partition.0 as usize;
        self.chunks[index / CHUNK].get().map(|c| &c[index % CHUNK])
    }

    /// Sets the tenure held on `partition` (none when it ends); nothing for a partition
    /// without a slot. Callers write under the participant's lease lock, so that a reader
    /// holding that lock sees the slots and the map agree.
    pub(super) fn store(&self, partition: PartitionId, tenure: Option<Arc<Tenure>>) {
        if !self.covers(partition) {
            return;
        }
        let index = partition.0 as usize;
        let chunk = &self.chunks[index / CHUNK];
        match tenure {
            Some(tenure) => chunk
                .get_or_init(|| (0..CHUNK).map(|_| ArcSwapOption::empty()).collect())
                [index % CHUNK]
                .store(Some(tenure)),
            None => {
                if let Some(chunk) = chunk.get() {
                    chunk[index % CHUNK].store(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chunks_of_partitions_held_are_allocated() {
        let slots = Slots::new(65_536);
        assert_eq!(slots.chunks.len(), 1_024);
        assert!(slots.covers(PartitionId(65_535)));
        assert!(!slots.covers(PartitionId(65_536)));
        assert!(slots.get(PartitionId(100)).is_none());
        slots.store(PartitionId(100), None);
        assert!(slots.chunks.iter().all(|c| c.get().is_none()));
    }

    #[test]
    fn a_group_beyond_the_slots_is_covered_only_below_them() {
        let slots = Slots::new(u32::MAX);
        assert!(slots.covers(PartitionId(MAX_SLOTS - 1)));
        assert!(!slots.covers(PartitionId(MAX_SLOTS)));
        assert!(slots.get(PartitionId(MAX_SLOTS)).is_none());
        let small = Slots::new(65);
        assert_eq!(small.chunks.len(), 2);
        assert!(small.covers(PartitionId(64)) && !small.covers(PartitionId(65)));
    }
}
