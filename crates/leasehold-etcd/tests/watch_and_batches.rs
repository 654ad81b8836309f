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

/// Sends `signal` to etcd member `name`'s process group.
fn signal_member(pids_dir: &str, name: &str, signal: &str) {
    let pid = std::fs::read_to_string(format!("{pids_dir}/etcd-{name}.pid")).expect("pid file");
    let status = std::process::Command::new("kill")
        .args([signal, "--", &format!("-{}", pid.trim())])
        .status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "kill {signal} {name}: {status:?}"
    );
}

/// A member stopped with SIGSTOP, continued when dropped: a failing test leaves the cluster
/// whole.
struct Stopped<'a> {
    pids_dir: &'a str,
    name: &'a str,
}

impl<'a> Stopped<'a> {
    fn new(pids_dir: &'a str, name: &'a str) -> Self {
        signal_member(pids_dir, name, "-STOP");
        Stopped { pids_dir, name }
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        signal_member(self.pids_dir, self.name, "-CONT");
    }
}

/// A follower applies a write some time after the leader has answered it (here: it was
/// stopped while the write was made). A watch it serves must still start after every write
/// answered before the watch was opened: a node that lists, then watches, would otherwise
/// take an old write for a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_through_a_lagging_follower_reports_no_write_answered_before_it() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    let Some(pids_dir) =
        leasehold::testing::service_env("LEASEHOLD_TEST_ETCD_PIDS_DIR", "the etcd pid files")
    else {
        return;
    };
    let leader = common::leader_index(&endpoints).await;
    let follower = (leader + 1) % endpoints.len();
    let prefix = format!("/leasehold-test/{}", unique_group("follower-watch"));
    let connect = |endpoint: &String| {
        leasehold_etcd::EtcdStore::connect(
            common::test_options(std::slice::from_ref(endpoint)).prefix(prefix.clone()),
        )
    };
    let writer = connect(&endpoints[leader])
        .await
        .expect("connect to the leader");
    let watcher = connect(&endpoints[follower])
        .await
        .expect("connect to a follower");
    let released = LeaseRecord::released();
    for round in 0..5 {
        let group = unique_group("follower-watch");
        let create = |partition| {
            writer.put_lease(&group, PartitionId(partition), &released, PutMode::Create)
        };
        // The other two members commit the write while the follower is stopped, and the
        // watch is asked for before it resumes: it serves the watch as it catches up.
        let stopped = Stopped::new(&pids_dir, common::NAMES[follower]);
        create(1).await.expect("write before the watch");
        let (feed, ()) = tokio::join!(watcher.watch(&group), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(stopped);
        });
        let mut feed = feed.expect("watch");
        create(2).await.expect("write after the watch");
        assert_eq!(
            next_change(&mut feed).await,
            Change::LeaseWritten {
                partition: PartitionId(2),
                state: leasehold::LeaseState::Released
            },
            "round {round}: the first hint is of the write after the watch opened"
        );
    }
}
