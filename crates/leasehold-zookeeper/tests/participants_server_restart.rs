//! Participants across a ZooKeeper server restart longer than the lease validity: every lease
//! ends on schedule while the server is gone, nothing panics, no partition is ever held
//! twice, and every partition is held again once it is back. In a file of its own: stopping
//! the server would disturb any test running beside it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::scenarios::store_outage;
use leasehold::testing::unique_group;

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
    store_outage(
        store,
        unique_group("outage"),
        control(&folder, "stop"),
        control(&folder, "start"),
    )
    .await;
}
