//! The store conformance suite against Azurite.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{run_conformance, Harness};
use leasehold::{GroupName, LeaseStore, PartitionId, StoreError};
use leasehold_azure::AzureTableStore;

struct AzureHarness {
    store: AzureTableStore,
}

#[async_trait]
impl Harness for AzureHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        self.store
            .overwrite_lease_column(group, partition, "state", "bogus")
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_conformance_suite() {
    let Some(config) = common::azurite_config("leaseholdtest") else {
        return;
    };
    let harness = AzureHarness {
        store: AzureTableStore::new(config)
            .await
            .expect("connect to Azurite"),
    };
    run_conformance(&harness).await;
}
