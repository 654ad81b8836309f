//! A store wrapper that times every call and counts its errors in a node's series.

use std::sync::Arc;

use async_trait::async_trait;

use super::{NodeMetrics, StoreOperation};
use crate::error::StoreError;
use crate::group::{GroupRecord, StoredGroup};
use crate::record::{LeaseRecord, MemberRecord, StoredLease, StoredMember, StoredMemberHead};
use crate::store::{ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode, TxnWrite};
use crate::types::{GroupName, NodeId, PartitionId, Version};

/// A store that times every call and counts its errors in a node's series. It wraps the
/// [`TimeoutStore`](crate::TimeoutStore), so a call that hits the time limit is counted as
/// a `timeout` with the time it took.
#[derive(Debug)]
pub(crate) struct MeteredStore {
    inner: Arc<dyn LeaseStore>,
    metrics: Arc<NodeMetrics>,
}

impl MeteredStore {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>, metrics: Arc<NodeMetrics>) -> MeteredStore {
        MeteredStore { inner, metrics }
    }

    async fn timed<T>(
        &self,
        operation: StoreOperation,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = tokio::time::Instant::now();
        let result = call.await;
        self.metrics.store_call(operation, started.elapsed());
        if let Err(error) = &result {
            self.metrics.store_error(operation, error);
        }
        result
    }

    /// A listing, timed, with each record it could not decode counted as an error.
    async fn listed<T>(
        &self,
        operation: StoreOperation,
        call: impl std::future::Future<Output = Result<Listing<T>, StoreError>>,
    ) -> Result<Listing<T>, StoreError> {
        let listing = self.timed(operation, call).await?;
        for error in &listing.corrupt {
            self.metrics.store_error(operation, error);
        }
        Ok(listing)
    }
}

#[async_trait]
impl LeaseStore for MeteredStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let call = self.inner.list_leases(group);
        self.listed(StoreOperation::ListLeases, call).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.timed(
            StoreOperation::GetLease,
            self.inner.get_lease(group, partition),
        )
        .await
    }

    async fn get_leases(
        &self,
        group: &GroupName,
        partitions: &[PartitionId],
    ) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
        let call = self.inner.get_leases(group, partitions);
        self.timed(StoreOperation::GetLeases, call).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let call = self.inner.put_lease(group, partition, record, mode);
        self.timed(StoreOperation::PutLease, call).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let operation = StoreOperation::PutLeases;
        let results = self
            .timed(operation, self.inner.put_leases(group, writes))
            .await?;
        for error in results.iter().filter_map(|result| result.as_ref().err()) {
            self.metrics.store_error(operation, error);
        }
        Ok(results)
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let call = self.inner.delete_lease(group, partition, version);
        self.timed(StoreOperation::DeleteLease, call).await
    }

    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let call = self.inner.delete_leases(group, deletes);
        self.timed(StoreOperation::DeleteLeases, call).await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let call = self.inner.transact(group, writes);
        self.timed(StoreOperation::Transact, call).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let call = self.inner.list_members(group);
        self.listed(StoreOperation::ListMembers, call).await
    }

    // Timed as a member listing: it is one, of fewer columns.
    async fn list_member_heads(
        &self,
        group: &GroupName,
    ) -> Result<Listing<StoredMemberHead>, StoreError> {
        let call = self.inner.list_member_heads(group);
        self.listed(StoreOperation::ListMembers, call).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.timed(
            StoreOperation::GetMember,
            self.inner.get_member(group, node),
        )
        .await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let call = self.inner.put_member(group, node, record, mode);
        self.timed(StoreOperation::PutMember, call).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let call = self.inner.delete_member(group, node, version);
        self.timed(StoreOperation::DeleteMember, call).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.timed(StoreOperation::GetGroup, self.inner.get_group(group))
            .await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let call = self.inner.put_group(group, record, mode);
        self.timed(StoreOperation::PutGroup, call).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        let started = tokio::time::Instant::now();
        let result = self.inner.watch(group).await;
        // A store without notices is not failing: the participant polls instead.
        if !matches!(result, Err(StoreError::NotSupported(_))) {
            self.metrics
                .store_call(StoreOperation::Watch, started.elapsed());
            if let Err(error) = &result {
                self.metrics.store_error(StoreOperation::Watch, error);
            }
        }
        result
    }
}
