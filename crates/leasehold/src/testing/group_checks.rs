//! Checks of the group record: compare-and-set like every record, kept whole, and the
//! fencing tokens it protects never going back.

use std::sync::Arc;
use std::time::Duration;

use crate::admin;
use crate::error::StoreError;
use crate::group::{GroupRecord, GroupTimings};
use crate::record::{LeaseRecord, LeaseState};
use crate::store::{LeaseStore, PutMode};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId, PartitionId};

use super::{unique_group, Harness};

fn group_failure<T: std::fmt::Debug>(result: &Result<T, StoreError>) -> Option<&'static str> {
    match result.as_ref().err()? {
        StoreError::Conflict { key } if *key == RecordKey::Group => Some("conflict"),
        StoreError::AlreadyExists { key } if *key == RecordKey::Group => Some("already exists"),
        StoreError::NotFound { key } if *key == RecordKey::Group => Some("not found"),
        _ => None,
    }
}

/// The group record is created once, read back whole (fields this version does not know
/// included), updated only from its current version, and kept apart per group and from the
/// lease and member listings.
pub async fn group_record_compare_and_set(store: Arc<dyn LeaseStore>) {
    let group = unique_group("grouprec");
    assert!(store.get_group(&group).await.expect("get").is_none());
    let missing = store
        .put_group(
            &group,
            &GroupRecord::default(),
            PutMode::Update(crate::Version::from_number(1)),
        )
        .await;
    assert_eq!(group_failure(&missing), Some("not found"), "{missing:?}");

    let mut record = GroupRecord::new(Some(GroupTimings {
        lease_validity: Duration::from_nanos(30_000_000_007),
        acquire_after: Duration::from_secs(45),
        max_clock_drift: 0.01,
    }));
    record.epoch_floor = Epoch(41);
    record
        .other
        .insert("future_field".into(), serde_json::json!({"kept": [1, 2]}));
    let v1 = store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create");
    let got = store.get_group(&group).await.expect("get").expect("exists");
    assert_eq!(got.value, record, "the whole record round-trips");
    assert_eq!(got.version, v1);

    let again = store.put_group(&group, &record, PutMode::Create).await;
    assert_eq!(group_failure(&again), Some("already exists"), "{again:?}");

    record.epoch_floor = Epoch(42);
    let v2 = store
        .put_group(&group, &record, PutMode::Update(v1.clone()))
        .await
        .expect("update from the current version");
    assert_ne!(v1, v2);
    let stale = store.put_group(&group, &record, PutMode::Update(v1)).await;
    assert_eq!(group_failure(&stale), Some("conflict"), "{stale:?}");
    let got = store.get_group(&group).await.unwrap().unwrap();
    assert_eq!((got.value.epoch_floor, got.version), (Epoch(42), v2));

    let other = unique_group("grouprec-other");
    assert!(store.get_group(&other).await.unwrap().is_none());
    assert!(store.list_leases(&group).await.unwrap().is_empty());
    assert!(store.list_members(&group).await.unwrap().is_empty());
}

/// A group record that cannot be decoded is reported as the group record, and the lease
/// and member listings of its group, which it sits beside, neither list nor report it.
pub async fn damaged_group_record_is_reported_apart(harness: &dyn Harness) {
    let store = harness.store();
    let group = unique_group("damaged-group");
    store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .expect("create the group record");
    store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create a lease");
    harness
        .corrupt_group(&group)
        .await
        .expect("damage the group record");
    let error = store.get_group(&group).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::Group),
        "{error:?}"
    );
    let leases = store.list_leases(&group).await.expect("list leases");
    assert_eq!(leases.records.len(), 1);
    assert!(leases.corrupt.is_empty(), "{:?}", leases.corrupt);
    let members = store.list_members(&group).await.expect("list members");
    assert!(members.is_empty(), "{members:?}");
}

/// Takes every partition of `group` once, as a node would: the epoch goes up by one.
async fn acquire_all(store: &dyn LeaseStore, group: &GroupName) -> Vec<Epoch> {
    let owner = NodeId::new("taker").expect("valid");
    let mut epochs = Vec::new();
    for lease in store.list_leases(group).await.expect("list").records {
        let record = LeaseRecord {
            owner: Some(owner.clone()),
            epoch: lease.value.epoch.next(),
            state: LeaseState::Held,
            ..lease.value
        };
        store
            .put_lease(group, lease.key, &record, PutMode::Update(lease.version))
            .await
            .expect("acquire");
        epochs.push(record.epoch);
    }
    epochs
}

/// A group destroyed and built out again through leasehold issues epochs above every one it
/// issued before, and so does a partition whose record alone was deleted and re-created.
pub async fn epochs_never_go_back(store: Arc<dyn LeaseStore>) {
    let group = unique_group("epochs");
    admin::init(&*store, &group, 3).await.expect("init");
    let mut highest = Epoch(0);
    for _ in 0..3 {
        highest = acquire_all(&*store, &group)
            .await
            .into_iter()
            .max()
            .unwrap();
    }
    assert_eq!(highest, Epoch(3));
    admin::destroy(&*store, &group, admin::Destroy::Force)
        .await
        .expect("destroy");
    assert!(store.list_leases(&group).await.unwrap().is_empty());
    admin::init(&*store, &group, 3).await.expect("init again");
    let after = acquire_all(&*store, &group).await;
    assert!(
        after.iter().all(|epoch| *epoch > highest),
        "epochs after re-creating the group {after:?} must exceed {highest}"
    );

    // One record deleted behind the nodes' back and re-created by init.
    let highest = after.into_iter().max().unwrap();
    let lease = store
        .get_lease(&group, PartitionId(1))
        .await
        .unwrap()
        .unwrap();
    store
        .delete_lease(&group, PartitionId(1), &lease.version)
        .await
        .expect("delete");
    admin::init(&*store, &group, 3)
        .await
        .expect("re-create the record");
    let recreated = store
        .get_lease(&group, PartitionId(1))
        .await
        .unwrap()
        .unwrap();
    assert!(
        recreated.value.epoch >= highest,
        "a record re-created in a group in use starts at its highest epoch ({highest}), not {}",
        recreated.value.epoch
    );
}
