//! Opening a connection and creating or upgrading the schema it finds.

use std::path::Path;

use leasehold::StoreError;
use rusqlite::{Connection, TransactionBehavior};

use crate::error::Context;
use crate::options::SqliteOptions;

/// The schema version this build writes and understands (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 5;

/// `MIGRATIONS[n]` takes a file from schema version `n` to `n + 1`; version 0 is a new file.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    CREATE_V1,
    MIGRATE_TO_V2,
    MIGRATE_TO_V3,
    MIGRATE_TO_V4,
    MIGRATE_TO_V5,
];

// Plain CREATE TABLE (no IF NOT EXISTS): a file that already has a `leases` table but no
// leasehold schema version belongs to something else, and must not be written into.
const CREATE_V1: &str = "
CREATE TABLE leases (
    grp                TEXT    NOT NULL,
    partition          INTEGER NOT NULL,
    owner              TEXT    NULL,
    epoch              INTEGER NOT NULL,
    state              TEXT    NOT NULL,
    prohibited         TEXT    NOT NULL DEFAULT '',
    load               REAL    NULL,
    note               TEXT    NULL,
    written_at_unix_ms INTEGER NULL,
    version            INTEGER NOT NULL,
    PRIMARY KEY (grp, partition)
);
CREATE TABLE members (
    grp                TEXT    NOT NULL,
    node               TEXT    NOT NULL,
    weight             INTEGER NOT NULL,
    draining           INTEGER NOT NULL,
    load               REAL    NULL,
    heartbeat          INTEGER NOT NULL,
    written_at_unix_ms INTEGER NULL,
    version            INTEGER NOT NULL,
    PRIMARY KEY (grp, node)
);
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO meta (key, value) VALUES ('next_version', 1);
";

// The group record is kept whole as JSON, so fields of newer versions survive a rewrite. The
// timing columns are nullable: rows written before them, and by nodes that publish no
// timings, read as none.
const MIGRATE_TO_V2: &str = "
CREATE TABLE groups (
    grp     TEXT    NOT NULL PRIMARY KEY,
    record  TEXT    NOT NULL,
    version INTEGER NOT NULL
);
ALTER TABLE members ADD COLUMN lease_validity_ns INTEGER NULL;
ALTER TABLE members ADD COLUMN acquire_after_ns  INTEGER NULL;
";

// Nullable, so that rows written before read as having none of them. `metadata` holds a JSON
// object of strings, NULL when the node has none.
const MIGRATE_TO_V3: &str = "
ALTER TABLE leases  ADD COLUMN previous_owner TEXT    NULL;
ALTER TABLE members ADD COLUMN capacity       REAL    NULL;
ALTER TABLE members ADD COLUMN max_load       REAL    NULL;
ALTER TABLE members ADD COLUMN max_partitions INTEGER NULL;
ALTER TABLE members ADD COLUMN address        TEXT    NULL;
ALTER TABLE members ADD COLUMN metadata       TEXT    NULL;
";

// Nullable like `previous_owner`: rows written before were handed to no one.
const MIGRATE_TO_V4: &str = "
ALTER TABLE leases ADD COLUMN handed_to TEXT NULL;
";

// Nullable: rows written before belong to no session, and replaced none. A session (and
// the stamp a member's `replaced` holds) is any u64, kept as the INTEGER with the same 64
// bits, so one above i64::MAX reads as negative in the shell.
const MIGRATE_TO_V5: &str = "
ALTER TABLE leases  ADD COLUMN session INTEGER NULL;
ALTER TABLE members ADD COLUMN session INTEGER NULL;
ALTER TABLE members ADD COLUMN replaced INTEGER NULL;
";

/// Opens a connection to `path`, creating the file if absent, with the store's settings:
/// WAL journal, the chosen `synchronous` level and the busy timeout.
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let context = |what: &str| format!("{what} {}", path.display());
    let connection = Connection::open(path).context(&context("opening"))?;
    connection
        .busy_timeout(options.busy_timeout_limit())
        .context(&context("setting the busy timeout of"))?;
    // WAL lets readers run while one connection writes, in this process or another.
    let mode: String = connection
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .context(&context("switching to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Invalid(format!(
            "{} stays in journal mode {mode:?}: the store needs WAL mode, which needs a local \
             file system with shared memory (not a network share)",
            path.display()
        )));
    }
    connection
        .pragma_update(
            None,
            "synchronous",
            options.synchronous_mode().pragma_value(),
        )
        .context(&context("setting synchronous for"))?;
    Ok(connection)
}

fn schema_version(connection: &Connection, path: &Path) -> Result<i64, StoreError> {
    let context = format!("reading the schema version of {}", path.display());
    connection
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .context(&context)
}

fn refuse_newer(found: i64, path: &Path) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::Invalid(format!(
            "{} has schema version {found}, newer than version {SCHEMA_VERSION} this build of \
             leasehold-sqlite knows; use a newer leasehold",
            path.display()
        )));
    }
    if found < 0 {
        return Err(StoreError::Invalid(format!(
            "{} has schema version {found}, which leasehold never writes",
            path.display()
        )));
    }
    Ok(())
}

/// Brings the file's schema to [`SCHEMA_VERSION`], refusing a file made by a newer build.
///
/// The upgrade runs in one `BEGIN IMMEDIATE` transaction, re-reading the version inside it,
/// so processes opening a new file at the same moment create the schema exactly once.
pub(crate) fn prepare(connection: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let found = schema_version(connection, path)?;
    refuse_newer(found, path)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let context = format!("creating the schema of {}", path.display());
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context(&context)?;
    let found = schema_version(&transaction, path)?;
    refuse_newer(found, path)?;
    let from = usize::try_from(found).unwrap_or(MIGRATIONS.len());
    for migration in MIGRATIONS.iter().skip(from) {
        transaction.execute_batch(migration).context(&context)?;
    }
    transaction
        .pragma_update(None, "user_version", SCHEMA_VERSION)
        .context(&context)?;
    transaction.commit().context(&context)?;
    tracing::info!(
        path = %path.display(),
        from = found,
        to = SCHEMA_VERSION,
        "leasehold schema ready"
    );
    Ok(())
}
