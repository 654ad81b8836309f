//! The first rule of every plan: each lease held is renewed while valid, dropped once its
//! validity has run out, and handed off when an operator has excluded its partition here.

use super::{Plan, PlanInput};

/// Sorts the holdings into [`Plan::drop`], [`Plan::renew`] and [`Plan::release`]. A lease
/// already being handed off is in none: it waits for its work in flight, renewed apart.
pub(super) fn sort_holdings(input: &PlanInput<'_>, plan: &mut Plan) {
    for (partition, holding) in input.holdings {
        if holding.valid_until <= input.now {
            plan.drop.push(*partition);
        } else if holding.handing_off {
            // Already on its way out.
        } else if input.config.excludes(*partition) {
            // Excluded while held: handed off whatever the target, as in a drain.
            plan.release.push(*partition);
        } else {
            plan.renew.push(*partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::Fixture;
    use super::*;
    use crate::types::PartitionId;

    #[test]
    fn each_holding_is_renewed_dropped_released_or_left_to_its_hand_off() {
        let mut fixture = Fixture::new(8);
        let now = fixture.start + Duration::from_secs(5);
        fixture.hold(0, now + Duration::from_secs(1));
        fixture.hold(1, now);
        fixture.hold(2, now + Duration::from_secs(1));
        fixture.hold(3, now + Duration::from_secs(1));
        fixture
            .holdings
            .get_mut(&PartitionId(3))
            .unwrap()
            .handing_off = true;
        fixture.config.excluded = [PartitionId(2)].into();
        let mut plan = Plan::default();
        sort_holdings(&fixture.input(now, false), &mut plan);
        assert_eq!(plan.renew, vec![PartitionId(0)]);
        assert_eq!(
            plan.drop,
            vec![PartitionId(1)],
            "valid until now is no longer valid"
        );
        assert_eq!(plan.release, vec![PartitionId(2)]);
    }
}
