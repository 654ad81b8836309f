//! What the lease rows add up to, kept as rows change. Balancing by load reads the fleet's
//! total load and each member's on every plan; summing them from the rows costs a walk of
//! the whole table with a lookup per held row, on every scan of every node — at a thousand
//! nodes on 65,536 partitions, hours of work per simulated hour. Kept up to date as the view
//! changes, they cost a lookup per changed row, and reading them one per member.

use std::collections::HashMap;

use crate::record::LeaseState;
use crate::types::NodeId;

use super::SeenLease;

/// One holder's share of the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnerTally {
    /// The loads its held rows report.
    pub load: f64,
    /// How many of its held rows report no load (or one that is not a finite, non-negative
    /// number).
    pub unreported: u32,
    /// How many rows it holds.
    pub held: u32,
}

impl OwnerTally {
    fn is_empty(&self) -> bool {
        self.held == 0 && self.unreported == 0
    }
}

/// The table's sums: over rows that are not offline, and per holder of held rows.
#[derive(Debug, Clone, Default)]
pub struct LoadTally {
    /// The loads reported by rows that are not offline.
    pub known: f64,
    /// How many rows that are not offline report a load.
    pub reported: u32,
    /// How many rows that are not offline report none.
    pub unknown: u32,
    /// Per holder. Looked up, never walked: the order of a hash map does not matter.
    by_owner: HashMap<NodeId, OwnerTally>,
    /// Changes folded in since the sums were last made from scratch: additions and
    /// subtractions of floating-point loads can drift, so they are remade now and then.
    changes: usize,
}

/// The load a row reports, if it is one balancing can use.
pub fn usable_load(row: &SeenLease) -> Option<f64> {
    row.load()
        .map(f64::from)
        .filter(|load| load.is_finite() && *load >= 0.0)
}

impl LoadTally {
    /// The sums of `rows` (those not forgotten), from scratch.
    pub fn of<'a>(rows: impl Iterator<Item = &'a SeenLease>) -> LoadTally {
        let mut tally = LoadTally::default();
        for row in rows {
            tally.fold(row, 1);
        }
        tally.changes = 0;
        tally
    }

    /// `holder`'s share.
    pub fn owner(&self, holder: &NodeId) -> OwnerTally {
        self.by_owner.get(holder).copied().unwrap_or_default()
    }

    /// Every node holding a row, in no particular order.
    pub fn owners(&self) -> impl Iterator<Item = &NodeId> + '_ {
        self.by_owner.keys()
    }

    /// Folds in a row the view gained.
    pub fn add(&mut self, row: &SeenLease) {
        self.fold(row, 1);
    }

    /// Takes out a row the view lost (or is about to replace).
    pub fn remove(&mut self, row: &SeenLease) {
        self.fold(row, -1);
    }

    /// Whether enough changes were folded in since the sums were made, for `rows` rows, that
    /// they should be made again: amortised, a constant cost per change.
    pub fn due(&self, rows: usize) -> bool {
        self.changes > 4 * rows + 1024
    }

    fn fold(&mut self, row: &SeenLease, sign: i8) {
        self.changes += 1;
        if row.state == LeaseState::Offline {
            return;
        }
        let load = usable_load(row);
        let step = |count: &mut u32| {
            *count = if sign > 0 {
                count.saturating_add(1)
            } else {
                count.saturating_sub(1)
            }
        };
        match load {
            Some(load) => {
                self.known += f64::from(sign) * load;
                step(&mut self.reported);
            }
            None => step(&mut self.unknown),
        }
        let (LeaseState::Held, Some(owner)) = (row.state, &row.owner) else {
            return;
        };
        if sign < 0 && !self.by_owner.contains_key(owner) {
            return;
        }
        let entry = self.by_owner.entry(owner.clone()).or_default();
        step(&mut entry.held);
        match load {
            Some(load) => entry.load += f64::from(sign) * load,
            None => step(&mut entry.unreported),
        }
        if entry.is_empty() {
            self.by_owner.remove(owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tokio::time::Instant;

    use super::*;
    use crate::planner::LeaseView;
    use crate::record::{LeaseRecord, Stored};
    use crate::types::{Epoch, PartitionId, Version};

    /// One change to a view: a listing of some rows, a write of one, or a row forgotten.
    #[derive(Debug, Clone)]
    enum Change {
        List(Vec<(u32, u8, u8, Option<u8>)>),
        Insert(u32, u8, u8, Option<u8>),
        Forget(u32),
    }

    fn record(state: u8, owner: u8, load: Option<u8>) -> LeaseRecord {
        let owner = NodeId::new(format!("n{owner}")).unwrap();
        let load = load.map(|l| match l {
            // Loads no balancing can use: counted as unreported.
            0 => f64::NAN,
            1 => -1.0,
            l => f64::from(l) / 8.0,
        });
        match state % 3 {
            0 => LeaseRecord {
                load,
                previous_owner: Some(owner),
                ..LeaseRecord::released()
            },
            1 => LeaseRecord {
                owner: None,
                state: LeaseState::Offline,
                load,
                ..LeaseRecord::default()
            },
            _ => LeaseRecord {
                owner: Some(owner),
                epoch: Epoch(1),
                state: LeaseState::Held,
                load,
                ..LeaseRecord::default()
            },
        }
    }

    fn change() -> impl Strategy<Value = Change> {
        let row = (
            0u32..24,
            any::<u8>(),
            0u8..4,
            proptest::option::of(any::<u8>()),
        );
        prop_oneof![
            proptest::collection::vec(row.clone(), 0..24).prop_map(Change::List),
            row.prop_map(|(p, s, o, l)| Change::Insert(p, s, o, l)),
            (0u32..24).prop_map(Change::Forget),
        ]
    }

    fn same(kept: &LoadTally, made: &LoadTally) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        close(kept.known, made.known)
            && kept.reported == made.reported
            && kept.unknown == made.unknown
            && (0..4).all(|o| {
                let node = NodeId::new(format!("n{o}")).unwrap();
                let (a, b) = (kept.owner(&node), made.owner(&node));
                close(a.load, b.load) && a.unreported == b.unreported && a.held == b.held
            })
    }

    /// The sums of `rows` counted afresh, without [`LoadTally`] or [`usable_load`], so that a
    /// mistake in either shows: loads usable when finite and not negative, offline rows left
    /// out, and per holder of held rows.
    fn counted<'a>(rows: impl Iterator<Item = &'a SeenLease>) -> LoadTally {
        let mut tally = LoadTally::default();
        for row in rows.filter(|row| row.state != LeaseState::Offline) {
            let load = row
                .load()
                .map(f64::from)
                .filter(|l| l.is_finite() && *l >= 0.0);
            match load {
                Some(load) => {
                    tally.known += load;
                    tally.reported += 1;
                }
                None => tally.unknown += 1,
            }
            if let (LeaseState::Held, Some(owner)) = (row.state, &row.owner) {
                let entry = tally.by_owner.entry(owner.clone()).or_default();
                entry.held += 1;
                match load {
                    Some(load) => entry.load += load,
                    None => entry.unreported += 1,
                }
            }
        }
        tally
    }

    fn owners(tally: &LoadTally) -> std::collections::BTreeSet<&NodeId> {
        tally.owners().collect()
    }

    proptest! {
        /// Fails if the sums kept as rows change ever differ from the sums of the rows:
        /// balancing would read loads and holders that are not in the table. The sums are
        /// checked against the rows counted afresh, and against [`LoadTally::of`], which
        /// counts them as the kept sums do; the holders listed are those holding rows.
        #[test]
        fn kept_sums_are_the_sums_of_the_rows(changes in proptest::collection::vec(change(), 1..40)) {
            let now = Instant::now();
            let mut view = LeaseView::default();
            let mut version = 0u64;
            for change in changes {
                version += 1;
                match change {
                    Change::List(rows) => {
                        let records = rows
                            .into_iter()
                            .map(|(p, s, o, l)| Stored {
                                key: PartitionId(p),
                                value: record(s, o, l),
                                // Some versions repeat: those rows are left as they were.
                                version: Version::from_number(u64::from(s % 2) * version + 1),
                            })
                            .collect();
                        view.merge(now, records);
                    }
                    Change::Insert(p, s, o, l) => {
                        view.insert(PartitionId(p), &record(s, o, l), Version::from_number(version), now);
                    }
                    Change::Forget(p) => view.forget(PartitionId(p)),
                }
                let made = LoadTally::of(view.iter());
                prop_assert!(same(view.tally(), &made), "{:?} != {:?}", view.tally(), made);
                let counted = counted(view.iter());
                prop_assert!(same(&made, &counted), "{:?} != {:?}", made, counted);
                prop_assert_eq!(owners(view.tally()), owners(&counted));
            }
        }
    }
}
