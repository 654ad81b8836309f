//! Records as table rows: checked encoding of writes, defensive decoding of reads.
//!
//! Rows can be edited by hand with the `sqlite3` shell, so decoding trusts nothing: a value
//! of the wrong type or out of range makes that one row [`StoreError::Corrupt`].

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::{
    codec, Epoch, GroupRecord, LeaseRecord, LeaseState, MemberRecord, NodeId, PartitionId, PutMode,
    RecordKey, StoreError, StoredLease, StoredMember, TxnWrite, Version,
};
use rusqlite::types::ValueRef;
use rusqlite::Row;

/// The columns [`decode_lease`] reads, in order, as a literal for `concat!`.
macro_rules! lease_columns {
    () => {
        "partition, owner, epoch, state, prohibited, load, note, written_at_unix_ms, version, \
         previous_owner, handed_to, session"
    };
}
pub(crate) use lease_columns;

/// The columns [`decode_member`] reads, in order, as a literal for `concat!`.
macro_rules! member_columns {
    () => {
        "node, weight, draining, load, heartbeat, written_at_unix_ms, version, \
         lease_validity_ns, acquire_after_ns, capacity, max_load, max_partitions, address, \
         metadata, session, replaced"
    };
}
pub(crate) use member_columns;

/// The columns [`decode_group`] reads, in order, as a literal for `concat!`.
macro_rules! group_columns {
    () => {
        "record, version"
    };
}
pub(crate) use group_columns;

/// A lease record as the values of its columns, ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct LeaseRow {
    pub(crate) owner: Option<String>,
    pub(crate) epoch: i64,
    pub(crate) state: &'static str,
    pub(crate) prohibited: String,
    pub(crate) load: Option<f64>,
    pub(crate) note: Option<String>,
    pub(crate) written_at_unix_ms: Option<i64>,
    pub(crate) previous_owner: Option<String>,
    pub(crate) handed_to: Option<String>,
    /// The session's 64 bits, see [`session_column`].
    pub(crate) session: Option<i64>,
}

/// A member record as the values of its columns, ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct MemberRow {
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

fn storable(value: u64, field: &str, key: impl FnOnce() -> RecordKey) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::Invalid(format!(
            "{}: {field} {value} is larger than SQLite's integers can hold",
            key()
        ))
    })
}

/// A session as the INTEGER with the same 64 bits. Epochs and heartbeats never come near
/// `i64::MAX` and are refused past it, but a session is any `u64` a writer chose: each is
/// kept, and [`session_from_column`] gives it back exactly.
pub(crate) fn session_column(session: u64) -> i64 {
    i64::from_ne_bytes(session.to_ne_bytes())
}

/// The session a column written by [`session_column`] holds: every integer is one.
pub(crate) fn session_from_column(bits: i64) -> u64 {
    u64::from_ne_bytes(bits.to_ne_bytes())
}

/// A duration as whole nanoseconds, refusing one too long for SQLite's integers (about 292
/// years), which no real timing comes near.
fn storable_nanos(
    value: Duration,
    field: &str,
    key: impl FnOnce() -> RecordKey,
) -> Result<i64, StoreError> {
    i64::try_from(value.as_nanos()).map_err(|_| {
        StoreError::Invalid(format!(
            "{}: {field} {value:?} is longer than SQLite's integers can hold in nanoseconds",
            key()
        ))
    })
}

/// Encodes a lease record, refusing values SQLite cannot store exactly.
pub(crate) fn encode_lease(
    partition: PartitionId,
    record: &LeaseRecord,
) -> Result<LeaseRow, StoreError> {
    let key = || RecordKey::Lease(partition);
    let prohibited: Vec<&str> = record.prohibited.iter().map(NodeId::as_str).collect();
    Ok(LeaseRow {
        owner: record.owner.as_ref().map(|owner| owner.as_str().to_owned()),
        epoch: storable(record.epoch.0, "epoch", key)?,
        state: record.state.as_str(),
        // Node ids cannot contain commas, so the list splits back unambiguously.
        prohibited: prohibited.join(","),
        load: record.load,
        note: record.note.clone(),
        written_at_unix_ms: record
            .written_at_unix_ms
            .map(|ms| storable(ms, "written_at_unix_ms", key))
            .transpose()?,
        previous_owner: record
            .previous_owner
            .as_ref()
            .map(|node| node.as_str().to_owned()),
        handed_to: record
            .handed_to
            .as_ref()
            .map(|node| node.as_str().to_owned()),
        session: record.session.map(session_column),
    })
}

/// Encodes a member record, refusing values SQLite cannot store exactly and records over
/// the limits every store keeps ([`MemberRecord::validate`]).
pub(crate) fn encode_member(node: &NodeId, record: &MemberRecord) -> Result<MemberRow, StoreError> {
    record.check(node)?;
    let key = || RecordKey::from(node);
    Ok(MemberRow {
        weight: i64::from(record.weight),
        draining: record.draining,
        load: record.load,
        heartbeat: storable(record.heartbeat, "heartbeat", key)?,
        written_at_unix_ms: record
            .written_at_unix_ms
            .map(|ms| storable(ms, "written_at_unix_ms", key))
            .transpose()?,
        lease_validity_ns: record
            .lease_validity
            .map(|value| storable_nanos(value, "lease_validity", key))
            .transpose()?,
        acquire_after_ns: record
            .acquire_after
            .map(|value| storable_nanos(value, "acquire_after", key))
            .transpose()?,
        capacity: record.capacity,
        max_load: record.max_load,
        max_partitions: record.max_partitions.map(i64::from),
        address: record.address.clone(),
        metadata: encode_metadata(&record.metadata),
        session: record.session.map(session_column),
        replaced: record.replaced.map(session_column),
    })
}

/// One write of a transaction, encoded before the transaction begins so that a record
/// SQLite cannot store is refused without taking the write lock.
#[derive(Debug, Clone)]
pub(crate) enum RecordWrite {
    Lease {
        partition: PartitionId,
        row: LeaseRow,
        mode: PutMode,
    },
    Member {
        node: NodeId,
        row: MemberRow,
        mode: PutMode,
    },
}

/// Encodes one write of a transaction as [`encode_lease`] or [`encode_member`] encodes a
/// single write.
pub(crate) fn encode_write(write: &TxnWrite) -> Result<RecordWrite, StoreError> {
    Ok(match write {
        TxnWrite::Lease(lease) => RecordWrite::Lease {
            partition: lease.partition,
            row: encode_lease(lease.partition, &lease.record)?,
            mode: lease.mode.clone(),
        },
        TxnWrite::Member { node, record, mode } => RecordWrite::Member {
            node: node.clone(),
            row: encode_member(node, record)?,
            mode: mode.clone(),
        },
    })
}

fn encode_metadata(metadata: &BTreeMap<String, String>) -> Option<String> {
    (!metadata.is_empty()).then(|| codec::encode_metadata(metadata))
}

/// Encodes a group record as the JSON text kept in its row, whole, so that fields this build
/// does not know survive.
pub(crate) fn encode_group(record: &GroupRecord) -> Result<String, StoreError> {
    String::from_utf8(codec::encode(record)).map_err(|error| {
        StoreError::Invalid(format!(
            "{}: the encoded record is not text: {error}",
            RecordKey::Group
        ))
    })
}

/// One column of a row being decoded; errors are the reason the row is corrupt.
struct Column<'row, 'statement> {
    row: &'row Row<'statement>,
    index: usize,
    name: &'static str,
}

impl<'row> Column<'row, '_> {
    fn value(&self) -> Result<ValueRef<'row>, String> {
        self.row
            .get_ref(self.index)
            .map_err(|error| format!("{}: {error}", self.name))
    }

    fn optional_text(&self) -> Result<Option<&'row str>, String> {
        match self.value()? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(bytes) => std::str::from_utf8(bytes)
                .map(Some)
                .map_err(|_| format!("{} is not valid UTF-8", self.name)),
            other => Err(format!(
                "{} is {:?}, not text",
                self.name,
                other.data_type()
            )),
        }
    }

    fn text(&self) -> Result<&'row str, String> {
        self.optional_text()?
            .ok_or_else(|| format!("{} is NULL", self.name))
    }

    fn optional_integer(&self) -> Result<Option<i64>, String> {
        match self.value()? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(value) => Ok(Some(value)),
            other => Err(format!(
                "{} is {:?}, not an integer",
                self.name,
                other.data_type()
            )),
        }
    }

    fn integer(&self) -> Result<i64, String> {
        self.optional_integer()?
            .ok_or_else(|| format!("{} is NULL", self.name))
    }

    fn optional_unsigned(&self) -> Result<Option<u64>, String> {
        self.optional_integer()?
            .map(|value| {
                u64::try_from(value).map_err(|_| format!("{} is negative: {value}", self.name))
            })
            .transpose()
    }

    fn unsigned(&self) -> Result<u64, String> {
        self.optional_unsigned()?
            .ok_or_else(|| format!("{} is NULL", self.name))
    }

    fn optional_session(&self) -> Result<Option<u64>, String> {
        Ok(self.optional_integer()?.map(session_from_column))
    }

    fn optional_nanos(&self) -> Result<Option<Duration>, String> {
        Ok(self.optional_unsigned()?.map(Duration::from_nanos))
    }

    fn optional_real(&self) -> Result<Option<f64>, String> {
        match self.value()? {
            ValueRef::Null => Ok(None),
            ValueRef::Real(value) => Ok(Some(value)),
            // A hand edit may store a whole number as an integer.
            ValueRef::Integer(value) => Ok(Some(value as f64)),
            other => Err(format!(
                "{} is {:?}, not a number",
                self.name,
                other.data_type()
            )),
        }
    }

    fn node(&self, text: &str) -> Result<NodeId, String> {
        NodeId::new(text).map_err(|error| format!("{}: {error}", self.name))
    }

    fn optional_node(&self) -> Result<Option<NodeId>, String> {
        self.optional_text()?
            .map(|text| self.node(text))
            .transpose()
    }
}

fn column<'row, 'statement>(
    row: &'row Row<'statement>,
    index: usize,
    name: &'static str,
) -> Column<'row, 'statement> {
    Column { row, index, name }
}

/// The key column of a row whose key is itself unreadable, as the `sqlite3` shell shows it.
fn raw_key(row: &Row<'_>) -> String {
    match row.get_ref(0) {
        Ok(ValueRef::Null) => "NULL".to_owned(),
        Ok(ValueRef::Integer(value)) => value.to_string(),
        Ok(ValueRef::Real(value)) => value.to_string(),
        Ok(ValueRef::Text(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Ok(ValueRef::Blob(_)) | Err(_) => "?".to_owned(),
    }
}

/// A version read from a row: versions are handed out from 1 up.
pub(crate) fn decode_version(value: i64) -> Result<Version, String> {
    match u64::try_from(value) {
        Ok(number) if number > 0 => Ok(Version::from_number(number)),
        _ => Err(format!("version {value} is not positive")),
    }
}

fn decode_lease_fields(row: &Row<'_>) -> Result<(LeaseRecord, Version), String> {
    let owner = column(row, 1, "owner").optional_node()?;
    let state_text = column(row, 3, "state").text()?;
    let state = LeaseState::parse(state_text)
        .ok_or_else(|| format!("state {state_text:?} is not held, released or offline"))?;
    let prohibited_column = column(row, 4, "prohibited");
    let prohibited = match prohibited_column.text()? {
        "" => Vec::new(),
        list => list
            .split(',')
            .map(|name| prohibited_column.node(name))
            .collect::<Result<_, _>>()?,
    };
    let record = LeaseRecord {
        owner,
        epoch: Epoch(column(row, 2, "epoch").unsigned()?),
        state,
        prohibited,
        load: column(row, 5, "load").optional_real()?,
        note: column(row, 6, "note").optional_text()?.map(str::to_owned),
        written_at_unix_ms: column(row, 7, "written_at_unix_ms").optional_unsigned()?,
        previous_owner: column(row, 9, "previous_owner").optional_node()?,
        handed_to: column(row, 10, "handed_to").optional_node()?,
        session: column(row, 11, "session").optional_session()?,
    };
    let version = decode_version(column(row, 8, "version").integer()?)?;
    Ok((record, version))
}

/// Decodes a row of [`lease_columns`]; a bad value makes it [`StoreError::Corrupt`].
pub(crate) fn decode_lease(row: &Row<'_>) -> Result<StoredLease, StoreError> {
    let partition = column(row, 0, "partition")
        .integer()
        .and_then(|value| {
            u32::try_from(value).map_err(|_| format!("partition {value} is out of range"))
        })
        .map(PartitionId);
    let partition = match partition {
        Ok(partition) => partition,
        Err(reason) => {
            return Err(StoreError::Corrupt {
                key: RecordKey::Stored(format!("lease {}", raw_key(row))),
                reason,
            });
        }
    };
    decode_lease_fields(row)
        .map(|(value, version)| StoredLease {
            key: partition,
            value,
            version,
        })
        .map_err(|reason| StoreError::Corrupt {
            key: RecordKey::Lease(partition),
            reason,
        })
}

fn decode_member_fields(row: &Row<'_>) -> Result<(MemberRecord, Version), String> {
    let weight = column(row, 1, "weight").unsigned()?;
    let draining = match column(row, 2, "draining").integer()? {
        0 => false,
        1 => true,
        other => return Err(format!("draining is {other}, not 0 or 1")),
    };
    let record = MemberRecord {
        weight: u32::try_from(weight).map_err(|_| format!("weight {weight} is out of range"))?,
        draining,
        load: column(row, 3, "load").optional_real()?,
        heartbeat: column(row, 4, "heartbeat").unsigned()?,
        written_at_unix_ms: column(row, 5, "written_at_unix_ms").optional_unsigned()?,
        lease_validity: column(row, 7, "lease_validity_ns").optional_nanos()?,
        acquire_after: column(row, 8, "acquire_after_ns").optional_nanos()?,
        capacity: column(row, 9, "capacity").optional_real()?,
        max_load: column(row, 10, "max_load").optional_real()?,
        max_partitions: column(row, 11, "max_partitions")
            .optional_unsigned()?
            .map(|cap| {
                u32::try_from(cap).map_err(|_| format!("max_partitions {cap} is out of range"))
            })
            .transpose()?,
        address: column(row, 12, "address")
            .optional_text()?
            .map(str::to_owned),
        metadata: match column(row, 13, "metadata").optional_text()? {
            None => BTreeMap::new(),
            Some(json) => codec::decode_metadata(json)?,
        },
        session: column(row, 14, "session").optional_session()?,
        replaced: column(row, 15, "replaced").optional_session()?,
    };
    let version = decode_version(column(row, 6, "version").integer()?)?;
    Ok((record, version))
}

/// Decodes a row of [`member_columns`]; a bad value makes it [`StoreError::Corrupt`].
pub(crate) fn decode_member(row: &Row<'_>) -> Result<StoredMember, StoreError> {
    let node_column = column(row, 0, "node");
    let node = match node_column.text().and_then(|text| node_column.node(text)) {
        Ok(node) => node,
        Err(reason) => {
            return Err(StoreError::Corrupt {
                key: RecordKey::Stored(format!("member {}", raw_key(row))),
                reason,
            });
        }
    };
    decode_member_fields(row)
        .map(|(value, version)| StoredMember {
            key: node.clone(),
            value,
            version,
        })
        .map_err(|reason| StoreError::Corrupt {
            key: RecordKey::Member(node),
            reason,
        })
}

/// Decodes a row of [`group_columns`]: the record's JSON and its version. A bad value makes
/// it [`StoreError::Corrupt`].
pub(crate) fn decode_group(row: &Row<'_>) -> Result<(GroupRecord, Version), StoreError> {
    let corrupt = |reason| StoreError::Corrupt {
        key: RecordKey::Group,
        reason,
    };
    let text = column(row, 0, "record").text().map_err(corrupt)?;
    let record = codec::decode(RecordKey::Group, text.as_bytes())?;
    let version = column(row, 1, "version")
        .integer()
        .and_then(decode_version)
        .map_err(corrupt)?;
    Ok((record, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_too_long_for_an_integer_are_refused_not_wrapped() {
        let node = NodeId::new("n1").unwrap();
        let fits = MemberRecord {
            lease_validity: Some(Duration::from_nanos(i64::MAX as u64)),
            ..MemberRecord::default()
        };
        let row = encode_member(&node, &fits).unwrap();
        assert_eq!(row.lease_validity_ns, Some(i64::MAX));
        assert_eq!(row.acquire_after_ns, None);
        let too_long = MemberRecord {
            acquire_after: Some(Duration::from_nanos(i64::MAX as u64 + 1)),
            ..MemberRecord::default()
        };
        let error = encode_member(&node, &too_long).unwrap_err();
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
        assert_eq!(encode_member(&node, &member).unwrap().session, Some(-7));
        let lease = LeaseRecord {
            session: Some(u64::MAX),
            ..LeaseRecord::released()
        };
        assert_eq!(
            encode_lease(PartitionId(0), &lease).unwrap().session,
            Some(-1)
        );
        let released = encode_lease(PartitionId(0), &LeaseRecord::released()).unwrap();
        assert_eq!(released.session, None);
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
        let row = encode_member(&node, &fits).unwrap();
        assert_eq!(row.max_partitions, Some(i64::from(u32::MAX)));
        assert!(row.metadata.unwrap().starts_with(r#"{"k0":"v","k1":"v""#));
        assert_eq!(
            encode_member(&node, &MemberRecord::default())
                .unwrap()
                .metadata,
            None
        );
        let too_long = MemberRecord {
            address: Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES + 1)),
            ..MemberRecord::default()
        };
        let too_large = MemberRecord {
            metadata: [("k".to_owned(), "v".repeat(MemberRecord::MAX_METADATA_BYTES))].into(),
            ..MemberRecord::default()
        };
        for (record, field) in [(too_long, "address"), (too_large, "metadata")] {
            let error = encode_member(&node, &record).unwrap_err();
            assert!(
                matches!(&error, StoreError::Invalid(message) if message.contains(field)),
                "{error:?}"
            );
        }
    }
}
