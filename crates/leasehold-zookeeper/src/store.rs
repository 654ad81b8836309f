//! [`ZookeeperStore`]: the [`LeaseStore`] trait over one persistent znode per record.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::codec::{decode, encode};
use leasehold::{
    check_transaction, ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore, LeaseWrite,
    Listing, MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError, StoredGroup,
    StoredLease, StoredMember, TxnWrite, Version,
};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::options::ZookeeperOptions;
use crate::paths::{parse_partition, Layout};
use crate::records::{self, version_of};
use crate::shared::Shared;
use crate::{batch, transaction, watch};

/// A [`LeaseStore`] in ZooKeeper.
///
/// Each record is a persistent znode holding the record as JSON
/// (`<prefix>/<group>/lease/<partition, 10 digits>`, `<prefix>/<group>/member/<node>`, and
/// the group record at `<prefix>/<group>/group`), and its version is the znode's `mzxid`.
/// Cloning is cheap and shares the session.
///
/// The ZooKeeper session only carries requests: leases are ordinary records renewed by
/// compare-and-set, never ephemeral znodes, so a session that expires or moves does not
/// release anything, and a new session is established on the next call.
#[derive(Clone)]
pub struct ZookeeperStore {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for ZookeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperStore")
            .field("options", self.options())
            .finish()
    }
}

/// The store's URL, `zk://HOST:PORT[,…]/PREFIX`.
impl fmt::Display for ZookeeperStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.options().fmt(f)
    }
}

impl ZookeeperStore {
    /// Connects to the ensemble `options` name, keeping every group under its prefix
    /// (parents are created as needed).
    ///
    /// Establishes the first session before returning, so that a wrong address fails here.
    pub async fn connect(options: ZookeeperOptions) -> Result<ZookeeperStore, StoreError> {
        options.validate()?;
        let call_timeout = options.call_timeout_limit();
        let layout = Layout::new(options.znode_prefix().to_owned());
        let store = ZookeeperStore {
            shared: Arc::new(Shared {
                connection: Connection::new(options),
                layout,
            }),
        };
        store
            .shared
            .connection
            .client(Instant::now() + call_timeout)
            .await?;
        Ok(store)
    }

    /// Connects to the ensemble a `zk://HOST:PORT[,HOST:PORT…][/PREFIX]` URL names, with the
    /// default time limits; see [`ZookeeperOptions::from_url`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), leasehold::StoreError> {
    /// let store = leasehold_zookeeper::ZookeeperStore::from_url("zk://zk1:2181,zk2:2181/apps").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_url(url: &str) -> Result<ZookeeperStore, StoreError> {
        ZookeeperStore::connect(ZookeeperOptions::from_url(url)?).await
    }

    /// The ensemble, prefix and time limits this store was made with.
    pub fn options(&self) -> &ZookeeperOptions {
        self.shared.connection.options()
    }

    /// The znode path of a lease record, for operators and tests.
    pub fn lease_path(&self, group: &GroupName, partition: PartitionId) -> String {
        self.shared.layout.lease(group, partition)
    }

    /// The znode path of a group's group record, for operators and tests.
    pub fn group_record_path(&self, group: &GroupName) -> String {
        self.shared.layout.group_record(group)
    }

    /// Replaces the data of the znode at `path` whatever its version. For repair tools and
    /// tests only: it bypasses compare-and-set.
    pub async fn overwrite_unconditionally(
        &self,
        path: &str,
        data: &[u8],
    ) -> Result<(), StoreError> {
        let key = RecordKey::Stored(path.to_owned());
        self.shared
            .connection
            .run(|client| async move {
                client
                    .set_data(path, data, None)
                    .await
                    .map(drop)
                    .map_err(|error| records::conditional_write_error(error, &key))
            })
            .await
    }

    async fn put(
        &self,
        path: String,
        key: RecordKey,
        data: Vec<u8>,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.shared
            .connection
            .run(|client| async move {
                match mode {
                    PutMode::Create => records::create(&client, &path, &key, &data).await,
                    PutMode::Update(expected) => {
                        records::update(&client, &path, &key, &expected, &data).await
                    }
                }
            })
            .await
    }

    async fn delete(
        &self,
        path: String,
        key: RecordKey,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.shared
            .connection
            .run(|client| async move { records::delete(&client, &path, &key, version).await })
            .await
    }

    async fn read(
        &self,
        path: String,
    ) -> Result<Option<(Vec<u8>, zookeeper_client::Stat)>, StoreError> {
        self.shared
            .connection
            .run(|client| async move { records::read(&client, &path).await })
            .await
    }

    /// The children of `directory` with their data, all read within `limit`.
    async fn list(
        &self,
        directory: String,
        limit: Duration,
    ) -> Result<Vec<(String, Vec<u8>, zookeeper_client::Stat)>, StoreError> {
        self.shared
            .connection
            .run_within(limit, |client| async move {
                records::list(&client, &directory).await
            })
            .await
    }
}

#[async_trait]
impl LeaseStore for ZookeeperStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let limit = self.shared.connection.options().listing_timeout_limit();
        let nodes = self.list(self.shared.layout.leases(group), limit).await?;
        let mut listing: Listing<StoredLease> = nodes
            .into_iter()
            .map(|(name, data, stat)| {
                let partition = parse_partition(&name).ok_or_else(|| StoreError::Corrupt {
                    key: RecordKey::Stored(format!("lease {name}")),
                    reason: "the znode name is not a 10-digit partition number".to_owned(),
                })?;
                Ok(StoredLease {
                    key: partition,
                    value: decode(partition, &data)?,
                    version: version_of(&stat),
                })
            })
            .collect();
        listing.records.sort_by_key(|record| record.key);
        Ok(listing)
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let Some((data, stat)) = self
            .read(self.shared.layout.lease(group, partition))
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(StoredLease {
            key: partition,
            value: decode(partition, &data)?,
            version: version_of(&stat),
        }))
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let path = self.shared.layout.lease(group, partition);
        self.put(path, RecordKey::Lease(partition), encode(record), mode)
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
        let layout = &self.shared.layout;
        self.shared
            .connection
            .run(|client| async move { batch::put_leases(&client, layout, group, writes).await })
            .await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let path = self.shared.layout.lease(group, partition);
        self.delete(path, RecordKey::Lease(partition), version)
            .await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        let layout = &self.shared.layout;
        self.shared
            .connection
            .run(
                |client| async move { transaction::transact(&client, layout, group, writes).await },
            )
            .await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let limit = self.shared.connection.options().call_timeout_limit();
        let nodes = self.list(self.shared.layout.members(group), limit).await?;
        let mut listing: Listing<StoredMember> = nodes
            .into_iter()
            .map(|(name, data, stat)| {
                let node = NodeId::new(&name).map_err(|error| StoreError::Corrupt {
                    key: RecordKey::Stored(format!("member {name}")),
                    reason: error.to_string(),
                })?;
                Ok(StoredMember {
                    value: decode(&node, &data)?,
                    key: node,
                    version: version_of(&stat),
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
        let Some((data, stat)) = self.read(self.shared.layout.member(group, node)).await? else {
            return Ok(None);
        };
        Ok(Some(StoredMember {
            key: node.clone(),
            value: decode(node, &data)?,
            version: version_of(&stat),
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
        let path = self.shared.layout.member(group, node);
        self.put(path, RecordKey::from(node), encode(record), mode)
            .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let path = self.shared.layout.member(group, node);
        self.delete(path, RecordKey::from(node), version).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let Some((data, stat)) = self.read(self.shared.layout.group_record(group)).await? else {
            return Ok(None);
        };
        Ok(Some(StoredGroup {
            key: group.clone(),
            value: decode(RecordKey::Group, &data)?,
            version: version_of(&stat),
        }))
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let path = self.shared.layout.group_record(group);
        self.put(path, RecordKey::Group, encode(record), mode).await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        watch::open(Arc::clone(&self.shared), group.clone()).await
    }
}
