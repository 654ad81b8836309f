//! Renewals keep their schedule on a slow store: whatever the scans wait for, a lease is
//! renewed every heartbeat. Controlled time: Tokio's clock is paused.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    admin, GroupName, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord, MemoryStore,
    NodeId, Participant, ParticipantConfig, PartitionId, PutMode, StoreError, StoredLease,
    StoredMember, Version,
};
use tokio::time::sleep;

/// The in-memory store, with every listing and read taking `read_delay` and writes instant.
#[derive(Debug)]
struct SlowReads {
    inner: MemoryStore,
    read_delay: Duration,
}

#[async_trait]
impl LeaseStore for SlowReads {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        sleep(self.read_delay).await;
        self.inner.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        sleep(self.read_delay).await;
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
        sleep(self.read_delay).await;
        self.inner.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        sleep(self.read_delay).await;
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
}

#[tokio::test(start_paused = true)]
async fn listings_near_the_store_timeout_cost_no_lease_over_a_hundred_heartbeats() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8).await.unwrap();
    // The shortest validity the rules allow: two heartbeats. A scan lists the members and
    // the leases, 0.9 × store_timeout each, so a loop that renewed only between scans
    // would let leases run out.
    let config = ParticipantConfig {
        heartbeat: Duration::from_millis(250),
        lease_validity: Duration::from_millis(500),
        acquire_after: Duration::from_millis(750),
        scan_interval: Duration::from_millis(250),
        store_timeout: Duration::from_millis(250),
        ..ParticipantConfig::new(NodeId::new("a").unwrap(), 8)
    };
    let store = Arc::new(SlowReads {
        inner,
        read_delay: config.store_timeout.mul_f64(0.9),
    });
    let participant = Participant::start(store, config.clone(), ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(participant.owned().len(), 8, "took the whole table");
    let changes = participant.lease_changes();
    let mut held = Vec::new();
    for _ in 0..100 {
        sleep(config.heartbeat).await;
        held.push(participant.owned().len());
    }
    assert!(
        held.iter().all(|&n| n == 8),
        "leases came and went: {held:?}"
    );
    assert!(participant.lease_changes() > changes, "renewed meanwhile");
    participant.shutdown().await;
}
