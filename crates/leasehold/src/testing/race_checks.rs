//! A check of the conformance suite on compare-and-set under concurrent writers.

use std::sync::Arc;

use crate::error::StoreError;
use crate::store::{LeaseStore, PutMode};
use crate::types::{Epoch, GroupName, PartitionId};

use super::checks::{create, node};
use super::unique_group;

/// `writers` tasks each perform `increments` read-modify-write increments of one record's
/// epoch with compare-and-set, retrying on conflict. Exactly `writers × increments` writes
/// succeed and the final epoch equals that number: no update is lost and none is doubled.
pub async fn concurrent_increments_race(store: Arc<dyn LeaseStore>, writers: u32, increments: u32) {
    let group = unique_group("race");
    create(&*store, &group, 0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..writers {
        let store = Arc::clone(&store);
        let group = group.clone();
        tasks.spawn(async move { increment_loop(&*store, &group, writer, increments).await });
    }
    let mut successes = 0;
    while let Some(result) = tasks.join_next().await {
        successes += result.expect("writer task panicked");
    }
    let total = u64::from(writers) * u64::from(increments);
    assert_eq!(successes, total, "successful compare-and-sets");
    let last = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.value.epoch, Epoch(total), "final value");
}

/// The writer side of [`concurrent_increments_race`]; returns its successful writes.
pub async fn increment_loop(
    store: &dyn LeaseStore,
    group: &GroupName,
    writer: u32,
    increments: u32,
) -> u64 {
    const MAX_ATTEMPTS: u32 = 1_000_000;
    let owner = node(&format!("writer-{writer}"));
    let mut done = 0;
    let mut attempts = 0;
    while done < increments {
        attempts += 1;
        assert!(attempts < MAX_ATTEMPTS, "writer {writer} made no progress");
        let current = store
            .get_lease(group, PartitionId(0))
            .await
            .expect("read")
            .expect("record exists");
        let mut next = current.value.clone();
        next.epoch = current.value.epoch.next();
        next.owner = Some(owner.clone());
        match store
            .put_lease(
                group,
                PartitionId(0),
                &next,
                PutMode::Update(current.version),
            )
            .await
        {
            Ok(_) => done += 1,
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            // A transient failure leaves the write's effect unknown, which would make the
            // count meaningless: fail loudly instead of guessing.
            Err(error) => panic!("writer {writer}: {error}"),
        }
    }
    u64::from(done)
}
