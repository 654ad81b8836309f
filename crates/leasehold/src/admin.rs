//! Operator actions on a group's table: initial build-out, manual controls and the stale
//! check. The `leasehold` command-line tool is a thin shell over these.
//!
//! Every change is a compare-and-set on the current record, retried a bounded number of times
//! if a participant writes in between, so an operator never overwrites a renewal blindly.
//!
//! These functions call the store they are given as it is: wrap it in a
//! [`TimeoutStore`](crate::TimeoutStore) (as the command-line tool does) so that a hung store
//! fails an operation instead of hanging it.

use std::collections::BTreeSet;

use crate::error::StoreError;
use crate::group::LeaseMode;
use crate::group::{GroupMismatch, GroupTimings};
use crate::record::{
    unix_ms_now, LeaseRecord, LeaseState, MemberRecord, StoredLease, StoredMember,
};
use crate::store::{LeaseStore, LeaseWrite, Listing, PutMode, TxnWrite};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId, PartitionId};

/// Attempts for one read-modify-write against participants renewing the same record.
const MAX_ATTEMPTS: usize = 16;

/// Records created per batch by [`init`]: within every store's batch limits (Azure's entity
/// group transactions take 100).
const INIT_BATCH: usize = 100;

/// Why an operator action could not be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The store call failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The group has no lease records.
    #[error("group {0} does not exist (no lease records; create it with init)")]
    NoSuchGroup(GroupName),
    /// The partition has no lease record.
    #[error("partition {partition} does not exist in group {group}")]
    NoSuchPartition {
        /// The group.
        group: GroupName,
        /// The missing partition.
        partition: PartitionId,
    },
    /// The node has no member record.
    #[error("node {node} is not a member of group {group}")]
    NoSuchNode {
        /// The group.
        group: GroupName,
        /// The missing node.
        node: NodeId,
    },
    /// `init` found the group with a different partition count.
    #[error(
        "group {group} already has {existing} partitions; refusing to change it to {requested}"
    )]
    PartitionCountMismatch {
        /// The group.
        group: GroupName,
        /// The partitions already there.
        existing: u32,
        /// The count asked for.
        requested: u32,
    },
    /// The group's record refuses the change (an unknown format, say).
    #[error(transparent)]
    Group(#[from] GroupMismatch),
    /// `set_restart_window` was asked for a window longer than the group allows.
    #[error(
        "group {group}: a restart window of {window:?} is longer than the group allows \
         ({most:?}: {factor} times its acquire_after)",
        factor = crate::group::MAX_RESTART_WINDOW_FACTOR
    )]
    RestartWindowTooLong {
        /// The group.
        group: GroupName,
        /// The window asked for.
        window: std::time::Duration,
        /// The longest the group allows.
        most: std::time::Duration,
    },
    /// `destroy` found member records: nodes that may still be running.
    #[error(
        "group {group} has members ({}): stop them first (a node removes its record when it \
         stops; a crashed one is forgotten after forget_members_after), or force it",
        names(nodes)
    )]
    MembersPresent {
        /// The group.
        group: GroupName,
        /// The members found.
        nodes: Vec<NodeId>,
    },
    /// `set_lease_mode` found member records: nodes renewing one way may still be running.
    #[error(
        "group {group} has members ({}): stop them all before changing the lease mode (a node \
         removes its record when it stops; a crashed one is forgotten after \
         forget_members_after), then start them again",
        names(nodes)
    )]
    ModeChangeWithMembers {
        /// The group.
        group: GroupName,
        /// The members found.
        nodes: Vec<NodeId>,
    },
    /// The timings asked for break the safety rule.
    #[error(
        "unsafe timings: acquire_after × (1 − ρ) must exceed lease_validity × (1 + ρ), but {0}"
    )]
    UnsafeTimings(GroupTimings),
    /// Members' timings do not fit the timings asked for, or are not known.
    #[error(
        "group {group} keeps its timings: members {} do not fit {timings}; restart them with \
         timings inside it first{}",
        names(misfits),
        if unknown.is_empty() { String::new() } else {
            format!(", and members {} publish no timings (an older version; force the change once you know theirs fit)", names(unknown))
        }
    )]
    TimingsRefused {
        /// The group.
        group: GroupName,
        /// The timings asked for.
        timings: GroupTimings,
        /// Members whose published timings do not fit.
        misfits: Vec<NodeId>,
        /// Members that publish no timings.
        unknown: Vec<NodeId>,
    },
    /// Participants kept writing the record; the change was not made.
    #[error("{key} kept changing; gave up after {MAX_ATTEMPTS} attempts")]
    Contended {
        /// The record.
        key: RecordKey,
    },
}

/// What [`init`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOutcome {
    /// Records created now.
    pub created: u32,
    /// Records that were already there.
    pub existing: u32,
    /// Whether records were created held by nobody, in a group used before: they are taken
    /// after `acquire_after`, not at once.
    pub held_by_nobody: bool,
}

/// Creates released lease records `0..partitions` in `group` (initial build-out), and the
/// group record if there is none ([`crate::GroupRecord`], with no timings: the first node to
/// join sets them, unless [`set_timings`] does first). Running it again with the same count
/// creates whatever is missing, at an epoch no lower than any the group issued (see
/// [`destroy`]); a group that already has records beyond `partitions` is refused rather
/// than silently shrunk.
///
/// In a group used before — destroyed, or with records at a non-zero epoch — records are
/// created *held by nobody* rather than released, as [`online`] puts a partition back: a
/// node of the earlier table may still be serving them, and takers wait `acquire_after`
/// first.
pub async fn init(
    store: &dyn LeaseStore,
    group: &GroupName,
    partitions: u32,
) -> Result<InitOutcome, AdminError> {
    let listing = store.list_leases(group).await?;
    init_listed(store, group, partitions, &listing).await
}

/// [`init`] on a table the caller has just listed, so that a caller that looks at the table
/// before building it out reads it once. Only the partitions missing from `listing` are
/// written; one created meanwhile by another process counts as existing.
pub async fn init_listed(
    store: &dyn LeaseStore,
    group: &GroupName,
    partitions: u32,
    listing: &Listing<StoredLease>,
) -> Result<InitOutcome, AdminError> {
    let existing = listing.partition_count();
    if existing > partitions {
        return Err(AdminError::PartitionCountMismatch {
            group: group.clone(),
            existing,
            requested: partitions,
        });
    }
    let present = present_partitions(listing);
    let mut outcome = InitOutcome {
        created: 0,
        existing: present.len() as u32,
        held_by_nobody: false,
    };
    let group_record = ensure_group(store, group).await?;
    if present.len() as u64 >= u64::from(partitions) {
        return Ok(outcome);
    }
    // Records created again start at the group's floor and, in a group in use, at its
    // highest epoch: the record that was there may have been deleted behind leasehold's
    // back, and the next acquisition must issue a token above any it issued.
    let listed_highest = listing.records.iter().map(|r| r.value.epoch).max();
    let start = group_record
        .value
        .epoch_floor
        .max(listed_highest.unwrap_or_default());
    // In a group used before (destroyed, or with records deleted behind leasehold's back), a
    // node of the earlier table may still believe it holds what is created here: records
    // are held by nobody, so takers wait `acquire_after` on them — the lock-delay every
    // other way of putting a partition in service has — and only a new table starts free.
    let used = group_record.value.generation > 0
        || group_record.value.epoch_floor > Epoch(0)
        || listing.in_use();
    outcome.held_by_nobody = used;
    let mut record = LeaseRecord {
        epoch: start,
        written_at_unix_ms: Some(unix_ms_now()),
        ..LeaseRecord::released()
    };
    if used {
        record.state = LeaseState::Held;
        record.note = Some("created again; taken after acquire_after".into());
    }
    let missing: Vec<LeaseWrite> = (0..partitions)
        .filter(|p| !present.contains(&PartitionId(*p)))
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: record.clone(),
            mode: PutMode::Create,
        })
        .collect();
    // In batches: one round trip (and, on stores with transactions, one commit) per batch
    // rather than per partition, which is what makes a 65,536-partition group quick to build.
    for batch in missing.chunks(INIT_BATCH) {
        for result in store.put_leases(group, batch).await? {
            match result {
                Ok(_) => outcome.created += 1,
                Err(StoreError::AlreadyExists { .. }) => outcome.existing += 1,
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(outcome)
}

/// A write of a lease record together with its holder's session, written back as it was
/// read: one transaction, which a change of either in between fails. With session leases
/// this is how a lease changes behind its holder: its next renewal fails, and it re-reads
/// what it holds, as a renewal of the lease itself would have failed.
fn with_session(write: LeaseWrite, session: StoredMember) -> [TxnWrite; 2] {
    [
        TxnWrite::Lease(write),
        TxnWrite::Member {
            node: session.key,
            record: session.value,
            mode: PutMode::Update(session.version),
        },
    ]
}

/// Names for a message: `a, b, c`, or `none`.
fn names(nodes: &[NodeId]) -> String {
    if nodes.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<&str> = nodes.iter().map(NodeId::as_str).collect();
    names.join(", ")
}

/// Applies `change` to the lease record of `partition` with compare-and-set, re-reading and
/// retrying if a participant renewed it in between. Returns the record as written.
pub async fn update_lease(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
    change: impl Fn(&mut LeaseRecord),
) -> Result<LeaseRecord, AdminError> {
    let mode = group_mode(store, group).await?;
    for _ in 0..MAX_ATTEMPTS {
        let Some(current) = store.get_lease(group, partition).await? else {
            return Err(AdminError::NoSuchPartition {
                group: group.clone(),
                partition,
            });
        };
        let mut record = current.value;
        let holder = record
            .owner
            .clone()
            .filter(|_| record.state == LeaseState::Held);
        // With session leases, the session of the holder this reading of the lease names:
        // the transaction below is conditional on both, so a take or a renewal in between
        // fails it and the change is made again on what is there then.
        let holder_session = match (mode, &holder) {
            (LeaseMode::Session, Some(holder)) => store.get_member(group, holder).await?,
            _ => None,
        };
        change(&mut record);
        record.written_at_unix_ms = Some(unix_ms_now());
        let write = LeaseWrite {
            partition,
            record: record.clone(),
            mode: PutMode::Update(current.version),
        };
        let result = match holder_session {
            // The holder's session changes with the lease, so its next renewal fails and it
            // re-reads what it holds, as a renewal of the lease itself would have failed.
            Some(session) => store
                .transact(group, &with_session(write, session))
                .await
                .map(|_| ()),
            _ => store
                .put_lease(group, partition, &write.record, write.mode)
                .await
                .map(|_| ()),
        };
        match result {
            Ok(_) => {
                // The change is made; a failed nudge only delays when settled nodes see it.
                if let Err(error) = nudge(store, group).await {
                    tracing::warn!(%group, %error, "could not nudge settled nodes; they see the change within relist_after");
                }
                return Ok(record);
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Lease(partition),
    })
}

/// Rewrites the operator's member record ([`NodeId::operator`]), which every node reads at
/// each scan: nodes that skip the lease table while settled read it again at their next scan,
/// on stores without change notices too. Every lease change made here calls it.
///
/// The record weighs nothing and is marked draining, so it is never given partitions, and it
/// is never counted as a node.
pub async fn nudge(store: &dyn LeaseStore, group: &GroupName) -> Result<(), AdminError> {
    let operator = NodeId::operator();
    let current = store.get_member(group, &operator).await?;
    let record = MemberRecord {
        weight: 0,
        draining: true,
        load: None,
        heartbeat: current.as_ref().map_or(1, |c| c.value.heartbeat + 1),
        written_at_unix_ms: Some(unix_ms_now()),
        ..MemberRecord::default()
    };
    let mode = match current {
        Some(current) => PutMode::Update(current.version),
        None => PutMode::Create,
    };
    match store.put_member(group, &operator, &record, mode).await {
        // Losing the race to another operator command's nudge is as good as winning it.
        Ok(_) | Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Bumps a partition: changes its record's version so the holder's next renewal fails and it
/// drops the partition; another node takes it after `acquire_after`. Only the holder can
/// release, so this never lets two nodes serve at once. A partition reserved for a node
/// restarting in place ([`LeaseRecord::is_reserved`]) is freed: any node takes it at once.
pub async fn kick(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| {
        // A partition reserved for a restarting node is freed for any node at once.
        if r.is_reserved() {
            r.owner = None;
            r.handed_to = None;
        }
        r.note = Some("kicked".into());
    })
    .await
}

/// Keeps `node` off `partition`. The record changes, so the current holder drops it and it
/// is re-acquired by a permitted node.
pub async fn prohibit(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
    node: &NodeId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| {
        if !r.is_prohibited(node) {
            r.prohibited.push(node.clone());
        }
        r.note = Some(format!("prohibited {node}"));
    })
    .await
}

/// Lets `node` take `partition` again.
pub async fn allow(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
    node: &NodeId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| {
        r.prohibited.retain(|p| p != node);
        r.note = Some(format!("allowed {node}"));
    })
    .await
}

/// Takes `partition` out of service: its holder drops it at its next renewal and no node
/// takes it until [`online`].
pub async fn offline(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| {
        r.state = LeaseState::Offline;
        r.owner = None;
        r.note = Some("offline".into());
    })
    .await
}

/// Puts an offline partition back in service. It is written as held by nobody, so it is
/// taken after `acquire_after` — long enough for a holder that was mid-renewal when it was
/// taken offline to have stopped.
pub async fn online(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| {
        if r.state == LeaseState::Offline {
            r.state = LeaseState::Held;
            r.owner = None;
        }
        r.note = Some("online".into());
    })
    .await
}

/// Sets or clears a node's drain flag. A draining node targets zero partitions and hands its
/// leases off cooperatively (one scan, no expiry): the graceful way to take a server out.
pub async fn set_draining(
    store: &dyn LeaseStore,
    group: &GroupName,
    node: &NodeId,
    draining: bool,
) -> Result<MemberRecord, AdminError> {
    check_format(store, group).await?;
    for _ in 0..MAX_ATTEMPTS {
        // The operator's record is not a node, and draining it would mean nothing.
        let current = if node.is_operator() {
            None
        } else {
            store.get_member(group, node).await?
        };
        let Some(current) = current else {
            return Err(AdminError::NoSuchNode {
                group: group.clone(),
                node: node.clone(),
            });
        };
        let mut record = current.value;
        record.draining = draining;
        match store
            .put_member(group, node, &record, PutMode::Update(current.version))
            .await
        {
            Ok(_) => return Ok(record),
            Err(StoreError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(AdminError::Contended {
        key: RecordKey::Member(node.clone()),
    })
}

/// The partitions that have a record in `listing`, readable or not.
pub(crate) fn present_partitions(listing: &Listing<StoredLease>) -> BTreeSet<PartitionId> {
    let keys = listing.records.iter().map(|record| Some(record.key));
    let corrupt = listing.corrupt.iter().map(|e| e.key()?.partition());
    keys.chain(corrupt).flatten().collect()
}

mod destroy;
mod group;
mod stale;

pub use destroy::{destroy, destroy_with_progress, Destroy};
pub(crate) use group::adopt_timings;
pub use group::{
    check_format, ensure_group, ensure_group_as, group_mode, raise_epoch_floor, set_lease_mode,
    set_restart_window, set_timings,
};
pub use stale::{stale_check, StaleReport};

#[cfg(test)]
mod tests;
