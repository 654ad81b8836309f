//! The operator's connection to the shared store: as slow as the director asks (a destroy
//! that runs while the nodes scan and renew), and, for the negative control of operator
//! commands in groups with session leases, blind to sessions: an operator's transaction
//! writes the lease but not its holder's session, so the holder never learns of a kick, a
//! prohibition or an offline, and keeps serving.

use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord,
    MemoryStore, NodeId, PartitionId, PutMode, StoreError, StoredGroup, StoredLease, StoredMember,
    TxnWrite, Version,
};

/// The shared store as the operator reaches it.
#[derive(Debug)]
pub(super) struct OperatorStore {
    pub(super) store: MemoryStore,
    /// Session writes in transactions are dropped.
    pub(super) blind: bool,
    /// Every call waits this long before it reaches the store.
    pub(super) latency: Duration,
}

impl OperatorStore {
    async fn travel(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }
}

#[async_trait]
impl LeaseStore for OperatorStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        self.travel().await;
        self.store.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.travel().await;
        self.store.get_lease(group, partition).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.travel().await;
        self.store.put_lease(group, partition, record, mode).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.travel().await;
        self.store.put_leases(group, writes).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.travel().await;
        self.store.delete_lease(group, partition, version).await
    }

    /// Blind, keeps only the lease writes: the sessions they should change are left alone.
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        self.travel().await;
        if !self.blind {
            return self.store.transact(group, writes).await;
        }
        let leases: Vec<TxnWrite> = writes
            .iter()
            .filter(|write| matches!(write, TxnWrite::Lease(_)))
            .cloned()
            .collect();
        let written = self.store.transact(group, &leases).await?;
        let mut written = written.into_iter();
        Ok(writes
            .iter()
            .map(|write| match write {
                TxnWrite::Lease(_) => written.next().expect("one version per lease write"),
                TxnWrite::Member { .. } => Version::from_number(0),
            })
            .collect())
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.travel().await;
        self.store.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.travel().await;
        self.store.get_member(group, node).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.travel().await;
        self.store.put_member(group, node, record, mode).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.travel().await;
        self.store.delete_member(group, node, version).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.travel().await;
        self.store.get_group(group).await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.travel().await;
        self.store.put_group(group, record, mode).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.travel().await;
        self.store.watch(group).await
    }
}
