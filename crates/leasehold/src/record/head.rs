//! What a participant's scan reads of each member record: the parts planning and the session
//! rules act on, without those only routers, monitors and operators read.

use super::{MemberRecord, Stored};
use crate::types::NodeId;

/// The part of a [`MemberRecord`] a participant reads at every scan
/// ([`LeaseStore::list_member_heads`]).
///
/// Every node reads every member record at every scan, so a fleet of a thousand nodes reads
/// a million of them per scan interval; a head leaves out what planning never looks at (the
/// address, the metadata, the published timings, the partition cap and the load), which a
/// store may then neither send nor copy.
///
/// ```
/// use leasehold::{MemberHead, MemberRecord};
/// let record = MemberRecord { weight: 2, heartbeat: 7, address: Some("http://a:1".into()), ..MemberRecord::default() };
/// let head = MemberHead::from(&record);
/// assert_eq!((head.weight, head.heartbeat), (2, 7));
/// ```
///
/// [`LeaseStore::list_member_heads`]: crate::LeaseStore::list_member_heads
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberHead {
    /// [`MemberRecord::weight`].
    pub weight: u32,
    /// [`MemberRecord::draining`].
    pub draining: bool,
    /// [`MemberRecord::heartbeat`].
    pub heartbeat: u64,
    /// [`MemberRecord::written_at_unix_ms`].
    pub written_at_unix_ms: Option<u64>,
    /// [`MemberRecord::capacity`].
    pub capacity: Option<f64>,
    /// [`MemberRecord::max_load`].
    pub max_load: Option<f64>,
    /// [`MemberRecord::session`].
    pub session: Option<u64>,
    /// [`MemberRecord::replaced`].
    pub replaced: Option<u64>,
}

impl From<&MemberRecord> for MemberHead {
    fn from(record: &MemberRecord) -> MemberHead {
        MemberHead {
            weight: record.weight,
            draining: record.draining,
            heartbeat: record.heartbeat,
            written_at_unix_ms: record.written_at_unix_ms,
            capacity: record.capacity,
            max_load: record.max_load,
            session: record.session,
            replaced: record.replaced,
        }
    }
}

/// A stored member record's head, keyed by node.
pub type StoredMemberHead = Stored<NodeId, MemberHead>;

impl From<&Stored<NodeId, MemberRecord>> for StoredMemberHead {
    fn from(stored: &Stored<NodeId, MemberRecord>) -> StoredMemberHead {
        Stored {
            key: stored.key.clone(),
            value: MemberHead::from(&stored.value),
            version: stored.version.clone(),
        }
    }
}

impl From<Stored<NodeId, MemberRecord>> for StoredMemberHead {
    fn from(stored: Stored<NodeId, MemberRecord>) -> StoredMemberHead {
        Stored {
            value: MemberHead::from(&stored.value),
            key: stored.key,
            version: stored.version,
        }
    }
}

/// Member records or their heads, as a participant's view of the members takes them: a
/// listing of heads passes through as it is, whole records are cut down to their heads.
pub trait IntoHeads {
    /// The heads, in the same order.
    fn into_heads(self) -> Vec<StoredMemberHead>;
}

impl IntoHeads for Vec<StoredMemberHead> {
    fn into_heads(self) -> Vec<StoredMemberHead> {
        self
    }
}

impl IntoHeads for Vec<Stored<NodeId, MemberRecord>> {
    fn into_heads(self) -> Vec<StoredMemberHead> {
        self.into_iter().map(StoredMemberHead::from).collect()
    }
}
