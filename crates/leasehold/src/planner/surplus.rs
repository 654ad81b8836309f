//! The rule that hands off, by count, what this node holds above its target: only what the
//! other live members lack, no more than they can take in one scan, and first what goes
//! back to the member that held it before.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::types::{NodeId, PartitionId};

use super::{directions, Holding, Plan, PlanInput, Shares};

/// Moves this node's surplus above [`Plan::target`] from [`Plan::renew`] to
/// [`Plan::release`], naming the member each goes back to where there is one.
pub(super) fn release_surplus(input: &PlanInput<'_>, shares: &Shares, plan: &mut Plan) {
    let PlanInput {
        now,
        config,
        observed,
        holdings,
        draining,
        ..
    } = *input;
    let held = plan.renew.len() as u32;
    // Hand off only what other live members lack: a lease nobody else needs stays served
    // here (for example one rescued as an orphan).
    let deficits = shares.deficits(now, observed, &config.node);
    let mut wanted_elsewhere: u32 = deficits.values().sum();
    // A draining node whose group balances by load hands everything off at once: the
    // others hold what their loads call for, not their counts, and are all below their
    // shares of the load once this node's is gone.
    let by_load = observed.leases.tally().known > 0.0;
    if draining
        && by_load
        && shares
            .members
            .iter()
            .any(|m| m.node != config.node && !m.draining)
    {
        wanted_elsewhere = held;
    }
    // No more at once than the takers can take in one scan (`max_acquires_per_scan` each):
    // a partition released beyond that would wait unserved for a later scan of theirs,
    // while here it is still served until the next plan releases it.
    let per_scan = config
        .max_acquires_per_scan
        .saturating_mul(shares.takers(&config.node));
    let count = (held - plan.target).min(wanted_elsewhere).min(per_scan);
    let movable: Vec<PartitionId> = plan
        .renew
        .iter()
        .copied()
        .filter(|p| draining || holdings[p].keep_until.is_none_or(|until| until <= now))
        .collect();
    let surplus = surplus(&movable, holdings, &deficits, count as usize);
    if draining && by_load {
        plan.return_to
            .extend(directions(now, config, observed, holdings, &surplus));
    }
    for partition in &surplus {
        if let Some(home) = holdings[partition]
            .record
            .previous_owner
            .as_ref()
            .filter(|home| deficits.contains_key(home))
        {
            plan.return_to
                .entry(*partition)
                .or_insert_with(|| home.clone());
        }
    }
    plan.renew.retain(|p| !surplus.contains(p));
    plan.release.extend(surplus);
    plan.release.sort();
}

/// The `count` leases to hand off. Leases nobody is prohibited from go first, so that any
/// node below its target can take them; among those, leases going back to the node that held
/// them before (a member below its target, in `deficits`: it came back), then the most
/// recently acquired, which have the least warm state to lose.
fn surplus(
    renew: &[PartitionId],
    holdings: &BTreeMap<PartitionId, Holding>,
    deficits: &BTreeMap<&NodeId, u32>,
    count: usize,
) -> Vec<PartitionId> {
    let mut candidates: Vec<(bool, bool, std::cmp::Reverse<Instant>, PartitionId)> = renew
        .iter()
        .map(|p| {
            let holding = &holdings[p];
            let restricted = !holding.record.prohibited.is_empty();
            let returns = holding
                .record
                .previous_owner
                .as_ref()
                .is_some_and(|home| deficits.contains_key(home));
            (
                restricted,
                !returns,
                std::cmp::Reverse(holding.acquired_at),
                *p,
            )
        })
        .collect();
    candidates.sort();
    let mut chosen: Vec<PartitionId> = candidates.into_iter().take(count).map(|c| c.3).collect();
    chosen.sort();
    chosen
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{held_by, Fixture};
    use super::super::{renew, Shares};
    use super::*;

    /// This node holds all eight partitions; one other member, `a`, holds `theirs` of them
    /// in the table.
    fn holding_all(theirs: &[u32]) -> Fixture {
        let mut fixture = Fixture::new(8);
        let far = fixture.start + Duration::from_secs(60);
        for p in 0..8 {
            fixture.hold(p, far);
        }
        for p in theirs {
            fixture.set(*p, held_by("a", 1), 100 + u64::from(*p), fixture.start);
        }
        fixture.member("a", fixture.start);
        fixture
    }

    fn release_on(fixture: &Fixture, draining: bool) -> Plan {
        let input = fixture.input(fixture.start + Duration::from_secs(1), draining);
        let mut plan = Plan::default();
        renew::sort_holdings(&input, &mut plan);
        let shares = Shares::of(&input);
        plan.target = shares.target_of(&fixture.config.node);
        release_surplus(&input, &shares, &mut plan);
        plan
    }

    #[test]
    fn the_surplus_is_what_others_lack_and_no_more_than_one_scan_of_theirs() {
        let mut fixture = holding_all(&[]);
        let plan = release_on(&fixture, false);
        assert_eq!((plan.release.len(), plan.renew.len()), (4, 4));
        fixture.config.max_acquires_per_scan = 3;
        assert_eq!(release_on(&fixture, false).release.len(), 3);
        // The other already holds three of its four in the table: it lacks one.
        let fixture = holding_all(&[5, 6, 7]);
        assert_eq!(release_on(&fixture, false).release.len(), 1);
    }

    #[test]
    fn one_scan_of_takers_counts_every_other_live_member_but_no_draining_one() {
        let mut fixture = Fixture::new(24);
        let far = fixture.start + Duration::from_secs(60);
        for p in 0..24 {
            fixture.hold(p, far);
        }
        for name in ["a", "b", "c"] {
            fixture.member(name, fixture.start);
        }
        let draining = crate::Stored {
            key: NodeId::new("d").unwrap(),
            value: crate::MemberRecord {
                draining: true,
                ..crate::MemberRecord::default()
            },
            version: crate::Version::from_number(1),
        };
        let seen = crate::planner::SeenMember::new(fixture.start, draining);
        fixture.observed.members.insert(seen);
        fixture.config.max_acquires_per_scan = 2;
        // Four live members share 24: this node keeps 6 and the other three lack 18, of
        // which they take 2 each in one scan.
        let plan = release_on(&fixture, false);
        assert_eq!((plan.release.len(), plan.renew.len()), (6, 18));
    }

    #[test]
    fn a_partition_kept_a_while_longer_stays_unless_the_node_drains() {
        let mut fixture = holding_all(&[]);
        let until = fixture.start + Duration::from_secs(30);
        for p in 0..8 {
            fixture
                .holdings
                .get_mut(&PartitionId(p))
                .unwrap()
                .keep_until = Some(until);
        }
        assert!(release_on(&fixture, false).release.is_empty());
        assert_eq!(release_on(&fixture, true).release.len(), 8);
    }
}
