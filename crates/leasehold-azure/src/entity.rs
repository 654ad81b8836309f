//! Records as table entities with one readable column per field.
//!
//! PartitionKey is the group, so every record of a group can go in one entity-group
//! transaction: one node's renewals, or a lease with the member record of its holder. RowKey
//! is `lease-<partition, 10 digits>` or `member-<node>`: zero-padding makes the service's key
//! order the numeric order. The group record's RowKey is `group`, outside both listings'
//! ranges, and it is kept whole as JSON in one column, so that fields a newer version added
//! survive an older version's rewrite.
//!
//! Optional fields are left out when unset (the service stores no nulls), so entities
//! written before a field existed read with it unset. A member's metadata is one text
//! column holding a JSON object, left out when empty. A session (of a lease or a member) is
//! any `u64`, kept as the Edm.Int64 of the same 64 bits: one above `i64::MAX` shows as a
//! negative number in a table explorer, and reads back exactly.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::{
    codec, Epoch, GroupRecord, LeaseRecord, LeaseState, MemberRecord, NodeId, PartitionId,
    RecordKey, StoreError,
};
use serde_json::{json, Map, Value};

pub(crate) const LEASE_PREFIX: &str = "lease-";
pub(crate) const MEMBER_PREFIX: &str = "member-";
pub(crate) const GROUP_ROW_KEY: &str = "group";
/// The column holding the group record's JSON.
const GROUP_RECORD_COLUMN: &str = "record";
const PARTITION_DIGITS: usize = 10;

pub(crate) fn lease_row_key(partition: PartitionId) -> String {
    format!(
        "{LEASE_PREFIX}{:0width$}",
        partition.0,
        width = PARTITION_DIGITS
    )
}

pub(crate) fn member_row_key(node: &NodeId) -> String {
    format!("{MEMBER_PREFIX}{node}")
}

/// The partition a lease RowKey stands for, if it is one.
pub(crate) fn parse_lease_row_key(row_key: &str) -> Option<PartitionId> {
    let digits = row_key.strip_prefix(LEASE_PREFIX)?;
    if digits.len() != PARTITION_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(PartitionId)
}

/// One record as the entity a write sends, with its RowKey and the key errors name. Single
/// writes, lease batches and transactions all encode through here, so a record is stored the
/// same way whichever call wrote it.
pub(crate) struct Encoded {
    pub(crate) row_key: String,
    pub(crate) key: RecordKey,
    pub(crate) entity: Value,
}

impl Encoded {
    pub(crate) fn lease(group: &str, partition: PartitionId, record: &LeaseRecord) -> Encoded {
        Encoded {
            row_key: lease_row_key(partition),
            key: RecordKey::Lease(partition),
            entity: lease_entity(group, partition, record),
        }
    }

    /// The caller has checked the record ([`MemberRecord::check`]).
    pub(crate) fn member(group: &str, node: &NodeId, record: &MemberRecord) -> Encoded {
        Encoded {
            row_key: member_row_key(node),
            key: RecordKey::from(node),
            entity: member_entity(group, node, record),
        }
    }
}

/// An Edm.Int64 property: OData JSON carries 64-bit integers as strings.
fn insert_int64(entity: &mut Map<String, Value>, name: &str, value: u64) {
    entity.insert(name.to_owned(), Value::String(value.to_string()));
    entity.insert(format!("{name}@odata.type"), json!("Edm.Int64"));
}

/// An Edm.Int64 property holding the 64 bits of `value` (a session, or a write stamp). Edm.Int64
/// is signed, and such a value is any `u64` a writer chose: each is sent as the signed number
/// with its bits, which [`Columns::bits`] reads back.
fn insert_bits(entity: &mut Map<String, Value>, name: &str, value: u64) {
    let bits = i64::from_ne_bytes(value.to_ne_bytes());
    entity.insert(name.to_owned(), Value::String(bits.to_string()));
    entity.insert(format!("{name}@odata.type"), json!("Edm.Int64"));
}

/// An Edm.Double property; OData spells the non-finite values as strings.
fn insert_double(entity: &mut Map<String, Value>, name: &str, value: f64) {
    let encoded = if value.is_finite() {
        json!(value)
    } else if value.is_nan() {
        json!("NaN")
    } else if value > 0.0 {
        json!("Infinity")
    } else {
        json!("-Infinity")
    };
    entity.insert(name.to_owned(), encoded);
    entity.insert(format!("{name}@odata.type"), json!("Edm.Double"));
}

fn keys(group: &str, row_key: String) -> Map<String, Value> {
    let mut entity = Map::new();
    entity.insert("PartitionKey".to_owned(), json!(group));
    entity.insert("RowKey".to_owned(), json!(row_key));
    entity
}

/// The entity of a lease record; absent optional fields are left out (the service stores no
/// nulls).
fn lease_entity(group: &str, partition: PartitionId, record: &LeaseRecord) -> Value {
    let mut entity = keys(group, lease_row_key(partition));
    if let Some(owner) = &record.owner {
        entity.insert("owner".to_owned(), json!(owner.as_str()));
    }
    insert_int64(&mut entity, "epoch", record.epoch.0);
    entity.insert("state".to_owned(), json!(record.state.as_str()));
    let prohibited: Vec<&str> = record.prohibited.iter().map(NodeId::as_str).collect();
    entity.insert("prohibited".to_owned(), json!(prohibited.join(",")));
    if let Some(load) = record.load {
        insert_double(&mut entity, "load", load);
    }
    if let Some(note) = &record.note {
        entity.insert("note".to_owned(), json!(note));
    }
    if let Some(written_at) = record.written_at_unix_ms {
        insert_int64(&mut entity, "written_at_unix_ms", written_at);
    }
    if let Some(previous_owner) = &record.previous_owner {
        entity.insert("previous_owner".to_owned(), json!(previous_owner.as_str()));
    }
    if let Some(handed_to) = &record.handed_to {
        entity.insert("handed_to".to_owned(), json!(handed_to.as_str()));
    }
    if let Some(session) = record.session {
        insert_bits(&mut entity, "session", session);
    }
    Value::Object(entity)
}

/// The entity of a member record. The caller has checked the record
/// ([`MemberRecord::check`]).
fn member_entity(group: &str, node: &NodeId, record: &MemberRecord) -> Value {
    let mut entity = keys(group, member_row_key(node));
    insert_int64(&mut entity, "weight", u64::from(record.weight));
    entity.insert("draining".to_owned(), json!(record.draining));
    if let Some(load) = record.load {
        insert_double(&mut entity, "load", load);
    }
    insert_int64(&mut entity, "heartbeat", record.heartbeat);
    if let Some(written_at) = record.written_at_unix_ms {
        insert_int64(&mut entity, "written_at_unix_ms", written_at);
    }
    if let Some(lease_validity) = record.lease_validity {
        insert_int64(&mut entity, "lease_validity_ns", nanos(lease_validity));
    }
    if let Some(acquire_after) = record.acquire_after {
        insert_int64(&mut entity, "acquire_after_ns", nanos(acquire_after));
    }
    if let Some(capacity) = record.capacity {
        insert_double(&mut entity, "capacity", capacity);
    }
    if let Some(max_load) = record.max_load {
        insert_double(&mut entity, "max_load", max_load);
    }
    if let Some(max_partitions) = record.max_partitions {
        insert_int64(&mut entity, "max_partitions", u64::from(max_partitions));
    }
    if let Some(address) = &record.address {
        entity.insert("address".to_owned(), json!(address));
    }
    if !record.metadata.is_empty() {
        let metadata = codec::encode_metadata(&record.metadata);
        entity.insert("metadata".to_owned(), json!(metadata));
    }
    if let Some(session) = record.session {
        insert_bits(&mut entity, "session", session);
    }
    if let Some(replaced) = record.replaced {
        insert_bits(&mut entity, "replaced", replaced);
    }
    Value::Object(entity)
}

/// Whole nanoseconds, as the JSON records keep them. The configuration bounds these
/// durations at a year, far inside an Int64.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The entity of a group record: its JSON in one text column.
pub(crate) fn group_entity(group: &str, record: &GroupRecord) -> Value {
    let mut entity = keys(group, GROUP_ROW_KEY.to_owned());
    let json = String::from_utf8(codec::encode(record)).expect("JSON is UTF-8");
    entity.insert(GROUP_RECORD_COLUMN.to_owned(), json!(json));
    Value::Object(entity)
}

/// Reads the columns of one entity, naming the record's key in every error.
struct Columns<'a> {
    entity: &'a Map<String, Value>,
    key: &'a RecordKey,
}

impl Columns<'_> {
    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt {
            key: self.key.clone(),
            reason,
        }
    }

    fn string(&self, name: &str) -> Result<Option<&str>, StoreError> {
        match self.entity.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.corrupt(format!("column {name} is not text: {other}"))),
        }
    }

    fn int64(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let parsed = match self.entity.get(name) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(text)) => text.parse().ok(),
            Some(Value::Number(number)) => number.as_u64(),
            Some(_) => None,
        };
        parsed
            .map(Some)
            .ok_or_else(|| self.corrupt(format!("column {name} is not a non-negative integer")))
    }

    /// The value [`insert_bits`] wrote: any signed 64-bit integer, its bits as a `u64`.
    fn bits(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let parsed = match self.entity.get(name) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(text)) => text.parse::<i64>().ok(),
            Some(Value::Number(number)) => number.as_i64(),
            Some(_) => None,
        };
        parsed
            .map(|bits| Some(u64::from_ne_bytes(bits.to_ne_bytes())))
            .ok_or_else(|| self.corrupt(format!("column {name} is not a 64-bit integer")))
    }

    fn required_int64(&self, name: &str) -> Result<u64, StoreError> {
        self.int64(name)?
            .ok_or_else(|| self.corrupt(format!("column {name} is missing")))
    }

    fn double(&self, name: &str) -> Result<Option<f64>, StoreError> {
        let parsed = match self.entity.get(name) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(number)) => number.as_f64(),
            Some(Value::String(text)) => match text.as_str() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                other => other.parse().ok(),
            },
            Some(_) => None,
        };
        parsed
            .map(Some)
            .ok_or_else(|| self.corrupt(format!("column {name} is not a number")))
    }

    fn bool(&self, name: &str) -> Result<bool, StoreError> {
        match self.entity.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(other) => Err(self.corrupt(format!("column {name} is not a boolean: {other}"))),
        }
    }

    fn node(&self, text: &str) -> Result<NodeId, StoreError> {
        NodeId::new(text).map_err(|error| self.corrupt(error.to_string()))
    }

    fn metadata(&self, name: &str) -> Result<BTreeMap<String, String>, StoreError> {
        match self.string(name)? {
            None => Ok(BTreeMap::new()),
            Some(json) => codec::decode_metadata(json).map_err(|reason| self.corrupt(reason)),
        }
    }
}

pub(crate) fn parse_lease(
    key: &RecordKey,
    entity: &Map<String, Value>,
) -> Result<LeaseRecord, StoreError> {
    let columns = Columns { entity, key };
    let state_name = columns
        .string("state")?
        .ok_or_else(|| columns.corrupt("column state is missing".to_owned()))?;
    let state = LeaseState::parse(state_name)
        .ok_or_else(|| columns.corrupt(format!("unknown state {state_name:?}")))?;
    let owner = columns
        .string("owner")?
        .map(|name| columns.node(name))
        .transpose()?;
    let prohibited = match columns.string("prohibited")? {
        None | Some("") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|name| columns.node(name))
            .collect::<Result<_, _>>()?,
    };
    Ok(LeaseRecord {
        owner,
        epoch: Epoch(columns.required_int64("epoch")?),
        state,
        prohibited,
        load: columns.double("load")?,
        note: columns.string("note")?.map(str::to_owned),
        written_at_unix_ms: columns.int64("written_at_unix_ms")?,
        previous_owner: columns
            .string("previous_owner")?
            .map(|name| columns.node(name))
            .transpose()?,
        handed_to: columns
            .string("handed_to")?
            .map(|name| columns.node(name))
            .transpose()?,
        session: columns.bits("session")?,
    })
}

pub(crate) fn parse_member(
    key: &RecordKey,
    entity: &Map<String, Value>,
) -> Result<MemberRecord, StoreError> {
    let columns = Columns { entity, key };
    let weight = columns.required_int64("weight")?;
    Ok(MemberRecord {
        weight: u32::try_from(weight)
            .map_err(|_| columns.corrupt(format!("weight {weight} is too large")))?,
        draining: columns.bool("draining")?,
        load: columns.double("load")?,
        heartbeat: columns.int64("heartbeat")?.unwrap_or(0),
        written_at_unix_ms: columns.int64("written_at_unix_ms")?,
        // Absent in entities written before nodes published their timings.
        lease_validity: columns
            .int64("lease_validity_ns")?
            .map(Duration::from_nanos),
        acquire_after: columns.int64("acquire_after_ns")?.map(Duration::from_nanos),
        capacity: columns.double("capacity")?,
        max_load: columns.double("max_load")?,
        max_partitions: columns
            .int64("max_partitions")?
            .map(|cap| {
                u32::try_from(cap)
                    .map_err(|_| columns.corrupt(format!("max_partitions {cap} is too large")))
            })
            .transpose()?,
        address: columns.string("address")?.map(str::to_owned),
        metadata: columns.metadata("metadata")?,
        session: columns.bits("session")?,
        replaced: columns.bits("replaced")?,
    })
}

pub(crate) fn parse_group(entity: &Map<String, Value>) -> Result<GroupRecord, StoreError> {
    let columns = Columns {
        entity,
        key: &RecordKey::Group,
    };
    let json = columns
        .string(GROUP_RECORD_COLUMN)?
        .ok_or_else(|| columns.corrupt(format!("column {GROUP_RECORD_COLUMN} is missing")))?;
    codec::decode(RecordKey::Group, json.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn row_keys_sort_numerically() {
        assert_eq!(lease_row_key(PartitionId(7)), "lease-0000000007");
        assert!(lease_row_key(PartitionId(9)) < lease_row_key(PartitionId(10)));
        assert_eq!(
            parse_lease_row_key("lease-0000000007"),
            Some(PartitionId(7))
        );
        assert_eq!(parse_lease_row_key("lease-7"), None);
        assert_eq!(parse_lease_row_key("member-0000000007"), None);
    }

    /// An entity-group transaction covers one PartitionKey: a lease and the member record
    /// that can be its holder's session must share it, and differ in RowKey.
    #[test]
    fn a_groups_leases_and_members_share_one_partition_key() {
        let node = NodeId::new("n1").unwrap();
        let lease = Encoded::lease("orders", PartitionId(7), &LeaseRecord::released());
        let member = Encoded::member("orders", &node, &MemberRecord::default());
        assert_eq!(lease.entity["PartitionKey"], json!("orders"));
        assert_eq!(member.entity["PartitionKey"], json!("orders"));
        assert_eq!(lease.entity["RowKey"], json!(lease.row_key));
        assert_eq!(member.entity["RowKey"], json!(member.row_key));
        assert_ne!(lease.row_key, member.row_key);
        assert_eq!(
            (lease.key, member.key),
            (RecordKey::Lease(PartitionId(7)), RecordKey::from(&node))
        );
    }

    #[test]
    fn lease_columns_round_trip() {
        let record = LeaseRecord {
            owner: Some(NodeId::new("n1").unwrap()),
            epoch: Epoch(u64::from(u32::MAX) + 5),
            state: LeaseState::Held,
            prohibited: vec![NodeId::new("a").unwrap(), NodeId::new("b:1").unwrap()],
            load: Some(2.0),
            note: Some("kicked, by hand".to_owned()),
            written_at_unix_ms: Some(1_700_000_000_123),
            previous_owner: Some(NodeId::new("before").unwrap()),
            handed_to: Some(NodeId::new("heir").unwrap()),
            session: Some(u64::MAX - 6),
        };
        let entity = object(lease_entity("orders", PartitionId(3), &record));
        assert_eq!(entity["epoch"], json!("4294967300"));
        assert_eq!(entity["epoch@odata.type"], json!("Edm.Int64"));
        assert_eq!(entity["prohibited"], json!("a,b:1"));
        assert_eq!(
            (&entity["previous_owner"], &entity["handed_to"]),
            (&json!("before"), &json!("heir"))
        );
        assert_eq!(
            (&entity["session"], &entity["session@odata.type"]),
            (&json!("-7"), &json!("Edm.Int64"))
        );
        assert_eq!(
            parse_lease(&RecordKey::Lease(PartitionId(2)), &entity).unwrap(),
            record
        );
        let bare = object(lease_entity(
            "orders",
            PartitionId(3),
            &LeaseRecord::released(),
        ));
        assert!(["owner", "load", "previous_owner", "handed_to", "session"]
            .iter()
            .all(|name| !bare.contains_key(*name)));
        assert_eq!(
            parse_lease(&RecordKey::Lease(PartitionId(0)), &bare).unwrap(),
            LeaseRecord::released()
        );
    }

    #[test]
    fn member_columns_round_trip() {
        let record = MemberRecord {
            weight: 3,
            draining: true,
            load: Some(f64::INFINITY),
            heartbeat: 42,
            written_at_unix_ms: None,
            lease_validity: Some(Duration::from_nanos(30_000_000_007)),
            acquire_after: Some(Duration::from_secs(45)),
            capacity: Some(2.5),
            max_load: Some(f64::MAX),
            max_partitions: Some(u32::MAX),
            address: Some("http://n1.example:8080".to_owned()),
            metadata: [("zone".to_owned(), r#"eu "1""#.to_owned())].into(),
            session: Some(7),
            replaced: Some(u64::MAX - 1),
        };
        let entity = object(member_entity(
            "orders",
            &NodeId::new("n1").unwrap(),
            &record,
        ));
        assert_eq!(entity["lease_validity_ns"], json!("30000000007"));
        assert_eq!(entity["acquire_after_ns@odata.type"], json!("Edm.Int64"));
        assert_eq!(entity["max_partitions"], json!("4294967295"));
        assert_eq!(entity["metadata"], json!(r#"{"zone":"eu \"1\""}"#));
        assert_eq!(
            (&entity["session"], &entity["session@odata.type"]),
            (&json!("7"), &json!("Edm.Int64"))
        );
        assert_eq!(
            (&entity["replaced"], &entity["replaced@odata.type"]),
            (&json!("-2"), &json!("Edm.Int64"))
        );
        assert_eq!(
            parse_member(&RecordKey::Stored("k".into()), &entity).unwrap(),
            record
        );
    }

    /// Sessions are kept bit for bit as signed Int64 values, on leases and members alike,
    /// whether the service answers them as strings (as OData JSON does) or as numbers.
    #[test]
    fn every_session_is_kept_bit_for_bit() {
        let node = NodeId::new("n1").unwrap();
        for (session, bits) in [
            (0, "0"),
            (7, "7"),
            (i64::MAX as u64, "9223372036854775807"),
            (1 << 63, "-9223372036854775808"),
            (u64::MAX - 6, "-7"),
            (u64::MAX, "-1"),
        ] {
            let lease = LeaseRecord {
                owner: Some(node.clone()),
                state: LeaseState::Held,
                session: Some(session),
                ..LeaseRecord::default()
            };
            let member = MemberRecord {
                session: Some(session),
                ..MemberRecord::default()
            };
            let mut taken = object(lease_entity("orders", PartitionId(1), &lease));
            let mut joined = object(member_entity("orders", &node, &member));
            assert_eq!(taken["session"], json!(bits), "{session}");
            assert_eq!(joined["session"], json!(bits), "{session}");
            let (lease_key, member_key) =
                (RecordKey::Lease(PartitionId(1)), RecordKey::from(&node));
            assert_eq!(parse_lease(&lease_key, &taken).unwrap(), lease);
            assert_eq!(parse_member(&member_key, &joined).unwrap(), member);
            let number: i64 = bits.parse().unwrap();
            taken.insert("session".to_owned(), json!(number));
            joined.insert("session".to_owned(), json!(number));
            assert_eq!(parse_lease(&lease_key, &taken).unwrap(), lease);
            assert_eq!(parse_member(&member_key, &joined).unwrap(), member);
        }
        let bare = object(member_entity("orders", &node, &MemberRecord::default()));
        assert!(!bare.contains_key("session"));
    }

    #[test]
    fn members_written_before_timings_were_published_read_without_them() {
        let node = NodeId::new("n1").unwrap();
        let entity = object(json!({
            "PartitionKey": "orders",
            "RowKey": member_row_key(&node),
            "weight": "2",
            "weight@odata.type": "Edm.Int64",
            "draining": false,
            "heartbeat": "7",
            "heartbeat@odata.type": "Edm.Int64",
        }));
        let record = parse_member(&RecordKey::from(&node), &entity).unwrap();
        assert_eq!((record.lease_validity, record.acquire_after), (None, None));
        assert_eq!((record.weight, record.heartbeat), (2, 7));
        assert_eq!(record.metadata, BTreeMap::new());
        assert_eq!(
            (
                record.capacity,
                record.max_load,
                record.max_partitions,
                record.address
            ),
            (None, None, None, None)
        );
        let bare = object(member_entity("orders", &node, &MemberRecord::default()));
        for column in [
            "lease_validity_ns",
            "acquire_after_ns",
            "capacity",
            "max_load",
            "max_partitions",
            "address",
            "metadata",
        ] {
            assert!(!bare.contains_key(column), "{column}");
        }
    }

    #[test]
    fn damaged_member_fields_are_corrupt_naming_the_member() {
        let node = NodeId::new("n1").unwrap();
        for (column, value) in [
            ("metadata", json!("{not json")),
            ("metadata", json!(r#"{"zone":1}"#)),
            ("metadata", json!(7)),
            ("max_partitions", json!("4294967296")),
            ("capacity", json!("lots")),
            ("address", json!(false)),
            ("session", json!("soon")),
            ("session", json!("18446744073709551609")),
            ("session", json!(1.5)),
        ] {
            let mut entity = object(member_entity("orders", &node, &MemberRecord::default()));
            entity.insert(column.to_owned(), value.clone());
            let error = parse_member(&RecordKey::from(&node), &entity).unwrap_err();
            assert!(
                matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::from(&node)),
                "{column} {value}: {error:?}"
            );
        }
    }

    #[test]
    fn damaged_member_timings_are_corrupt_naming_the_member() {
        let node = NodeId::new("n1").unwrap();
        for (column, value) in [
            ("lease_validity_ns", json!("-1")),
            ("acquire_after_ns", json!("soon")),
            ("lease_validity_ns", json!(true)),
        ] {
            let mut entity = object(member_entity("orders", &node, &MemberRecord::default()));
            entity.insert(column.to_owned(), value);
            let error = parse_member(&RecordKey::from(&node), &entity).unwrap_err();
            assert!(
                matches!(&error, StoreError::Corrupt { key, reason } if *key == RecordKey::from(&node) && reason.contains(column)),
                "{error:?}"
            );
        }
    }

    #[test]
    fn the_group_record_is_kept_whole_and_outside_the_listings() {
        let record = GroupRecord {
            epoch_floor: Epoch(9),
            other: [("future_field".to_owned(), json!({"kept": true}))].into(),
            ..GroupRecord::default()
        };
        let entity = object(group_entity("orders", &record));
        assert_eq!(entity["RowKey"], json!(GROUP_ROW_KEY));
        assert_eq!(parse_group(&entity).unwrap(), record);
        for prefix in [LEASE_PREFIX, MEMBER_PREFIX] {
            assert!(!GROUP_ROW_KEY.starts_with(prefix));
        }
        for damaged in [Some(json!("{not json")), Some(json!(3)), None] {
            let mut entity = entity.clone();
            match damaged {
                Some(value) => entity.insert(GROUP_RECORD_COLUMN.to_owned(), value),
                None => entity.remove(GROUP_RECORD_COLUMN),
            };
            let error = parse_group(&entity).unwrap_err();
            assert!(
                matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::Group),
                "{error:?}"
            );
        }
    }

    #[test]
    fn damaged_columns_are_corrupt_naming_the_key() {
        let mut entity = object(lease_entity("g", PartitionId(2), &LeaseRecord::released()));
        entity.insert("state".to_owned(), json!("bogus"));
        let error = parse_lease(&RecordKey::Lease(PartitionId(2)), &entity).unwrap_err();
        assert!(
            matches!(&error, StoreError::Corrupt { key, reason } if *key == RecordKey::Lease(PartitionId(2)) && reason.contains("bogus")),
            "{error:?}"
        );
        entity.insert("state".to_owned(), json!("held"));
        entity.insert("epoch".to_owned(), json!("-1"));
        assert!(parse_lease(&RecordKey::Lease(PartitionId(2)), &entity).is_err());
    }
}
