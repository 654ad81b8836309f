//! Multi-record transactions as one ZooKeeper multi-operation.

use leasehold::codec::encode;
use leasehold::{GroupName, PutMode, RecordKey, StoreError, TxnWrite, Version};
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::connection::map_error;
use crate::paths::Layout;
use crate::records::{self, match_stat, version_of};

/// One write of a transaction, placed and encoded as the single-record writes place and
/// encode it.
struct Operation {
    path: String,
    key: RecordKey,
    data: Vec<u8>,
    /// The znode version read alongside the expected mzxid, for an update; `None` to create.
    znode_version: Option<i32>,
}

impl Operation {
    fn parent(&self) -> &str {
        &self.path[..self.path.rfind('/').unwrap_or(0)]
    }
}

/// Applies every write of `writes` or none.
///
/// Each update's mzxid is checked against a freshly read stat (one pipelined round trip), as a
/// single update checks it; then one multi-operation sets every updated znode conditioned on
/// the znode version read with its stat, and creates the rest. The server applies a multi
/// whole or not at all, and refuses it if any of those znodes was written since its stat was
/// read, so the reads and the multi act as one compare-and-set of every record.
pub(crate) async fn transact(
    client: &Client,
    layout: &Layout,
    group: &GroupName,
    writes: &[TxnWrite],
) -> Result<Vec<Version>, StoreError> {
    let mut operations: Vec<Operation> = writes
        .iter()
        .map(|write| operation(layout, group, write))
        .collect();
    read_conditions(client, writes, &mut operations).await?;
    let version = match commit(client, &operations).await {
        // The first record of its kind in the group: the directory is made here, as a single
        // create makes it, and the multi is sent once more.
        Err(MultiWriteError::OperationFailed {
            index,
            source: ZkError::NoNode,
        }) if operations
            .get(index)
            .is_some_and(|o| o.znode_version.is_none()) =>
        {
            make_directories(client, &operations).await?;
            commit(client, &operations).await
        }
        other => other,
    }
    .map_err(|error| refusal(&operations, error))?;
    Ok(vec![version; writes.len()])
}

fn operation(layout: &Layout, group: &GroupName, write: &TxnWrite) -> Operation {
    let (path, data) = match write {
        TxnWrite::Lease(lease) => (layout.lease(group, lease.partition), encode(&lease.record)),
        TxnWrite::Member { node, record, .. } => (layout.member(group, node), encode(record)),
    };
    Operation {
        path,
        key: write.key(),
        data,
        znode_version: None,
    }
}

/// Checks every update's expected mzxid against the znode's current stat, keeping the znode
/// version read with it; the first write in order whose condition fails is the error.
async fn read_conditions(
    client: &Client,
    writes: &[TxnWrite],
    operations: &mut [Operation],
) -> Result<(), StoreError> {
    let pending: Vec<_> = writes
        .iter()
        .zip(operations.iter())
        .enumerate()
        .filter_map(|(index, (write, operation))| match write.mode() {
            PutMode::Update(expected) => {
                Some((index, expected, client.check_stat(&operation.path)))
            }
            PutMode::Create => None,
        })
        .collect();
    let mut read = Vec::with_capacity(pending.len());
    for (index, expected, stat) in pending {
        let key = &operations[index].key;
        let stat = stat
            .await
            .map_err(map_error)?
            .ok_or_else(|| StoreError::NotFound { key: key.clone() })?;
        read.push((index, match_stat(stat, key, expected)?.version));
    }
    for (index, znode_version) in read {
        operations[index].znode_version = Some(znode_version);
    }
    Ok(())
}

/// Makes the directories of every create, as a single create makes its own.
async fn make_directories(client: &Client, operations: &[Operation]) -> Result<(), StoreError> {
    let mut made: Vec<&str> = Vec::new();
    for operation in operations.iter().filter(|o| o.znode_version.is_none()) {
        let parent = operation.parent();
        if !made.contains(&parent) {
            client
                .mkdir(parent, &records::persistent())
                .await
                .map_err(map_error)?;
            made.push(parent);
        }
    }
    Ok(())
}

/// Sends the multi-operation, returning the version every record it wrote now has.
async fn commit(client: &Client, operations: &[Operation]) -> Result<Version, MultiWriteError> {
    let mut multi = client.new_multi_writer();
    let persistent = records::persistent();
    for operation in operations {
        match operation.znode_version {
            Some(version) => multi.add_set_data(&operation.path, &operation.data, Some(version)),
            None => multi.add_create(&operation.path, &operation.data, &persistent),
        }?;
    }
    // ZooKeeper before 3.7.2 and 3.8.2 answers a create inside a multi without its stat, so a
    // transaction of creates alone also rewrites the empty data of the first one's directory:
    // the reply to that carries the zxid. Listings and change hints ignore directories.
    if operations.iter().all(|o| o.znode_version.is_none()) {
        if let Some(first) = operations.first() {
            multi.add_set_data(first.parent(), &[], None)?;
        }
    }
    let outcomes = multi.commit().await?;
    // Every operation of a multi is one ZooKeeper transaction with one zxid, so every record
    // it wrote has that zxid as its mzxid.
    outcomes
        .iter()
        .find_map(|outcome| match outcome {
            MultiWriteResult::SetData { stat } | MultiWriteResult::Create { stat, .. }
                if !stat.is_invalid() =>
            {
                Some(version_of(stat))
            }
            _ => None,
        })
        .ok_or_else(|| MultiWriteError::RequestFailed {
            source: ZkError::UnexpectedError(format!(
                "no stat in the multi-operation's results {outcomes:?}"
            )),
        })
}

/// The error for a multi-operation that failed: the server stops at the first operation that
/// fails and names it by its index.
fn refusal(operations: &[Operation], error: MultiWriteError) -> StoreError {
    let (operation, source) = match error {
        MultiWriteError::OperationFailed { index, source } => (operations.get(index), source),
        MultiWriteError::RequestFailed { source } => (None, source),
    };
    match (operation, source) {
        (Some(operation), ZkError::NodeExists) => StoreError::AlreadyExists {
            key: operation.key.clone(),
        },
        // A create finding no directory is no condition of the record's failing.
        (Some(operation), source) if operation.znode_version.is_some() => {
            records::conditional_write_error(source, &operation.key)
        }
        (_, source) => map_error(source),
    }
}

#[cfg(test)]
mod tests {
    use leasehold::testing::unique_group;
    use leasehold::{LeaseRecord, LeaseStore, LeaseWrite, MemberRecord, NodeId, PartitionId};

    use super::*;
    use crate::{ZookeeperOptions, ZookeeperStore};

    /// The first records of a group, created together: their directories are made on the way,
    /// and each record reads back with the version the transaction returned, though the
    /// server's replies to creates inside a multi may carry no stat.
    #[tokio::test]
    async fn creates_alone_make_their_directories_and_return_their_versions() {
        let Some(address) =
            leasehold::testing::service_env("LEASEHOLD_TEST_ZOOKEEPER", "the ZooKeeper server")
        else {
            return;
        };
        let options = ZookeeperOptions::new([&address]).prefix("/leasehold-test");
        let store = ZookeeperStore::connect(options).await.unwrap();
        let group = unique_group("txn-first");
        let node = NodeId::new("first").unwrap();
        let writes = [
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(0),
                record: LeaseRecord::released(),
                mode: PutMode::Create,
            }),
            TxnWrite::Member {
                node: node.clone(),
                record: MemberRecord::default(),
                mode: PutMode::Create,
            },
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(1),
                record: LeaseRecord::released(),
                mode: PutMode::Create,
            }),
        ];
        let versions = store.transact(&group, &writes).await.expect("creates");
        let lease = store.get_lease(&group, PartitionId(1)).await.unwrap();
        assert_eq!(lease.expect("lease 1 created").version, versions[2]);
        let member = store.get_member(&group, &node).await.unwrap();
        assert_eq!(member.expect("member created").version, versions[1]);
        let again = store.transact(&group, &writes[..1]).await;
        assert!(
            matches!(
                again,
                Err(StoreError::AlreadyExists {
                    key: RecordKey::Lease(PartitionId(0))
                })
            ),
            "{again:?}"
        );
    }
}
