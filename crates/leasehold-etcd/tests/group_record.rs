//! The group record beside the lease and member records: never listed with them, reported
//! as itself when damaged, and no cause for change hints.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, GroupRecord, LeaseRecord, LeaseState, LeaseStore, PartitionId, PutMode, RecordKey,
    StoreError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_group_record_is_corrupt_and_stays_out_of_listings() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let harness = common::EtcdHarness::new(&endpoints).await;
    let group = unique_group("damaged-group");
    harness
        .client
        .kv_client()
        .put(
            format!("{}/{group}/group", harness.prefix),
            "{not json",
            None,
        )
        .await
        .expect("write the damaged record");
    let error = harness.store.get_group(&group).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::Group),
        "{error:?}"
    );
    let leases = harness.store.list_leases(&group).await.unwrap();
    let members = harness.store.list_members(&group).await.unwrap();
    assert!(leases.is_empty(), "{leases:?}");
    assert!(members.is_empty(), "{members:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_the_group_record_gives_no_change_hint() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let store = common::store(&endpoints).await;
    let group = unique_group("group-watch");
    let mut feed = store.watch(&group).await.expect("watch");
    store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .unwrap();
    store
        .put_lease(
            &group,
            PartitionId(3),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("a change hint within 5 s")
        .expect("the feed is still open");
    assert_eq!(
        first,
        Change::LeaseWritten {
            partition: PartitionId(3),
            state: LeaseState::Released
        }
    );
}
