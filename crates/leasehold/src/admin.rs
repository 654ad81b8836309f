//! Operator actions on a group's table: initial build-out, manual controls and the stale
//! check. The `leasehold` command-line tool is a thin shell over these.
//!
//! Every change is a compare-and-set on the current record, retried a bounded number of times
//! if a participant writes in between, so an operator never overwrites a renewal blindly.
//!
//! These functions call the store they are given as it is: wrap it in a
//! [`TimeoutStore`](crate::TimeoutStore) (as the command-line tool does) so that a hung store
//! fails an operation instead of hanging it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::StoreError;
use crate::record::{unix_ms_now, LeaseRecord, LeaseState, MemberRecord, RecordKey, StoredLease};
use crate::store::{LeaseStore, Listing, PutMode};
use crate::types::{GroupName, NodeId, PartitionId, Version};

/// Attempts for one read-modify-write against participants renewing the same record.
const MAX_ATTEMPTS: usize = 16;

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
}

/// Creates released lease records `0..partitions` in `group` (initial build-out). Running it
/// again with the same count creates whatever is missing; a group that already has records
/// beyond `partitions` is refused rather than silently shrunk.
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
    };
    for partition in (0..partitions).filter(|p| !present.contains(&PartitionId(*p))) {
        let record = LeaseRecord {
            written_at_unix_ms: Some(unix_ms_now()),
            ..LeaseRecord::released()
        };
        match store
            .put_lease(group, PartitionId(partition), &record, PutMode::Create)
            .await
        {
            Ok(_) => outcome.created += 1,
            Err(StoreError::AlreadyExists { .. }) => outcome.existing += 1,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(outcome)
}

/// Deletes every lease and member record of `group`. Returns how many records were removed.
pub async fn destroy(store: &dyn LeaseStore, group: &GroupName) -> Result<usize, AdminError> {
    let mut removed = 0;
    for lease in store.list_leases(group).await?.records {
        match store.delete_lease(group, lease.key, &lease.version).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => removed += 1,
            Err(error) => return Err(error.into()),
        }
    }
    for member in store.list_members(group).await?.records {
        match store
            .delete_member(group, &member.key, &member.version)
            .await
        {
            Ok(()) | Err(StoreError::NotFound { .. }) => removed += 1,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(removed)
}

/// Applies `change` to the lease record of `partition` with compare-and-set, re-reading and
/// retrying if a participant renewed it in between. Returns the record as written.
pub async fn update_lease(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
    change: impl Fn(&mut LeaseRecord),
) -> Result<LeaseRecord, AdminError> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(current) = store.get_lease(group, partition).await? else {
            return Err(AdminError::NoSuchPartition {
                group: group.clone(),
                partition,
            });
        };
        let mut record = current.value;
        change(&mut record);
        record.written_at_unix_ms = Some(unix_ms_now());
        match store
            .put_lease(group, partition, &record, PutMode::Update(current.version))
            .await
        {
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
/// release, so this never lets two nodes serve at once.
pub async fn kick(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
) -> Result<LeaseRecord, AdminError> {
    update_lease(store, group, partition, |r| r.note = Some("kicked".into())).await
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
fn present_partitions(listing: &Listing<StoredLease>) -> BTreeSet<PartitionId> {
    let keys = listing.records.iter().map(|record| Some(record.key));
    let corrupt = listing.corrupt.iter().map(|e| e.key()?.partition());
    keys.chain(corrupt).flatten().collect()
}

/// What one [`stale_check`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaleReport {
    /// Partitions held in both samples with the same version: their holder did not renew.
    pub unrenewed: Vec<(PartitionId, Option<NodeId>)>,
    /// Partitions held by nobody (released, or held with no owner) in the second sample.
    pub unowned: Vec<PartitionId>,
    /// Partitions below `expected` with no record at all: the first
    /// [`StaleReport::MISSING_LISTED`] of them.
    pub missing: Vec<PartitionId>,
    /// How many partitions below `expected` have no record at all, listed or not: a stray
    /// record for a huge partition number makes the inferred count huge.
    pub missing_count: u64,
    /// Partitions taken out of service by an operator.
    pub offline: Vec<PartitionId>,
    /// Records that could not be read.
    pub corrupt: Vec<String>,
    /// Members whose record changed between the two samples.
    pub live_nodes: Vec<NodeId>,
    /// Members marked draining, live or not: not a problem, but a manual control that is
    /// easy to forget after an incident.
    pub draining: Vec<NodeId>,
    /// The member count below which the report counts as a problem.
    pub min_nodes: usize,
}

impl StaleReport {
    /// The most missing partitions listed in [`StaleReport::missing`].
    pub const MISSING_LISTED: usize = 1000;

    /// Whether anything needs an operator's attention.
    pub fn has_problems(&self) -> bool {
        !self.unrenewed.is_empty()
            || !self.unowned.is_empty()
            || self.missing_count > 0
            || !self.corrupt.is_empty()
            || self.live_nodes.len() < self.min_nodes
    }
}

/// Samples the table twice, `watch` apart, and reports unrenewed leases, unowned and missing
/// partitions and the live node count, as a monitoring probe would. `watch` should exceed the
/// heartbeat so that every live holder renews in between. `expected` is the partition count
/// (defaults to one past the highest partition seen).
pub async fn stale_check(
    store: &dyn LeaseStore,
    group: &GroupName,
    watch: Duration,
    min_nodes: usize,
    expected: Option<u32>,
) -> Result<StaleReport, AdminError> {
    let first_leases = store.list_leases(group).await?;
    let first_members = store.list_members(group).await?;
    if first_leases.is_empty() {
        return Err(AdminError::NoSuchGroup(group.clone()));
    }
    tokio::time::sleep(watch).await;
    let second_leases = store.list_leases(group).await?;
    let second_members = store.list_members(group).await?;

    let before: BTreeMap<PartitionId, &StoredLease> =
        first_leases.records.iter().map(|r| (r.key, r)).collect();
    let versions_before: BTreeMap<&NodeId, &Version> = first_members
        .records
        .iter()
        .map(|m| (&m.key, &m.version))
        .collect();
    let mut report = StaleReport {
        min_nodes,
        corrupt: second_leases
            .corrupt
            .iter()
            .map(|e| e.to_string())
            .collect(),
        ..StaleReport::default()
    };
    let expected = expected.unwrap_or_else(|| second_leases.partition_count());
    for lease in &second_leases.records {
        let record = &lease.value;
        match record.state {
            LeaseState::Offline => report.offline.push(lease.key),
            LeaseState::Released => report.unowned.push(lease.key),
            LeaseState::Held if record.owner.is_none() => report.unowned.push(lease.key),
            LeaseState::Held => {
                if before
                    .get(&lease.key)
                    .is_some_and(|b| b.version == lease.version)
                {
                    report.unrenewed.push((lease.key, record.owner.clone()));
                }
            }
        }
    }
    let present = present_partitions(&second_leases);
    let below = |p: &&PartitionId| p.0 < expected;
    report.missing_count = u64::from(expected) - present.iter().filter(below).count() as u64;
    // Walks the gaps between present partitions, so the work follows what is there and what
    // is listed, never the partition numbers themselves.
    let mut next = 0u32;
    for bound in present.iter().filter(below).map(|p| p.0).chain([expected]) {
        let room = StaleReport::MISSING_LISTED - report.missing.len();
        report
            .missing
            .extend((next..bound).take(room).map(PartitionId));
        next = bound.saturating_add(1);
    }
    // The operator's record (see `nudge`) is not a node.
    let members = || {
        second_members
            .records
            .iter()
            .filter(|m| !m.key.is_operator())
    };
    report.live_nodes = members()
        .filter(|m| versions_before.get(&m.key) != Some(&&m.version))
        .map(|m| m.key.clone())
        .collect();
    report.draining = members()
        .filter(|m| m.value.draining)
        .map(|m| m.key.clone())
        .collect();
    Ok(report)
}

#[cfg(test)]
mod tests;
