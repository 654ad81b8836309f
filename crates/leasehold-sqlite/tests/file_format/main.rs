//! The database file as operators and other builds see it: plain SQL, a recorded schema
//! version, reopening, refusal of newer schemas, and rows damaged by hand.

use std::path::Path;
use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Epoch, GroupName, GroupRecord, LeaseRecord, LeaseState, LeaseStore, MemberRecord, NodeId,
    PartitionId, PutMode, RecordKey, StoreError, Version,
};
use leasehold_sqlite::SqliteStore;
use rusqlite::Connection;

mod upgrades;

fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid node id")
}

fn held_by(owner: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        owner: Some(node(owner)),
        epoch: Epoch(epoch),
        state: LeaseState::Held,
        prohibited: vec![node("n7"), node("n8")],
        load: Some(1.5),
        note: None,
        written_at_unix_ms: Some(1_700_000_000_000),
        previous_owner: Some(node("n0")),
        handed_to: None,
        session: Some(u64::MAX - 6),
    }
}

fn raw(path: &Path) -> Connection {
    Connection::open(path).expect("open the file with plain rusqlite")
}

async fn write_partitions(store: &SqliteStore, group: &GroupName, count: u32) -> Vec<Version> {
    let mut versions = Vec::new();
    for partition in 0..count {
        let version = store
            .put_lease(
                group,
                PartitionId(partition),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .expect("create");
        versions.push(version);
    }
    versions
}

#[tokio::test]
async fn rows_are_plain_sql_and_survive_reopening() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("leasehold.db");
    let group = unique_group("plain");
    let store = SqliteStore::open(&path).await.expect("create the file");
    let created = write_partitions(&store, &group, 2).await;
    let held = store
        .put_lease(
            &group,
            PartitionId(1),
            &held_by("n1", 4),
            PutMode::Update(created[1].clone()),
        )
        .await
        .expect("take partition 1");
    store
        .put_member(
            &group,
            &node("n1"),
            &MemberRecord::default(),
            PutMode::Create,
        )
        .await
        .expect("join");
    drop(store);

    let connection = raw(&path);
    let rows: Vec<(i64, Option<String>, i64, String, String)> = connection
        .prepare("SELECT partition, owner, epoch, state, prohibited FROM leases WHERE grp = ?1 ORDER BY partition")
        .unwrap()
        .query_map([group.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (0, None, 0, "released".to_owned(), String::new()),
            (
                1,
                Some("n1".to_owned()),
                4,
                "held".to_owned(),
                "n7,n8".to_owned()
            ),
        ]
    );
    let sessions: Vec<Option<i64>> = connection
        .prepare("SELECT session FROM leases WHERE grp = ?1 ORDER BY partition")
        .unwrap()
        .query_map([group.as_str()], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // The session's 64 bits, read as a signed integer.
    assert_eq!(sessions, vec![None, Some(-7)]);
    let member: (String, i64, i64) = connection
        .query_row(
            "SELECT node, weight, draining FROM members WHERE grp = ?1",
            [group.as_str()],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!(member, ("n1".to_owned(), 1, 0));
    let user_version: i64 = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, SqliteStore::SCHEMA_VERSION);
    let journal: String = connection
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    drop(connection);

    let reopened = SqliteStore::open(&path).await.expect("reopen the file");
    let got = reopened
        .get_lease(&group, PartitionId(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.value, got.version.clone()),
        (held_by("n1", 4), held.clone())
    );
    // The counter lives in the file: versions keep rising across reopening, even for a
    // record deleted and created again.
    reopened
        .delete_lease(&group, PartitionId(1), &held)
        .await
        .expect("delete");
    let recreated = reopened
        .put_lease(
            &group,
            PartitionId(1),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("re-create");
    let seen = [created, vec![held]].concat();
    let newest = seen.iter().filter_map(Version::as_number).max().unwrap();
    assert!(
        recreated.as_number().unwrap() > newest,
        "{recreated} after {seen:?}"
    );
}

#[tokio::test]
async fn a_file_from_a_newer_schema_is_refused_and_left_alone() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("newer.db");
    drop(SqliteStore::open(&path).await.expect("create the file"));
    let newer = SqliteStore::SCHEMA_VERSION + 1;
    raw(&path)
        .pragma_update(None, "user_version", newer)
        .expect("pretend a newer build wrote the file");

    let error = SqliteStore::open(&path).await.expect_err("newer schema");
    let message = error.to_string();
    assert!(matches!(error, StoreError::Invalid(_)), "{error:?}");
    assert!(
        message.contains(&format!("schema version {newer}"))
            && message.contains("newer")
            && message.contains("newer.db"),
        "{message}"
    );
    let user_version: i64 = raw(&path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, newer, "the file is not touched");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("notes.txt");
    std::fs::write(
        &path,
        "these are not the leases you are looking for\n".repeat(100),
    )
    .unwrap();
    let error = SqliteStore::open(&path).await.expect_err("not a database");
    assert!(
        error.to_string().contains("not a SQLite database"),
        "{error}"
    );
    assert!(std::error::Error::source(&error).is_some(), "{error:?}");
}

/// Each way a hand edit can break a row makes that row alone `Corrupt`, naming its key.
#[tokio::test]
async fn rows_damaged_by_hand_are_reported_one_by_one() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("damaged.db");
    let group = unique_group("damaged");
    let store = SqliteStore::open(&path).await.expect("create the file");
    write_partitions(&store, &group, 8).await;
    let damage = [
        (1, "state = 'stolen'"),
        (2, "owner = 'has space'"),
        (3, "epoch = -1"),
        (4, "prohibited = 'n1,,n2'"),
        (5, "epoch = 'seven'"),
        (6, "version = 0"),
        (7, "partition = 'seven'"),
    ];
    let connection = raw(&path);
    for (partition, assignment) in damage {
        let sql = format!("UPDATE leases SET {assignment} WHERE grp = ?1 AND partition = ?2");
        let changed = connection
            .execute(&sql, rusqlite::params![group.as_str(), partition])
            .unwrap();
        assert_eq!(changed, 1, "{sql}");
    }
    drop(connection);

    let listing = store
        .list_leases(&group)
        .await
        .expect("list despite damage");
    let intact: Vec<u32> = listing.records.iter().map(|record| record.key.0).collect();
    assert_eq!(intact, vec![0]);
    let keys: Vec<RecordKey> = listing
        .corrupt
        .iter()
        .map(|error| match error {
            StoreError::Corrupt { key, .. } => key.clone(),
            other => panic!("expected Corrupt, got {other:?}"),
        })
        .collect();
    // A row whose partition is not a number is named as stored, and counts for no partition.
    let mut expected: Vec<RecordKey> = (1..=6).map(|p| RecordKey::Lease(PartitionId(p))).collect();
    expected.push(RecordKey::Stored("lease seven".into()));
    assert_eq!(keys, expected);
    assert_eq!(listing.partition_count(), 7);
    let state = store.get_lease(&group, PartitionId(1)).await;
    match state {
        Err(StoreError::Corrupt { reason, .. }) => assert!(reason.contains("stolen"), "{reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// A damaged row can still be overwritten by a compare-and-set on its version, which is how
/// an operator's tool repairs it.
#[tokio::test]
async fn a_damaged_row_can_be_repaired_by_a_conditional_write() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("repair.db");
    let group = unique_group("repair");
    let store = SqliteStore::open(&path).await.expect("create the file");
    let version = write_partitions(&store, &group, 1).await.remove(0);
    raw(&path)
        .execute(
            "UPDATE leases SET state = 'bogus' WHERE grp = ?1",
            [group.as_str()],
        )
        .unwrap();
    store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Update(version),
        )
        .await
        .expect("overwrite the damaged row");
    let repaired = store
        .get_lease(&group, PartitionId(0))
        .await
        .expect("decodes again");
    assert_eq!(repaired.unwrap().value, LeaseRecord::released());
}

/// The group record is one row of readable JSON; a hand edit that breaks it makes it
/// `Corrupt` under its own key, and it never shows in the lease or member listings.
#[tokio::test]
async fn the_group_record_is_plain_json_and_a_damaged_one_is_corrupt() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("group.db");
    let group = unique_group("group");
    let store = SqliteStore::open(&path).await.expect("create the file");
    let record = GroupRecord {
        epoch_floor: Epoch(12),
        ..GroupRecord::default()
    };
    store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create the group record");
    let connection = raw(&path);
    let floor: i64 = connection
        .query_row(
            "SELECT json_extract(record, '$.epoch_floor') FROM groups WHERE grp = ?1",
            [group.as_str()],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(floor, 12);
    connection
        .execute(
            "UPDATE groups SET record = '{not json' WHERE grp = ?1",
            [group.as_str()],
        )
        .unwrap();
    drop(connection);

    let error = store.get_group(&group).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::Group),
        "{error:?}"
    );
    assert!(store.list_leases(&group).await.unwrap().is_empty());
    assert!(store.list_members(&group).await.unwrap().is_empty());
}
