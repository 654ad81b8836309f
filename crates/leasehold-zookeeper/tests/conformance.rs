//! The store conformance suite against a real ZooKeeper server.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{run_conformance, Harness};
use leasehold::{GroupName, LeaseStore, PartitionId, StoreError};
use leasehold_zookeeper::ZookeeperStore;

struct ZookeeperHarness {
    store: ZookeeperStore,
}

#[async_trait]
impl Harness for ZookeeperHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        let path = self.store.lease_path(group, partition);
        self.store
            .overwrite_unconditionally(&path, b"\xff not json")
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_store_passes_the_conformance_suite() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let harness = ZookeeperHarness {
        store: common::connect(&address).await,
    };
    run_conformance(&harness).await;
}
