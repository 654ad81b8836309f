//! The in-memory store: the reference implementation of the contract.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::error::StoreError;
use crate::group::{GroupRecord, StoredGroup};
use crate::record::{
    LeaseRecord, MemberHead, MemberRecord, Stored, StoredLease, StoredMember, StoredMemberHead,
};
use crate::store::{
    check_transaction, Change, ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode, TxnWrite,
};
use crate::types::RecordKey;
use crate::types::{GroupName, NodeId, PartitionId, Version};

/// A store that keeps every record in this process's memory.
///
/// Cloning gives another handle to the same records. It is the reference implementation of the
/// [`LeaseStore`] contract, used by doctests, unit tests and the simulator; it offers change
/// notifications and can be made to hold a corrupt record for tests.
///
/// ```
/// # tokio_test_block_on(async {
/// use leasehold::{GroupName, LeaseRecord, LeaseStore, MemoryStore, PartitionId, PutMode};
///
/// let store = MemoryStore::new();
/// let group = GroupName::new("orders").unwrap();
/// let v1 = store
///     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
///     .await
///     .unwrap();
/// // A write that names a stale version is refused.
/// store.put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Update(v1.clone())).await.unwrap();
/// let stale = store.put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Update(v1)).await;
/// assert!(matches!(stale, Err(leasehold::StoreError::Conflict { .. })));
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    next_version: u64,
    groups: BTreeMap<GroupName, Tables>,
    watchers: Vec<(GroupName, mpsc::Sender<Change>)>,
}

/// One group's records. Kept apart per group so that a listing walks only its own group and
/// knows its length up front.
#[derive(Debug, Default)]
struct Tables {
    leases: Table<PartitionId, LeaseRecord>,
    members: Table<NodeId, MemberRecord>,
    group: Option<Entry<GroupRecord>>,
}

/// Records of one kind, sorted by key. A vector rather than a tree: a group's partitions are
/// numbered `0..n`, so a lease is found at the index of its number without a search, and a
/// listing walks contiguous memory. A simulated fleet writes tens of millions of leases into
/// one table, where a tree's search missed the cache at every level.
#[derive(Debug)]
struct Table<K, T> {
    rows: Vec<(K, Entry<T>)>,
}

impl<K, T> Default for Table<K, T> {
    fn default() -> Self {
        Table { rows: Vec::new() }
    }
}

/// Where a key sits in a table whose keys are exactly `0..n`, if keys of its kind are numbers.
trait Slot {
    fn slot(&self) -> Option<usize>;
}

impl Slot for PartitionId {
    fn slot(&self) -> Option<usize> {
        usize::try_from(self.0).ok()
    }
}

impl Slot for NodeId {
    fn slot(&self) -> Option<usize> {
        None
    }
}

impl<K: Ord + Slot, T> Table<K, T> {
    fn position(&self, key: &K) -> Result<usize, usize> {
        let slot = key
            .slot()
            .filter(|&i| self.rows.get(i).is_some_and(|(k, _)| k == key));
        match slot {
            Some(index) => Ok(index),
            None => self.rows.binary_search_by(|(k, _)| k.cmp(key)),
        }
    }

    fn get(&self, key: &K) -> Option<&Entry<T>> {
        let index = self.position(key).ok()?;
        Some(&self.rows[index].1)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut Entry<T>> {
        let index = self.position(key).ok()?;
        Some(&mut self.rows[index].1)
    }

    fn insert(&mut self, key: K, entry: Entry<T>) {
        match self.position(&key) {
            Ok(index) => self.rows[index].1 = entry,
            Err(index) => self.rows.insert(index, (key, entry)),
        }
    }

    fn remove(&mut self, key: &K) {
        if let Ok(index) = self.position(key) {
            self.rows.remove(index);
        }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }
}

impl<K: Clone + Into<RecordKey>, T: Clone> Table<K, T> {
    /// Every record, in key order.
    fn list(&self) -> Listing<Stored<K, T>> {
        self.list_with(T::clone)
    }
}

impl<K: Clone + Into<RecordKey>, T> Table<K, T> {
    /// Every record as `read` copies it, in key order.
    fn list_with<U>(&self, read: impl Fn(&T) -> U) -> Listing<Stored<K, U>> {
        // Copied straight into the listing while every record reads; a simulated fleet lists
        // a thousand member records per node per scan.
        let mut records = Vec::with_capacity(self.rows.len());
        for (key, entry) in &self.rows {
            let Ok(value) = &entry.value else {
                return self
                    .rows
                    .iter()
                    .map(|(key, entry)| stored_with(key, entry, &read))
                    .collect();
            };
            records.push(Stored {
                key: key.clone(),
                value: read(value),
                version: Version::from_number(entry.version),
            });
        }
        Listing {
            records,
            corrupt: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry<T> {
    /// `Err` holds the reason a deliberately corrupted record cannot be read.
    value: Result<T, String>,
    version: u64,
}

impl Inner {
    fn tables(&mut self, group: &GroupName) -> &mut Tables {
        // Looked up before inserting, so that a write to an existing group, which is every
        // write but the first, does not copy the group's name.
        if !self.groups.contains_key(group) {
            self.groups.insert(group.clone(), Tables::default());
        }
        self.groups.get_mut(group).expect("inserted above")
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// A compare-and-set on one lease record, under the lock the caller holds.
    fn put_lease(
        &mut self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: &PutMode,
    ) -> Result<Version, StoreError> {
        let version = self.next_version + 1;
        let result = put_entry(
            &mut self.tables(group).leases,
            &partition,
            record,
            mode,
            version,
        );
        if result.is_ok() {
            self.next_version = version;
            let change = Change::LeaseWritten {
                partition,
                state: record.state,
            };
            self.notify(group, change);
        }
        result
    }

    /// A compare-and-set on one member record, under the lock the caller holds.
    fn put_member(
        &mut self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: &PutMode,
    ) -> Result<Version, StoreError> {
        let version = self.next_version + 1;
        let result = put_entry(&mut self.tables(group).members, node, record, mode, version);
        if result.is_ok() {
            self.next_version = version;
            let change = match mode {
                PutMode::Create => Change::Member(node.clone()),
                PutMode::Update(_) => Change::MemberUpdated(node.clone()),
            };
            self.notify(group, change);
        }
        result
    }

    fn notify(&mut self, group: &GroupName, change: Change) {
        self.watchers.retain(|(watched, sender)| {
            if watched != group {
                return !sender.is_closed();
            }
            // A full channel already holds a pending hint, which is all a reader needs.
            !matches!(
                sender.try_send(change.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }
}

fn put_entry<K: Ord + Clone + Slot + Into<RecordKey>, T: Clone>(
    map: &mut Table<K, T>,
    key: &K,
    record: &T,
    mode: &PutMode,
    version: u64,
) -> Result<Version, StoreError> {
    let name = || key.clone().into();
    let entry = || Entry {
        value: Ok(record.clone()),
        version,
    };
    match (map.get_mut(key), mode) {
        (Some(_), PutMode::Create) => return Err(StoreError::AlreadyExists { key: name() }),
        (None, PutMode::Update(_)) => return Err(StoreError::NotFound { key: name() }),
        (Some(current), PutMode::Update(expected)) => {
            if expected.as_number() != Some(current.version) {
                return Err(StoreError::Conflict { key: name() });
            }
            *current = entry();
        }
        (None, PutMode::Create) => {
            map.insert(key.clone(), entry());
        }
    }
    Ok(Version::from_number(version))
}

fn delete_entry<K: Ord + Clone + Slot + Into<RecordKey>, T>(
    map: &mut Table<K, T>,
    key: &K,
    expected: &Version,
) -> Result<(), StoreError> {
    let name = || key.clone().into();
    match map.get(key) {
        None => Err(StoreError::NotFound { key: name() }),
        Some(entry) if expected.as_number() != Some(entry.version) => {
            Err(StoreError::Conflict { key: name() })
        }
        Some(_) => {
            map.remove(key);
            Ok(())
        }
    }
}

fn to_stored<K: Clone + Into<RecordKey>, T: Clone>(
    key: &K,
    entry: &Entry<T>,
) -> Result<Stored<K, T>, StoreError> {
    stored_with(key, entry, T::clone)
}

/// [`to_stored`] with the value as `read` copies it.
fn stored_with<K: Clone + Into<RecordKey>, T, U>(
    key: &K,
    entry: &Entry<T>,
    read: impl Fn(&T) -> U,
) -> Result<Stored<K, U>, StoreError> {
    match &entry.value {
        Ok(value) => Ok(Stored {
            key: key.clone(),
            value: read(value),
            version: Version::from_number(entry.version),
        }),
        Err(reason) => Err(StoreError::Corrupt {
            key: key.clone().into(),
            reason: reason.clone(),
        }),
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied write: every write is a
        // single map insert or remove.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces a lease record with one that cannot be decoded, as a damaged row would be.
    /// For tests of how readers cope with corruption.
    pub fn corrupt_lease(&self, group: &GroupName, partition: PartitionId) {
        let mut inner = self.lock();
        let version = inner.bump();
        inner.tables(group).leases.insert(
            partition,
            Entry {
                value: Err("deliberately corrupted".to_owned()),
                version,
            },
        );
    }

    /// Replaces the member record of `node` with one that cannot be decoded, as a damaged row
    /// would be. For tests of how readers cope with corruption.
    pub fn corrupt_member(&self, group: &GroupName, node: &NodeId) {
        let mut inner = self.lock();
        let version = inner.bump();
        inner.tables(group).members.insert(
            node.clone(),
            Entry {
                value: Err("deliberately corrupted".to_owned()),
                version,
            },
        );
    }

    /// Replaces the group record of `group` with one that cannot be decoded. For tests of
    /// how readers cope with corruption.
    pub fn corrupt_group(&self, group: &GroupName) {
        let mut inner = self.lock();
        let version = inner.bump();
        inner.tables(group).group = Some(Entry {
            value: Err("deliberately corrupted".to_owned()),
            version,
        });
    }

    /// Deletes the group record of `group`, as an operator working on the database by hand
    /// might. For tests of how nodes and commands cope with a group that lost it.
    pub fn remove_group_record(&self, group: &GroupName) {
        self.lock().tables(group).group = None;
    }

    /// The version of `node`'s member record as it stands, without a store call: for a
    /// checker that looks at the store while holding locks of its own.
    pub fn member_version(&self, group: &GroupName, node: &NodeId) -> Option<Version> {
        let inner = self.lock();
        let entry = inner.groups.get(group)?.members.get(node)?;
        Some(Version::from_number(entry.version))
    }

    /// The number of lease records across all groups.
    pub fn lease_count(&self) -> usize {
        self.lock().groups.values().map(|t| t.leases.len()).sum()
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let inner = self.lock();
        let Some(tables) = inner.groups.get(group) else {
            return Ok(Listing::default());
        };
        Ok(tables.leases.list())
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let inner = self.lock();
        inner
            .groups
            .get(group)
            .and_then(|t| t.leases.get(&partition))
            .map(|entry| to_stored(&partition, entry))
            .transpose()
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.lock().put_lease(group, partition, record, &mode)
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        // One lock for the batch, as one transaction would be: each write is still its own
        // compare-and-set.
        let mut inner = self.lock();
        Ok(writes
            .iter()
            .map(|w| inner.put_lease(group, w.partition, &w.record, &w.mode))
            .collect())
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        let mut inner = self.lock();
        // Every condition is checked before anything is written, under the one lock, so the
        // transaction is applied whole or not at all.
        {
            let tables = inner.tables(group);
            for write in writes {
                let current = match write {
                    TxnWrite::Lease(w) => tables.leases.get(&w.partition).map(|e| e.version),
                    TxnWrite::Member { node, .. } => tables.members.get(node).map(|e| e.version),
                };
                let key = write.key();
                match (current, write.mode()) {
                    (Some(_), PutMode::Create) => return Err(StoreError::AlreadyExists { key }),
                    (None, PutMode::Update(_)) => return Err(StoreError::NotFound { key }),
                    (Some(version), PutMode::Update(expected))
                        if expected.as_number() != Some(version) =>
                    {
                        return Err(StoreError::Conflict { key })
                    }
                    _ => {}
                }
            }
        }
        let mut versions = Vec::with_capacity(writes.len());
        for write in writes {
            let version = match write {
                TxnWrite::Lease(w) => inner.put_lease(group, w.partition, &w.record, &w.mode),
                TxnWrite::Member { node, record, mode } => {
                    inner.put_member(group, node, record, mode)
                }
            };
            versions.push(version.expect("conditions checked under the same lock"));
        }
        Ok(versions)
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        delete_entry(&mut inner.tables(group).leases, &partition, version)?;
        inner.notify(group, Change::Lease(partition));
        Ok(())
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let inner = self.lock();
        let Some(tables) = inner.groups.get(group) else {
            return Ok(Listing::default());
        };
        Ok(tables.members.list())
    }

    async fn list_member_heads(
        &self,
        group: &GroupName,
    ) -> Result<Listing<StoredMemberHead>, StoreError> {
        let inner = self.lock();
        let Some(tables) = inner.groups.get(group) else {
            return Ok(Listing::default());
        };
        Ok(tables.members.list_with(|record| MemberHead::from(record)))
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let inner = self.lock();
        inner
            .groups
            .get(group)
            .and_then(|t| t.members.get(node))
            .map(|entry| to_stored(node, entry))
            .transpose()
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        record.check(node)?;
        self.lock().put_member(group, node, record, &mode)
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        delete_entry(&mut inner.tables(group).members, node, version)?;
        inner.notify(group, Change::Member(node.clone()));
        Ok(())
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let inner = self.lock();
        let stored = inner.groups.get(group).and_then(|t| t.group.as_ref());
        stored
            .map(|entry| match &entry.value {
                Ok(record) => Ok(Stored {
                    key: group.clone(),
                    value: record.clone(),
                    version: Version::from_number(entry.version),
                }),
                Err(reason) => Err(StoreError::Corrupt {
                    key: RecordKey::Group,
                    reason: reason.clone(),
                }),
            })
            .transpose()
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let mut inner = self.lock();
        let version = inner.next_version + 1;
        let slot = &mut inner.tables(group).group;
        match (&slot, &mode) {
            (Some(_), PutMode::Create) => {
                return Err(StoreError::AlreadyExists {
                    key: RecordKey::Group,
                })
            }
            (None, PutMode::Update(_)) => {
                return Err(StoreError::NotFound {
                    key: RecordKey::Group,
                })
            }
            (Some(current), PutMode::Update(expected))
                if expected.as_number() != Some(current.version) =>
            {
                return Err(StoreError::Conflict {
                    key: RecordKey::Group,
                })
            }
            _ => {}
        }
        *slot = Some(Entry {
            value: Ok(record.clone()),
            version,
        });
        inner.next_version = version;
        Ok(Version::from_number(version))
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
        self.lock().watchers.push((group.clone(), sender));
        Ok(ChangeFeed::new(receiver, None))
    }
}
