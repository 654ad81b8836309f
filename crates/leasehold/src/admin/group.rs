//! Operator actions on the group record: creating it, the epoch floor that outlives deleted
//! records, and changing the timings every node must fit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::StoreError;
use crate::group::{GroupRecord, GroupTimings, StoredGroup};
use crate::record::RecordKey;
use crate::store::{LeaseStore, PutMode};
use crate::types::{Epoch, GroupName};

use super::{AdminError, MAX_ATTEMPTS};

/// The group record of `group`, created (with no timings) if there is none.
pub async fn ensure_group(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<StoredGroup, AdminError> {
    for _ in 0..MAX_ATTEMPTS {
        if let Some(stored) = store.get_group(group).await? {
            stored.value.check_format(group)?;
            return Ok(stored);
        }
        match store
            .put_group(group, &GroupRecord::default(), PutMode::Create)
            .await
        {
            Ok(version) => {
                return Ok(StoredGroup {
                    key: group.clone(),
                    value: GroupRecord::default(),
                    version,
                })
            }
            Err(StoreError::AlreadyExists { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Group,
    })
}

/// Refuses to write into a group whose record format this build does not know: it would
/// rewrite records from structs that lack the newer fields, and strip them.
pub async fn check_format(store: &dyn LeaseStore, group: &GroupName) -> Result<(), AdminError> {
    group_mode(store, group).await.map(|_| ())
}

/// Checks the group's record format as [`check_format`] does, and returns the group's lease
/// mode (the default for a group without a record).
pub async fn group_mode(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<crate::LeaseMode, AdminError> {
    match store.get_group(group).await? {
        Some(stored) => {
            stored.value.check_format(group)?;
            Ok(stored.value.lease_mode)
        }
        None => Ok(crate::LeaseMode::default()),
    }
}

/// Applies `change` to the group record (created if missing) with compare-and-set, retrying
/// when another writer got in first. `change` returns `false` to leave the record as it is.
async fn update_group(
    store: &dyn LeaseStore,
    group: &GroupName,
    change: impl Fn(&mut GroupRecord) -> Result<bool, AdminError>,
) -> Result<GroupRecord, AdminError> {
    for _ in 0..MAX_ATTEMPTS {
        let current = ensure_group(store, group).await?;
        let mut record = current.value;
        if !change(&mut record)? {
            return Ok(record);
        }
        match store
            .put_group(group, &record, PutMode::Update(current.version))
            .await
        {
            Ok(_) => return Ok(record),
            Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Group,
    })
}

/// The group record, with `timings` adopted if it sets none yet: what a node joining a group
/// built out before its first node reads. Returns whether it adopted them.
pub(crate) async fn adopt_timings(
    store: &dyn LeaseStore,
    group: &GroupName,
    timings: GroupTimings,
) -> Result<(GroupRecord, bool), AdminError> {
    // The change of the attempt that was written decides; earlier attempts lost a race.
    let adopted = AtomicBool::new(false);
    let record = update_group(store, group, |record| {
        let adopt = record.timings.is_none();
        if adopt {
            record.timings = Some(timings);
        }
        adopted.store(adopt, Ordering::Relaxed);
        Ok(adopt)
    })
    .await?;
    Ok((record, adopted.load(Ordering::Relaxed)))
}

/// Raises the group's epoch floor to at least `epoch`, so that lease records created again
/// later start there. Never lowers it.
pub async fn raise_epoch_floor(
    store: &dyn LeaseStore,
    group: &GroupName,
    epoch: Epoch,
) -> Result<GroupRecord, AdminError> {
    update_group(store, group, |record| {
        let raise = record.epoch_floor < epoch;
        record.epoch_floor = record.epoch_floor.max(epoch);
        Ok(raise)
    })
    .await
}

/// Sets how the group renews its leases ([`crate::LeaseMode`]). Refused while the group has
/// member records: every node reads the mode when it joins and keeps it, and a node renewing
/// one way beside nodes taking the other way would be unsafe. Stop the nodes (each removes
/// its record; a crashed one's is forgotten after `forget_members_after`), set the mode,
/// start them again. Leases held under the old mode are waited out by the new one: a taker
/// waits `acquire_after` from when it first sees the record and its holder's session.
pub async fn set_lease_mode(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: crate::LeaseMode,
) -> Result<GroupRecord, AdminError> {
    let members = store.list_members(group).await?;
    let nodes: Vec<_> = members
        .records
        .iter()
        .map(|m| m.key.clone())
        .filter(|node| !node.is_operator())
        .collect();
    let current = ensure_group(store, group).await?;
    if current.value.lease_mode != mode && !nodes.is_empty() {
        return Err(AdminError::ModeChangeWithMembers {
            group: group.clone(),
            nodes,
        });
    }
    update_group(store, group, |record| {
        let change = record.lease_mode != mode;
        record.lease_mode = mode;
        Ok(change)
    })
    .await
}

/// Whether [`destroy`] may run while the group has members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destroy {
    /// Refuse while any member record is present: a node may still be serving.
    IfNoMembers,
    /// Delete whatever is there. Running nodes lose their leases at their next renewal.
    Force,
}

/// Deletes every lease and member record of `group`, returning how many were removed.
///
/// The group record stays, with its epoch floor raised to the highest epoch deleted, so that
/// a group built out again under the same name issues fencing tokens above every one it
/// issued before: a resource that remembers the highest token it accepted keeps accepting
/// the new owners, and keeps refusing the old ones.
pub async fn destroy(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: Destroy,
) -> Result<usize, AdminError> {
    let members = store.list_members(group).await?;
    let nodes: Vec<_> = members
        .records
        .iter()
        .map(|m| m.key.clone())
        .filter(|node| !node.is_operator())
        .collect();
    if mode == Destroy::IfNoMembers && !nodes.is_empty() {
        return Err(AdminError::MembersPresent {
            group: group.clone(),
            nodes,
        });
    }
    // Member records go first. With session leases a running node's session is what keeps
    // its leases: deleting the lease records alone would leave it renewing and serving them
    // with nothing in the store to say so. Its session gone, its next renewal fails and it
    // drops everything, as a node renewing per partition does when its lease records go.
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
    let leases = store.list_leases(group).await?;
    let mut floor = leases.records.iter().map(|r| r.value.epoch).max();
    if let Some(highest) = floor {
        raise_epoch_floor(store, group, highest).await?;
    }
    for lease in leases.records {
        let mut current = lease;
        // A node may take or renew the record between the listing and the delete: the floor
        // must cover the epoch actually deleted.
        for attempt in 0.. {
            if floor < Some(current.value.epoch) {
                raise_epoch_floor(store, group, current.value.epoch).await?;
                floor = Some(current.value.epoch);
            }
            match store
                .delete_lease(group, current.key, &current.version)
                .await
            {
                Ok(()) => {
                    removed += 1;
                    break;
                }
                Err(StoreError::NotFound { .. }) => break,
                Err(StoreError::Conflict { .. }) if attempt + 1 < MAX_ATTEMPTS => {
                    match store.get_lease(group, current.key).await? {
                        Some(now) => current = now,
                        None => break,
                    }
                }
                Err(StoreError::Conflict { .. }) => {
                    return Err(AdminError::Contended {
                        key: RecordKey::Lease(current.key),
                    })
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(removed)
}

/// Changes the timings every node of `group` must fit, staying safe while nodes run.
///
/// Every running node fits the group's current timings (it checked at start). The change is
/// made in two steps: the new timings are first written as *pending*, so that from then on a
/// joining node must fit both; then every member record is read, and the change is made only
/// if every member's published timings fit the new ones — otherwise the pending timings are
/// withdrawn and the error names the members in the way. A node writes its member record
/// before its last check of the group record, and this reads the members after writing the
/// pending timings, so of any node joining meanwhile, either the node sees the pending
/// timings or this sees the node.
///
/// So a change of timings is a rolling restart in two phases: to shorten them from
/// (30 s, 45 s) to (10 s, 15 s), restart the nodes one by one with `lease_validity = 10 s`
/// and `acquire_after = 45 s` (which fit both), change the group's timings, then restart them
/// with the new `acquire_after`. `force` changes them even when members publish no timings
/// (nodes of an older version) or do not fit: only for members known to be stopped.
pub async fn set_timings(
    store: &dyn LeaseStore,
    group: &GroupName,
    timings: GroupTimings,
    force: bool,
) -> Result<GroupRecord, AdminError> {
    if !timings.is_safe() {
        return Err(AdminError::UnsafeTimings(timings));
    }
    update_group(store, group, |record| {
        record.pending_timings = Some(timings);
        Ok(true)
    })
    .await?;
    let members = store.list_members(group).await;
    let verdict = members.map_err(AdminError::from).and_then(|members| {
        let mut misfits = Vec::new();
        let mut unknown = Vec::new();
        for member in members.records.iter().filter(|m| !m.key.is_operator()) {
            match member.value.fits(&timings) {
                Some(true) => {}
                Some(false) => misfits.push(member.key.clone()),
                None => unknown.push(member.key.clone()),
            }
        }
        if force || (misfits.is_empty() && unknown.is_empty()) {
            Ok(())
        } else {
            Err(AdminError::TimingsRefused {
                group: group.clone(),
                timings,
                misfits,
                unknown,
            })
        }
    });
    let outcome = verdict.is_ok();
    let written = update_group(store, group, |record| {
        if record.pending_timings != Some(timings) {
            // Another change took over meanwhile; it decides.
            return Err(AdminError::Contended {
                key: RecordKey::Group,
            });
        }
        record.pending_timings = None;
        if outcome {
            record.timings = Some(timings);
        }
        Ok(true)
    })
    .await?;
    verdict.map(|()| written)
}
