//! Change hints from the etcd watch, and batches larger than one transaction.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, ChangeFeed, LeaseRecord, LeaseStore, LeaseWrite, PartitionId, PutMode, StoreError,
};

async fn next_change(feed: &mut ChangeFeed) -> Change {
    tokio::time::timeout(Duration::from_secs(5), feed.next())
        .await
        .expect("a change hint within 5 s")
        .expect("the feed is still open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_outlives_the_request_timeout() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let store = common::store(&endpoints).await;
    let group = unique_group("watch");
    let mut feed = store.watch(&group).await.expect("watch");
    // Longer than the per-request timeout (3 s in the tests' options): a watch is a stream,
    // not a request, and must not be cut off by it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    store
        .put_lease(
            &group,
            PartitionId(7),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();
    assert_eq!(
        next_change(&mut feed).await,
        Change::LeaseWritten {
            partition: PartitionId(7),
            state: leasehold::LeaseState::Released
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_batches_span_several_transactions_and_report_each_write() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let store = common::store(&endpoints).await;
    let group = unique_group("big-batch");
    let count = 2 * common::CHUNK as u32 + 44;
    let creates: Vec<LeaseWrite> = (0..count)
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord::released(),
            mode: PutMode::Create,
        })
        .collect();
    let created: Vec<_> = store
        .put_leases(&group, &creates)
        .await
        .expect("batch attempted")
        .into_iter()
        .map(|result| result.expect("every create succeeds"))
        .collect();

    // Someone else writes partition 150 (in the second chunk) first.
    let stolen = 150;
    let mut thief = LeaseRecord::released();
    thief.note = Some("thief".to_owned());
    store
        .put_lease(
            &group,
            PartitionId(stolen),
            &thief,
            PutMode::Update(created[stolen as usize].clone()),
        )
        .await
        .unwrap();
    let mut renewals: Vec<LeaseWrite> = (0..count)
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord {
                epoch: leasehold::Epoch(1),
                ..LeaseRecord::released()
            },
            mode: PutMode::Update(created[partition as usize].clone()),
        })
        .collect();
    // The same partition twice in one batch: only the first write can match the version.
    renewals.push(renewals[0].clone());
    let results = store
        .put_leases(&group, &renewals)
        .await
        .expect("attempted");
    assert_eq!(results.len(), renewals.len());
    for (index, result) in results.iter().enumerate() {
        let partition = renewals[index].partition.0;
        if partition == stolen || index == renewals.len() - 1 {
            assert!(
                matches!(result, Err(StoreError::Conflict { .. })),
                "write {index} (p{partition}): {result:?}"
            );
        } else {
            assert!(result.is_ok(), "write {index} (p{partition}): {result:?}");
        }
    }
    let listing = store.list_leases(&group).await.unwrap();
    assert_eq!(listing.records.len(), count as usize);
    for record in &listing.records {
        let partition = record.key.0;
        if partition == stolen {
            assert_eq!(record.value, thief);
        } else {
            assert_eq!(record.value.epoch.0, 1, "p{partition}");
            assert_eq!(
                Some(&record.version),
                results[partition as usize].as_ref().ok()
            );
        }
    }
}
