//! Records to statement parameters and rows back to records.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::{
    codec, Epoch, GroupName, GroupRecord, LeaseRecord, LeaseState, MemberRecord, NodeId,
    PartitionId, RecordKey, StoreError, Stored, StoredGroup, StoredLease, StoredMember, Version,
};
use tokio_postgres::Row;

/// A lease record as the values of the lease statements' `$3` to `$12`.
pub(crate) struct LeaseParams<'a> {
    pub(crate) owner: Option<&'a str>,
    pub(crate) epoch: i64,
    pub(crate) state: &'static str,
    pub(crate) prohibited: Vec<&'a str>,
    pub(crate) load: Option<f64>,
    pub(crate) note: Option<&'a str>,
    pub(crate) written_at_unix_ms: Option<i64>,
    pub(crate) previous_owner: Option<&'a str>,
    pub(crate) handed_to: Option<&'a str>,
    /// The session's 64 bits, see [`session_column`].
    pub(crate) session: Option<i64>,
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
            previous_owner: record.previous_owner.as_ref().map(NodeId::as_str),
            handed_to: record.handed_to.as_ref().map(NodeId::as_str),
            session: record.session.map(session_column),
        })
    }
}

/// A member record as the values of the member statements' `$3` to `$15`.
pub(crate) struct MemberParams {
    pub(crate) weight: i64,
    pub(crate) draining: bool,
    pub(crate) load: Option<f64>,
    pub(crate) heartbeat: i64,
    pub(crate) written_at_unix_ms: Option<i64>,
    pub(crate) lease_validity_ns: Option<i64>,
    pub(crate) acquire_after_ns: Option<i64>,
    pub(crate) capacity: Option<f64>,
    pub(crate) max_load: Option<f64>,
    pub(crate) max_partitions: Option<i64>,
    pub(crate) address: Option<String>,
    /// The metadata's JSON, NULL when there is none.
    pub(crate) metadata: Option<String>,
    /// The session's 64 bits, see [`session_column`].
    pub(crate) session: Option<i64>,
    /// The replaced session's last stamp, as its 64 bits ([`session_column`]).
    pub(crate) replaced: Option<i64>,
}

impl MemberParams {
    /// The parameters of the member record of `node`, refusing values a bigint cannot hold
    /// and records over the limits every store keeps ([`MemberRecord::validate`]).
    pub(crate) fn new(node: &NodeId, record: &MemberRecord) -> Result<MemberParams, StoreError> {
        record.check(node)?;
        Ok(MemberParams {
            weight: i64::from(record.weight),
            draining: record.draining,
            load: record.load,
            heartbeat: to_column("heartbeat", record.heartbeat)?,
            written_at_unix_ms: record
                .written_at_unix_ms
                .map(|ms| to_column("written_at_unix_ms", ms))
                .transpose()?,
            lease_validity_ns: record
                .lease_validity
                .map(|value| nanos_column("lease_validity", value))
                .transpose()?,
            acquire_after_ns: record
                .acquire_after
                .map(|value| nanos_column("acquire_after", value))
                .transpose()?,
            capacity: record.capacity,
            max_load: record.max_load,
            max_partitions: record.max_partitions.map(i64::from),
            address: record.address.clone(),
            metadata: (!record.metadata.is_empty())
                .then(|| codec::encode_metadata(&record.metadata)),
            session: record.session.map(session_column),
            replaced: record.replaced.map(session_column),
        })
    }
}

/// A group record as the group statements' `$2`: its JSON text, kept whole so that fields
/// this build does not know survive.
pub(crate) fn group_param(record: &GroupRecord) -> Result<String, StoreError> {
    String::from_utf8(codec::encode(record)).map_err(|error| {
        StoreError::Invalid(format!("the encoded group record is not text: {error}"))
    })
}

/// PostgreSQL has no unsigned 64-bit column; values above `i64::MAX` are refused.
fn to_column(field: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Invalid(format!("{field} {value} does not fit a bigint column")))
}

/// A session as the bigint with the same 64 bits. Epochs and heartbeats never come near
/// `i64::MAX` and are refused past it, but a session is any `u64` a writer chose: each is
/// kept, and [`session_from_column`] gives it back exactly.
pub(crate) fn session_column(session: u64) -> i64 {
    i64::from_ne_bytes(session.to_ne_bytes())
}

/// The session a column written by [`session_column`] holds: every bigint is one.
pub(crate) fn session_from_column(bits: i64) -> u64 {
    u64::from_ne_bytes(bits.to_ne_bytes())
}

/// A duration as whole nanoseconds; one of more than about 292 years, which no real timing
/// comes near, is refused.
fn nanos_column(field: &str, value: Duration) -> Result<i64, StoreError> {
    i64::try_from(value.as_nanos()).map_err(|_| {
        StoreError::Invalid(format!(
            "{field} {value:?} does not fit a bigint column in nanoseconds"
        ))
    })
}

/// The version to compare against: one that is not a row version matches no row.
pub(crate) fn expected_version(version: &Version) -> i64 {
    version
        .as_number()
        .and_then(|n| i64::try_from(n).ok())
        .unwrap_or(-1)
}

/// A column of a row, or `Corrupt` naming the record if it is NULL where a value belongs, or
/// of a type the store never writes: a hand-edited row must not panic the reader.
pub(crate) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
    name: &str,
    key: &RecordKey,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|error| StoreError::Corrupt {
        key: key.clone(),
        reason: format!("{name}: {error}"),
    })
}

/// An unsigned number kept in a signed column, or `Corrupt` when it is out of range.
fn unsigned<T: TryFrom<i64>>(value: i64, name: &str, key: &RecordKey) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::Corrupt {
        key: key.clone(),
        reason: format!("{name} {value} is out of range"),
    })
}

fn optional_unsigned(
    value: Option<i64>,
    name: &str,
    key: &RecordKey,
) -> Result<Option<u64>, StoreError> {
    value.map(|value| unsigned(value, name, key)).transpose()
}

/// Versions come from a sequence that starts at 1; anything else was not written by a store.
pub(crate) fn version(row: &Row, index: usize, key: &RecordKey) -> Result<Version, StoreError> {
    let raw: i64 = column(row, index, "version", key)?;
    match u64::try_from(raw) {
        Ok(number) if number > 0 => Ok(Version::from_number(number)),
        _ => Err(StoreError::Corrupt {
            key: key.clone(),
            reason: format!("version {raw} is not positive"),
        }),
    }
}

/// Decodes a row of `LEASE_COLUMNS`, naming the record in the error if it is damaged.
pub(crate) fn lease_from_row(row: &Row) -> Result<StoredLease, StoreError> {
    let unknown = RecordKey::Stored("lease with an unreadable partition".to_owned());
    let raw_partition: i64 = column(row, 0, "partition", &unknown)?;
    let Ok(partition) = u32::try_from(raw_partition) else {
        return Err(StoreError::Corrupt {
            key: RecordKey::Stored(format!("lease {raw_partition}")),
            reason: "partition is not a 32-bit unsigned number".to_owned(),
        });
    };
    let partition = PartitionId(partition);
    let key = RecordKey::Lease(partition);
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.clone(),
        reason,
    };
    let state: String = column(row, 3, "state", &key)?;
    let state =
        LeaseState::parse(&state).ok_or_else(|| corrupt(format!("unknown state {state:?}")))?;
    let optional_node = |index, name: &str| -> Result<Option<NodeId>, StoreError> {
        column::<Option<String>>(row, index, name, &key)?
            .map(NodeId::new)
            .transpose()
            .map_err(|e| corrupt(format!("{name}: {e}")))
    };
    let owner = optional_node(1, "owner")?;
    // Elements are read as optional: `'{NULL}'` is a valid array, and must not panic.
    let prohibited: Vec<Option<String>> = column(row, 4, "prohibited", &key)?;
    let prohibited = prohibited
        .into_iter()
        .map(|name| {
            let name = name.ok_or_else(|| corrupt("prohibited: a NULL element".to_owned()))?;
            NodeId::new(name).map_err(|e| corrupt(format!("prohibited: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let epoch = unsigned(column(row, 2, "epoch", &key)?, "epoch", &key)?;
    let written_at = column(row, 7, "written_at_unix_ms", &key)?;
    let record = LeaseRecord {
        owner,
        epoch: Epoch(epoch),
        state,
        prohibited,
        load: column(row, 5, "load", &key)?,
        note: column(row, 6, "note", &key)?,
        written_at_unix_ms: optional_unsigned(written_at, "written_at_unix_ms", &key)?,
        previous_owner: optional_node(8, "previous_owner")?,
        handed_to: optional_node(9, "handed_to")?,
        session: column::<Option<i64>>(row, 10, "session", &key)?.map(session_from_column),
    };
    Ok(Stored {
        key: partition,
        value: record,
        version: version(row, 11, &key)?,
    })
}

/// Decodes a row of `MEMBER_COLUMNS`.
pub(crate) fn member_from_row(row: &Row) -> Result<StoredMember, StoreError> {
    let unknown = RecordKey::Stored("member with an unreadable name".to_owned());
    let name: String = column(row, 0, "node", &unknown)?;
    let node = NodeId::new(&name).map_err(|e| StoreError::Corrupt {
        key: RecordKey::Stored(format!("member {name}")),
        reason: e.to_string(),
    })?;
    let key = RecordKey::from(&node);
    let weight = unsigned(column(row, 1, "weight", &key)?, "weight", &key)?;
    let heartbeat = unsigned(column(row, 4, "heartbeat", &key)?, "heartbeat", &key)?;
    let written_at = column(row, 5, "written_at_unix_ms", &key)?;
    let nanos = |index, name| {
        let value = optional_unsigned(column(row, index, name, &key)?, name, &key)?;
        Ok::<_, StoreError>(value.map(Duration::from_nanos))
    };
    let record = MemberRecord {
        weight,
        draining: column(row, 2, "draining", &key)?,
        load: column(row, 3, "load", &key)?,
        heartbeat,
        written_at_unix_ms: optional_unsigned(written_at, "written_at_unix_ms", &key)?,
        lease_validity: nanos(6, "lease_validity_ns")?,
        acquire_after: nanos(7, "acquire_after_ns")?,
        capacity: column(row, 8, "capacity", &key)?,
        max_load: column(row, 9, "max_load", &key)?,
        max_partitions: column::<Option<i64>>(row, 10, "max_partitions", &key)?
            .map(|cap| unsigned(cap, "max_partitions", &key))
            .transpose()?,
        address: column(row, 11, "address", &key)?,
        metadata: metadata(column(row, 12, "metadata", &key)?, &key)?,
        session: column::<Option<i64>>(row, 13, "session", &key)?.map(session_from_column),
        replaced: column::<Option<i64>>(row, 14, "replaced", &key)?.map(session_from_column),
    };
    Ok(Stored {
        key: node,
        value: record,
        version: version(row, 15, &key)?,
    })
}

/// Metadata read from its column: NULL for none, else a JSON object of strings.
fn metadata(text: Option<String>, key: &RecordKey) -> Result<BTreeMap<String, String>, StoreError> {
    text.map_or(Ok(BTreeMap::new()), |json| {
        codec::decode_metadata(&json).map_err(|reason| StoreError::Corrupt {
            key: key.clone(),
            reason,
        })
    })
}

/// Decodes a row of `GROUP_COLUMNS`, the group record of `group`.
pub(crate) fn group_from_row(group: &GroupName, row: &Row) -> Result<StoredGroup, StoreError> {
    let key = RecordKey::Group;
    let text: String = column(row, 0, "record", &key)?;
    Ok(Stored {
        key: group.clone(),
        value: codec::decode(key.clone(), text.as_bytes())?,
        version: version(row, 1, &key)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_too_long_for_a_bigint_are_refused_not_wrapped() {
        let fits = MemberRecord {
            lease_validity: Some(Duration::from_nanos(i64::MAX as u64)),
            ..MemberRecord::default()
        };
        let node = NodeId::new("n1").unwrap();
        let params = MemberParams::new(&node, &fits).unwrap();
        assert_eq!(params.lease_validity_ns, Some(i64::MAX));
        assert_eq!(params.acquire_after_ns, None);
        let too_long = MemberRecord {
            acquire_after: Some(Duration::from_nanos(i64::MAX as u64 + 1)),
            ..MemberRecord::default()
        };
        let error = MemberParams::new(&node, &too_long).err().expect("refused");
        assert!(
            matches!(&error, StoreError::Invalid(message) if message.contains("acquire_after")),
            "{error:?}"
        );
    }

    #[test]
    fn every_session_is_kept_bit_for_bit() {
        for (session, bits) in [
            (0, 0),
            (7, 7),
            (i64::MAX as u64, i64::MAX),
            (1 << 63, i64::MIN),
            (u64::MAX - 6, -7),
            (u64::MAX, -1),
        ] {
            assert_eq!(session_column(session), bits, "{session}");
            assert_eq!(session_from_column(bits), session, "{bits}");
        }
        let node = NodeId::new("n1").unwrap();
        let member = MemberRecord {
            session: Some(u64::MAX - 6),
            ..MemberRecord::default()
        };
        assert_eq!(MemberParams::new(&node, &member).unwrap().session, Some(-7));
        let lease = LeaseRecord {
            session: Some(u64::MAX),
            ..LeaseRecord::released()
        };
        assert_eq!(LeaseParams::new(&lease).unwrap().session, Some(-1));
        let released = LeaseRecord::released();
        assert_eq!(LeaseParams::new(&released).unwrap().session, None);
    }

    #[test]
    fn addresses_and_metadata_over_the_limits_are_refused_and_empty_metadata_is_null() {
        let node = NodeId::new("n1").unwrap();
        let fits = MemberRecord {
            address: Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES)),
            metadata: (0..MemberRecord::MAX_METADATA_ENTRIES)
                .map(|index| (format!("k{index}"), "v".to_owned()))
                .collect(),
            max_partitions: Some(u32::MAX),
            ..MemberRecord::default()
        };
        let params = MemberParams::new(&node, &fits).unwrap();
        assert_eq!(params.max_partitions, Some(i64::from(u32::MAX)));
        assert!(params
            .metadata
            .unwrap()
            .starts_with(r#"{"k0":"v","k1":"v""#));
        let bare = MemberParams::new(&node, &MemberRecord::default()).unwrap();
        assert_eq!(bare.metadata, None);
        let too_long = MemberRecord {
            address: Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES + 1)),
            ..MemberRecord::default()
        };
        let too_large = MemberRecord {
            metadata: [("k".to_owned(), "v".repeat(MemberRecord::MAX_METADATA_BYTES))].into(),
            ..MemberRecord::default()
        };
        for (record, field) in [(too_long, "address"), (too_large, "metadata")] {
            let error = MemberParams::new(&node, &record).err().expect("refused");
            assert!(
                matches!(&error, StoreError::Invalid(message) if message.contains(field)),
                "{error:?}"
            );
        }
    }
}
