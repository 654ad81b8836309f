//! The hand-off scenario: how long a release takes to reach another node.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::group::LeaseMode;
use crate::store::LeaseStore;
use crate::types::{GroupName, PartitionId};

use super::Fleet;

/// With change notifications, a released partition is taken again without waiting for a
/// scheduled scan. Scans are scheduled every 30 s, so a take within 5 s is a notice's doing
/// (a notice that names no state, as ZooKeeper's, may wait up to a tenth of the scan
/// interval after the last scan): a fleet whose notices do not reach it passes only when a
/// scheduled scan of either node happens to fall in those 5 s, about one run in three.
/// Returns the delay.
///
/// Fails if release notices do not wake a scan (or nobody takes the partition).
pub async fn release_latency(store: Arc<dyn LeaseStore>, group: GroupName) -> Duration {
    release_latency_with_mode(store, group, LeaseMode::default()).await
}

/// [`release_latency`] in a group set to `lease_mode`. With session leases the two nodes,
/// each at its cap once every partition is held, must also renew by their sessions alone
/// before the release ([`Fleet::renews_by_sessions`]).
pub async fn release_latency_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> Duration {
    let scan = Duration::from_secs(30);
    let notified_within = scan / 6;
    let fleet = Fleet::start_with_mode(store, group, 4, 2, lease_mode, |c| {
        c.scan_interval = scan;
        c.max_partitions_per_node = 2;
    })
    .await;
    // Two nodes starting together may race for the same records; a loser tries again at
    // its next scan.
    fleet
        .wait_all_owned(scan * 3)
        .await
        .expect("two nodes own every partition");
    fleet.expect_sessions_alone().await;
    // Let a node below its cap by giving it room: one partition released.
    let (partition, released_at) = release_one(&fleet, scan * 3).await;
    // The giver is now below its cap too, and may take it back itself; whoever takes it, the
    // delay is what a notification-driven scan costs.
    let mut delay = None;
    while released_at.elapsed() < scan * 3 {
        if fleet
            .nodes
            .iter()
            .any(|node| node.lease(partition).is_some())
        {
            delay = Some(released_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delay = delay.expect("the released partition was taken again");
    println!(
        "release_latency ({lease_mode}): released partition taken again after {delay:?} (scan \
         interval {scan:?})"
    );
    assert!(
        delay < notified_within,
        "taken {delay:?} after its release: a scheduled scan, not a notice, found it"
    );
    fleet.finish().await;
    delay
}

/// Releases a partition that a node of `fleet` holds, and returns it with the instant of
/// its release. On a loaded machine a renewal late past its lease can cost a node what it
/// holds at any moment, even between reading what it holds and releasing it: then it tries
/// again, for up to `limit`.
async fn release_one(fleet: &Fleet, limit: Duration) -> (PartitionId, Instant) {
    let deadline = Instant::now() + limit;
    loop {
        let held = fleet
            .nodes
            .iter()
            .find_map(|node| Some((node, *node.owned().first()?)));
        if let Some((node, partition)) = held {
            let released_at = Instant::now();
            if node.release(partition).await {
                return (partition, released_at);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no node held a partition long enough to release it within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
