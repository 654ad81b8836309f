//! Scans against a store that throttles every listing, under controlled time: Tokio's clock
//! is paused and advances only when every task waits, so the counts are exact for the draws
//! made and take no real time.

use std::sync::Arc;

use leasehold::testing::scenarios::throttled_scans;
use leasehold::testing::unique_group;
use leasehold::MemoryStore;

/// Every listing the fleet makes while throttled is counted, and must fall between one per node
/// per `max_scan_backoff` (after a short ramp) and a little over that.
///
/// Fails if failed scans are retried at the scan interval (or any fixed fraction of it) with
/// no back-off, if the back-off stops short of `max_scan_backoff` (capped at two scan
/// intervals, say), or if it keeps doubling past `max_scan_backoff`.
#[tokio::test(start_paused = true)]
async fn throttled_scans_back_off_to_the_longest_wait_and_no_further() {
    throttled_scans(Arc::new(MemoryStore::new()), unique_group("throttle")).await;
}
