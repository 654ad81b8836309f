//! [`AzureTableStore`]: the [`LeaseStore`] trait over one table entity per record.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use leasehold::batch::{put_in_parts, put_one_by_one};
use leasehold::{
    check_transaction, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite, Listing,
    MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError, StoredGroup, StoredLease,
    StoredMember, TxnWrite, Version, MAX_TRANSACTION_WRITES,
};
use reqwest::{Method, StatusCode};

use crate::batch::{self, Operation, MAX_OPERATIONS};
use crate::client::{status_error, ServiceError, TableClient};
use crate::entity::{self, Encoded, GROUP_ROW_KEY, LEASE_PREFIX, MEMBER_PREFIX};
use crate::options::AzureOptions;

// Every transaction the contract allows fits in one changeset.
const _: () = assert!(MAX_TRANSACTION_WRITES <= MAX_OPERATIONS);

/// A [`LeaseStore`] in one Azure Storage table.
///
/// PartitionKey is the group; RowKey is `lease-<partition, 10 digits>` or `member-<node>`.
/// Each record field is its own column (owner, epoch, state, prohibited, load, note,
/// written_at_unix_ms), so the table reads well in any storage browser. The group record is
/// the entity with RowKey `group`, its JSON in one `record` column. A record's version is its
/// ETag. Cloning is cheap and shares the HTTP connection pool.
#[derive(Clone)]
pub struct AzureTableStore {
    client: Arc<TableClient>,
    options: Arc<AzureOptions>,
}

impl fmt::Debug for AzureTableStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AzureTableStore")
            .field(&self.options)
            .finish()
    }
}

/// The store's URL, `azure://ACCOUNT/TABLE` or `azure+http(s)://HOST/ACCOUNT/TABLE`.
impl fmt::Display for AzureTableStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.options.fmt(f)
    }
}

impl AzureTableStore {
    /// Checks `options` and creates the table if it does not exist yet.
    pub async fn connect(options: AzureOptions) -> Result<AzureTableStore, StoreError> {
        options.validate()?;
        let client = TableClient::new(&options)?;
        client.ensure_table().await?;
        Ok(AzureTableStore {
            client: Arc::new(client),
            options: Arc::new(options),
        })
    }

    /// Opens the table an `azure://` URL names, the key (and any CA) from the environment;
    /// see [`AzureOptions::from_url`] and [`AzureOptions::with_env`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), leasehold::StoreError> {
    /// // The account key comes from LEASEHOLD_AZURE_KEY.
    /// let store = leasehold_azure::AzureTableStore::from_url("azure://acme/leases").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_url(url: &str) -> Result<AzureTableStore, StoreError> {
        AzureTableStore::connect(AzureOptions::from_url(url)?.with_env()?).await
    }

    /// Replaces the JSON text of the group record of `group` whatever its ETag. For repair
    /// tools and tests only: it bypasses compare-and-set and does not check the text.
    pub async fn overwrite_group_record(
        &self,
        group: &GroupName,
        text: &str,
    ) -> Result<(), StoreError> {
        let entity = serde_json::json!({
            "PartitionKey": group.as_str(),
            "RowKey": entity::GROUP_ROW_KEY,
            "record": text,
        });
        self.client
            .merge_unconditionally(
                group.as_str(),
                entity::GROUP_ROW_KEY,
                &RecordKey::Group,
                &entity,
            )
            .await
    }

    /// Sets one text column of an existing lease entity whatever its ETag. For repair tools
    /// and tests only: it bypasses compare-and-set.
    pub async fn overwrite_lease_column(
        &self,
        group: &GroupName,
        partition: PartitionId,
        column: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let row_key = entity::lease_row_key(partition);
        self.overwrite_column(group, &row_key, &RecordKey::Lease(partition), column, value)
            .await
    }

    /// Sets one text column of an existing member entity whatever its ETag. For repair tools
    /// and tests only: it bypasses compare-and-set.
    pub async fn overwrite_member_column(
        &self,
        group: &GroupName,
        node: &NodeId,
        column: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let row_key = entity::member_row_key(node);
        let key = RecordKey::Member(node.clone());
        self.overwrite_column(group, &row_key, &key, column, value)
            .await
    }

    async fn overwrite_column(
        &self,
        group: &GroupName,
        row_key: &str,
        key: &RecordKey,
        column: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let entity = serde_json::json!({
            "PartitionKey": group.as_str(),
            "RowKey": row_key,
            column: value,
        });
        self.client
            .merge_unconditionally(group.as_str(), row_key, key, &entity)
            .await
    }

    /// Writes one chunk of at most [`MAX_OPERATIONS`] writes as one entity-group transaction,
    /// or one at a time if the transaction is refused.
    async fn put_chunk(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        match self.send_batch(group, writes).await? {
            BatchOutcome::Applied(versions) => Ok(versions),
            // A changeset is all-or-nothing and its reply names only the first write that
            // failed: one renewal that lost its lease would fail the others. Writing this
            // chunk one record at a time gives every write its own result.
            BatchOutcome::Refused(reason) => {
                tracing::debug!(%reason, "entity-group transaction refused; writing one at a time");
                put_one_by_one(self, group, writes).await
            }
        }
    }

    /// Sends lease `writes` as one entity-group transaction; see [`Self::send_changeset`].
    pub(crate) async fn send_batch(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<BatchOutcome, StoreError> {
        let encoded: Vec<(Encoded, &PutMode)> = writes
            .iter()
            .map(|write| {
                let encoded = Encoded::lease(group.as_str(), write.partition, &write.record);
                (encoded, &write.mode)
            })
            .collect();
        self.send_changeset(group, &encoded).await
    }

    /// Sends `writes`, all of `group` and so of one PartitionKey, as one entity-group
    /// transaction. Transient failures are errors; a refusal for any other reason (a failed
    /// condition) means nothing was written, and its error names the record whose operation
    /// the service reports as failed.
    async fn send_changeset(
        &self,
        group: &GroupName,
        writes: &[(Encoded, &PutMode)],
    ) -> Result<BatchOutcome, StoreError> {
        assert!(
            !writes.is_empty() && writes.len() <= MAX_OPERATIONS,
            "a changeset holds 1 to {MAX_OPERATIONS} operations"
        );
        let operations: Vec<Operation<'_>> = writes
            .iter()
            .map(|(encoded, mode)| Operation {
                url: self.client.entity_url(group.as_str(), &encoded.row_key),
                mode,
                entity: serde_json::to_vec(&encoded.entity).expect("entities serialize"),
            })
            .collect();
        let body = batch::build(&self.client.url(self.client.table()), &operations);
        let reply = self
            .client
            .send(
                Method::POST,
                self.client.url("$batch"),
                Some((&body.content_type, body.body)),
                &[],
            )
            .await?;
        let what = RecordKey::Stored(format!("transaction of group {group}"));
        if reply.status != StatusCode::ACCEPTED {
            return refusal(reply.error(&what));
        }
        let parts = batch::parse_reply(&reply.body);
        if let Some(part) = parts.iter().find(|part| !part.status.is_success()) {
            // Without an index from the service no record can be named, but the changeset
            // still failed whole: the error names the transaction instead.
            let key = part
                .operation
                .and_then(|index| writes.get(index))
                .map_or(&what, |(encoded, _)| &encoded.key);
            let error = ServiceError {
                status: part.status,
                code: part.code.clone(),
            };
            return refusal(status_error(error, key));
        }
        if parts.len() != writes.len() {
            return Err(StoreError::Unavailable {
                message: format!(
                    "the batch reply holds {} responses for {} writes",
                    parts.len(),
                    writes.len()
                ),
                source: None,
            });
        }
        let versions = parts
            .into_iter()
            .zip(writes)
            .map(|(part, (encoded, _))| {
                part.etag
                    .map(Version::from_tag)
                    .ok_or_else(|| StoreError::Unavailable {
                        message: format!("no ETag for {}", encoded.key.in_group(group)),
                        source: None,
                    })
            })
            .collect();
        Ok(BatchOutcome::Applied(versions))
    }
}

/// A changeset the service refused: a transient failure leaves the outcome unknown and is an
/// error; any other means nothing was written.
fn refusal(error: StoreError) -> Result<BatchOutcome, StoreError> {
    if error.is_transient() {
        Err(error)
    } else {
        Ok(BatchOutcome::Refused(error))
    }
}

/// What became of an entity-group transaction the service answered.
#[derive(Debug)]
pub(crate) enum BatchOutcome {
    /// Every write was applied; their versions in order.
    Applied(Vec<Result<Version, StoreError>>),
    /// Nothing was applied, for this reason.
    Refused(StoreError),
}

#[async_trait]
impl LeaseStore for AzureTableStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let what = format!("leases of group {group}");
        let entities = self
            .client
            .query(group.as_str(), LEASE_PREFIX, &what)
            .await?;
        let mut listing: Listing<StoredLease> = entities
            .into_iter()
            .map(|found| {
                let partition = entity::parse_lease_row_key(&found.row_key).ok_or_else(|| {
                    StoreError::Corrupt {
                        key: RecordKey::Stored(found.row_key.clone()),
                        reason: "the RowKey is not lease-<10-digit partition>".to_owned(),
                    }
                })?;
                Ok(StoredLease {
                    key: partition,
                    value: entity::parse_lease(&RecordKey::Lease(partition), &found.properties)?,
                    version: Version::from_tag(&found.etag),
                })
            })
            .collect();
        // The service returns RowKey order, which the zero-padding makes numeric; sorting
        // again costs little and does not depend on it.
        listing.records.sort_by_key(|record| record.key);
        Ok(listing)
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let key = RecordKey::Lease(partition);
        let row_key = entity::lease_row_key(partition);
        let Some(found) = self.client.get(group.as_str(), &row_key, &key).await? else {
            return Ok(None);
        };
        Ok(Some(StoredLease {
            key: partition,
            value: entity::parse_lease(&key, &found.properties)?,
            version: Version::from_tag(&found.etag),
        }))
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let encoded = Encoded::lease(group.as_str(), partition, record);
        self.client
            .put(
                group.as_str(),
                &encoded.row_key,
                &encoded.key,
                &encoded.entity,
                &mode,
            )
            .await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let distinct: HashSet<PartitionId> = writes.iter().map(|write| write.partition).collect();
        // A changeset may touch each entity once; a batch naming a partition twice is
        // written in order, one record at a time.
        if writes.len() < 2 || distinct.len() != writes.len() {
            return put_one_by_one(self, group, writes).await;
        }
        put_in_parts(writes, MAX_OPERATIONS, |chunk| self.put_chunk(group, chunk)).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let row_key = entity::lease_row_key(partition);
        self.client
            .delete(
                group.as_str(),
                &row_key,
                &RecordKey::Lease(partition),
                version,
            )
            .await
    }

    /// One entity-group transaction: leases and members share the group's PartitionKey,
    /// and the service applies a changeset whole or not at all.
    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        let encoded: Vec<(Encoded, &PutMode)> = writes
            .iter()
            .map(|write| match write {
                TxnWrite::Lease(lease) => (
                    Encoded::lease(group.as_str(), lease.partition, &lease.record),
                    &lease.mode,
                ),
                TxnWrite::Member { node, record, mode } => {
                    (Encoded::member(group.as_str(), node, record), mode)
                }
            })
            .collect();
        match self.send_changeset(group, &encoded).await? {
            BatchOutcome::Applied(versions) => versions.into_iter().collect(),
            BatchOutcome::Refused(error) => Err(error),
        }
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let what = format!("members of group {group}");
        let entities = self
            .client
            .query(group.as_str(), MEMBER_PREFIX, &what)
            .await?;
        let mut listing: Listing<StoredMember> = entities
            .into_iter()
            .map(|found| {
                let name = found
                    .row_key
                    .strip_prefix(MEMBER_PREFIX)
                    .unwrap_or(&found.row_key);
                let node = NodeId::new(name).map_err(|error| StoreError::Corrupt {
                    key: RecordKey::Stored(found.row_key.clone()),
                    reason: error.to_string(),
                })?;
                Ok(StoredMember {
                    value: entity::parse_member(&RecordKey::from(&node), &found.properties)?,
                    key: node,
                    version: Version::from_tag(&found.etag),
                })
            })
            .collect();
        listing.records.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listing)
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let key = RecordKey::from(node);
        let row_key = entity::member_row_key(node);
        let Some(found) = self.client.get(group.as_str(), &row_key, &key).await? else {
            return Ok(None);
        };
        Ok(Some(StoredMember {
            key: node.clone(),
            value: entity::parse_member(&key, &found.properties)?,
            version: Version::from_tag(&found.etag),
        }))
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        record.check(node)?;
        let encoded = Encoded::member(group.as_str(), node, record);
        self.client
            .put(
                group.as_str(),
                &encoded.row_key,
                &encoded.key,
                &encoded.entity,
                &mode,
            )
            .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let row_key = entity::member_row_key(node);
        self.client
            .delete(group.as_str(), &row_key, &RecordKey::from(node), version)
            .await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let key = RecordKey::Group;
        let Some(found) = self.client.get(group.as_str(), GROUP_ROW_KEY, &key).await? else {
            return Ok(None);
        };
        Ok(Some(StoredGroup {
            key: group.clone(),
            value: entity::parse_group(&found.properties)?,
            version: Version::from_tag(&found.etag),
        }))
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let entity = entity::group_entity(group.as_str(), record);
        self.client
            .put(
                group.as_str(),
                GROUP_ROW_KEY,
                &RecordKey::Group,
                &entity,
                &mode,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use leasehold::testing::unique_group;

    use super::*;
    use crate::options::AccountKey;

    async fn azurite() -> Option<AzureTableStore> {
        let endpoint = leasehold::testing::service_env(
            "LEASEHOLD_TEST_AZURITE_ENDPOINT",
            "the Azurite server",
        )?;
        let account = std::env::var("LEASEHOLD_TEST_AZURITE_ACCOUNT").unwrap();
        let key = AccountKey::from_env("LEASEHOLD_TEST_AZURITE_KEY").unwrap();
        assert!(endpoint.ends_with(&format!("/{account}")), "{endpoint}");
        let url = format!("azure+{endpoint}/leaseholdtest");
        let options = AzureOptions::from_url(&url).unwrap().key(key);
        Some(AzureTableStore::connect(options).await.unwrap())
    }

    fn renewal(partition: u32, version: Version) -> LeaseWrite {
        LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord {
                epoch: leasehold::Epoch(u64::from(partition) + 1),
                ..LeaseRecord::released()
            },
            mode: PutMode::Update(version),
        }
    }

    /// Renewals that all hold go out as one transaction, and its versions are the ones a read
    /// sees; one stale renewal makes the service refuse the whole transaction.
    #[tokio::test]
    async fn renewals_go_out_as_one_entity_group_transaction() {
        let Some(store) = azurite().await else {
            return;
        };
        let group = unique_group("egt");
        let mut writes = Vec::new();
        for partition in 0..3 {
            let version = store
                .put_lease(
                    &group,
                    PartitionId(partition),
                    &LeaseRecord::released(),
                    PutMode::Create,
                )
                .await
                .unwrap();
            writes.push(renewal(partition, version));
        }
        let BatchOutcome::Applied(versions) = store.send_batch(&group, &writes).await.unwrap()
        else {
            panic!("the transaction was refused");
        };
        for (partition, version) in versions.into_iter().enumerate() {
            let got = store
                .get_lease(&group, PartitionId(partition as u32))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got.version, version.unwrap());
            assert_eq!(got.value, writes[partition].record);
        }
        // The versions in `writes` are now stale.
        let outcome = store.send_batch(&group, &writes).await.unwrap();
        assert!(
            matches!(outcome, BatchOutcome::Refused(StoreError::Conflict { .. })),
            "{outcome:?}"
        );
    }

    /// A version this store never issued (a number, not an ETag) fails like a stale one:
    /// not found without a record, a conflict with one.
    #[tokio::test]
    async fn a_version_that_is_no_etag_fails_as_a_stale_one() {
        let Some(store) = azurite().await else {
            return;
        };
        let group = unique_group("foreign-version");
        let foreign = Version::from_number(3);
        let missing = store
            .delete_lease(&group, PartitionId(0), &foreign)
            .await
            .unwrap_err();
        assert!(
            matches!(missing, StoreError::NotFound { .. }),
            "{missing:?}"
        );
        store
            .put_lease(
                &group,
                PartitionId(0),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .unwrap();
        let present = store
            .put_lease(
                &group,
                PartitionId(0),
                &LeaseRecord::released(),
                PutMode::Update(foreign.clone()),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(present, StoreError::Conflict { .. }),
            "{present:?}"
        );
        let present = store
            .delete_lease(&group, PartitionId(0), &foreign)
            .await
            .unwrap_err();
        assert!(
            matches!(present, StoreError::Conflict { .. }),
            "{present:?}"
        );
    }
}
