//! The lease table as this node last read it. Every node keeps one row per partition and
//! folds in the whole table on every listing, so the row is kept to what planning reads: a
//! fleet of a thousand nodes on 65,536 partitions holds 65 million of them.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::record::{LeaseRecord, LeaseState, Stored};
use crate::types::{Epoch, NodeId, PartitionId, Version};

mod moment;
mod tally;
use moment::Moment;
pub use tally::{usable_load, LoadTally, OwnerTally};

/// A lease row as this node last saw it: the parts of the record that planning reads, its
/// version, and since when it has looked exactly so.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenLease {
    /// Its version.
    pub version: Version,
    /// The local instant at which this version was first seen (see
    /// [`SeenLease::first_seen`]), in eight bytes rather than an [`Instant`]'s sixteen.
    first_seen: Moment,
    /// The node that holds the lease, or, for a released record, the node it goes to next:
    /// the one it is handed to ([`LeaseRecord::handed_to`]), else the one that released it
    /// ([`LeaseRecord::previous_owner`]).
    pub owner: Option<NodeId>,
    /// The fencing token of the current or last tenure.
    pub epoch: Epoch,
    /// The partition.
    pub partition: PartitionId,
    /// Held, released or offline.
    pub state: LeaseState,
    /// The load last reported for the partition (see [`SeenLease::load`]), NaN for none:
    /// an `Option` would take twice the room, in a row kept 65 million times by a simulated
    /// fleet.
    load: f32,
    /// Whether the record names nodes that must never take the partition; the names are
    /// kept apart (see [`LeaseView::prohibited`]), as few records have any.
    restricted: bool,
    /// Whether the record is released and handed to a node other than the one that released
    /// it (then `owner` is the node it is handed to, and the one that released it is kept
    /// apart: see [`LeaseView::last_holder`]).
    handed: bool,
    /// Whether this node has since learnt that the row changed without seeing how: it is
    /// left out until the next listing shows it again.
    forgotten: bool,
    /// With session leases, the session of the holder under which the lease is held
    /// ([`super::members::session_tag`]).
    pub session: Option<std::num::NonZeroU32>,
}

impl SeenLease {
    fn new(
        partition: PartitionId,
        record: LeaseRecord,
        version: Version,
        first_seen: Instant,
        aside: &mut Aside,
    ) -> SeenLease {
        let restricted = !record.prohibited.is_empty();
        if record.is_reserved() {
            aside.reserved.insert(partition);
        } else if !aside.reserved.is_empty() {
            aside.reserved.remove(&partition);
        }
        if restricted {
            aside.prohibited.insert(partition, record.prohibited);
        } else if !aside.prohibited.is_empty() {
            aside.prohibited.remove(&partition);
        }
        // Released records keep no owner; the node the partition goes to next (the one it
        // is handed to, else the one that gave it up) is what placement reads from them, in
        // the same slot, so rows stay as small as they were.
        let owner = match record.state {
            LeaseState::Released => record.handed_to.or(record.previous_owner.clone()),
            _ => record.owner,
        };
        let released_by = match record.state {
            LeaseState::Released => record
                .previous_owner
                .filter(|by| Some(by) != owner.as_ref()),
            _ => None,
        };
        let handed = released_by.is_some();
        match released_by {
            Some(by) => {
                aside.released_by.insert(partition, by);
            }
            None if !aside.released_by.is_empty() => {
                aside.released_by.remove(&partition);
            }
            None => {}
        }
        SeenLease {
            version,
            first_seen: Moment::of(first_seen),
            owner,
            epoch: record.epoch,
            partition,
            state: record.state,
            load: record.load.map_or(f32::NAN, |load| load as f32),
            restricted,
            handed,
            forgotten: false,
            session: super::members::session_tag(record.session),
        }
    }
}

impl SeenLease {
    /// The local instant at which this version was first seen: the start of its
    /// unchanged-for-`acquire_after` wait.
    pub fn first_seen(&self) -> Instant {
        self.first_seen.instant()
    }

    /// The load last reported for the partition (kept when it is released), in single
    /// precision: balancing needs no more, and the row stays small.
    pub fn load(&self) -> Option<f32> {
        (!self.load.is_nan()).then_some(self.load)
    }
}

/// What few rows carry, kept beside the rows so that these stay small.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aside {
    /// The prohibited lists of the rows marked restricted.
    prohibited: BTreeMap<PartitionId, Vec<NodeId>>,
    /// The node that released each row marked handed.
    released_by: BTreeMap<PartitionId, NodeId>,
    /// The released rows reserved for the node that released them, which is restarting in
    /// place ([`LeaseRecord::is_reserved`]): their `owner` names it. A set beside the rows
    /// rather than a flag in them, which would make every row of a large view bigger.
    reserved: std::collections::BTreeSet<PartitionId>,
}

impl Aside {
    /// A row left the view.
    fn vanished(&mut self, row: &SeenLease) {
        if row.restricted {
            self.prohibited.remove(&row.partition);
        }
        if row.handed {
            self.released_by.remove(&row.partition);
        }
        if !self.reserved.is_empty() {
            self.reserved.remove(&row.partition);
        }
    }
}

/// This node's view of its group's lease table: one [`SeenLease`] per partition, in
/// partition order.
#[derive(Debug, Clone, Default)]
pub struct LeaseView {
    /// Sorted by partition, one row each.
    rows: Vec<SeenLease>,
    /// What few rows carry.
    aside: Aside,
    /// What the rows add up to, for balancing by load.
    tally: LoadTally,
    /// The group's epoch floor: no acquisition issues an epoch at or below it.
    epoch_floor: Epoch,
    /// Epochs of rows that vanished or went back.
    epochs: EpochMemory,
}

/// The highest epoch seen on partitions whose record vanished or went back to a lower epoch
/// (deleted and re-created behind leasehold's back): few, so kept apart from the rows.
#[derive(Debug, Clone, Default)]
struct EpochMemory {
    highest: BTreeMap<PartitionId, Epoch>,
}

impl EpochMemory {
    /// A row left the view: its record was deleted, or is being replaced.
    fn vanished(&mut self, row: &SeenLease) {
        let highest = self.highest.entry(row.partition).or_insert(row.epoch);
        *highest = (*highest).max(row.epoch);
    }

    /// A record was seen at `epoch` where the view showed `before` (if anything).
    fn seen(&mut self, partition: PartitionId, before: Option<Epoch>, epoch: Epoch) {
        let remembered = if self.highest.is_empty() {
            None
        } else {
            self.highest.get(&partition).copied()
        };
        let Some(highest) = before.max(remembered) else {
            return;
        };
        if epoch >= highest {
            if remembered.is_some() {
                self.highest.remove(&partition);
            }
            return;
        }
        self.highest.insert(partition, highest);
        tracing::warn!(%partition, %epoch, seen = %highest, "lease record's epoch went back (deleted and re-created outside leasehold?); the next acquisition issues a higher one");
    }
}

impl LeaseView {
    /// How many partitions the view shows.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the view shows no partition.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The rows, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = &SeenLease> + '_ {
        self.rows.iter().filter(|row| !row.forgotten)
    }

    /// The row for `partition`, if the view shows it.
    pub fn get(&self, partition: PartitionId) -> Option<&SeenLease> {
        let index = self.position(partition).ok()?;
        Some(&self.rows[index]).filter(|row| !row.forgotten)
    }

    /// The nodes that must never take `partition`, as its record last seen lists them.
    pub fn prohibited(&self, partition: PartitionId) -> &[NodeId] {
        self.aside
            .prohibited
            .get(&partition)
            .map_or(&[], Vec::as_slice)
    }

    /// The node that last held `partition`: its holder, or for a released record the node
    /// that released it (which is not [`SeenLease::owner`] when the record is handed to
    /// another node). What a taker records as the partition's previous holder.
    pub fn last_holder<'a>(&'a self, seen: &'a SeenLease) -> Option<&'a NodeId> {
        if seen.handed {
            if let Some(by) = self.aside.released_by.get(&seen.partition) {
                return Some(by);
            }
        }
        seen.owner.as_ref()
    }

    /// What the rows add up to: the table's load and each holder's, kept as rows change.
    pub fn tally(&self) -> &LoadTally {
        &self.tally
    }

    /// The rows from `partition` on, in partition order.
    pub fn from(&self, partition: PartitionId) -> impl Iterator<Item = &SeenLease> + '_ {
        let start = self.rows.partition_point(|row| row.partition < partition);
        self.rows[start..].iter().filter(|row| !row.forgotten)
    }

    /// Whether `seen`, a row of this view, is released and reserved for its `owner`, a node
    /// restarting in place: the others leave it for the group's restart window.
    pub fn is_reserved(&self, seen: &SeenLease) -> bool {
        seen.state == LeaseState::Released
            && !self.aside.reserved.is_empty()
            && self.aside.reserved.contains(&seen.partition)
    }

    /// The rows reserved for a node restarting in place (see [`LeaseView::is_reserved`]),
    /// whatever their window: usually none, a restarting node's share when one restarts.
    pub fn reserved(&self) -> impl Iterator<Item = &SeenLease> + '_ {
        self.aside
            .reserved
            .iter()
            .filter_map(|partition| self.get(*partition))
            .filter(|seen| self.is_reserved(seen))
    }

    /// Whether `node` is on the prohibited list of `seen`, a row of this view.
    pub fn is_prohibited(&self, seen: &SeenLease, node: &NodeId) -> bool {
        seen.restricted && self.prohibited(seen.partition).contains(node)
    }

    /// Sets the group's epoch floor ([`crate::GroupRecord::epoch_floor`]).
    pub fn set_epoch_floor(&mut self, floor: Epoch) {
        self.epoch_floor = floor;
    }

    /// The epoch the next acquisition of `seen` writes: above its record's, above every
    /// epoch this node saw on the partition before, and above the group's floor. A record
    /// deleted and created again behind leasehold's back therefore never makes this node
    /// issue a fencing token it issued before.
    pub fn next_epoch(&self, seen: &SeenLease) -> Epoch {
        let before = self.epochs.highest.get(&seen.partition).copied();
        seen.epoch
            .max(before.unwrap_or_default())
            .max(self.epoch_floor)
            .next()
    }

    /// Records that `partition` is `record` at `version`, unchanged since `first_seen`: what
    /// this node knows after writing the row itself.
    pub fn insert(
        &mut self,
        partition: PartitionId,
        record: &LeaseRecord,
        version: Version,
        first_seen: Instant,
    ) {
        let row = SeenLease::new(
            partition,
            record.clone(),
            version,
            first_seen,
            &mut self.aside,
        );
        self.tally.add(&row);
        match self.position(partition) {
            Ok(index) => {
                let old = &self.rows[index];
                if !old.forgotten {
                    self.tally.remove(old);
                }
                self.epochs.seen(partition, Some(old.epoch), row.epoch);
                self.rows[index] = row
            }
            Err(index) => {
                self.epochs.seen(partition, None, row.epoch);
                self.rows.insert(index, row)
            }
        }
        self.retally_if_due();
    }

    /// Makes the sums again from the rows if enough changes were folded into them.
    fn retally_if_due(&mut self) {
        if self.tally.due(self.rows.len()) {
            self.tally = LoadTally::of(self.iter());
        }
    }

    /// Leaves `partition` out until a listing shows it again, as if never seen: its wait
    /// starts over from that sighting. For a row that changed in a way this node did not
    /// see, such as a conditional write that lost or whose reply never came.
    pub fn forget(&mut self, partition: PartitionId) {
        if let Ok(index) = self.position(partition) {
            let row = &mut self.rows[index];
            if !row.forgotten {
                self.tally.remove(row);
                row.forgotten = true;
            }
        }
    }

    fn position(&self, partition: PartitionId) -> Result<usize, usize> {
        self.rows
            .binary_search_by_key(&partition, |row| row.partition)
    }

    /// Replaces the view with a listing received at `now`, keeping `first_seen` for rows
    /// whose version did not change.
    ///
    /// Rows are updated in place while the listing's keys line up with the view's, as they
    /// do on every listing but the first and those after the table's size changed; the rest
    /// is merged side by side. Every node folds in the whole table on every listing, so this
    /// is the participant's hottest loop.
    pub fn merge(&mut self, now: Instant, mut records: Vec<Stored<PartitionId, LeaseRecord>>) {
        crate::record::in_key_order(&mut records);
        self.merge_aligned(now, records);
        self.retally_if_due();
    }

    /// [`LeaseView::merge`] of a listing in key order.
    fn merge_aligned(&mut self, now: Instant, records: Vec<Stored<PartitionId, LeaseRecord>>) {
        let aside = &mut self.aside;
        let epochs = &mut self.epochs;
        let tally = &mut self.tally;
        let mut records = records.into_iter();
        let mut aligned = 0;
        for stored in records.by_ref() {
            let Some(row) = self.rows.get_mut(aligned) else {
                // The listing is longer than the view (on a first listing, all of it): the
                // rest is new.
                self.rows.reserve_exact(1 + records.len());
                let new = std::iter::once(stored).chain(records.by_ref());
                self.rows.extend(new.map(|stored| {
                    epochs.seen(stored.key, None, stored.value.epoch);
                    let row = SeenLease::new(stored.key, stored.value, stored.version, now, aside);
                    tally.add(&row);
                    row
                }));
                return;
            };
            if row.partition != stored.key {
                // Keys no longer line up: merge the rest of both.
                let old = self.rows.split_off(aligned);
                self.merge_unaligned(now, old, std::iter::once(stored).chain(records));
                return;
            }
            if row.forgotten || row.version != stored.version {
                epochs.seen(stored.key, Some(row.epoch), stored.value.epoch);
                if !row.forgotten {
                    tally.remove(row);
                }
                *row = SeenLease::new(stored.key, stored.value, stored.version, now, aside);
                tally.add(row);
            }
            aligned += 1;
        }
        for vanished in self.rows.drain(aligned..) {
            epochs.vanished(&vanished);
            aside.vanished(&vanished);
            if !vanished.forgotten {
                tally.remove(&vanished);
            }
        }
    }

    /// Appends to the view the merge of `old` rows (sorted) with `records` (sorted, unique).
    fn merge_unaligned(
        &mut self,
        now: Instant,
        old: Vec<SeenLease>,
        records: impl Iterator<Item = Stored<PartitionId, LeaseRecord>>,
    ) {
        self.rows.reserve(records.size_hint().0);
        let aside = &mut self.aside;
        let epochs = &mut self.epochs;
        let mut old = old.into_iter().peekable();
        let vanish = |row: SeenLease, aside: &mut Aside, epochs: &mut EpochMemory| {
            epochs.vanished(&row);
            aside.vanished(&row);
        };
        for stored in records {
            while let Some(row) = old.next_if(|row| row.partition < stored.key) {
                vanish(row, aside, epochs);
            }
            let before = match old.next_if(|row| row.partition == stored.key) {
                Some(row) if !row.forgotten && row.version == stored.version => {
                    self.rows.push(row);
                    continue;
                }
                Some(row) => Some(row.epoch),
                None => None,
            };
            epochs.seen(stored.key, before, stored.value.epoch);
            let row = SeenLease::new(stored.key, stored.value, stored.version, now, aside);
            self.rows.push(row);
        }
        for row in old {
            vanish(row, aside, epochs);
        }
        // Rare (a first listing, a table that changed size): the sums are made again.
        self.tally = LoadTally::of(self.iter());
    }
}

#[cfg(test)]
mod tests;
