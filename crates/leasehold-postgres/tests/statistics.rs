//! `PostgresStore::table_statistics`: the server's counts for the store's own tables move
//! with what the store writes and reads, and with nothing else.

mod common;

use std::time::{Duration, Instant};

use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
use leasehold_postgres::PostgresStore;

/// The server publishes its counts with a delay: wait, boundedly, for `ready`.
async fn statistics_until(
    store: &PostgresStore,
    what: &str,
    ready: impl Fn(&leasehold_postgres::TableStatistics) -> bool,
) -> leasehold_postgres::TableStatistics {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let statistics = store.table_statistics().await.expect("statistics");
        if ready(&statistics) {
            return statistics;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not counted within 20 s: {statistics:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails if the counts do not include the store's inserts, updates, deletes and reads, or
/// include rows of tables that are not the store's.
#[tokio::test]
async fn table_statistics_count_the_stores_own_rows() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("stats{}", std::process::id());
    let store = PostgresStore::connect(common::test_options(&url).table_prefix(&prefix))
        .await
        .expect("connect");
    let before = store.table_statistics().await.expect("statistics");
    let group = GroupName::new("stats").unwrap();
    let mut versions = Vec::new();
    for partition in 0..10 {
        let version = store
            .put_lease(
                &group,
                PartitionId(partition),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .expect("create");
        versions.push(version);
    }
    for (partition, version) in versions.iter().enumerate().take(4) {
        let update = PutMode::Update(version.clone());
        let record = LeaseRecord::released();
        store
            .put_lease(&group, PartitionId(partition as u32), &record, update)
            .await
            .expect("update");
    }
    store
        .delete_lease(&group, PartitionId(9), &versions[9])
        .await
        .expect("delete");
    assert_eq!(
        store.list_leases(&group).await.expect("list").records.len(),
        9
    );
    // Another table of the database, written meanwhile, is not counted.
    let client = common::raw_client(&url).await;
    let other = format!("{prefix}_elsewhere");
    client
        .batch_execute(&format!(
            "CREATE TABLE {other} (x int); INSERT INTO {other} SELECT generate_series(1, 500);"
        ))
        .await
        .expect("another table");
    let after = statistics_until(&store, "the writes", |s| {
        let seen = s.since(before);
        seen.inserted >= 10 && seen.updated >= 4 && seen.deleted >= 1 && seen.read >= 9
    })
    .await;
    let seen = after.since(before);
    assert!(
        seen.inserted < 500,
        "another table's rows counted: {seen:?}"
    );
    client
        .batch_execute(&format!("DROP TABLE {other}"))
        .await
        .expect("drop");
    common::drop_layout(&client, &prefix).await;
}
