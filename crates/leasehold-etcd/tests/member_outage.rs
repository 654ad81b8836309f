//! The store keeps working while one member of the 3-member cluster (the leader) is down.

mod common;

use std::time::{Duration, Instant};

use common::{kill_member, leader_index, NAMES};
use etcd_client::Client;
use leasehold::testing::unique_group;
use leasehold::{LeaseRecord, LeaseStore, PartitionId, PutMode};
use leasehold_etcd::EtcdStore;

/// Renews partition 0 until it works, checking that no call takes longer than its bound.
async fn renew_until_it_works(store: &EtcdStore, deadline: Duration) -> u32 {
    let group_limit = common::REQUEST_TIMEOUT + Duration::from_secs(1);
    let started = Instant::now();
    let mut failures = 0;
    let group = STORE_GROUP.with(|g| g.clone());
    loop {
        assert!(
            started.elapsed() < deadline,
            "no renewal within {deadline:?}"
        );
        let call = Instant::now();
        let result = async {
            let current = store.get_lease(&group, PartitionId(0)).await?.unwrap();
            let mut next = current.value.clone();
            next.epoch = next.epoch.next();
            store
                .put_lease(
                    &group,
                    PartitionId(0),
                    &next,
                    PutMode::Update(current.version),
                )
                .await
        }
        .await;
        assert!(
            call.elapsed() < 2 * group_limit,
            "a call hung: {:?}",
            call.elapsed()
        );
        match result {
            Ok(_) => return failures,
            Err(error) => {
                assert!(error.is_transient(), "unexpected error: {error}");
                failures += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

thread_local! {
    static STORE_GROUP: leasehold::GroupName = unique_group("outage");
}

#[tokio::test(flavor = "current_thread")]
async fn etcd_store_keeps_working_while_the_leader_is_down() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let pids_dir = std::env::var("LEASEHOLD_TEST_ETCD_PIDS_DIR").expect("pids dir is exported");
    let store = common::store(&endpoints).await;
    let group = STORE_GROUP.with(|g| g.clone());
    store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();

    let leader = leader_index(&endpoints).await;
    let stopped = kill_member(&pids_dir, NAMES[leader]);
    let failures = renew_until_it_works(&store, Duration::from_secs(20)).await;
    println!("renewed with the leader down after {failures} transient failures");
    let listed = store
        .list_leases(&group)
        .await
        .expect("list with a member down");
    assert_eq!(listed.records.len(), 1);

    drop(stopped);
    let mut healthy = false;
    for _ in 0..50 {
        let mut client = Client::connect([&endpoints[leader]], None).await.unwrap();
        if client.status().await.is_ok() {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(healthy, "the stopped member came back");
    renew_until_it_works(&store, Duration::from_secs(20)).await;
    let last = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    // A write that timed out may still have been applied, so more than two is possible.
    assert!(
        last.value.epoch.0 >= 2,
        "both renewals applied: {:?}",
        last.value
    );
}
