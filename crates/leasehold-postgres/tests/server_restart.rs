//! The store rides out a server restart: calls during the outage fail fast with a transient
//! error, and work again once the server is back, on the same store.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use leasehold::testing::unique_group;
use leasehold::{Change, LeaseRecord, LeaseStore, PartitionId, PutMode};

fn run_script(variable: &str) {
    let script = std::env::var(variable).unwrap_or_else(|_| panic!("{variable} is exported"));
    let status = Command::new("bash").arg(&script).status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "{script}: {status:?}"
    );
}

/// Starts the server again when dropped, so a failing test leaves it running.
struct Stopped;

impl Stopped {
    fn stop_server() -> Stopped {
        run_script("LEASEHOLD_TEST_POSTGRES_STOP");
        Stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        run_script("LEASEHOLD_TEST_POSTGRES_START");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_survives_a_server_restart() {
    let Some(url) = common::url() else {
        return;
    };
    let store = common::store(&url).await;
    let group = unique_group("restart");
    let version = store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();
    let mut feed = store.watch(&group).await.expect("watch");

    let stopped = Stopped::stop_server();
    let limit = common::REQUEST_TIMEOUT + Duration::from_millis(500);
    let mut quick = 0;
    for _ in 0..10 {
        let started = Instant::now();
        let result = store.get_lease(&group, PartitionId(0)).await;
        let took = started.elapsed();
        let error = result.expect_err("the server is down");
        assert!(error.is_transient(), "{error}");
        assert!(took < limit, "a call took {took:?}");
        if took < Duration::from_millis(500) {
            quick += 1;
        }
    }
    assert!(quick >= 8, "only {quick} of 10 calls failed fast");
    let lost = tokio::time::timeout(Duration::from_secs(5), feed.next()).await;
    assert_eq!(lost.expect("a hint within 5 s"), Some(Change::Unknown));
    drop(stopped);

    let started = Instant::now();
    let current = loop {
        assert!(started.elapsed() < Duration::from_secs(20), "no recovery");
        match store.get_lease(&group, PartitionId(0)).await {
            Ok(found) => break found.expect("the record survived the restart"),
            Err(error) => assert!(error.is_transient(), "{error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(current.version, version);
    let mut version = current.version;
    let mut record = current.value.clone();

    // The feed listens again on its own. A write made before it does is not reported, so
    // write until one is.
    for _ in 0..20 {
        record.epoch = record.epoch.next();
        version = store
            .put_lease(&group, PartitionId(0), &record, PutMode::Update(version))
            .await
            .expect("writes work again");
        let reported = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                match feed.next().await {
                    Some(
                        Change::Lease(PartitionId(0))
                        | Change::LeaseWritten {
                            partition: PartitionId(0),
                            ..
                        },
                    ) => return,
                    Some(_) => {}
                    None => panic!("the feed ended"),
                }
            }
        })
        .await;
        if reported.is_ok() {
            return;
        }
    }
    panic!("the watch did not resume within 20 writes");
}
