//! A call that runs out of time while another connection holds the write lock gives up before
//! its caller does, and never commits afterwards.

use std::time::{Duration, Instant};

use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode, TimeoutStore};
use leasehold_sqlite::{SqliteOptions, SqliteStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_blocked_past_its_time_limit_never_lands_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let limit = Duration::from_millis(300);
    // The busy timeout alone would wait far longer than the caller.
    let options = SqliteOptions::default()
        .busy_timeout(Duration::from_secs(5))
        .call_timeout(limit);
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let caller = TimeoutStore::new(std::sync::Arc::new(store), limit);
    let group = GroupName::new("orders").unwrap();

    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let write = caller
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await;
    assert!(write.as_ref().is_err_and(|e| e.is_transient()), "{write:?}");
    // Well short of the busy timeout's 5 s, with room for a loaded machine's scheduling.
    assert!(
        started.elapsed() < limit + Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // The lock is freed after the caller gave up; a write still waiting would take it now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.execute_batch("COMMIT").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let read = caller.get_lease(&group, PartitionId(0)).await.unwrap();
    assert!(
        read.is_none(),
        "the write committed after its call timed out"
    );
}
