//! What a client routing by a [`Router`] sees after correcting its map: a re-read partition,
//! a server's hint, and records that name an owner no one should be sent to.

use std::sync::Arc;

use leasehold::testing::FaultyStore;
use leasehold::{
    admin, partition_for_key, GroupName, LeaseRecord, LeaseState, LeaseStore, MemoryStore, NodeId,
    NotOwner, PartitionId, PutMode, Router,
};

const PARTITIONS: u32 = 8;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn group() -> GroupName {
    GroupName::new("orders").unwrap()
}

/// A group of [`PARTITIONS`] released partitions, behind a store that can be made to hang.
async fn store() -> Arc<FaultyStore> {
    let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
    admin::init(&*store, &group(), PARTITIONS).await.unwrap();
    store
}

/// Rewrites a partition's record in `state` with `owner`, as a node taking, releasing or
/// losing it would leave it.
async fn write(store: &FaultyStore, partition: PartitionId, state: LeaseState, owner: &str) {
    let group = group();
    let current = store.get_lease(&group, partition).await.unwrap().unwrap();
    let record = LeaseRecord {
        owner: Some(node(owner)),
        epoch: current.value.epoch.next(),
        state,
        ..current.value
    };
    let mode = PutMode::Update(current.version);
    let put = store.put_lease(&group, partition, &record, mode);
    put.await.unwrap();
}

async fn connect(store: &Arc<FaultyStore>) -> Router {
    let store: Arc<dyn LeaseStore> = store.clone();
    Router::connect(store, group(), PARTITIONS).await.unwrap()
}

/// After partitions 1 and 2 move from `a` to `b`, the client keeps routing both to `a` until
/// it invalidates one; then that one goes to `b`, and the other still to `a`.
///
/// Fails if `invalidate` does not store what it read in the map, or reloads more than the
/// one partition.
#[tokio::test]
async fn invalidating_a_partition_corrects_that_entry_only() {
    let store = store().await;
    write(&store, PartitionId(1), LeaseState::Held, "a").await;
    write(&store, PartitionId(2), LeaseState::Held, "a").await;
    let router = connect(&store).await;
    write(&store, PartitionId(1), LeaseState::Held, "b").await;
    write(&store, PartitionId(2), LeaseState::Held, "b").await;
    assert_eq!(router.owner_of_partition(PartitionId(1)), Some(node("a")));

    assert_eq!(
        router.invalidate(PartitionId(1)).await.unwrap(),
        Some(node("b"))
    );
    assert_eq!(router.owner_of_partition(PartitionId(1)), Some(node("b")));
    assert_eq!(router.owner_of_partition(PartitionId(2)), Some(node("a")));
    assert_eq!(router.map().len(), PARTITIONS as usize);
}

/// A server answers that it does not own a key's partition and names the owner: the client
/// routes the key there at once, without a store read, so it works while the store hangs.
///
/// Fails if `not_owner` ignores the hint and reads the store (which times out here), or
/// returns the hint without keeping it in the map.
#[tokio::test(start_paused = true)]
async fn a_hint_redirects_the_key_without_reading_the_store() {
    let store = store().await;
    let key = "customer-17";
    let partition = partition_for_key(key, PARTITIONS);
    write(&store, partition, LeaseState::Held, "a").await;
    let router = connect(&store).await;
    assert_eq!(router.owner_of_key(key), (partition, Some(node("a"))));
    store.set_hung(true);
    let reads = store.reads();

    let answer = NotOwner {
        partition,
        owner_hint: Some(node("c")),
    };
    assert_eq!(router.not_owner(&answer).await.unwrap(), Some(node("c")));
    assert_eq!(router.owner_of_key(key), (partition, Some(node("c"))));
    assert_eq!(store.reads(), reads, "the hint is taken on trust");
}

/// A server answers that it does not own a partition and knows no owner: the client reads
/// the partition again and routes by what the store says now.
///
/// Fails if `not_owner` without a hint answers from the cached map, or forgets the entry
/// without reading the partition.
#[tokio::test]
async fn no_hint_reads_the_partition_again() {
    let store = store().await;
    write(&store, PartitionId(4), LeaseState::Held, "a").await;
    let router = connect(&store).await;
    write(&store, PartitionId(4), LeaseState::Held, "b").await;

    let answer = NotOwner {
        partition: PartitionId(4),
        owner_hint: None,
    };
    assert_eq!(router.not_owner(&answer).await.unwrap(), Some(node("b")));
    assert_eq!(router.owner_of_partition(PartitionId(4)), Some(node("b")));
}

/// A released record still names the node that last held it, and an offline one may; nobody
/// serves either, so a client must not be sent there, whether it loads the whole map or
/// re-reads one partition after a wrong-owner answer.
///
/// Fails if a released or an offline record's last owner is taken for its owner, by a
/// refresh or by a re-read.
#[tokio::test]
async fn released_and_offline_partitions_have_no_owner() {
    let store = store().await;
    for partition in [5, 6, 7] {
        write(&store, PartitionId(partition), LeaseState::Held, "a").await;
    }
    let router = connect(&store).await;
    write(&store, PartitionId(5), LeaseState::Released, "a").await;
    write(&store, PartitionId(6), LeaseState::Offline, "a").await;
    admin::offline(&*store, &group(), PartitionId(7))
        .await
        .unwrap();

    for partition in [5, 6, 7].map(PartitionId) {
        let answer = NotOwner {
            partition,
            owner_hint: None,
        };
        assert_eq!(
            router.not_owner(&answer).await.unwrap(),
            None,
            "{partition}"
        );
        assert_eq!(router.owner_of_partition(partition), None, "{partition}");
    }

    for partition in [5, 6, 7] {
        write(&store, PartitionId(partition), LeaseState::Held, "a").await;
    }
    router.refresh().await.unwrap();
    assert_eq!(router.owner_of_partition(PartitionId(5)), Some(node("a")));
    write(&store, PartitionId(5), LeaseState::Released, "a").await;
    write(&store, PartitionId(6), LeaseState::Offline, "a").await;
    router.refresh().await.unwrap();
    assert_eq!(router.owner_of_partition(PartitionId(5)), None);
    assert_eq!(router.owner_of_partition(PartitionId(6)), None);
}

/// Answers about a partition beyond the group's count — a stray record, a confused server —
/// leave the map as it is, as a refresh does.
///
/// Fails if `not_owner` or `invalidate` adds an entry for a partition the group does not have.
#[tokio::test]
async fn answers_about_partitions_beyond_the_count_leave_the_map_alone() {
    let store = store().await;
    let stray = PartitionId(PARTITIONS + 91);
    store
        .put_lease(&group(), stray, &LeaseRecord::released(), PutMode::Create)
        .await
        .unwrap();
    write(&store, stray, LeaseState::Held, "a").await;
    let router = connect(&store).await;
    let hinted = NotOwner {
        partition: stray,
        owner_hint: Some(node("b")),
    };
    router.not_owner(&hinted).await.unwrap();
    assert_eq!(router.invalidate(stray).await.unwrap(), Some(node("a")));
    assert_eq!(router.map().len(), PARTITIONS as usize);
    assert_eq!(router.owner_of_partition(stray), None);
}
