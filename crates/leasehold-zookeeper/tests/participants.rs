//! Participants on ZooKeeper: leases held and renewed, and a crashed node's partitions taken
//! over, with no partition ever held twice, in groups that renew per partition and by
//! session.

mod common;

use std::sync::Arc;

use leasehold::testing::scenarios::{
    crash_takeover, crash_takeover_with_mode, release_latency, release_latency_with_mode,
};
use leasehold::testing::unique_group;
use leasehold::LeaseMode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_participants_take_over_a_crashed_node_without_overlap() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = Arc::new(common::connect(&address).await);
    crash_takeover(store, unique_group("crash")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_watch_brings_a_released_partition_forward() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = Arc::new(common::connect(&address).await);
    release_latency(store, unique_group("release")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_sessions_take_over_a_crashed_node_without_overlap() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = Arc::new(common::connect(&address).await);
    crash_takeover_with_mode(store, unique_group("crash-session"), LeaseMode::Session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_sessions_watch_brings_a_released_partition_forward() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = Arc::new(common::connect(&address).await);
    release_latency_with_mode(store, unique_group("release-session"), LeaseMode::Session).await;
}
