//! The conditional write of one record, shared by single calls, batches and transactions,
//! and how their replies read.

use leasehold::{
    GroupName, LeaseWrite, NodeId, PartitionId, PutMode, RecordKey, StoreError, TxnWrite, Version,
};
use tokio_postgres::{Client, GenericClient, IsolationLevel, Row, Transaction};

use crate::error::map_error;
use crate::rows::{column, expected_version, version, LeaseParams, MemberParams};
use crate::statements::Statements;

/// Begins a transaction at `READ COMMITTED`, whatever the server's default: there a
/// conditional write that waited for another's row lock compares the version that one
/// committed, where a stricter level would fail with a serialization error instead of a
/// conflict.
pub(crate) async fn begin(client: &mut Client) -> Result<Transaction<'_>, tokio_postgres::Error> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
}

/// One write of a transaction, with its record as statement parameters.
pub(crate) enum Prepared<'a> {
    Lease(&'a LeaseWrite, LeaseParams<'a>),
    Member(&'a NodeId, MemberParams, &'a PutMode),
}

impl<'a> Prepared<'a> {
    pub(crate) fn new(write: &'a TxnWrite) -> Result<Prepared<'a>, StoreError> {
        Ok(match write {
            TxnWrite::Lease(lease) => Prepared::Lease(lease, LeaseParams::new(&lease.record)?),
            TxnWrite::Member { node, record, mode } => {
                Prepared::Member(node, MemberParams::new(node, record)?, mode)
            }
        })
    }

    /// Leases by partition, as batches lock them, then members by name: transactions that
    /// touch the same rows lock them in the same order and cannot deadlock.
    pub(crate) fn lock_order(&self) -> (u8, PartitionId, &str) {
        match self {
            Prepared::Lease(lease, _) => (0, lease.partition, ""),
            Prepared::Member(node, ..) => (1, PartitionId(0), node.as_str()),
        }
    }

    pub(crate) async fn write(
        &self,
        client: &impl GenericClient,
        statements: &Statements,
        group: &GroupName,
        statement_timeout: std::time::Duration,
    ) -> Result<Version, StoreError> {
        match self {
            Prepared::Lease(lease, params) => {
                write_lease(
                    client,
                    statements,
                    group,
                    lease.partition,
                    params,
                    &lease.mode,
                    statement_timeout,
                )
                .await
            }
            Prepared::Member(node, params, mode) => {
                write_member(
                    client,
                    statements,
                    group,
                    node,
                    params,
                    mode,
                    statement_timeout,
                )
                .await
            }
        }
    }
}

/// The one row a conditional update or delete always returns.
pub(crate) fn single(rows: &[Row]) -> Result<&Row, StoreError> {
    rows.first().ok_or_else(|| StoreError::Unavailable {
        message: "PostgreSQL returned no row for a conditional write".to_owned(),
        source: None,
    })
}

/// Whether a write failed only because its condition did not hold.
pub(crate) fn is_refusal(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Conflict { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::NotFound { .. }
    )
}

/// The outcome of a conditional update or delete, from its `(applied, present)` reply.
pub(crate) fn conditional(applied: bool, present: bool, key: RecordKey) -> Result<(), StoreError> {
    match (applied, present) {
        (true, _) => Ok(()),
        (false, true) => Err(StoreError::Conflict { key }),
        (false, false) => Err(StoreError::NotFound { key }),
    }
}

/// The version a conditional update wrote, from its `(version, present)` reply.
pub(crate) fn updated(row: &Row, key: RecordKey) -> Result<Version, StoreError> {
    let written: Option<i64> = column(row, 0, "version", &key)?;
    let present = column(row, 1, "present", &key)?;
    conditional(written.is_some(), present, key.clone())?;
    version(row, 0, &key)
}

pub(crate) async fn write_lease(
    client: &impl GenericClient,
    statements: &Statements,
    group: &GroupName,
    partition: PartitionId,
    params: &LeaseParams<'_>,
    mode: &PutMode,
    statement_timeout: std::time::Duration,
) -> Result<Version, StoreError> {
    let fail = |e| map_error("write a lease", statement_timeout, e);
    let key = || RecordKey::Lease(partition);
    let (grp, partition_column) = (group.as_str(), i64::from(partition.0));
    let p = params;
    match mode {
        PutMode::Create => client
            .query_opt(
                &statements.insert_lease,
                &[
                    &grp,
                    &partition_column,
                    &p.owner,
                    &p.epoch,
                    &p.state,
                    &p.prohibited,
                    &p.load,
                    &p.note,
                    &p.written_at_unix_ms,
                    &p.previous_owner,
                    &p.handed_to,
                    &p.session,
                ],
            )
            .await
            .map_err(fail)?
            .map_or_else(
                || Err(StoreError::AlreadyExists { key: key() }),
                |row| version(&row, 0, &key()),
            ),
        PutMode::Update(version) => {
            let expected = expected_version(version);
            let row = client
                .query_one(
                    &statements.update_lease,
                    &[
                        &grp,
                        &partition_column,
                        &p.owner,
                        &p.epoch,
                        &p.state,
                        &p.prohibited,
                        &p.load,
                        &p.note,
                        &p.written_at_unix_ms,
                        &p.previous_owner,
                        &p.handed_to,
                        &p.session,
                        &expected,
                    ],
                )
                .await
                .map_err(fail)?;
            updated(&row, key())
        }
    }
}

pub(crate) async fn write_member(
    client: &impl GenericClient,
    statements: &Statements,
    group: &GroupName,
    node: &NodeId,
    params: &MemberParams,
    mode: &PutMode,
    statement_timeout: std::time::Duration,
) -> Result<Version, StoreError> {
    let fail = |action| move |e| map_error(action, statement_timeout, e);
    let key = || RecordKey::from(node);
    let (grp, name) = (group.as_str(), node.as_str());
    let p = params;
    match mode {
        PutMode::Create => client
            .query_opt(
                &statements.insert_member,
                &[
                    &grp,
                    &name,
                    &p.weight,
                    &p.draining,
                    &p.load,
                    &p.heartbeat,
                    &p.written_at_unix_ms,
                    &p.lease_validity_ns,
                    &p.acquire_after_ns,
                    &p.capacity,
                    &p.max_load,
                    &p.max_partitions,
                    &p.address,
                    &p.metadata,
                    &p.session,
                    &p.replaced,
                ],
            )
            .await
            .map_err(fail("create a member"))?
            .map_or_else(
                || Err(StoreError::AlreadyExists { key: key() }),
                |row| version(&row, 0, &key()),
            ),
        PutMode::Update(version) => {
            let expected = expected_version(version);
            let row = client
                .query_one(
                    &statements.update_member,
                    &[
                        &grp,
                        &name,
                        &p.weight,
                        &p.draining,
                        &p.load,
                        &p.heartbeat,
                        &p.written_at_unix_ms,
                        &p.lease_validity_ns,
                        &p.acquire_after_ns,
                        &p.capacity,
                        &p.max_load,
                        &p.max_partitions,
                        &p.address,
                        &p.metadata,
                        &p.session,
                        &p.replaced,
                        &expected,
                    ],
                )
                .await
                .map_err(fail("update a member"))?;
            updated(&row, key())
        }
    }
}
