//! The rule that balances by load: when the application reports loads, a node hands off
//! what [`load::shed`] picks, each partition named for the member it goes to, and the rules
//! by count do not apply.

use crate::clock::SeededRng;

use super::load::{self, LoadView};
use super::{Plan, PlanInput};

/// Sets the plan's load, spill-over and target from `view`, and moves what this node sheds
/// from [`Plan::renew`] to [`Plan::release`]. Returns whether it sheds anything: then the
/// plan takes nothing.
pub(super) fn shed_load(
    input: &PlanInput<'_>,
    view: &LoadView,
    plan: &mut Plan,
    rng: &mut SeededRng,
) -> bool {
    let PlanInput {
        now,
        config,
        observed,
        holdings,
        load_moves_left,
        ..
    } = *input;
    let keep: Vec<load::Kept> = plan
        .renew
        .iter()
        .map(|p| {
            let holding = &holdings[p];
            load::Kept {
                partition: *p,
                load: view.estimate(holding.record.load),
                home: holding.record.previous_owner.clone(),
                recent: now.saturating_duration_since(holding.acquired_at) < config.churn_window,
            }
        })
        .collect();
    let shedding = load::shed(
        view,
        config,
        &keep,
        load_moves_left,
        |p, node| observed.leases.prohibited(p).contains(node),
        rng,
    );
    plan.load = view.get(&config.node).map(|me| (me.load, me.fair));
    // Balancing by load has no count to reach: the target is what the node keeps.
    plan.target = plan.renew.len() as u32;
    plan.load_spillover = shedding.spillover;
    if shedding.moves.is_empty() {
        return false;
    }
    plan.shed = shedding.budgeted;
    for (partition, to) in shedding.moves {
        plan.renew.retain(|p| *p != partition);
        plan.release.push(partition);
        plan.return_to.insert(partition, to);
    }
    plan.release.sort();
    plan.target = plan.renew.len() as u32;
    true
}

#[cfg(test)]
mod tests {
    use super::super::tests::{loaded, Fixture};
    use super::*;
    use crate::clock::SeededRng;

    fn shed_on(fixture: &Fixture, budget: u32) -> (bool, Plan) {
        let now = fixture.start + std::time::Duration::from_secs(1);
        let mut input = fixture.input(now, false);
        input.load_moves_left = budget;
        let mut plan = Plan::default();
        super::super::renew::sort_holdings(&input, &mut plan);
        let view = LoadView::of(
            now,
            input.config,
            input.observed,
            input.holdings,
            &plan.renew,
            false,
        )
        .expect("the fixture reports loads");
        let shed = shed_load(&input, &view, &mut plan, &mut SeededRng::new(1));
        (shed, plan)
    }

    #[test]
    fn a_node_far_above_its_share_hands_off_load_named_for_the_other() {
        let fixture = loaded(&[10.0, 10.0, 10.0, 10.0], &[1.0]);
        let (shed, plan) = shed_on(&fixture, 100);
        assert!(shed);
        assert!(!plan.release.is_empty());
        assert!(plan
            .release
            .iter()
            .all(|p| plan.return_to[p].as_str() == "other"));
        assert_eq!(plan.target as usize, plan.renew.len());
    }

    #[test]
    fn a_node_within_the_band_keeps_everything_and_reports_its_load() {
        let fixture = loaded(&[1.0, 1.0], &[1.0, 1.0]);
        let (shed, plan) = shed_on(&fixture, 100);
        assert!(!shed);
        assert!(plan.release.is_empty());
        assert_eq!(plan.load, Some((2.0, 2.0)));
        assert_eq!(plan.target, 2);
    }

    #[test]
    fn a_spent_churn_budget_sheds_nothing_to_a_member_with_a_share() {
        let fixture = loaded(&[5.0; 6], &[5.0; 4]);
        let (shed, plan) = shed_on(&fixture, 100);
        assert!(shed);
        assert_eq!(
            (plan.release.len(), plan.shed),
            (1, 1),
            "one move, charged to the budget"
        );
        assert!(!shed_on(&fixture, 0).0);
    }
}
