//! Participants across a ZooKeeper server restart longer than the lease validity: every lease
//! ends on schedule while the server is gone, nothing panics, no partition is ever held
//! twice, and every partition is held again once it is back — renewing per partition, and
//! by session. In a file of its own, both modes in one test, one after the other: stopping
//! the server would disturb any test running beside it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::scenarios::store_outage_with_mode;
use leasehold::testing::unique_group;
use leasehold::LeaseMode;

async fn control(folder: &str, action: &str) {
    let script = Path::new(folder).join(format!("zookeeper.{action}"));
    let status = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("bash").arg(&script).status(),
    )
    .await
    .unwrap_or_else(|_| panic!("{} took too long", script.display()))
    .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(status.success(), "{} failed: {status}", script.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_participants_survive_a_server_restart_without_overlap() {
    let (Some(address), Some(folder)) = (common::zookeeper_address(), common::zookeeper_control())
    else {
        return;
    };
    let store = Arc::new(common::connect(&address).await);
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        store_outage_with_mode(
            store.clone(),
            unique_group("outage"),
            mode,
            control(&folder, "stop"),
            control(&folder, "start"),
        )
        .await;
    }
}
