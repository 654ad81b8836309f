//! The records kept in a store: one lease per partition, one member record per live node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::types::{Epoch, NodeId, PartitionId, RecordKey, Version};

mod head;
pub use head::{IntoHeads, MemberHead, StoredMemberHead};

/// Where a partition's lease stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// An owner holds the lease while it keeps renewing the record.
    Held,
    /// Free to take at once: the last holder stopped work and released it.
    #[default]
    Released,
    /// Out of service: no node may take it until an operator brings it back online.
    Offline,
}

impl LeaseState {
    /// The lowercase name used in stores, logs and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Held => "held",
            LeaseState::Released => "released",
            LeaseState::Offline => "offline",
        }
    }

    /// Parses the name written by [`LeaseState::as_str`].
    pub fn parse(name: &str) -> Option<LeaseState> {
        match name {
            "held" => Some(LeaseState::Held),
            "released" => Some(LeaseState::Released),
            "offline" => Some(LeaseState::Offline),
            _ => None,
        }
    }
}

impl std::fmt::Display for LeaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lease record of one partition.
///
/// Only `owner`, `epoch`, `state` and `prohibited` take part in decisions. `load`,
/// `note` and `written_at_unix_ms` are diagnostics for operators: no decision trusts a time
/// read from a record, because it comes from another machine's clock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The node that holds or last held the lease.
    pub owner: Option<NodeId>,
    /// The fencing token of the current or last tenure.
    pub epoch: Epoch,
    /// Held, released or offline.
    pub state: LeaseState,
    /// Nodes that must never take this partition.
    #[serde(default)]
    pub prohibited: Vec<NodeId>,
    /// The load the owner last reported for this partition.
    #[serde(default)]
    pub load: Option<f64>,
    /// What last changed the record by hand (for example "kicked"), for operators.
    #[serde(default)]
    pub note: Option<String>,
    /// The writer's wall-clock time of the last write, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub written_at_unix_ms: Option<u64>,
    /// The node that held the partition before the current tenure, or, in a released
    /// record, the node that released it: lets a node that comes back under the same name
    /// be handed its partitions again instead of a random share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_owner: Option<NodeId>,
    /// In a released record, the node it is handed to: the others leave it to that node for
    /// a while. `previous_owner` still names the node that released it, so the partition's
    /// history survives the hand-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_to: Option<NodeId>,
    /// With session leases, the session of the owner under which the lease is held
    /// ([`MemberRecord::session`]). When the owner's member record shows another session, the
    /// process that took the lease has lost its session and renews it no more, however
    /// often the new one renews. In the per-partition mode, the identity of the process that
    /// took it, drawn as a session's is: two processes under one name never write equal
    /// records, so neither reads back the other's write as its own. `None` in released
    /// records. Stores keep it as a signed 64-bit integer, bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
}

impl LeaseRecord {
    /// A fresh, released record with epoch 0: what initial build-out writes.
    pub fn released() -> LeaseRecord {
        LeaseRecord::default()
    }

    /// Whether the record is released and reserved for the node that released it, which is
    /// restarting in place ([`crate::Participant::restart`]): a released record that still
    /// names its last holder as `owner` and is handed to that same node. (A partition handed
    /// back to the node it came from also has `handed_to` equal to `previous_owner`, but no
    /// owner: released records otherwise name none.) The others leave it to that node for
    /// the group's restart window.
    pub fn is_reserved(&self) -> bool {
        self.reserved_for().is_some()
    }

    /// The node the record is reserved for, if it is reserved ([`LeaseRecord::is_reserved`]).
    pub fn reserved_for(&self) -> Option<&NodeId> {
        self.owner.as_ref().filter(|owner| {
            self.state == LeaseState::Released && self.handed_to.as_ref() == Some(*owner)
        })
    }

    /// Makes a released record reserved for `node` (see [`LeaseRecord::is_reserved`]).
    pub fn reserve_for(&mut self, node: &NodeId) {
        self.owner = Some(node.clone());
        self.handed_to = Some(node.clone());
        self.previous_owner = Some(node.clone());
    }

    /// Whether `node` is on this partition's prohibited list.
    pub fn is_prohibited(&self, node: &NodeId) -> bool {
        self.prohibited.iter().any(|p| p == node)
    }
}

/// A member record: one per node taking part, rewritten every heartbeat.
///
/// Other nodes consider a member live while its record keeps changing version, so each node
/// can compute a fair share of the partitions without a leader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// Relative capacity: a node of weight 2 targets twice the partitions of weight 1.
    pub weight: u32,
    /// A draining node targets zero partitions and hands its leases off cooperatively.
    #[serde(default)]
    pub draining: bool,
    /// The node's total reported load.
    #[serde(default)]
    pub load: Option<f64>,
    /// Incremented on every heartbeat so that each write differs.
    #[serde(default)]
    pub heartbeat: u64,
    /// The writer's wall-clock time of the last write, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub written_at_unix_ms: Option<u64>,
    /// The node's `lease_validity`, published so that a change of the group's timings can
    /// check every member against it ([`crate::admin::set_timings`]). `None` in records of
    /// older versions and of the operator's record.
    #[serde(
        default,
        rename = "lease_validity_ns",
        with = "crate::group::nanos::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lease_validity: Option<std::time::Duration>,
    /// The node's `acquire_after`, published with `lease_validity`.
    #[serde(
        default,
        rename = "acquire_after_ns",
        with = "crate::group::nanos::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub acquire_after: Option<std::time::Duration>,
    /// The node's capacity for load, relative to the other members' (as `weight` is for
    /// partition counts), so that balancing by load can give a bigger machine more of it.
    /// `None` when the node reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
    /// The load above which the node sheds partitions, published so that the others know
    /// it will not take more. `None` for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_load: Option<f64>,
    /// The most partitions the node will hold (its `max_partitions_per_node`, when that is
    /// below the partition count), so that a monitor can tell the partitions no node can take
    /// from those merely unassigned yet. `None` for no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_partitions: Option<u32>,
    /// The URL the node serves clients on, so that a router can send a key's requests to
    /// its owner without a directory of its own. At most [`MemberRecord::MAX_ADDRESS_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A few labels an operator or application attaches to the node (zone, version, rack),
    /// kept small because every node reads every member record at every scan: at most
    /// [`MemberRecord::MAX_METADATA_ENTRIES`] entries and
    /// [`MemberRecord::MAX_METADATA_BYTES`] as JSON.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// With session leases, the identity of this session: a number a process draws at random
    /// whenever it starts a session (on joining, and after losing one), and writes into
    /// every lease record it takes ([`LeaseRecord::session`]). A process restarting under the
    /// same name draws another, so the others can tell its predecessor's leases from its own.
    /// `None` in the per-partition mode. Stores keep it as a signed 64-bit integer, bit for
    /// bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// With session leases, when this session began by writing over another process's
    /// session under the same name: that session's last write, named by its whole session
    /// identity and its write stamp together ([`replaced_mark`]). A node that saw that very
    /// write knows the replaced session renewed nothing after it, and waits on its leases
    /// from then rather than from when it first saw this session. A stamp alone would not
    /// do: two processes under one name share a wall clock, and two writes of different
    /// sessions can carry the same millisecond. Stores keep it as a signed 64-bit integer,
    /// bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<u64>,
}

impl Default for MemberRecord {
    fn default() -> Self {
        MemberRecord {
            weight: 1,
            draining: false,
            load: None,
            heartbeat: 0,
            written_at_unix_ms: None,
            lease_validity: None,
            acquire_after: None,
            capacity: None,
            max_load: None,
            max_partitions: None,
            address: None,
            metadata: BTreeMap::new(),
            session: None,
            replaced: None,
        }
    }
}

/// What [`MemberRecord::replaced`] holds for the write of session `session` stamped
/// `stamp`: the two mixed into one 64-bit value (SplitMix64's finaliser, fixed so that every
/// build and every reader computes the same), so that a reader matches it only against
/// that very write of that very session.
///
/// ```
/// use leasehold::replaced_mark;
/// assert_eq!(replaced_mark(7, 1_700_000_000_000), replaced_mark(7, 1_700_000_000_000));
/// assert_ne!(replaced_mark(7, 1_700_000_000_000), replaced_mark(8, 1_700_000_000_000));
/// ```
pub fn replaced_mark(session: u64, stamp: u64) -> u64 {
    let mut z = session ^ stamp.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A field of a record that no store accepts, and why: what [`MemberRecord::validate`]
/// returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct InvalidRecord {
    /// The field at fault, as the record's JSON names it.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidRecord {
    fn new(field: &'static str, reason: impl Into<String>) -> InvalidRecord {
        InvalidRecord {
            field,
            reason: reason.into(),
        }
    }

    /// The [`StoreError::Invalid`] a store returns for this record, naming its key.
    pub fn into_store_error(self, key: impl Into<RecordKey>) -> StoreError {
        StoreError::Invalid(format!("{}: {self}", key.into()))
    }
}

impl MemberRecord {
    /// The longest [`MemberRecord::address`], in bytes: room for any URL a node serves on,
    /// small enough that a thousand members list in well under a megabyte.
    pub const MAX_ADDRESS_BYTES: usize = 512;
    /// The most entries [`MemberRecord::metadata`] may hold.
    pub const MAX_METADATA_ENTRIES: usize = 16;
    /// The longest [`MemberRecord::metadata`] may be, in bytes of its compact JSON (the form
    /// every store keeps it in).
    pub const MAX_METADATA_BYTES: usize = 4096;

    /// Checks what every store refuses to write: an address or metadata over its limit or
    /// holding control characters, an empty address or metadata key, and a capacity or
    /// maximum load that is negative or not finite (JSON, which several stores keep records
    /// in, has no NaN or infinity, so such a value could not be read back as written).
    ///
    /// Every [`LeaseStore`](crate::LeaseStore) calls it before writing a member record and
    /// refuses one that fails with [`StoreError::Invalid`], changing nothing.
    ///
    /// ```
    /// use leasehold::MemberRecord;
    /// let mut record = MemberRecord {
    ///     address: Some("http://10.0.0.7:8080".to_owned()),
    ///     ..MemberRecord::default()
    /// };
    /// assert!(record.validate().is_ok());
    /// record.address = Some("x".repeat(MemberRecord::MAX_ADDRESS_BYTES + 1));
    /// assert_eq!(record.validate().unwrap_err().field, "address");
    /// ```
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        for (field, value) in [("capacity", self.capacity), ("max_load", self.max_load)] {
            match value {
                Some(value) if !value.is_finite() => {
                    return Err(InvalidRecord::new(field, format!("{value} is not finite")));
                }
                Some(value) if value < 0.0 => {
                    return Err(InvalidRecord::new(field, format!("{value} is negative")));
                }
                _ => {}
            }
        }
        if let Some(address) = &self.address {
            check_text(address).map_err(|reason| InvalidRecord::new("address", reason))?;
            if address.len() > Self::MAX_ADDRESS_BYTES {
                return Err(InvalidRecord::new(
                    "address",
                    format!(
                        "is {} bytes; at most {} are kept",
                        address.len(),
                        Self::MAX_ADDRESS_BYTES
                    ),
                ));
            }
        }
        self.validate_metadata()
    }

    fn validate_metadata(&self) -> Result<(), InvalidRecord> {
        let invalid = |reason| Err(InvalidRecord::new("metadata", reason));
        let entries = self.metadata.len();
        if entries > Self::MAX_METADATA_ENTRIES {
            let most = Self::MAX_METADATA_ENTRIES;
            return invalid(format!("has {entries} entries; at most {most} are kept"));
        }
        for key in self.metadata.keys() {
            if let Err(reason) = check_text(key) {
                return invalid(format!("key {key:?} {reason}"));
            }
        }
        let encoded = encode_metadata(&self.metadata).len();
        if encoded > Self::MAX_METADATA_BYTES {
            let most = Self::MAX_METADATA_BYTES;
            return invalid(format!(
                "is {encoded} bytes as JSON; at most {most} are kept"
            ));
        }
        Ok(())
    }

    /// [`MemberRecord::validate`], as the [`StoreError::Invalid`] a store returns for the
    /// member record of `node`.
    pub fn check(&self, node: &NodeId) -> Result<(), StoreError> {
        self.validate()
            .map_err(|error| error.into_store_error(node))
    }
}

/// Refuses text that is empty or holds control characters, which would break the lines of
/// the logs and tables it is shown in.
fn check_text(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Err("is empty".to_owned());
    }
    match text.chars().find(|c| c.is_control()) {
        Some(control) => Err(format!("holds the control character {control:?}")),
        None => Ok(()),
    }
}

/// A record read from a store, with its key and the version the store assigned.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored<K, V> {
    /// The record's key within its group.
    pub key: K,
    /// The record.
    pub value: V,
    /// The version to compare against on the next conditional write.
    pub version: Version,
}

/// A stored lease record, keyed by partition.
pub type StoredLease = Stored<PartitionId, LeaseRecord>;
/// A stored member record, keyed by node.
pub type StoredMember = Stored<NodeId, MemberRecord>;

/// The current wall-clock time in milliseconds since the Unix epoch, for diagnostics only.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A member's metadata ([`crate::MemberRecord::metadata`]) as the compact JSON object that
/// stores with columns keep in one text column, and the form its size limit is measured in.
///
/// ```
/// use std::collections::BTreeMap;
/// use leasehold::codec::{decode_metadata, encode_metadata};
/// let metadata = BTreeMap::from([("zone".to_owned(), "eu-1".to_owned())]);
/// let json = encode_metadata(&metadata);
/// assert_eq!(json, r#"{"zone":"eu-1"}"#);
/// assert_eq!(decode_metadata(&json).unwrap(), metadata);
/// assert!(decode_metadata(r#"{"zone":1}"#).is_err());
/// ```
pub fn encode_metadata(metadata: &BTreeMap<String, String>) -> String {
    serde_json::to_string(metadata).expect("a map of strings always serializes")
}

/// Reads metadata written by [`encode_metadata`]; the error, for a
/// [`StoreError::Corrupt`], says why the text is not a JSON object of strings.
pub fn decode_metadata(json: &str) -> Result<BTreeMap<String, String>, String> {
    serde_json::from_str(json)
        .map_err(|error| format!("metadata is not a JSON object of strings: {error}"))
}

/// Puts a listing in key order, keeping the first of any repeated key: a store's listing is
/// ordered already, and a view is merged with it side by side.
pub(crate) fn in_key_order<K: Ord, T>(records: &mut Vec<Stored<K, T>>) {
    if !records.is_sorted_by(|a, b| a.key < b.key) {
        records.sort_by(|a, b| a.key.cmp(&b.key));
        records.dedup_by(|later, earlier| later.key == earlier.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    #[test]
    fn records_written_before_the_optional_fields_decode_with_their_defaults() {
        let lease: LeaseRecord = decode(
            PartitionId(1),
            br#"{"owner":"n1","epoch":3,"state":"held","prohibited":[],"load":null,"note":null,"written_at_unix_ms":17}"#,
        )
        .unwrap();
        assert_eq!(lease.previous_owner, None);
        let member: MemberRecord = decode(
            node("n1"),
            br#"{"weight":2,"draining":false,"load":null,"heartbeat":7,"written_at_unix_ms":null}"#,
        )
        .unwrap();
        assert_eq!(
            member,
            MemberRecord {
                weight: 2,
                heartbeat: 7,
                ..MemberRecord::default()
            }
        );
    }

    #[test]
    fn unset_optional_fields_are_not_written_and_set_ones_round_trip() {
        let lease = String::from_utf8(encode(&LeaseRecord::released())).unwrap();
        assert!(!lease.contains("previous_owner"), "{lease}");
        let member = String::from_utf8(encode(&MemberRecord::default())).unwrap();
        for field in [
            "capacity",
            "max_load",
            "max_partitions",
            "address",
            "metadata",
            "session",
            "replaced",
        ] {
            assert!(!member.contains(field), "{member}");
        }
        assert!(!lease.contains("session"), "{lease}");
        let lease = LeaseRecord {
            previous_owner: Some(node("before")),
            ..LeaseRecord::released()
        };
        assert_eq!(
            decode::<LeaseRecord>(PartitionId(0), &encode(&lease)).unwrap(),
            lease
        );
        let member = MemberRecord {
            capacity: Some(2.5),
            max_load: Some(0.0),
            max_partitions: Some(u32::MAX),
            address: Some("http://[::1]:8080".to_owned()),
            metadata: BTreeMap::from([("zone".to_owned(), "a \"b\"".to_owned())]),
            ..MemberRecord::default()
        };
        assert_eq!(
            decode::<MemberRecord>(&node("n1"), &encode(&member)).unwrap(),
            member
        );
    }

    #[test]
    fn limits_are_inclusive_and_name_the_field() {
        let at_limit = MemberRecord {
            address: Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES)),
            metadata: (0..MemberRecord::MAX_METADATA_ENTRIES)
                .map(|index| (format!("k{index:02}"), String::new()))
                .collect(),
            ..MemberRecord::default()
        };
        assert_eq!(at_limit.validate(), Ok(()));
        let field = |record: MemberRecord| record.validate().map_err(|error| error.field);
        let too_long = MemberRecord {
            address: Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES + 1)),
            ..MemberRecord::default()
        };
        assert_eq!(field(too_long), Err("address"));
        let mut too_many = at_limit.clone();
        too_many.address = None;
        too_many
            .metadata
            .insert("one-more".to_owned(), String::new());
        assert_eq!(field(too_many), Err("metadata"));

        // Measured as JSON: escaping counts.
        let mut metadata = BTreeMap::from([("k".to_owned(), String::new())]);
        let room = MemberRecord::MAX_METADATA_BYTES - encode_metadata(&metadata).len();
        metadata.insert("k".to_owned(), "v".repeat(room));
        let fits = MemberRecord {
            metadata: metadata.clone(),
            ..MemberRecord::default()
        };
        assert_eq!(fits.validate(), Ok(()));
        metadata.insert("k".to_owned(), format!("\"{}", "v".repeat(room - 1)));
        let escaped = MemberRecord {
            metadata,
            ..MemberRecord::default()
        };
        assert_eq!(field(escaped), Err("metadata"));

        for (record, expected) in [
            (
                MemberRecord {
                    capacity: Some(f64::NAN),
                    ..MemberRecord::default()
                },
                "capacity",
            ),
            (
                MemberRecord {
                    max_load: Some(-0.5),
                    ..MemberRecord::default()
                },
                "max_load",
            ),
            (
                MemberRecord {
                    address: Some("a\u{7f}".to_owned()),
                    ..MemberRecord::default()
                },
                "address",
            ),
            (
                MemberRecord {
                    metadata: BTreeMap::from([("a\nb".to_owned(), String::new())]),
                    ..MemberRecord::default()
                },
                "metadata",
            ),
        ] {
            assert_eq!(field(record), Err(expected));
        }
    }

    #[test]
    fn a_refused_record_is_an_invalid_store_error_naming_the_member_and_field() {
        let record = MemberRecord {
            address: Some(String::new()),
            ..MemberRecord::default()
        };
        let error = record.check(&node("n1")).unwrap_err();
        assert!(
            matches!(&error, StoreError::Invalid(message) if message == "member n1: address is empty"),
            "{error:?}"
        );
    }

    #[test]
    fn only_a_released_record_naming_its_owner_as_heir_is_reserved() {
        let node = |name: &str| NodeId::new(name).unwrap();
        let mut reserved = LeaseRecord::released();
        reserved.reserve_for(&node("a"));
        assert!(reserved.is_reserved());
        // Handed back to the node it came from: no owner, not a reservation.
        let home = LeaseRecord {
            previous_owner: Some(node("a")),
            handed_to: Some(node("a")),
            ..LeaseRecord::released()
        };
        assert!(!home.is_reserved());
        let handed = LeaseRecord {
            handed_to: Some(node("b")),
            ..reserved.clone()
        };
        assert!(!handed.is_reserved());
        let taken = LeaseRecord {
            state: LeaseState::Held,
            ..reserved
        };
        assert!(!taken.is_reserved());
    }
}
