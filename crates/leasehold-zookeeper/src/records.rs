//! Conditional reads and writes of one znode, on raw bytes. The store encodes and decodes.

use leasehold::{RecordKey, StoreError, Version};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error as ZkError, Stat};

use crate::connection::map_error;

/// Requests sent before their replies are awaited, so that a listing costs about one round
/// trip per this many records instead of one per record.
const READS_IN_FLIGHT: usize = 256;

/// Records are persistent znodes: a lease must never vanish because the session that wrote
/// it ended, or a partition would look free while its holder still works on it.
pub(crate) fn persistent() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// The record's version: the zxid of the transaction that last modified the znode. Unlike the
/// znode's own `version`, which starts again at 0 when a deleted znode is created again, a
/// zxid is never reused by the ensemble.
pub(crate) fn version_of(stat: &Stat) -> Version {
    Version::from_number(stat.mzxid as u64)
}

fn expected_zxid(version: &Version) -> Option<i64> {
    version
        .as_number()
        .and_then(|number| i64::try_from(number).ok())
}

/// Creates the znode at `path` (and its missing parents) holding `data`.
pub(crate) async fn create(
    client: &Client,
    path: &str,
    key: &RecordKey,
    data: &[u8],
) -> Result<Version, StoreError> {
    let exists = || StoreError::AlreadyExists { key: key.clone() };
    match client.create(path, data, &persistent()).await {
        Ok((stat, _)) => return Ok(version_of(&stat)),
        Err(ZkError::NodeExists) => return Err(exists()),
        Err(ZkError::NoNode) => {}
        Err(error) => return Err(map_error(error)),
    }
    let parent = &path[..path.rfind('/').unwrap_or(0)];
    client
        .mkdir(parent, &persistent())
        .await
        .map_err(map_error)?;
    match client.create(path, data, &persistent()).await {
        Ok((stat, _)) => Ok(version_of(&stat)),
        Err(ZkError::NodeExists) => Err(exists()),
        Err(error) => Err(map_error(error)),
    }
}

/// The znode's stat if its mzxid is `expected`, else `Conflict` (or `NotFound`).
async fn stat_at(
    client: &Client,
    path: &str,
    key: &RecordKey,
    expected: &Version,
) -> Result<Stat, StoreError> {
    let stat = client
        .check_stat(path)
        .await
        .map_err(map_error)?
        .ok_or_else(|| StoreError::NotFound { key: key.clone() })?;
    match_stat(stat, key, expected)
}

pub(crate) fn match_stat(
    stat: Stat,
    key: &RecordKey,
    expected: &Version,
) -> Result<Stat, StoreError> {
    if expected_zxid(expected) == Some(stat.mzxid) {
        Ok(stat)
    } else {
        Err(StoreError::Conflict { key: key.clone() })
    }
}

/// Maps the errors of a write conditioned on a znode version.
pub(crate) fn conditional_write_error(error: ZkError, key: &RecordKey) -> StoreError {
    match error {
        ZkError::BadVersion => StoreError::Conflict { key: key.clone() },
        ZkError::NoNode => StoreError::NotFound { key: key.clone() },
        other => map_error(other),
    }
}

/// Replaces the znode's data if its mzxid is still `expected`.
///
/// ZooKeeper conditions writes on the znode's `version`, not on its mzxid, so this reads the
/// stat, checks the mzxid, and writes conditioned on the `version` read alongside it. Any
/// write to the znode in between increments that `version`, so the server refuses ours with
/// `BadVersion`: the read and the write act as one compare-and-set. The one sequence the check
/// cannot see is the znode being deleted, created again and then written exactly as many times
/// as before, all within this call's single round trip.
pub(crate) async fn update(
    client: &Client,
    path: &str,
    key: &RecordKey,
    expected: &Version,
    data: &[u8],
) -> Result<Version, StoreError> {
    let stat = stat_at(client, path, key, expected).await?;
    client
        .set_data(path, data, Some(stat.version))
        .await
        .map(|stat| version_of(&stat))
        .map_err(|error| conditional_write_error(error, key))
}

/// Deletes the znode if its mzxid is still `expected`, as [`update`] writes.
pub(crate) async fn delete(
    client: &Client,
    path: &str,
    key: &RecordKey,
    expected: &Version,
) -> Result<(), StoreError> {
    let stat = stat_at(client, path, key, expected).await?;
    client
        .delete(path, Some(stat.version))
        .await
        .map_err(|error| conditional_write_error(error, key))
}

/// The znode's data and stat, or `None` if it does not exist.
///
/// A `sync` goes first so that a follower serving this session has caught up with the leader:
/// the read then sees writes other clients completed before it started.
pub(crate) async fn read(
    client: &Client,
    path: &str,
) -> Result<Option<(Vec<u8>, Stat)>, StoreError> {
    // Both requests are sent before either reply is awaited; the server answers a session's
    // requests in order, so the read is served after the sync.
    let synced = client.sync(path);
    let data = client.get_data(path);
    synced.await.map_err(map_error)?;
    match data.await {
        Ok(found) => Ok(Some(found)),
        Err(ZkError::NoNode) => Ok(None),
        Err(error) => Err(map_error(error)),
    }
}

/// Every child of `directory` with its data and stat, in no particular order. A missing
/// directory is an empty one; a child deleted while listing is left out.
pub(crate) async fn list(
    client: &Client,
    directory: &str,
) -> Result<Vec<(String, Vec<u8>, Stat)>, StoreError> {
    let synced = client.sync(directory);
    let children = client.list_children(directory);
    synced.await.map_err(map_error)?;
    let names = match children.await {
        Ok(names) => names,
        Err(ZkError::NoNode) => return Ok(Vec::new()),
        Err(error) => return Err(map_error(error)),
    };
    let mut found = Vec::with_capacity(names.len());
    for chunk in names.chunks(READS_IN_FLIGHT) {
        let pending: Vec<_> = chunk
            .iter()
            .map(|name| client.get_data(&format!("{directory}/{name}")))
            .collect();
        for (name, reply) in chunk.iter().zip(pending) {
            match reply.await {
                Ok((data, stat)) => found.push((name.clone(), data, stat)),
                Err(ZkError::NoNode) => {}
                Err(error) => return Err(map_error(error)),
            }
        }
    }
    Ok(found)
}
