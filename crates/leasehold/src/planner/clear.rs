//! The rule for session leases that frees what this node no longer holds: a record that
//! still names it after the lease ran out here, a write whose reply was lost, or a previous
//! process under its name. The node's session would keep such a record alive for ever, so
//! only this node can free it.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::LeaseState;
use crate::types::{PartitionId, Version};

use super::{Holding, Observed};

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{held_by, Fixture};
    use super::*;

    #[test]
    fn by_partition_nothing_is_cleared_whatever_names_this_node() {
        let mut fixture = Fixture::new(2);
        fixture.set(0, held_by("me", 1), 10, fixture.start);
        let later = fixture.start + Duration::from_secs(3600);
        let (clear, next) = clearable(later, &fixture.config, &fixture.observed, &fixture.holdings);
        assert!(clear.is_empty() && next.is_none());
    }
}
