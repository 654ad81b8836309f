//! Participants on PostgreSQL: crash takeover, notified hand-off, and a server outage.

mod common;

use std::sync::Arc;

use leasehold::testing::scenarios::{crash_takeover, release_latency};
use leasehold::testing::unique_group;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_participants_take_over_from_a_crashed_node() {
    let Some(url) = common::url() else {
        return;
    };
    let store = Arc::new(common::store(&url).await);
    crash_takeover(store, unique_group("crash")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_release_is_taken_at_once_with_notifications() {
    let Some(url) = common::url() else {
        return;
    };
    let store = Arc::new(common::store(&url).await);
    release_latency(store, unique_group("release")).await;
}
