//! Checks of the optional fields of lease and member records: every write path keeps them
//! exactly, and every store refuses the same oversize member record the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::StoreError;
use crate::record::{LeaseRecord, LeaseState, MemberRecord};
use crate::store::{LeaseStore, LeaseWrite, PutMode, TxnWrite};
use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

use super::unique_group;

fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid test node")
}

/// A lease record with `previous_owner` set, held by `owner` or released when `None`.
fn handed_over(owner: Option<&str>, previous: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        owner: owner.map(node),
        epoch: Epoch(epoch),
        state: if owner.is_some() {
            LeaseState::Held
        } else {
            LeaseState::Released
        },
        previous_owner: Some(node(previous)),
        ..LeaseRecord::default()
    }
}

/// A released record naming both the node that released it and the node it is handed to,
/// so that a store mixing up the two columns cannot pass.
fn released_to(previous: &str, heir: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        handed_to: Some(node(heir)),
        ..handed_over(None, previous, epoch)
    }
}

/// A released record reserved for `name`, restarting in place.
fn reserved_for(name: &str, epoch: u64) -> LeaseRecord {
    let mut record = LeaseRecord {
        epoch: Epoch(epoch),
        ..LeaseRecord::released()
    };
    record.reserve_for(&node(name));
    record
}

/// A member record with every optional field set, with text that quotes, escapes, commas
/// and non-ASCII characters could break in a store that parses what it keeps.
fn described_member() -> MemberRecord {
    let metadata = [
        ("zone", "eu-west-1a"),
        ("version", "1.2.3"),
        ("quoted", r#"say "hi", \ then = leave; 'done'"#),
        ("unicode", "Zürich ☃ 東京"),
        ("empty value", ""),
        ("{json-looking}", "[1, 2]"),
    ];
    MemberRecord {
        weight: 2,
        capacity: Some(2.5),
        max_load: Some(0.1),
        max_partitions: Some(12),
        address: Some("http://node-a.example:8080/leasehold?x=1&y=\"2\"".to_owned()),
        metadata: metadata
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect(),
        ..MemberRecord::default()
    }
}

/// A member record whose address and metadata are exactly at their limits, and whose
/// numbers are at the edges of their ranges.
fn member_at_the_limits() -> MemberRecord {
    let address = format!(
        "https://ü.example/{}",
        "a".repeat(MemberRecord::MAX_ADDRESS_BYTES - "https://ü.example/".len())
    );
    let mut metadata: BTreeMap<String, String> = (0..MemberRecord::MAX_METADATA_ENTRIES)
        .map(|index| (format!("key-{index:02}"), String::new()))
        .collect();
    let room = MemberRecord::MAX_METADATA_BYTES - crate::codec::encode_metadata(&metadata).len();
    metadata.insert("key-00".to_owned(), "v".repeat(room));
    MemberRecord {
        capacity: Some(0.0),
        max_load: Some(1e15),
        max_partitions: Some(u32::MAX),
        address: Some(address),
        metadata,
        ..MemberRecord::default()
    }
}

async fn get_lease(store: &dyn LeaseStore, group: &GroupName, partition: u32) -> LeaseRecord {
    store
        .get_lease(group, PartitionId(partition))
        .await
        .unwrap_or_else(|e| panic!("get lease {partition}: {e}"))
        .unwrap_or_else(|| panic!("lease {partition} exists"))
        .value
}

async fn listed_lease(store: &dyn LeaseStore, group: &GroupName, partition: u32) -> LeaseRecord {
    let listing = store.list_leases(group).await.expect("list leases");
    assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
    listing
        .records
        .into_iter()
        .find(|record| record.key == PartitionId(partition))
        .unwrap_or_else(|| panic!("lease {partition} listed"))
        .value
}

/// Checks that `expected` reads back the same from `get_lease` and `list_leases`.
async fn assert_lease(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: u32,
    expected: &LeaseRecord,
    what: &str,
) {
    assert_eq!(
        &get_lease(store, group, partition).await,
        expected,
        "get: {what}"
    );
    assert_eq!(
        &listed_lease(store, group, partition).await,
        expected,
        "list: {what}"
    );
}

/// Writes `record` to member `name` and checks that it reads back the same from
/// `get_member` and `list_members`.
async fn put_and_read_member(
    store: &dyn LeaseStore,
    group: &GroupName,
    name: &str,
    record: &MemberRecord,
    mode: PutMode,
    what: &str,
) -> Version {
    let version = store
        .put_member(group, &node(name), record, mode)
        .await
        .unwrap_or_else(|e| panic!("write member {name}, {what}: {e}"));
    let got = store
        .get_member(group, &node(name))
        .await
        .expect("get member")
        .expect("member exists");
    assert_eq!(
        (&got.value, &got.version),
        (record, &version),
        "get: {what}"
    );
    let listing = store.list_members(group).await.expect("list members");
    assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
    let listed = listing
        .records
        .iter()
        .find(|member| member.key == node(name))
        .expect("member listed");
    assert_eq!(&listed.value, record, "list: {what}");
    let heads = store
        .list_member_heads(group)
        .await
        .expect("list member heads");
    assert!(heads.corrupt.is_empty(), "{:?}", heads.corrupt);
    assert!(
        heads
            .records
            .iter()
            .map(|m| &m.key)
            .eq(listing.records.iter().map(|m| &m.key)),
        "heads list the members in order: {what}"
    );
    let head = heads
        .records
        .iter()
        .find(|member| member.key == node(name))
        .expect("member head listed");
    assert_eq!(
        (&head.value, &head.version),
        (&crate::MemberHead::from(record), &version),
        "heads: {what}"
    );
    version
}

/// A lease record's `previous_owner` and `handed_to` are kept by creates, updates and
/// batches, and each cleared by a write without it, and so is the owner of a released record
/// reserved for a restarting node; a member record's capacity, maximum
/// load, partition cap, address and metadata are kept exactly, at their limits too, and
/// cleared the same way.
pub async fn optional_fields_round_trip(store: Arc<dyn LeaseStore>) {
    let group = unique_group("fields");
    let released = released_to("leaver", "heir", 4);
    let v0 = store
        .put_lease(&group, PartitionId(0), &released, PutMode::Create)
        .await
        .expect("create a released record naming who released it and who it is handed to");
    assert_lease(&*store, &group, 0, &released, "created").await;
    let handed_on = released_to("leaver", "second-heir", 4);
    let v0 = store
        .put_lease(&group, PartitionId(0), &handed_on, PutMode::Update(v0))
        .await
        .expect("update to another heir");
    assert_lease(&*store, &group, 0, &handed_on, "updated").await;
    let held = handed_over(Some("second-heir"), "leaver", 5);
    let v0 = store
        .put_lease(&group, PartitionId(0), &held, PutMode::Update(v0))
        .await
        .expect("update without a hand-off");
    assert_lease(&*store, &group, 0, &held, "hand-off cleared").await;
    let cleared = LeaseRecord {
        previous_owner: None,
        ..held.clone()
    };
    let v0 = store
        .put_lease(&group, PartitionId(0), &cleared, PutMode::Update(v0))
        .await
        .expect("update without a previous owner");
    assert_lease(&*store, &group, 0, &cleared, "previous owner cleared").await;
    // Released, yet naming an owner: what reserves a partition for a node restarting in
    // place. A store that dropped the owner of a released record would turn it into a
    // hand-back any node may take.
    let reserved = reserved_for("restarting", 5);
    let v0 = store
        .put_lease(&group, PartitionId(0), &reserved, PutMode::Update(v0))
        .await
        .expect("update to a record reserved for a restarting node");
    assert_lease(&*store, &group, 0, &reserved, "reserved").await;
    assert!(get_lease(&*store, &group, 0).await.is_reserved());

    let writes = vec![
        LeaseWrite {
            partition: PartitionId(0),
            record: released_to("second-heir", "third-heir", 6),
            mode: PutMode::Update(v0),
        },
        LeaseWrite {
            partition: PartitionId(1),
            record: released_to("gone-1", "heir-1", 2),
            mode: PutMode::Create,
        },
        LeaseWrite {
            partition: PartitionId(2),
            record: handed_over(Some("n2"), "gone-2", 3),
            mode: PutMode::Create,
        },
        LeaseWrite {
            partition: PartitionId(3),
            record: LeaseRecord::released(),
            mode: PutMode::Create,
        },
        LeaseWrite {
            partition: PartitionId(4),
            record: reserved_for("restarting", 2),
            mode: PutMode::Create,
        },
    ];
    let results = store
        .put_leases(&group, &writes)
        .await
        .expect("batch attempted");
    for (write, result) in writes.iter().zip(&results) {
        let partition = write.partition.0;
        result
            .as_ref()
            .unwrap_or_else(|e| panic!("batch write of lease {partition}: {e}"));
        assert_lease(
            &*store,
            &group,
            partition,
            &write.record,
            "written in a batch",
        )
        .await;
    }

    let described = described_member();
    let version = put_and_read_member(
        &*store,
        &group,
        "node-a",
        &described,
        PutMode::Create,
        "created with every field",
    )
    .await;
    let version = put_and_read_member(
        &*store,
        &group,
        "node-a",
        &member_at_the_limits(),
        PutMode::Update(version),
        "updated to the limits",
    )
    .await;
    put_and_read_member(
        &*store,
        &group,
        "node-a",
        &MemberRecord::default(),
        PutMode::Update(version),
        "every optional field cleared",
    )
    .await;
}

/// The sessions the session checks write, in this order: a small one; ones above
/// `i64::MAX`, which a store keeping sessions in signed 64-bit integers must keep bit for bit
/// (the top bit alone, all bits set); zero, which is a session and not the absence of one;
/// and `i64::MAX` itself.
const SESSIONS: [u64; 6] = [7, u64::MAX - 6, 1 << 63, u64::MAX, 0, i64::MAX as u64];

/// A held lease record taken in `session`, or in none.
fn in_session(owner: &str, epoch: u64, session: Option<u64>) -> LeaseRecord {
    LeaseRecord {
        session,
        ..handed_over(Some(owner), "before", epoch)
    }
}

/// A member record in `session`, or in none, with its other fields set so that a store
/// mixing up columns cannot pass. The stamp of the session it replaced (`replaced`) goes
/// with it, its bits turned and inverted so that the two differ, and every kind of value
/// the sessions cover is covered there too.
fn member_in_session(heartbeat: u64, session: Option<u64>) -> MemberRecord {
    MemberRecord {
        heartbeat,
        session,
        replaced: session.map(|session| !session.rotate_left(32)),
        ..described_member()
    }
}

/// A lease record's and a member record's `session` are kept exactly by creates, updates
/// and batches, whatever their value (above `i64::MAX` too, and zero), and cleared by a
/// write without one.
pub async fn sessions_round_trip(store: Arc<dyn LeaseStore>) {
    let store = &*store;
    let group = unique_group("sessions");
    let [small, big, ..] = SESSIONS;
    let first = in_session("n1", 1, Some(big));
    let mut v0 = store
        .put_lease(&group, PartitionId(0), &first, PutMode::Create)
        .await
        .expect("create a lease in a session");
    let what = format!("created in session {big}");
    assert_lease(store, &group, 0, &first, &what).await;
    for (epoch, session) in (2..).zip(SESSIONS) {
        let record = in_session("n1", epoch, Some(session));
        v0 = store
            .put_lease(&group, PartitionId(0), &record, PutMode::Update(v0))
            .await
            .unwrap_or_else(|e| panic!("update to session {session}: {e}"));
        let what = format!("updated to session {session}");
        assert_lease(store, &group, 0, &record, &what).await;
    }
    let outside = in_session("n1", 9, None);
    let v0 = store
        .put_lease(&group, PartitionId(0), &outside, PutMode::Update(v0))
        .await
        .expect("update without a session");
    assert_lease(store, &group, 0, &outside, "session cleared").await;
    let v1 = store
        .put_lease(
            &group,
            PartitionId(1),
            &in_session("n2", 1, Some(small)),
            PutMode::Create,
        )
        .await
        .expect("create another lease in a session");

    let writes = vec![
        LeaseWrite {
            partition: PartitionId(0),
            record: in_session("n1", 10, Some(big)),
            mode: PutMode::Update(v0),
        },
        LeaseWrite {
            partition: PartitionId(1),
            record: in_session("n2", 2, None),
            mode: PutMode::Update(v1),
        },
        LeaseWrite {
            partition: PartitionId(2),
            record: in_session("n3", 1, Some(small)),
            mode: PutMode::Create,
        },
        LeaseWrite {
            partition: PartitionId(3),
            record: in_session("n3", 1, Some(u64::MAX)),
            mode: PutMode::Create,
        },
        LeaseWrite {
            partition: PartitionId(4),
            record: LeaseRecord::released(),
            mode: PutMode::Create,
        },
    ];
    let results = store
        .put_leases(&group, &writes)
        .await
        .expect("batch attempted");
    for (write, result) in writes.iter().zip(&results) {
        let partition = write.partition.0;
        result
            .as_ref()
            .unwrap_or_else(|e| panic!("batch write of lease {partition}: {e}"));
        let what = format!("written in a batch in session {:?}", write.record.session);
        assert_lease(store, &group, partition, &write.record, &what).await;
    }

    let mut version = put_and_read_member(
        store,
        &group,
        "node-a",
        &member_in_session(1, Some(big)),
        PutMode::Create,
        &format!("created in session {big}"),
    )
    .await;
    for (heartbeat, session) in (2..).zip(SESSIONS) {
        version = put_and_read_member(
            store,
            &group,
            "node-a",
            &member_in_session(heartbeat, Some(session)),
            PutMode::Update(version),
            &format!("updated to session {session}"),
        )
        .await;
    }
    put_and_read_member(
        store,
        &group,
        "node-a",
        &member_in_session(9, None),
        PutMode::Update(version),
        "session cleared",
    )
    .await;
    put_and_read_member(
        store,
        &group,
        "node-b",
        &member_in_session(1, Some(small)),
        PutMode::Create,
        &format!("created in session {small}"),
    )
    .await;
}

/// A transaction keeps the `session` of the lease and member records it writes exactly,
/// as single writes do: created in a session, moved to another (above `i64::MAX` too, and
/// zero), and cleared by a write without one.
pub async fn sessions_round_trip_in_transactions(store: Arc<dyn LeaseStore>) {
    let store = &*store;
    let group = unique_group("txn-sessions");
    let [small, big, ..] = SESSIONS;
    // Each step: the sessions of lease 0, of member `a` and of lease 1, all written in one
    // transaction, starting with creates.
    let steps: Vec<[Option<u64>; 3]> = [[Some(big), Some(big), None]]
        .into_iter()
        .chain(
            SESSIONS
                .iter()
                .zip(SESSIONS.iter().rev())
                .map(|(&mine, &other)| [Some(mine), Some(mine), Some(other)]),
        )
        .chain([[None, None, Some(small)], [Some(small), None, None]])
        .collect();
    let mut versions: Option<Vec<Version>> = None;
    for (epoch, [lease_0, member_a, lease_1]) in (1..).zip(steps) {
        let what = format!("sessions {lease_0:?}, {member_a:?} and {lease_1:?}");
        let mode = |index: usize| match &versions {
            None => PutMode::Create,
            Some(versions) => PutMode::Update(versions[index].clone()),
        };
        let (lease_0, member_a, lease_1) = (
            in_session("a", epoch, lease_0),
            member_in_session(epoch, member_a),
            in_session("b", epoch, lease_1),
        );
        let writes = [
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(0),
                record: lease_0.clone(),
                mode: mode(0),
            }),
            TxnWrite::Member {
                node: node("a"),
                record: member_a.clone(),
                mode: mode(1),
            },
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(1),
                record: lease_1.clone(),
                mode: mode(2),
            }),
        ];
        let written = store
            .transact(&group, &writes)
            .await
            .unwrap_or_else(|e| panic!("a transaction writing {what}: {e}"));
        assert_lease(store, &group, 0, &lease_0, &what).await;
        assert_lease(store, &group, 1, &lease_1, &what).await;
        let got = store
            .get_member(&group, &node("a"))
            .await
            .expect("get member")
            .expect("member exists");
        assert_eq!(
            (&got.value, &got.version),
            (&member_a, &written[1]),
            "get: {what}"
        );
        let listing = store.list_members(&group).await.expect("list members");
        assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
        assert_eq!(
            listing.records.first().map(|member| &member.value),
            Some(&member_a),
            "list: {what}"
        );
        versions = Some(written);
    }
}

/// Member records over a limit of [`MemberRecord::validate`], one field at a time, each
/// with the name of the field it breaks.
fn refused_members() -> Vec<(&'static str, MemberRecord)> {
    let with = |change: fn(&mut MemberRecord)| {
        let mut record = described_member();
        change(&mut record);
        record
    };
    vec![
        (
            "address",
            with(|r| r.address = Some("a".repeat(MemberRecord::MAX_ADDRESS_BYTES + 1))),
        ),
        (
            "address",
            with(|r| r.address = Some("http://a.example/\nX-Injected: 1".to_owned())),
        ),
        ("address", with(|r| r.address = Some(String::new()))),
        (
            "metadata",
            with(|r| {
                r.metadata = (0..=MemberRecord::MAX_METADATA_ENTRIES)
                    .map(|index| (format!("key-{index}"), "v".to_owned()))
                    .collect();
            }),
        ),
        (
            "metadata",
            with(|r| {
                let value = "v".repeat(MemberRecord::MAX_METADATA_BYTES);
                r.metadata = BTreeMap::from([("big".to_owned(), value)]);
            }),
        ),
        (
            "metadata",
            with(|r| {
                r.metadata.insert(String::new(), "empty key".to_owned());
            }),
        ),
        (
            "metadata",
            with(|r| {
                r.metadata.insert("tab\there".to_owned(), "v".to_owned());
            }),
        ),
        ("capacity", with(|r| r.capacity = Some(f64::NAN))),
        ("capacity", with(|r| r.capacity = Some(-1.0))),
        ("max_load", with(|r| r.max_load = Some(f64::INFINITY))),
    ]
}

/// A member record over a size limit (an address over
/// [`MemberRecord::MAX_ADDRESS_BYTES`], metadata over its entry count or its encoded size),
/// holding control characters or empty text, or with a number no JSON can carry is refused
/// with `Invalid` naming the field, by a create and an update alike, and changes nothing.
pub async fn oversize_member_fields_are_refused(store: Arc<dyn LeaseStore>) {
    let group = unique_group("limits");
    let kept = described_member();
    let version = store
        .put_member(&group, &node("node-a"), &kept, PutMode::Create)
        .await
        .expect("create a member within the limits");
    for (field, record) in refused_members() {
        let what = format!("{field} {:?}", record.validate());
        assert_eq!(
            record.validate().map_err(|error| error.field),
            Err(field),
            "the case breaks the limit it is meant to: {what}"
        );
        let updated = store
            .put_member(
                &group,
                &node("node-a"),
                &record,
                PutMode::Update(version.clone()),
            )
            .await;
        assert_refused(&updated, field, &format!("update with {what}"));
        let created = store
            .put_member(&group, &node("node-new"), &record, PutMode::Create)
            .await;
        assert_refused(&created, field, &format!("create with {what}"));
    }
    let got = store
        .get_member(&group, &node("node-a"))
        .await
        .expect("get member")
        .expect("member exists");
    assert_eq!(
        (got.value, got.version),
        (kept, version),
        "refused updates changed nothing"
    );
    assert!(
        store
            .get_member(&group, &node("node-new"))
            .await
            .expect("get member")
            .is_none(),
        "refused creates created nothing"
    );
    let names: Vec<String> = store
        .list_members(&group)
        .await
        .expect("list members")
        .records
        .iter()
        .map(|member| member.key.to_string())
        .collect();
    assert_eq!(names, vec!["node-a"]);
}

fn assert_refused(result: &Result<Version, StoreError>, field: &str, what: &str) {
    match result {
        Err(StoreError::Invalid(message)) => assert!(
            message.contains(field) && message.contains("member "),
            "{what}: the message names the member and the field: {message}"
        ),
        other => panic!("{what}: expected Invalid, got {other:?}"),
    }
}
