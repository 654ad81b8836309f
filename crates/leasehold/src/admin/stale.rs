//! The stale check: two samples of the table, and what a monitoring probe should alert on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::group::LeaseMode;
use crate::record::{unix_ms_now, LeaseState, StoredLease, StoredMember};
use crate::store::LeaseStore;
use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

use super::{present_partitions, AdminError};

/// What one [`stale_check`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaleReport {
    /// Partitions held in both samples with the same version: their holder did not renew
    /// (with session leases: and its holder's session shows no new renewal either).
    pub unrenewed: Vec<(PartitionId, Option<NodeId>)>,
    /// Partitions held by nobody (released, or held with no owner) in the second sample,
    /// but for those reserved for a node restarting in place within their window.
    pub unowned: Vec<PartitionId>,
    /// Partitions reserved for a node restarting in place, within the group's restart window
    /// by their write stamp and this machine's clock: unowned on purpose, until the node is
    /// back or the window ends. Not a problem.
    pub reserved: Vec<(PartitionId, NodeId)>,
    /// Partitions still reserved for a restarting node twice the restart window after it
    /// wrote them: the node did not come back in time, and no other node has taken them.
    pub reservations_run_out: Vec<(PartitionId, NodeId)>,
    /// Partitions below `expected` with no record at all: the first
    /// [`StaleReport::MISSING_LISTED`] of them.
    pub missing: Vec<PartitionId>,
    /// How many partitions below `expected` have no record at all, listed or not: a stray
    /// record for a huge partition number makes the inferred count huge.
    pub missing_count: u64,
    /// Partitions taken out of service by an operator.
    pub offline: Vec<PartitionId>,
    /// Lease and member records that could not be read, each as the store's error, which
    /// names the record (`lease 3`, `member server-1`) and what is wrong with it. An
    /// unreadable member record hides a node from every participant's balancing, and an
    /// unreadable lease record a partition from every taker: neither heals by itself.
    pub corrupt: Vec<String>,
    /// Partitions whose epoch went back: below the group's epoch floor, or lower in the
    /// second sample than in the first — a record deleted and created again outside
    /// leasehold. With the epoch found and the one it should be at least.
    pub epochs_back: Vec<(PartitionId, Epoch, Epoch)>,
    /// Members whose record changed between the two samples (with session leases: that
    /// renewed their session).
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

    /// Whether records are missing, unreadable or re-created with lower epochs: damage that
    /// leasehold does not repair by itself and an operator must look at (a critical alert).
    /// The other problems (unrenewed and unowned leases, too few nodes) heal as nodes take
    /// partitions over or come back, or call for capacity (a warning).
    pub fn is_critical(&self) -> bool {
        self.missing_count > 0 || !self.corrupt.is_empty() || !self.epochs_back.is_empty()
    }

    /// Whether anything needs an operator's attention.
    pub fn has_problems(&self) -> bool {
        !self.unrenewed.is_empty()
            || !self.unowned.is_empty()
            || !self.reservations_run_out.is_empty()
            || self.missing_count > 0
            || !self.corrupt.is_empty()
            || !self.epochs_back.is_empty()
            || self.live_nodes.len() < self.min_nodes
    }
}

/// Samples the table twice, `watch` apart, and reports unrenewed leases, unowned and missing
/// partitions, unreadable lease and member records, epochs gone back and the live node
/// count, as a monitoring probe would. `watch` should exceed the heartbeat so that every
/// live holder renews in between. `expected` is the partition count (defaults to one past
/// the highest partition seen).
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
    let (floor, mode, window) = match store.get_group(group).await? {
        Some(stored) => (
            stored.value.epoch_floor,
            stored.value.lease_mode,
            stored.value.known_restart_window(),
        ),
        None => (Epoch(0), LeaseMode::default(), None),
    };
    let session = mode == LeaseMode::Session;
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
    // With session leases a node renews its session, not its leases: a renewal writes a new
    // heartbeat count and stamp, which another node's take or an operator's drain (changing
    // only the version) does not.
    let renewal = |m: &StoredMember| {
        (
            m.value.heartbeat,
            m.value.written_at_unix_ms,
            m.value.session,
        )
    };
    let renewals_before: BTreeMap<&NodeId, (u64, Option<u64>, Option<u64>)> = first_members
        .records
        .iter()
        .map(|m| (&m.key, renewal(m)))
        .collect();
    let renewed: BTreeSet<&NodeId> = second_members
        .records
        .iter()
        .filter(|m| renewals_before.get(&m.key) != Some(&renewal(m)))
        .map(|m| &m.key)
        .collect();
    // A lease taken under a session that has ended (its node restarted under the same name)
    // is renewed by nothing, however often the new session renews.
    let sessions: BTreeMap<&NodeId, Option<u64>> = second_members
        .records
        .iter()
        .map(|m| (&m.key, m.value.session))
        .collect();
    let renews = |owner: &NodeId, lease_session: Option<u64>| {
        renewed.contains(owner)
            && !matches!(
                (lease_session, sessions.get(owner).copied().flatten()),
                (Some(lease), Some(member)) if lease != member
            )
    };
    let unreadable = second_leases.corrupt.iter().chain(&second_members.corrupt);
    let mut report = StaleReport {
        min_nodes,
        corrupt: unreadable.map(|e| e.to_string()).collect(),
        ..StaleReport::default()
    };
    let expected = expected.unwrap_or_else(|| second_leases.partition_count());
    for lease in &second_leases.records {
        let record = &lease.value;
        let before_epoch = before.get(&lease.key).map(|b| b.value.epoch);
        let at_least = before_epoch.unwrap_or_default().max(floor);
        if record.epoch < at_least {
            report.epochs_back.push((lease.key, record.epoch, at_least));
        }
        match record.state {
            LeaseState::Offline => report.offline.push(lease.key),
            LeaseState::Released => match record.reserved_for() {
                Some(node) => {
                    // Twice the window: the others count it from when they first see the
                    // record, and this machine's clock is not the writer's.
                    let run_out =
                        record
                            .written_at_unix_ms
                            .zip(window)
                            .is_some_and(|(at, window)| {
                                at.saturating_add(2 * window.as_millis() as u64) < unix_ms_now()
                            });
                    let list = match run_out {
                        true => &mut report.reservations_run_out,
                        false => &mut report.reserved,
                    };
                    list.push((lease.key, node.clone()));
                }
                None => report.unowned.push(lease.key),
            },
            LeaseState::Held if record.owner.is_none() => report.unowned.push(lease.key),
            LeaseState::Held => {
                let unchanged = before
                    .get(&lease.key)
                    .is_some_and(|b| b.version == lease.version);
                let holder_renewed = session
                    && record
                        .owner
                        .as_ref()
                        .is_some_and(|owner| renews(owner, record.session));
                if unchanged && !holder_renewed {
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
        .filter(|m| match session {
            true => renewed.contains(&m.key),
            false => versions_before.get(&m.key) != Some(&&m.version),
        })
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
