//! Participants on one SQLite file: a released partition is taken at a notice, not at the
//! next scheduled scan, whether the group renews per partition or by session.

use std::sync::Arc;

use leasehold::testing::scenarios::{release_latency, release_latency_with_mode};
use leasehold::testing::unique_group;
use leasehold::LeaseMode;
use leasehold_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_release_is_taken_at_once_with_notices() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(directory.path().join("participants.db"))
        .await
        .expect("open the store");
    release_latency(Arc::new(store), unique_group("release")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_sessions_release_is_taken_at_once_with_notices() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(directory.path().join("participants.db"))
        .await
        .expect("open the store");
    let group = unique_group("release-session");
    release_latency_with_mode(Arc::new(store), group, LeaseMode::Session).await;
}
