//! Which free rows a node takes and which it waits on: what it takes by load adds up as it
//! goes, orphans whatever they weigh, rescues within the room left, rows handed to a member
//! short of its share, and the leases a node balanced by load sets no timer for.

use std::time::Duration;

use super::*;

/// A released row of partition `p` carrying `load`, first seen free at `seen`.
fn free(fixture: &mut Fixture, p: u32, load: f64, seen: Instant) {
    let record = LeaseRecord {
        load: Some(load),
        ..LeaseRecord::released()
    };
    fixture.set(p, record, 300 + u64::from(p), seen);
}

/// [`loaded`] with `partitions` in the table, seen `after` its start (the instant returned):
/// this node's leases valid well past it, and the other member renewing just before it (its
/// leases, seen at the start, are not yet `acquire_after` old).
fn loaded_at(mine: &[f64], theirs: &[f64], partitions: u32, after: Duration) -> (Fixture, Instant) {
    let mut fixture = loaded(mine, theirs);
    fixture.config.partitions = partitions;
    let at = fixture.start + after;
    for holding in fixture.holdings.values_mut() {
        holding.valid_until = at + Duration::from_secs(600);
    }
    let renewed = at - Duration::from_secs(1);
    fixture
        .observed
        .members
        .get_mut(&node("other"))
        .unwrap()
        .first_seen = renewed;
    (fixture, at)
}

fn taken(plan: &Plan) -> Vec<u32> {
    plan.acquire.iter().map(|a| a.partition.0).collect()
}

#[test]
fn by_load_each_free_row_must_fit_on_top_of_those_taken_before_it() {
    // This node carries 1, the other 8, three free rows weigh 3 each: fair 9. Taken one by
    // one they bring it to 4, 7 and 10, each starting below its share, so all three fit.
    let mut fixture = loaded(&[1.0], &[8.0]);
    fixture.config.partitions = 5;
    let start = fixture.start;
    for p in 2..5 {
        free(&mut fixture, p, 3.0, start);
    }
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(taken(&plan), vec![2, 3, 4], "{plan:?}");
}

#[test]
fn by_load_orphans_are_taken_whatever_they_weigh_and_count_towards_what_fits_after() {
    // This node carries 1 and the other 8. Three rows left free since the start weigh 10
    // each, and one freed just now weighs 3: fair 21. The orphans are taken even past the
    // share (to 31); then the fresh row does not fit.
    let (mut fixture, now) = loaded_at(&[1.0], &[8.0], 6, Duration::from_secs(25));
    let start = fixture.start;
    for p in 2..5 {
        free(&mut fixture, p, 10.0, start);
    }
    free(&mut fixture, 5, 3.0, now - Duration::from_secs(1));
    let plan = fixture.plan_at(now);
    assert_eq!(taken(&plan), vec![2, 3, 4], "{plan:?}");
}

#[test]
fn by_load_what_an_orphan_weighs_leaves_less_room_for_the_rest() {
    // This node carries 0.5, the other 5; one orphan weighs 10 and a fresh row 3: fair 9.25.
    // With the orphan it carries 10.5, above its share: the fresh row is left to the other.
    let (mut fixture, now) = loaded_at(&[0.5], &[5.0], 4, Duration::from_secs(25));
    let start = fixture.start;
    free(&mut fixture, 2, 10.0, start);
    free(&mut fixture, 3, 3.0, now - Duration::from_secs(1));
    let plan = fixture.plan_at(now);
    assert_eq!(taken(&plan), vec![2], "{plan:?}");
}

#[test]
fn a_node_at_its_target_rescues_no_more_than_its_room_across_its_stripe_and_the_rest() {
    let mut fixture = Fixture::new(8);
    fixture.config.max_acquires_per_scan = 2;
    let now = fixture.start + fixture.config.scan_interval * ORPHAN_GRACE_SCANS;
    fixture.member("other", now - Duration::from_secs(1));
    let targets = BTreeMap::from([(node("me"), 4), (node("other"), 4)]);
    let stripe = Stripe::of(&node("me"), &targets, 8);
    let (inside, outside): (Vec<u32>, Vec<u32>) =
        (0..8).partition(|p| stripe.contains(PartitionId(*p)));
    // It holds two of its stripe and two of the rest: at its target, with two orphans left
    // on each side and room for two.
    for p in inside[..2].iter().chain(&outside[..2]) {
        fixture.hold(*p, now + Duration::from_secs(600));
    }
    let plan = fixture.plan_at(now);
    assert_eq!(plan.target, 4);
    assert_eq!(taken(&plan), inside[2..].to_vec(), "its own stripe first");
}

#[test]
fn by_load_a_node_below_the_band_waits_on_every_lease_and_one_at_its_edge_settles() {
    // Total 3.2, fair 1.6 each: this node carries 1.0, below the band (1.6 / 1.1): the
    // other's leases are its way back to its share should their holder stop.
    let mut below = loaded(&[1.0], &[1.2, 1.0]);
    below.observed.notified = true;
    let plan = below.plan_at(below.start + Duration::from_secs(1));
    assert_eq!(
        plan.wake_at,
        Some(below.start + below.config.acquire_after),
        "{plan:?}"
    );
    // Total 5, fair 2.5: carrying 2.0 is exactly at the band's lower edge (2.5 / 1.25),
    // within it.
    let mut edge = loaded(&[1.0, 1.0], &[1.5, 1.5]);
    edge.config.load_band = 1.25;
    edge.observed.notified = true;
    let plan = edge.plan_at(edge.start + Duration::from_secs(1));
    assert!(plan.settled(), "{plan:?}");
}

#[test]
fn by_load_a_member_counts_as_silent_only_a_twentieth_of_a_heartbeat_late() {
    // Within the band (see the test of settling by load): it waits only on the leases of a
    // member whose record has not changed for a heartbeat and a twentieth.
    let mut fixture = loaded(&[1.0, 1.0], &[1.2, 1.0]);
    fixture.observed.notified = true;
    let heartbeat = fixture.config.heartbeat;
    let on_time = fixture.plan_at(fixture.start + heartbeat);
    assert!(on_time.settled(), "{on_time:?}");
    let late = fixture.plan_at(fixture.start + heartbeat + heartbeat / 20);
    assert_eq!(
        late.wake_at,
        Some(fixture.start + fixture.config.acquire_after),
        "{late:?}"
    );
}

#[test]
fn by_load_a_row_handed_to_a_member_at_its_share_is_anyones_at_once() {
    // This node carries 2, the other 5; a row of 3 released towards the other: fair 5. The
    // other is at its share, not short of it, so the row is not left to it.
    let mut fixture = loaded(&[2.0], &[5.0]);
    fixture.config.partitions = 3;
    let record = LeaseRecord {
        load: Some(3.0),
        previous_owner: Some(node("other")),
        ..LeaseRecord::released()
    };
    fixture.set(2, record, 300, fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(taken(&plan), vec![2], "{plan:?}");
}

#[test]
fn a_node_that_seeks_nothing_sets_no_timer_for_a_row_handed_to_another() {
    // By load, with a ceiling of 5: this node carries 4 of a fair 4 and seeks nothing. A row
    // handed back to it (load 2) would pass its ceiling, so it stays; a row handed to the
    // other (short of its share) is the other's, and this node has no reason to look again.
    let mut fixture = loaded(&[4.0], &[1.0]);
    fixture.config.partitions = 4;
    fixture.config.max_load = Some(5.0);
    for (p, to, load) in [(2, "me", 2.0), (3, "other", 1.0)] {
        let record = LeaseRecord {
            load: Some(load),
            previous_owner: Some(node(to)),
            ..LeaseRecord::released()
        };
        fixture.set(p, record, 300 + u64::from(p), fixture.start);
    }
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert!(plan.acquire.is_empty(), "{plan:?}");
    assert_eq!(plan.wake_at, None, "{plan:?}");
}
