//! The data table: values keyed by (bucket, key), with each bucket fenced by the highest lease
//! epoch that has written to it.
//!
//! One SQLite file in WAL mode, shared by every server of one host, so that a bucket's data
//! is there for whichever server takes the bucket next. A real deployment would keep this
//! table in a database every server reaches (PostgreSQL, say) with the same two statements;
//! the fence is what makes a server that was paused past its lease harmless there too.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::backoff::Backoff;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// Why a call to the data table failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The call did not finish within the store's call timeout.
    #[error("data store call timed out after {0:?}")]
    Timeout(Duration),
    /// SQLite refused or failed the call.
    #[error("data store call failed")]
    Sqlite(#[from] rusqlite::Error),
    /// The blocking task running the call ended without an answer.
    #[error("data store task ended without an answer")]
    Task,
}

impl DataError {
    /// Whether SQLite found the file locked by another connection for longer than it waits.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            DataError::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
                if matches!(
                    failure.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                )
        )
    }

    /// The message of the error beneath this one, for a log line.
    fn source_message(&self) -> String {
        match self {
            DataError::Sqlite(error) => error.to_string(),
            other => other.to_string(),
        }
    }
}

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The write was applied.
    Applied {
        /// For a delete, whether the key had a value; always false for a put.
        existed: bool,
    },
    /// The bucket has already accepted a write with a higher epoch: the writer's lease is
    /// stale and the write was refused.
    Stale {
        /// The highest epoch the bucket has accepted.
        highest: u64,
    },
}

/// A value read back, with the epoch of the write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The value.
    pub value: String,
    /// The fencing token of the write that stored it.
    pub epoch: u64,
}

/// The data table of one process: a single connection, used from Tokio's blocking threads,
/// every call bounded by a timeout.
#[derive(Clone)]
pub struct DataStore {
    connection: Arc<Mutex<Connection>>,
    call_timeout: Duration,
}

impl std::fmt::Debug for DataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataStore")
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fences (
    bucket  INTEGER PRIMARY KEY,
    epoch   INTEGER NOT NULL,
    refused INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS kv (
    bucket INTEGER NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    epoch  INTEGER NOT NULL,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;
";

impl DataStore {
    /// Opens (creating if absent) the data file at `path`. Other processes' transactions
    /// are waited for up to `call_timeout`, and every call is bounded by it.
    pub fn open(path: &Path, call_timeout: Duration) -> Result<DataStore, DataError> {
        let connection = Connection::open(path)?;
        // Set before anything else, so that opening next to a busy writer waits instead of failing.
        connection.busy_timeout(call_timeout)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.execute_batch(SCHEMA)?;
        Ok(DataStore {
            connection: Arc::new(Mutex::new(connection)),
            call_timeout,
        })
    }

    /// Opens the data file as [`DataStore::open`] does, waiting while the file stays busy
    /// past `call_timeout` (the other servers of the host writing to it on a loaded machine,
    /// a long checkpoint): trying again with back-off, as the server waits for its lease
    /// store. Any other failure is returned at once.
    pub async fn open_waiting(path: &Path, call_timeout: Duration) -> Result<DataStore, DataError> {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            match DataStore::open(path, call_timeout) {
                Err(error) if error.is_busy() => {
                    let wait = backoff.failed();
                    tracing::warn!(path = %path.display(), ?wait, error = %error.source_message(), "the data file is busy; trying again");
                    tokio::time::sleep(wait).await;
                }
                opened => return opened,
            }
        }
    }

    async fn call<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    ) -> Result<T, DataError> {
        let connection = Arc::clone(&self.connection);
        let task = tokio::task::spawn_blocking(move || {
            let mut connection = connection.lock().unwrap_or_else(|e| e.into_inner());
            work(&mut connection)
        });
        match tokio::time::timeout(self.call_timeout, task).await {
            Err(_) => Err(DataError::Timeout(self.call_timeout)),
            Ok(Err(_)) => Err(DataError::Task),
            Ok(Ok(result)) => Ok(result?),
        }
    }

    /// Stores `value` under (`bucket`, `key`) if no write with a higher epoch than `epoch`
    /// has reached the bucket; raises the bucket's fence to `epoch`.
    pub async fn put(
        &self,
        bucket: u32,
        key: String,
        value: String,
        epoch: u64,
    ) -> Result<WriteOutcome, DataError> {
        self.write(bucket, epoch, move |transaction| {
            transaction.execute(
                "INSERT INTO kv (bucket, key, value, epoch) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (bucket, key) DO UPDATE SET value = excluded.value, epoch = excluded.epoch",
                params![bucket, key, value, epoch_to_sql(epoch)],
            )?;
            Ok(false)
        })
        .await
    }

    /// Deletes (`bucket`, `key`) under the same fence as [`DataStore::put`].
    pub async fn delete(
        &self,
        bucket: u32,
        key: String,
        epoch: u64,
    ) -> Result<WriteOutcome, DataError> {
        self.write(bucket, epoch, move |transaction| {
            let deleted = transaction.execute(
                "DELETE FROM kv WHERE bucket = ?1 AND key = ?2",
                params![bucket, key],
            )?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn write(
        &self,
        bucket: u32,
        epoch: u64,
        apply: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<bool, rusqlite::Error> + Send + 'static,
    ) -> Result<WriteOutcome, DataError> {
        self.call(move |connection| {
            // IMMEDIATE takes the write lock before the fence is read, so that the check and
            // the write are one step for every process sharing the file.
            let transaction =
                connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let highest: Option<i64> = transaction
                .query_row(
                    "SELECT epoch FROM fences WHERE bucket = ?1",
                    params![bucket],
                    |row| row.get(0),
                )
                .optional()?;
            let highest = highest.map(epoch_from_sql);
            if let Some(highest) = highest.filter(|highest| *highest > epoch) {
                transaction.execute(
                    "UPDATE fences SET refused = refused + 1 WHERE bucket = ?1",
                    params![bucket],
                )?;
                transaction.commit()?;
                return Ok(WriteOutcome::Stale { highest });
            }
            transaction.execute(
                "INSERT INTO fences (bucket, epoch) VALUES (?1, ?2)
                 ON CONFLICT (bucket) DO UPDATE SET epoch = max(epoch, excluded.epoch)",
                params![bucket, epoch_to_sql(epoch)],
            )?;
            let existed = apply(&transaction)?;
            transaction.commit()?;
            Ok(WriteOutcome::Applied { existed })
        })
        .await
    }

    /// The value stored under (`bucket`, `key`), if any.
    pub async fn get(&self, bucket: u32, key: String) -> Result<Option<Stored>, DataError> {
        self.call(move |connection| {
            connection
                .query_row(
                    "SELECT value, epoch FROM kv WHERE bucket = ?1 AND key = ?2",
                    params![bucket, key],
                    |row| {
                        Ok(Stored {
                            value: row.get(0)?,
                            epoch: epoch_from_sql(row.get(1)?),
                        })
                    },
                )
                .optional()
        })
        .await
    }

    /// How many writes every server sharing this file has refused as stale, in all.
    pub async fn stale_writes_refused(&self) -> Result<u64, DataError> {
        self.call(|connection| {
            connection.query_row("SELECT coalesce(sum(refused), 0) FROM fences", [], |row| {
                row.get::<_, i64>(0)
            })
        })
        .await
        .map(|refused| u64::try_from(refused).unwrap_or(0))
    }

    /// The highest epoch each bucket has accepted, for buckets that have had a write.
    pub async fn fences(&self) -> Result<Vec<(u32, u64)>, DataError> {
        self.call(|connection| {
            let mut statement = connection.prepare("SELECT bucket, epoch FROM fences")?;
            let rows =
                statement.query_map([], |row| Ok((row.get(0)?, epoch_from_sql(row.get(1)?))))?;
            rows.collect()
        })
        .await
    }
}

/// SQLite integers are signed; epochs stay far below 2^63, and saturate rather than wrap if
/// one ever did not.
fn epoch_to_sql(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

fn epoch_from_sql(epoch: i64) -> u64 {
    u64::try_from(epoch).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lower_epoch_is_refused_and_counted() {
        let directory = tempfile::tempdir().unwrap();
        let data =
            DataStore::open(&directory.path().join("data.db"), Duration::from_secs(2)).unwrap();
        let put = |value: &str, epoch| data.put(3, "k".into(), value.into(), epoch);
        assert_eq!(
            put("a", 5).await.unwrap(),
            WriteOutcome::Applied { existed: false }
        );
        assert_eq!(
            put("b", 4).await.unwrap(),
            WriteOutcome::Stale { highest: 5 }
        );
        assert_eq!(
            put("c", 6).await.unwrap(),
            WriteOutcome::Applied { existed: false }
        );
        let stored = data.get(3, "k".into()).await.unwrap().unwrap();
        assert_eq!((stored.value.as_str(), stored.epoch), ("c", 6));
        assert_eq!(data.stale_writes_refused().await.unwrap(), 1);
        assert_eq!(
            data.delete(3, "k".into(), 6).await.unwrap(),
            WriteOutcome::Applied { existed: true }
        );
        assert_eq!(data.get(3, "k".into()).await.unwrap(), None);
    }
}
