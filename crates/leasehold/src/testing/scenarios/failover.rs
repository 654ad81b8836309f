//! Failover scenarios: a node crashes, or the store goes away and comes back.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::group::LeaseMode;
use crate::store::LeaseStore;
use crate::types::LossReason;
use crate::types::{GroupName, NodeId, PartitionId, Version};

use super::{scenario_config, FenceEvent, Fleet};

/// Three nodes share 12 partitions; one crashes; the survivors take its partitions, with no
/// overlap and increasing epochs. Returns the failover time, counted from the crash.
///
/// `acquire_after` runs from when a survivor saw the dead node's last renewal, which went out
/// up to a heartbeat plus a slow store call before the crash; so each takeover is checked
/// against that renewal (the node's deadline for the lease, less the validity), not the crash.
pub async fn crash_takeover(store: Arc<dyn LeaseStore>, group: GroupName) -> Duration {
    crash_takeover_with_mode(store, group, LeaseMode::default()).await
}

/// [`crash_takeover`] in a group set to `lease_mode`.
///
/// With session leases it also checks that the settled fleet renews by its sessions alone
/// before the crash ([`Fleet::renews_by_sessions`]), and that the takeover changed the
/// crashed node's session: a take of a lease whose holder has a session is one transaction
/// with that session, so that the holder, were it only paused, would fail its next renewal.
pub async fn crash_takeover_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> Duration {
    let mut fleet = Fleet::start_with_mode(store, group, 12, 3, lease_mode, |_| {}).await;
    // Balanced first, so that no hand-off (taken without waiting) overlaps the crash.
    fleet
        .wait_balanced(Duration::from_secs(20))
        .await
        .expect("three nodes share every partition evenly");
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.expect_sessions_alone().await;
    let timings = scenario_config("x", &fleet.group, 1);
    // Read before the crash: a renewal sent after this only moves the takeover later.
    let renewed: BTreeMap<PartitionId, Instant> = fleet.nodes[0]
        .leases()
        .iter()
        .map(|lease| {
            (
                lease.partition(),
                lease.valid_until() - timings.lease_validity,
            )
        })
        .collect();
    assert!(!renewed.is_empty(), "the node to crash holds partitions");
    let crashed_at = Instant::now();
    let crashed = fleet.crash(0);
    // Read after the crash: a renewal still in flight then can only change the session
    // again, never hide a take's change.
    let session_at_crash = session_version(&fleet, &crashed).await;
    let failover = fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("survivors take over every partition");
    let longest = check_takeovers(
        &fleet.recorder.events(),
        &renewed,
        (crashed_at, &crashed),
        timings.acquire_after,
    );
    println!(
        "crash_takeover ({lease_mode}): {crashed} crashed; all partitions owned again after \
         {failover:?}, at most {longest:?} after a last renewal (acquire_after {:?})",
        timings.acquire_after
    );
    if lease_mode == LeaseMode::Session {
        assert_ne!(
            session_version(&fleet, &crashed).await,
            session_at_crash,
            "taking {crashed}'s partitions changed its session"
        );
    }
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("after the takeover, every served lease is the store's record");
    fleet.finish().await;
    failover
}

/// The version of the crashed `node`'s member record, which stays (nothing deletes it).
async fn session_version(fleet: &Fleet, node: &NodeId) -> Version {
    let stored = fleet.store.get_member(&fleet.group, node).await;
    let stored = stored.expect("read a member record");
    stored.expect("the crashed node's session stays").version
}

/// Checks that every partition of the crashed node, last renewed as in `renewed`, was taken
/// after the crash, and no sooner than `acquire_after` after that renewal. Returns the
/// longest a take came after its renewal.
fn check_takeovers(
    events: &[FenceEvent],
    renewed: &BTreeMap<PartitionId, Instant>,
    (crashed_at, crashed): (Instant, &NodeId),
    acquire_after: Duration,
) -> Duration {
    let mut longest = Duration::ZERO;
    for (partition, renewed_at) in renewed {
        let taken = events
            .iter()
            .find(|e| e.partition == *partition && e.lost.is_none() && e.at > crashed_at)
            .unwrap_or_else(|| panic!("partition {partition} was taken over"));
        let waited = taken.at.saturating_duration_since(*renewed_at);
        assert!(
            waited >= acquire_after,
            "{} took partition {partition} {waited:?} after {crashed}'s last renewal, sooner \
             than acquire_after {acquire_after:?}",
            taken.node,
        );
        longest = longest.max(waited);
    }
    longest
}

/// Three nodes hold every partition; `outage` makes the store unreachable for longer than the
/// lease validity (for example by stopping the server) and `recovery` brings it back. Every
/// lease must end by its deadline while the store is gone (loss callbacks fire), nothing
/// panics, no partition has two holders, and after recovery every partition is held again.
pub async fn store_outage<O, R>(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    outage: O,
    recovery: R,
) where
    O: Future<Output = ()>,
    R: Future<Output = ()>,
{
    store_outage_with_mode(store, group, LeaseMode::default(), outage, recovery).await;
}

/// [`store_outage`] in a group set to `lease_mode`. With session leases the balanced fleet
/// must renew by its sessions alone ([`Fleet::renews_by_sessions`]) before the outage;
/// after it, each node must release the records still naming it that its session would
/// keep alive, for the fleet to hold every partition again.
pub async fn store_outage_with_mode<O, R>(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
    outage: O,
    recovery: R,
) where
    O: Future<Output = ()>,
    R: Future<Output = ()>,
{
    let fleet = Fleet::start_with_mode(store, group, 12, 3, lease_mode, |_| {}).await;
    fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("three nodes own every partition");
    if lease_mode == LeaseMode::Session {
        // Balanced, so that no hand-off writes a lease record while the sessions are watched.
        fleet
            .wait_balanced(Duration::from_secs(20))
            .await
            .expect("three nodes share every partition evenly");
        fleet.expect_sessions_alone().await;
    }
    let validity = scenario_config("x", &fleet.group, 1).lease_validity;
    let before = Instant::now();
    outage.await;
    // Every lease ends within its validity of the last renewal sent, which was sent before
    // the outage completed: counted from then, so that however long stopping the server
    // took stays out of the window.
    let started = Instant::now();
    let limit = validity + Duration::from_secs(2);
    while fleet.owned_total() > 0 && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fleet.owned_total(),
        0,
        "every lease ended within {limit:?} of the outage"
    );
    // A lease stops answering `lease()` at its deadline by the clock; its loss callback
    // comes when the node's task next runs, which a loaded machine can delay.
    let losses = || -> Vec<LossReason> {
        fleet
            .recorder
            .events()
            .iter()
            .filter(|e| e.at >= before)
            .filter_map(|e| e.lost)
            .collect()
    };
    let called_back = Instant::now();
    while !losses().contains(&LossReason::Expired)
        && called_back.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let losses = losses();
    let expired = losses.iter().filter(|&&r| r == LossReason::Expired).count();
    println!("store_outage: {expired} leases expired on schedule while the store was gone");
    assert!(
        expired >= 1,
        "no loss callback said `expired` during the outage; the losses: {losses:?}"
    );
    recovery.await;
    let back = fleet
        .wait_all_owned(Duration::from_secs(60))
        .await
        .expect("every partition owned again after the store came back");
    println!("store_outage: all partitions owned again {back:?} after recovery");
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("after recovery, every served lease is the store's record");
    fleet.finish().await;
}
