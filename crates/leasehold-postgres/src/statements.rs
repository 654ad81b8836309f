//! The statements of the store, prepared once per connection.

use leasehold::StoreError;
use tokio_postgres::{Client, Statement};

use crate::error::map_error;
use crate::schema::Names;

const LEASE_COLUMNS: &str = "partition, owner, epoch, state, prohibited, load, note, \
     written_at_unix_ms, previous_owner, handed_to, session, version";
const MEMBER_COLUMNS: &str = "node, weight, draining, load, heartbeat, written_at_unix_ms, \
     lease_validity_ns, acquire_after_ns, capacity, max_load, max_partitions, address, metadata, \
     session, replaced, version";
const GROUP_COLUMNS: &str = "record, version";

/// Every statement the store runs.
///
/// Conditional updates and deletes report in one reply whether they applied and whether the
/// row exists, which is what tells a conflict from a missing record without a second trip.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) list_leases: Statement,
    pub(crate) get_lease: Statement,
    pub(crate) get_leases: Statement,
    pub(crate) insert_lease: Statement,
    pub(crate) update_lease: Statement,
    pub(crate) delete_lease: Statement,
    pub(crate) list_members: Statement,
    pub(crate) get_member: Statement,
    pub(crate) insert_member: Statement,
    pub(crate) update_member: Statement,
    pub(crate) delete_member: Statement,
    pub(crate) get_group: Statement,
    pub(crate) insert_group: Statement,
    pub(crate) update_group: Statement,
}

impl Statements {
    pub(crate) async fn prepare(
        client: &Client,
        names: &Names,
        statement_timeout: std::time::Duration,
    ) -> Result<Statements, StoreError> {
        let texts = texts(names);
        let prepared =
            futures_util::future::try_join_all(texts.iter().map(|text| client.prepare(text)))
                .await
                .map_err(|e| map_error("prepare statements", statement_timeout, e))?;
        let mut prepared = prepared.into_iter();
        let mut next = || prepared.next().expect("one statement per text");
        Ok(Statements {
            list_leases: next(),
            get_lease: next(),
            get_leases: next(),
            insert_lease: next(),
            update_lease: next(),
            delete_lease: next(),
            list_members: next(),
            get_member: next(),
            insert_member: next(),
            update_member: next(),
            delete_member: next(),
            get_group: next(),
            insert_group: next(),
            update_group: next(),
        })
    }
}

/// The texts, in the order of the fields of [`Statements`].
fn texts(names: &Names) -> [String; 14] {
    let Names {
        leases,
        members,
        groups,
        sequence,
        ..
    } = names;
    [
        format!("SELECT {LEASE_COLUMNS} FROM {leases} WHERE grp = $1 ORDER BY partition"),
        format!("SELECT {LEASE_COLUMNS} FROM {leases} WHERE grp = $1 AND partition = $2"),
        format!("SELECT {LEASE_COLUMNS} FROM {leases} WHERE grp = $1 AND partition = ANY($2)"),
        format!(
            "INSERT INTO {leases} (grp, {LEASE_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, nextval('{sequence}'))
             ON CONFLICT (grp, partition) DO NOTHING RETURNING version"
        ),
        format!(
            "WITH updated AS (
                 UPDATE {leases} SET owner = $3, epoch = $4, state = $5, prohibited = $6,
                     load = $7, note = $8, written_at_unix_ms = $9, previous_owner = $10,
                     handed_to = $11, session = $12, version = nextval('{sequence}')
                 WHERE grp = $1 AND partition = $2 AND version = $13
                 RETURNING version)
             SELECT (SELECT version FROM updated),
                 EXISTS (SELECT 1 FROM {leases} WHERE grp = $1 AND partition = $2)"
        ),
        format!(
            "WITH deleted AS (
                 DELETE FROM {leases} WHERE grp = $1 AND partition = $2 AND version = $3
                 RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM deleted),
                 EXISTS (SELECT 1 FROM {leases} WHERE grp = $1 AND partition = $2)"
        ),
        format!("SELECT {MEMBER_COLUMNS} FROM {members} WHERE grp = $1 ORDER BY node"),
        format!("SELECT {MEMBER_COLUMNS} FROM {members} WHERE grp = $1 AND node = $2"),
        format!(
            "INSERT INTO {members} (grp, {MEMBER_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                 $16, nextval('{sequence}'))
             ON CONFLICT (grp, node) DO NOTHING RETURNING version"
        ),
        format!(
            "WITH updated AS (
                 UPDATE {members} SET weight = $3, draining = $4, load = $5, heartbeat = $6,
                     written_at_unix_ms = $7, lease_validity_ns = $8, acquire_after_ns = $9,
                     capacity = $10, max_load = $11, max_partitions = $12, address = $13,
                     metadata = $14, session = $15, replaced = $16,
                     version = nextval('{sequence}')
                 WHERE grp = $1 AND node = $2 AND version = $17
                 RETURNING version)
             SELECT (SELECT version FROM updated),
                 EXISTS (SELECT 1 FROM {members} WHERE grp = $1 AND node = $2)"
        ),
        format!(
            "WITH deleted AS (
                 DELETE FROM {members} WHERE grp = $1 AND node = $2 AND version = $3
                 RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM deleted),
                 EXISTS (SELECT 1 FROM {members} WHERE grp = $1 AND node = $2)"
        ),
        format!("SELECT {GROUP_COLUMNS} FROM {groups} WHERE grp = $1"),
        format!(
            "INSERT INTO {groups} (grp, {GROUP_COLUMNS}) VALUES ($1, $2, nextval('{sequence}'))
             ON CONFLICT (grp) DO NOTHING RETURNING version"
        ),
        format!(
            "WITH updated AS (
                 UPDATE {groups} SET record = $2, version = nextval('{sequence}')
                 WHERE grp = $1 AND version = $3
                 RETURNING version)
             SELECT (SELECT version FROM updated),
                 EXISTS (SELECT 1 FROM {groups} WHERE grp = $1)"
        ),
    ]
}
