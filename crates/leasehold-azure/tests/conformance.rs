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

async fn conform(config: Option<leasehold_azure::AzureConfig>) {
    let Some(config) = config else {
        return;
    };
    let endpoint = config.endpoint.clone();
    let harness = AzureHarness {
        store: AzureTableStore::new(config)
            .await
            .unwrap_or_else(|error| panic!("connect to Azurite at {endpoint}: {error}")),
    };
    run_conformance(&harness).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_conformance_suite() {
    conform(common::azurite_config("leaseholdtest")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_conformance_suite_over_https() {
    conform(common::azurite_tls_config("leaseholdtls")).await;
}

#[tokio::test]
async fn a_server_the_authority_did_not_sign_is_refused() {
    let Some(trusting) = common::azurite_tls_config("leaseholdrefused") else {
        return;
    };
    let other_ca =
        std::path::Path::new(trusting.ca_file.as_ref().unwrap()).with_file_name("other-ca.pem");
    for (ca_file, trusted) in [
        (Some(other_ca), "an unrelated authority"),
        (None, "the built-in roots"),
    ] {
        let config = leasehold_azure::AzureConfig {
            ca_file,
            ..trusting.clone()
        };
        let error = match AzureTableStore::new(config).await {
            Ok(_) => panic!("connected over HTTPS trusting {trusted}"),
            Err(error) => error,
        };
        assert!(
            matches!(error, StoreError::Unavailable { .. }),
            "trusting {trusted}: {error:?}"
        );
        let shown = format!("{error}").to_lowercase();
        assert!(shown.contains("certificate"), "trusting {trusted}: {shown}");
    }
}

#[tokio::test]
async fn an_unreadable_ca_file_is_a_clear_error() {
    let Some(mut config) = common::azurite_tls_config("leaseholdnoca") else {
        return;
    };
    config.ca_file = Some("/nonexistent/ca.pem".into());
    let error = match AzureTableStore::new(config).await {
        Ok(_) => panic!("started without its CA file"),
        Err(error) => error,
    };
    assert!(
        format!("{error}").contains("/nonexistent/ca.pem"),
        "{error}"
    );
}
