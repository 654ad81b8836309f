//! Operator actions on the group record: creating it, the epoch floor that outlives deleted
//! records, changing the timings every node must fit, and the restart window.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::StoreError;
use crate::group::{GroupMismatch, GroupRecord, GroupTimings, StoredGroup, FORMAT_VERSION};
use crate::record::StoredLease;
use crate::store::{LeaseStore, Listing, PutMode};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId};

use super::{AdminError, MAX_ATTEMPTS};

/// The group record of `group`, created (with no timings) if there is none.
///
/// A group record is created only for a group with no lease and no member records: where
/// records exist, the record was deleted behind leasehold's back, and a default one would
/// claim the wrong lease mode and an epoch floor of zero. That is refused with
/// [`GroupMismatch::MissingRecord`]; [`set_lease_mode`] creates it again.
pub async fn ensure_group(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<StoredGroup, AdminError> {
    ensure_group_as(store, group, &GroupRecord::default()).await
}

/// [`ensure_group`], creating a missing record as `template` (with this build's format):
/// a group built out with its lease mode and timings chosen has them from its first write,
/// so no node joins it under others.
pub async fn ensure_group_as(
    store: &dyn LeaseStore,
    group: &GroupName,
    template: &GroupRecord,
) -> Result<StoredGroup, AdminError> {
    get_or_create(store, group, || async {
        let (leases, nodes) = orphans(store, group).await?;
        if !leases.is_empty() || !nodes.is_empty() {
            // Every writer creates the group record before any other record of the group:
            // records listed after the record was read missing may be those of another
            // process building the group out at the same time, whose record now exists.
            if store.get_group(group).await?.is_some() {
                return Ok(None);
            }
            return Err(GroupMismatch::MissingRecord {
                group: group.clone(),
                leases: leases.len(),
                members: nodes.len(),
            }
            .into());
        }
        let record = GroupRecord {
            format: FORMAT_VERSION,
            ..template.clone()
        };
        create_group(store, group, record).await
    })
    .await
}

/// The group record, checked for its format, or, when there is none, what `create` makes
/// of it: tried again when another writer created one first (`create` answers `None`).
async fn get_or_create<F, Fut>(
    store: &dyn LeaseStore,
    group: &GroupName,
    create: F,
) -> Result<StoredGroup, AdminError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<StoredGroup>, AdminError>>,
{
    for _ in 0..MAX_ATTEMPTS {
        if let Some(stored) = store.get_group(group).await? {
            stored.value.check_format(group)?;
            return Ok(stored);
        }
        if let Some(created) = create().await? {
            return Ok(created);
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Group,
    })
}

/// The lease records of a group and the nodes that are members of it: what a missing group
/// record leaves without a mode and a floor.
async fn orphans(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<(Listing<StoredLease>, Vec<NodeId>), AdminError> {
    let leases = store.list_leases(group).await?;
    Ok((leases, member_nodes(store, group).await?))
}

/// Creates the group record; `None` when another writer created one first.
async fn create_group(
    store: &dyn LeaseStore,
    group: &GroupName,
    record: GroupRecord,
) -> Result<Option<StoredGroup>, AdminError> {
    match store.put_group(group, &record, PutMode::Create).await {
        Ok(version) => Ok(Some(StoredGroup {
            key: group.clone(),
            value: record,
            version,
        })),
        Err(StoreError::AlreadyExists { .. }) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Creates the group record of a group whose record is missing although it has lease
/// records, with an epoch floor at the highest epoch listed, so that fencing tokens keep
/// rising. `None` when one was created meanwhile. With a `mode` (an operator choosing it),
/// refused while nodes are members: they run under a mode this cannot know. Without one (a
/// destroy, which deletes every record), made whatever is there.
async fn rebuild_group(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: Option<crate::LeaseMode>,
) -> Result<Option<StoredGroup>, AdminError> {
    let (leases, nodes) = orphans(store, group).await?;
    if let Some(mode) = mode {
        if !nodes.is_empty() {
            return Err(AdminError::ModeChangeWithMembers {
                group: group.clone(),
                nodes,
            });
        }
        if !leases.is_empty() {
            tracing::warn!(%group, %mode, leases = leases.len(), "the group record was missing; creating it again");
        }
    }
    let record = GroupRecord {
        lease_mode: mode.unwrap_or_default(),
        epoch_floor: leases
            .records
            .iter()
            .map(|r| r.value.epoch)
            .max()
            .unwrap_or_default(),
        ..GroupRecord::default()
    };
    create_group(store, group, record).await
}

/// The nodes that are members of `group`, the operator's record aside. A member record that
/// cannot be decoded counts: its node may well be running.
pub(super) async fn member_nodes(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<Vec<NodeId>, AdminError> {
    let members = store.list_members(group).await?;
    let unreadable = members
        .corrupt
        .iter()
        .filter_map(|error| match error.key() {
            Some(RecordKey::Member(node)) => Some(node.clone()),
            _ => None,
        });
    Ok(members
        .records
        .into_iter()
        .map(|m| m.key)
        .chain(unreadable)
        .filter(|node| !node.is_operator())
        .collect())
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
pub(super) async fn update_group(
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

/// Sets how long the others leave a node's partitions reserved for it while it restarts in
/// place ([`GroupRecord::restart_window`]); `None` goes back to the default, the group's
/// `acquire_after`. Refused beyond [`crate::group::MAX_RESTART_WINDOW_FACTOR`] times the
/// group's `acquire_after`. Nodes read it when they join (and when they check the group
/// record again): running nodes keep the window they read.
pub async fn set_restart_window(
    store: &dyn LeaseStore,
    group: &GroupName,
    window: Option<std::time::Duration>,
) -> Result<GroupRecord, AdminError> {
    update_group(store, group, |record| {
        if let (Some(window), Some(timings)) = (window, record.timings) {
            let most = timings.acquire_after * crate::group::MAX_RESTART_WINDOW_FACTOR;
            if window > most {
                return Err(AdminError::RestartWindowTooLong {
                    group: group.clone(),
                    window,
                    most,
                });
            }
        }
        let changed = record.restart_window != window;
        record.restart_window = window;
        Ok(changed)
    })
    .await
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
///
/// Made in two steps, as [`set_timings`] is: the new mode is first written as *pending*,
/// which no node joins under; then the members are listed, and the mode is switched only if
/// there are none, and otherwise the pending mode is withdrawn. A node writes its member
/// record before its last check of the group record, so of a node joining meanwhile, either
/// it sees the pending mode and stops, or this sees it and refuses.
///
/// Asking for the mode the group has finishes nothing and withdraws a change left pending
/// (by a command that stopped half way). A group whose record is missing although it has
/// lease records gets it back, with this mode and an epoch floor above every epoch listed.
pub async fn set_lease_mode(
    store: &dyn LeaseStore,
    group: &GroupName,
    mode: crate::LeaseMode,
) -> Result<GroupRecord, AdminError> {
    let current = match store.get_group(group).await? {
        Some(current) => current,
        None => match rebuild_group(store, group, Some(mode)).await? {
            Some(created) => return Ok(created.value),
            None => ensure_group(store, group).await?,
        },
    };
    current.value.check_format(group)?;
    if current.value.lease_mode == mode {
        return update_group(store, group, |record| {
            Ok(record.pending_lease_mode.take().is_some())
        })
        .await;
    }
    update_group(store, group, |record| {
        record.pending_lease_mode = Some(mode);
        // Nodes of builds that know no pending mode would join under the old one.
        record.format = record.format.max(FORMAT_VERSION);
        Ok(true)
    })
    .await?;
    let verdict = member_nodes(store, group).await.and_then(|nodes| {
        if nodes.is_empty() {
            Ok(())
        } else {
            Err(AdminError::ModeChangeWithMembers {
                group: group.clone(),
                nodes,
            })
        }
    });
    let switch = verdict.is_ok();
    let written = update_group(store, group, |record| {
        if record.pending_lease_mode != Some(mode) {
            // Another change took over meanwhile; it decides.
            return Err(AdminError::Contended {
                key: RecordKey::Group,
            });
        }
        record.pending_lease_mode = None;
        if switch {
            record.lease_mode = mode;
        }
        Ok(true)
    })
    .await?;
    verdict.map(|()| written)
}

/// The group record, created again if it is missing whatever records the group has, with
/// its floor at the highest epoch listed: for [`super::destroy`], which deletes every record
/// and needs the floor and the generation to outlive them.
pub(super) async fn ensure_group_for_destroy(
    store: &dyn LeaseStore,
    group: &GroupName,
) -> Result<StoredGroup, AdminError> {
    get_or_create(store, group, || rebuild_group(store, group, None)).await
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
