//! [`SqliteStore`]: the [`LeaseStore`] of one database file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::store_url::{split_scheme, UrlError, UrlPart};
use leasehold::{
    check_transaction, ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite,
    Listing, MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError, StoredGroup,
    StoredLease, StoredMember, TxnWrite, Version,
};

use crate::operations;
use crate::options::SqliteOptions;
use crate::pool::Pool;
use crate::rows::{encode_group, encode_lease, encode_member, encode_write};
use crate::schema;
use crate::watch;

/// A [`LeaseStore`] kept in a SQLite database file on local disk, shared by every process of
/// one host that opens the same path.
///
/// Cloning gives another handle to the same connections. Calls run on Tokio's blocking
/// threads, each bounded by the options' call timeout. See the [crate docs](crate) for the
/// schema and the durability choices.
///
/// [`LeaseStore::watch`] polls the file for other connections' commits every few
/// milliseconds ([`SqliteOptions::change_poll_interval`]) and names what changed in the group,
/// so a release in one process brings the other processes' next scan forward.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.pool.path())
            .finish_non_exhaustive()
    }
}

/// The store's URL, `sqlite:` and the absolute path of the file.
impl fmt::Display for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sqlite:{}", self.path().display())
    }
}

impl SqliteStore {
    /// The schema version this build writes (`PRAGMA user_version` of the file).
    pub const SCHEMA_VERSION: i64 = schema::SCHEMA_VERSION;

    /// The file a `sqlite:` URL names, without opening it: drop `sqlite:`, then one leading
    /// `//` if present; what is left is the path, taken literally (no percent-decoding, no
    /// query string) and relative to the current directory unless absolute.
    ///
    /// ```
    /// use std::path::Path;
    /// use leasehold::store_url::UrlPart;
    /// use leasehold_sqlite::SqliteStore;
    ///
    /// assert_eq!(SqliteStore::path_from_url("sqlite:leasehold.db")?, Path::new("leasehold.db"));
    /// assert_eq!(SqliteStore::path_from_url("sqlite://data/leases.db")?, Path::new("data/leases.db"));
    /// assert_eq!(SqliteStore::path_from_url("sqlite:///var/lib/leases.db")?, Path::new("/var/lib/leases.db"));
    /// assert_eq!(SqliteStore::path_from_url("sqlite:").unwrap_err().part(), UrlPart::Path);
    /// # Ok::<(), leasehold::store_url::UrlError>(())
    /// ```
    pub fn path_from_url(url: &str) -> Result<PathBuf, UrlError> {
        let (scheme, rest) = split_scheme(url)?;
        if scheme != "sqlite" {
            return Err(UrlError::new(
                UrlPart::Scheme,
                format!("scheme {scheme:?} is not sqlite"),
            ));
        }
        // A `?` may be part of a file name; `?name=value` is a query, which may hold a
        // password meant for another store.
        if rest
            .split_once('?')
            .is_some_and(|(_, query)| query.contains('='))
        {
            return Err(UrlError::new(
                UrlPart::Query,
                "sqlite: URLs take no query parameters (`?name=value`): expected sqlite:PATH",
            ));
        }
        if let Some(authority) = rest.strip_prefix("//") {
            let first = authority.split('/').next().unwrap_or_default();
            let userinfo = authority
                .rfind('@')
                .is_some_and(|at| authority[..at].contains(':'));
            if first.contains('@') || userinfo {
                // A server's URL under the wrong scheme: its userinfo may hold a password.
                return Err(UrlError::new(
                    UrlPart::Path,
                    "sqlite: URLs name a file, not a server: this one has a user or password \
                     before an `@`; expected sqlite:PATH",
                ));
            }
        }
        match rest.strip_prefix("//").unwrap_or(rest) {
            "" => Err(UrlError::new(
                UrlPart::Path,
                "the SQLite file path is empty: expected sqlite:PATH",
            )),
            path => Ok(PathBuf::from(path)),
        }
    }

    /// Opens the file a `sqlite:` URL names with [`SqliteOptions::default`]; see
    /// [`SqliteStore::path_from_url`] and [`SqliteStore::open`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use leasehold_sqlite::SqliteStore;
    ///
    /// let directory = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", directory.path().join("leases.db").display());
    /// let store = SqliteStore::from_url(&url).await.unwrap();
    /// assert_eq!(store.to_string(), format!("sqlite:{}", store.path().display()));
    /// # });
    /// ```
    pub async fn from_url(url: &str) -> Result<SqliteStore, StoreError> {
        SqliteStore::open(SqliteStore::path_from_url(url)?).await
    }

    /// Opens the database at `path` with [`SqliteOptions::default`], creating the file and its
    /// schema if absent.
    ///
    /// Fails with [`StoreError::Invalid`] if the file was written by a newer schema version
    /// or cannot use WAL mode, and [`StoreError::Unavailable`] if it cannot be opened.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path` with `options`, creating the file and its schema if
    /// absent. Fails as [`SqliteStore::open`] does, and with [`StoreError::Invalid`] if the
    /// options do not [validate](SqliteOptions::validate).
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let pool = Pool::open(path.as_ref(), options).await?;
        Ok(SqliteStore {
            pool: Arc::new(pool),
        })
    }

    /// The absolute path of the database file.
    pub fn path(&self) -> &Path {
        self.pool.path()
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &SqliteOptions {
        self.pool.options()
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let group = group.clone();
        self.pool
            .run(move |connection| operations::list_leases(connection, &group))
            .await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let group = group.clone();
        self.pool
            .run(move |connection| operations::get_lease(connection, &group, partition))
            .await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let row = encode_lease(partition, record)?;
        let group = group.clone();
        self.pool
            .run(move |connection| {
                let context = format!("writing {}", RecordKey::Lease(partition).in_group(&group));
                operations::write(connection, &context, |transaction| {
                    operations::put_lease(transaction, &group, partition, &row, &mode)
                })
            })
            .await
    }

    /// Applies the whole batch in one transaction, each write on its own condition.
    ///
    /// A write whose condition fails, or whose record cannot be stored, fails alone and the
    /// others commit. If SQLite itself fails, nothing of the batch is applied.
    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let encoded: Vec<_> = writes
            .iter()
            .map(|write| {
                let row = encode_lease(write.partition, &write.record);
                (write.partition, row, write.mode.clone())
            })
            .collect();
        let group = group.clone();
        self.pool
            .run(move |connection| {
                let context = format!("writing a batch of {} leases of {group}", encoded.len());
                operations::write(connection, &context, |transaction| {
                    let mut results = Vec::with_capacity(encoded.len());
                    for (partition, row, mode) in encoded {
                        let result = row.and_then(|row| {
                            operations::put_lease(transaction, &group, partition, &row, &mode)
                        });
                        match result {
                            Err(error) if error.is_transient() => return Err(error),
                            result => results.push(result),
                        }
                    }
                    Ok(results)
                })
            })
            .await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let group = group.clone();
        let version = version.clone();
        self.pool
            .run(move |connection| {
                let context = format!("deleting {}", RecordKey::Lease(partition).in_group(&group));
                operations::write(connection, &context, |transaction| {
                    operations::delete_lease(transaction, &group, partition, &version)
                })
            })
            .await
    }

    /// Deletes in one transaction: one commit for the batch rather than one per record,
    /// which is what makes destroying a large group quick.
    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        if deletes.is_empty() {
            return Ok(Vec::new());
        }
        let group = group.clone();
        let deletes = deletes.to_vec();
        self.pool
            .run(move |connection| {
                let context = format!("deleting a batch of {} leases of {group}", deletes.len());
                operations::write(connection, &context, |transaction| {
                    let mut results = Vec::with_capacity(deletes.len());
                    for (partition, version) in &deletes {
                        match operations::delete_lease(transaction, &group, *partition, version) {
                            Err(error) if error.is_transient() => return Err(error),
                            result => results.push(result),
                        }
                    }
                    Ok(results)
                })
            })
            .await
    }

    /// Applies the writes in one `BEGIN IMMEDIATE` transaction, which holds the file's write
    /// lock from the first version it reads to the commit, so no writer in any process comes
    /// between the conditions and the writes. The first failed condition rolls it back.
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        let rows = writes
            .iter()
            .map(encode_write)
            .collect::<Result<Vec<_>, _>>()?;
        let group = group.clone();
        self.pool
            .run(move |connection| {
                let context = format!("writing a transaction of {} records of {group}", rows.len());
                operations::write_whole(connection, &context, |transaction| {
                    operations::transact(transaction, &group, &rows)
                })
            })
            .await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let group = group.clone();
        self.pool
            .run(move |connection| operations::list_members(connection, &group))
            .await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let group = group.clone();
        let node = node.clone();
        self.pool
            .run(move |connection| operations::get_member(connection, &group, &node))
            .await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let row = encode_member(node, record)?;
        let group = group.clone();
        let node = node.clone();
        self.pool
            .run(move |connection| {
                let context = format!("writing {}", RecordKey::from(&node).in_group(&group));
                operations::write(connection, &context, |transaction| {
                    operations::put_member(transaction, &group, &node, &row, &mode)
                })
            })
            .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let group = group.clone();
        let node = node.clone();
        let version = version.clone();
        self.pool
            .run(move |connection| {
                let context = format!("deleting {}", RecordKey::from(&node).in_group(&group));
                operations::write(connection, &context, |transaction| {
                    operations::delete_member(transaction, &group, &node, &version)
                })
            })
            .await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let group = group.clone();
        self.pool
            .run(move |connection| operations::get_group(connection, &group))
            .await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let text = encode_group(record)?;
        let group = group.clone();
        self.pool
            .run(move |connection| {
                let context = format!("writing {}", RecordKey::Group.in_group(&group));
                operations::write(connection, &context, |transaction| {
                    operations::put_group(transaction, &group, &text, &mode)
                })
            })
            .await
    }

    /// Change hints for `group`, found by polling the file: a thread of the feed's own asks
    /// SQLite for `PRAGMA data_version`, on a read-only connection of its own, every
    /// [change poll interval](SqliteOptions::change_poll_interval) (5 ms by default). That
    /// value moves whenever another connection commits to the file (this store's other
    /// connections, another store on the same file, another process), never for the
    /// watcher's own connection, which therefore never writes.
    ///
    /// `data_version` is per database file, not per group: a commit to any group of the
    /// file wakes the watcher, which then reads this group's keys, versions and lease states
    /// (a read proportional to the group's size) to say what changed. So commits to other
    /// groups and to group records send nothing; a renewal is reported as
    /// [`Change::LeaseWritten`](leasehold::Change::LeaseWritten) with the held state and a
    /// heartbeat as [`Change::MemberUpdated`](leasehold::Change::MemberUpdated), which
    /// participants ignore; and a release, a join or a delete names its record, so only a
    /// commit that may matter wakes a scan. An edit the versions do not show (by hand, of
    /// anything but a lease's state) sends nothing, and the next scheduled scan sees it.
    ///
    /// The poller never waits for the feed's reader: hints that do not fit are coalesced
    /// into one [`Change::Unknown`](leasehold::Change::Unknown), renewals left out first. A
    /// poll that fails (an I/O error, a file that cannot be read) is logged with a warning
    /// and retried on a new connection with capped exponential back-off, from 50 ms to 2 s,
    /// then followed by an `Unknown`, since commits may have been missed; meanwhile the feed
    /// stays open and silent, and participants scan on their own schedule. Dropping the
    /// feed ends the thread at its next poll.
    ///
    /// The first look is taken before this returns, so every commit that completes
    /// afterwards is reported.
    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        watch::start(self.pool.path(), self.pool.options(), group).await
    }
}

#[cfg(test)]
mod tests {
    use leasehold::testing::assert_urls_refused;

    use super::*;

    #[test]
    fn sqlite_urls_name_the_file() {
        for (url, path) in [
            ("sqlite:leases.db", "leases.db"),
            ("sqlite:/a/b.db", "/a/b.db"),
            ("sqlite://b.db", "b.db"),
            ("sqlite://./b.db", "./b.db"),
            ("sqlite:///a/b.db", "/a/b.db"),
            ("sqlite:a b?c.db", "a b?c.db"),
        ] {
            assert_eq!(SqliteStore::path_from_url(url), Ok(PathBuf::from(path)));
        }
    }

    #[test]
    fn bad_sqlite_urls_name_the_part() {
        let cases = [
            ("sqlite:", UrlPart::Path, "path is empty"),
            ("sqlite:a.db?mode=ro", UrlPart::Query, "no query parameters"),
            ("sqlite://u:pw@host/a.db", UrlPart::Path, "not a server"),
            ("sqlite://", UrlPart::Path, "path is empty"),
            ("leases.db", UrlPart::Scheme, "no scheme"),
            ("sqlite3:leases.db", UrlPart::Scheme, "\"sqlite3\""),
        ];
        assert_urls_refused(SqliteStore::path_from_url, &cases);
    }
}
