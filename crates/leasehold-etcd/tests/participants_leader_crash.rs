//! Participants on the 3-member etcd cluster while its leader crashes. In a file of its own:
//! killing a member would disturb any test running beside it.
//!
//! Fails if a node keeps serving a lease the store does not record after the re-election (a
//! renewal whose reply was lost taken as failed and its version forgotten, or one applied
//! twice), if the fleet does not hold every partition again with two members left, or if
//! two nodes ever held one partition at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use leasehold::testing::scenarios::Fleet;
use leasehold::testing::unique_group;
use leasehold::LossReason;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_participants_ride_out_a_leader_crash_without_overlap() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let pids_dir = std::env::var("LEASEHOLD_TEST_ETCD_PIDS_DIR").expect("pids dir is exported");
    let store = Arc::new(common::store(&endpoints).await);
    let fleet = Fleet::start(store, unique_group("leader-crash"), 12, 3, |_| {}).await;
    fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("three nodes own every partition");

    let leader = common::leader_index(&endpoints).await;
    let crashed_at = tokio::time::Instant::now();
    let stopped = common::kill_member(&pids_dir, common::NAMES[leader]);
    // Past a re-election and a lease validity, so that whatever was lost is known.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Two members keep a quorum: the fleet holds everything again.
    let back = fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("every partition held again with one member down");
    let expired = fleet
        .recorder
        .events()
        .iter()
        .filter(|e| e.lost == Some(LossReason::Expired) && e.at >= crashed_at)
        .count();
    println!("leader crash: {expired} leases expired on schedule; all held {back:?} after that");
    // A write in flight when the leader died may have been applied with its reply lost, or
    // retried: whatever happened, no node may go on serving a tenure the store lacks.
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("with one member down, every served lease is the store's record");

    drop(stopped);
    let mut rejoined = false;
    for _ in 0..50 {
        let status = async {
            Client::connect([&endpoints[leader]], None)
                .await?
                .status()
                .await
        };
        if status.await.is_ok() {
            rejoined = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(rejoined, "the crashed member came back");
    fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("every partition held with the whole cluster back");
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("with the whole cluster back, every served lease is the store's record");
    // No partition ever had two holders and epochs only grew.
    fleet.finish().await;
}
