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

    /// The session the lost leases of these tests were held under.
    const SESSION: u64 = 7;

    /// A fixture whose partition `i` is `rows[i]` (owner, epoch, session, state; version
    /// 10 + `i`), and one more partition out of the view; every one of them noted as a lease
    /// lost here at epoch 2 under [`SESSION`], due at the fixture's start.
    fn lost(rows: &[(&str, u64, u64, LeaseState)]) -> Fixture {
        let count = rows.len() as u32;
        let mut fixture = Fixture::new(count + 1);
        let start = fixture.start;
        for (p, (owner, epoch, session, state)) in (0..).zip(rows) {
            let record = LeaseRecord {
                session: Some(*session),
                state: *state,
                ..held_by(owner, *epoch)
            };
            fixture.set(p, record, 10 + u64::from(p), start);
        }
        fixture.observed.leases.forget(PartitionId(count));
        for p in 0..=count {
            let lost = (Epoch(2), session_tag(Some(SESSION)), start);
            fixture.observed.lost.insert(PartitionId(p), lost);
        }
        fixture
    }

    /// Only a row naming this node under the epoch and session its lease was lost with is
    /// freed on the way out: not a row another node holds at a lower epoch (a take that
    /// never landed), an earlier tenure of this node's, one an operator took offline, one
    /// under another session, one out of the view, nor one whose deadline is still ahead.
    #[test]
    fn on_the_way_out_only_rows_named_as_they_were_lost_are_freed() {
        use LeaseState::{Held, Offline};
        let mut fixture = lost(&[
            ("me", 2, SESSION, Held),
            ("other", 1, SESSION, Held),
            ("me", 1, SESSION, Held),
            ("me", 2, SESSION, Offline),
            ("me", 2, SESSION + 1, Held),
            ("me", 2, SESSION, Held),
        ]);
        let (start, me) = (fixture.start, fixture.config.node.clone());
        fixture.observed.lost.get_mut(&PartitionId(5)).unwrap().2 = start + Duration::from_secs(3);
        let freed = lost_rows_named(start, &me, &fixture.observed);
        assert_eq!(freed, vec![(PartitionId(0), Version::from_number(10))]);
        let early = start - Duration::from_millis(1);
        assert!(lost_rows_named(early, &me, &fixture.observed).is_empty());
    }

    /// A lost lease is remembered while its record may still name this node as it held it:
    /// at a lower epoch (a take of unknown outcome may yet land) or naming it so, or out of
    /// the view; it is forgotten once the record is at its epoch under another holder,
    /// session or state, or beyond.
    #[test]
    fn a_lost_lease_is_forgotten_once_no_record_can_name_it_again() {
        use LeaseState::{Held, Offline};
        let mut fixture = lost(&[
            ("other", 1, SESSION, Held),
            ("me", 2, SESSION, Held),
            ("other", 2, SESSION, Held),
            ("me", 2, SESSION + 1, Held),
            ("me", 2, SESSION, Offline),
            ("other", 3, SESSION, Held),
            ("me", 3, SESSION, Held),
        ]);
        let me = fixture.config.node.clone();
        prune_lost(&mut fixture.observed, &me);
        let kept: Vec<u32> = fixture.observed.lost.keys().map(|p| p.0).collect();
        assert_eq!(kept, [0, 1, 7]);
    }
}
