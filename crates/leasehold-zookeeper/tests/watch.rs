//! Change hints from ZooKeeper watches.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, ChangeFeed, Epoch, LeaseRecord, LeaseState, LeaseStore, MemberRecord, NodeId,
    PartitionId, PutMode,
};

/// Reads hints until one satisfies `wanted`, returning those seen before it.
async fn wait_for(feed: &mut ChangeFeed, wanted: impl Fn(&Change) -> bool) -> Vec<Change> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let hint = tokio::time::timeout_at(deadline, feed.next())
            .await
            .unwrap_or_else(|_| panic!("no matching hint within 10 s; saw {seen:?}"))
            .expect("feed still open");
        if wanted(&hint) {
            return seen;
        }
        seen.push(hint);
    }
}

#[tokio::test]
async fn watch_reports_lease_and_member_changes_of_its_group_only() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = common::connect(&address).await;
    let group = unique_group("watch");
    let other = unique_group("watch-other");
    let mut feed = store.watch(&group).await.expect("watch");

    let record = LeaseRecord::released();
    store
        .put_lease(&other, PartitionId(9), &record, PutMode::Create)
        .await
        .unwrap();
    let version = store
        .put_lease(&group, PartitionId(3), &record, PutMode::Create)
        .await
        .unwrap();
    // ZooKeeper's events carry no data: the feed reads the row, so that a take or a renewal
    // reads as held and asks nothing of a participant.
    let written = |state: LeaseState| {
        move |hint: &Change| {
            *hint
                == Change::LeaseWritten {
                    partition: PartitionId(3),
                    state,
                }
        }
    };
    let before = wait_for(&mut feed, written(LeaseState::Released)).await;
    assert!(
        !before.iter().any(|hint| matches!(
            hint,
            Change::Lease(PartitionId(9))
                | Change::LeaseWritten {
                    partition: PartitionId(9),
                    ..
                }
        )),
        "another group's write leaked into the feed: {before:?}"
    );

    let taker = NodeId::new("taker").unwrap();
    let held = LeaseRecord {
        owner: Some(taker),
        epoch: Epoch(1),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    };
    let version = store
        .put_lease(&group, PartitionId(3), &held, PutMode::Update(version))
        .await
        .unwrap();
    wait_for(&mut feed, written(LeaseState::Held)).await;

    // A deleted row has no state to read: the hint names the row alone.
    store
        .delete_lease(&group, PartitionId(3), &version)
        .await
        .unwrap();
    wait_for(&mut feed, |hint| *hint == Change::Lease(PartitionId(3))).await;

    let node = NodeId::new("n1").unwrap();
    store
        .put_member(&group, &node, &MemberRecord::default(), PutMode::Create)
        .await
        .unwrap();
    wait_for(&mut feed, |hint| *hint == Change::Member(node.clone())).await;
}
