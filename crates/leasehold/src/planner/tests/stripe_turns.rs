//! The stripes a node reads while its listings of the table wait, one member's after
//! another's.

use std::collections::BTreeSet;

use super::Fixture;
use crate::planner::{own_stripe, stripe_at};
use crate::types::PartitionId;

#[test]
fn turn_by_turn_a_node_reads_every_stripe_once_and_its_own_first() {
    let mut fixture = Fixture::new(256);
    for name in ["a", "b", "c"] {
        fixture.member(name, fixture.start);
    }
    let (now, config, observed) = (fixture.start, &fixture.config, &fixture.observed);
    assert_eq!(
        stripe_at(now, config, observed, false, 0),
        own_stripe(now, config, observed, false)
    );
    let mut seen = BTreeSet::new();
    for turn in 0..4 {
        let stripe = stripe_at(now, config, observed, false, turn);
        assert_eq!(stripe.len(), 64, "turn {turn}");
        assert!(
            stripe.iter().all(|p| seen.insert(*p)),
            "turn {turn} read a stripe again"
        );
    }
    assert_eq!(seen, (0..256).map(PartitionId).collect());
    // Then round again.
    assert_eq!(
        stripe_at(now, config, observed, false, 4),
        stripe_at(now, config, observed, false, 0)
    );
}
