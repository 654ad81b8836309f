//! Participants on PostgreSQL: crash takeover and notified hand-off, in groups that renew
//! per partition and by session.

mod common;

use std::sync::Arc;

use leasehold::testing::scenarios::{
    crash_takeover, crash_takeover_with_mode, release_latency, release_latency_with_mode,
};
use leasehold::testing::unique_group;
use leasehold::LeaseMode;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_take_over_from_a_crashed_node() {
    let Some(url) = common::url() else {
        return;
    };
    let store = Arc::new(common::store(&url).await);
    crash_takeover_with_mode(store, unique_group("crash-session"), LeaseMode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sessions_release_is_taken_at_once_with_notifications() {
    let Some(url) = common::url() else {
        return;
    };
    let store = Arc::new(common::store(&url).await);
    release_latency_with_mode(store, unique_group("release-session"), LeaseMode::Session).await;
}
