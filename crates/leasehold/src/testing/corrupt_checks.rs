//! Checks of the conformance suite on records a store cannot decode: each reported by key,
//! never fatal to a listing.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::MemberRecord;
use crate::store::PutMode;
use crate::types::{PartitionId, RecordKey};

use super::checks::{create, failure, lease, node};
use super::{unique_group, Harness, Listed, Malformed, MALFORMED_FIRST_PARTITION};

/// A record that cannot be decoded is reported as `Corrupt` naming its key, while the other
/// records of the group still list; reading it alone, or in a batch, is the same error.
pub async fn corrupt_record_is_reported_alone(harness: &dyn Harness) {
    let store = harness.store();
    let group = unique_group("corrupt");
    for partition in 0..4 {
        create(&*store, &group, partition).await;
    }
    harness
        .corrupt_lease(&group, PartitionId(2))
        .await
        .expect("harness corrupts the record");
    let listing = store
        .list_leases(&group)
        .await
        .expect("list despite corruption");
    let keys: Vec<u32> = listing.records.iter().map(|r| r.key.0).collect();
    assert_eq!(keys, vec![0, 1, 3], "the others still list");
    assert_eq!(listing.corrupt.len(), 1, "{:?}", listing.corrupt);
    let listed = Err::<(), _>(listing.corrupt.into_iter().next().expect("one"));
    assert_eq!(failure(&listed), Some(("corrupt", lease(2))), "{listed:?}");
    let single = store.get_lease(&group, PartitionId(2)).await;
    assert_eq!(failure(&single), Some(("corrupt", lease(2))), "{single:?}");
    // A batched read fails as its gets would, on the one record; one without it reads.
    let asked: Vec<PartitionId> = (0..4).map(PartitionId).collect();
    let batched = store.get_leases(&group, &asked).await;
    assert_eq!(
        failure(&batched),
        Some(("corrupt", lease(2))),
        "{batched:?}"
    );
    let others = [PartitionId(3), PartitionId(0), PartitionId(1)];
    let read = store.get_leases(&group, &others).await.expect("the others");
    assert!(read.iter().all(|(_, record)| record.is_some()), "{read:?}");
}

/// The keys of a listing's corrupt entries, checking each is a `Corrupt` error.
fn corrupt_keys(corrupt: Vec<StoreError>, what: &str) -> Vec<RecordKey> {
    let mut keys: Vec<RecordKey> = corrupt
        .into_iter()
        .map(|error| match error {
            StoreError::Corrupt { key, .. } => key,
            other => panic!("{what}: a listed error that is not Corrupt: {other:?}"),
        })
        .collect();
    keys.sort_by_key(|key| key.to_string());
    keys
}

/// Awaits a read run as a task of its own, so that a panic in the store's decoding fails the
/// check with a message saying which read it was.
async fn joined<T>(task: tokio::task::JoinHandle<T>, what: &str) -> T {
    match task.await {
        Ok(result) => result,
        Err(error) => panic!("{what} panicked on malformed records: {error}"),
    }
}

/// Checks a listing run by `task`: exactly the `good` records list, in order, and exactly
/// the `malformed` records of `listed` are reported as `Corrupt`.
async fn check_listing<K: std::fmt::Display, V>(
    task: tokio::task::JoinHandle<
        Result<crate::store::Listing<crate::record::Stored<K, V>>, StoreError>,
    >,
    listed: Listed,
    good: &[&str],
    malformed: &[Malformed],
) {
    let what = format!("{listed:?} listing");
    let listing = joined(task, &what)
        .await
        .unwrap_or_else(|error| panic!("{what} failed despite malformed records: {error}"));
    let keys: Vec<String> = listing.records.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(
        keys, good,
        "{what}: only the good records list; {malformed:?}"
    );
    let mut expected: Vec<RecordKey> = malformed
        .iter()
        .filter(|m| m.listed == listed)
        .map(|m| m.key.clone())
        .collect();
    expected.sort_by_key(|key| key.to_string());
    assert_eq!(
        corrupt_keys(listing.corrupt, &what),
        expected,
        "{what}: one Corrupt per malformed record: {malformed:?}"
    );
}

/// Every record the harness writes damaged in the backend's own format (NULLs, wrong types,
/// numbers out of range, bytes that are not JSON or UTF-8, keys naming no partition) is one
/// `Corrupt` naming its key, in the listing and when read alone, and never a panic: the good
/// records of the group still list. A reader that panicked here would end every node's
/// background task that lists the group.
pub async fn malformed_records_are_reported_not_fatal(harness: &dyn Harness) {
    let store = harness.store();
    let group = unique_group("malformed");
    for partition in 0..3 {
        create(&*store, &group, partition).await;
    }
    for name in ["good-a", "good-b"] {
        store
            .put_member(
                &group,
                &node(name),
                &MemberRecord::default(),
                PutMode::Create,
            )
            .await
            .expect("create a good member");
    }
    let malformed = harness
        .write_malformed(&group)
        .await
        .expect("harness writes the malformed records");
    assert!(
        !malformed.is_empty(),
        "the harness wrote no malformed record"
    );
    for damage in &malformed {
        if let Some(partition) = damage.key.partition() {
            assert!(
                partition.0 >= MALFORMED_FIRST_PARTITION,
                "{damage} uses a partition the check owns"
            );
        }
    }
    let leases = {
        let (store, group) = (Arc::clone(&store), group.clone());
        tokio::spawn(async move { store.list_leases(&group).await })
    };
    check_listing(leases, Listed::Leases, &["0", "1", "2"], &malformed).await;
    let members = {
        let (store, group) = (Arc::clone(&store), group.clone());
        tokio::spawn(async move { store.list_members(&group).await })
    };
    check_listing(members, Listed::Members, &["good-a", "good-b"], &malformed).await;

    for damage in &malformed {
        let read = {
            let (store, group, key) = (Arc::clone(&store), group.clone(), damage.key.clone());
            tokio::spawn(async move {
                match key {
                    RecordKey::Lease(partition) => {
                        Some(store.get_lease(&group, partition).await.map(drop))
                    }
                    RecordKey::Member(node) => {
                        Some(store.get_member(&group, &node).await.map(drop))
                    }
                    _ => None,
                }
            })
        };
        let Some(read) = joined(read, "get").await else {
            continue;
        };
        assert_eq!(
            failure(&read),
            Some(("corrupt", damage.key.clone())),
            "{damage} read alone: {read:?}"
        );
    }
}
