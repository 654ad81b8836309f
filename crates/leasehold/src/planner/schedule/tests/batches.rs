//! Readings while a node takes its share: batches planned on the view, races lost, rows
//! named by notices, stripes, and a fleet starting together.

use super::*;

#[test]
fn a_full_batch_lets_the_next_scan_plan_on_the_view() {
    let config = config();
    let mut rng = SeededRng::new(5);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    let batch = config.max_acquires_per_scan as usize;
    let takes = Takes {
        planned: batch,
        taken: batch,
        lost_races: 0,
        off_stripe: 0,
        released: false,
        held: batch,
        target: 3 * batch as u32,
    };
    schedule.planned(false);
    schedule.took(&takes, &config);
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::View
    );
    // Not after a failed take, which may have met a row another node took.
    schedule.took(
        &Takes {
            taken: batch - 1,
            ..takes
        },
        &config,
    );
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    // Nor once the view is as old as acquire_after, in the same membership.
    schedule.took(&takes, &config);
    let old = start + config.acquire_after;
    observed.observe_members(old, members(8, 1));
    assert_eq!(
        schedule.reading(old, &observed, &config, false),
        Reading::Leases
    );
}

/// Fails if a node below its target that lost a race for a free row waits for its next
/// scheduled scan (a whole scan interval) instead of scanning again soon, or if it also does
/// so when it reached its target anyway or the store is failing.
#[test]
fn a_lost_race_below_target_brings_the_next_scan_forward() {
    let config = config();
    let start = Instant::now();
    let lost = Takes {
        planned: 3,
        taken: 2,
        lost_races: 1,
        off_stripe: 0,
        released: false,
        held: 9,
        target: 10,
    };
    let soon = start + config.scan_interval / RELEASE_SCAN_GAP_DIVISOR;
    let mut schedule = ScanSchedule::new(start);
    schedule.scan_started(start);
    schedule.scan_succeeded(start, &config, &mut SeededRng::new(1));
    assert!(
        schedule.next_scan() > soon,
        "a scan interval away to begin with"
    );
    schedule.took(&lost, &config);
    assert_eq!(schedule.next_scan(), soon);
    assert_eq!(schedule.scan_cause(), ScanCause::LostRace);

    let mut at_target = ScanSchedule::new(start);
    at_target.scan_started(start);
    at_target.scan_succeeded(start, &config, &mut SeededRng::new(1));
    at_target.took(&Takes { held: 10, ..lost }, &config);
    assert!(at_target.next_scan() > soon, "nothing more to take");
    assert_eq!(at_target.scan_cause(), ScanCause::Interval);
}

/// Fails if a settled node reads the whole table for a hand-off it heard of, rather than the
/// rows the notices named; or if it goes on reading rows one by one when so many are named
/// that a listing is cheaper, or when a notice names nothing.
#[test]
fn a_settled_node_reads_only_the_rows_notices_name_as_released() {
    let config = config();
    let mut rng = SeededRng::new(6);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    observed.lease_mode = crate::group::LeaseMode::Session;
    let now = start + 10 * SECOND;
    observed.observe_members(now, members(4, 1));
    let released = |p: u32| Change::LeaseWritten {
        partition: PartitionId(p),
        state: LeaseState::Released,
    };
    // Settled, at its target: the rows wait for the next scan, which is not brought forward.
    let early = start + SECOND;
    let next = schedule.next_scan();
    assert!(next > early + SECOND);
    schedule.change_noticed(early, &released(7), &config);
    schedule.change_noticed(early, &released(3), &config);
    assert_eq!(schedule.next_scan(), next);
    schedule.change_noticed(
        now,
        &Change::LeaseWritten {
            partition: PartitionId(9),
            state: LeaseState::Offline,
        },
        &config,
    );
    assert!(!schedule.leases_due());
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Rows
    );
    assert_eq!(
        schedule.take_rows_due(),
        [PartitionId(3), PartitionId(7), PartitionId(9)]
    );
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::MembersOnly
    );
    // One of them taken: read again to see by whom. A renewal of another row: nothing.
    let held = |p: u32| Change::LeaseWritten {
        partition: PartitionId(p),
        state: LeaseState::Held,
    };
    schedule.change_noticed(now, &held(7), &config);
    schedule.change_noticed(now, &held(8), &config);
    assert_eq!(schedule.take_rows_due(), [PartitionId(7)]);
    schedule.change_noticed(now, &held(7), &config);
    assert!(schedule.take_rows_due().is_empty());

    // Per partition, an old view would misjudge held rows: the table instead.
    schedule.change_noticed(now, &released(5), &config);
    observed.lease_mode = crate::group::LeaseMode::PerPartition;
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Leases
    );
    observed.lease_mode = crate::group::LeaseMode::Session;
    schedule.take_rows_due();

    // More than a listing's worth: the table.
    for p in 0..=MAX_ROW_READS as u32 {
        schedule.change_noticed(now, &released(p), &config);
    }
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Leases
    );
    assert!(schedule.take_rows_due().is_empty());
    listed_and_settled(&mut schedule, &mut observed, now, &mut rng);

    // Not settled, a release brings the scan forward, to the table.
    let before = schedule.next_scan();
    schedule.holdings_changed();
    schedule.change_noticed(early, &released(6), &config);
    assert!(schedule.next_scan() < before);
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Leases
    );
    listed_and_settled(&mut schedule, &mut observed, now, &mut rng);

    // A notice that names no state: the table, and the rows named before are dropped.
    schedule.change_noticed(now, &released(1), &config);
    schedule.change_noticed(now, &Change::Lease(PartitionId(2)), &config);
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Leases
    );
    assert!(schedule.take_rows_due().is_empty());
}

/// Fails if a node that reads the table every scan (a zero `relist_after`) collects rows to
/// read one by one: its next listing reads them anyway.
#[test]
fn a_node_listing_every_scan_collects_no_rows() {
    let mut config = config();
    config.relist_after = Duration::ZERO;
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    schedule.change_noticed(
        start,
        &Change::LeaseWritten {
            partition: PartitionId(4),
            state: LeaseState::Released,
        },
        &config,
    );
    assert!(schedule.leases_due());
    assert!(schedule.take_rows_due().is_empty());
}

#[test]
fn after_its_stripe_a_node_reads_the_whole_table_whenever_it_reads() {
    let config = config();
    for lease_mode in [
        crate::group::LeaseMode::PerPartition,
        crate::group::LeaseMode::Session,
    ] {
        let start = Instant::now();
        let mut rng = SeededRng::new(3);
        let mut schedule = ScanSchedule::new(start);
        let mut observed = Observed {
            lease_mode,
            ..Observed::default()
        };
        observed.observe_members(start, members(5, 1));
        assert_eq!(
            schedule.reading(start, &observed, &config, false),
            Reading::Stripe,
            "a node joining a running fleet reads its stripe first too"
        );
        // The reading failed: the stripe again.
        schedule.want_leases(ListingCause::WriteFailed);
        assert_eq!(
            schedule.reading(start, &observed, &config, false),
            Reading::Stripe
        );
        observed.observe_stripe(start, Vec::new());
        assert!(observed.partial);
        schedule.leases_listed(start, start, &observed, &config, false, &mut rng);
        schedule.scan_succeeded(start, &config, &mut rng);
        // Its stripe did not give it its share: the table.
        schedule.planned(false);
        let later = start + 10 * SECOND;
        observed.observe_members(later, members(6, 1));
        assert_eq!(
            schedule.reading(later, &observed, &config, false),
            Reading::Leases
        );
        observed.observe_leases(later, Vec::new());
        assert!(!observed.partial, "a listing shows the whole table");
    }
}

#[test]
fn a_small_table_is_read_whole_from_the_start() {
    let mut config = config();
    config.relist_after = Duration::ZERO;
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    let mut observed = Observed::default();
    observed.observe_members(start, members(5, 1));
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
}
/// `count` members at their first or second write.
fn young_members(count: usize) -> Vec<Stored<NodeId, MemberRecord>> {
    (0..count)
        .map(|i| member(NodeId::new(format!("n{i:04}")).unwrap(), 1 + (i % 2) as u64))
        .collect()
}

#[test]
fn a_starting_fleet_waits_while_its_members_keep_registering() {
    let config = config();
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    let mut observed = Observed::default();
    for count in [10, 40, 90] {
        observed.observe_members(start, young_members(count));
        assert_eq!(
            schedule.reading(start, &observed, &config, false),
            Reading::MembersOnly,
            "{count} members, more than at the last scan"
        );
    }
    observed.observe_members(start, young_members(90));
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Stripe,
        "the same members as at the last scan"
    );

    // A trickle that never stops is waited on for a minute at most.
    let mut schedule = ScanSchedule::new(start);
    let mut readings = Vec::new();
    for count in 1..=10 {
        observed.observe_members(start, young_members(count * 10));
        readings.push(schedule.reading(start, &observed, &config, false));
    }
    let waits = readings
        .iter()
        .take_while(|r| **r == Reading::MembersOnly)
        .count();
    assert_eq!(waits, MAX_START_WAITS as usize);
    assert!(readings[waits..].iter().all(|r| *r == Reading::Stripe));
}

#[test]
fn a_node_taking_its_stripe_reads_the_stripe_again_until_a_plan_takes_nothing() {
    let config = config();
    let start = Instant::now();
    let mut rng = SeededRng::new(5);
    let mut schedule = ScanSchedule::new(start);
    let mut observed = Observed::default();
    observed.observe_members(start, members(3, 1));
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Stripe
    );
    observed.observe_stripe(start, Vec::new());
    schedule.leases_listed(start, start, &observed, &config, false, &mut rng);
    schedule.planned(false);
    // The last, short batch of its stripe, all taken: the stripe again, to see nothing is
    // left in it.
    let batch = Takes {
        planned: 2,
        taken: 2,
        lost_races: 0,
        off_stripe: 0,
        released: false,
        held: 64,
        target: 64,
    };
    schedule.took(&batch, &config);
    let soon = start + config.scan_interval;
    observed.observe_members(soon, members(4, 1));
    assert_eq!(
        schedule.reading(soon, &observed, &config, false),
        Reading::Stripe
    );
    // A plan that takes nothing: the table.
    schedule.planned(false);
    assert_eq!(
        schedule.clone().reading(soon, &observed, &config, false),
        Reading::Leases
    );
    // Nor after a take that failed.
    schedule.took(
        &Takes {
            taken: 1,
            lost_races: 1,
            ..batch
        },
        &config,
    );
    assert_eq!(
        schedule.reading(soon, &observed, &config, false),
        Reading::Leases
    );
}

/// Rows named as vacated since the last listing are read one by one up to four times
/// `MAX_ROW_READS` of them, however they were read in between; the next sends the node to
/// the table.
#[test]
fn a_node_reads_vacated_rows_one_by_one_up_to_a_bound_then_the_table() {
    let config = config();
    let mut rng = SeededRng::new(9);
    let start = Instant::now();
    let (mut schedule, _) = settled(start, &mut rng);
    let released = |p: usize| Change::LeaseWritten {
        partition: PartitionId(p as u32),
        state: LeaseState::Released,
    };
    let bound = 4 * MAX_ROW_READS;
    for p in 0..bound {
        schedule.change_noticed(start, &released(p), &config);
        // Read at once, each: never more than MAX_ROW_READS due together.
        assert_eq!(schedule.take_rows_due(), [PartitionId(p as u32)]);
        assert!(!schedule.leases_due(), "row {p}");
    }
    schedule.change_noticed(start, &released(bound), &config);
    assert!(schedule.leases_due());
}
