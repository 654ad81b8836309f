//! What a change watcher last saw of one group's rows, and the hints that name what changed.
//!
//! `PRAGMA data_version` says only that another connection committed something to the file:
//! to any group, to a group record, or a renewal. Comparing each lease's version and state,
//! and each member's version, with the last look turns that into the hints other stores
//! send: nothing for commits elsewhere, [`Change::LeaseWritten`] with the held state for a
//! renewal (which a participant ignores), and the record's name for the rest. So the watcher
//! wakes a scan only when a scan could find something.

use std::cmp::Ordering;
use std::path::Path;
use std::time::Duration;

use leasehold::{Change, GroupName, LeaseState, NodeId, PartitionId, StoreError};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::error::Context;

const DATA_VERSION: &str = "PRAGMA data_version";
const LEASE_STAMPS: &str =
    "SELECT partition, version, state FROM leases WHERE grp = ?1 ORDER BY partition";
const MEMBER_STAMPS: &str = "SELECT node, version FROM members WHERE grp = ?1 ORDER BY node";

/// A lease row as far as hints go: every write through the store changes the version, and a
/// hand edit may change the state alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LeaseStamp {
    version: Option<i64>,
    state: Option<LeaseState>,
}

/// The rows of one group, each reduced to what tells a change, ordered by key.
#[derive(Debug, Default, Clone, PartialEq)]
struct GroupRows {
    leases: Vec<(PartitionId, LeaseStamp)>,
    members: Vec<(String, Option<i64>)>,
}

fn integer(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(value) => Some(value),
        _ => None,
    }
}

fn text(value: ValueRef<'_>) -> Option<&str> {
    match value {
        ValueRef::Text(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

impl GroupRows {
    /// Reads the group's rows. A row whose key a hint cannot carry (a partition that is not
    /// a `u32`, a node that is not text) is left out: listings report it as corrupt, and a
    /// scan prompted by anything else will show it.
    fn read(connection: &Connection, group: &GroupName) -> rusqlite::Result<GroupRows> {
        let mut leases = Vec::new();
        let mut statement = connection.prepare_cached(LEASE_STAMPS)?;
        let mut rows = statement.query([group.as_str()])?;
        while let Some(row) = rows.next()? {
            let Some(partition) = integer(row.get_ref(0)?).and_then(|p| u32::try_from(p).ok())
            else {
                continue;
            };
            let stamp = LeaseStamp {
                version: integer(row.get_ref(1)?),
                state: text(row.get_ref(2)?).and_then(LeaseState::parse),
            };
            leases.push((PartitionId(partition), stamp));
        }
        let mut members = Vec::new();
        let mut statement = connection.prepare_cached(MEMBER_STAMPS)?;
        let mut rows = statement.query([group.as_str()])?;
        while let Some(row) = rows.next()? {
            if let Some(node) = text(row.get_ref(0)?) {
                members.push((node.to_owned(), integer(row.get_ref(1)?)));
            }
        }
        // SQLite's order already is Rust's for these keys; the merge below depends on it.
        leases.sort_unstable_by_key(|(partition, _)| *partition);
        members.sort_unstable();
        Ok(GroupRows { leases, members })
    }

    /// The hints that take a reader from `before` to `self`.
    fn changes_since(&self, before: &GroupRows) -> Vec<Change> {
        let mut changes = Vec::new();
        merge(&before.leases, &self.leases, |partition, _, now| {
            changes.push(match now.and_then(|stamp| stamp.state) {
                Some(state) => Change::LeaseWritten {
                    partition: *partition,
                    state,
                },
                // Deleted, or a state no one can read: the reader must look for itself.
                None => Change::Lease(*partition),
            });
        });
        merge(&before.members, &self.members, |node, was, now| {
            changes.push(match NodeId::new(node.as_str()) {
                Ok(node) if was.is_some() && now.is_some() => Change::MemberUpdated(node),
                Ok(node) => Change::Member(node),
                Err(_) => Change::Unknown,
            });
        });
        changes
    }
}

/// Calls `changed(key, before, after)` for each key whose value differs between two lists
/// ordered by key, `None` standing for a row absent on that side.
fn merge<K: Ord, V: PartialEq>(
    before: &[(K, V)],
    after: &[(K, V)],
    mut changed: impl FnMut(&K, Option<&V>, Option<&V>),
) {
    let (mut old, mut new) = (before.iter().peekable(), after.iter().peekable());
    loop {
        let order = match (old.peek(), new.peek()) {
            (None, None) => return,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((was_key, _)), Some((key, _))) => was_key.cmp(key),
        };
        match order {
            Ordering::Less => {
                if let Some((key, was)) = old.next() {
                    changed(key, Some(was), None);
                }
            }
            Ordering::Greater => {
                if let Some((key, now)) = new.next() {
                    changed(key, None, Some(now));
                }
            }
            Ordering::Equal => {
                if let (Some((key, was)), Some((_, now))) = (old.next(), new.next()) {
                    if was != now {
                        changed(key, Some(was), Some(now));
                    }
                }
            }
        }
    }
}

/// One group of one file watched through a read-only connection of its own.
///
/// The connection is opened read-only, so it can never write: `data_version` moves only for
/// other connections' commits, and a commit of this watcher's own would go unseen.
pub(crate) struct GroupWatch {
    connection: Connection,
    group: GroupName,
    context: String,
    data_version: i64,
    rows: GroupRows,
}

impl std::fmt::Debug for GroupWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWatch")
            .field("context", &self.context)
            .field("data_version", &self.data_version)
            .finish_non_exhaustive()
    }
}

impl GroupWatch {
    /// Opens `path` read-only and takes the first look at `group`: every commit after this
    /// returns is reported by [`GroupWatch::changes`].
    pub(crate) fn open(
        path: &Path,
        group: &GroupName,
        busy_timeout: Duration,
    ) -> Result<GroupWatch, StoreError> {
        let context = format!("watching group {group} in {}", path.display());
        // No CREATE flag: the store has created the file, and a watcher must not make one.
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut connection = Connection::open_with_flags(path, flags).context(&context)?;
        connection.busy_timeout(busy_timeout).context(&context)?;
        let (data_version, rows) = look(&mut connection, group).context(&context)?;
        Ok(GroupWatch {
            connection,
            group: group.clone(),
            context,
            data_version,
            rows,
        })
    }

    /// The hints for what changed in the group since the last look; none, after a check that
    /// costs microseconds, when no other connection has committed to the file since.
    pub(crate) fn changes(&mut self) -> Result<Vec<Change>, StoreError> {
        let data_version: i64 = self
            .connection
            .prepare_cached(DATA_VERSION)
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .context(&self.context)?;
        if data_version == self.data_version {
            return Ok(Vec::new());
        }
        let (data_version, rows) =
            look(&mut self.connection, &self.group).context(&self.context)?;
        let changes = rows.changes_since(&self.rows);
        self.data_version = data_version;
        self.rows = rows;
        Ok(changes)
    }
}

/// Reads `data_version` and the group's rows from one snapshot, so a commit that lands
/// between them is counted as not yet seen.
fn look(connection: &mut Connection, group: &GroupName) -> rusqlite::Result<(i64, GroupRows)> {
    let transaction = connection.transaction()?;
    let data_version = transaction.query_row(DATA_VERSION, [], |row| row.get(0))?;
    let rows = GroupRows::read(&transaction, group)?;
    transaction.commit()?;
    Ok((data_version, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(partition: u32, version: i64, state: Option<LeaseState>) -> (PartitionId, LeaseStamp) {
        let stamp = LeaseStamp {
            version: Some(version),
            state,
        };
        (PartitionId(partition), stamp)
    }

    fn member(name: &str, version: i64) -> (String, Option<i64>) {
        (name.to_owned(), Some(version))
    }

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    #[test]
    fn each_difference_is_named_with_what_is_known() {
        let before = GroupRows {
            leases: vec![
                lease(1, 10, Some(LeaseState::Held)),
                lease(2, 11, Some(LeaseState::Held)),
                lease(3, 12, Some(LeaseState::Held)),
                lease(5, 13, Some(LeaseState::Held)),
            ],
            members: vec![member("a", 20), member("b", 21), member("c", 22)],
        };
        let after = GroupRows {
            leases: vec![
                lease(0, 30, Some(LeaseState::Released)),
                lease(1, 10, Some(LeaseState::Held)),
                lease(2, 31, Some(LeaseState::Held)),
                lease(3, 12, None),
                lease(4, 32, Some(LeaseState::Offline)),
            ],
            members: vec![member("a", 20), member("b", 33), member("d", 34)],
        };
        assert_eq!(
            after.changes_since(&before),
            vec![
                Change::LeaseWritten {
                    partition: PartitionId(0),
                    state: LeaseState::Released
                },
                Change::LeaseWritten {
                    partition: PartitionId(2),
                    state: LeaseState::Held
                },
                // A state edited by hand to something unreadable, version untouched.
                Change::Lease(PartitionId(3)),
                Change::LeaseWritten {
                    partition: PartitionId(4),
                    state: LeaseState::Offline
                },
                Change::Lease(PartitionId(5)),
                Change::MemberUpdated(node("b")),
                Change::Member(node("c")),
                Change::Member(node("d")),
            ]
        );
    }

    #[test]
    fn the_same_rows_give_no_hint_and_a_bad_node_name_an_unknown_one() {
        let rows = GroupRows {
            leases: vec![lease(1, 10, Some(LeaseState::Held))],
            members: vec![member("a", 20)],
        };
        assert!(rows.changes_since(&rows.clone()).is_empty());
        let with_bad_name = GroupRows {
            members: vec![member("a", 20), member("bad name", 21)],
            ..rows.clone()
        };
        assert_eq!(with_bad_name.changes_since(&rows), vec![Change::Unknown]);
        assert_eq!(
            GroupRows::default().changes_since(&rows),
            vec![Change::Lease(PartitionId(1)), Change::Member(node("a"))]
        );
    }
}
