//! The checks of the conformance suite, one function each.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::{LeaseRecord, LeaseState, MemberRecord};
use crate::store::{LeaseStore, LeaseWrite, PutMode};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

use super::{unique_group, Harness, Listed, Malformed, MALFORMED_FIRST_PARTITION};

fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid test node")
}

fn lease(partition: u32) -> RecordKey {
    RecordKey::Lease(PartitionId(partition))
}

fn member(name: &str) -> RecordKey {
    RecordKey::Member(node(name))
}

/// The kind of a failed call's error and the record it names, so that a check compares both:
/// a store must say which record a conflict, a duplicate or a missing record is about.
fn failure<T>(result: &Result<T, StoreError>) -> Option<(&'static str, RecordKey)> {
    let (kind, key) = match result.as_ref().err()? {
        StoreError::Conflict { key } => ("conflict", key),
        StoreError::AlreadyExists { key } => ("already exists", key),
        StoreError::NotFound { key } => ("not found", key),
        StoreError::Corrupt { key, .. } => ("corrupt", key),
        _ => return None,
    };
    Some((kind, key.clone()))
}

/// The session of the records the checks write whole: above `i64::MAX`, so that a store
/// keeping sessions in signed 64-bit integers must keep all their bits.
const SESSION: u64 = u64::MAX - 6;

pub(super) fn held_by(owner: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        owner: Some(node(owner)),
        epoch: Epoch(epoch),
        state: LeaseState::Held,
        prohibited: vec![node("banned-1"), node("banned-2")],
        load: Some(2.5),
        note: Some("conformance".to_owned()),
        written_at_unix_ms: Some(1_700_000_000_123),
        previous_owner: Some(node("before")),
        handed_to: None,
        session: Some(SESSION),
    }
}

/// Creates `partition`'s lease record in `group`, released, and returns its version; panics
/// if the store refuses.
pub async fn create(store: &dyn LeaseStore, group: &GroupName, partition: u32) -> Version {
    store
        .put_lease(
            group,
            PartitionId(partition),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap_or_else(|e| panic!("create {group}/{partition}: {e}"))
}

/// Created records read back equal, absent ones read as `None`, listings are ordered by
/// partition number (not by text: 10 after 9), and a second create is `AlreadyExists`.
pub async fn create_get_and_ordered_list(store: Arc<dyn LeaseStore>) {
    let group = unique_group("order");
    for partition in [10, 2, 0, 9, 1] {
        create(&*store, &group, partition).await;
    }
    let full = held_by("n1", 3);
    let version = store
        .put_lease(&group, PartitionId(11), &full, PutMode::Create)
        .await
        .expect("create a full record");
    let got = store
        .get_lease(&group, PartitionId(11))
        .await
        .expect("get")
        .expect("record exists");
    assert_eq!(got.value, full, "every field round-trips");
    assert_eq!(
        got.version, version,
        "get returns the version the write returned"
    );
    assert_eq!(got.key, PartitionId(11));
    assert!(store
        .get_lease(&group, PartitionId(5))
        .await
        .expect("get")
        .is_none());

    let listing = store.list_leases(&group).await.expect("list");
    assert!(listing.corrupt.is_empty());
    let keys: Vec<u32> = listing.records.iter().map(|r| r.key.0).collect();
    assert_eq!(
        keys,
        vec![0, 1, 2, 9, 10, 11],
        "ordered by partition number"
    );

    let again = store
        .put_lease(
            &group,
            PartitionId(2),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await;
    assert_eq!(
        failure(&again),
        Some(("already exists", lease(2))),
        "second create: {again:?}"
    );
}

/// An update naming the current version succeeds and changes the version; an update of a
/// missing record is `NotFound`.
pub async fn update_if_version(store: Arc<dyn LeaseStore>) {
    let group = unique_group("update");
    let v1 = create(&*store, &group, 0).await;
    let record = held_by("n1", 1);
    let v2 = store
        .put_lease(&group, PartitionId(0), &record, PutMode::Update(v1.clone()))
        .await
        .expect("update with the current version");
    assert_ne!(v1, v2, "every write changes the version");
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((got.value, got.version), (record.clone(), v2.clone()));

    let missing = store
        .put_lease(&group, PartitionId(1), &record, PutMode::Update(v2))
        .await;
    assert_eq!(
        failure(&missing),
        Some(("not found", lease(1))),
        "update of a missing record: {missing:?}"
    );
}

/// A write or delete naming an old version is a `Conflict` and changes nothing.
pub async fn stale_write_rejected(store: Arc<dyn LeaseStore>) {
    let group = unique_group("stale");
    let v1 = create(&*store, &group, 0).await;
    let v2 = store
        .put_lease(
            &group,
            PartitionId(0),
            &held_by("n1", 1),
            PutMode::Update(v1.clone()),
        )
        .await
        .expect("first update");
    let stale = store
        .put_lease(
            &group,
            PartitionId(0),
            &held_by("n2", 1),
            PutMode::Update(v1.clone()),
        )
        .await;
    assert_eq!(
        failure(&stale),
        Some(("conflict", lease(0))),
        "stale update: {stale:?}"
    );
    let stale_delete = store.delete_lease(&group, PartitionId(0), &v1).await;
    assert_eq!(
        failure(&stale_delete),
        Some(("conflict", lease(0))),
        "stale delete: {stale_delete:?}"
    );
    let got = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.version, v2);
    assert_eq!(
        got.value.owner,
        Some(node("n1")),
        "the stale writer changed nothing"
    );
}

/// After a delete the record is gone, and re-creating it yields a version never seen before,
/// so a node holding the old version can never write over the new record.
pub async fn delete_then_recreate_gets_new_version(store: Arc<dyn LeaseStore>) {
    let group = unique_group("recreate");
    let mut seen = vec![create(&*store, &group, 0).await];
    for round in 0..3 {
        let last = seen.last().unwrap().clone();
        store
            .delete_lease(&group, PartitionId(0), &last)
            .await
            .unwrap_or_else(|e| panic!("delete round {round}: {e}"));
        assert!(store
            .get_lease(&group, PartitionId(0))
            .await
            .unwrap()
            .is_none());
        let missing = store.delete_lease(&group, PartitionId(0), &last).await;
        assert_eq!(
            failure(&missing),
            Some(("not found", lease(0))),
            "{missing:?}"
        );
        let fresh = create(&*store, &group, 0).await;
        assert!(
            !seen.contains(&fresh),
            "version {fresh} was seen before: {seen:?}"
        );
        let stale = store
            .put_lease(
                &group,
                PartitionId(0),
                &held_by("old", 1),
                PutMode::Update(last),
            )
            .await;
        assert_eq!(failure(&stale), Some(("conflict", lease(0))), "{stale:?}");
        seen.push(fresh);
    }
}

/// Records in one group are invisible in another, and partition 0 of two groups are two
/// records.
pub async fn groups_are_isolated(store: Arc<dyn LeaseStore>) {
    let a = unique_group("iso-a");
    let b = unique_group("iso-b");
    let va = create(&*store, &a, 0).await;
    create(&*store, &a, 1).await;
    assert!(store.list_leases(&b).await.unwrap().records.is_empty());
    assert!(store.get_lease(&b, PartitionId(0)).await.unwrap().is_none());
    create(&*store, &b, 0).await;
    store
        .put_lease(&a, PartitionId(0), &held_by("n1", 1), PutMode::Update(va))
        .await
        .expect("update in a");
    let in_b = store.get_lease(&b, PartitionId(0)).await.unwrap().unwrap();
    assert_eq!(
        in_b.value,
        LeaseRecord::released(),
        "a's write did not reach b"
    );
    assert_eq!(store.list_leases(&a).await.unwrap().records.len(), 2);
    assert_eq!(store.list_leases(&b).await.unwrap().records.len(), 1);
    store
        .put_member(&a, &node("m"), &MemberRecord::default(), PutMode::Create)
        .await
        .unwrap();
    assert!(store.list_members(&b).await.unwrap().records.is_empty());
}

/// Member records obey the same create / update / delete rules and list by node name.
pub async fn members_round_trip(store: Arc<dyn LeaseStore>) {
    let group = unique_group("members");
    let record = MemberRecord {
        weight: 3,
        draining: true,
        load: Some(0.75),
        heartbeat: 42,
        written_at_unix_ms: Some(1_700_000_000_000),
        lease_validity: Some(std::time::Duration::from_nanos(30_000_000_007)),
        acquire_after: Some(std::time::Duration::from_secs(45)),
        capacity: Some(1.5),
        max_load: Some(0.8),
        max_partitions: Some(40),
        address: Some("http://node-b:8080".to_owned()),
        metadata: [("zone".to_owned(), "b".to_owned())].into(),
        session: Some(SESSION),
        // Unlike the session, so that a store swapping the two columns cannot pass.
        replaced: Some(1 << 63 | 5),
    };
    let v_b = store
        .put_member(&group, &node("node-b"), &record, PutMode::Create)
        .await
        .expect("create b");
    store
        .put_member(
            &group,
            &node("node-a"),
            &MemberRecord::default(),
            PutMode::Create,
        )
        .await
        .expect("create a");
    let dup = store
        .put_member(
            &group,
            &node("node-a"),
            &MemberRecord::default(),
            PutMode::Create,
        )
        .await;
    assert_eq!(
        failure(&dup),
        Some(("already exists", member("node-a"))),
        "{dup:?}"
    );
    let got = store
        .get_member(&group, &node("node-b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (got.value.clone(), got.version.clone()),
        (record, v_b.clone())
    );
    let names: Vec<String> = store
        .list_members(&group)
        .await
        .unwrap()
        .records
        .iter()
        .map(|m| m.key.to_string())
        .collect();
    assert_eq!(names, vec!["node-a", "node-b"]);

    let v_b2 = store
        .put_member(
            &group,
            &node("node-b"),
            &MemberRecord::default(),
            PutMode::Update(v_b.clone()),
        )
        .await
        .expect("update b");
    assert_ne!(v_b, v_b2);
    let stale = store
        .put_member(
            &group,
            &node("node-b"),
            &MemberRecord::default(),
            PutMode::Update(v_b.clone()),
        )
        .await;
    assert_eq!(
        failure(&stale),
        Some(("conflict", member("node-b"))),
        "{stale:?}"
    );
    let stale_delete = store.delete_member(&group, &node("node-b"), &v_b).await;
    assert_eq!(
        failure(&stale_delete),
        Some(("conflict", member("node-b"))),
        "{stale_delete:?}"
    );
    store
        .delete_member(&group, &node("node-b"), &v_b2)
        .await
        .expect("delete b");
    assert!(store
        .get_member(&group, &node("node-b"))
        .await
        .unwrap()
        .is_none());
    let missing = store
        .put_member(
            &group,
            &node("node-c"),
            &MemberRecord::default(),
            PutMode::Update(v_b2.clone()),
        )
        .await;
    assert_eq!(
        failure(&missing),
        Some(("not found", member("node-c"))),
        "{missing:?}"
    );
    let gone = store.delete_member(&group, &node("node-b"), &v_b2).await;
    assert_eq!(
        failure(&gone),
        Some(("not found", member("node-b"))),
        "deleting a member that is gone: {gone:?}"
    );
}

/// Listings return every record however many there are: a store that reads in pages (Azure
/// Tables answers at most 1,000 entities a request) must follow them to the end, including
/// past a last page that is exactly full.
pub async fn long_listings_are_complete(store: Arc<dyn LeaseStore>) {
    const LEASES: u32 = 4_000;
    const MEMBERS: usize = 1_010;
    let group = unique_group("long");
    let writes: Vec<LeaseWrite> = (0..LEASES)
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord::released(),
            mode: PutMode::Create,
        })
        .collect();
    for chunk in writes.chunks(100) {
        let results = store.put_leases(&group, chunk).await.expect("batch");
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    for index in 0..MEMBERS {
        store
            .put_member(
                &group,
                &node(&format!("node-{index:05}")),
                &MemberRecord::default(),
                PutMode::Create,
            )
            .await
            .expect("create member");
    }
    let leases = store.list_leases(&group).await.expect("list leases");
    assert!(leases.corrupt.is_empty(), "{:?}", leases.corrupt);
    let keys: Vec<u32> = leases.records.iter().map(|r| r.key.0).collect();
    assert_eq!(
        keys,
        (0..LEASES).collect::<Vec<_>>(),
        "every lease, in order"
    );
    let members = store.list_members(&group).await.expect("list members");
    assert!(members.corrupt.is_empty(), "{:?}", members.corrupt);
    assert_eq!(members.records.len(), MEMBERS, "every member");
    assert!(members.records.windows(2).all(|w| w[0].key < w[1].key));
}

/// A batch applies each write on its own condition: a stale update, a create of a record
/// that exists and an update of one that does not each fail alone with their own error, and
/// the returned versions are the ones a later read sees.
pub async fn batch_write_reports_each_result(store: Arc<dyn LeaseStore>) {
    let group = unique_group("batch");
    let mut versions = Vec::new();
    for partition in 0..5 {
        versions.push(create(&*store, &group, partition).await);
    }
    let stale = versions[2].clone();
    store
        .put_lease(
            &group,
            PartitionId(2),
            &held_by("thief", 1),
            PutMode::Update(stale.clone()),
        )
        .await
        .unwrap();
    let writes: Vec<LeaseWrite> = (0..5)
        .map(|p| LeaseWrite {
            partition: PartitionId(p),
            record: held_by("n1", u64::from(p) + 1),
            mode: PutMode::Update(versions[p as usize].clone()),
        })
        .chain([
            LeaseWrite {
                partition: PartitionId(7),
                record: LeaseRecord::released(),
                mode: PutMode::Create,
            },
            // A create of a record that exists, and an update of one that does not: each
            // fails alone, with its own error.
            LeaseWrite {
                partition: PartitionId(4),
                record: LeaseRecord::released(),
                mode: PutMode::Create,
            },
            LeaseWrite {
                partition: PartitionId(9),
                record: LeaseRecord::released(),
                mode: PutMode::Update(versions[0].clone()),
            },
        ])
        .collect();
    let results = store
        .put_leases(&group, &writes)
        .await
        .expect("batch attempted");
    assert_eq!(results.len(), writes.len(), "one result per write");
    for (index, result) in results.iter().enumerate() {
        let partition = writes[index].partition;
        let expected_failure = match (partition.0, &writes[index].mode) {
            (2, _) => Some("conflict"),
            (4, PutMode::Create) => Some("already exists"),
            (9, _) => Some("not found"),
            _ => None,
        };
        if let Some(kind) = expected_failure {
            assert_eq!(
                failure(result),
                Some((kind, lease(partition.0))),
                "write {index} on p{partition}: {result:?}"
            );
            continue;
        }
        let version = result
            .as_ref()
            .unwrap_or_else(|e| panic!("p{partition}: {e}"));
        let got = store.get_lease(&group, partition).await.unwrap().unwrap();
        assert_eq!(&got.version, version, "p{partition}");
        assert_eq!(got.value, writes[index].record, "p{partition}");
    }
    let p2 = store
        .get_lease(&group, PartitionId(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p2.value.owner, Some(node("thief")));
    let empty = store.put_leases(&group, &[]).await.expect("empty batch");
    assert!(empty.is_empty());
}

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

/// `writers` tasks each perform `increments` read-modify-write increments of one record's
/// epoch with compare-and-set, retrying on conflict. Exactly `writers × increments` writes
/// succeed and the final epoch equals that number: no update is lost and none is doubled.
pub async fn concurrent_increments_race(store: Arc<dyn LeaseStore>, writers: u32, increments: u32) {
    let group = unique_group("race");
    create(&*store, &group, 0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..writers {
        let store = Arc::clone(&store);
        let group = group.clone();
        tasks.spawn(async move { increment_loop(&*store, &group, writer, increments).await });
    }
    let mut successes = 0;
    while let Some(result) = tasks.join_next().await {
        successes += result.expect("writer task panicked");
    }
    let total = u64::from(writers) * u64::from(increments);
    assert_eq!(successes, total, "successful compare-and-sets");
    let last = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.value.epoch, Epoch(total), "final value");
}

/// The writer side of [`concurrent_increments_race`]; returns its successful writes.
pub async fn increment_loop(
    store: &dyn LeaseStore,
    group: &GroupName,
    writer: u32,
    increments: u32,
) -> u64 {
    const MAX_ATTEMPTS: u32 = 1_000_000;
    let owner = node(&format!("writer-{writer}"));
    let mut done = 0;
    let mut attempts = 0;
    while done < increments {
        attempts += 1;
        assert!(attempts < MAX_ATTEMPTS, "writer {writer} made no progress");
        let current = store
            .get_lease(group, PartitionId(0))
            .await
            .expect("read")
            .expect("record exists");
        let mut next = current.value.clone();
        next.epoch = current.value.epoch.next();
        next.owner = Some(owner.clone());
        match store
            .put_lease(
                group,
                PartitionId(0),
                &next,
                PutMode::Update(current.version),
            )
            .await
        {
            Ok(_) => done += 1,
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            // A transient failure leaves the write's effect unknown, which would make the
            // count meaningless: fail loudly instead of guessing.
            Err(error) => panic!("writer {writer}: {error}"),
        }
    }
    u64::from(done)
}

/// The next hint of `feed`; panics if none comes within 10 s or the feed has ended.
pub async fn next_hint(feed: &mut crate::store::ChangeFeed) -> crate::store::Change {
    tokio::time::timeout(std::time::Duration::from_secs(10), feed.next())
        .await
        .expect("a change hint within 10 s")
        .expect("the feed is still open")
}

/// Change hints, where the store offers them (a store without them must say
/// `NotSupported`): each lease and member write in the group is reported, naming what
/// changed, and writes in other groups and of the group record are not. A hint may be coarse (`Lease(p)`, `Member(n)`) but never wrong: a
/// `LeaseWritten` carries the state written, and `MemberUpdated` only follows a rewrite of
/// an existing member.
pub async fn change_hints_name_what_changed(store: Arc<dyn LeaseStore>) {
    use crate::store::Change;
    let group = unique_group("hints");
    let other = unique_group("hints-other");
    let mut feed = match store.watch(&group).await {
        Ok(feed) => feed,
        Err(StoreError::NotSupported(_)) => {
            println!("change hints: not offered by this store (readers poll)");
            return;
        }
        Err(error) => panic!("watch failed: {error}"),
    };
    let lease_hint = |change: &Change, partition: u32, state: LeaseState| match change {
        Change::Lease(p) => *p == PartitionId(partition),
        Change::LeaseWritten {
            partition: p,
            state: s,
        } => *p == PartitionId(partition) && *s == state,
        _ => false,
    };

    create(&*store, &other, 1).await;
    // Nodes read the group record when they join, not at a scan: its writes are no hint.
    let record = crate::group::GroupRecord::default();
    let version = store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create the group record");
    store
        .put_group(&group, &record, PutMode::Update(version))
        .await
        .expect("update the group record");
    let v1 = create(&*store, &group, 7).await;
    let hint = next_hint(&mut feed).await;
    assert!(
        lease_hint(&hint, 7, LeaseState::Released),
        "create of 7 in the group, the group record's writes unreported: {hint:?}"
    );
    let v2 = store
        .put_lease(
            &group,
            PartitionId(7),
            &held_by("n1", 1),
            PutMode::Update(v1),
        )
        .await
        .expect("update");
    let hint = next_hint(&mut feed).await;
    assert!(
        lease_hint(&hint, 7, LeaseState::Held),
        "update of 7: {hint:?}"
    );

    let member = node("node-1");
    let created = store
        .put_member(&group, &member, &MemberRecord::default(), PutMode::Create)
        .await
        .expect("create member");
    let hint = next_hint(&mut feed).await;
    assert_eq!(
        hint,
        Change::Member(member.clone()),
        "a join is never reported as a rewrite"
    );
    store
        .put_member(
            &group,
            &member,
            &MemberRecord::default(),
            PutMode::Update(created),
        )
        .await
        .expect("rewrite member");
    let hint = next_hint(&mut feed).await;
    assert!(
        matches!(&hint, Change::MemberUpdated(n) | Change::Member(n) if *n == member),
        "member rewrite: {hint:?}"
    );

    store
        .delete_lease(&group, PartitionId(7), &v2)
        .await
        .expect("delete");
    let hint = next_hint(&mut feed).await;
    assert_eq!(
        hint,
        Change::Lease(PartitionId(7)),
        "a delete has no state to report"
    );
}
