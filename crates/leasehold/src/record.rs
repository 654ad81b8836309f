//! The records kept in a store: one lease per partition, one member record per live node.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

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
}

impl LeaseRecord {
    /// A fresh, released record with epoch 0: what initial build-out writes.
    pub fn released() -> LeaseRecord {
        LeaseRecord::default()
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
        }
    }
}

/// Which record of a group something is about: what store errors carry, typed, so that no
/// caller has to take a key apart again.
///
/// ```
/// use leasehold::{NodeId, PartitionId, RecordKey};
/// assert_eq!(RecordKey::from(PartitionId(7)).to_string(), "lease 7");
/// let node = NodeId::new("server-1").unwrap();
/// assert_eq!(RecordKey::from(&node).to_string(), "member server-1");
/// assert_eq!(RecordKey::from(PartitionId(7)).partition(), Some(PartitionId(7)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordKey {
    /// The lease record of a partition.
    Lease(PartitionId),
    /// The member record of a node.
    Member(NodeId),
    /// A stored record whose key names no partition or node (written by hand or by another
    /// program), or a record of the backend's own bookkeeping: its key as the backend stores
    /// it, for messages only.
    Stored(String),
    /// The group record ([`crate::GroupRecord`]).
    Group,
}

impl RecordKey {
    /// The partition, for the lease record of one.
    pub fn partition(&self) -> Option<PartitionId> {
        match self {
            RecordKey::Lease(partition) => Some(*partition),
            _ => None,
        }
    }

    /// The key with its group, for messages: `lease 7 of group orders`.
    pub fn in_group<'a>(&'a self, group: &'a GroupName) -> impl fmt::Display + 'a {
        struct InGroup<'a>(&'a RecordKey, &'a GroupName);
        impl fmt::Display for InGroup<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} of group {}", self.0, self.1)
            }
        }
        InGroup(self, group)
    }

    /// The node, for the member record of one.
    pub fn node(&self) -> Option<&NodeId> {
        match self {
            RecordKey::Member(node) => Some(node),
            _ => None,
        }
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKey::Lease(partition) => write!(f, "lease {partition}"),
            RecordKey::Member(node) => write!(f, "member {node}"),
            RecordKey::Stored(key) => write!(f, "record {key:?}"),
            RecordKey::Group => f.write_str("group record"),
        }
    }
}

impl From<PartitionId> for RecordKey {
    fn from(partition: PartitionId) -> Self {
        RecordKey::Lease(partition)
    }
}

impl From<NodeId> for RecordKey {
    fn from(node: NodeId) -> Self {
        RecordKey::Member(node)
    }
}

impl From<&NodeId> for RecordKey {
    fn from(node: &NodeId) -> Self {
        RecordKey::Member(node.clone())
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
