//! Change hints of the SQLite store: a commit through any connection to the file is seen,
//! whether it comes from this store's other connections, another store on the same file,
//! another process, or a hand edit; commits elsewhere in the file send nothing.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseState, LeaseStore, MemberRecord,
    NodeId, PartitionId, PutMode,
};
use leasehold_sqlite::SqliteStore;

/// How long a hint may take: polls come every 5 ms, so this allows for a loaded machine.
const HINT_LIMIT: Duration = Duration::from_secs(5);
/// A second process must start, open the file and write before its hint can come.
const CHILD_HINT_LIMIT: Duration = Duration::from_secs(60);
const PATH_VARIABLE: &str = "LEASEHOLD_SQLITE_NOTICE_PATH";
const GROUP_VARIABLE: &str = "LEASEHOLD_SQLITE_NOTICE_GROUP";
const CHILD_TEST: &str = "notice_child_process";
const CHILD_PARTITION: PartitionId = PartitionId(9);

async fn next_hint(feed: &mut ChangeFeed, limit: Duration) -> Change {
    tokio::time::timeout(limit, feed.next())
        .await
        .unwrap_or_else(|_| panic!("a change hint within {limit:?}"))
        .expect("the feed is still open")
}

fn released(partition: u32) -> Change {
    Change::LeaseWritten {
        partition: PartitionId(partition),
        state: LeaseState::Released,
    }
}

async fn create(store: &SqliteStore, group: &GroupName, partition: u32) {
    store
        .put_lease(
            group,
            PartitionId(partition),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create a lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_another_store_on_the_file_is_hinted() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let watcher = SqliteStore::open(&path).await.unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    let group = unique_group("other-store");
    let mut feed = watcher.watch(&group).await.unwrap();
    create(&writer, &group, 1).await;
    assert_eq!(next_hint(&mut feed, HINT_LIMIT).await, released(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_the_same_store_is_hinted() {
    let directory = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(directory.path().join("leases.db"))
        .await
        .unwrap();
    let group = unique_group("same-store");
    let mut feed = store.watch(&group).await.unwrap();
    create(&store, &group, 2).await;
    assert_eq!(next_hint(&mut feed, HINT_LIMIT).await, released(2));
    let node = NodeId::new("node-1").unwrap();
    store
        .put_member(&group, &node, &MemberRecord::default(), PutMode::Create)
        .await
        .unwrap();
    assert_eq!(next_hint(&mut feed, HINT_LIMIT).await, Change::Member(node));
}

/// A renewal or a write to another group wakes the watcher too (`data_version` is per file),
/// but only what changed in the watched group is reported, and a renewal as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_elsewhere_in_the_file_send_no_hint() {
    let directory = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(directory.path().join("leases.db"))
        .await
        .unwrap();
    let (group, other) = (unique_group("watched"), unique_group("elsewhere"));
    let mut feed = store.watch(&group).await.unwrap();
    create(&store, &other, 0).await;
    store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .unwrap();
    create(&store, &group, 3).await;
    assert_eq!(next_hint(&mut feed, HINT_LIMIT).await, released(3));

    let current = store.get_lease(&group, PartitionId(3)).await.unwrap();
    let mut held = LeaseRecord::released();
    held.state = LeaseState::Held;
    held.owner = Some(NodeId::new("node-1").unwrap());
    let version = current.expect("created").version;
    store
        .put_lease(&group, PartitionId(3), &held, PutMode::Update(version))
        .await
        .unwrap();
    create(&store, &other, 1).await;
    assert_eq!(
        next_hint(&mut feed, HINT_LIMIT).await,
        Change::LeaseWritten {
            partition: PartitionId(3),
            state: LeaseState::Held
        }
    );
}

/// An edit with the `sqlite3` shell changes no version; the state it wrote is still seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edit_of_a_lease_state_is_hinted() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let group = unique_group("by-hand");
    create(&store, &group, 4).await;
    let mut feed = store.watch(&group).await.unwrap();
    let edit_group = group.to_string();
    tokio::task::spawn_blocking(move || {
        let connection = rusqlite::Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(5))?;
        connection.execute(
            "UPDATE leases SET state = 'offline' WHERE grp = ?1 AND partition = 4",
            [edit_group],
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        next_hint(&mut feed, HINT_LIMIT).await,
        Change::LeaseWritten {
            partition: PartitionId(4),
            state: LeaseState::Offline
        }
    );
}

fn spawn_child(path: &Path, group: &GroupName) -> std::process::Child {
    Command::new(std::env::current_exe().expect("path of this test binary"))
        .args(["--ignored", "--exact", CHILD_TEST, "--nocapture"])
        .env(PATH_VARIABLE, path)
        .env(GROUP_VARIABLE, group.as_str())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_by_another_process_is_hinted() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let group = unique_group("other-process");
    let mut feed = store.watch(&group).await.unwrap();
    let child = spawn_child(&path, &group);
    let hint = next_hint(&mut feed, CHILD_HINT_LIMIT).await;
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("waiting thread")
        .expect("wait for the second process");
    assert!(
        output.status.success(),
        "second process failed: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(hint, released(CHILD_PARTITION.0));
}

/// The second process of [`a_write_by_another_process_is_hinted`].
#[tokio::test]
#[ignore = "the second process of a_write_by_another_process_is_hinted, which starts it"]
async fn notice_child_process() {
    let (Ok(path), Ok(group)) = (std::env::var(PATH_VARIABLE), std::env::var(GROUP_VARIABLE))
    else {
        println!("skipped: started only by a_write_by_another_process_is_hinted");
        return;
    };
    let group = GroupName::new(group).expect("group from the parent");
    let store = SqliteStore::open(&path)
        .await
        .expect("open the parent's file");
    create(&store, &group, CHILD_PARTITION.0).await;
}
