//! The conformance checks of multi-record transactions ([`LeaseStore::transact`]), on which
//! session leases rest: a change to a lease and to its holder's session is one write.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::{LeaseRecord, LeaseState, MemberRecord};
use crate::store::{LeaseStore, LeaseWrite, PutMode, TxnWrite, MAX_TRANSACTION_WRITES};
use crate::types::RecordKey;
use crate::types::{Epoch, GroupName, NodeId, PartitionId, Version};

use super::unique_group;

fn node(name: &str) -> NodeId {
    NodeId::new(name).expect("valid test node")
}

fn lease_write(partition: u32, record: LeaseRecord, mode: PutMode) -> TxnWrite {
    TxnWrite::Lease(LeaseWrite {
        partition: PartitionId(partition),
        record,
        mode,
    })
}

fn member_write(name: &str, record: MemberRecord, mode: PutMode) -> TxnWrite {
    TxnWrite::Member {
        node: node(name),
        record,
        mode,
    }
}

fn held_by(owner: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        owner: Some(node(owner)),
        epoch: Epoch(epoch),
        state: LeaseState::Held,
        previous_owner: Some(node("before")),
        load: Some(1.5),
        ..LeaseRecord::default()
    }
}

fn session(heartbeat: u64) -> MemberRecord {
    MemberRecord {
        heartbeat,
        load: Some(3.25),
        ..MemberRecord::default()
    }
}

async fn lease_version(store: &dyn LeaseStore, group: &GroupName, partition: u32) -> Version {
    store
        .get_lease(group, PartitionId(partition))
        .await
        .expect("read lease")
        .unwrap_or_else(|| panic!("lease {partition} exists"))
        .version
}

async fn member_version(store: &dyn LeaseStore, group: &GroupName, name: &str) -> Version {
    store
        .get_member(group, &node(name))
        .await
        .expect("read member")
        .unwrap_or_else(|| panic!("member {name} exists"))
        .version
}

/// Asserts that `result` failed its condition on `key`, with the error `kind` names.
fn assert_refused(result: Result<Vec<Version>, StoreError>, kind: &str, key: RecordKey) {
    let matches = match (&result, kind) {
        (Err(StoreError::Conflict { key: k }), "conflict")
        | (Err(StoreError::NotFound { key: k }), "not found")
        | (Err(StoreError::AlreadyExists { key: k }), "already exists") => *k == key,
        _ => false,
    };
    assert!(matches, "expected {kind} on {key}, got {result:?}");
}

/// A transaction applies every write, with new versions that the records then read back
/// with; a failed condition on any record — a stale version, a missing record, a record that
/// already exists — writes nothing and names that record; a transaction the contract refuses
/// (a record twice, too many writes, an invalid member record) writes nothing either.
pub async fn transaction_writes_all_or_nothing(store: Arc<dyn LeaseStore>) {
    let store = &*store;
    let group = unique_group("txn");
    let released = LeaseRecord::released();
    let mut lease = Vec::new();
    for partition in 0..2 {
        lease.push(
            store
                .put_lease(&group, PartitionId(partition), &released, PutMode::Create)
                .await
                .expect("create lease"),
        );
    }
    let first_session = store
        .put_member(&group, &node("a"), &session(1), PutMode::Create)
        .await
        .expect("create member");

    // Both applied: a take of lease 0 that changes a's session.
    let versions = store
        .transact(
            &group,
            &[
                lease_write(0, held_by("a", 1), PutMode::Update(lease[0].clone())),
                member_write("a", session(2), PutMode::Update(first_session.clone())),
            ],
        )
        .await
        .expect("a transaction whose conditions hold");
    assert_eq!(versions.len(), 2, "one version per write");
    let stored = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.value, held_by("a", 1), "lease written whole");
    assert_eq!(
        stored.version, versions[0],
        "the lease's version as returned"
    );
    assert_ne!(stored.version, lease[0], "a new lease version");
    let member = store.get_member(&group, &node("a")).await.unwrap().unwrap();
    assert_eq!(member.value, session(2), "member written whole");
    assert_eq!(
        member.version, versions[1],
        "the member's version as returned"
    );
    assert_ne!(member.version, first_session, "a new member version");
    let (lease_0, session_a) = (versions[0].clone(), versions[1].clone());

    // A stale session: the lease write is not applied either.
    let result = store
        .transact(
            &group,
            &[
                lease_write(1, held_by("b", 1), PutMode::Update(lease[1].clone())),
                member_write("a", session(3), PutMode::Update(first_session.clone())),
            ],
        )
        .await;
    assert_refused(result, "conflict", RecordKey::Member(node("a")));
    assert_eq!(
        lease_version(store, &group, 1).await,
        lease[1],
        "lease 1 kept"
    );

    // A stale lease: the session write is not applied either.
    let result = store
        .transact(
            &group,
            &[
                member_write("a", session(3), PutMode::Update(session_a.clone())),
                lease_write(0, held_by("b", 2), PutMode::Update(lease[0].clone())),
            ],
        )
        .await;
    assert_refused(result, "conflict", RecordKey::Lease(PartitionId(0)));
    assert_eq!(
        member_version(store, &group, "a").await,
        session_a,
        "a kept"
    );
    assert_eq!(
        lease_version(store, &group, 0).await,
        lease_0,
        "lease 0 kept"
    );

    // A missing record, and a record that already exists.
    let result = store
        .transact(
            &group,
            &[
                member_write("a", session(3), PutMode::Update(session_a.clone())),
                lease_write(5, held_by("a", 1), PutMode::Update(lease_0.clone())),
            ],
        )
        .await;
    assert_refused(result, "not found", RecordKey::Lease(PartitionId(5)));
    let result = store
        .transact(
            &group,
            &[
                lease_write(1, held_by("a", 1), PutMode::Update(lease[1].clone())),
                member_write("a", session(3), PutMode::Create),
            ],
        )
        .await;
    assert_refused(result, "already exists", RecordKey::Member(node("a")));
    assert_eq!(
        member_version(store, &group, "a").await,
        session_a,
        "a kept"
    );
    assert_eq!(
        lease_version(store, &group, 1).await,
        lease[1],
        "lease 1 kept"
    );
    assert!(
        store
            .get_lease(&group, PartitionId(5))
            .await
            .unwrap()
            .is_none(),
        "nothing created by a refused transaction"
    );

    // Creates, several leases and a member at once.
    let versions = store
        .transact(
            &group,
            &[
                lease_write(2, released.clone(), PutMode::Create),
                member_write("b", session(1), PutMode::Create),
                lease_write(3, held_by("b", 1), PutMode::Create),
            ],
        )
        .await
        .expect("creates");
    assert_eq!(versions.len(), 3, "one version per write");
    let leases = store.list_leases(&group).await.unwrap();
    let listed: Vec<(u32, Version)> = leases
        .records
        .iter()
        .map(|l| (l.key.0, l.version.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (0, lease_0.clone()),
            (1, lease[1].clone()),
            (2, versions[0].clone()),
            (3, versions[2].clone()),
        ],
        "the listing shows the created records with their returned versions"
    );
    assert_eq!(member_version(store, &group, "b").await, versions[1]);

    // Refused as invalid, writing nothing.
    let twice = [
        lease_write(1, held_by("a", 1), PutMode::Update(lease[1].clone())),
        lease_write(1, held_by("a", 2), PutMode::Update(lease[1].clone())),
    ];
    let too_many: Vec<TxnWrite> = (0..=MAX_TRANSACTION_WRITES as u32)
        .map(|p| lease_write(10 + p, released.clone(), PutMode::Create))
        .collect();
    let bad_member = MemberRecord {
        capacity: Some(-1.0),
        ..MemberRecord::default()
    };
    let invalid_member = [
        lease_write(1, held_by("a", 1), PutMode::Update(lease[1].clone())),
        member_write("a", bad_member, PutMode::Update(session_a.clone())),
    ];
    for (what, writes) in [
        ("one record twice", &twice[..]),
        ("too many writes", &too_many[..]),
        ("an invalid member record", &invalid_member[..]),
    ] {
        let result = store.transact(&group, writes).await;
        assert!(
            matches!(result, Err(StoreError::Invalid(_))),
            "{what}: refused as invalid, got {result:?}"
        );
    }
    assert_eq!(
        lease_version(store, &group, 1).await,
        lease[1],
        "lease 1 kept"
    );
    assert_eq!(
        member_version(store, &group, "a").await,
        session_a,
        "a kept"
    );
    assert_eq!(
        store.list_leases(&group).await.unwrap().records.len(),
        4,
        "nothing created by a refused transaction"
    );
}

/// `writers` tasks each commit `rounds` transactions that raise a lease's epoch and a
/// session's heartbeat together, retrying on conflict, while one more task rewrites the
/// session alone (as its node's own renewals would). Every transaction that succeeds
/// changes both records, and none succeeds after the session changed under it: at the end
/// the epoch counts the transactions exactly, and the heartbeat counts them plus the lone
/// rewrites.
pub async fn transactions_race_single_writes(
    store: Arc<dyn LeaseStore>,
    writers: u32,
    rounds: u32,
) {
    let group = unique_group("txn-race");
    store
        .put_lease(&group, PartitionId(0), &held_by("h", 0), PutMode::Create)
        .await
        .expect("create lease");
    store
        .put_member(&group, &node("h"), &session(0), PutMode::Create)
        .await
        .expect("create session");
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..writers {
        let (store, group) = (Arc::clone(&store), group.clone());
        tasks.spawn(async move { (true, transact_loop(&*store, &group, writer, rounds).await) });
    }
    let (renewer_store, renewer_group) = (Arc::clone(&store), group.clone());
    tasks.spawn(async move {
        (
            false,
            renew_loop(&*renewer_store, &renewer_group, rounds).await,
        )
    });
    let (mut transactions, mut renewals) = (0, 0);
    while let Some(result) = tasks.join_next().await {
        match result.expect("writer task panicked") {
            (true, done) => transactions += done,
            (false, done) => renewals += done,
        }
    }
    assert_eq!(
        transactions,
        u64::from(writers) * u64::from(rounds),
        "committed transactions"
    );
    let lease = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.value.epoch, Epoch(transactions), "lease epoch");
    let member = store.get_member(&group, &node("h")).await.unwrap().unwrap();
    assert_eq!(
        member.value.heartbeat,
        transactions + renewals,
        "session heartbeat: every transaction and every lone rewrite, none lost"
    );
}

const MAX_ATTEMPTS: u32 = 1_000_000;

async fn transact_loop(store: &dyn LeaseStore, group: &GroupName, writer: u32, rounds: u32) -> u64 {
    let mut done = 0;
    let mut attempts = 0;
    while done < rounds {
        attempts += 1;
        assert!(attempts < MAX_ATTEMPTS, "writer {writer} made no progress");
        // The session is read first, as a taker reads it: any change after this read
        // changes the session again and fails the transaction.
        let member = store.get_member(group, &node("h")).await.expect("read");
        let member = member.expect("session exists");
        let lease = store.get_lease(group, PartitionId(0)).await.expect("read");
        let lease = lease.expect("lease exists");
        let mut next_lease = lease.value.clone();
        next_lease.epoch = lease.value.epoch.next();
        let mut next_member = member.value.clone();
        next_member.heartbeat += 1;
        let writes = [
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(0),
                record: next_lease,
                mode: PutMode::Update(lease.version),
            }),
            TxnWrite::Member {
                node: node("h"),
                record: next_member,
                mode: PutMode::Update(member.version),
            },
        ];
        match store.transact(group, &writes).await {
            Ok(_) => done += 1,
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            // A transient failure leaves the outcome unknown, which would make the count
            // meaningless: fail loudly instead of guessing.
            Err(error) => panic!("writer {writer}: {error}"),
        }
    }
    u64::from(done)
}

async fn renew_loop(store: &dyn LeaseStore, group: &GroupName, rounds: u32) -> u64 {
    let mut done = 0;
    let mut attempts = 0;
    while done < rounds {
        attempts += 1;
        assert!(attempts < MAX_ATTEMPTS, "the renewer made no progress");
        let member = store.get_member(group, &node("h")).await.expect("read");
        let member = member.expect("session exists");
        let mut next = member.value.clone();
        next.heartbeat += 1;
        match store
            .put_member(group, &node("h"), &next, PutMode::Update(member.version))
            .await
        {
            Ok(_) => done += 1,
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("renewer: {error}"),
        }
    }
    u64::from(done)
}

/// Where the store pushes change hints, a transaction gives the hint of each of its writes:
/// a lease written held, and a session rewritten. Stores without hints pass trivially.
pub async fn transaction_gives_each_hint(store: Arc<dyn LeaseStore>) {
    use crate::store::Change;
    let group = unique_group("txn-hints");
    let lease = store
        .put_lease(
            &group,
            PartitionId(4),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create lease");
    let member = store
        .put_member(&group, &node("h"), &session(1), PutMode::Create)
        .await
        .expect("create session");
    let mut feed = match store.watch(&group).await {
        Ok(feed) => feed,
        Err(StoreError::NotSupported(_)) => return,
        Err(error) => panic!("watch failed: {error}"),
    };
    store
        .transact(
            &group,
            &[
                lease_write(4, held_by("h", 1), PutMode::Update(lease)),
                member_write("h", session(2), PutMode::Update(member)),
            ],
        )
        .await
        .expect("transaction");
    let (mut lease_seen, mut member_seen) = (false, false);
    while !(lease_seen && member_seen) {
        let hint = tokio::time::timeout(std::time::Duration::from_secs(10), feed.next())
            .await
            .expect("a change hint within 10 s")
            .expect("the feed is still open");
        match hint {
            Change::Lease(PartitionId(4)) => lease_seen = true,
            Change::LeaseWritten {
                partition: PartitionId(4),
                state: LeaseState::Held,
            } => lease_seen = true,
            Change::Member(n) | Change::MemberUpdated(n) if n == node("h") => member_seen = true,
            Change::Unknown => (lease_seen, member_seen) = (true, true),
            other => panic!("a hint of neither write: {other:?}"),
        }
    }
}
