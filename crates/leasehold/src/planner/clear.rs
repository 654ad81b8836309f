//! The rule for session leases that frees what this node no longer holds: a record that
//! still names it after the lease ran out here, a write whose reply was lost, or a previous
//! process under its name. The node's session would keep such a record alive for ever, so
//! only this node can free it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::LeaseState;
use crate::types::{Epoch, NodeId, PartitionId, Version};

use super::{Holding, Observed, SeenLease};

/// With session leases, the records naming this node that it does not hold and whose wait
/// has run out (see [`Plan::clear`](super::Plan::clear)), and when the next of the others'
/// runs out. Walks the table only when the view shows more records naming this node than it
/// holds.
pub(super) fn clearable(
    now: Instant,
    config: &ParticipantConfig,
    observed: &Observed,
    holdings: &BTreeMap<PartitionId, Holding>,
) -> (Vec<(PartitionId, Version)>, Option<Instant>) {
    let mut clear = Vec::new();
    let mut next = None::<Instant>;
    if observed.lease_mode != LeaseMode::Session
        || observed.leases.tally().owner(&config.node).held as usize <= holdings.len()
    {
        return (clear, next);
    }
    let stale = observed.leases.iter().filter(|seen| {
        seen.state == LeaseState::Held
            && seen.owner.as_ref() == Some(&config.node)
            && !holdings.contains_key(&seen.partition)
    });
    for seen in stale {
        let ready_at = match observed.lost.get(&seen.partition) {
            Some((epoch, session, deadline))
                if *epoch == seen.epoch && *session == seen.session =>
            {
                *deadline
            }
            _ => match observed.held_since(seen, config) {
                Some(since) => since + config.acquire_after,
                None => continue,
            },
        };
        if ready_at <= now {
            clear.push((seen.partition, seen.version.clone()));
        } else {
            next = Some(next.map_or(ready_at, |at| at.min(ready_at)));
        }
    }
    (clear, next)
}

/// Whether `seen` names `node` as its holder under `epoch` and `session`, as a lease lost
/// here was held: only such a record is this node's to free.
fn names_as_lost(
    seen: &SeenLease,
    node: &NodeId,
    epoch: Epoch,
    session: Option<NonZeroU32>,
) -> bool {
    seen.state == LeaseState::Held
        && seen.owner.as_ref() == Some(node)
        && seen.epoch == epoch
        && seen.session == session
}

/// Of the leases lost here whose deadline has passed by `now`, the rows the view shows still
/// naming `node` under the epoch and session each was lost with, and their versions: what a
/// node on its way out frees, with no scan left to plan it. A row at a lower epoch (a take
/// whose outcome stayed unknown and that never landed) or under another holder or session
/// is not this node's to free, however the loss was noted.
pub(crate) fn lost_rows_named(
    now: Instant,
    node: &NodeId,
    observed: &Observed,
) -> Vec<(PartitionId, Version)> {
    observed
        .lost
        .iter()
        .filter(|(_, (_, _, deadline))| *deadline <= now)
        .filter_map(|(partition, (epoch, session, _))| {
            let seen = observed.leases.get(*partition)?;
            names_as_lost(seen, node, *epoch, *session).then(|| (*partition, seen.version.clone()))
        })
        .collect()
}

/// Forgets the leases lost here that no record can come to name again: a lost lease matters
/// while its record still names `node` under its epoch and session, or may yet come to. A
/// take whose outcome stayed unknown can land after a listing that showed the record as it
/// was before, at a lower epoch; once the record is at that epoch or beyond under another
/// writer, the version the take compared is gone for good. A row the view lacks is kept.
pub(crate) fn prune_lost(observed: &mut Observed, node: &NodeId) {
    let leases = &observed.leases;
    observed.lost.retain(|partition, (epoch, session, _)| {
        leases
            .get(*partition)
            .is_none_or(|seen| seen.epoch < *epoch || names_as_lost(seen, node, *epoch, *session))
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::session_tag;
    use super::super::tests::{held_by, Fixture};
    use super::*;
    use crate::record::LeaseRecord;

    #[test]
    fn by_partition_nothing_is_cleared_whatever_names_this_node() {
        let mut fixture = Fixture::new(2);
        fixture.set(0, held_by("me", 1), 10, fixture.start);
        let later = fixture.start + Duration::from_secs(3600);
        let (clear, next) = clearable(later, &fixture.config, &fixture.observed, &fixture.holdings);
        assert!(clear.is_empty() && next.is_none());
    }

    /// Only a row naming this node under the epoch and session its lease was lost with is
    /// freed on the way out: not a row another node holds at a lower epoch (a take that
    /// never landed), an earlier tenure of this node's, one an operator took offline, one
    /// under another session, nor one whose deadline is still ahead.
    #[test]
    fn on_the_way_out_only_rows_named_as_they_were_lost_are_freed() {
        let mut fixture = Fixture::new(7);
        let me = fixture.config.node.clone();
        let session = Some(7);
        let held = |owner: &str, epoch: u64| LeaseRecord {
            session,
            ..held_by(owner, epoch)
        };
        let start = fixture.start;
        fixture.set(0, held(me.as_str(), 2), 10, start);
        fixture.set(1, held("other", 1), 11, start);
        fixture.set(2, held(me.as_str(), 1), 12, start);
        let offline = LeaseRecord {
            state: LeaseState::Offline,
            ..held(me.as_str(), 2)
        };
        fixture.set(3, offline, 13, start);
        let other_session = LeaseRecord {
            session: Some(8),
            ..held(me.as_str(), 2)
        };
        fixture.set(4, other_session, 14, start);
        fixture.set(5, held(me.as_str(), 2), 15, start);
        let deadline = start + Duration::from_secs(3);
        for p in 0..6 {
            let due = if p == 5 {
                deadline + Duration::from_secs(3)
            } else {
                deadline
            };
            fixture
                .observed
                .lost
                .insert(PartitionId(p), (Epoch(2), session_tag(session), due));
        }
        // Partition 6 is lost but not in the view.
        fixture
            .observed
            .lost
            .insert(PartitionId(6), (Epoch(2), session_tag(session), deadline));
        fixture.observed.leases.forget(PartitionId(6));
        let freed = lost_rows_named(deadline, &me, &fixture.observed);
        assert_eq!(freed, vec![(PartitionId(0), Version::from_number(10))]);
        assert!(
            lost_rows_named(deadline - Duration::from_millis(1), &me, &fixture.observed).is_empty()
        );
    }

    /// A lost lease is remembered while its record may still name this node as it held it:
    /// at a lower epoch (a take of unknown outcome may yet land) or naming it so, or out of
    /// the view; it is forgotten once the record is at its epoch under another holder,
    /// session or state, or beyond.
    #[test]
    fn a_lost_lease_is_forgotten_once_no_record_can_name_it_again() {
        let mut fixture = Fixture::new(8);
        let me = fixture.config.node.clone();
        let session = Some(7);
        let held = |owner: &str, epoch: u64| LeaseRecord {
            session,
            ..held_by(owner, epoch)
        };
        let start = fixture.start;
        fixture.set(0, held("other", 1), 10, start);
        fixture.set(1, held(me.as_str(), 2), 11, start);
        fixture.set(2, held("other", 2), 12, start);
        let other_session = LeaseRecord {
            session: Some(8),
            ..held(me.as_str(), 2)
        };
        fixture.set(3, other_session, 13, start);
        let offline = LeaseRecord {
            state: LeaseState::Offline,
            ..held(me.as_str(), 2)
        };
        fixture.set(4, offline, 14, start);
        fixture.set(5, held("other", 3), 15, start);
        fixture.set(6, held(me.as_str(), 3), 16, start);
        fixture.observed.leases.forget(PartitionId(7));
        for p in 0..8 {
            fixture
                .observed
                .lost
                .insert(PartitionId(p), (Epoch(2), session_tag(session), start));
        }
        prune_lost(&mut fixture.observed, &me);
        let kept: Vec<u32> = fixture.observed.lost.keys().map(|p| p.0).collect();
        assert_eq!(kept, [0, 1, 7]);
    }
}
