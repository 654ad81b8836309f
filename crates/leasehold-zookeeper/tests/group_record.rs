//! The group record beside the lease and member records: never listed with them, reported
//! as itself when damaged, and no cause for change hints.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, GroupRecord, LeaseRecord, LeaseStore, PartitionId, PutMode, RecordKey, StoreError,
};

#[tokio::test]
async fn a_damaged_group_record_is_corrupt_and_stays_out_of_listings() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = common::connect(&address).await;
    let group = unique_group("damaged-group");
    store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .unwrap();
    store
        .overwrite_unconditionally(&store.group_record_path(&group), b"{not json")
        .await
        .unwrap();
    let error = store.get_group(&group).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Corrupt { key, .. } if *key == RecordKey::Group),
        "{error:?}"
    );
    let leases = store.list_leases(&group).await.unwrap();
    let members = store.list_members(&group).await.unwrap();
    assert!(leases.is_empty(), "{leases:?}");
    assert!(members.is_empty(), "{members:?}");
}

#[tokio::test]
async fn writing_the_group_record_gives_no_change_hint() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    let store = common::connect(&address).await;
    let group = unique_group("group-watch");
    let mut feed = store.watch(&group).await.expect("watch");
    let version = store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .unwrap();
    store
        .put_group(&group, &GroupRecord::default(), PutMode::Update(version))
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
    let first = tokio::time::timeout(Duration::from_secs(10), feed.next())
        .await
        .expect("a change hint within 10 s")
        .expect("the feed is still open");
    assert_eq!(first, Change::Lease(PartitionId(3)));
}
