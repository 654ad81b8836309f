//! Takes: released and abandoned rows, how long a record must stay unchanged, caps, surplus and
//! drains, rescues.

use std::time::Duration;

use super::*;

#[test]
fn released_partitions_are_taken_at_once_with_the_next_epoch() {
    let mut fixture = Fixture::new(4);
    fixture.set(
        2,
        LeaseRecord {
            epoch: Epoch(5),
            owner: Some(node("before")),
            prohibited: vec![node("x")],
            load: Some(3.5),
            note: Some("kicked".into()),
            ..LeaseRecord::released()
        },
        77,
        fixture.start,
    );
    let plan = fixture.plan_at(fixture.start);
    assert_eq!(plan.target, 4);
    assert_eq!(plan.acquire.len(), 4);
    let take = plan
        .acquire
        .iter()
        .find(|a| a.partition == PartitionId(2))
        .unwrap();
    assert_eq!(take.expected, Version::from_number(77));
    assert_eq!(take.record.epoch, Epoch(6));
    assert_eq!(take.record.owner, Some(node("me")));
    assert_eq!(take.record.state, LeaseState::Held);
    // The prohibited list carries over, and the partition's load as an estimate until the
    // first renewal; the operator's note on the last tenure does not.
    assert_eq!(take.record.prohibited, vec![node("x")]);
    assert_eq!(
        (take.record.load, take.record.note.as_deref()),
        (Some(3.5), None)
    );
}

#[test]
fn a_held_record_is_taken_only_after_acquire_after_unchanged() {
    let mut fixture = Fixture::new(1);
    let seen = fixture.start;
    fixture.set(0, held_by("other", 3), 10, seen);
    let wait = fixture.config.acquire_after;
    let early = fixture.plan_at(seen + wait - Duration::from_millis(1));
    assert!(early.acquire.is_empty());
    assert_eq!(
        early.wake_at,
        Some(seen + wait),
        "a timer for the moment the wait ends"
    );
    let due = fixture.plan_at(seen + wait);
    assert_eq!(due.acquire.len(), 1);
    assert_eq!(due.acquire[0].record.epoch, Epoch(4));

    // A new version restarts the wait from when it was first seen.
    let later = seen + Duration::from_secs(40);
    fixture.observed.observe_leases(
        later,
        vec![Stored {
            key: PartitionId(0),
            value: held_by("other", 3),
            version: Version::from_number(11),
        }],
    );
    assert!(fixture.plan_at(seen + wait).acquire.is_empty());
    assert_eq!(fixture.plan_at(later + wait).acquire.len(), 1);
}

#[test]
fn the_same_version_keeps_its_first_seen_across_scans() {
    let mut fixture = Fixture::new(1);
    fixture.set(0, held_by("other", 3), 10, fixture.start);
    let listing = || {
        vec![Stored {
            key: PartitionId(0),
            value: held_by("other", 3),
            version: Version::from_number(10),
        }]
    };
    fixture
        .observed
        .observe_leases(fixture.start + Duration::from_secs(20), listing());
    assert_eq!(
        fixture
            .observed
            .leases
            .get(PartitionId(0))
            .unwrap()
            .first_seen(),
        fixture.start
    );
}

/// A row of `p` held by "other" at `version`.
fn row(p: u32, version: u64) -> Stored<PartitionId, LeaseRecord> {
    Stored {
        key: PartitionId(p),
        value: held_by("other", 1),
        version: Version::from_number(version),
    }
}

/// Each row of the view: partition, version, first sighting.
fn sightings(observed: &Observed) -> Vec<(u32, u64, Instant)> {
    observed
        .leases
        .iter()
        .map(|o| {
            (
                o.partition.0,
                o.version.as_number().unwrap(),
                o.first_seen(),
            )
        })
        .collect()
}

#[test]
fn a_listing_with_other_keys_keeps_first_seen_only_for_unchanged_versions() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(20);
    let mut observed = Observed::default();
    observed.observe_leases(t0, vec![row(0, 10), row(2, 20), row(3, 30)]);
    // Partition 1 appears, 3 disappears, 2 changes; out of order, as a careless store might.
    observed.observe_leases(t1, vec![row(2, 21), row(1, 15), row(0, 10)]);
    let seen = sightings(&observed);
    assert_eq!(seen, vec![(0, 10, t0), (1, 15, t1), (2, 21, t1)]);
    // The same keys again: updated in place, unchanged versions keep their first sighting.
    let t2 = t1 + Duration::from_secs(20);
    observed.observe_leases(t2, vec![row(0, 11), row(1, 15), row(2, 21)]);
    let first_seen: Vec<Instant> = observed.leases.iter().map(|o| o.first_seen()).collect();
    assert_eq!(first_seen, vec![t2, t1, t1]);
}

/// Fails if rows read one by one restart the wait of a row whose version did not change, keep
/// a changed row's old sighting, show a row read as missing, or move the time of the last
/// listing (they say nothing about the other rows).
#[test]
fn rows_read_one_by_one_keep_first_seen_only_for_unchanged_versions() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(20);
    let mut observed = Observed::default();
    observed.observe_leases(t0, vec![row(0, 10), row(1, 20), row(2, 30)]);
    observed.observe_rows(
        t1,
        vec![
            (PartitionId(0), Some(row(0, 10))),
            (PartitionId(1), Some(row(1, 21))),
            (PartitionId(2), None),
        ],
    );
    let seen = sightings(&observed);
    assert_eq!(seen, vec![(0, 10, t0), (1, 21, t1)]);
    assert_eq!(observed.listed_at, Some(t0));
}

#[test]
fn offline_prohibited_and_out_of_range_partitions_are_never_taken() {
    let mut fixture = Fixture::new(3);
    fixture.set(
        0,
        LeaseRecord {
            state: LeaseState::Offline,
            ..LeaseRecord::released()
        },
        50,
        fixture.start,
    );
    fixture.set(
        1,
        LeaseRecord {
            prohibited: vec![node("me")],
            ..LeaseRecord::released()
        },
        51,
        fixture.start,
    );
    fixture.set(7, LeaseRecord::released(), 52, fixture.start);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(3600));
    let taken: Vec<u32> = plan.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(taken, vec![2]);
}

#[test]
fn expired_holdings_are_dropped_and_valid_ones_renewed() {
    let mut fixture = Fixture::new(4);
    let now = fixture.start + Duration::from_secs(5);
    fixture.hold(0, now);
    fixture.hold(1, now + Duration::from_millis(1));
    let plan = fixture.plan_at(now);
    assert_eq!(plan.drop, vec![PartitionId(0)]);
    assert_eq!(plan.renew, vec![PartitionId(1)]);
}

#[test]
fn acquisitions_per_scan_and_per_node_are_capped() {
    let mut fixture = Fixture::new(64);
    fixture.config.max_acquires_per_scan = 5;
    assert_eq!(fixture.plan_at(fixture.start).acquire.len(), 5);
    fixture.config.max_acquires_per_scan = 64;
    fixture.config.max_partitions_per_node = 10;
    let plan = fixture.plan_at(fixture.start);
    assert_eq!((plan.target, plan.acquire.len()), (10, 10));
}

#[test]
fn the_operator_record_is_not_a_member() {
    let mut fixture = Fixture::new(4);
    fixture.member("a", fixture.start);
    let listing = |version| {
        let member = |node: NodeId, version| Stored {
            key: node,
            value: MemberRecord {
                weight: 0,
                draining: true,
                ..MemberRecord::default()
            },
            version: Version::from_number(version),
        };
        vec![member(node("a"), 1), member(NodeId::operator(), version)]
    };
    fixture.observed.observe_members(fixture.start, listing(7));
    assert_eq!(
        fixture.observed.operator_mark,
        Some(Version::from_number(7))
    );
    assert!(fixture.observed.members.get(&NodeId::operator()).is_none());
    let plan = fixture.plan_at(fixture.start);
    assert_eq!(plan.live_members, 1 + 1, "a and this node");
}

#[test]
fn surplus_is_released_newest_first_and_nothing_is_taken() {
    let mut fixture = Fixture::new(4);
    let far = fixture.start + Duration::from_secs(60);
    for p in 0..4 {
        fixture.hold(p, far);
    }
    fixture
        .holdings
        .get_mut(&PartitionId(1))
        .unwrap()
        .acquired_at = fixture.start + Duration::from_secs(9);
    for peer in ["a", "b", "c"] {
        fixture.member(peer, fixture.start);
    }
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(plan.target, 1);
    assert_eq!(plan.live_members, 4);
    assert_eq!(plan.release.len(), 3);
    assert!(
        plan.release.contains(&PartitionId(1)),
        "newest acquisition released first"
    );
    assert_eq!(plan.renew.len(), 1);
    assert!(plan.acquire.is_empty());

    // Members whose record stopped changing for acquire_after no longer count.
    let later = fixture.start + fixture.config.acquire_after;
    let plan = fixture.plan_at(later);
    assert_eq!((plan.live_members, plan.target), (1, 4));
}

#[test]
fn a_draining_node_hands_everything_to_a_live_peer_but_never_to_nobody() {
    let mut fixture = Fixture::new(2);
    let far = fixture.start + Duration::from_secs(60);
    fixture.hold(0, far);
    fixture.hold(1, far);
    let alone = fixture.plan_with(fixture.start, true);
    assert_eq!(alone.target, 0);
    assert!(
        alone.release.is_empty(),
        "no live peer could take them: keep serving"
    );
    fixture.member("peer", fixture.start);
    let with_peer = fixture.plan_with(fixture.start, true);
    assert_eq!(with_peer.release, vec![PartitionId(0), PartitionId(1)]);
}

#[test]
fn a_node_at_its_target_rescues_a_partition_nobody_else_takes() {
    let mut fixture = Fixture::new(4);
    let far = fixture.start + Duration::from_secs(600);
    fixture.hold(0, far);
    fixture.hold(1, far);
    fixture.member("other", fixture.start + Duration::from_secs(60));
    // Partition 2 was released and "other" (below its target) is prohibited from it.
    fixture.set(
        2,
        LeaseRecord {
            prohibited: vec![node("other")],
            ..LeaseRecord::released()
        },
        70,
        fixture.start + Duration::from_secs(59),
    );
    fixture.set(
        3,
        held_by("other", 1),
        71,
        fixture.start + Duration::from_secs(59),
    );
    let scan = fixture.config.scan_interval;
    let at_target = fixture.plan_at(fixture.start + Duration::from_secs(59) + scan);
    assert_eq!(at_target.target, 2);
    assert!(
        at_target.acquire.is_empty(),
        "not yet an orphan: a node below target may take it"
    );
    let later =
        fixture.plan_at(fixture.start + Duration::from_secs(59) + scan * ORPHAN_GRACE_SCANS);
    let taken: Vec<u32> = later.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(taken, vec![2], "rescued beyond the target");

    // Now above target, the node hands off an unrestricted lease, not the rescued one.
    fixture.holdings.insert(
        PartitionId(2),
        Holding {
            epoch: Epoch(1),
            version: Version::from_number(99),
            record: LeaseRecord {
                prohibited: vec![node("other")],
                ..held_by("me", 1)
            },
            valid_until: far,
            acquired_at: fixture.start + Duration::from_secs(100),
            handing_off: false,
            keep_until: None,
            settled_at: None,
        },
    );
    // "other" keeps heartbeating.
    fixture
        .observed
        .members
        .get_mut(&node("other"))
        .unwrap()
        .first_seen = fixture.start + Duration::from_secs(100);
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(101));
    assert_eq!(plan.release.len(), 1);
    assert_ne!(
        plan.release[0],
        PartitionId(2),
        "the restricted partition stays"
    );
}

#[test]
fn a_lease_its_live_owner_stopped_renewing_is_taken_without_the_orphan_grace() {
    let mut fixture = Fixture::new(4);
    let far = fixture.start + Duration::from_secs(600);
    fixture.hold(0, far);
    fixture.hold(1, far);
    let wait = fixture.config.acquire_after;
    // "other" restarted: its member record keeps changing, but its lease on 2 does not.
    fixture.member("other", fixture.start + wait);
    fixture.set(2, held_by("other", 1), 70, fixture.start);
    // "gone" is no member at all: a node below its target may yet take 3.
    fixture.set(3, held_by("gone", 1), 71, fixture.start);
    let plan = fixture.plan_at(fixture.start + wait);
    assert_eq!(plan.target, 2, "at its target");
    let taken: Vec<u32> = plan.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(taken, vec![2]);
    let later =
        fixture.plan_at(fixture.start + wait + fixture.config.scan_interval * ORPHAN_GRACE_SCANS);
    let taken: Vec<u32> = later.acquire.iter().map(|a| a.partition.0).collect();
    assert_eq!(taken, vec![2, 3], "3 only once the grace is over");
}

#[test]
fn a_node_is_not_settled_while_a_record_still_names_it_but_it_does_not_hold_it() {
    let mut fixture = Fixture::new(2);
    fixture.hold(0, fixture.start + Duration::from_secs(600));
    fixture.member("other", fixture.start);
    // 1 still names this node, as its previous process left it before a restart.
    fixture.set(1, held_by("me", 4), 80, fixture.start);
    let soon = fixture.start + Duration::from_secs(1);
    // A row beyond the table naming it (left from a larger one) is none of its concern.
    fixture.set(2, held_by("me", 4), 82, fixture.start);
    let plan = fixture.plan_at(soon);
    assert_eq!((plan.target, plan.renew.len(), plan.disowned), (1, 1, 1));
    assert!(
        !plan.settled(),
        "it turns takeable later, and nobody else need be watching"
    );
    fixture.set(1, held_by("other", 5), 81, fixture.start);
    assert!(
        fixture.plan_at(soon).settled(),
        "held by another: nothing to watch"
    );
}

#[test]
fn a_draining_node_rescues_nothing() {
    let fixture = Fixture::new(1);
    let orphaned = fixture.start + fixture.config.scan_interval * (ORPHAN_GRACE_SCANS + 1);
    assert_eq!(
        fixture.plan_with(orphaned, false).acquire.len(),
        1,
        "an idle node takes it"
    );
    assert!(
        fixture.plan_with(orphaned, true).acquire.is_empty(),
        "a draining one does not"
    );
}

#[test]
fn a_session_changed_by_others_keeps_the_instant_of_its_last_renewal() {
    let start = Instant::now();
    let later = start + Duration::from_secs(5);
    let record = MemberRecord {
        heartbeat: 7,
        written_at_unix_ms: Some(1_700_000_000_000),
        ..MemberRecord::default()
    };
    let stored = |record: &MemberRecord, version: u64| Stored {
        key: node("h"),
        value: record.clone(),
        version: Version::from_number(version),
    };
    let mut observed = Observed::default();
    observed.observe_members(start, vec![stored(&record, 1)]);
    // A take's transaction, or an operator's drain, writes the record back as it was.
    let drained = MemberRecord {
        draining: true,
        ..record.clone()
    };
    observed.observe_members(later, vec![stored(&drained, 2)]);
    let seen = observed.members.get(&node("h")).unwrap();
    assert_eq!(seen.version, Version::from_number(2), "the latest version");
    assert_eq!(seen.first_seen, start, "no renewal: the wait goes on");
    assert!(seen.draining);
    assert!(!seen.seen_changing, "not proof that the node is alive");
    let renewed = MemberRecord {
        heartbeat: 8,
        ..record
    };
    observed.observe_members(later, vec![stored(&renewed, 3)]);
    assert_eq!(observed.members.get(&node("h")).unwrap().first_seen, later);
}

#[test]
fn nothing_is_rescued_beyond_the_cap() {
    let mut fixture = Fixture::new(3);
    fixture.config.max_partitions_per_node = 1;
    fixture.hold(0, fixture.start + Duration::from_secs(7200));
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(3600));
    assert_eq!(plan.renew, vec![PartitionId(0)]);
    assert!(plan.acquire.is_empty(), "at its cap: {:?}", plan.acquire);
}
