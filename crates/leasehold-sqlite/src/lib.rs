//! The embedded store of leasehold: lease, member and group records in one SQLite database
//! file.
//!
//! [`SqliteStore`] is the default store for a fleet that lives on **one host**: several
//! processes (workers, the `leasehold` command-line tool, an agent) open the same file and
//! divide the partitions among themselves with no server to run. When the fleet spans
//! machines, use a networked store instead (PostgreSQL, etcd, ZooKeeper, Azure Tables); the
//! file must not live on a network share, where SQLite's locks and WAL mode do not work.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode, StoreError};
//! use leasehold_sqlite::SqliteStore;
//!
//! let directory = tempfile::tempdir().unwrap();
//! let store = SqliteStore::open(directory.path().join("leasehold.db")).await.unwrap();
//! let group = GroupName::new("orders").unwrap();
//! let v1 = store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
//!     .await
//!     .unwrap();
//! store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Update(v1.clone()))
//!     .await
//!     .unwrap();
//! // Another writer (in any process) that read v1 has lost the race.
//! let stale = store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Update(v1))
//!     .await;
//! assert!(matches!(stale, Err(StoreError::Conflict { .. })));
//! # });
//! ```
//!
//! # URLs
//!
//! [`SqliteStore::from_url`] opens the file a `sqlite:` URL names: `sqlite:PATH` (relative to
//! the current directory unless absolute), `sqlite://PATH` the same, and
//! `sqlite:///ABSOLUTE/PATH`. [`SqliteStore::path_from_url`] reads the path without opening
//! it. The store reads no environment variables.
//!
//! # Schema
//!
//! The store creates the schema in a new file and records its version in
//! `PRAGMA user_version` (now [`SqliteStore::SCHEMA_VERSION`]). It upgrades a file with an
//! older version and refuses, with [`StoreError::Invalid`](leasehold::StoreError::Invalid),
//! a file written by a newer one. Each record is one row of readable columns:
//!
//! ```text
//! leases(grp TEXT, partition INTEGER, owner TEXT NULL, epoch INTEGER,
//!        state TEXT ('held' | 'released' | 'offline'),
//!        prohibited TEXT (comma-separated node ids, '' when none),
//!        load REAL NULL, note TEXT NULL, written_at_unix_ms INTEGER NULL, version INTEGER,
//!        previous_owner TEXT NULL, handed_to TEXT NULL, session INTEGER NULL,
//!        PRIMARY KEY (grp, partition))
//! members(grp TEXT, node TEXT, weight INTEGER, draining INTEGER (0 | 1), load REAL NULL,
//!         heartbeat INTEGER, written_at_unix_ms INTEGER NULL, version INTEGER,
//!         lease_validity_ns INTEGER NULL, acquire_after_ns INTEGER NULL,
//!         capacity REAL NULL, max_load REAL NULL, max_partitions INTEGER NULL,
//!         address TEXT NULL, metadata TEXT NULL (a JSON object of strings, NULL when empty),
//!         session INTEGER NULL, replaced INTEGER NULL, PRIMARY KEY (grp, node))
//! groups(grp TEXT PRIMARY KEY, record TEXT (the group record's JSON), version INTEGER)
//! meta(key TEXT PRIMARY KEY, value INTEGER)   -- 'next_version': the version counter
//! ```
//!
//! The group record is kept whole as JSON, so that fields written by a newer version survive
//! a rewrite by an older one. Upgrading a file from schema version 1 adds the `groups` table
//! and the two timing columns of `members` (whole nanoseconds); rows written before read as
//! publishing no timings. Upgrading to schema version 3 adds `leases.previous_owner` and the
//! `members` columns from `capacity` to `metadata`, upgrading to version 4 adds
//! `leases.handed_to`, and upgrading to version 5 adds `leases.session`,
//! `members.session` and `members.replaced`, all NULL in rows written before. A session is a `u64` kept as the
//! INTEGER of the same 64 bits: sessions above `i64::MAX` show as negative numbers in the
//! `sqlite3` shell, and read back exactly.
//!
//! Every write takes its version from the single `next_version` counter in the same
//! transaction, so a version is never handed out twice, even to a record deleted and created
//! again. Writes run in `BEGIN IMMEDIATE` transactions, which take the file's write lock
//! before reading the version they compare, so a compare-and-set is atomic across every
//! process using the file. A multi-record transaction
//! ([`LeaseStore::transact`](leasehold::LeaseStore::transact)) is one such transaction,
//! rolled back whole when any of its conditions fails.
//!
//! # Inspecting the file
//!
//! Readers never block writers in WAL mode, so an operator can look at a live file with the
//! `sqlite3` shell:
//!
//! ```text
//! sqlite3 leasehold.db 'select * from leases'
//! sqlite3 -header -column leasehold.db \
//!     "select partition, owner, epoch, state from leases where grp = 'orders' order by partition"
//! ```
//!
//! SQLite keeps `leasehold.db-wal` and `leasehold.db-shm` beside the file while it is in use,
//! so every process needs write access to the directory, not only to the file. To copy a
//! live file, use `sqlite3 leasehold.db '.backup copy.db'` rather than `cp`.
//!
//! Edit rows by hand only with care: a row that no longer decodes (an unknown state, a bad
//! node id, a negative epoch...) is reported as [`StoreError::Corrupt`](leasehold::StoreError)
//! naming its key, and listings carry on with the other rows. Change leases with the
//! `leasehold` command-line tool instead, which keeps versions right.
//!
//! # Durability and time limits
//!
//! - `journal_mode=WAL`: readers and the single writer do not block each other, across
//!   processes.
//! - `synchronous=FULL` by default ([`Synchronous`]): a write reported done survives a power
//!   loss, so an epoch given out as a fencing token is never given out again after a reboot.
//!   `NORMAL` is faster but may lose the last commits on power loss.
//! - `busy_timeout` (default 5 s, [`SqliteOptions::busy_timeout`]): how long a write waits for
//!   another connection's write lock before failing with
//!   [`StoreError::Unavailable`](leasehold::StoreError::Unavailable), which callers retry.
//! - Each call runs on a blocking thread so the async runtime never waits on the disk, and is
//!   bounded by the call timeout ([`SqliteOptions::call_timeout`], default the busy
//!   timeout), which should not exceed the callers' own limit: its wait for the write lock
//!   ends early enough that the write itself is left a quarter of the call's time
//!   ([time limits](SqliteOptions#time-limits)). A write slower than that (a machine that
//!   leaves the thread no CPU) still commits after its caller gave up; participants read
//!   such writes back, and recognise one that lands later still as their own.
//! - A file deleted or replaced under a running store (a redeploy that recreates it, a
//!   cleanup script) is a store that failed: every call checks that the file at the path is
//!   still the one opened (its device and inode) and, once it is not, fails for good with
//!   [`StoreError::Invalid`](leasehold::StoreError::Invalid). Leases held on the old file then
//!   expire on schedule rather than being served beside a holder of the same partitions in
//!   the new file, which starts its epochs again; restart the process to open the new file.
//!
//! # Change notifications
//!
//! A SQLite file offers no change feed that reaches other processes, so
//! [`LeaseStore::watch`](leasehold::LeaseStore::watch) polls for one: a thread per feed asks
//! `PRAGMA data_version` every few milliseconds ([`SqliteOptions::change_poll_interval`]),
//! which moves when any other connection commits to the file, and then reads what changed in
//! the watched group. A release in one process reaches the others within milliseconds and
//! brings their next scan forward, instead of waiting for it. On an idle file each check
//! costs about a microsecond besides the thread's wake-up. See [`SqliteStore`]'s `watch` for
//! what each commit reports.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use leasehold::{Change, GroupName, LeaseRecord, LeaseState, LeaseStore, PartitionId, PutMode};
//! use leasehold_sqlite::SqliteStore;
//!
//! let directory = tempfile::tempdir().unwrap();
//! let path = directory.path().join("leasehold.db");
//! let watcher = SqliteStore::open(&path).await.unwrap();
//! let group = GroupName::new("orders").unwrap();
//! let mut feed = watcher.watch(&group).await.unwrap();
//! // Another process, or as here another store, opens the same file and releases a lease.
//! let writer = SqliteStore::open(&path).await.unwrap();
//! writer
//!     .put_lease(&group, PartitionId(3), &LeaseRecord::released(), PutMode::Create)
//!     .await
//!     .unwrap();
//! let hint = feed.next().await;
//! assert_eq!(
//!     hint,
//!     Some(Change::LeaseWritten { partition: PartitionId(3), state: LeaseState::Released })
//! );
//! # });
//! ```

mod changes;
mod error;
mod operations;
mod options;
mod pool;
mod rows;
mod schema;
mod store;
mod watch;

pub use options::{SqliteOptions, Synchronous};
pub use store::SqliteStore;
