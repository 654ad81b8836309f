//! Participants on ZooKeeper: leases held and renewed, and a crashed node's partitions taken
//! over, with no partition ever held twice.

mod common;

use std::sync::Arc;

use leasehold::testing::scenarios::{crash_takeover, release_latency};
use leasehold::testing::unique_group;

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
