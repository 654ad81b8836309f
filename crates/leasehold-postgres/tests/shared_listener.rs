//! Feeds share a listening connection: every `watch` a store and its clones make on one
//! group is filled from one `LISTEN`, which closes once the last feed is dropped.

mod common;

use std::time::{Duration, Instant};

use leasehold::testing::{create, next_hint, unique_group};
use leasehold::{Change, LeaseStore, PartitionId};
use leasehold_postgres::PostgresStore;

/// The server's connections listening on `channel`.
async fn listening(client: &tokio_postgres::Client, channel: &str) -> i64 {
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE query = $1",
            &[&format!("LISTEN {channel}")],
        )
        .await
        .expect("count listening connections");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_on_one_group_share_one_listening_connection() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("shared_listen_{}", std::process::id());
    let channel = format!("{prefix}_changes");
    let store = PostgresStore::connect(common::test_options(&url).table_prefix(&prefix))
        .await
        .expect("connect");
    let client = common::raw_client(&url).await;
    let group = unique_group("shared");
    let clone = store.clone();
    let mut feeds = Vec::new();
    for watcher in [&store, &clone, &store] {
        feeds.push(watcher.watch(&group).await.expect("watch"));
    }
    assert_eq!(listening(&client, &channel).await, 1);

    create(&store, &group, 3).await;
    for feed in &mut feeds {
        assert!(matches!(
            next_hint(feed).await,
            Change::Lease(PartitionId(3))
                | Change::LeaseWritten {
                    partition: PartitionId(3),
                    ..
                }
        ));
    }

    // One feed dropped: the others still hear every write.
    feeds.pop();
    create(&store, &group, 4).await;
    for feed in &mut feeds {
        next_hint(feed).await;
    }

    // All dropped: the connection closes, and the next watch opens another.
    feeds.clear();
    let deadline = Instant::now() + Duration::from_secs(20);
    while listening(&client, &channel).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the listening connection outlived its feeds"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut again = store.watch(&group).await.expect("watch again");
    assert_eq!(listening(&client, &channel).await, 1);
    create(&store, &group, 5).await;
    next_hint(&mut again).await;
}
