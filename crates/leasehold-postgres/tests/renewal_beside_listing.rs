//! Calls beside a long call on the same store: a listing of the lease table, or a batch of
//! lease writes, held up by a lock (as a slow server would hold them up). A member write, the
//! renewal of session leases, and the reads a scan makes of single records and member
//! records must still be answered, and the listing itself has the listing timeout, not the
//! limit on single calls.

mod common;

use std::time::Duration;

use leasehold::testing::{create, unique_group};
use leasehold::{
    GroupName, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord, NodeId, PartitionId,
    PutMode, StoreError, StoredLease, Version,
};
use leasehold_postgres::{PostgresOptions, PostgresStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_write_is_answered_while_a_listing_waits() {
    let Some(t) = layout("beside_listing", patient).await else {
        return;
    };

    let listing = held_listing(&t.store, &t.client, &t.prefix, &t.group).await;

    let renewal = renew(&t.store, &t.group, &t.node, t.member).await;
    assert!(
        !listing.is_finished(),
        "the listing was still held up when the member write was answered"
    );
    t.client.batch_execute("ROLLBACK").await.expect("unlock");
    renewal
        .expect("the member write waited behind the listing")
        .expect("the member write");
    let listed = listing.await.expect("join").expect("the listing");
    assert_eq!(listed.records.len(), 1);
    common::drop_layout(&t.client, &t.prefix).await;
}

/// A store on a layout of its own, with a lease record (partition 0) and a member record.
struct Layout {
    store: PostgresStore,
    client: tokio_postgres::Client,
    prefix: String,
    group: GroupName,
    node: NodeId,
    lease: Version,
    member: Version,
}

/// Connects with the test options `options` adjusts to a layout named after `name`; `None`
/// when the test is to skip.
async fn layout(
    name: &str,
    options: impl FnOnce(PostgresOptions) -> PostgresOptions,
) -> Option<Layout> {
    let url = common::url()?;
    let prefix = format!("{name}_{}", std::process::id());
    let options = options(common::test_options(&url).table_prefix(&prefix));
    let store = PostgresStore::connect(options).await.expect("connect");
    let client = common::raw_client(&url).await;
    let group = unique_group(name);
    let node = NodeId::new("node-a").unwrap();
    let lease = create(&store, &group, 0).await;
    let member = store
        .put_member(&group, &node, &MemberRecord::default(), PutMode::Create)
        .await
        .expect("create the member record");
    Some(Layout {
        store,
        client,
        prefix,
        group,
        node,
        lease,
        member,
    })
}

/// Limits on single calls long enough never to end a call the test holds up.
fn patient(options: PostgresOptions) -> PostgresOptions {
    options
        .statement_timeout(Duration::from_secs(20))
        .request_timeout(Duration::from_secs(20))
}

/// Renews `node`'s member record at `version`; `None` if no answer came within 10 s.
async fn renew(
    store: &PostgresStore,
    group: &GroupName,
    node: &NodeId,
    version: Version,
) -> Option<Result<Version, StoreError>> {
    let record = MemberRecord {
        heartbeat: 1,
        ..MemberRecord::default()
    };
    let renewal = store.put_member(group, node, &record, PutMode::Update(version));
    tokio::time::timeout(Duration::from_secs(10), renewal)
        .await
        .ok()
}

/// Locks the lease table of layout `prefix` in a transaction on `client` (ended by a
/// `ROLLBACK`), and returns a listing of `group` once it waits for that lock.
async fn held_listing(
    store: &PostgresStore,
    client: &tokio_postgres::Client,
    prefix: &str,
    group: &GroupName,
) -> tokio::task::JoinHandle<Result<Listing<StoredLease>, StoreError>> {
    // Listings have a connection of their own, opened by the first: opening it prepares
    // statements on the lease table, which the lock would hold up too.
    store.list_leases(group).await.expect("a first listing");
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
    wait_for(client, &format!("SELECT partition%FROM {prefix}_leases%")).await;
    listing
}

/// Returns once one statement like `pattern` waits for a lock on the server.
async fn wait_for(client: &tokio_postgres::Client, pattern: &str) {
    // The call has reached the server once it waits for the lock. On a loaded machine
    // that takes longer than the 5 s this once waited: the bound is only there to end a
    // run whose call never comes.
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND query LIKE '{pattern}'"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        // Inside the caller's open transaction the server would answer every read of
        // pg_stat_activity from the snapshot the first one took.
        client
            .execute("SELECT pg_stat_clear_snapshot()", &[])
            .await
            .expect("a fresh snapshot");
        let row = client
            .query_one(&waiting, &[])
            .await
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let row = client
        .query_one(&waiting, &[])
        .await
        .expect("pg_stat_activity");
    assert_eq!(row.get::<_, i64>(0), 1, "the call waits for the lock");
}

/// A listing outlasting the limits on single calls (1 s on the client and on the server)
/// still completes within the listing timeout; meanwhile reads of a member record and of the
/// member records are answered, not queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_has_its_own_time_and_connection() {
    let Some(t) = layout("own_listing", |options| {
        options
            .statement_timeout(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(1))
            .listing_timeout(Duration::from_secs(60))
    })
    .await
    else {
        return;
    };
    create(&t.store, &t.group, 1).await;

    let listing = held_listing(&t.store, &t.client, &t.prefix, &t.group).await;
    let member = t.store.get_member(&t.group, &t.node).await;
    let members = t.store.list_member_heads(&t.group).await;
    // Held past both limits on single calls: the listing must outlive them.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !listing.is_finished(),
        "the listing ended while the table was locked: {:?}",
        listing.await
    );
    t.client.batch_execute("ROLLBACK").await.expect("unlock");
    let listed = listing.await.expect("join").expect("the listing");
    assert_eq!(listed.records.len(), 2);
    assert!(
        member
            .expect("the member read beside the listing")
            .is_some(),
        "the member record is there"
    );
    assert_eq!(
        members
            .expect("the member listing beside the listing")
            .records
            .len(),
        1
    );
    common::drop_layout(&t.client, &t.prefix).await;
}

/// A member write is answered while a batch of lease writes from the same store waits for a
/// row lock: the renewal of session leases never queues behind another caller's
/// transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_write_is_answered_while_a_batch_waits() {
    let Some(t) = layout("beside_batch", patient).await else {
        return;
    };

    let prefix = &t.prefix;
    t.client
        .batch_execute(&format!("BEGIN; SELECT 1 FROM {prefix}_leases FOR UPDATE"))
        .await
        .expect("lock the lease row");
    let batch = tokio::spawn({
        let (store, group, lease) = (t.store.clone(), t.group.clone(), t.lease.clone());
        async move {
            let write = LeaseWrite {
                partition: PartitionId(0),
                record: LeaseRecord::released(),
                mode: PutMode::Update(lease),
            };
            store.put_leases(&group, &[write]).await
        }
    });
    wait_for(&t.client, &format!("%UPDATE {prefix}_leases%")).await;

    let renewal = renew(&t.store, &t.group, &t.node, t.member).await;
    assert!(
        !batch.is_finished(),
        "the batch was still held up when the member write was answered"
    );
    t.client.batch_execute("ROLLBACK").await.expect("unlock");
    renewal
        .expect("the member write waited behind the batch")
        .expect("the member write");
    let written = batch.await.expect("join").expect("the batch");
    assert!(written[0].is_ok(), "the batch's write: {written:?}");
    common::drop_layout(&t.client, &t.prefix).await;
}
