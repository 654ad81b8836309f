use super::*;
use crate::MemoryStore;

#[tokio::test]
async fn init_creates_only_what_is_missing_and_counts_damaged_records() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    let first = init(&store, &group, 4).await.unwrap();
    assert_eq!((first.created, first.existing), (4, 0));
    // A damaged last record still makes the group four partitions long.
    store.corrupt_lease(&group, PartitionId(3));
    let refused = init(&store, &group, 3).await.unwrap_err();
    assert!(
        matches!(
            refused,
            AdminError::PartitionCountMismatch {
                existing: 4,
                requested: 3,
                ..
            }
        ),
        "{refused:?}"
    );
    let grown = init(&store, &group, 6).await.unwrap();
    assert_eq!((grown.created, grown.existing), (2, 4));
    let listing = store.list_leases(&group).await.unwrap();
    assert_eq!((listing.partition_count(), listing.len()), (6, 6));
    assert_eq!(
        listing.corrupt[0].key(),
        Some(&RecordKey::Lease(PartitionId(3))),
        "the damaged record is left for an operator, not overwritten"
    );
}

async fn create_released(
    store: &MemoryStore,
    group: &GroupName,
    partitions: impl IntoIterator<Item = u32>,
) {
    for partition in partitions {
        let record = LeaseRecord::released();
        let created = store.put_lease(group, PartitionId(partition), &record, PutMode::Create);
        created.await.unwrap();
    }
}

#[tokio::test]
async fn stale_check_counts_a_stray_huge_partition_without_allocating_by_it() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 4).await.unwrap();
    create_released(&store, &group, [1_000_000, u32::MAX]).await;
    let told = stale_check(&store, &group, Duration::ZERO, 0, Some(4))
        .await
        .unwrap();
    assert_eq!((told.missing_count, told.missing.len()), (0, 0));
    let inferred = stale_check(&store, &group, Duration::ZERO, 0, None)
        .await
        .unwrap();
    assert_eq!(inferred.missing_count, u64::from(u32::MAX) - 5);
    assert_eq!(inferred.missing.len(), StaleReport::MISSING_LISTED);
    assert_eq!(inferred.missing[0], PartitionId(4));
    assert!(inferred.has_problems());
}

#[tokio::test]
async fn stale_check_lists_the_gaps_in_order() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    create_released(&store, &group, [1, 2, 5]).await;
    let report = stale_check(&store, &group, Duration::ZERO, 0, Some(8))
        .await
        .unwrap();
    assert_eq!(report.missing, [0, 3, 4, 6, 7].map(PartitionId));
    assert_eq!(report.missing_count, 5);
}

#[test]
fn contended_names_the_record() {
    let error = AdminError::Contended {
        key: RecordKey::Lease(PartitionId(7)),
    };
    assert_eq!(
        error.to_string(),
        format!("lease 7 kept changing; gave up after {MAX_ATTEMPTS} attempts")
    );
}
