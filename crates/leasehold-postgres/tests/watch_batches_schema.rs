//! Concurrent batches, schema versions and connection settings. Change hints are checked by
//! the conformance suite.

mod common;

use leasehold::testing::unique_group;
use leasehold::{LeaseRecord, LeaseStore, LeaseWrite, PartitionId, PutMode, StoreError};
use leasehold_postgres::{PostgresOptions, PostgresStore, SCHEMA_VERSION};

/// Renews every lease of `group` in one batch, in the given partition order.
async fn renew_all(store: &PostgresStore, group: &leasehold::GroupName, order: &[u32]) -> usize {
    let listing = store.list_leases(group).await.expect("list");
    let writes: Vec<LeaseWrite> = order
        .iter()
        .map(|&partition| {
            let current = &listing.records[partition as usize];
            let mut record = current.value.clone();
            record.epoch = record.epoch.next();
            LeaseWrite {
                partition: PartitionId(partition),
                record,
                mode: PutMode::Update(current.version.clone()),
            }
        })
        .collect();
    let results = store
        .put_leases(group, &writes)
        .await
        .expect("a batch never fails as a whole (no deadlock)");
    for result in &results {
        assert!(
            matches!(result, Ok(_) | Err(StoreError::Conflict { .. })),
            "{result:?}"
        );
    }
    results.iter().filter(|r| r.is_ok()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_batches_in_opposite_orders_do_not_deadlock() {
    let Some(url) = common::url() else {
        return;
    };
    let (first, second) = (common::store(&url).await, common::store(&url).await);
    let group = unique_group("deadlock");
    let partitions = 30;
    for partition in 0..partitions {
        first
            .put_lease(
                &group,
                PartitionId(partition),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .unwrap();
    }
    let forward: Vec<u32> = (0..partitions).collect();
    let backward: Vec<u32> = (0..partitions).rev().collect();
    let rounds = 20;
    let (a, b) = tokio::join!(
        async {
            let mut applied = 0;
            for _ in 0..rounds {
                applied += renew_all(&first, &group, &forward).await;
            }
            applied
        },
        async {
            let mut applied = 0;
            for _ in 0..rounds {
                applied += renew_all(&second, &group, &backward).await;
            }
            applied
        }
    );
    let listing = first.list_leases(&group).await.unwrap();
    let epochs: usize = listing
        .records
        .iter()
        .map(|r| r.value.epoch.0 as usize)
        .sum();
    assert_eq!(epochs, a + b, "every applied write and only those");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_refuses_a_newer_schema() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("schema_test_{}", std::process::id());
    let options = common::test_options(&url).table_prefix(&prefix);
    PostgresStore::connect(options.clone())
        .await
        .expect("creates the layout");
    let client = common::raw_client(&url).await;
    client
        .execute(
            &format!("UPDATE {prefix}_schema SET version = $1"),
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let refused = PostgresStore::connect(options).await;
    common::drop_layout(&client, &prefix).await;
    match refused {
        Err(StoreError::Invalid(message)) => {
            let newer = format!("version {}", SCHEMA_VERSION + 1);
            assert!(message.contains(&newer), "{message}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_upgrades_a_version_1_layout() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("upgrade_test_{}", std::process::id());
    let options = common::test_options(&url).table_prefix(&prefix);
    PostgresStore::connect(options.clone())
        .await
        .expect("creates the layout");
    let client = common::raw_client(&url).await;
    client
        .execute(&format!("UPDATE {prefix}_schema SET version = 1"), &[])
        .await
        .unwrap();
    let store = PostgresStore::connect(options).await;
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {prefix}_schema"), &[])
        .await
        .unwrap()
        .get(0);
    common::drop_layout(&client, &prefix).await;
    store.expect("a version 1 layout is upgraded, not refused");
    assert_eq!(version, SCHEMA_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_never_shows_the_password() {
    let Some(url) = common::url() else {
        return;
    };
    // The test server trusts every local connection, so any password is accepted.
    let with_password = url.replacen("postgres@", "postgres:hunter2@", 1);
    assert_ne!(with_password, url, "the test URL names user postgres");
    let store = PostgresStore::connect(common::test_options(&with_password))
        .await
        .expect("connect");
    let shown = format!("{store:?}");
    assert!(shown.contains("127.0.0.1"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[tokio::test]
async fn postgres_store_refuses_an_unreadable_ca_file_before_connecting() {
    let url = "postgres://leases@127.0.0.1:1/app?sslmode=verify-full";
    let options = PostgresOptions::from_url(url)
        .unwrap()
        .ca_file("/nonexistent/leasehold-ca.pem");
    match PostgresStore::connect(options).await {
        Err(StoreError::Invalid(message)) => {
            assert!(message.contains("leasehold-ca.pem"), "{message}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}
