//! One node's lease renewals as ZooKeeper multi-operations.

use leasehold::batch::cut_short;
use leasehold::codec::encode;
use leasehold::{GroupName, LeaseWrite, PutMode, RecordKey, StoreError, Version};
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::connection::map_error;
use crate::paths::Layout;
use crate::records::{self, match_stat, version_of};

/// Writes per multi-operation: keeps each request far below the server's 1 MiB default
/// `jute.maxbuffer` (a lease record is a few hundred bytes).
const WRITES_PER_MULTI: usize = 128;

/// An update whose expected mzxid matched the stat just read: it can go into a multi
/// conditioned on the znode version read with it.
struct Ready {
    index: usize,
    znode_version: i32,
}

/// Applies `writes`, each on its own condition, returning one result per write.
///
/// Updates are checked against freshly read stats (one pipelined round trip), and those that
/// still match go out together in one multi-operation, conditioned on the znode versions just
/// read. Creates go one at a time: they are rare (initial build-out) and may need parents.
pub(crate) async fn put_leases(
    client: &Client,
    layout: &Layout,
    group: &GroupName,
    writes: &[LeaseWrite],
) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
    let paths: Vec<String> = writes
        .iter()
        .map(|write| layout.lease(group, write.partition))
        .collect();
    let keys: Vec<RecordKey> = writes
        .iter()
        .map(|write| RecordKey::Lease(write.partition))
        .collect();
    let mut results: Vec<Option<Result<Version, StoreError>>> =
        writes.iter().map(|_| None).collect();

    let stats: Vec<_> = writes
        .iter()
        .enumerate()
        .filter(|(_, write)| matches!(write.mode, PutMode::Update(_)))
        .map(|(index, _)| (index, client.check_stat(&paths[index])))
        .collect();
    let mut ready = Vec::new();
    for (index, stat) in stats {
        let PutMode::Update(expected) = &writes[index].mode else {
            continue;
        };
        let key = &keys[index];
        match stat.await.map_err(map_error)? {
            None => results[index] = Some(Err(StoreError::NotFound { key: key.clone() })),
            Some(stat) => match match_stat(stat, key, expected) {
                Ok(stat) => ready.push(Ready {
                    index,
                    znode_version: stat.version,
                }),
                Err(conflict) => results[index] = Some(Err(conflict)),
            },
        }
    }

    // A transient failure ends the batch; what earlier chunks and writes learned is kept.
    for chunk in ready.chunks(WRITES_PER_MULTI) {
        if let Err(failure) = write_chunk(client, writes, &paths, &keys, chunk, &mut results).await
        {
            return cut_short(results, failure);
        }
    }
    for (index, write) in writes.iter().enumerate() {
        if write.mode == PutMode::Create {
            let data = encode(&write.record);
            let result = records::create(client, &paths[index], &keys[index], &data).await;
            match keep_unless_transient(result) {
                Ok(result) => results[index] = Some(result),
                Err(failure) => return cut_short(results, failure),
            }
        }
    }
    Ok(results
        .into_iter()
        .map(|result| result.expect("every write has a result"))
        .collect())
}

async fn write_chunk(
    client: &Client,
    writes: &[LeaseWrite],
    paths: &[String],
    keys: &[RecordKey],
    chunk: &[Ready],
    results: &mut [Option<Result<Version, StoreError>>],
) -> Result<(), StoreError> {
    let encoded: Vec<Vec<u8>> = chunk
        .iter()
        .map(|ready| encode(&writes[ready.index].record))
        .collect();
    let mut multi = client.new_multi_writer();
    for (ready, data) in chunk.iter().zip(&encoded) {
        multi
            .add_set_data(&paths[ready.index], data, Some(ready.znode_version))
            .map_err(map_error)?;
    }
    match multi.commit().await {
        Ok(outcomes) => {
            for (ready, outcome) in chunk.iter().zip(outcomes) {
                results[ready.index] = Some(match outcome {
                    MultiWriteResult::SetData { stat } => Ok(version_of(&stat)),
                    other => Err(StoreError::Unavailable {
                        message: format!("unexpected ZooKeeper multi result {other:?}"),
                        source: None,
                    }),
                });
            }
            Ok(())
        }
        // A multi-operation is all-or-nothing: one record written by someone else since we
        // read its stat fails the whole chunk and says only which operation failed first.
        // Writing the chunk's records one at a time gives every write its own result.
        Err(MultiWriteError::OperationFailed {
            source: ZkError::BadVersion | ZkError::NoNode,
            ..
        }) => {
            for (ready, data) in chunk.iter().zip(&encoded) {
                let PutMode::Update(expected) = &writes[ready.index].mode else {
                    continue;
                };
                let (path, key) = (&paths[ready.index], &keys[ready.index]);
                let result = records::update(client, path, key, expected, data).await;
                results[ready.index] = Some(keep_unless_transient(result)?);
            }
            Ok(())
        }
        Err(error) => Err(map_error(error.into())),
    }
}

/// A failed condition is this write's result; a transient failure makes the outcome of the
/// rest of the batch unknown, so it ends the batch (see [`cut_short`]).
fn keep_unless_transient(
    result: Result<Version, StoreError>,
) -> Result<Result<Version, StoreError>, StoreError> {
    match result {
        Err(error) if error.is_transient() => Err(error),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use leasehold::testing::unique_group;
    use leasehold::{LeaseRecord, LeaseStore, PartitionId};
    use tokio::time::Instant;

    use super::*;
    use crate::{ZookeeperOptions, ZookeeperStore};

    /// A record written by someone else between the stat read and the multi fails the whole
    /// multi; the fallback still gives each write its own result.
    #[tokio::test]
    async fn a_multi_failing_on_one_write_falls_back_to_single_writes() {
        let Some(address) =
            leasehold::testing::service_env("LEASEHOLD_TEST_ZOOKEEPER", "the ZooKeeper server")
        else {
            return;
        };
        let options = ZookeeperOptions::new([&address]).prefix("/leasehold-test");
        let store = ZookeeperStore::connect(options).await.unwrap();
        let group = unique_group("multi-fallback");
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
            let mut record = LeaseRecord::released();
            record.note = Some(format!("renewal {partition}"));
            writes.push(LeaseWrite {
                partition: PartitionId(partition),
                record,
                mode: PutMode::Update(version),
            });
        }
        let layout = &store.shared.layout;
        let paths: Vec<String> = writes
            .iter()
            .map(|w| layout.lease(&group, w.partition))
            .collect();
        let keys: Vec<RecordKey> = writes
            .iter()
            .map(|w| RecordKey::Lease(w.partition))
            .collect();
        let client = store
            .shared
            .connection
            .client(Instant::now() + std::time::Duration::from_secs(5))
            .await
            .unwrap();
        let ready: Vec<Ready> = (0..3)
            .map(|index| Ready {
                index,
                znode_version: 0,
            })
            .collect();
        // Someone else writes partition 1 after "our" stat read.
        let PutMode::Update(version) = writes[1].mode.clone() else {
            unreachable!()
        };
        store
            .put_lease(
                &group,
                PartitionId(1),
                &LeaseRecord::released(),
                PutMode::Update(version),
            )
            .await
            .unwrap();

        let mut results: Vec<Option<Result<Version, StoreError>>> = vec![None, None, None];
        write_chunk(&client, &writes, &paths, &keys, &ready, &mut results)
            .await
            .expect("chunk attempted");
        let results: Vec<_> = results.into_iter().map(Option::unwrap).collect();
        assert!(
            matches!(results[1], Err(StoreError::Conflict { .. })),
            "{results:?}"
        );
        for index in [0, 2] {
            let version = results[index].as_ref().expect("written alone");
            let got = store
                .get_lease(&group, PartitionId(index as u32))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&got.version, version);
            assert_eq!(got.value, writes[index].record);
        }
    }
}
