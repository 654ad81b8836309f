//! The store conformance suite against Azurite.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{
    run_conformance, run_transaction_conformance, Harness, Listed, Malformed,
    CONFORMANCE_CALL_TIMEOUT, MALFORMED_FIRST_PARTITION,
};
use leasehold::{
    GroupName, LeaseRecord, LeaseStore, MemberRecord, NodeId, PartitionId, PutMode, RecordKey,
    StoreError,
};
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

    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        self.store.overwrite_group_record(group, "{not json").await
    }

    /// Properties as a table explorer could leave them, on leases and members: Azure Tables
    /// keeps whatever type a client sends, so a number or a flag may come back as text.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let cases = [
            ("epoch", "three", "text as the epoch"),
            ("epoch", "-1", "a negative epoch"),
            ("epoch", "18446744073709551616", "an epoch beyond u64"),
            ("prohibited", "a,,b", "an empty name in prohibited"),
            ("owner", "", "an empty owner"),
            ("load", "heavy", "text as the load"),
            ("written_at_unix_ms", "yesterday", "text as the write time"),
            (
                "previous_owner",
                "has space",
                "not a node name as the previous owner",
            ),
            (
                "handed_to",
                "n1,n2",
                "not a node name as the node handed to",
            ),
            ("session", "soon", "text as the session"),
        ];
        let mut malformed = Vec::new();
        for (partition, (column, value, damage)) in (MALFORMED_FIRST_PARTITION..).zip(cases) {
            let partition = PartitionId(partition);
            self.store
                .put_lease(group, partition, &LeaseRecord::released(), PutMode::Create)
                .await?;
            self.store
                .overwrite_lease_column(group, partition, column, value)
                .await?;
            malformed.push(Malformed::lease(partition.0, damage));
        }
        let member_cases = [
            ("weight", "heavy", "text as the weight"),
            ("draining", "yes", "text as the draining flag"),
            (
                "lease_validity_ns",
                "soon",
                "text as the published validity",
            ),
            ("capacity", "lots", "text as the capacity"),
            ("max_partitions", "many", "text as the partition cap"),
            ("metadata", "{not json", "metadata that is not JSON"),
            ("metadata", r#"{"zone":1}"#, "a number as a metadata value"),
            (
                "session",
                "18446744073709551616",
                "a session beyond 64 bits",
            ),
        ];
        for (index, (column, value, damage)) in member_cases.into_iter().enumerate() {
            let node = NodeId::new(format!("bad-{index}")).expect("a valid name");
            self.store
                .put_member(group, &node, &MemberRecord::default(), PutMode::Create)
                .await?;
            self.store
                .overwrite_member_column(group, &node, column, value)
                .await?;
            malformed.push(Malformed::new(
                Listed::Members,
                RecordKey::Member(node),
                damage,
            ));
        }
        Ok(malformed)
    }
}

/// The harness for the table `options` names; `None` when the test is to skip.
async fn harness(options: Option<leasehold_azure::AzureOptions>) -> Option<AzureHarness> {
    let options = options?.call_timeout(CONFORMANCE_CALL_TIMEOUT);
    let endpoint = options.endpoint_url();
    Some(AzureHarness {
        store: AzureTableStore::connect(options)
            .await
            .unwrap_or_else(|error| panic!("connect to Azurite at {endpoint}: {error}")),
    })
}

async fn conform(options: Option<leasehold_azure::AzureOptions>) {
    if let Some(harness) = harness(options).await {
        run_conformance(&harness).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_conformance_suite() {
    conform(common::azurite_options("leaseholdtest")).await;
}

/// Session leases rest on these: a lease and its holder's member record change in one
/// entity-group transaction, or neither does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_transaction_conformance_suite() {
    if let Some(harness) = harness(common::azurite_options("leaseholdtest")).await {
        run_transaction_conformance(&harness).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn azure_store_passes_the_conformance_suite_over_https() {
    conform(common::azurite_tls_options("leaseholdtls")).await;
}

#[tokio::test]
async fn a_server_the_authority_did_not_sign_is_refused() {
    let Some((untrusting, ca)) = common::azurite_tls("leaseholdrefused") else {
        return;
    };
    let other_ca = ca.with_file_name("other-ca.pem");
    for (options, trusted) in [
        (
            untrusting.clone().ca_file(other_ca),
            "an unrelated authority",
        ),
        (untrusting, "the built-in roots"),
    ] {
        let error = match AzureTableStore::connect(options).await {
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
    let Some((options, _)) = common::azurite_tls("leaseholdnoca") else {
        return;
    };
    let options = options.ca_file("/nonexistent/ca.pem");
    let error = match AzureTableStore::connect(options).await {
        Ok(_) => panic!("started without its CA file"),
        Err(error) => error,
    };
    assert!(
        format!("{error}").contains("/nonexistent/ca.pem"),
        "{error}"
    );
}

/// Azure Table Storage pushes no changes: the store must say so, so that participants poll.
///
/// Fails if `watch` answers anything but `NotSupported` (a feed that never speaks would
/// leave nodes waiting on notices that never come).
#[tokio::test]
async fn azure_store_offers_no_change_feed() {
    let Some(options) = common::azurite_options("leaseholdwatch") else {
        return;
    };
    let store = AzureTableStore::connect(options).await.expect("connect");
    let group = leasehold::testing::unique_group("watch");
    let feed = store.watch(&group).await;
    assert!(
        matches!(feed, Err(StoreError::NotSupported(_))),
        "participants must fall back to polling: {feed:?}"
    );
}
