//! Rows the store's own constraints would refuse, in tables an operator altered: NULLs in
//! `NOT NULL` columns and columns of another type are `Corrupt`, never a panic. Each test
//! works in a layout of its own, so altering it touches nobody else's tables.

mod common;

use leasehold::testing::{malformed_records_are_reported_not_fatal, unique_group};
use leasehold::{
    LeaseRecord, LeaseStore, MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError,
};
use leasehold_postgres::PostgresStore;

async fn layout(url: &str, name: &str) -> (String, tokio_postgres::Client) {
    let prefix = format!("{name}_{}", std::process::id());
    PostgresStore::connect(common::test_options(url).table_prefix(&prefix))
        .await
        .expect("creates the layout");
    (prefix, common::raw_client(url).await)
}

async fn connect(url: &str, prefix: &str) -> PostgresStore {
    PostgresStore::connect(common::test_options(url).table_prefix(prefix))
        .await
        .expect("connect to the altered layout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nulls_in_not_null_columns_are_corrupt() {
    let Some(url) = common::url() else {
        return;
    };
    let (prefix, client) = layout(&url, "nulls_test").await;
    client
        .batch_execute(&format!(
            "ALTER TABLE {prefix}_leases ALTER state DROP NOT NULL, ALTER epoch DROP NOT NULL,
                 ALTER prohibited DROP NOT NULL, ALTER version DROP NOT NULL;
             ALTER TABLE {prefix}_members ALTER weight DROP NOT NULL,
                 ALTER draining DROP NOT NULL, ALTER heartbeat DROP NOT NULL;"
        ))
        .await
        .expect("drop the constraints");
    let harness = common::PostgresHarness {
        store: connect(&url, &prefix).await,
        client,
        prefix: prefix.clone(),
        nulls: true,
    };
    let checked =
        tokio::spawn(async move { malformed_records_are_reported_not_fatal(&harness).await }).await;
    let client = common::raw_client(&url).await;
    common::drop_layout(&client, &prefix).await;
    checked.expect("the check passes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_of_another_type_are_corrupt() {
    let Some(url) = common::url() else {
        return;
    };
    let (prefix, client) = layout(&url, "types_test").await;
    let group = unique_group("types");
    let node = NodeId::new("n1").expect("a valid name");
    {
        let store = connect(&url, &prefix).await;
        store
            .put_lease(
                &group,
                PartitionId(3),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .expect("create a lease");
        store
            .put_member(&group, &node, &MemberRecord::default(), PutMode::Create)
            .await
            .expect("create a member");
    }
    client
        .batch_execute(&format!(
            "ALTER TABLE {prefix}_leases ALTER note TYPE integer USING 7;
             ALTER TABLE {prefix}_members ALTER load TYPE text USING 'heavy';"
        ))
        .await
        .expect("change the column types");
    // A store connected after the change: one prepared before it would only see the server
    // refuse its cached plans.
    // The reads run in a task of their own so that the layout is dropped even if one panics.
    let store = connect(&url, &prefix).await;
    let reads = {
        let node = node.clone();
        tokio::spawn(async move {
            (
                store.list_leases(&group).await,
                store.list_members(&group).await,
                store.get_lease(&group, PartitionId(3)).await,
                store.get_member(&group, &node).await,
            )
        })
        .await
    };
    common::drop_layout(&client, &prefix).await;
    let (leases, members, lease, member) = reads.expect("reads of altered columns");

    let leases = leases.expect("list leases");
    assert!(leases.records.is_empty(), "{:?}", leases.records);
    assert!(
        matches!(&leases.corrupt[..], [StoreError::Corrupt { key, .. }] if *key == RecordKey::Lease(PartitionId(3))),
        "{:?}",
        leases.corrupt
    );
    assert!(
        matches!(&lease, Err(StoreError::Corrupt { key, reason }) if *key == RecordKey::Lease(PartitionId(3)) && reason.contains("note")),
        "{lease:?}"
    );
    let members = members.expect("list members");
    assert!(
        matches!(&members.corrupt[..], [StoreError::Corrupt { key, .. }] if *key == RecordKey::Member(node.clone())),
        "{:?}",
        members.corrupt
    );
    assert!(
        matches!(&member, Err(StoreError::Corrupt { key, reason }) if *key == RecordKey::Member(node.clone()) && reason.contains("load")),
        "{member:?}"
    );
}
