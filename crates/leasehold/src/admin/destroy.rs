//! Deleting a group's records, safely even while its nodes run.

use crate::error::StoreError;
use crate::group::{LeaseMode, FORMAT_VERSION};
use crate::record::{unix_ms_now, LeaseState, StoredLease};
use crate::store::{LeaseStore, LeaseWrite, PutMode};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, Version};

use super::group::{ensure_group_for_destroy, member_nodes, raise_epoch_floor, update_group};
use super::{with_session, AdminError, MAX_ATTEMPTS};

/// Whether [`destroy`] may run while the group has members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destroy {
    /// Refuse while any member record is present: a node may still be serving.
    IfNoMembers,
    /// Delete whatever is there. Running nodes lose what they hold as their records go,
    /// and stop ([`crate::GroupMismatch::Destroyed`]) rather than register again.
    Force,
}

/// Deletes every lease and member record of `group`, returning how many were removed.
///
/// The group record stays, with its epoch floor raised to the highest epoch deleted, so that
/// a group built out again under the same name issues fencing tokens above every one it
/// issued before: a resource that remembers the highest token it accepted keeps accepting
/// the new owners, and keeps refusing the old ones.
///
/// Safe against nodes still running (a forced destroy):
///
/// - the group's generation is raised before anything is deleted, so a node whose member
///   record goes registers again only to find the generation changed, and stops;
/// - with session leases, a lease record whose holder still has a session is taken offline
///   together with that session (in one transaction) before it is deleted, so the holder's
///   next renewal fails and it drops what it held, as a renewal of a deleted record fails
///   with per-partition leases;
/// - records created again later by [`super::init`] are held by nobody, so they are taken
///   only after `acquire_after`: by then every lease of the destroyed group has run out.
pub async fn destroy(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: Destroy,
) -> Result<usize, AdminError> {
    destroy_with_progress(store, group, mode, &mut |_, _| {}).await
}

/// [`destroy`], calling `progress(done, total)` as lease records are deleted: once before
/// the first and after each batch, for a command that shows how far it has come.
pub async fn destroy_with_progress(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: Destroy,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<usize, AdminError> {
    let nodes = member_nodes(store, group).await?;
    if mode == Destroy::IfNoMembers && !nodes.is_empty() {
        return Err(AdminError::MembersPresent {
            group: group.clone(),
            nodes,
        });
    }
    ensure_group_for_destroy(store, group).await?;
    let record = update_group(store, group, |record| {
        record.generation += 1;
        // Nodes of builds that know no generation would register again and carry on.
        record.format = record.format.max(FORMAT_VERSION);
        Ok(true)
    })
    .await?;
    tracing::info!(%group, generation = record.generation, "destroying the group");
    let mut removed = delete_members(store, group).await?;
    let leases = store.list_leases(group).await?;
    let mut floor = leases.records.iter().map(|r| r.value.epoch).max();
    if let Some(highest) = floor {
        raise_epoch_floor(store, group, highest).await?;
    }
    let total = leases.records.len();
    progress(0, total);
    // A record a session may keep is taken offline with that session before it goes, one
    // at a time; every other record is deleted in batches at the version listed, and one
    // that changed meanwhile is done one at a time too.
    let (in_sessions, plain): (Vec<_>, Vec<_>) = leases
        .records
        .into_iter()
        .partition(|lease| kept_by_session(record.lease_mode, lease));
    let mut done = 0;
    for batch in plain.chunks(DELETE_BATCH) {
        let deletes: Vec<_> = batch
            .iter()
            .map(|lease| (lease.key, lease.version.clone()))
            .collect();
        let results = store.delete_leases(group, &deletes).await?;
        for (lease, result) in batch.iter().zip(results) {
            match result {
                Ok(()) => removed += 1,
                Err(StoreError::NotFound { .. }) => {}
                // The batch's delete was the first attempt; the others follow one at a time.
                Err(StoreError::Conflict { .. }) => {
                    let (lease, mode) = (lease.clone(), record.lease_mode);
                    if delete_lease(store, group, mode, lease, 1, &mut floor).await? {
                        removed += 1;
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        done += batch.len();
        progress(done, total);
    }
    for lease in in_sessions {
        if delete_lease(store, group, record.lease_mode, lease, 0, &mut floor).await? {
            removed += 1;
        }
        done += 1;
        progress(done, total);
    }
    Ok(removed)
}

/// Lease records deleted per store call: one transaction each on stores that have them.
const DELETE_BATCH: usize = 500;

/// Whether `lease` may be served under its holder's session whatever happens to the record
/// alone: held, in a group with session leases.
fn kept_by_session(mode: LeaseMode, lease: &StoredLease) -> bool {
    mode == LeaseMode::Session
        && lease.value.state == LeaseState::Held
        && lease.value.owner.is_some()
}

/// Deletes every member record, the operator's included. With session leases a running
/// node's session is what keeps its leases: they go first, so its next renewal fails and it
/// drops everything.
async fn delete_members(store: &dyn LeaseStore, group: &GroupName) -> Result<usize, AdminError> {
    let members = store.list_members(group).await?;
    let mut removed = 0;
    for member in members.records {
        let mut current = member;
        for attempt in 0.. {
            match store
                .delete_member(group, &current.key, &current.version)
                .await
            {
                Ok(()) => {
                    removed += 1;
                    break;
                }
                Err(StoreError::NotFound { .. }) => break,
                // Renewed meanwhile by a running node (a forced destroy): delete what it wrote.
                Err(StoreError::Conflict { .. }) if attempt + 1 < MAX_ATTEMPTS => {
                    match store.get_member(group, &current.key).await? {
                        Some(now) => current = now,
                        None => break,
                    }
                }
                Err(StoreError::Conflict { .. }) => {
                    return Err(AdminError::Contended {
                        key: RecordKey::Member(current.key),
                    })
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(removed)
}

/// Deletes one lease record, whatever nodes write to it meanwhile, in the attempts left
/// after `tried`. Returns whether this call deleted it. `floor` is the epoch floor written
/// so far.
async fn delete_lease(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: LeaseMode,
    lease: StoredLease,
    tried: usize,
    floor: &mut Option<Epoch>,
) -> Result<bool, AdminError> {
    let mut current = lease;
    for _ in tried..MAX_ATTEMPTS {
        // A node may take or renew the record between the listing and the delete: the floor
        // must cover the epoch actually deleted.
        if *floor < Some(current.value.epoch) {
            raise_epoch_floor(store, group, current.value.epoch).await?;
            *floor = Some(current.value.epoch);
        }
        let version = match end_session_hold(store, group, mode, &current).await {
            Ok(Some(version)) => version,
            Ok(None) => current.version.clone(),
            // The record or the holder's session moved meanwhile: look again.
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {
                match store.get_lease(group, current.key).await? {
                    Some(now) => {
                        current = now;
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            Err(error) => return Err(error.into()),
        };
        match store.delete_lease(group, current.key, &version).await {
            Ok(()) => return Ok(true),
            Err(StoreError::NotFound { .. }) => return Ok(false),
            Err(StoreError::Conflict { .. }) => match store.get_lease(group, current.key).await? {
                Some(now) => current = now,
                None => return Ok(false),
            },
            Err(error) => return Err(error.into()),
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Lease(current.key),
    })
}

/// With session leases, takes a held record offline in one transaction with its holder's
/// session, so the holder's next renewal fails. Returns the record's new version, or `None`
/// when there is nothing to end (not held, or the holder has no session any more: its
/// renewals fail already). A conflict means the record or the session moved meanwhile.
async fn end_session_hold(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: LeaseMode,
    lease: &StoredLease,
) -> Result<Option<Version>, StoreError> {
    // With session leases, a held record whose holder still renews a session is served as
    // long as that session renews, whatever happens to the lease record alone.
    let Some(holder) = lease
        .value
        .owner
        .as_ref()
        .filter(|_| kept_by_session(mode, lease))
    else {
        return Ok(None);
    };
    let Some(session) = store.get_member(group, holder).await? else {
        return Ok(None);
    };
    let mut record = lease.value.clone();
    record.state = LeaseState::Offline;
    record.owner = None;
    record.session = None;
    record.note = Some("destroyed".into());
    record.written_at_unix_ms = Some(unix_ms_now());
    let write = LeaseWrite {
        partition: lease.key,
        record,
        mode: PutMode::Update(lease.version.clone()),
    };
    let versions = store.transact(group, &with_session(write, session)).await?;
    Ok(versions.into_iter().next())
}
