//! The SQL of each store call, run on a connection in a blocking thread.
//!
//! Every write runs inside `BEGIN IMMEDIATE`, which takes SQLite's write lock before the
//! first read: the version check and the write that depends on it cannot interleave with any
//! other writer, in this process or another.

use leasehold::{
    GroupName, Listing, NodeId, PartitionId, PutMode, RecordKey, StoreError, Stored, StoredGroup,
    StoredLease, StoredMember, Version,
};
use rusqlite::types::ValueRef;
use rusqlite::{
    params, Connection, OptionalExtension, Params, Row, Transaction, TransactionBehavior,
};

use crate::error::Context;
use crate::rows::{
    decode_group, decode_lease, decode_member, decode_version, group_columns, lease_columns,
    member_columns, LeaseRow, MemberRow, RecordWrite,
};

const LIST_LEASES: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM leases WHERE grp = ?1 ORDER BY partition"
);
const GET_LEASE: &str = concat!(
    "SELECT ",
    lease_columns!(),
    " FROM leases WHERE grp = ?1 AND partition = ?2"
);
const LEASE_VERSION: &str = "SELECT version FROM leases WHERE grp = ?1 AND partition = ?2";
const INSERT_LEASE: &str = "INSERT INTO leases (grp, partition, owner, epoch, state, \
     prohibited, load, note, written_at_unix_ms, version, previous_owner, handed_to, session) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const UPDATE_LEASE: &str = "UPDATE leases SET owner = ?3, epoch = ?4, state = ?5, \
     prohibited = ?6, load = ?7, note = ?8, written_at_unix_ms = ?9, version = ?10, \
     previous_owner = ?11, handed_to = ?12, session = ?13 WHERE grp = ?1 AND partition = ?2";
const DELETE_LEASE: &str = "DELETE FROM leases WHERE grp = ?1 AND partition = ?2";

const LIST_MEMBERS: &str = concat!(
    "SELECT ",
    member_columns!(),
    " FROM members WHERE grp = ?1 ORDER BY node"
);
const GET_MEMBER: &str = concat!(
    "SELECT ",
    member_columns!(),
    " FROM members WHERE grp = ?1 AND node = ?2"
);
const MEMBER_VERSION: &str = "SELECT version FROM members WHERE grp = ?1 AND node = ?2";
const INSERT_MEMBER: &str = "INSERT INTO members (grp, node, weight, draining, load, \
     heartbeat, written_at_unix_ms, lease_validity_ns, acquire_after_ns, version, capacity, \
     max_load, max_partitions, address, metadata, session, replaced) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)";
const UPDATE_MEMBER: &str = "UPDATE members SET weight = ?3, draining = ?4, load = ?5, \
     heartbeat = ?6, written_at_unix_ms = ?7, lease_validity_ns = ?8, acquire_after_ns = ?9, \
     version = ?10, capacity = ?11, max_load = ?12, max_partitions = ?13, address = ?14, \
     metadata = ?15, session = ?16, replaced = ?17 WHERE grp = ?1 AND node = ?2";
const DELETE_MEMBER: &str = "DELETE FROM members WHERE grp = ?1 AND node = ?2";

const GET_GROUP: &str = concat!("SELECT ", group_columns!(), " FROM groups WHERE grp = ?1");
const GROUP_VERSION: &str = "SELECT version FROM groups WHERE grp = ?1";
const INSERT_GROUP: &str = "INSERT INTO groups (grp, record, version) VALUES (?1, ?2, ?3)";
const UPDATE_GROUP: &str = "UPDATE groups SET record = ?2, version = ?3 WHERE grp = ?1";

// One counter for every record of every group: a version is never handed out twice, so a
// record deleted and created again can never repeat a version someone still holds.
const TAKE_VERSION: &str =
    "UPDATE meta SET value = value + 1 WHERE key = 'next_version' RETURNING value - 1";

type Decode<T> = fn(&Row<'_>) -> Result<T, StoreError>;

fn list<T>(
    connection: &Connection,
    sql: &str,
    group: &GroupName,
    decode: Decode<T>,
) -> Result<Listing<T>, StoreError> {
    let context = format!("listing records of group {group}");
    let mut statement = connection.prepare_cached(sql).context(&context)?;
    let mut rows = statement.query([group.as_str()]).context(&context)?;
    let mut listing = Listing::default();
    while let Some(row) = rows.next().context(&context)? {
        match decode(row) {
            Ok(record) => listing.records.push(record),
            Err(error) => listing.corrupt.push(error),
        }
    }
    Ok(listing)
}

fn get<T>(
    connection: &Connection,
    sql: &str,
    key: impl Params,
    context: &str,
    decode: Decode<T>,
) -> Result<Option<T>, StoreError> {
    let mut statement = connection.prepare_cached(sql).context(context)?;
    let mut rows = statement.query(key).context(context)?;
    match rows.next().context(context)? {
        Some(row) => decode(row).map(Some),
        None => Ok(None),
    }
}

/// Every lease of `group`, ordered by partition, undecodable rows reported apart.
pub(crate) fn list_leases(
    connection: &Connection,
    group: &GroupName,
) -> Result<Listing<StoredLease>, StoreError> {
    list(connection, LIST_LEASES, group, decode_lease)
}

/// One lease, or `None`.
pub(crate) fn get_lease(
    connection: &Connection,
    group: &GroupName,
    partition: PartitionId,
) -> Result<Option<StoredLease>, StoreError> {
    let context = format!("reading {}", RecordKey::Lease(partition).in_group(group));
    let key = params![group.as_str(), partition.0];
    get(connection, GET_LEASE, key, &context, decode_lease)
}

/// Every member of `group`, ordered by node name, undecodable rows reported apart.
pub(crate) fn list_members(
    connection: &Connection,
    group: &GroupName,
) -> Result<Listing<StoredMember>, StoreError> {
    list(connection, LIST_MEMBERS, group, decode_member)
}

/// One member, or `None`.
pub(crate) fn get_member(
    connection: &Connection,
    group: &GroupName,
    node: &NodeId,
) -> Result<Option<StoredMember>, StoreError> {
    let context = format!("reading {}", RecordKey::from(node).in_group(group));
    let key = params![group.as_str(), node.as_str()];
    get(connection, GET_MEMBER, key, &context, decode_member)
}

/// The group record of `group`, or `None`.
pub(crate) fn get_group(
    connection: &Connection,
    group: &GroupName,
) -> Result<Option<StoredGroup>, StoreError> {
    let context = format!("reading {}", RecordKey::Group.in_group(group));
    let found = get(
        connection,
        GET_GROUP,
        [group.as_str()],
        &context,
        decode_group,
    )?;
    Ok(found.map(|(value, version)| Stored {
        key: group.clone(),
        value,
        version,
    }))
}

/// Runs `body` in a `BEGIN IMMEDIATE` transaction and commits what it did, unless it fails
/// with a transient error (SQLite itself failed), which rolls everything back.
///
/// A condition error (conflict, not found...) is a result, not a failure: what `body` wrote
/// before it is committed, which is what a batch with per-write results needs.
pub(crate) fn write<T>(
    connection: &mut Connection,
    context: &str,
    body: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(context)?;
    let result = body(&transaction);
    if let Err(error) = &result {
        if error.is_transient() {
            return result;
        }
    }
    transaction.commit().context(context)?;
    result
}

/// Runs `body` in a `BEGIN IMMEDIATE` transaction and commits only if it succeeds whole:
/// any error, a failed condition included, rolls back everything it wrote.
pub(crate) fn write_whole<T>(
    connection: &mut Connection,
    context: &str,
    body: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(context)?;
    // Returning early drops the transaction, which rolls it back; should that fail, the
    // pool sees the connection still inside a transaction and closes it, which does too.
    let value = body(&transaction)?;
    transaction.commit().context(context)?;
    Ok(value)
}

/// The version a row holds now: `None` if there is no row, `Some(None)` if its version
/// column cannot be read (no expected version matches it).
type CurrentVersion = Option<Option<i64>>;

fn current_version(
    transaction: &Transaction<'_>,
    sql: &str,
    key: impl Params,
    context: &str,
) -> Result<CurrentVersion, StoreError> {
    let mut statement = transaction.prepare_cached(sql).context(context)?;
    statement
        .query_row(key, |row| {
            Ok(match row.get_ref(0)? {
                ValueRef::Integer(version) => Some(version),
                _ => None,
            })
        })
        .optional()
        .context(context)
}

fn check_condition(
    current: CurrentVersion,
    mode: &PutMode,
    key: impl FnOnce() -> RecordKey,
) -> Result<(), StoreError> {
    match (current, mode) {
        (Some(_), PutMode::Create) => Err(StoreError::AlreadyExists { key: key() }),
        (None, PutMode::Update(_)) => Err(StoreError::NotFound { key: key() }),
        (Some(found), PutMode::Update(expected)) => {
            let expected = expected.as_number().and_then(|n| i64::try_from(n).ok());
            if found.is_some() && found == expected {
                Ok(())
            } else {
                Err(StoreError::Conflict { key: key() })
            }
        }
        (None, PutMode::Create) => Ok(()),
    }
}

/// Takes the next version from the counter, in the caller's transaction.
fn take_version(transaction: &Transaction<'_>, current: CurrentVersion) -> Result<i64, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        key: RecordKey::Stored("meta/next_version".to_owned()),
        reason,
    };
    let mut statement = transaction
        .prepare_cached(TAKE_VERSION)
        .context("taking a version from the counter")?;
    let taken = statement
        .query_row([], |row| row.get_ref(0).map(|value| value.as_i64().ok()))
        .optional()
        .context("taking a version from the counter")?
        .ok_or_else(|| corrupt("the version counter row is missing".to_owned()))?
        .ok_or_else(|| corrupt("the version counter is not an integer".to_owned()))?;
    decode_version(taken).map_err(corrupt)?;
    // A counter set back by hand would hand out versions again; refuse rather than reuse.
    if let Some(Some(found)) = current {
        if taken <= found {
            return Err(corrupt(format!(
                "the version counter ({taken}) is behind a stored version ({found})"
            )));
        }
    }
    Ok(taken)
}

fn changed_one_row(changed: usize, context: &str) -> Result<(), StoreError> {
    // The write lock is held since the version was read, so the row cannot have moved.
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "{context} changed {changed} rows instead of one"
        )))
    }
}

/// Writes one lease under `mode`, in the caller's transaction.
pub(crate) fn put_lease(
    transaction: &Transaction<'_>,
    group: &GroupName,
    partition: PartitionId,
    row: &LeaseRow,
    mode: &PutMode,
) -> Result<Version, StoreError> {
    let key = RecordKey::Lease(partition);
    let context = format!("writing {}", key.in_group(group));
    let lookup = params![group.as_str(), partition.0];
    let current = current_version(transaction, LEASE_VERSION, lookup, &context)?;
    check_condition(current, mode, || key)?;
    let version = take_version(transaction, current)?;
    let sql = if current.is_some() {
        UPDATE_LEASE
    } else {
        INSERT_LEASE
    };
    let changed = transaction
        .prepare_cached(sql)
        .context(&context)?
        .execute(params![
            group.as_str(),
            partition.0,
            row.owner,
            row.epoch,
            row.state,
            row.prohibited,
            row.load,
            row.note,
            row.written_at_unix_ms,
            version,
            row.previous_owner,
            row.handed_to,
            row.session,
        ])
        .context(&context)?;
    changed_one_row(changed, &context)?;
    decode_version(version).map_err(StoreError::Invalid)
}

/// Writes one member under `mode`, in the caller's transaction.
pub(crate) fn put_member(
    transaction: &Transaction<'_>,
    group: &GroupName,
    node: &NodeId,
    row: &MemberRow,
    mode: &PutMode,
) -> Result<Version, StoreError> {
    let key = RecordKey::from(node);
    let context = format!("writing {}", key.in_group(group));
    let lookup = params![group.as_str(), node.as_str()];
    let current = current_version(transaction, MEMBER_VERSION, lookup, &context)?;
    check_condition(current, mode, || key)?;
    let version = take_version(transaction, current)?;
    let sql = if current.is_some() {
        UPDATE_MEMBER
    } else {
        INSERT_MEMBER
    };
    let changed = transaction
        .prepare_cached(sql)
        .context(&context)?
        .execute(params![
            group.as_str(),
            node.as_str(),
            row.weight,
            row.draining,
            row.load,
            row.heartbeat,
            row.written_at_unix_ms,
            row.lease_validity_ns,
            row.acquire_after_ns,
            version,
            row.capacity,
            row.max_load,
            row.max_partitions,
            row.address,
            row.metadata,
            row.session,
            row.replaced,
        ])
        .context(&context)?;
    changed_one_row(changed, &context)?;
    decode_version(version).map_err(StoreError::Invalid)
}

/// Applies `writes` in order, each as the single write of its record would be, in the
/// caller's transaction, stopping at the first that fails: run it in [`write_whole`], so
/// that then none of them is applied.
pub(crate) fn transact(
    transaction: &Transaction<'_>,
    group: &GroupName,
    writes: &[RecordWrite],
) -> Result<Vec<Version>, StoreError> {
    writes
        .iter()
        .map(|write| match write {
            RecordWrite::Lease {
                partition,
                row,
                mode,
            } => put_lease(transaction, group, *partition, row, mode),
            RecordWrite::Member { node, row, mode } => {
                put_member(transaction, group, node, row, mode)
            }
        })
        .collect()
}

/// Writes the group record of `group` (its JSON text) under `mode`, in the caller's
/// transaction.
pub(crate) fn put_group(
    transaction: &Transaction<'_>,
    group: &GroupName,
    record: &str,
    mode: &PutMode,
) -> Result<Version, StoreError> {
    let context = format!("writing {}", RecordKey::Group.in_group(group));
    let current = current_version(transaction, GROUP_VERSION, [group.as_str()], &context)?;
    check_condition(current, mode, || RecordKey::Group)?;
    let version = take_version(transaction, current)?;
    let sql = if current.is_some() {
        UPDATE_GROUP
    } else {
        INSERT_GROUP
    };
    let changed = transaction
        .prepare_cached(sql)
        .context(&context)?
        .execute(params![group.as_str(), record, version])
        .context(&context)?;
    changed_one_row(changed, &context)?;
    decode_version(version).map_err(StoreError::Invalid)
}

/// Deletes one lease if its version is `version`, in the caller's transaction.
pub(crate) fn delete_lease(
    transaction: &Transaction<'_>,
    group: &GroupName,
    partition: PartitionId,
    version: &Version,
) -> Result<(), StoreError> {
    let key = RecordKey::Lease(partition);
    let context = format!("deleting {}", key.in_group(group));
    let lookup = params![group.as_str(), partition.0];
    let current = current_version(transaction, LEASE_VERSION, lookup, &context)?;
    check_condition(current, &PutMode::Update(version.clone()), || key)?;
    let changed = transaction
        .prepare_cached(DELETE_LEASE)
        .context(&context)?
        .execute(lookup)
        .context(&context)?;
    changed_one_row(changed, &context)
}

/// Deletes one member if its version is `version`, in the caller's transaction.
pub(crate) fn delete_member(
    transaction: &Transaction<'_>,
    group: &GroupName,
    node: &NodeId,
    version: &Version,
) -> Result<(), StoreError> {
    let key = RecordKey::from(node);
    let context = format!("deleting {}", key.in_group(group));
    let lookup = params![group.as_str(), node.as_str()];
    let current = current_version(transaction, MEMBER_VERSION, lookup, &context)?;
    check_condition(current, &PutMode::Update(version.clone()), || key)?;
    let changed = transaction
        .prepare_cached(DELETE_MEMBER)
        .context(&context)?
        .execute(lookup)
        .context(&context)?;
    changed_one_row(changed, &context)
}
