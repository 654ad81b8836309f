//! The group record beside the lease and member records: plain JSON in its own table, never
//! listed with them, reported as itself when damaged, and no cause for change hints.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, Epoch, GroupRecord, LeaseRecord, LeaseState, LeaseStore, PartitionId, PutMode,
    RecordKey, StoreError,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_group_record_is_corrupt_and_stays_out_of_listings() {
    let Some(url) = common::url() else {
        return;
    };
    let harness = common::PostgresHarness::new(&url).await;
    let group = unique_group("damaged-group");
    let record = GroupRecord {
        epoch_floor: Epoch(12),
        ..GroupRecord::default()
    };
    harness
        .store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create the group record");
    let floor: String = harness
        .client
        .query_one(
            "SELECT record::json ->> 'epoch_floor' FROM leasehold_groups WHERE grp = $1",
            &[&group.as_str()],
        )
        .await
        .expect("the record is JSON an operator can query")
        .get(0);
    assert_eq!(floor, "12");
    harness
        .client
        .execute(
            "UPDATE leasehold_groups SET record = '{not json' WHERE grp = $1",
            &[&group.as_str()],
        )
        .await
        .expect("damage the record");
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
    let Some(url) = common::url() else {
        return;
    };
    let store = common::store(&url).await;
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
