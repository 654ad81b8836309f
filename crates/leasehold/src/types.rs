//! Identifiers shared by every part of leasehold.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The number of a partition, from `0` to `partitions - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PartitionId(pub u32);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u32> for PartitionId {
    fn from(value: u32) -> Self {
        PartitionId(value)
    }
}

/// The fencing token of one tenure of a lease.
///
/// Every acquisition writes an epoch above every one issued for the partition in its group —
/// the record's own plus one, or more when the record was deleted and created again (see
/// [`crate::GroupRecord::epoch_floor`]) — so a resource that remembers the highest epoch it
/// has accepted for a partition can refuse work from an owner whose lease has since moved on
/// (Chubby's sequencers).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch the next acquisition writes.
    #[must_use]
    pub fn next(self) -> Epoch {
        // Saturating: a damaged record at u64::MAX must not panic the taker; a take that
        // cannot raise the epoch still changes the record's version.
        Epoch(self.0.saturating_add(1))
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A name that failed validation, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {reason}")]
pub struct InvalidName {
    /// What kind of name it was ("node id", "group name").
    pub kind: &'static str,
    /// The rejected value.
    pub value: String,
    /// Why it was rejected.
    pub reason: &'static str,
}

const MAX_NAME_LEN: usize = 128;

fn check_name(
    kind: &'static str,
    value: &str,
    allowed: fn(char) -> bool,
) -> Result<(), InvalidName> {
    let fail = |reason| {
        Err(InvalidName {
            kind,
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return fail("must not be empty");
    }
    if value.len() > MAX_NAME_LEN {
        return fail("must be at most 128 bytes");
    }
    if !value.chars().all(allowed) {
        return fail("may hold only letters, digits and the characters - _ . :");
    }
    Ok(())
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')
}

/// The name of a server taking part in a group.
///
/// Letters, digits and `- _ . :`, 1 to 128 bytes: names appear in store keys, log lines and
/// space-separated audit logs, so they must carry no spaces or path separators.
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(Arc<str>);

// Names are compared all the time (every scan of a thousand-node fleet folds a thousand
// member records into a view ordered by name), and most compared pairs are clones of one
// allocation, which the standard comparison of `Arc<str>` still compares byte by byte.
impl PartialEq for NodeId {
    fn eq(&self, other: &NodeId) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Ord for NodeId {
    fn cmp(&self, other: &NodeId) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &NodeId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

// By the text, as equality compares it.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl NodeId {
    /// Validates and wraps a node name.
    pub fn new(name: impl AsRef<str>) -> Result<NodeId, InvalidName> {
        let name = name.as_ref();
        check_name("node id", name, name_char)?;
        Ok(NodeId(Arc::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The member record that operator commands ([`crate::admin`]) rewrite after changing a
    /// lease record, so that nodes which skip the lease table while settled (see
    /// [`crate::ParticipantConfig::relist_after`]) see a member record change at their next
    /// scan and read the table again. It is never counted as a node, and no participant may
    /// take its name.
    ///
    /// ```
    /// use leasehold::NodeId;
    /// assert!(NodeId::operator().is_operator());
    /// assert!(!NodeId::new("n1").unwrap().is_operator());
    /// ```
    pub fn operator() -> NodeId {
        NodeId(Arc::from(OPERATOR))
    }

    /// Whether this is [`NodeId::operator`]'s name.
    pub fn is_operator(&self) -> bool {
        &*self.0 == OPERATOR
    }
}

/// The reserved member name of [`NodeId::operator`].
const OPERATOR: &str = "leasehold.operator";

/// A group name: one independent lease table inside a store.
///
/// Letters, digits and `- _ .`, 1 to 128 bytes, so that it is valid as an etcd key segment, a
/// ZooKeeper node name, an Azure PartitionKey and a SQL value alike.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GroupName(Arc<str>);

impl GroupName {
    /// Validates and wraps a group name.
    pub fn new(name: impl AsRef<str>) -> Result<GroupName, InvalidName> {
        let name = name.as_ref();
        check_name("group name", name, |c| c != ':' && name_char(c))?;
        Ok(GroupName(Arc::from(name)))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_name {
    ($ty:ident) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl TryFrom<String> for $ty {
            type Error = InvalidName;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                $ty::new(value)
            }
        }
        impl From<$ty> for String {
            fn from(value: $ty) -> String {
                value.0.to_string()
            }
        }
        impl std::str::FromStr for $ty {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::new(s)
            }
        }
    };
}
string_name!(NodeId);
string_name!(GroupName);

/// The store-assigned version of a record: opaque, compared only for equality.
///
/// Each backend maps its own notion here (SQLite and PostgreSQL row versions, etcd
/// `mod_revision`, ZooKeeper `mzxid`, Azure ETags). A store changes the version on every
/// write and never reuses one for the same key, even after a delete and a re-create.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(VersionRepr);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum VersionRepr {
    Number(u64),
    Tag(Arc<str>),
}

impl Version {
    /// A version that is a number (a counter or a revision).
    pub fn from_number(number: u64) -> Version {
        Version(VersionRepr::Number(number))
    }

    /// A version that is an opaque tag (for example an HTTP ETag).
    pub fn from_tag(tag: impl AsRef<str>) -> Version {
        Version(VersionRepr::Tag(Arc::from(tag.as_ref())))
    }

    /// The number, if this version was made by [`Version::from_number`].
    pub fn as_number(&self) -> Option<u64> {
        match &self.0 {
            VersionRepr::Number(n) => Some(*n),
            VersionRepr::Tag(_) => None,
        }
    }

    /// The tag, if this version was made by [`Version::from_tag`].
    pub fn as_tag(&self) -> Option<&str> {
        match &self.0 {
            VersionRepr::Number(_) => None,
            VersionRepr::Tag(tag) => Some(tag),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            VersionRepr::Number(n) => n.fmt(f),
            VersionRepr::Tag(tag) => f.write_str(tag),
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

/// Why a node stopped holding a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The deadline passed without a successful renewal (store slow, down or throttled).
    Expired,
    /// A renewal found the record changed or gone: another node took it, or an operator
    /// kicked, prohibited, took offline or deleted it.
    Conflict,
    /// This node handed it off: rebalancing, draining, [`crate::Participant::release`] or
    /// shutdown.
    Released,
    /// The participant's background task ended without releasing it: every handle was
    /// dropped, or the task failed. Nothing renews the lease any more; it expires in the
    /// store on schedule.
    Stopped,
    /// A lease listing showed the record changed behind this node's back: deleted, re-created,
    /// written by another node, or changed by an operator without a write this node would
    /// notice. Served no further from the moment the listing arrived.
    Changed,
}

impl LossReason {
    /// The lowercase name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Conflict => "conflict",
            LossReason::Released => "released",
            LossReason::Stopped => "stopped",
            LossReason::Changed => "changed",
        }
    }
}

/// The largest load one partition may report ([`crate::Callbacks::load`]): far above any
/// rate or size a partition carries, and small enough that the sum over the largest table
/// stays finite. A load above it, negative or not a number is left out, as if unreported.
pub const MAX_LOAD: f64 = 1e12;

/// Whether `load` may be published: a number from 0 to [`MAX_LOAD`].
pub fn is_valid_load(load: f64) -> bool {
    (0.0..=MAX_LOAD).contains(&load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(NodeId::new("node-1.example:7000").is_ok());
        assert_eq!(NodeId::new("").unwrap_err().reason, "must not be empty");
        assert!(NodeId::new("a b").is_err());
        assert!(NodeId::new("a/b").is_err());
        assert!(NodeId::new("x".repeat(129)).is_err());
        assert!(GroupName::new("orders-v2").is_ok());
        assert!(GroupName::new("a:b").is_err());
        let err = NodeId::new("a b").unwrap_err().to_string();
        assert!(err.contains("node id") && err.contains("\"a b\""), "{err}");
    }

    #[test]
    fn names_compare_and_hash_by_their_text_whatever_their_allocation() {
        use std::hash::BuildHasher;
        let a = NodeId::new("n2").unwrap();
        let (same, copy, other) = (
            a.clone(),
            NodeId::new("n2").unwrap(),
            NodeId::new("n10").unwrap(),
        );
        assert!(a == same && a == copy && a != other);
        assert_eq!(a.cmp(&copy), std::cmp::Ordering::Equal);
        assert_eq!(a.cmp(&other), "n2".cmp("n10"));
        assert_eq!(other.cmp(&a), "n10".cmp("n2"));
        let hasher = std::collections::hash_map::RandomState::new();
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&copy));
    }

    #[test]
    fn names_round_trip_through_serde() {
        let node: NodeId = serde_json::from_str("\"n1\"").unwrap();
        assert_eq!(serde_json::to_string(&node).unwrap(), "\"n1\"");
        assert!(serde_json::from_str::<NodeId>("\"\"").is_err());
    }

    #[test]
    fn versions_compare_by_kind_and_value() {
        assert_eq!(Version::from_number(3), Version::from_number(3));
        assert_ne!(Version::from_number(3), Version::from_tag("3"));
        assert_eq!(Version::from_tag("W/\"x\"").as_tag(), Some("W/\"x\""));
    }
}
