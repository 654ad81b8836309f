//! Placement that remembers, by count: a member that went away and came back under its name
//! gets back what it held before from whoever took it meanwhile, so that it finds its warm
//! state. By load, [`super::load::shed`] does the same.

use std::collections::BTreeMap;

use crate::types::NodeId;

use super::{Plan, PlanInput, Shares};

/// Hands back, up to what each lacks, the partitions this node renews whose previous holder
/// is a member nearly empty (below half its target: one that has just come back), even
/// when this node is not above its own target: it then takes a free partition or a surplus
/// elsewhere. Returns whether it hands any back: then the plan takes nothing.
pub(super) fn give_back(input: &PlanInput<'_>, shares: &Shares, plan: &mut Plan) -> bool {
    let PlanInput {
        now,
        config,
        observed,
        holdings,
        ..
    } = *input;
    // A member merely short of its share is filled by the surplus of those above theirs,
    // without taking partitions from nodes at their own target.
    let mut lacking: BTreeMap<&NodeId, u32> = shares
        .deficits(now, observed, &config.node)
        .into_iter()
        .filter(|(member, lack)| lack * 2 > shares.targets[*member])
        .collect();
    let mut homecoming = Vec::new();
    for partition in &plan.renew {
        let holding = &holdings[partition];
        let Some(home) = holding.record.previous_owner.as_ref() else {
            continue;
        };
        if holding.keep_until.is_some_and(|until| now < until) {
            continue;
        }
        // At most what the member takes in one scan: see the surplus.
        if homecoming.len() as u32 >= config.max_acquires_per_scan {
            break;
        }
        if let Some(lack) = lacking.get_mut(home).filter(|lack| **lack > 0) {
            if !holding.record.prohibited.contains(home) {
                *lack -= 1;
                homecoming.push((*partition, home.clone()));
            }
        }
    }
    if homecoming.is_empty() {
        return false;
    }
    for (partition, home) in homecoming {
        plan.renew.retain(|p| *p != partition);
        plan.release.push(partition);
        plan.return_to.insert(partition, home);
    }
    plan.release.sort();
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{held_by, node, Fixture};
    use super::super::{renew, Shares};
    use super::*;
    use crate::record::LeaseRecord;
    use crate::types::PartitionId;

    /// This node holds partitions 0 and 1 (its target of 2), and took 0 from b.
    fn took_from_b() -> Fixture {
        let mut fixture = Fixture::new(4);
        let far = fixture.start + Duration::from_secs(60);
        fixture.hold(0, far);
        fixture.hold(1, far);
        fixture
            .holdings
            .get_mut(&PartitionId(0))
            .unwrap()
            .record
            .previous_owner = Some(node("b"));
        fixture.member("b", fixture.start);
        fixture
    }

    fn give_back_on(fixture: &Fixture) -> (bool, Plan) {
        let input = fixture.input(fixture.start + Duration::from_secs(1), false);
        let mut plan = Plan::default();
        renew::sort_holdings(&input, &mut plan);
        let given = give_back(&input, &Shares::of(&input), &mut plan);
        (given, plan)
    }

    #[test]
    fn a_member_nearly_empty_gets_back_what_it_held_from_a_node_at_its_target() {
        let (given, plan) = give_back_on(&took_from_b());
        assert!(given);
        assert_eq!(plan.release, [PartitionId(0)]);
        assert_eq!(plan.return_to[&PartitionId(0)], node("b"));
        assert_eq!(plan.renew, [PartitionId(1)]);
    }

    #[test]
    fn a_member_merely_short_of_its_share_is_given_nothing_back() {
        let mut fixture = took_from_b();
        // b holds one of its two: short, but not nearly empty.
        fixture.set(3, held_by("b", 1), 90, fixture.start);
        let (given, plan) = give_back_on(&fixture);
        assert!(!given);
        assert!(plan.release.is_empty());
    }

    /// Fails if a node restarting in place, back under its name with its other partitions
    /// still reserved for it, counts as lacking them: the node holding what it held before a
    /// hand-off for balance would give that back too, then take it again once the returning
    /// node is at its target with its reservations.
    #[test]
    fn a_member_back_from_a_restart_in_place_is_not_short_of_what_is_reserved_for_it() {
        let mut fixture = took_from_b();
        fixture.observed.restart_window = Duration::from_secs(16);
        let mut reserved = LeaseRecord::released();
        reserved.reserve_for(&node("b"));
        fixture.set(2, reserved.clone(), 90, fixture.start);
        fixture.set(3, reserved, 91, fixture.start);
        assert!(!give_back_on(&fixture).0);
        // From the instant its window ends, when the others may take them (see `take`), the
        // reservations no longer count: it lacks them.
        let input = fixture.input(fixture.start + Duration::from_secs(16), false);
        let mut plan = Plan::default();
        renew::sort_holdings(&input, &mut plan);
        assert!(give_back(&input, &Shares::of(&input), &mut plan));
    }

    #[test]
    fn nothing_goes_back_to_a_member_prohibited_from_it_or_while_it_is_kept() {
        let mut fixture = took_from_b();
        let holding = fixture.holdings.get_mut(&PartitionId(0)).unwrap();
        holding.record.prohibited = vec![node("b")];
        assert!(!give_back_on(&fixture).0);
        let holding = fixture.holdings.get_mut(&PartitionId(0)).unwrap();
        holding.record.prohibited.clear();
        holding.keep_until = Some(fixture.start + Duration::from_secs(2));
        assert!(!give_back_on(&fixture).0);
        // Kept until that instant, and no longer: from it on, it goes back.
        let holding = fixture.holdings.get_mut(&PartitionId(0)).unwrap();
        holding.keep_until = Some(fixture.start + Duration::from_secs(1));
        assert!(give_back_on(&fixture).0);
    }
}
