use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::group::LeaseMode;
use crate::record::{MemberRecord, Stored};
use crate::types::{NodeId, PartitionId};

pub(super) const SECOND: Duration = Duration::from_secs(1);

/// Ten-second scans and heartbeats, no jitter on the scan interval, and a table large
/// enough that a settled node may skip readings.
pub(super) fn config() -> ParticipantConfig {
    let mut config = ParticipantConfig::new(NodeId::new("b").unwrap(), 100_000);
    config.jitter = 0.0;
    config.relist_after = Duration::from_secs(60);
    config
}

fn member(node: NodeId, heartbeat: u64) -> Stored<NodeId, MemberRecord> {
    Stored {
        key: node,
        value: MemberRecord {
            weight: 1,
            draining: false,
            load: None,
            heartbeat,
            ..MemberRecord::default()
        },
        version: Version::from_number(heartbeat),
    }
}

/// A listing of three live members at their `heartbeat`th write, and the operator's record
/// at version `operator`.
fn members(heartbeat: u64, operator: u64) -> Vec<Stored<NodeId, MemberRecord>> {
    let mut records: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| member(NodeId::new(name).unwrap(), heartbeat))
        .collect();
    records.insert(0, member(NodeId::operator(), operator));
    records
}

/// The lease table read at `now` (empty), and the plan on it left nothing to do.
fn listed_and_settled(
    schedule: &mut ScanSchedule,
    observed: &mut Observed,
    now: Instant,
    rng: &mut SeededRng,
) {
    observed.observe_leases(now, Vec::new());
    schedule.leases_listed(now, now, observed, &config(), false, rng);
    schedule.planned(true);
}

/// A node that has scanned twice (its first scan waited for the fleet), read its stripe and
/// then the lease table at `start`, and found nothing to do.
pub(super) fn settled(start: Instant, rng: &mut SeededRng) -> (ScanSchedule, Observed) {
    let config = config();
    let mut observed = Observed::default();
    let mut schedule = ScanSchedule::new(start);
    observed.observe_members(start, members(1, 1));
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::MembersOnly,
        "a fleet starting together waits a scan"
    );
    observed.observe_members(start, members(3, 1));
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Stripe,
        "a node that never read the table reads its own stripe"
    );
    observed.observe_stripe(start, Vec::new());
    schedule.leases_listed(start, start, &observed, &config, false, rng);
    // Its stripe left it short: the table.
    schedule.planned(false);
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    observed.observe_leases(start, Vec::new());
    schedule.leases_listed(start, start, &observed, &config, false, rng);
    schedule.scan_succeeded(start, &config, rng);
    schedule.planned(true);
    (schedule, observed)
}

#[test]
fn a_change_notice_brings_the_scan_forward_but_keeps_the_gap() {
    let config = config();
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    schedule.scan_started(start);
    schedule.scan_succeeded(start, &config, &mut SeededRng::new(1));
    assert_eq!(schedule.next_scan(), start + 10 * SECOND);

    // Renewals and heartbeats are routine: nothing to act on.
    let renewal = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Held,
    };
    schedule.change_noticed(start, &renewal, &config);
    schedule.change_noticed(start, &Change::MemberUpdated(NodeId::operator()), &config);
    assert_eq!(schedule.next_scan(), start + 10 * SECOND);

    // A release right after a scan waits out a fiftieth of the interval.
    let release = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Released,
    };
    schedule.change_noticed(start + Duration::from_millis(1), &release, &config);
    assert_eq!(schedule.next_scan(), start + Duration::from_millis(200));
    assert!(schedule.leases_due());

    // Any other notice waits out a tenth, and never pushes a nearer scan back.
    let mut other = ScanSchedule::new(start);
    other.scan_started(start);
    other.scan_succeeded(start, &config, &mut SeededRng::new(1));
    other.change_noticed(start, &Change::Unknown, &config);
    assert_eq!(other.next_scan(), start + SECOND);
    other.change_noticed(start, &release, &config);
    assert_eq!(other.next_scan(), start + Duration::from_millis(200));
    other.change_noticed(start, &Change::Unknown, &config);
    assert_eq!(other.next_scan(), start + Duration::from_millis(200));

    // Long after the last scan, only the debounce is left.
    let late = start + 5 * SECOND;
    schedule.change_noticed(late, &Change::Member(NodeId::operator()), &config);
    assert_eq!(schedule.next_scan(), start + Duration::from_millis(200));
    let mut quiet = ScanSchedule::new(start);
    quiet.scan_started(start);
    quiet.scan_succeeded(start, &config, &mut SeededRng::new(1));
    quiet.change_noticed(late, &Change::Unknown, &config);
    assert_eq!(quiet.next_scan(), late + Duration::from_millis(5));
}

#[test]
fn failures_back_off_exponentially_and_a_recovered_write_ends_it() {
    let config = config();
    let mut rng = SeededRng::new(2);
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    let mut failed_at = start;
    let mut waits = Vec::new();
    for _ in 0..4 {
        failed_at = schedule.next_scan();
        schedule.scan_started(failed_at);
        let backoff = schedule.scan_failed(failed_at, &config, &mut rng);
        assert_eq!(
            schedule.next_scan(),
            failed_at + backoff,
            "no jitter configured"
        );
        waits.push(backoff);
    }
    assert_eq!(
        waits,
        [20 * SECOND, 40 * SECOND, 40 * SECOND, 40 * SECOND],
        "doubling, up to max_scan_backoff"
    );
    assert_eq!(config.max_scan_backoff(), 40 * SECOND);
    assert_eq!(schedule.failures(), 4);

    // A notice does not cut a back-off short.
    let now = failed_at + SECOND;
    let scheduled = schedule.next_scan();
    schedule.change_noticed(now, &Change::Unknown, &config);
    assert_eq!(schedule.next_scan(), scheduled);

    // A member write that succeeds only ends it after one failed: the store is back.
    schedule.member_written(now);
    assert_eq!(schedule.failures(), 4);
    schedule.member_write_failed();
    schedule.member_written(now);
    assert_eq!(schedule.failures(), 0);
    assert_eq!(schedule.next_scan(), now + Duration::from_millis(5));

    // The next failure starts the doubling over.
    assert_eq!(schedule.scan_failed(now, &config, &mut rng), 20 * SECOND);
    schedule.scan_succeeded(now, &config, &mut rng);
    assert_eq!(schedule.failures(), 0);
    assert_eq!(schedule.next_scan(), now + 10 * SECOND);
}

#[test]
fn a_settled_node_relists_after_relist_after_times_live_members() {
    let config = config();
    for seed in 0..20 {
        let mut rng = SeededRng::new(seed);
        let start = Instant::now();
        let (mut schedule, mut observed) = settled(start, &mut rng);
        let relist_at = schedule.relist_at().expect("a settled node relists");
        // Three live members: 180 s, spread by half either way.
        let wait = relist_at - start;
        assert!(
            (90 * SECOND..270 * SECOND).contains(&wait),
            "seed {seed}: {wait:?}"
        );
        // Every scan before then reads only the members, which keep beating.
        let mut now = start;
        let mut heartbeat = 3;
        while now + 10 * SECOND < relist_at {
            now += 10 * SECOND;
            heartbeat += 1;
            observed.observe_members(now, members(heartbeat, 1));
            assert_eq!(
                schedule.reading(now, &observed, &config, false),
                Reading::MembersOnly,
                "seed {seed}, {:?} in",
                now - start
            );
        }
        observed.observe_members(relist_at, members(heartbeat + 1, 1));
        assert_eq!(
            schedule.reading(relist_at, &observed, &config, false),
            Reading::Leases
        );
    }
}

#[test]
fn an_operator_command_forces_a_lease_listing() {
    let config = config();
    let mut rng = SeededRng::new(3);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    let now = start + 10 * SECOND;
    observed.observe_members(now, members(4, 1));
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::MembersOnly
    );
    observed.observe_members(now, members(5, 2));
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::Leases
    );
    // Once read, the new mark is the one compared against.
    listed_and_settled(&mut schedule, &mut observed, now, &mut rng);
    assert_eq!(
        schedule.reading(now, &observed, &config, false),
        Reading::MembersOnly
    );
}

#[test]
fn a_lost_lease_or_a_membership_change_sends_a_settled_node_to_the_table() {
    let config = config();
    let mut rng = SeededRng::new(4);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    schedule.holdings_changed();
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    schedule.planned(true);
    assert_eq!(schedule.listing_cause(), Some(ListingCause::Unsettled));
    schedule.planned(true);
    let mut fewer = members(4, 1);
    fewer.retain(|m| m.key.as_str() != "c");
    observed.observe_members(start, fewer);
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::Membership));
}

#[test]
fn a_failed_reading_and_a_request_send_the_next_scan_to_the_table_each_named() {
    let config = config();
    let mut rng = SeededRng::new(6);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    schedule.reading_failed();
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::ReadFailed));
    listed_and_settled(&mut schedule, &mut observed, start, &mut rng);
    // The first cause asked for counts; later ones until the table is read do not.
    schedule.want_leases(ListingCause::LostRace);
    schedule.want_leases(ListingCause::Notice);
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::LostRace));
    // A failed reading wins over what asked before it.
    schedule.reading_failed();
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::ReadFailed));
    // A notice of a row whose state it does not say sends the node to the table.
    listed_and_settled(&mut schedule, &mut observed, start, &mut rng);
    schedule.change_noticed(start, &Change::Lease(PartitionId(3)), &config);
    assert_eq!(
        schedule.reading(start, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::Notice));
    // A member created or deleted, or notices lost, bring the next scan forward; the table
    // is read only if what the scan reads asks for it.
    for change in [Change::Member(NodeId::new("z").unwrap()), Change::Unknown] {
        listed_and_settled(&mut schedule, &mut observed, start, &mut rng);
        let later = start + Duration::from_secs(3);
        schedule.scan_started(later);
        schedule.scan_succeeded(later, &config, &mut rng);
        schedule.change_noticed(later, &change, &config);
        assert_eq!(
            schedule.next_scan(),
            later + config.scan_interval / NOTICE_SCAN_GAP_DIVISOR,
            "{change:?}"
        );
        assert_eq!(
            schedule.reading(later, &observed, &config, false),
            Reading::MembersOnly,
            "{change:?}"
        );
    }
    // Listed every scan, the table is read anyway.
    let mut every = config.clone();
    every.relist_after = Duration::ZERO;
    schedule.change_noticed(start, &Change::Unknown, &every);
    assert!(schedule.leases_due());
    let names: std::collections::BTreeSet<_> = ListingCause::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(
        names.len(),
        ListingCause::ALL.len(),
        "every cause named apart"
    );
}

/// What a settled node reads at `seconds` after `start` while member `c` stays at the write
/// it showed then and the others keep beating, in `mode`, with an `acquire_after` of 22 s
/// (the member timeout is 30 s).
fn reading_with_c_silent(mode: LeaseMode, seconds: u64) -> (Reading, Option<ListingCause>) {
    let mut config = config();
    config.lease_validity = 15 * SECOND;
    config.acquire_after = 22 * SECOND;
    let mut rng = SeededRng::new(5);
    let start = Instant::now();
    let (mut schedule, mut observed) = settled(start, &mut rng);
    observed.lease_mode = mode;
    let now = start + Duration::from_secs(seconds);
    let mut listing = members(3 + seconds, 1);
    listing[3] = member(NodeId::new("c").unwrap(), 3);
    observed.observe_members(now, listing);
    let reading = schedule.reading(now, &observed, &config, false);
    (reading, schedule.listing_cause())
}

#[test]
fn a_member_missing_heartbeats_sends_a_settled_node_to_the_table_once_its_leases_may_be_free() {
    // Per partition, waits run on each row's version as this node first saw it: it reads
    // the table at the first missed heartbeat, to start them.
    let missed = Some(ListingCause::MissedHeartbeat);
    assert_eq!(
        reading_with_c_silent(LeaseMode::PerPartition, 10).0,
        Reading::MembersOnly
    );
    assert_eq!(
        reading_with_c_silent(LeaseMode::PerPartition, 11),
        (Reading::Leases, missed)
    );
    // By session they run on the member record, read every scan, from its last renewal:
    // nothing is free before acquire_after of silence, so the table waits until then.
    for seconds in [11, 21] {
        assert_eq!(
            reading_with_c_silent(LeaseMode::Session, seconds).0,
            Reading::MembersOnly,
            "{seconds} s"
        );
    }
    assert_eq!(
        reading_with_c_silent(LeaseMode::Session, 23),
        (Reading::Leases, missed)
    );
    // Past the member timeout, `c` no longer counts: the membership changed.
    assert_eq!(
        reading_with_c_silent(LeaseMode::Session, 31),
        (Reading::Leases, Some(ListingCause::Membership))
    );
}

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

    let mut at_target = ScanSchedule::new(start);
    at_target.scan_started(start);
    at_target.scan_succeeded(start, &config, &mut SeededRng::new(1));
    at_target.took(&Takes { held: 10, ..lost }, &config);
    assert!(at_target.next_scan() > soon, "nothing more to take");
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
