//! A database file deleted or replaced under a running store: every call fails from then
//! on, so that what was held on the old file expires on schedule instead of being served
//! beside whoever holds the same partitions in the new file.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{
    admin, Callbacks, GroupName, LeaseStore, Loss, LossReason, NodeId, Participant,
    ParticipantConfig, StoreError,
};
use leasehold_sqlite::SqliteStore;

fn remove_database(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        let _ = std::fs::remove_file(file);
    }
}

fn is_moved(error: &StoreError) -> bool {
    matches!(error, StoreError::Invalid(message) if message.contains("deleted or replaced"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_replaced_file_fails_every_call_for_good() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let group = GroupName::new("g").unwrap();
    let store = SqliteStore::open(&path).await.unwrap();
    admin::init(&store, &group, 4).await.unwrap();
    assert_eq!(store.list_leases(&group).await.unwrap().len(), 4);

    // Replaced: another file, with a table of its own, now at the path.
    let elsewhere = directory.path().join("other.db");
    let other = SqliteStore::open(&elsewhere).await.unwrap();
    admin::init(&other, &group, 2).await.unwrap();
    drop(other);
    remove_database(&path);
    std::fs::rename(&elsewhere, &path).unwrap();
    let error = store.list_leases(&group).await.unwrap_err();
    assert!(is_moved(&error), "{error}");
    assert!(!error.is_transient(), "trying again cannot help: {error}");

    // Deleted: the same, and it stays failed whatever comes to the path later.
    remove_database(&path);
    let error = store.list_members(&group).await.unwrap_err();
    assert!(is_moved(&error), "{error}");
    let fresh = SqliteStore::open(&path).await.unwrap();
    admin::init(&fresh, &group, 4).await.unwrap();
    let error = store.list_leases(&group).await.unwrap_err();
    assert!(is_moved(&error), "{error}");
    assert_eq!(fresh.list_leases(&group).await.unwrap().len(), 4);
}

/// The losses a participant reports.
#[derive(Default)]
struct Losses(Mutex<Vec<Loss>>);

impl Callbacks for Losses {
    fn on_lost(&self, loss: &Loss) {
        self.0.lock().unwrap().push(loss.clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_held_on_a_file_that_was_deleted_expire_instead_of_being_renewed() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 4);
    admin::init(&*store, &config.group, 4).await.unwrap();
    let losses = Arc::new(Losses::default());
    let participant = Participant::join(store, config, Arc::clone(&losses))
        .await
        .unwrap();
    // Generous for a loaded machine: each wait ends as soon as what it waits for shows.
    let limit = Duration::from_secs(60);
    let deadline = Instant::now() + limit;
    while participant.owned().len() < 4 {
        assert!(
            Instant::now() < deadline,
            "not all four held within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    remove_database(&path);
    let deadline = Instant::now() + limit;
    while losses.0.lock().unwrap().len() < 4 {
        assert!(
            Instant::now() < deadline,
            "still held {limit:?} after the deletion"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for loss in losses.0.lock().unwrap().iter() {
        assert_eq!(loss.reason, LossReason::Expired, "{loss:?}");
    }
    assert!(participant.owned().is_empty());
    participant.shutdown().await;
}
