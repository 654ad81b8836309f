//! The negative control of operator commands in groups with session leases: a store through
//! which an operator's transaction writes the lease but not its holder's session, so the
//! holder never learns of a kick, a prohibition or an offline, and keeps serving.

use async_trait::async_trait;
use leasehold::{
    ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord,
    MemoryStore, NodeId, PartitionId, PutMode, StoreError, StoredGroup, StoredLease, StoredMember,
    TxnWrite, Version,
};

/// The shared store as an operator blind to sessions sees it.
#[derive(Debug)]
pub(super) struct SessionBlind(pub(super) MemoryStore);

#[async_trait]
impl LeaseStore for SessionBlind {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        self.0.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.0.get_lease(group, partition).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.0.put_lease(group, partition, record, mode).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.0.put_leases(group, writes).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.0.delete_lease(group, partition, version).await
    }

    /// Keeps only the lease writes: the sessions they should change are left alone.
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let leases: Vec<TxnWrite> = writes
            .iter()
            .filter(|write| matches!(write, TxnWrite::Lease(_)))
            .cloned()
            .collect();
        let written = self.0.transact(group, &leases).await?;
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
        self.0.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.0.get_member(group, node).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.0.put_member(group, node, record, mode).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.0.delete_member(group, node, version).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.0.get_group(group).await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.0.put_group(group, record, mode).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.0.watch(group).await
    }
}
