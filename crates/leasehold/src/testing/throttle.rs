//! A store wrapper that throttles reads on demand and counts calls, to show that a
//! participant backs its scans off under throttling while its renewals keep their schedule.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::record::{LeaseRecord, MemberRecord, StoredLease, StoredMember};
use crate::store::{ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode};
use crate::types::{GroupName, NodeId, PartitionId, Version};

/// Wraps a store; while [`ThrottledReads::set_throttled`] is on, every listing fails with
/// [`StoreError::Throttled`] as an overloaded service would answer (HTTP 429/503), while
/// writes go through. Counts listings attempted and batch writes made.
#[derive(Debug)]
pub struct ThrottledReads {
    inner: Arc<dyn LeaseStore>,
    throttled: AtomicBool,
    listings: AtomicU64,
    batches: AtomicU64,
}

impl ThrottledReads {
    /// Wraps `inner`, not throttling yet.
    pub fn new(inner: Arc<dyn LeaseStore>) -> ThrottledReads {
        ThrottledReads {
            inner,
            throttled: AtomicBool::new(false),
            listings: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// Starts or stops throttling listings.
    pub fn set_throttled(&self, throttled: bool) {
        self.throttled.store(throttled, Ordering::SeqCst);
    }

    /// Lease listings attempted so far (throttled or not).
    pub fn listings(&self) -> u64 {
        self.listings.load(Ordering::SeqCst)
    }

    /// Batch writes (renewals, acquisitions, releases) made so far.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.throttled.load(Ordering::SeqCst) {
            return Err(StoreError::Throttled {
                message: "server busy (injected)".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for ThrottledReads {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.inner.get_lease(group, partition).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.inner.put_lease(group, partition, record, mode).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.inner.put_leases(group, writes).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.inner.delete_lease(group, partition, version).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.check()?;
        self.inner.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.inner.get_member(group, node).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.inner.put_member(group, node, record, mode).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.inner.delete_member(group, node, version).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.inner.watch(group).await
    }
}
