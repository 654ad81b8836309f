//! The store across a ZooKeeper server outage: calls fail fast while it is down, and work
//! again (on a new session if the old one expired) once it is back.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold::testing::unique_group;
use leasehold::{Change, ChangeFeed, LeaseRecord, LeaseStore, PartitionId, PutMode, StoreError};

async fn run_control(folder: &str, action: &str) {
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

/// Brings the server back even if an assertion fails while it is down.
struct RestartOnDrop(Option<String>);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if let Some(folder) = self.0.take() {
            let script = Path::new(&folder).join("zookeeper.start");
            let _ = std::process::Command::new("bash").arg(script).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_survives_a_server_restart_longer_than_the_session_timeout() {
    let (Some(address), Some(control)) = (common::zookeeper_address(), common::zookeeper_control())
    else {
        return;
    };
    let store = common::connect(&address).await;
    let options = store.options().clone();
    let group = unique_group("restart");
    let version = store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create before the outage");
    let mut feed = store.watch(&group).await.expect("watch");

    run_control(&control, "stop").await;
    let mut restart = RestartOnDrop(Some(control.clone()));
    // Keep calling for longer than the session timeout, so the session expires meanwhile.
    let outage_started = Instant::now();
    let mut failures = 0;
    while outage_started.elapsed() < options.session_timeout_limit() + Duration::from_secs(2) {
        let started = Instant::now();
        let result = store.get_lease(&group, PartitionId(0)).await;
        let took = started.elapsed();
        assert!(
            matches!(
                result,
                Err(StoreError::Unavailable { .. } | StoreError::Timeout(_))
            ),
            "during the outage: {result:?}"
        );
        assert!(
            took <= options.call_timeout_limit() + Duration::from_millis(500),
            "a call during the outage took {took:?}"
        );
        failures += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(failures > 0);

    restart.0 = None;
    run_control(&control, "start").await;
    let back = Instant::now();
    let record = loop {
        match store.get_lease(&group, PartitionId(0)).await {
            Ok(record) => break record.expect("the record survived the restart"),
            Err(error) if error.is_transient() && back.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("store did not recover: {error}"),
        }
    };
    assert_eq!(
        record.version, version,
        "nothing wrote the record meanwhile"
    );
    // The feed is set up again on the new session: keep writing until a write shows in it
    // (the first ones may land before the watch is back, which the feed reports as Unknown).
    let mut version = version;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        version = store
            .put_lease(
                &group,
                PartitionId(0),
                &LeaseRecord::released(),
                PutMode::Update(version),
            )
            .await
            .expect("conditional write after recovery");
        if saw_lease_hint(&mut feed, Duration::from_secs(1)).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "writes after the outage never showed in the feed"
        );
    }
}

/// Whether a hint for partition 0 arrives within `wait`; panics if the feed ended.
async fn saw_lease_hint(feed: &mut ChangeFeed, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(hint) = tokio::time::timeout_at(deadline, feed.next()).await {
        if matches!(
            hint.expect("the feed is still open"),
            Change::Lease(PartitionId(0))
                | Change::LeaseWritten {
                    partition: PartitionId(0),
                    ..
                }
        ) {
            return true;
        }
    }
    false
}
