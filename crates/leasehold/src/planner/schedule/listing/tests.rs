use std::time::Duration;

use tokio::time::Instant;

use super::super::tests::{config, settled, SECOND};
use super::super::{ListingCause, Reading};
use crate::clock::SeededRng;
use crate::error::StoreError;

fn timed_out() -> StoreError {
    StoreError::Timeout(5 * SECOND)
}

#[test]
fn a_timed_out_listing_waits_a_back_off_growing_with_the_table_while_scans_go_on() {
    let config = config();
    let mut rng = SeededRng::new(3);
    let start = Instant::now();
    let (mut schedule, observed) = settled(start, &mut rng);
    // Half the ceiling of max_scan_backoff per 4,096 partitions: 25 blocks of the test's
    // 100,000, 1,000 s.
    assert_eq!(config.max_listing_backoff(), 1000 * SECOND);
    let wait = schedule.listing_failed(start, &timed_out(), &config, &mut rng);
    assert_eq!(wait, Some(500 * SECOND), "no jitter configured");
    assert_eq!(schedule.listing_retry_at(), Some(start + 500 * SECOND));

    // Scans meanwhile read the member records and plan nothing; then the table, named for
    // the failure.
    let meanwhile = start + 499 * SECOND;
    assert_eq!(
        schedule.reading(meanwhile, &observed, &config, false),
        Reading::MembersOnly
    );
    // A draining node plans on the view it has, so that it releases without waiting.
    assert_eq!(
        schedule.reading(meanwhile, &observed, &config, true),
        Reading::View
    );
    let later = start + 500 * SECOND;
    assert_eq!(
        schedule.reading(later, &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::ReadFailed));

    // The next failures wait the whole ceiling.
    let mut waits = vec![wait.unwrap()];
    for _ in 0..2 {
        waits.push(
            schedule
                .listing_failed(later, &timed_out(), &config, &mut rng)
                .unwrap(),
        );
    }
    assert_eq!(waits, [500, 1000, 1000].map(|s| s * SECOND));

    // A listing that arrives starts the count again.
    schedule.listing_succeeded();
    assert_eq!(schedule.listing_retry_at(), None);
    assert_eq!(
        schedule.listing_failed(later, &timed_out(), &config, &mut rng),
        Some(500 * SECOND)
    );

    // On a table listed every scan: two scan intervals, then the scan back-off's ceiling.
    let mut small = config.clone();
    small.partitions = 1024;
    let throttled = StoreError::Throttled {
        message: "slow down".into(),
    };
    let mut schedule = super::super::ScanSchedule::new(start);
    let waits: Vec<_> = (0..4)
        .map(|_| {
            schedule
                .listing_failed(start, &throttled, &small, &mut rng)
                .unwrap()
        })
        .collect();
    assert_eq!(waits, [20, 40, 40, 40].map(|s| s * SECOND));
}

#[test]
fn a_listing_refused_or_unreachable_is_tried_again_at_the_next_scan() {
    let config = config();
    let mut rng = SeededRng::new(4);
    let start = Instant::now();
    let (mut schedule, observed) = settled(start, &mut rng);
    let refused = StoreError::Unavailable {
        message: "connection refused".into(),
        source: None,
    };
    assert_eq!(
        schedule.listing_failed(start, &refused, &config, &mut rng),
        None
    );
    assert_eq!(schedule.listing_retry_at(), None);
    assert_eq!(
        schedule.reading(start + Duration::from_millis(1), &observed, &config, false),
        Reading::Leases
    );
    assert_eq!(schedule.listing_cause(), Some(ListingCause::ReadFailed));
}
