//! A member write, the renewal of session leases, never waits behind a listing of the lease
//! table on the same store: the listing is held up by a lock on the table (as a slow server
//! would hold it up), and the member write must still be answered.

mod common;

use std::time::Duration;

use leasehold::testing::{create, unique_group};
use leasehold::{LeaseStore, MemberRecord, NodeId, PutMode};
use leasehold_postgres::PostgresStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_write_is_answered_while_a_listing_waits() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("beside_listing_{}", std::process::id());
    let options = common::test_options(&url)
        .table_prefix(&prefix)
        .statement_timeout(Duration::from_secs(20))
        .request_timeout(Duration::from_secs(20));
    let store = PostgresStore::connect(options).await.expect("connect");
    let client = common::raw_client(&url).await;
    let group = unique_group("beside");
    let node = NodeId::new("node-a").unwrap();
    create(&store, &group, 0).await;
    let version = store
        .put_member(&group, &node, &MemberRecord::default(), PutMode::Create)
        .await
        .expect("create the member record");

    client
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {prefix}_leases IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .expect("lock the lease table");
    let listing = tokio::spawn({
        let (store, group) = (store.clone(), group.clone());
        async move { store.list_leases(&group).await }
    });
    // The listing has reached the server once it waits for the lock. On a loaded machine
    // that takes longer than the 5 s this once waited: the bound is only there to end a
    // run whose listing never comes.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE 'SELECT partition%'";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let row = client
            .query_one(waiting, &[])
            .await
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let row = client
        .query_one(waiting, &[])
        .await
        .expect("pg_stat_activity");
    assert_eq!(row.get::<_, i64>(0), 1, "the listing waits for the lock");

    let renewal = tokio::time::timeout(
        Duration::from_secs(10),
        store.put_member(
            &group,
            &node,
            &MemberRecord {
                heartbeat: 1,
                ..MemberRecord::default()
            },
            PutMode::Update(version),
        ),
    )
    .await;
    assert!(
        !listing.is_finished(),
        "the listing was still held up when the member write was answered"
    );
    client.batch_execute("ROLLBACK").await.expect("unlock");
    renewal
        .expect("the member write waited behind the listing")
        .expect("the member write");
    let listed = listing.await.expect("join").expect("the listing");
    assert_eq!(listed.records.len(), 1);
    common::drop_layout(&client, &prefix).await;
}
