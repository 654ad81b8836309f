//! [`PostgresStore`]: the [`LeaseStore`] on PostgreSQL tables.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::{
    check_transaction, ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite,
    Listing, MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError, StoredGroup,
    StoredLease, StoredMember, TxnWrite, Version,
};
use tokio::sync::Mutex;
use tokio_postgres::Row;

use crate::connection::{Session, Slot, Target};
use crate::error::map_error;
use crate::options::PostgresOptions;
use crate::rows::{
    column, expected_version, group_from_row, group_param, lease_from_row, member_from_row,
    version, LeaseParams, MemberParams,
};
use crate::schema::Names;
use crate::statements::Statements;
use crate::writes::{
    begin, conditional, is_refusal, single, updated, write_lease, write_member, Prepared,
};

/// A [`LeaseStore`] keeping leases, members and group records as rows of PostgreSQL tables.
///
/// Every write takes its version from one sequence, so versions never repeat, even for a row
/// deleted and created again. Updates and deletes are conditional on the version in their
/// `WHERE` clause. Batches of renewals run as one transaction, and so does each
/// [`LeaseStore::transact`]. Change hints come from `LISTEN`/`NOTIFY`, sent by triggers on
/// the lease and member tables.
///
/// Cheap to clone: clones share up to four connections and one per group watched (shared by
/// every feed on it). One carries reads and the rarer writes (deletes, the group record),
/// pipelined, so concurrent calls do not wait for each other; one carries transactions; one
/// carries single writes of lease and member records (the renewals of session leases),
/// pipelined too, so that a write never waits behind a read or another caller's transaction;
/// and one carries listings of the lease table, one at a time (see
/// [`PostgresOptions::listing_timeout`]). A connection opens at its first call, and a lost
/// one is opened again by the next, with a back-off between failed attempts.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    names: Names,
    options: PostgresOptions,
    shared: Mutex<Slot>,
    batch: Mutex<Slot>,
    /// Where listings of the lease table go: the server allows their statements the
    /// listing timeout.
    listing_target: Target,
    listings: Mutex<Slot>,
    /// Where single records are written: member records (with session leases, the
    /// renewals) and lease records, pipelined, behind no read and no transaction.
    writes: Mutex<Slot>,
    /// The listening connection of each group watched, shared by every feed on it.
    listeners: Mutex<std::collections::HashMap<GroupName, crate::watch::Fanout>>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresStore")
            .field(&self.inner.options)
            .finish()
    }
}

/// The store's URL, without the password.
impl fmt::Display for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.options.fmt(f)
    }
}

impl PostgresStore {
    /// Connects to the database `options` name, creating the store's tables if they are
    /// missing. Fails if the server cannot be reached within the connect timeout.
    pub async fn connect(options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        options.validate()?;
        let target = Target::new(&options, options.statement_timeout)?;
        let listing_target = Target::new(&options, options.listing_timeout)?;
        let names = Names::new(&options.table_prefix);
        let first = Session::open(&target, &names, &options).await?;
        let shared = Mutex::new(Slot::new(Some(first), &options));
        let batch = Mutex::new(Slot::new(None, &options));
        let listings = Mutex::new(Slot::new(None, &options));
        let writes = Mutex::new(Slot::new(None, &options));
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                target,
                names,
                options,
                shared,
                batch,
                listing_target,
                listings,
                writes,
                listeners: Mutex::default(),
            }),
        })
    }

    /// Connects to the database a `postgres://` URL names, completed from the `PG…`
    /// variables; see [`PostgresOptions::from_url`] and [`PostgresOptions::with_env`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), leasehold::StoreError> {
    /// let store = leasehold_postgres::PostgresStore::from_url("postgres://leases@db:5432/app").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_url(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect(PostgresOptions::from_url(url)?.with_env()?).await
    }

    /// Runs `call`, failing with [`StoreError::Timeout`] if it takes longer than the request
    /// timeout (waiting for a connection included).
    pub(crate) async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.bounded_by(self.inner.options.request_timeout, call)
            .await
    }

    /// Runs `call`, failing with [`StoreError::Timeout`] if it takes longer than `limit`.
    async fn bounded_by<T>(
        &self,
        limit: std::time::Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(limit)))
    }

    /// The store's tables, as `pg_stat_user_tables` names them.
    pub(crate) fn table_names(&self) -> Vec<String> {
        let names = &self.inner.names;
        vec![
            names.leases.clone(),
            names.members.clone(),
            names.groups.clone(),
        ]
    }

    /// The connection of reads and the rarer writes, opened if needed.
    pub(crate) async fn session(&self) -> Result<Arc<Session>, StoreError> {
        let inner = &self.inner;
        inner.open(&inner.shared, &inner.target).await
    }

    pub(crate) fn fail(
        &self,
        action: &'static str,
    ) -> impl Fn(tokio_postgres::Error) -> StoreError + '_ {
        move |error| map_error(action, self.inner.options.statement_timeout, error)
    }

    async fn query(
        &self,
        action: &'static str,
        statement: impl Fn(&Statements) -> &tokio_postgres::Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let session = self.session().await?;
        session
            .client
            .query(statement(&session.statements), params)
            .await
            .map_err(self.fail(action))
    }

    /// Writes a batch in one transaction, in partition order so that two batches touching the
    /// same rows lock them in the same order and cannot deadlock.
    async fn put_batch(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let mut results: Vec<Option<Result<Version, StoreError>>> =
            writes.iter().map(|_| None).collect();
        let mut sendable = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            match LeaseParams::new(&write.record) {
                Ok(params) => sendable.push((index, params)),
                Err(error) => results[index] = Some(Err(error)),
            }
        }
        sendable.sort_by_key(|(index, _)| writes[*index].partition);

        let inner = &self.inner;
        let mut slot = inner.batch.lock().await;
        let Session {
            client, statements, ..
        } = inner.batch_session(&mut slot).await?;
        let transaction = begin(client).await.map_err(self.fail("begin a batch"))?;
        let timeout = inner.options.statement_timeout;
        let outcomes = futures_util::future::join_all(sendable.iter().map(|(index, params)| {
            let write = &writes[*index];
            write_lease(
                &transaction,
                statements,
                group,
                write.partition,
                params,
                &write.mode,
                timeout,
            )
        }))
        .await;
        for ((index, _), outcome) in sendable.iter().zip(outcomes) {
            match outcome {
                // Any other failure aborted the transaction: nothing of the batch is applied.
                Err(error) if !is_refusal(&error) => return Err(error),
                outcome => results[*index] = Some(outcome),
            }
        }
        transaction
            .commit()
            .await
            .map_err(self.fail("commit a batch"))?;
        Ok(results
            .into_iter()
            .map(|result| result.expect("every write has a result"))
            .collect())
    }

    /// Applies a transaction on the batch connection: its writes go out together, in the
    /// order rows are locked, and the transaction commits only if every condition held.
    async fn transact_batch(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let prepared = writes
            .iter()
            .map(Prepared::new)
            .collect::<Result<Vec<_>, _>>()?;
        let mut order: Vec<usize> = (0..prepared.len()).collect();
        order.sort_by_key(|&index| prepared[index].lock_order());

        let inner = &self.inner;
        let mut slot = inner.batch.lock().await;
        let Session {
            client, statements, ..
        } = inner.batch_session(&mut slot).await?;
        let transaction = begin(client)
            .await
            .map_err(self.fail("begin a transaction"))?;
        let timeout = inner.options.statement_timeout;
        let outcomes = futures_util::future::join_all(
            order
                .iter()
                .map(|&index| prepared[index].write(&transaction, statements, group, timeout)),
        )
        .await;
        let mut results: Vec<Option<Result<Version, StoreError>>> =
            prepared.iter().map(|_| None).collect();
        for (&index, outcome) in order.iter().zip(outcomes) {
            match outcome {
                // Any other failure aborted the transaction: nothing of it is applied.
                Err(error) if !is_refusal(&error) => return Err(error),
                outcome => results[index] = Some(outcome),
            }
        }
        let versions: Result<Vec<Version>, StoreError> = results
            .into_iter()
            .map(|result| result.expect("every write has a result"))
            .collect();
        match versions {
            Ok(versions) => {
                transaction
                    .commit()
                    .await
                    .map_err(self.fail("commit a transaction"))?;
                Ok(versions)
            }
            Err(refusal) => {
                // Nothing is committed whether or not the rollback arrives: a connection that
                // fails here is closed, which ends the transaction on the server too.
                if let Err(error) = transaction.rollback().await {
                    tracing::debug!(%error, "rolling back a refused transaction failed");
                }
                Err(refusal)
            }
        }
    }
}

impl Inner {
    /// The connection `slot` holds, opened to `target` if needed, for pipelined calls.
    async fn open(&self, slot: &Mutex<Slot>, target: &Target) -> Result<Arc<Session>, StoreError> {
        let mut slot = slot.lock().await;
        let session = slot.session(target, &self.names, &self.options).await?;
        Ok(Arc::clone(session))
    }

    /// The batch connection, opened if needed. It is used only under the batch lock, which
    /// `slot` is, so no one else holds it and a transaction may borrow it mutably.
    async fn batch_session<'a>(&self, slot: &'a mut Slot) -> Result<&'a mut Session, StoreError> {
        let session = slot
            .session(&self.target, &self.names, &self.options)
            .await?;
        Ok(Arc::get_mut(session).expect("batch sessions are used only under their lock"))
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let inner = &self.inner;
        let limit = inner.options.listing_timeout;
        let listing = async {
            // One listing at a time: a caller that gives up while waiting its turn never
            // sends its listing, where a pipelined one would be read and sent by the server
            // all the same, for no one.
            let rows = {
                let mut slot = inner.listings.lock().await;
                let session = slot
                    .session(&inner.listing_target, &inner.names, &inner.options)
                    .await?;
                session
                    .client
                    .query(&session.statements.list_leases, &[&group.as_str()])
                    .await
                    .map_err(|error| map_error("list leases", limit, error))?
            };
            Ok(rows.iter().map(lease_from_row).collect())
        };
        self.bounded_by(limit, listing).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let partition_column = i64::from(partition.0);
        self.bounded(async {
            let rows = self
                .query(
                    "get a lease",
                    |s| &s.get_lease,
                    &[&group.as_str(), &partition_column],
                )
                .await?;
            rows.first().map(lease_from_row).transpose()
        })
        .await
    }

    /// One query for the whole batch, where the default sends a get per partition.
    async fn get_leases(
        &self,
        group: &GroupName,
        partitions: &[PartitionId],
    ) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
        let columns: Vec<i64> = partitions.iter().map(|p| i64::from(p.0)).collect();
        self.bounded(async {
            let rows = self
                .query(
                    "get leases",
                    |s| &s.get_leases,
                    &[&group.as_str(), &columns],
                )
                .await?;
            let mut found = Vec::with_capacity(rows.len());
            for row in &rows {
                let record = lease_from_row(row);
                // A row whose other columns cannot be read still names its partition.
                let partition = match &record {
                    Ok(stored) => Some(stored.key),
                    Err(_) => row
                        .try_get::<_, i64>(0)
                        .ok()
                        .and_then(|partition| u32::try_from(partition).ok())
                        .map(PartitionId),
                };
                let Some(partition) = partition else {
                    // Not even its partition reads: the error says what could be read.
                    return Err(record.expect_err("a decoded row names its partition"));
                };
                found.push((partition, record));
            }
            leasehold::reads::in_order_asked(partitions, found)
        })
        .await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let params = LeaseParams::new(record)?;
        self.bounded(async {
            let inner = &self.inner;
            let session = inner.open(&inner.writes, &inner.target).await?;
            let timeout = inner.options.statement_timeout;
            write_lease(
                &session.client,
                &session.statements,
                group,
                partition,
                &params,
                &mode,
                timeout,
            )
            .await
        })
        .await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        self.bounded(self.put_batch(group, writes)).await
    }

    /// Runs the writes as one transaction, with the statements of the single writes, and
    /// rolls it back if any condition fails.
    ///
    /// Each conditional `UPDATE` locks its row until the commit and, having waited for the
    /// lock, compares the version of the row as committed; each `INSERT` holds its key in
    /// the unique index the same way. So once every write has succeeded, no other writer, in
    /// this process or any other, can change those records before the commit. The triggers
    /// send each written row's notification as for a single write, at the commit, and none
    /// for a transaction rolled back.
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        self.bounded(self.transact_batch(group, writes)).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let (partition_column, expected) = (i64::from(partition.0), expected_version(version));
        self.bounded(async {
            let rows = self
                .query(
                    "delete a lease",
                    |s| &s.delete_lease,
                    &[&group.as_str(), &partition_column, &expected],
                )
                .await?;
            let row = single(&rows)?;
            let key = RecordKey::Lease(partition);
            conditional(
                column(row, 0, "applied", &key)?,
                column(row, 1, "present", &key)?,
                key,
            )
        })
        .await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.bounded(async {
            let rows = self
                .query("list members", |s| &s.list_members, &[&group.as_str()])
                .await?;
            Ok(rows.iter().map(member_from_row).collect())
        })
        .await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.bounded(async {
            let rows = self
                .query(
                    "get a member",
                    |s| &s.get_member,
                    &[&group.as_str(), &node.as_str()],
                )
                .await?;
            rows.first().map(member_from_row).transpose()
        })
        .await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let params = MemberParams::new(node, record)?;
        // On the connection of single writes: with session leases this write is the
        // renewal, and must not queue behind reads or another caller's transaction.
        self.bounded(async {
            let inner = &self.inner;
            let session = inner.open(&inner.writes, &inner.target).await?;
            let timeout = inner.options.statement_timeout;
            write_member(
                &session.client,
                &session.statements,
                group,
                node,
                &params,
                &mode,
                timeout,
            )
            .await
        })
        .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let expected = expected_version(version);
        self.bounded(async {
            let rows = self
                .query(
                    "delete a member",
                    |s| &s.delete_member,
                    &[&group.as_str(), &node.as_str(), &expected],
                )
                .await?;
            let row = single(&rows)?;
            let key = RecordKey::from(node);
            conditional(
                column(row, 0, "applied", &key)?,
                column(row, 1, "present", &key)?,
                key,
            )
        })
        .await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.bounded(async {
            let rows = self
                .query("get the group record", |s| &s.get_group, &[&group.as_str()])
                .await?;
            rows.first()
                .map(|row| group_from_row(group, row))
                .transpose()
        })
        .await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let text = group_param(record)?;
        let (grp, key) = (group.as_str(), RecordKey::Group);
        self.bounded(async {
            match &mode {
                PutMode::Create => self
                    .query(
                        "create the group record",
                        |s| &s.insert_group,
                        &[&grp, &text],
                    )
                    .await?
                    .first()
                    .map_or_else(
                        || Err(StoreError::AlreadyExists { key: key.clone() }),
                        |row| version(row, 0, &key),
                    ),
                PutMode::Update(version) => {
                    let expected = expected_version(version);
                    let rows = self
                        .query(
                            "update the group record",
                            |s| &s.update_group,
                            &[&grp, &text, &expected],
                        )
                        .await?;
                    updated(single(&rows)?, key.clone())
                }
            }
        })
        .await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        let inner = &self.inner;
        // Held while a listener starts, so that watchers arriving meanwhile share it.
        let mut listeners = inner.listeners.lock().await;
        if let Some(feed) = listeners.get(group).and_then(crate::watch::Fanout::join) {
            return Ok(feed);
        }
        let (fanout, feed) = crate::watch::start(
            inner.target.clone(),
            inner.names.channel.clone(),
            group.clone(),
            inner.options.clone(),
        )
        .await?;
        listeners.insert(group.clone(), fanout);
        Ok(feed)
    }
}
