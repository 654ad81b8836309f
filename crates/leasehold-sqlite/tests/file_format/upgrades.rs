//! Files written by older schema versions, upgraded in place, and a foreign one refused.

use super::*;

/// The schema as schema version 1 created it, before group records and published timings,
/// with one lease (version 1) and one member (version 2) of group `orders`.
const VERSION_1_FILE: &str = "
CREATE TABLE leases (
    grp TEXT NOT NULL, partition INTEGER NOT NULL, owner TEXT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, prohibited TEXT NOT NULL DEFAULT '', load REAL NULL, note TEXT NULL,
    written_at_unix_ms INTEGER NULL, version INTEGER NOT NULL, PRIMARY KEY (grp, partition));
CREATE TABLE members (
    grp TEXT NOT NULL, node TEXT NOT NULL, weight INTEGER NOT NULL, draining INTEGER NOT NULL,
    load REAL NULL, heartbeat INTEGER NOT NULL, written_at_unix_ms INTEGER NULL,
    version INTEGER NOT NULL, PRIMARY KEY (grp, node));
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO leases VALUES ('orders', 0, 'n1', 5, 'held', '', NULL, NULL, NULL, 1);
INSERT INTO members VALUES ('orders', 'n1', 2, 0, NULL, 17, 1700000000000, 2);
INSERT INTO meta (key, value) VALUES ('next_version', 3);
PRAGMA user_version = 1;
";

/// A file of schema version 1 is upgraded in place: its rows read as before, its member
/// publishing no timings, and the version counter carries on.
async fn check_version_1_upgrade(path: &Path) {
    raw(path).execute_batch(VERSION_1_FILE).unwrap();
    let store = SqliteStore::open(path)
        .await
        .expect("upgrade from version 1");
    let user_version: i64 = raw(path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, SqliteStore::SCHEMA_VERSION);
    let group = GroupName::new("orders").unwrap();
    let member = store
        .get_member(&group, &node("n1"))
        .await
        .unwrap()
        .unwrap();
    let old = MemberRecord {
        weight: 2,
        heartbeat: 17,
        written_at_unix_ms: Some(1_700_000_000_000),
        ..MemberRecord::default()
    };
    assert_eq!(
        (member.value.lease_validity, member.value.acquire_after),
        (None, None)
    );
    assert_eq!((&member.value, member.version.as_number()), (&old, Some(2)));
    let listed = store.list_members(&group).await.unwrap();
    assert_eq!((listed.records.len(), listed.corrupt.len()), (1, 0));
    let lease = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (lease.value.epoch, lease.version.as_number()),
        (Epoch(5), Some(1))
    );

    assert!(store.get_group(&group).await.unwrap().is_none());
    let created = store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .expect("a group record in the upgraded file");
    assert_eq!(created.as_number(), Some(3), "the counter carries on");
    let timed = MemberRecord {
        lease_validity: Some(Duration::from_nanos(30_000_000_007)),
        acquire_after: Some(Duration::from_secs(45)),
        ..old
    };
    store
        .put_member(&group, &node("n1"), &timed, PutMode::Update(member.version))
        .await
        .expect("rewrite the old member");
    let got = store
        .get_member(&group, &node("n1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, timed);
}

/// The schema as schema version 2 left it, before previous owners and the members'
/// capacity, limits, address and metadata: one lease (version 1), one member publishing its
/// timings (version 2) and a group record (version 3) of group `orders`.
const VERSION_2_FILE: &str = r#"
CREATE TABLE leases (
    grp TEXT NOT NULL, partition INTEGER NOT NULL, owner TEXT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, prohibited TEXT NOT NULL DEFAULT '', load REAL NULL, note TEXT NULL,
    written_at_unix_ms INTEGER NULL, version INTEGER NOT NULL, PRIMARY KEY (grp, partition));
CREATE TABLE members (
    grp TEXT NOT NULL, node TEXT NOT NULL, weight INTEGER NOT NULL, draining INTEGER NOT NULL,
    load REAL NULL, heartbeat INTEGER NOT NULL, written_at_unix_ms INTEGER NULL,
    version INTEGER NOT NULL, PRIMARY KEY (grp, node));
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE groups (grp TEXT NOT NULL PRIMARY KEY, record TEXT NOT NULL, version INTEGER NOT NULL);
ALTER TABLE members ADD COLUMN lease_validity_ns INTEGER NULL;
ALTER TABLE members ADD COLUMN acquire_after_ns  INTEGER NULL;
INSERT INTO leases VALUES ('orders', 0, 'n1', 5, 'released', 'n9', 0.5, NULL, NULL, 1);
INSERT INTO members VALUES ('orders', 'n1', 2, 1, 1.5, 17, 1700000000000, 2, 30000000007, 45000000000);
INSERT INTO groups VALUES ('orders', '{"format":1,"epoch_floor":4}', 3);
INSERT INTO meta (key, value) VALUES ('next_version', 4);
PRAGMA user_version = 2;
"#;

/// A file of schema version 2 is upgraded in place: its rows read as before with none of the
/// new fields, the new fields of a rewrite land in their own columns and read back exactly,
/// and the version counter carries on.
async fn check_version_2_upgrade(path: &Path) {
    raw(path).execute_batch(VERSION_2_FILE).unwrap();
    let store = SqliteStore::open(path)
        .await
        .expect("upgrade from version 2");
    let user_version: i64 = raw(path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, SqliteStore::SCHEMA_VERSION);
    let group = GroupName::new("orders").unwrap();
    let old_member = MemberRecord {
        weight: 2,
        draining: true,
        load: Some(1.5),
        heartbeat: 17,
        written_at_unix_ms: Some(1_700_000_000_000),
        lease_validity: Some(Duration::from_nanos(30_000_000_007)),
        acquire_after: Some(Duration::from_secs(45)),
        ..MemberRecord::default()
    };
    let member = store
        .get_member(&group, &node("n1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&member.value, member.version.as_number()),
        (&old_member, Some(2))
    );
    let old_lease = LeaseRecord {
        owner: Some(node("n1")),
        epoch: Epoch(5),
        prohibited: vec![node("n9")],
        load: Some(0.5),
        ..LeaseRecord::released()
    };
    let lease = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&lease.value, lease.version.as_number()),
        (&old_lease, Some(1))
    );
    let group_record = store.get_group(&group).await.unwrap().unwrap();
    assert_eq!(group_record.value.epoch_floor, Epoch(4));

    let described = MemberRecord {
        capacity: Some(4.0),
        max_load: Some(0.75),
        max_partitions: Some(12),
        address: Some("http://10.0.0.7:8080".to_owned()),
        metadata: [("zone".to_owned(), "eu-1".to_owned())].into(),
        ..old_member
    };
    let rewritten = store
        .put_member(
            &group,
            &node("n1"),
            &described,
            PutMode::Update(member.version),
        )
        .await
        .expect("rewrite the old member with the new fields");
    assert_eq!(rewritten.as_number(), Some(4), "the counter carries on");
    let handed_back = LeaseRecord {
        previous_owner: Some(node("n1")),
        ..old_lease
    };
    store
        .put_lease(
            &group,
            PartitionId(0),
            &handed_back,
            PutMode::Update(lease.version),
        )
        .await
        .expect("rewrite the old lease with a previous owner");
    let got = store
        .get_member(&group, &node("n1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, described);
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, handed_back);
    drop(store);

    let connection = raw(path);
    let columns: (Option<f64>, Option<i64>, Option<String>, Option<String>) = connection
        .query_row(
            "SELECT capacity, max_partitions, address, metadata FROM members WHERE grp = 'orders'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        columns,
        (
            Some(4.0),
            Some(12),
            Some("http://10.0.0.7:8080".to_owned()),
            Some(r#"{"zone":"eu-1"}"#.to_owned())
        )
    );
    let previous: Option<String> = connection
        .query_row(
            "SELECT previous_owner FROM leases WHERE grp = 'orders'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(previous.as_deref(), Some("n1"));
}

/// The schema as schema version 3 left it, before hand-offs: a released lease naming who
/// released it (version 1), a lease held since (version 2) and a member describing itself
/// (version 3) of group `orders`.
const VERSION_3_FILE: &str = r#"
CREATE TABLE leases (
    grp TEXT NOT NULL, partition INTEGER NOT NULL, owner TEXT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, prohibited TEXT NOT NULL DEFAULT '', load REAL NULL, note TEXT NULL,
    written_at_unix_ms INTEGER NULL, version INTEGER NOT NULL, PRIMARY KEY (grp, partition));
CREATE TABLE members (
    grp TEXT NOT NULL, node TEXT NOT NULL, weight INTEGER NOT NULL, draining INTEGER NOT NULL,
    load REAL NULL, heartbeat INTEGER NOT NULL, written_at_unix_ms INTEGER NULL,
    version INTEGER NOT NULL, PRIMARY KEY (grp, node));
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE groups (grp TEXT NOT NULL PRIMARY KEY, record TEXT NOT NULL, version INTEGER NOT NULL);
ALTER TABLE members ADD COLUMN lease_validity_ns INTEGER NULL;
ALTER TABLE members ADD COLUMN acquire_after_ns  INTEGER NULL;
ALTER TABLE leases  ADD COLUMN previous_owner TEXT    NULL;
ALTER TABLE members ADD COLUMN capacity       REAL    NULL;
ALTER TABLE members ADD COLUMN max_load       REAL    NULL;
ALTER TABLE members ADD COLUMN max_partitions INTEGER NULL;
ALTER TABLE members ADD COLUMN address        TEXT    NULL;
ALTER TABLE members ADD COLUMN metadata       TEXT    NULL;
INSERT INTO leases VALUES ('orders', 0, NULL, 5, 'released', '', NULL, NULL, NULL, 1, 'n1');
INSERT INTO leases VALUES ('orders', 1, 'n2', 3, 'held', '', 0.5, NULL, NULL, 2, 'n1');
INSERT INTO members VALUES ('orders', 'n2', 1, 0, NULL, 9, NULL, 3, NULL, NULL,
    2.0, NULL, 8, 'http://10.0.0.8:8080', '{"zone":"eu-1"}');
INSERT INTO meta (key, value) VALUES ('next_version', 4);
PRAGMA user_version = 3;
"#;

/// A file of schema version 3 is upgraded in place: its leases read as before, handed to no
/// one, a hand-off written after lands in its own column and reads back exactly, a later
/// write without one clears it, and the version counter carries on.
async fn check_version_3_upgrade(path: &Path) {
    raw(path).execute_batch(VERSION_3_FILE).unwrap();
    let store = SqliteStore::open(path)
        .await
        .expect("upgrade from version 3");
    let user_version: i64 = raw(path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, SqliteStore::SCHEMA_VERSION);
    let group = GroupName::new("orders").unwrap();
    let released = LeaseRecord {
        epoch: Epoch(5),
        previous_owner: Some(node("n1")),
        ..LeaseRecord::released()
    };
    let held = LeaseRecord {
        owner: Some(node("n2")),
        epoch: Epoch(3),
        state: LeaseState::Held,
        load: Some(0.5),
        previous_owner: Some(node("n1")),
        ..LeaseRecord::default()
    };
    let listing = store.list_leases(&group).await.unwrap();
    assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
    let old: Vec<(u32, &LeaseRecord, Option<u64>)> = listing
        .records
        .iter()
        .map(|lease| (lease.key.0, &lease.value, lease.version.as_number()))
        .collect();
    assert_eq!(old, vec![(0, &released, Some(1)), (1, &held, Some(2))]);
    let member = store
        .get_member(&group, &node("n2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (member.value.max_partitions, member.version.as_number()),
        (Some(8), Some(3))
    );

    let handed = LeaseRecord {
        handed_to: Some(node("n2")),
        ..released.clone()
    };
    let version = store
        .put_lease(
            &group,
            PartitionId(0),
            &handed,
            PutMode::Update(Version::from_number(1)),
        )
        .await
        .expect("hand the old lease to a node");
    assert_eq!(version.as_number(), Some(4), "the counter carries on");
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, handed);
    let raw_columns = |path: &Path| -> (Option<String>, Option<String>) {
        raw(path)
            .query_row(
                "SELECT previous_owner, handed_to FROM leases \
                 WHERE grp = 'orders' AND partition = 0",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap()
    };
    assert_eq!(
        raw_columns(path),
        (Some("n1".to_owned()), Some("n2".to_owned()))
    );
    store
        .put_lease(&group, PartitionId(0), &released, PutMode::Update(version))
        .await
        .expect("rewrite without a hand-off");
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, released);
    assert_eq!(raw_columns(path), (Some("n1".to_owned()), None));
}

/// The schema as schema version 4 left it, before sessions: a released lease handed to a
/// node (version 1), a lease held since (version 2) and a member (version 3) of group
/// `orders`.
const VERSION_4_FILE: &str = r#"
CREATE TABLE leases (
    grp TEXT NOT NULL, partition INTEGER NOT NULL, owner TEXT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, prohibited TEXT NOT NULL DEFAULT '', load REAL NULL, note TEXT NULL,
    written_at_unix_ms INTEGER NULL, version INTEGER NOT NULL, PRIMARY KEY (grp, partition));
CREATE TABLE members (
    grp TEXT NOT NULL, node TEXT NOT NULL, weight INTEGER NOT NULL, draining INTEGER NOT NULL,
    load REAL NULL, heartbeat INTEGER NOT NULL, written_at_unix_ms INTEGER NULL,
    version INTEGER NOT NULL, PRIMARY KEY (grp, node));
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE groups (grp TEXT NOT NULL PRIMARY KEY, record TEXT NOT NULL, version INTEGER NOT NULL);
ALTER TABLE members ADD COLUMN lease_validity_ns INTEGER NULL;
ALTER TABLE members ADD COLUMN acquire_after_ns  INTEGER NULL;
ALTER TABLE leases  ADD COLUMN previous_owner TEXT    NULL;
ALTER TABLE members ADD COLUMN capacity       REAL    NULL;
ALTER TABLE members ADD COLUMN max_load       REAL    NULL;
ALTER TABLE members ADD COLUMN max_partitions INTEGER NULL;
ALTER TABLE members ADD COLUMN address        TEXT    NULL;
ALTER TABLE members ADD COLUMN metadata       TEXT    NULL;
ALTER TABLE leases  ADD COLUMN handed_to      TEXT    NULL;
INSERT INTO leases VALUES ('orders', 0, NULL, 5, 'released', '', NULL, NULL, NULL, 1, 'n1', 'n2');
INSERT INTO leases VALUES ('orders', 1, 'n2', 3, 'held', '', 0.5, NULL, NULL, 2, 'n1', NULL);
INSERT INTO members VALUES ('orders', 'n2', 1, 0, NULL, 9, NULL, 3, NULL, NULL,
    2.0, NULL, 8, 'http://10.0.0.8:8080', '{"zone":"eu-1"}');
INSERT INTO meta (key, value) VALUES ('next_version', 4);
PRAGMA user_version = 4;
"#;

/// A file of schema version 4 is upgraded in place: its leases and member read as before,
/// in no session; sessions written after land in their own columns as the signed integers
/// of the same bits and read back exactly, later writes without one clear them, and the
/// version counter carries on.
async fn check_version_4_upgrade(path: &Path) {
    raw(path).execute_batch(VERSION_4_FILE).unwrap();
    let store = SqliteStore::open(path)
        .await
        .expect("upgrade from version 4");
    let user_version: i64 = raw(path)
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(user_version, SqliteStore::SCHEMA_VERSION);
    let group = GroupName::new("orders").unwrap();
    let released = LeaseRecord {
        epoch: Epoch(5),
        previous_owner: Some(node("n1")),
        handed_to: Some(node("n2")),
        ..LeaseRecord::released()
    };
    let held = LeaseRecord {
        owner: Some(node("n2")),
        epoch: Epoch(3),
        state: LeaseState::Held,
        load: Some(0.5),
        previous_owner: Some(node("n1")),
        ..LeaseRecord::default()
    };
    let listing = store.list_leases(&group).await.unwrap();
    assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
    let old: Vec<(u32, &LeaseRecord, Option<u64>)> = listing
        .records
        .iter()
        .map(|lease| (lease.key.0, &lease.value, lease.version.as_number()))
        .collect();
    assert_eq!(old, vec![(0, &released, Some(1)), (1, &held, Some(2))]);
    let member = store
        .get_member(&group, &node("n2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            member.value.session,
            member.value.max_partitions,
            member.version.as_number()
        ),
        (None, Some(8), Some(3))
    );

    let session = u64::MAX - 6;
    let taken = LeaseRecord {
        owner: Some(node("n2")),
        epoch: Epoch(6),
        state: LeaseState::Held,
        handed_to: None,
        session: Some(session),
        ..released.clone()
    };
    let lease_version = store
        .put_lease(
            &group,
            PartitionId(0),
            &taken,
            PutMode::Update(Version::from_number(1)),
        )
        .await
        .expect("take the old lease in a session");
    assert_eq!(lease_version.as_number(), Some(4), "the counter carries on");
    let joined = MemberRecord {
        session: Some(session),
        ..member.value.clone()
    };
    let member_version = store
        .put_member(
            &group,
            &node("n2"),
            &joined,
            PutMode::Update(member.version),
        )
        .await
        .expect("rewrite the old member in a session");
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, taken);
    let got = store
        .get_member(&group, &node("n2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, joined);
    let raw_sessions = |path: &Path| -> (Option<i64>, Option<i64>) {
        raw(path)
            .query_row(
                "SELECT l.session, m.session FROM leases l, members m \
                 WHERE l.grp = 'orders' AND l.partition = 0 \
                 AND m.grp = 'orders' AND m.node = 'n2'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap()
    };
    assert_eq!(raw_sessions(path), (Some(-7), Some(-7)));

    store
        .put_lease(
            &group,
            PartitionId(0),
            &released,
            PutMode::Update(lease_version),
        )
        .await
        .expect("release without a session");
    store
        .put_member(
            &group,
            &node("n2"),
            &member.value,
            PutMode::Update(member_version),
        )
        .await
        .expect("rewrite the member without a session");
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, released);
    let got = store
        .get_member(&group, &node("n2"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.value, member.value);
    assert_eq!(raw_sessions(path), (None, None));
}

/// An empty SQLite file (schema version 0) gets the schema, files of schema versions 1 to 4
/// are upgraded in place, and a file holding someone else's `leases` table is not written
/// into.
#[tokio::test]
async fn older_files_are_upgraded_and_a_foreign_one_refused() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let empty = directory.path().join("empty.db");
    raw(&empty)
        .execute_batch("CREATE TABLE unrelated (x INTEGER); DROP TABLE unrelated;")
        .unwrap();
    let store = SqliteStore::open(&empty)
        .await
        .expect("upgrade from version 0");
    let group = unique_group("upgraded");
    write_partitions(&store, &group, 1).await;
    check_version_1_upgrade(&directory.path().join("version-1.db")).await;
    check_version_2_upgrade(&directory.path().join("version-2.db")).await;
    check_version_3_upgrade(&directory.path().join("version-3.db")).await;
    check_version_4_upgrade(&directory.path().join("version-4.db")).await;

    let foreign = directory.path().join("foreign.db");
    raw(&foreign)
        .execute_batch("CREATE TABLE leases (id INTEGER PRIMARY KEY, tenant TEXT);")
        .unwrap();
    let error = SqliteStore::open(&foreign)
        .await
        .expect_err("foreign schema");
    assert!(error.to_string().contains("creating the schema"), "{error}");
    let columns: i64 = raw(&foreign)
        .query_row(
            "SELECT count(*) FROM pragma_table_info('leases')",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(columns, 2, "the foreign table is untouched");
}
