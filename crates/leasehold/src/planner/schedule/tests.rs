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

/// A scan plans after every reading but of the member records alone, which leaves its view
/// of the table as old as it was.
#[test]
fn every_reading_but_the_members_alone_is_planned_on() {
    assert!(!Reading::MembersOnly.plans());
    for reading in [
        Reading::View,
        Reading::Leases,
        Reading::Stripe,
        Reading::Rows,
    ] {
        assert!(reading.plans(), "{reading:?}");
    }
}

#[test]
fn a_change_notice_brings_the_scan_forward_but_keeps_the_gap() {
    let config = config();
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    assert_eq!(schedule.scan_cause(), ScanCause::Start);
    schedule.scan_started(start);
    schedule.scan_succeeded(start, &config, &mut SeededRng::new(1));
    assert_eq!(schedule.next_scan(), start + 10 * SECOND);
    assert_eq!(schedule.scan_cause(), ScanCause::Interval);

    // Renewals and heartbeats are routine: nothing to act on.
    let renewal = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Held,
    };
    schedule.change_noticed(start, &renewal, &config);
    schedule.change_noticed(start, &Change::MemberUpdated(NodeId::operator()), &config);
    assert_eq!(schedule.next_scan(), start + 10 * SECOND);
    assert_eq!(schedule.scan_cause(), ScanCause::Interval);

    // A release right after a scan waits out a fiftieth of the interval.
    let release = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Released,
    };
    schedule.change_noticed(start + Duration::from_millis(1), &release, &config);
    assert_eq!(schedule.next_scan(), start + Duration::from_millis(200));
    assert_eq!(schedule.scan_cause(), ScanCause::Release);
    assert!(schedule.leases_due());

    // Any other notice waits out a tenth, and never pushes a nearer scan back.
    let mut other = ScanSchedule::new(start);
    other.scan_started(start);
    other.scan_succeeded(start, &config, &mut SeededRng::new(1));
    other.change_noticed(start, &Change::Unknown, &config);
    assert_eq!(other.next_scan(), start + SECOND);
    assert_eq!(other.scan_cause(), ScanCause::Notice);
    other.change_noticed(start, &release, &config);
    assert_eq!(other.next_scan(), start + Duration::from_millis(200));
    other.change_noticed(start, &Change::Unknown, &config);
    assert_eq!(other.next_scan(), start + Duration::from_millis(200));
    assert_eq!(
        other.scan_cause(),
        ScanCause::Release,
        "the notice that set it"
    );

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

/// A member write that succeeds after a failed one, while scans succeed, is no outage
/// ending: the next scan keeps its time.
#[test]
fn a_member_write_recovered_while_scans_succeed_moves_no_scan() {
    let config = config();
    let start = Instant::now();
    let mut schedule = ScanSchedule::new(start);
    schedule.scan_started(start);
    schedule.scan_succeeded(start, &config, &mut SeededRng::new(1));
    let next = schedule.next_scan();
    schedule.member_write_failed();
    schedule.member_written(start + SECOND);
    assert_eq!(schedule.next_scan(), next);
    assert_eq!(schedule.scan_cause(), ScanCause::Interval);
}

/// A node that reads the table at every scan (`relist_after` zero) answers a release
/// notice by scanning soon, settled or not: it keeps no rows to read one by one.
#[test]
fn a_node_reading_the_table_every_scan_scans_soon_after_a_release() {
    let mut config = config();
    config.relist_after = Duration::ZERO;
    let start = Instant::now();
    let mut rng = SeededRng::new(1);
    let mut schedule = ScanSchedule::new(start);
    schedule.scan_started(start);
    let observed = Observed::default();
    schedule.leases_listed(start, start, &observed, &config, false, &mut rng);
    schedule.scan_succeeded(start, &config, &mut rng);
    schedule.planned(true);
    assert!(!schedule.leases_due());
    let release = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Released,
    };
    schedule.change_noticed(start + SECOND, &release, &config);
    assert_eq!(
        schedule.next_scan(),
        start + SECOND + Duration::from_millis(5)
    );
    assert_eq!(schedule.scan_cause(), ScanCause::Release);
    assert!(schedule.take_rows_due().is_empty());
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
        assert_eq!(schedule.scan_cause(), ScanCause::Retry);
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
    assert_eq!(schedule.scan_cause(), ScanCause::Retry);

    // A member write that succeeds only ends it after one failed: the store is back.
    schedule.member_written(now);
    assert_eq!(schedule.failures(), 4);
    schedule.member_write_failed();
    schedule.member_written(now);
    assert_eq!(schedule.failures(), 0);
    assert_eq!(schedule.next_scan(), now + Duration::from_millis(5));
    assert_eq!(schedule.scan_cause(), ScanCause::Recovered);

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

mod batches;

#[test]
fn in_a_large_group_a_release_brings_a_scan_forward_less() {
    let config = config();
    let start = Instant::now();
    let release = Change::LeaseWritten {
        partition: PartitionId(3),
        state: LeaseState::Released,
    };
    let after_release = |count: usize| {
        let mut schedule = ScanSchedule::new(start);
        let mut observed = Observed::default();
        let records: Vec<_> = (0..count)
            .map(|i| member(NodeId::new(format!("n{i}")).unwrap(), 1))
            .collect();
        observed.observe_members(start, records);
        schedule.reading(start, &observed, &config, false);
        schedule.scan_started(start);
        schedule.scan_succeeded(start, &config, &mut SeededRng::new(1));
        schedule.change_noticed(start, &release, &config);
        (schedule.next_scan() - start, schedule.scan_cause())
    };
    // Up to ten members, a fiftieth of the interval, as in any group.
    assert_eq!(
        after_release(10),
        (Duration::from_millis(200), ScanCause::Release)
    );
    assert_eq!(after_release(100), (2 * SECOND, ScanCause::Release));
    // A thousand nodes short of their share would each list a thousand member records for
    // every release: the row waits for the scheduled scans.
    assert_eq!(after_release(1000), (10 * SECOND, ScanCause::Interval));
}
