//! Records to statement parameters and rows back to records.

use leasehold::{
    Epoch, LeaseRecord, LeaseState, MemberRecord, NodeId, PartitionId, RecordKey, StoreError,
    Stored, StoredLease, StoredMember, Version,
};
use tokio_postgres::Row;

/// A lease record as the values of the lease statements' `$3` to `$9`.
pub(crate) struct LeaseParams<'a> {
    pub(crate) owner: Option<&'a str>,
    pub(crate) epoch: i64,
    pub(crate) state: &'static str,
    pub(crate) prohibited: Vec<&'a str>,
    pub(crate) load: Option<f64>,
    pub(crate) note: Option<&'a str>,
    pub(crate) written_at_unix_ms: Option<i64>,
}

impl<'a> LeaseParams<'a> {
    pub(crate) fn new(record: &'a LeaseRecord) -> Result<LeaseParams<'a>, StoreError> {
        Ok(LeaseParams {
            owner: record.owner.as_ref().map(NodeId::as_str),
            epoch: to_column("epoch", record.epoch.0)?,
            state: record.state.as_str(),
            prohibited: record.prohibited.iter().map(NodeId::as_str).collect(),
            load: record.load,
            note: record.note.as_deref(),
            written_at_unix_ms: record
                .written_at_unix_ms
                .map(|ms| to_column("written_at_unix_ms", ms))
                .transpose()?,
        })
    }
}

/// A member record as the values of the member statements' `$3` to `$7`.
pub(crate) struct MemberParams {
    pub(crate) weight: i64,
    pub(crate) draining: bool,
    pub(crate) load: Option<f64>,
    pub(crate) heartbeat: i64,
    pub(crate) written_at_unix_ms: Option<i64>,
}

impl MemberParams {
    pub(crate) fn new(record: &MemberRecord) -> Result<MemberParams, StoreError> {
        Ok(MemberParams {
            weight: i64::from(record.weight),
            draining: record.draining,
            load: record.load,
            heartbeat: to_column("heartbeat", record.heartbeat)?,
            written_at_unix_ms: record
                .written_at_unix_ms
                .map(|ms| to_column("written_at_unix_ms", ms))
                .transpose()?,
        })
    }
}

/// PostgreSQL has no unsigned 64-bit column; values above `i64::MAX` are refused.
fn to_column(field: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Invalid(format!("{field} {value} does not fit a bigint column")))
}

/// The version to compare against: one that is not a row version matches no row.
pub(crate) fn expected_version(version: &Version) -> i64 {
    version
        .as_number()
        .and_then(|n| i64::try_from(n).ok())
        .unwrap_or(-1)
}

pub(crate) fn version_from(column: i64) -> Version {
    Version::from_number(column.unsigned_abs())
}

/// Decodes a row of `LEASE_COLUMNS`, naming the record in the error if it is damaged.
pub(crate) fn lease_from_row(row: &Row) -> Result<StoredLease, StoreError> {
    let raw_partition: i64 = row.get(0);
    let Ok(partition) = u32::try_from(raw_partition) else {
        return Err(StoreError::Corrupt {
            key: RecordKey::Stored(format!("lease {raw_partition}")),
            reason: "partition is not a 32-bit unsigned number".to_owned(),
        });
    };
    let partition = PartitionId(partition);
    let corrupt = |reason: String| StoreError::Corrupt {
        key: RecordKey::Lease(partition),
        reason,
    };
    let state: String = row.get(3);
    let state =
        LeaseState::parse(&state).ok_or_else(|| corrupt(format!("unknown state {state:?}")))?;
    let owner: Option<String> = row.get(1);
    let owner = owner
        .map(NodeId::new)
        .transpose()
        .map_err(|e| corrupt(format!("owner: {e}")))?;
    let prohibited: Vec<String> = row.get(4);
    let prohibited = prohibited
        .into_iter()
        .map(NodeId::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| corrupt(format!("prohibited: {e}")))?;
    let epoch: i64 = row.get(2);
    let epoch = u64::try_from(epoch).map_err(|_| corrupt(format!("negative epoch {epoch}")))?;
    let written_at: Option<i64> = row.get(7);
    let record = LeaseRecord {
        owner,
        epoch: Epoch(epoch),
        state,
        prohibited,
        load: row.get(5),
        note: row.get(6),
        written_at_unix_ms: written_at.and_then(|ms| u64::try_from(ms).ok()),
    };
    Ok(Stored {
        key: partition,
        value: record,
        version: version_from(row.get(8)),
    })
}

/// Decodes a row of `MEMBER_COLUMNS`.
pub(crate) fn member_from_row(row: &Row) -> Result<StoredMember, StoreError> {
    let name: String = row.get(0);
    let node = NodeId::new(&name).map_err(|e| StoreError::Corrupt {
        key: RecordKey::Stored(format!("member {name}")),
        reason: e.to_string(),
    })?;
    let corrupt = |reason: String| StoreError::Corrupt {
        key: RecordKey::from(&node),
        reason,
    };
    let weight: i64 = row.get(1);
    let weight = u32::try_from(weight).map_err(|_| corrupt(format!("weight {weight}")))?;
    let heartbeat: i64 = row.get(4);
    let heartbeat =
        u64::try_from(heartbeat).map_err(|_| corrupt(format!("heartbeat {heartbeat}")))?;
    let written_at: Option<i64> = row.get(5);
    let record = MemberRecord {
        weight,
        draining: row.get(2),
        load: row.get(3),
        heartbeat,
        written_at_unix_ms: written_at.and_then(|ms| u64::try_from(ms).ok()),
    };
    Ok(Stored {
        key: node,
        value: record,
        version: version_from(row.get(6)),
    })
}
