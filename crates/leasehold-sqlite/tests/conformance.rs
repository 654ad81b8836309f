//! The store conformance suite against a database file in a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{
    run_conformance, run_transaction_conformance, Harness, Listed, Malformed,
};
use leasehold::{
    Change, GroupName, LeaseRecord, LeaseState, LeaseStore, NodeId, PartitionId, PutMode,
    RecordKey, StoreError,
};
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

    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        let path = self.path.clone();
        let group = group.to_string();
        let changed = tokio::task::spawn_blocking(move || {
            let connection = rusqlite::Connection::open(path)?;
            connection.busy_timeout(std::time::Duration::from_secs(5))?;
            connection.execute(
                "UPDATE groups SET record = '{not json' WHERE grp = ?1",
                rusqlite::params![group],
            )
        })
        .await
        .expect("corrupting thread")
        .map_err(|error| StoreError::unavailable("corrupting the group row", error))?;
        assert_eq!(changed, 1, "the row to corrupt exists");
        Ok(())
    }

    /// Rows as the `sqlite3` shell could leave them: SQLite keeps text in an integer column
    /// and numbers of any size, so every column can hold the wrong thing.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let lease = |partition: &str, values: &str| {
            format!(
                "INSERT INTO leases (grp, partition, owner, epoch, state, prohibited, load, \
                 note, written_at_unix_ms, version) VALUES (?1, {partition}, {values})"
            )
        };
        let member = |node: &str, values: &str| {
            format!(
                "INSERT INTO members (grp, node, weight, draining, load, heartbeat, \
                 written_at_unix_ms, version, lease_validity_ns, acquire_after_ns) \
                 VALUES (?1, '{node}', {values})"
            )
        };
        let lease_with = |partition: &str, column: &str, values: &str| {
            format!(
                "INSERT INTO leases (grp, partition, owner, epoch, state, prohibited, load, \
                 note, written_at_unix_ms, version, {column}) VALUES (?1, {partition}, {values})"
            )
        };
        // A healthy member but for one column of those added in schema version 3.
        let next_version = std::sync::atomic::AtomicU32::new(900_014);
        let member_with = |node: &str, column: &str, value: &str| {
            let version = next_version.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!(
                "INSERT INTO members (grp, node, weight, draining, load, heartbeat, \
                 written_at_unix_ms, version, {column}) \
                 VALUES (?1, '{node}', 1, 0, NULL, 0, NULL, {version}, {value})"
            )
        };
        let bad_member = |node: &str, damage: &str| {
            let node = NodeId::new(node).expect("a valid name");
            Malformed::new(Listed::Members, RecordKey::Member(node), damage)
        };
        let stored = |listed, key: &str, damage: &str| {
            Malformed::new(listed, RecordKey::Stored(key.to_owned()), damage)
        };
        let cases = vec![
            (
                lease("10", "'n1', 'three', 'held', '', NULL, NULL, NULL, 900001"),
                Malformed::lease(10, "text in the epoch column"),
            ),
            (
                lease("11", "NULL, -1, 'released', '', NULL, NULL, NULL, 900002"),
                Malformed::lease(11, "a negative epoch"),
            ),
            (
                lease(
                    "12",
                    "NULL, 0, 'released', 'a,,b', NULL, NULL, NULL, 900003",
                ),
                Malformed::lease(12, "an empty name in prohibited"),
            ),
            (
                lease("13", "X'ff', 0, 'held', '', NULL, NULL, NULL, 900004"),
                Malformed::lease(13, "a blob as the owner"),
            ),
            (
                lease("14", "NULL, 0, 'released', '', 'heavy', NULL, NULL, 900005"),
                Malformed::lease(14, "text in the load column"),
            ),
            (
                lease("15", "NULL, 0, 'released', '', NULL, NULL, NULL, 0"),
                Malformed::lease(15, "version 0"),
            ),
            (
                lease(
                    "4294967296",
                    "NULL, 0, 'released', '', NULL, NULL, NULL, 900006",
                ),
                stored(Listed::Leases, "lease 4294967296", "a partition beyond u32"),
            ),
            (
                lease("'ten'", "NULL, 0, 'released', '', NULL, NULL, NULL, 900007"),
                stored(Listed::Leases, "lease ten", "text as the partition"),
            ),
            (
                member(
                    "bad-weight",
                    "4294967296, 0, NULL, 0, NULL, 900008, NULL, NULL",
                ),
                bad_member("bad-weight", "a weight beyond u32"),
            ),
            (
                member(
                    "bad-draining",
                    "1, 'yes', NULL, 0, NULL, 900009, NULL, NULL",
                ),
                bad_member("bad-draining", "text in the draining column"),
            ),
            (
                member("bad name", "1, 0, NULL, 0, NULL, 900010, NULL, NULL"),
                stored(Listed::Members, "member bad name", "not a node name"),
            ),
            (
                member("bad-validity", "1, 0, NULL, 0, NULL, 900011, -1, 5"),
                bad_member("bad-validity", "a negative lease_validity_ns"),
            ),
            (
                member("bad-after", "1, 0, NULL, 0, NULL, 900012, 5, '45s'"),
                bad_member("bad-after", "text in the acquire_after_ns column"),
            ),
            (
                lease_with(
                    "16",
                    "previous_owner",
                    "NULL, 0, 'released', '', NULL, NULL, NULL, 900013, 'has space'",
                ),
                Malformed::lease(16, "not a node name as the previous owner"),
            ),
            (
                lease_with(
                    "17",
                    "handed_to",
                    "NULL, 0, 'released', '', NULL, NULL, NULL, 900020, 'n1,n2'",
                ),
                Malformed::lease(17, "not a node name as the node handed to"),
            ),
            (
                lease_with(
                    "18",
                    "session",
                    "'n1', 1, 'held', '', NULL, NULL, NULL, 900021, 'abc'",
                ),
                Malformed::lease(18, "text in the session column"),
            ),
            (
                member_with("bad-session", "session", "1.5"),
                bad_member("bad-session", "a real number in the session column"),
            ),
            (
                member_with("bad-capacity", "capacity", "'lots'"),
                bad_member("bad-capacity", "text in the capacity column"),
            ),
            (
                member_with("bad-cap", "max_partitions", "4294967296"),
                bad_member("bad-cap", "a partition cap beyond u32"),
            ),
            (
                member_with("bad-address", "address", "X'ff'"),
                bad_member("bad-address", "a blob as the address"),
            ),
            (
                member_with("bad-metadata", "metadata", "'{not json'"),
                bad_member("bad-metadata", "metadata that is not JSON"),
            ),
            (
                member_with("bad-labels", "metadata", r#"'{"zone":1}'"#),
                bad_member("bad-labels", "a number as a metadata value"),
            ),
        ];
        let path = self.path.clone();
        let group = group.to_string();
        tokio::task::spawn_blocking(move || {
            let connection = rusqlite::Connection::open(path)?;
            connection.busy_timeout(std::time::Duration::from_secs(5))?;
            let mut malformed = Vec::new();
            for (statement, damage) in cases {
                connection.execute(&statement, [&group])?;
                malformed.push(damage);
            }
            Ok(malformed)
        })
        .await
        .expect("writing thread")
        .map_err(|error: rusqlite::Error| StoreError::unavailable("writing malformed rows", error))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_passes_the_conformance_suite() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("conformance.db");
    let store = SqliteStore::open(&path).await.expect("open the store");
    run_conformance(&SqliteHarness { store, path }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_store_passes_the_transaction_checks() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("transactions.db");
    let store = SqliteStore::open(&path).await.expect("open the store");
    run_transaction_conformance(&SqliteHarness { store, path }).await;
}

/// The suite's change-hint check skips a store that answers `NotSupported`; this one must
/// not, so that the check runs: a write in the watched group is reported, by name.
#[tokio::test]
async fn sqlite_store_offers_a_change_feed() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(directory.path().join("watch.db"))
        .await
        .expect("open the store");
    let group = leasehold::testing::unique_group("watch");
    let mut feed = store
        .watch(&group)
        .await
        .expect("the SQLite store offers change hints");
    store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create");
    let hint = tokio::time::timeout(std::time::Duration::from_secs(5), feed.next()).await;
    assert_eq!(
        hint,
        Ok(Some(Change::LeaseWritten {
            partition: PartitionId(0),
            state: LeaseState::Released
        })),
        "a hint within 5 s naming the write"
    );
}
