//! The lease rows of a read: each partition's cell, and the ownership changes since the read
//! before.

use leasehold::LeaseState;
use tokio::time::Instant;

use super::{Cell, PendingChange, Reading, Tracker, Update};

impl Tracker {
    /// Takes in the lease records of `reading` (and the partitions with none), records the
    /// changes since the read before unless this is the `first`, and returns the count of
    /// corrupt records and of epochs seen going back.
    pub(super) fn apply_leases(
        &mut self,
        reading: &Reading,
        update: &mut Update,
        first: bool,
    ) -> (u64, u64) {
        let now = reading.at;
        let unix_ms = reading.unix_ms;
        let expected = reading.expected.max(reading.leases.partition_count());
        if expected as usize != self.cells.len() {
            update.reshaped = true;
            self.cells.resize(expected as usize, Cell::missing(now));
        }

        // Lease records, then partitions with none.
        let mut present = vec![false; self.cells.len()];
        let mut corrupt = 0u64;
        for error in &reading.leases.corrupt {
            corrupt += 1;
            if let Some(partition) = error.key().and_then(|key| key.partition()) {
                if let Some(flag) = present.get_mut(partition.0 as usize) {
                    *flag = true;
                }
                self.set_cell(update, partition.0, corrupt_cell(now));
            }
        }
        let mut epochs_back = 0;
        let mut pending = Vec::new();
        for lease in &reading.leases.records {
            let p = lease.key.0;
            let Some(flag) = present.get_mut(p as usize) else {
                continue;
            };
            *flag = true;
            let record = &lease.value;
            // A released record names an owner only while it is reserved for that node's
            // restart in place: the map frames the cell in its colour.
            let reserved_for = record.reserved_for();
            let owner = match record.state {
                LeaseState::Released => reserved_for,
                _ => record.owner.as_ref(),
            }
            .map(|o| self.name_index(o.as_str()));
            let reserved_until_unix_ms = record
                .written_at_unix_ms
                .zip(reading.restart_window)
                .filter(|_| reserved_for.is_some())
                .map(|(at, window)| at.saturating_add(window.as_millis() as u64));
            let old = self.cells[p as usize].clone();
            let state = match record.state {
                LeaseState::Held => b'H',
                LeaseState::Released => b'R',
                LeaseState::Offline => b'O',
            };
            let kicked = record.note.as_deref() == Some("kicked");
            let changed_at = if old.version.as_ref() == Some(&lease.version) {
                old.changed_at
            } else {
                now
            };
            let cell = Cell {
                state,
                owner: owner.unwrap_or(-1),
                epoch: record.epoch.0,
                version: Some(lease.version.clone()),
                changed_at,
                prohibited: record.prohibited.clone(),
                kicked,
                session: record.session,
                reserved_until_unix_ms,
            };
            if !first && old.version.is_some() {
                if cell.epoch < old.epoch {
                    epochs_back += 1;
                }
                pending.extend(self.lease_changes(p, &old, &cell));
            }
            self.set_cell(update, p, cell);
        }
        for (p, seen) in present.iter().enumerate() {
            if !seen && self.cells[p].state != b'M' {
                self.set_cell(update, p as u32, Cell::missing(now));
            }
        }
        for change in pending {
            self.emit(update, unix_ms, change);
        }
        self.epochs_back_total += epochs_back;
        (corrupt, epochs_back)
    }

    fn lease_changes(&self, partition: u32, old: &Cell, new: &Cell) -> Vec<PendingChange> {
        let name = |index: i32| {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.names.get(i).cloned())
        };
        let mut changes = Vec::new();
        let lease = |kind, node: Option<String>, previous: Option<String>| PendingChange {
            kind,
            partition: Some(partition),
            node,
            previous,
            epoch: Some(new.epoch),
        };
        match (old.state, new.state) {
            (b'O', b'O') => {}
            (_, b'O') => changes.push(lease("offline", name(old.owner), None)),
            (b'O', _) => changes.push(lease("online", None, None)),
            _ => {}
        }
        if new.state == b'H' && new.epoch > old.epoch && new.owner >= 0 {
            let previous = (old.owner >= 0).then(|| name(old.owner)).flatten();
            if old.state == b'H' && old.owner >= 0 {
                changes.push(lease("lost", name(old.owner), None));
            }
            changes.push(lease("acquired", name(new.owner), previous));
        } else if old.state == b'H' && new.state == b'R' {
            changes.push(lease("released", name(old.owner), None));
        }
        if new.kicked && !old.kicked && new.epoch == old.epoch {
            changes.push(lease("kicked", name(new.owner), None));
        }
        for node in new
            .prohibited
            .iter()
            .filter(|n| !old.prohibited.contains(n))
        {
            changes.push(lease("prohibited", Some(node.to_string()), None));
        }
        for node in old
            .prohibited
            .iter()
            .filter(|n| !new.prohibited.contains(n))
        {
            changes.push(lease("allowed", Some(node.to_string()), None));
        }
        changes
    }
}

fn corrupt_cell(at: Instant) -> Cell {
    Cell {
        state: b'C',
        ..Cell::missing(at)
    }
}
