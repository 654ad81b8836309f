//! The throttling scenario: scans against a store that refuses reads for a while.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::participant::Participant;
use crate::store::LeaseStore;
use crate::types::GroupName;

use super::{scenario_config, Fleet, Versions};

/// What [`throttled_scans`] measured while listings were throttled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleFigures {
    /// Listings the whole fleet attempted, of member and lease records. A throttled scan
    /// stops at its member listing, so each scan counts once.
    pub reads: u64,
    /// The most reads scans that back off allow: after a short ramp, one per node per
    /// `max_scan_backoff`.
    pub reads_allowed: u64,
    /// The fewest: throttled scans still come at least every `max_scan_backoff`, so that a
    /// store that recovers is read again within a few scan intervals.
    pub reads_required: u64,
    /// Reads the fleet would have made at its normal scan interval.
    pub reads_unthrottled: u64,
    /// Batch writes made (renewals, in a group that renews per partition).
    pub batches: u64,
    /// Renewals made: the batch writes per partition; with session leases, the heartbeats
    /// the nodes wrote into their member records.
    pub renewals: u64,
    /// Renewals expected at the heartbeat.
    pub batches_expected: u64,
}

impl ThrottleFigures {
    /// The bounds for `nodes` nodes with `config`'s timings throttled for `window`, with the
    /// counts measured.
    fn new(
        config: &ParticipantConfig,
        nodes: u64,
        window: Duration,
        reads: u64,
        batches: u64,
    ) -> Self {
        let per = |period: Duration| window.as_nanos() / period.as_nanos().max(1);
        let count = |scans: u128| u64::try_from(scans).unwrap_or(u64::MAX) * nodes;
        let backoff = config.max_scan_backoff();
        // A throttled node's waits double from two scan intervals up to max_scan_backoff,
        // each spread by the jitter either way. Fastest: the first scan at once, then every
        // wait spread short. Counting each wait as the longest leaves one scan over for the
        // first and one for the shorter waits before the longest; one more allows for a
        // member write that failed against a real server, which ends a back-off early.
        let allowed = per(backoff.mul_f64(1.0 - config.jitter)) + 3;
        // Slowest: the first scan a scan interval late, then every wait spread long. Counting
        // only the longest waits makes up for the first; one fewer allows for time spent on
        // renewals against a slow server.
        let required = per(backoff.mul_f64(1.0 + config.jitter)).saturating_sub(1);
        ThrottleFigures {
            reads,
            reads_allowed: count(allowed),
            reads_required: count(required),
            reads_unthrottled: count(per(config.scan_interval)),
            batches,
            renewals: batches,
            batches_expected: count(per(config.heartbeat)),
        }
    }
}

/// Two nodes hold 8 partitions; then every listing is throttled for 8 s. Scans must back off
/// to `max_scan_backoff`: every listing either node attempts is counted, and there must be far
/// fewer than the scan interval would make, but still about one per node per back-off.
/// Renewals keep their schedule meanwhile (no lease lost, renewals at the heartbeat rate).
pub async fn throttled_scans(store: Arc<dyn LeaseStore>, group: GroupName) -> ThrottleFigures {
    throttled_scans_with_mode(store, group, LeaseMode::default()).await
}

/// [`throttled_scans`] in a group set to `lease_mode`. With session leases the renewals
/// counted are the heartbeats in the member records, and no lease record may be written
/// while the listings are throttled: a fleet that keeps every lease renews by its sessions
/// alone, however its scans fare.
pub async fn throttled_scans_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> ThrottleFigures {
    let throttle = Arc::new(crate::testing::FaultyStore::new(Arc::clone(&store)));
    // Leases of 2.4 s where the other scenarios have 800 ms, still renewed every 200 ms:
    // what this measures is the scans, whose bounds follow the scan interval alone, and a
    // loaded machine held renewals to Azurite back past 600 ms, so that a node lost all it
    // held.
    let longer = |config: &mut ParticipantConfig| {
        config.lease_validity = Duration::from_millis(2400);
        config.acquire_after = Duration::from_millis(3600);
    };
    let fleet = Fleet::start_with_mode(throttle.clone(), group, 8, 2, lease_mode, longer).await;
    fleet
        .wait_balanced(Duration::from_secs(20))
        .await
        .expect("two nodes share every partition");
    let mut config = scenario_config("x", &fleet.group, 8);
    longer(&mut config);
    // Long enough for several of the longest waits, so that the bounds tell back-off from
    // none, and a back-off that stops at max_scan_backoff from one that keeps doubling.
    let window = Duration::from_secs(8);
    // Read behind the throttle, which would refuse the listings and count them as scans.
    let read = || Versions::read(&*store, &fleet.group);
    let before = read().await.expect("read the records");
    // Scans, counted by their listings: a renewal that failed on a loaded machine re-reads
    // the session and its leases record by record, which is no scan.
    let scans = || throttle.listings() + throttle.member_listings();
    let (reads_before, batches_before) = (scans(), throttle.batches());
    throttle.set_reads_throttled(true);
    let started = Instant::now();
    let mut lowest_owned = fleet.owned_total();
    while started.elapsed() < window {
        lowest_owned = lowest_owned.min(fleet.owned_total());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Counted before the throttle lifts, so that no scan after the window is counted.
    let (reads, batches) = (scans() - reads_before, throttle.batches() - batches_before);
    throttle.set_reads_throttled(false);
    let after = read().await.expect("read the records");
    let nodes = fleet.nodes.len() as u64;
    let mut figures = ThrottleFigures::new(&config, nodes, window, reads, batches);
    let session = lease_mode == LeaseMode::Session;
    if session {
        let nodes = fleet.nodes.iter().map(Participant::node);
        figures.renewals = nodes.map(|node| after.renewals_since(&before, node)).sum();
    }
    println!(
        "throttled_scans ({lease_mode}): over {window:?} of throttling, {} listings attempted \
         ({}..={} allowed with back-off, about {} without), {} renewals (about {} expected at \
         the heartbeat), every lease kept: {}",
        figures.reads,
        figures.reads_required,
        figures.reads_allowed,
        figures.reads_unthrottled,
        figures.renewals,
        figures.batches_expected,
        lowest_owned == 8
    );
    assert_eq!(
        lowest_owned, 8,
        "renewals kept every lease while scans were throttled"
    );
    assert!(
        figures.reads <= figures.reads_allowed,
        "scans backed off: {figures:?}"
    );
    assert!(
        figures.reads >= figures.reads_required,
        "throttled scans kept retrying at the longest back-off: {figures:?}"
    );
    assert!(
        figures.renewals * 2 >= figures.batches_expected,
        "renewals kept their schedule: {figures:?}"
    );
    if session {
        let written = after.leases_written_since(&before);
        assert!(
            written.is_empty(),
            "lease records of partitions {written:?} were written while the sessions renewed \
             every lease: {figures:?}"
        );
    }
    fleet.finish().await;
    figures
}
