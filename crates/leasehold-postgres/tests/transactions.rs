//! Transactions on separate connections, as from separate processes: whatever order their
//! writes come in, they neither deadlock nor commit over each other's changes or over single
//! writes.

mod common;

use leasehold::testing::unique_group;
use leasehold::{
    Epoch, GroupName, LeaseRecord, LeaseStore, LeaseWrite, MemberRecord, NodeId, PartitionId,
    PutMode, StoreError, TxnWrite,
};
use leasehold_postgres::PostgresStore;

const ROUNDS: u32 = 40;

fn session() -> NodeId {
    NodeId::new("h").expect("a valid node name")
}

/// Raises the lease's epoch and the session's heartbeat together in one transaction,
/// `ROUNDS` times, retrying on conflict; `member_first` puts the session's write first.
async fn transact_rounds(store: &PostgresStore, group: &GroupName, member_first: bool) -> u64 {
    let mut done = 0;
    while done < ROUNDS {
        let member = store.get_member(group, &session()).await.unwrap().unwrap();
        let lease = store
            .get_lease(group, PartitionId(0))
            .await
            .unwrap()
            .unwrap();
        let mut next_lease = lease.value.clone();
        next_lease.epoch = lease.value.epoch.next();
        let mut next_member = member.value.clone();
        next_member.heartbeat += 1;
        let mut writes = vec![
            TxnWrite::Lease(LeaseWrite {
                partition: PartitionId(0),
                record: next_lease,
                mode: PutMode::Update(lease.version),
            }),
            TxnWrite::Member {
                node: session(),
                record: next_member,
                mode: PutMode::Update(member.version),
            },
        ];
        if member_first {
            writes.reverse();
        }
        match store.transact(group, &writes).await {
            Ok(versions) => {
                assert_eq!(versions.len(), 2, "one version per write");
                done += 1;
            }
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("a transaction failed other than by conflict: {error}"),
        }
    }
    u64::from(done)
}

/// Raises the session's heartbeat alone, `ROUNDS` times, as its node's renewals would.
async fn renew_rounds(store: &PostgresStore, group: &GroupName) -> u64 {
    let mut done = 0;
    while done < ROUNDS {
        let member = store.get_member(group, &session()).await.unwrap().unwrap();
        let mut next = member.value.clone();
        next.heartbeat += 1;
        let mode = PutMode::Update(member.version);
        match store.put_member(group, &session(), &next, mode).await {
            Ok(_) => done += 1,
            Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("a renewal failed other than by conflict: {error}"),
        }
    }
    u64::from(done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_transactions_on_separate_connections_commit_whole() {
    let Some(url) = common::url() else {
        return;
    };
    let first = common::store(&url).await;
    let (second, renewer) = (common::store(&url).await, common::store(&url).await);
    let group = unique_group("txn-connections");
    first
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();
    first
        .put_member(
            &group,
            &session(),
            &MemberRecord::default(),
            PutMode::Create,
        )
        .await
        .unwrap();
    let (a, b, renewals) = tokio::join!(
        transact_rounds(&first, &group, false),
        transact_rounds(&second, &group, true),
        renew_rounds(&renewer, &group),
    );
    let lease = first.get_lease(&group, PartitionId(0)).await.unwrap();
    assert_eq!(
        lease.unwrap().value.epoch,
        Epoch(a + b),
        "one epoch per transaction"
    );
    let member = first.get_member(&group, &session()).await.unwrap();
    assert_eq!(
        member.unwrap().value.heartbeat,
        a + b + renewals,
        "one heartbeat per transaction and per renewal, none lost"
    );
}
