//! The checks of the conformance suite, one function each.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::{LeaseRecord, LeaseState, MemberRecord};
use crate::store::{LeaseStore, LeaseWrite, PutMode};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

use super::unique_group;

pub(super) fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid test node")
}

pub(super) fn lease(partition: u32) -> RecordKey {
    RecordKey::Lease(PartitionId(partition))
}

pub(super) fn member(name: &str) -> RecordKey {
    RecordKey::Member(node(name))
}

/// The kind of a failed call's error and the record it names, so that a check compares both:
/// a store must say which record a conflict, a duplicate or a missing record is about.
pub(super) fn failure<T>(result: &Result<T, StoreError>) -> Option<(&'static str, RecordKey)> {
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
