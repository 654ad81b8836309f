//! The store contract: versioned records with compare-and-set.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::error::StoreError;
use crate::group::{GroupRecord, StoredGroup};
use crate::record::{
    IntoHeads, LeaseRecord, MemberRecord, StoredLease, StoredMember, StoredMemberHead,
};
use crate::types::{GroupName, NodeId, PartitionId, Version};

pub mod batch;
pub mod reads;

/// How a conditional write treats the record already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Write only if no record exists; otherwise [`StoreError::AlreadyExists`].
    Create,
    /// Write only if the record's current version is this one; otherwise
    /// [`StoreError::Conflict`], or [`StoreError::NotFound`] if there is no record.
    Update(Version),
}

/// One lease write of a batch given to [`LeaseStore::put_leases`].
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseWrite {
    /// The partition whose record to write.
    pub partition: PartitionId,
    /// The new record.
    pub record: LeaseRecord,
    /// The condition the write depends on.
    pub mode: PutMode,
}

/// One conditional write of a transaction given to [`LeaseStore::transact`].
#[derive(Debug, Clone, PartialEq)]
pub enum TxnWrite {
    /// A lease record.
    Lease(LeaseWrite),
    /// A member record (in a group with session leases, a node's session): a write that
    /// only changes its version writes the record back as it was read.
    Member {
        /// The member.
        node: NodeId,
        /// The new record.
        record: MemberRecord,
        /// The condition the write depends on.
        mode: PutMode,
    },
}

impl TxnWrite {
    /// The record this write is to.
    pub fn key(&self) -> crate::types::RecordKey {
        match self {
            TxnWrite::Lease(write) => crate::types::RecordKey::Lease(write.partition),
            TxnWrite::Member { node, .. } => crate::types::RecordKey::Member(node.clone()),
        }
    }

    /// The condition the write depends on.
    pub fn mode(&self) -> &PutMode {
        match self {
            TxnWrite::Lease(write) => &write.mode,
            TxnWrite::Member { mode, .. } => mode,
        }
    }
}

/// The most writes one [`LeaseStore::transact`] call may carry. A session-lease change
/// needs at most three (the lease, its holder's session, the writer's own); the bound keeps
/// every store's transaction well inside its own limits (Azure Table: 100 entities; etcd:
/// 128 operations by default).
pub const MAX_TRANSACTION_WRITES: usize = 8;

/// Refuses a transaction no store may apply: empty, longer than
/// [`MAX_TRANSACTION_WRITES`], writing one record twice, or carrying a member record that
/// fails [`MemberRecord::check`]. Stores call it before writing anything.
///
/// ```
/// use leasehold::{check_transaction, TxnWrite};
/// use leasehold::{LeaseRecord, LeaseWrite, PartitionId, PutMode};
/// let write = TxnWrite::Lease(LeaseWrite {
///     partition: PartitionId(3),
///     record: LeaseRecord::released(),
///     mode: PutMode::Create,
/// });
/// assert!(check_transaction(&[write.clone()]).is_ok());
/// assert!(check_transaction(&[write.clone(), write]).is_err());
/// assert!(check_transaction(&[]).is_err());
/// ```
pub fn check_transaction(writes: &[TxnWrite]) -> Result<(), StoreError> {
    if writes.is_empty() || writes.len() > MAX_TRANSACTION_WRITES {
        return Err(StoreError::Invalid(format!(
            "a transaction carries 1 to {MAX_TRANSACTION_WRITES} writes, not {}",
            writes.len()
        )));
    }
    for (i, write) in writes.iter().enumerate() {
        let key = write.key();
        if writes[..i].iter().any(|earlier| earlier.key() == key) {
            return Err(StoreError::Invalid(format!(
                "a transaction writes {key} twice"
            )));
        }
        if let TxnWrite::Member { node, record, .. } = write {
            record.check(node)?;
        }
    }
    Ok(())
}

/// The records of a group, with the ones that could not be decoded reported apart.
#[derive(Debug)]
pub struct Listing<T> {
    /// The decodable records, ordered by key.
    pub records: Vec<T>,
    /// One [`StoreError::Corrupt`] per record that could not be decoded.
    pub corrupt: Vec<StoreError>,
}

/// Collects decoded records: each `Ok` is listed, each `Err` (a record that could not be
/// decoded) is reported in [`Listing::corrupt`], so one damaged record never hides the others.
///
/// ```
/// use leasehold::{Listing, PartitionId, RecordKey, StoreError};
/// let listing: Listing<u32> = vec![
///     Ok(1),
///     Err(StoreError::Corrupt { key: RecordKey::Lease(PartitionId(2)), reason: "bad".into() }),
///     Ok(3),
/// ]
/// .into_iter()
/// .collect();
/// assert_eq!(listing.records, vec![1, 3]);
/// assert_eq!(listing.corrupt.len(), 1);
/// ```
impl<T> FromIterator<Result<T, StoreError>> for Listing<T> {
    fn from_iter<I: IntoIterator<Item = Result<T, StoreError>>>(items: I) -> Self {
        let items = items.into_iter();
        let mut listing = Listing {
            records: Vec::with_capacity(items.size_hint().0),
            corrupt: Vec::new(),
        };
        for item in items {
            match item {
                Ok(record) => listing.records.push(record),
                Err(error) => listing.corrupt.push(error),
            }
        }
        listing
    }
}

impl Listing<StoredLease> {
    /// The group's partition count as this listing shows it: one past the highest partition
    /// with a record, counting records that could not be decoded, so that a damaged record
    /// never makes a group look smaller than it is. Zero for a group with no lease records.
    ///
    /// ```
    /// use leasehold::{LeaseRecord, Listing, PartitionId, RecordKey, Stored, StoreError, Version};
    /// let listing: Listing<_> = vec![
    ///     Ok(Stored { key: PartitionId(0), value: LeaseRecord::released(), version: Version::from_number(1) }),
    ///     Err(StoreError::Corrupt { key: RecordKey::Lease(PartitionId(5)), reason: "bad".into() }),
    ///     Err(StoreError::Corrupt { key: RecordKey::Stored("lease/x".into()), reason: "bad".into() }),
    /// ]
    /// .into_iter()
    /// .collect();
    /// assert_eq!(listing.partition_count(), 6);
    /// ```
    pub fn partition_count(&self) -> u32 {
        let corrupt = self
            .corrupt
            .iter()
            .filter_map(|error| error.key()?.partition());
        self.records
            .iter()
            .map(|record| record.key)
            .chain(corrupt)
            .map(|partition| partition.0.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// Whether any partition was ever taken (some record's epoch is above zero): a group in
    /// use, whose partition count must not change behind its users' back.
    pub fn in_use(&self) -> bool {
        self.records.iter().any(|record| record.value.epoch.0 > 0)
    }
}

impl<T> Listing<T> {
    /// How many records the listing saw, decodable or not.
    pub fn len(&self) -> usize {
        self.records.len() + self.corrupt.len()
    }

    /// Whether the listing saw no record at all.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.corrupt.is_empty()
    }
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            records: Vec::new(),
            corrupt: Vec::new(),
        }
    }
}

/// A hint that something in a group changed; the receiver re-reads what it needs.
///
/// Stores say as much as they know: a participant ignores renewals
/// ([`Change::LeaseWritten`] with state held) and member heartbeats
/// ([`Change::MemberUpdated`]), and rescans for anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A lease record was written or deleted; what it now holds is not known.
    Lease(PartitionId),
    /// A lease record was written and now has this state.
    LeaseWritten {
        /// The partition.
        partition: PartitionId,
        /// The state written.
        state: crate::record::LeaseState,
    },
    /// A member record was created or deleted, or changed in an unknown way.
    Member(NodeId),
    /// An existing member record was rewritten (a heartbeat, or its drain flag).
    MemberUpdated(NodeId),
    /// Something changed, or notices were lost; re-read everything.
    Unknown,
}

/// A stream of change hints for one group, from [`LeaseStore::watch`].
///
/// Hints may be coalesced or dropped when the receiver is slow; they only make a reader look
/// sooner than its next poll and are never needed for safety. Dropping the feed stops the
/// task that fills it, if any.
#[derive(Debug)]
pub struct ChangeFeed {
    receiver: mpsc::Receiver<Change>,
    _task: Option<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ChangeFeed {
    /// Capacity for the bounded channels behind feeds: hints beyond it are coalesced.
    pub const CAPACITY: usize = 64;

    /// A feed read from `receiver`; `task`, if given, is aborted when the feed is dropped.
    pub fn new(receiver: mpsc::Receiver<Change>, task: Option<tokio::task::AbortHandle>) -> Self {
        ChangeFeed {
            receiver,
            _task: task.map(AbortOnDrop),
        }
    }

    /// The next hint, or `None` once the feed has ended (the caller falls back to polling).
    pub async fn next(&mut self) -> Option<Change> {
        self.receiver.recv().await
    }
}

/// A store of versioned lease and member records with compare-and-set.
///
/// The trait is deliberately dumb: all lease timing lives in the core, once.
///
/// # Contract
///
/// A backend:
/// - MUST assign a new [`Version`] on every successful write, and MUST NOT assign a version
///   that the same key ever had before, even after the record was deleted and created again.
/// - MUST apply a write with [`PutMode::Update`] only if the record's current version equals
///   the given one, atomically with respect to every other writer, in every process on every
///   machine using the store; otherwise it MUST fail with [`StoreError::Conflict`]
///   (or [`StoreError::NotFound`] when the record does not exist).
/// - MUST apply a write with [`PutMode::Create`] only if the record does not exist; otherwise
///   [`StoreError::AlreadyExists`].
/// - MUST delete only if the version matches, with the same errors as an update.
/// - MUST keep every field of a lease or member record and return it as written, and MUST
///   read records written before a field existed, with the field at its default.
/// - MUST refuse a member record that fails [`MemberRecord::validate`] with
///   [`StoreError::Invalid`] ([`MemberRecord::check`]), writing nothing, so that every store
///   accepts the same records.
/// - MUST return listings ordered by key (partition number, node name), and MUST report a
///   record it cannot decode as a [`StoreError::Corrupt`] in [`Listing::corrupt`] while still
///   listing the others; `get_*` returns it as the error.
/// - MUST keep groups apart: nothing written in one group is visible in another.
/// - MUST keep one group record per group under the same compare-and-set rules, naming it
///   [`RecordKey::Group`](crate::RecordKey::Group) in errors, and MUST store it whole, as
///   the JSON of [`crate::codec::encode`], so that fields it does not know survive. It
///   MUST NOT show in lease or member listings, and its writes MUST NOT produce change hints.
/// - MUST return a successful write's version only once the write is durable in the store's
///   own terms, and MUST be linearizable: a read that starts after a write's reply sees it.
/// - MUST bound every call in time (client timeouts), returning [`StoreError::Timeout`] or
///   [`StoreError::Unavailable`] rather than hanging; callers bound calls again with
///   [`TimeoutStore`].
/// - MUST map overload responses to [`StoreError::Throttled`] and transport failures to
///   [`StoreError::Unavailable`], so that callers can back off.
/// - MUST NOT read a clock to make a decision, expire, or modify a record on its own: what a
///   record means in time is decided by the core, from its own monotonic clock.
///
/// - MUST apply a [`LeaseStore::transact`] call whole or not at all, atomically with respect
///   to every other writer: every write's condition holds and every write is applied with a
///   new version, or nothing is written and the error names a record whose condition failed.
///
/// [`LeaseStore::put_leases`] has a default that writes one record at a time; stores with
/// transactions override it. [`LeaseStore::watch`] is optional.
#[async_trait]
pub trait LeaseStore: Debug + Send + Sync + 'static {
    /// Every lease record of `group`, ordered by partition.
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError>;

    /// One lease record, or `None` if it does not exist.
    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError>;

    /// The lease records of `partitions`, each `None` where there is none, in the order
    /// asked. Fails with the error of the first record that cannot be read, as a sequence of
    /// [`LeaseStore::get_lease`] calls would. The default sends those gets,
    /// [`reads::READS_PER_GROUP`] at a time; a store that can read many rows in one request
    /// overrides it ([`reads::in_order_asked`] orders what it found).
    async fn get_leases(
        &self,
        group: &GroupName,
        partitions: &[PartitionId],
    ) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
        reads::get_each(self, group, partitions).await
    }

    /// Writes one lease record under `mode`, returning its new version.
    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError>;

    /// Writes several lease records of one group, each under its own condition, returning one
    /// result per write in order. A failed condition fails only that write. The outer error
    /// means the batch as a whole could not be attempted; which writes were applied is then
    /// unknown. A batch written in parts that fails partway keeps the results of the parts
    /// before and reports the others' writes as failed transiently ([`batch`]).
    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        batch::put_one_by_one(self, group, writes).await
    }

    /// Deletes one lease record if its version is `version`.
    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError>;

    /// Deletes several lease records of one group, each if its version is the one given,
    /// returning one result per delete in order: a failed condition
    /// ([`StoreError::Conflict`], [`StoreError::NotFound`]) fails only that delete. The outer
    /// error means the batch could not be completed, and some of it may have been applied.
    /// The default deletes one record at a time; stores with transactions override it.
    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut results = Vec::with_capacity(deletes.len());
        for (partition, version) in deletes {
            match self.delete_lease(group, *partition, version).await {
                Err(error) if error.is_transient() => return Err(error),
                result => results.push(result),
            }
        }
        Ok(results)
    }

    /// Writes lease and member records of one group all together or not at all, returning
    /// each write's new version in order. If any write's condition fails, nothing is written
    /// and the error ([`StoreError::Conflict`], [`StoreError::NotFound`] or
    /// [`StoreError::AlreadyExists`]) names a record whose condition failed. A transaction
    /// that [`check_transaction`] refuses fails with [`StoreError::Invalid`], writing
    /// nothing. Each write gives the change hint it would give on its own.
    ///
    /// This is what session leases rest on: a change to a lease names its holder's session
    /// in the same transaction. The default says [`StoreError::NotSupported`].
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let _ = (group, writes);
        Err(StoreError::NotSupported("multi-record transactions"))
    }

    /// Every member record of `group`, ordered by node name.
    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError>;

    /// The heads of every member record of `group` ([`MemberHead`](crate::MemberHead)), ordered by node name:
    /// what a participant reads at every scan. The default lists the whole records and cuts
    /// them down; a store that can read or copy less overrides it. A wrapper that changes
    /// what [`LeaseStore::list_members`] returns (injected faults, say) can leave the
    /// default, which goes through its own `list_members`.
    async fn list_member_heads(
        &self,
        group: &GroupName,
    ) -> Result<Listing<StoredMemberHead>, StoreError> {
        let listing = self.list_members(group).await?;
        Ok(Listing {
            records: listing.records.into_heads(),
            corrupt: listing.corrupt,
        })
    }

    /// One member record, or `None` if it does not exist.
    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError>;

    /// Writes one member record under `mode`, returning its new version.
    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError>;

    /// Deletes one member record if its version is `version`.
    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError>;

    /// The group record of `group` ([`GroupRecord`]), or `None` if it has none.
    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError>;

    /// Writes the group record of `group` under `mode`, returning its new version. A
    /// backend keeps the whole record, fields it does not know included (it stores the JSON
    /// of [`crate::codec::encode`]).
    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError>;

    /// Change hints for `group`, if this store can push them. The default says
    /// [`StoreError::NotSupported`], and callers poll.
    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        let _ = group;
        Err(StoreError::NotSupported("change notifications"))
    }
}

/// A store whose every call is bounded by a time limit, failing with [`StoreError::Timeout`].
///
/// The participant and the command-line tool wrap whatever store they are given in one, so a
/// hung connection can delay a scan but never block the caller for longer than the limit.
#[derive(Debug, Clone)]
pub struct TimeoutStore {
    inner: Arc<dyn LeaseStore>,
    limit: Duration,
    listing_limit: Duration,
}

impl TimeoutStore {
    /// Wraps `inner`, limiting each call to `limit`.
    pub fn new(inner: Arc<dyn LeaseStore>, limit: Duration) -> TimeoutStore {
        TimeoutStore {
            inner,
            limit,
            listing_limit: limit,
        }
    }

    /// The same, with listings of the lease table limited to `listing_limit` instead (see
    /// [`crate::ParticipantConfig::listing_timeout`]).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// use leasehold::{MemoryStore, TimeoutStore};
    /// let store = TimeoutStore::new(Arc::new(MemoryStore::new()), Duration::from_secs(5))
    ///     .with_listing_limit(Duration::from_secs(80));
    /// # let _ = store;
    /// ```
    pub fn with_listing_limit(mut self, listing_limit: Duration) -> TimeoutStore {
        self.listing_limit = listing_limit;
        self
    }

    async fn bound<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        bounded(self.limit, call).await
    }
}

async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Timeout(limit)),
    }
}

#[async_trait]
impl LeaseStore for TimeoutStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        bounded(self.listing_limit, self.inner.list_leases(group)).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.bound(self.inner.get_lease(group, partition)).await
    }

    /// Each group of [`reads::READS_PER_GROUP`] partitions is one call under the limit, as
    /// each of their gets would be: a long read is bounded by its length, not cut short.
    async fn get_leases(
        &self,
        group: &GroupName,
        partitions: &[PartitionId],
    ) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
        let mut rows = Vec::with_capacity(partitions.len());
        for chunk in partitions.chunks(reads::READS_PER_GROUP) {
            rows.extend(self.bound(self.inner.get_leases(group, chunk)).await?);
        }
        Ok(rows)
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.bound(self.inner.put_lease(group, partition, record, mode))
            .await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.bound(self.inner.put_leases(group, writes)).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.bound(self.inner.delete_lease(group, partition, version))
            .await
    }

    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.bound(self.inner.delete_leases(group, deletes)).await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        self.bound(self.inner.transact(group, writes)).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.bound(self.inner.list_members(group)).await
    }

    async fn list_member_heads(
        &self,
        group: &GroupName,
    ) -> Result<Listing<StoredMemberHead>, StoreError> {
        self.bound(self.inner.list_member_heads(group)).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.bound(self.inner.get_member(group, node)).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.bound(self.inner.put_member(group, node, record, mode))
            .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.bound(self.inner.delete_member(group, node, version))
            .await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.bound(self.inner.get_group(group)).await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.bound(self.inner.put_group(group, record, mode)).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.bound(self.inner.watch(group)).await
    }
}
