//! What a plan makes of its view: listings folded in, memberships compared, stripes, what
//! others hold and lack, exclusions, a returning node, a surplus sent home.

use std::time::Duration;

use super::*;

#[test]
fn folding_a_listing_keeps_first_seen_only_for_unchanged_versions() {
    // Each version here is a write of the member's own: a new heartbeat.
    let member = |name: &str, version: u64| Stored {
        key: node(name),
        value: MemberRecord {
            heartbeat: version,
            ..MemberRecord::default()
        },
        version: Version::from_number(version),
    };
    let start = Instant::now();
    let later = start + Duration::from_secs(5);
    let mut observed = Observed::default();
    observed.observe_members(start, vec![member("b", 1), member("c", 1), member("e", 1)]);
    // Out of order and with a repeated key, as a store without ordered listings may answer:
    // b unchanged, c rewritten, e gone, a and d new.
    observed.observe_members(
        later,
        vec![
            member("d", 1),
            member("b", 1),
            member("a", 1),
            member("c", 2),
            member("d", 1),
        ],
    );
    let seen: Vec<(&str, u64, Instant)> = observed
        .members
        .iter()
        .map(|seen| {
            let version = seen.version.to_string().parse().unwrap();
            (seen.node.as_str(), version, seen.first_seen)
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("a", 1, later),
            ("b", 1, start),
            ("c", 2, later),
            ("d", 1, later),
        ]
    );

    // The same members again, with the operator's record among them: updated in place.
    let last = later + Duration::from_secs(5);
    let listing = |rows: &[(&str, u64)]| rows.iter().map(|(n, v)| member(n, *v)).collect();
    let mut members: Vec<_> = listing(&[("a", 2), ("b", 1), ("c", 2), ("d", 3), ("x", 9)]);
    members[4].key = NodeId::operator();
    observed.observe_members(last, members);
    let seen: Vec<(&str, Instant)> = observed
        .members
        .iter()
        .map(|seen| (seen.node.as_str(), seen.first_seen))
        .collect();
    assert_eq!(
        seen,
        vec![("a", last), ("b", start), ("c", later), ("d", last)]
    );
    assert_eq!(observed.operator_mark, Some(Version::from_number(9)));
    // The same count of members but another one among them: merged, not matched in place.
    observed.observe_members(last, listing(&[("a", 2), ("b", 1), ("c", 2), ("z", 1)]));
    let names: Vec<&str> = observed.members.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(names, vec!["a", "b", "c", "z"]);
    assert_eq!(observed.operator_mark, None);
}

#[test]
fn comparing_a_membership_agrees_with_building_it() {
    let mut fixture = Fixture::new(8);
    let start = fixture.start;
    for name in ["a", "zz"] {
        fixture.member(name, start);
    }
    let timeout = fixture.config.member_timeout();
    let observed = &fixture.observed;
    let config = &fixture.config;
    let expected = observed.membership(start, config, false);
    assert_eq!(expected.len(), 3, "a, zz and this node");
    for (now, draining) in [
        (start, false),
        (start, true),
        (start + timeout - Duration::from_millis(1), false),
        (start + timeout, false),
    ] {
        let same = observed.membership(now, config, draining) == expected;
        assert_eq!(
            observed.membership_is(now, config, draining, &expected),
            same,
            "at +{:?}, draining {draining}",
            now - start
        );
    }
    assert!(!observed.membership_is(start + timeout, config, false, &expected));
    assert!(!observed.membership_is(start, config, false, &[]));
    let mut heavier = expected.clone();
    heavier[0].weight = 2;
    assert!(!observed.membership_is(start, config, false, &heavier));
}

#[test]
fn stripes_divide_the_table_exactly_by_target() {
    for (partitions, weights) in [
        (64, vec![1, 1, 1]),
        (65_536, vec![1; 48]),
        (100, vec![3, 1, 1, 2]),
        (7, vec![1, 1, 1, 1, 1, 1, 1, 1, 1]),
        (1, vec![1, 1]),
        // 10 × 0.618 is 6, which shares a factor with 10: the stride must step down to 3.
        (10, vec![1, 1, 1]),
    ] {
        let members: Vec<MemberShare> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| share(&format!("n{i:04}"), *w, false))
            .collect();
        let targets = fair_targets(partitions, &members, partitions);
        let stripes: Vec<(u32, Stripe)> = targets
            .iter()
            .map(|(node, target)| (*target, Stripe::of(node, &targets, partitions)))
            .collect();
        let mut counts = vec![0u32; stripes.len()];
        for p in 0..partitions {
            let owners: Vec<usize> = (0..stripes.len())
                .filter(|&i| stripes[i].1.contains(PartitionId(p)))
                .collect();
            assert_eq!(
                owners.len(),
                1,
                "partition {p} of {partitions} in one stripe"
            );
            counts[owners[0]] += 1;
        }
        let expected: Vec<u32> = stripes.iter().map(|(target, _)| *target).collect();
        assert_eq!(counts, expected, "{partitions} partitions over {weights:?}");
        for (_, stripe) in &stripes {
            let contained: Vec<PartitionId> = (0..partitions)
                .map(PartitionId)
                .filter(|p| stripe.contains(*p))
                .collect();
            assert_eq!(stripe.partitions(), contained, "{partitions} partitions");
        }
    }
}

#[test]
fn stripes_scatter_neighbouring_partitions() {
    let members: Vec<MemberShare> = (0..4).map(|i| share(&format!("n{i}"), 1, false)).collect();
    let targets = fair_targets(64, &members, 64);
    let stripe = Stripe::of(&node("n0"), &targets, 64);
    let mine: Vec<u32> = (0..64)
        .filter(|p| stripe.contains(PartitionId(*p)))
        .collect();
    assert_eq!(mine.len(), 16);
    let adjacent = mine.windows(2).filter(|w| w[1] == w[0] + 1).count();
    assert!(adjacent < 4, "not one contiguous range: {mine:?}");
}

#[test]
fn a_starting_node_takes_its_own_stripe_first() {
    let mut fixture = Fixture::new(256);
    for name in ["a", "b", "c"] {
        fixture.member(name, fixture.start);
    }
    let plan = fixture.plan_at(fixture.start);
    assert_eq!(plan.target, 64);
    assert_eq!(plan.acquire.len(), 16, "max_acquires_per_scan");
    assert_eq!(plan.off_stripe, 0);
    let members = fixture
        .observed
        .membership(fixture.start, &fixture.config, false);
    let targets = fair_targets(256, &members, 256);
    let stripe = Stripe::of(&node("me"), &targets, 256);
    assert!(plan.acquire.iter().all(|a| stripe.contains(a.partition)));

    // With its stripe taken by others, it takes what is left elsewhere, and says so.
    for p in 0..256 {
        if stripe.contains(PartitionId(p)) {
            fixture.set(p, held_by("a", 1), 1000 + u64::from(p), fixture.start);
        }
    }
    let plan = fixture.plan_at(fixture.start);
    assert_eq!(plan.acquire.len(), 16);
    assert_eq!(plan.off_stripe, 16);
}

#[test]
fn a_node_that_read_only_its_stripe_counts_the_whole_table_and_takes_from_it() {
    let mut fixture = Fixture::new(256);
    for name in ["a", "b", "c"] {
        fixture.member(name, fixture.start);
    }
    let stripe =
        crate::planner::own_stripe(fixture.start, &fixture.config, &fixture.observed, false);
    assert_eq!(stripe.len(), 64);
    // Before it has read anything, a node lays the stripes out over the whole table too.
    let unread = Observed {
        members: fixture.observed.members.clone(),
        ..Observed::default()
    };
    let first = crate::planner::own_stripe(fixture.start, &fixture.config, &unread, false);
    assert_eq!(first, stripe);
    let rows = stripe
        .iter()
        .map(|p| {
            let stored = Stored {
                key: *p,
                value: LeaseRecord::released(),
                version: Version::from_number(u64::from(p.0) + 1),
            };
            (*p, Some(stored))
        })
        .collect();
    let mut observed = Observed {
        members: fixture.observed.members.clone(),
        ..Observed::default()
    };
    observed.observe_stripe(fixture.start, rows);
    fixture.observed = observed;
    let plan = fixture.plan_at(fixture.start);
    // Counted by the 64 rows it read, its target would be 16.
    assert_eq!(plan.target, 64);
    assert_eq!(plan.acquire.len(), 16, "max_acquires_per_scan");
    assert_eq!(plan.off_stripe, 0);
    assert!(plan.acquire.iter().all(|a| stripe.contains(&a.partition)));
}

#[test]
fn between_readings_a_free_row_does_not_come_to_look_orphaned() {
    let mut fixture = Fixture::new(4);
    let far = fixture.start + Duration::from_secs(600);
    fixture.hold(0, far);
    fixture.hold(1, far);
    fixture.member("other", fixture.start);
    // Nobody below target may take 2, so a node at its target rescues it once it has been
    // seen free for the orphan grace.
    fixture.set(
        2,
        LeaseRecord {
            prohibited: vec![node("other")],
            ..LeaseRecord::released()
        },
        70,
        fixture.start,
    );
    fixture.set(3, held_by("other", 1), 71, fixture.start);
    fixture.member("other", fixture.start + Duration::from_secs(100));
    let later = fixture.start + fixture.config.scan_interval * (ORPHAN_GRACE_SCANS + 1);
    assert!(
        fixture.plan_on_view(later).acquire.is_empty(),
        "last read when 2 had only just been released"
    );
    let taken: Vec<u32> = fixture
        .plan_at(later)
        .acquire
        .iter()
        .map(|a| a.partition.0)
        .collect();
    assert_eq!(taken, vec![2], "read again, still free: an orphan");
}

/// Fails if the plan counts as takeable a lease still within `acquire_after`, or misses a
/// released one or one left unrenewed long enough: settled nodes read the table again while
/// any remain.
#[test]
fn takeable_counts_released_and_expired_records_only() {
    let mut fixture = Fixture::new(4);
    fixture.member("x", fixture.start);
    fixture.set(3, held_by("x", 1), 50, fixture.start);
    let plan = fixture.plan_at(fixture.start);
    assert_eq!(plan.takeable, 3, "the three released records");
    let later = fixture.start + fixture.config.acquire_after;
    fixture.member("x", later);
    assert_eq!(
        fixture.plan_at(later).takeable,
        4,
        "and x's, unchanged for acquire_after"
    );
}

/// Fails if a node above its target hands off more than its surplus when the others lack
/// more than that.
#[test]
fn only_the_surplus_is_handed_off_however_much_others_lack() {
    let mut fixture = Fixture::new(8);
    let far = fixture.start + Duration::from_secs(60);
    for p in 0..6 {
        fixture.hold(p, far);
    }
    fixture.member("a", fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(plan.target, 4);
    assert_eq!(plan.release.len(), 2, "6 held, target 4, a lacks 4");
    assert_eq!(plan.renew.len(), 4);
}

/// Fails if what other members hold is not subtracted from their targets (a node above its
/// target would then hand off leases no other member lacks).
#[test]
fn the_deficit_of_others_counts_what_they_hold() {
    let mut fixture = Fixture::new(6);
    let at = fixture.start;
    for (partition, owner) in [(0, "a"), (1, "a"), (2, "a"), (3, "b")] {
        fixture.set(partition, held_by(owner, 1), 50 + u64::from(partition), at);
    }
    let targets: BTreeMap<NodeId, u32> = [(node("a"), 2), (node("b"), 2), (node("me"), 2)]
        .into_iter()
        .collect();
    let deficits = deficits_of_others(fixture.start, &fixture.observed, &targets, &node("me"));
    assert_eq!(
        deficits.into_iter().collect::<Vec<_>>(),
        vec![(&node("b"), 1)],
        "a holds more than its target and lacks nothing; b lacks one"
    );
    let deficits = deficits_of_others(fixture.start, &fixture.observed, &targets, &node("b"));
    assert_eq!(deficits.values().sum::<u32>(), 2);
}

/// Fails if a node counts a member record it has never seen change, whose node holds
/// nothing and registered long ago, as live: a dead node's record, which the rest of the
/// fleet stopped counting long before this node joined. Also fails if a record with a lease,
/// a young one, or one seen changing is left out.
#[test]
fn a_record_never_seen_changing_counts_only_with_a_lease_or_while_young() {
    let mut fixture = Fixture::new(4);
    let at = fixture.start;
    let old = |name: &str, heartbeat: u64, version: u64| Stored {
        key: node(name),
        value: MemberRecord {
            heartbeat,
            ..MemberRecord::default()
        },
        version: Version::from_number(version),
    };
    fixture.observed.observe_members(
        at,
        vec![old("busy", 40, 1), old("dead", 50, 2), old("young", 2, 3)],
    );
    fixture.set(3, held_by("busy", 1), 60, at);
    let live = |fixture: &Fixture| -> Vec<String> {
        let members = fixture.observed.membership(at, &fixture.config, false);
        members.iter().map(|m| m.node.to_string()).collect()
    };
    assert_eq!(live(&fixture), ["busy", "young", "me"]);
    fixture.observed.observe_members(
        at,
        vec![old("busy", 40, 1), old("dead", 51, 4), old("young", 2, 3)],
    );
    assert_eq!(
        live(&fixture),
        ["busy", "dead", "young", "me"],
        "seen heartbeating: alive"
    );
}

#[test]
fn excluded_partitions_are_never_taken() {
    let mut fixture = Fixture::new(4);
    fixture.config.excluded = [PartitionId(1), PartitionId(3)].into();
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(3600));
    let taken: Vec<u32> = plan.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(taken, vec![0, 2]);
    assert_eq!(plan.takeable, 4, "others may take what this node excludes");

    // The simulator's negative control ignores the list.
    fixture.config.controls.ignore_exclusions = true;
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(3600));
    assert_eq!(plan.acquire.len(), 4);
}

#[test]
fn a_held_partition_that_becomes_excluded_is_handed_off_even_below_target() {
    let mut fixture = Fixture::new(4);
    let far = fixture.start + Duration::from_secs(60);
    fixture.hold(0, far);
    fixture.hold(2, far);
    fixture.config.excluded = [PartitionId(2)].into();
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(plan.target, 4);
    assert_eq!(plan.release, vec![PartitionId(2)]);
    assert_eq!(plan.renew, vec![PartitionId(0)]);
    assert!(!plan.settled());

    // Above target as well: the excluded lease goes besides the surplus.
    for peer in ["a", "b", "c"] {
        fixture.member(peer, fixture.start);
    }
    fixture.hold(1, far);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(plan.target, 1);
    assert_eq!(plan.renew.len(), 1);
    assert_eq!(plan.release.len(), 2);
    assert!(plan.release.contains(&PartitionId(2)));
    assert!(plan.release.is_sorted());
}

/// Fails if a released row that names this node as the one it goes back to is not taken
/// before the other free rows, or if a take does not record who held the partition before.
#[test]
fn a_returning_node_takes_back_what_names_it_first() {
    let mut fixture = Fixture::new(8);
    fixture.config.max_acquires_per_scan = 2;
    for peer in ["a", "b", "c"] {
        fixture.member(peer, fixture.start);
    }
    let released_by = |node_name: &str| LeaseRecord {
        previous_owner: Some(node(node_name)),
        ..LeaseRecord::released()
    };
    fixture.set(5, released_by("me"), 60, fixture.start);
    fixture.set(6, released_by("a"), 61, fixture.start);
    fixture.set(7, released_by("me"), 62, fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    let taken: Vec<u32> = plan.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(
        taken,
        vec![5, 7],
        "the rows that name this node, whatever the stripe"
    );
    assert!(plan
        .acquire
        .iter()
        .all(|a| a.record.previous_owner.is_none()));

    // A take of another's row records whom it came from: the releaser of a released row,
    // the holder of an abandoned one.
    let mut alone = Fixture::new(3);
    alone.set(1, released_by("a"), 61, alone.start);
    alone.set(2, held_by("b", 4), 62, alone.start);
    let plan = alone.plan_at(alone.start + Duration::from_secs(3600));
    let previous: Vec<Option<NodeId>> = plan
        .acquire
        .iter()
        .map(|a| a.record.previous_owner.clone())
        .collect();
    assert_eq!(previous, vec![None, Some(node("a")), Some(node("b"))]);
}

/// A table of `partitions` where this node holds the first `held`, taken one a second
/// apart from the start, the first of them from `b`, a live member.
fn taken_from_b_first(partitions: u32, held: u32) -> Fixture {
    let mut fixture = Fixture::new(partitions);
    let far = fixture.start + Duration::from_secs(60);
    for p in 0..held {
        fixture.hold(p, far);
        let holding = fixture.holdings.get_mut(&PartitionId(p)).unwrap();
        holding.acquired_at = fixture.start + Duration::from_secs(u64::from(p));
        if p == 0 {
            holding.record.previous_owner = Some(node("b"));
        }
    }
    fixture.member("b", fixture.start);
    fixture
}

/// Fails if a node above its target hands off its newest leases rather than those that
/// came from a member now back and below its target, or does not name that member.
#[test]
fn surplus_goes_back_to_the_member_that_held_it_before() {
    // Partition 0, the oldest, came from b; the newest would go first otherwise.
    let mut fixture = taken_from_b_first(4, 4);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(5));
    assert_eq!(plan.target, 2);
    assert_eq!(plan.release, [PartitionId(0)], "first what b held");
    assert_eq!(
        plan.return_to.into_iter().collect::<Vec<_>>(),
        vec![(PartitionId(0), node("b"))]
    );
    // Once it is on its way back, the rest of the surplus: the newest.
    fixture.holdings.remove(&PartitionId(0));
    fixture.set(0, held_by("b", 2), 90, fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(6));
    assert_eq!(plan.release, [PartitionId(3)], "{plan:?}");
}

/// Of a surplus handed to a member short of its share but not nearly empty (so nothing is
/// given back ahead of the surplus), what it held before goes first, then the newest.
#[test]
fn of_a_surplus_what_a_short_member_held_before_goes_first() {
    let mut fixture = taken_from_b_first(8, 6);
    fixture.set(6, held_by("b", 1), 96, fixture.start);
    fixture.set(7, held_by("b", 1), 97, fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(7));
    assert_eq!(plan.target, 4);
    assert_eq!(plan.release, [PartitionId(0), PartitionId(5)], "{plan:?}");
}
