//! The group record is plain JSON in a table of its own, which an operator can query.

mod common;

use leasehold::testing::unique_group;
use leasehold::{Epoch, GroupRecord, LeaseStore, PutMode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_record_is_json_an_operator_can_query() {
    let Some(url) = common::url() else {
        return;
    };
    let harness = common::PostgresHarness::new(&url).await;
    let group = unique_group("group-json");
    let record = GroupRecord {
        epoch_floor: Epoch(12),
        ..GroupRecord::default()
    };
    harness
        .store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create the group record");
    let table = format!("{}_groups", harness.prefix);
    let floor: String = harness
        .client
        .query_one(
            &format!("SELECT record::json ->> 'epoch_floor' FROM {table} WHERE grp = $1"),
            &[&group.as_str()],
        )
        .await
        .expect("the record is JSON an operator can query")
        .get(0);
    assert_eq!(floor, "12");
}
