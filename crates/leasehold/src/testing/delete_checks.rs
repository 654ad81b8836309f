//! Checks of deleting lease records in a batch ([`LeaseStore::delete_leases`]), which
//! `destroy` uses on large groups.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::LeaseRecord;
use crate::store::{LeaseStore, PutMode};
use crate::types::{PartitionId, Version};

use super::checks::create;
use super::unique_group;

/// Each delete of a batch is judged on its own version: the current ones are deleted, a
/// stale version fails with `Conflict` and a missing record with `NotFound`, and neither
/// stops the others.
pub async fn batch_delete_reports_each_result(store: Arc<dyn LeaseStore>) {
    let group = unique_group("conf-batch-delete");
    let mut versions = Vec::new();
    for partition in 0..5 {
        versions.push(create(&*store, &group, partition).await);
    }
    // Partition 1 moves on after its version above was read.
    store
        .put_lease(
            &group,
            PartitionId(1),
            &LeaseRecord::released(),
            PutMode::Update(versions[1].clone()),
        )
        .await
        .expect("update partition 1");
    let mut deletes: Vec<(PartitionId, Version)> = (0..5)
        .map(|partition| (PartitionId(partition), versions[partition as usize].clone()))
        .collect();
    // A partition that was never created.
    deletes.push((PartitionId(9), versions[0].clone()));
    let results = store
        .delete_leases(&group, &deletes)
        .await
        .expect("the batch is attempted");
    assert_eq!(results.len(), deletes.len(), "one result per delete");
    for partition in [0, 2, 3, 4] {
        assert!(
            results[partition].is_ok(),
            "partition {partition}: {:?}",
            results[partition]
        );
    }
    assert!(
        matches!(results[1], Err(StoreError::Conflict { .. })),
        "a stale version: {:?}",
        results[1]
    );
    assert!(
        matches!(results[5], Err(StoreError::NotFound { .. })),
        "a missing record: {:?}",
        results[5]
    );
    let listing = store.list_leases(&group).await.expect("list");
    let left: Vec<u32> = listing.records.iter().map(|r| r.key.0).collect();
    assert_eq!(left, vec![1], "only the record with a newer version stays");
    assert!(store
        .delete_leases(&group, &[])
        .await
        .expect("an empty batch")
        .is_empty());
}
