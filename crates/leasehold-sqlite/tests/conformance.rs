//! The store conformance suite against a database file in a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{run_conformance, Harness};
use leasehold::{GroupName, LeaseStore, PartitionId, StoreError};
use leasehold_sqlite::SqliteStore;

struct SqliteHarness {
    store: SqliteStore,
    path: PathBuf,
}

#[async_trait]
impl Harness for SqliteHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    /// Damages the row the way a careless hand edit would, through a connection of its own.
    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let group = group.to_string();
        let changed = tokio::task::spawn_blocking(move || {
            let connection = rusqlite::Connection::open(path)?;
            connection.busy_timeout(std::time::Duration::from_secs(5))?;
            connection.execute(
                "UPDATE leases SET state = 'bogus' WHERE grp = ?1 AND partition = ?2",
                rusqlite::params![group, partition.0],
            )
        })
        .await
        .expect("corrupting thread")
        .map_err(|error| StoreError::unavailable("corrupting a lease row", error))?;
        assert_eq!(changed, 1, "the row to corrupt exists");
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_passes_the_conformance_suite() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("conformance.db");
    let store = SqliteStore::open(&path).await.expect("open the store");
    run_conformance(&SqliteHarness { store, path }).await;
}

#[tokio::test]
async fn sqlite_store_offers_no_change_feed() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(directory.path().join("watch.db"))
        .await
        .expect("open the store");
    let group = leasehold::testing::unique_group("watch");
    let feed = store.watch(&group).await;
    assert!(
        matches!(feed, Err(StoreError::NotSupported(_))),
        "participants must fall back to polling: {feed:?}"
    );
}
