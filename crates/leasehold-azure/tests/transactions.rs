//! The key layout keeps a group's leases and members in one entity group (one PartitionKey),
//! so that one transaction reaches a node's member record and every lease that can name it.

mod common;

use leasehold::testing::unique_group;
use leasehold::{
    GroupName, LeaseRecord, LeaseStore, LeaseWrite, MemberRecord, NodeId, PartitionId, PutMode,
    RecordKey, StoreError, TxnWrite, Version, MAX_TRANSACTION_WRITES,
};
use leasehold_azure::AzureTableStore;

async fn store() -> Option<AzureTableStore> {
    let options = common::azurite_options("leaseholdtxn")?;
    Some(
        AzureTableStore::connect(options)
            .await
            .expect("connect to Azurite"),
    )
}

fn node(index: usize) -> NodeId {
    NodeId::new(format!("node-{index}")).expect("a valid node name")
}

fn lease(partition: u32, mode: PutMode) -> TxnWrite {
    TxnWrite::Lease(LeaseWrite {
        partition: PartitionId(partition),
        record: LeaseRecord::released(),
        mode,
    })
}

fn member(index: usize, heartbeat: u64, mode: PutMode) -> TxnWrite {
    TxnWrite::Member {
        node: node(index),
        record: MemberRecord {
            heartbeat,
            ..MemberRecord::default()
        },
        mode,
    }
}

/// The version each written record now reads with, in the order of `writes`.
async fn read_versions(
    store: &AzureTableStore,
    group: &GroupName,
    writes: &[TxnWrite],
) -> Vec<Option<Version>> {
    let mut versions = Vec::new();
    for write in writes {
        let version = match write.key() {
            RecordKey::Lease(partition) => store
                .get_lease(group, partition)
                .await
                .expect("read lease")
                .map(|stored| stored.version),
            RecordKey::Member(node) => store
                .get_member(group, &node)
                .await
                .expect("read member")
                .map(|stored| stored.version),
            other => panic!("a transaction wrote {other}"),
        };
        versions.push(version);
    }
    versions
}

/// A lease and a member record of one group are created, then updated, each time in one
/// transaction: the service takes only a changeset within one PartitionKey, so this fails
/// if the two kinds of record were ever keyed apart.
#[tokio::test]
async fn a_lease_and_a_member_of_one_group_change_in_one_transaction() {
    let Some(store) = store().await else {
        return;
    };
    let group = unique_group("txn-pair");
    let created = store
        .transact(
            &group,
            &[lease(0, PutMode::Create), member(0, 1, PutMode::Create)],
        )
        .await
        .expect("create a lease and a member together");
    let writes = [
        lease(0, PutMode::Update(created[0].clone())),
        member(0, 2, PutMode::Update(created[1].clone())),
    ];
    let updated = store
        .transact(&group, &writes)
        .await
        .expect("update a lease and a member together");
    let read: Vec<Version> = read_versions(&store, &group, &writes)
        .await
        .into_iter()
        .map(|version| version.expect("record exists"))
        .collect();
    assert_eq!(read, updated, "records read with the versions returned");
}

/// The largest transaction the contract allows, half members and half leases, creates and
/// updates mixed, is one changeset; a stale version in its last write fails it whole and is
/// named, which shows the failed operation's index is mapped to the right record.
#[tokio::test]
async fn a_transaction_of_the_most_writes_allowed_is_one_changeset() {
    let Some(store) = store().await else {
        return;
    };
    let group = unique_group("txn-max");
    let half = MAX_TRANSACTION_WRITES / 2;
    let partition = |index: usize| u32::try_from(index).expect("few partitions");
    let mut first = Vec::new();
    for index in 0..half {
        first.push(lease(partition(index), PutMode::Create));
        first.push(member(index, 1, PutMode::Create));
    }
    assert_eq!(first.len(), MAX_TRANSACTION_WRITES);
    let created = store
        .transact(&group, &first)
        .await
        .expect("the most writes allowed, all creates");
    assert_eq!(
        created.len(),
        MAX_TRANSACTION_WRITES,
        "one version per write"
    );

    // Half the records updated, the other half of the writes new records.
    let mut second = Vec::new();
    for index in 0..half {
        second.push(lease(
            partition(index),
            PutMode::Update(created[2 * index].clone()),
        ));
        second.push(member(half + index, 1, PutMode::Create));
    }
    let written = store
        .transact(&group, &second)
        .await
        .expect("the most writes allowed, updates and creates");
    let read = read_versions(&store, &group, &second).await;
    assert_eq!(
        read,
        written.iter().cloned().map(Some).collect::<Vec<_>>(),
        "records read with the versions returned, in order"
    );

    // The same writes again, each on its current version, but lease 0's moved last and
    // on the version it had before the second transaction.
    let mut third: Vec<TxnWrite> = second[1..]
        .iter()
        .zip(&written[1..])
        .map(|(write, version)| on_version(write, version))
        .collect();
    third.push(on_version(&second[0], &created[0]));
    let before = read_versions(&store, &group, &third).await;
    let result = store.transact(&group, &third).await;
    assert!(
        matches!(&result, Err(StoreError::Conflict { key }) if *key == RecordKey::Lease(PartitionId(0))),
        "a conflict naming lease 0, got {result:?}"
    );
    assert_eq!(
        read_versions(&store, &group, &third).await,
        before,
        "nothing written by a refused transaction"
    );
}

/// `write` as an update of `version`.
fn on_version(write: &TxnWrite, version: &Version) -> TxnWrite {
    let mut write = write.clone();
    match &mut write {
        TxnWrite::Lease(lease) => lease.mode = PutMode::Update(version.clone()),
        TxnWrite::Member { mode, .. } => *mode = PutMode::Update(version.clone()),
    }
    write
}
