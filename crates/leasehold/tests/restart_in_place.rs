//! Restarting in place under controlled time: a node that stops with
//! [`Participant::restart`] leaves its partitions reserved for its name; the process that
//! starts next under the name takes them back at once under higher epochs, and the others
//! leave them alone for the group's restart window, then take them as any released lease.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    admin, Callbacks, GroupName, LeaseGuard, LeaseMode, LeaseStore, MemoryStore, NodeId,
    Participant, ParticipantConfig, PartitionId,
};
use tokio::time::sleep;

/// Every partition a node acquired, in order.
#[derive(Default, Clone)]
struct Taken(Arc<Mutex<Vec<PartitionId>>>);

impl Taken {
    fn all(&self) -> Vec<PartitionId> {
        self.0.lock().unwrap().clone()
    }
}

impl Callbacks for Taken {
    fn on_acquired(&self, lease: &LeaseGuard) {
        self.0.lock().unwrap().push(lease.partition());
    }
}

fn group() -> GroupName {
    GroupName::new("default").unwrap()
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

async fn store(partitions: u32, mode: LeaseMode) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    admin::init(&*store, &group(), partitions).await.unwrap();
    admin::set_lease_mode(&*store, &group(), mode)
        .await
        .unwrap();
    store
}

fn start(store: &Arc<MemoryStore>, name: &str, taken: &Taken) -> Participant {
    let config = ParticipantConfig::fast(node(name), 8);
    Participant::start(store.clone(), config, taken.clone()).unwrap()
}

/// The epoch of each partition `participant` holds.
fn epochs(participant: &Participant) -> BTreeMap<PartitionId, u64> {
    participant
        .leases()
        .iter()
        .map(|guard| (guard.partition(), guard.epoch().0))
        .collect()
}

/// Two nodes settled on eight partitions, four each.
async fn settled(store: &Arc<MemoryStore>) -> (Participant, Participant, Taken) {
    let b_taken = Taken::default();
    let a = start(store, "a", &Taken::default());
    let b = start(store, "b", &b_taken);
    sleep(Duration::from_secs(5)).await;
    assert_eq!((a.owned().len(), b.owned().len()), (4, 4));
    (a, b, b_taken)
}

async fn comes_back_to_the_same_partitions(mode: LeaseMode) {
    let store = store(8, mode).await;
    let (a, b, b_taken) = settled(&store).await;
    let before = epochs(&a);
    let taken_by_b = b_taken.all().len();
    a.restart().await;
    for partition in before.keys() {
        let record = store
            .get_lease(&group(), *partition)
            .await
            .unwrap()
            .unwrap();
        assert!(
            record.value.is_reserved(),
            "{partition} written reserved for a: {:?}",
            record.value
        );
        assert_eq!(record.value.handed_to, Some(node("a")));
    }
    // Within the window (the fast preset's acquire_after, 1.5 s) the others leave them.
    sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.owned().len(), 4, "b left a's reserved partitions alone");
    let again = start(&store, "a", &Taken::default());
    sleep(Duration::from_secs(3)).await;
    let after = epochs(&again);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "the same partitions came back"
    );
    for (partition, epoch) in &before {
        assert!(
            after[partition] > *epoch,
            "{partition}: a new tenure under a higher epoch ({epoch} then {})",
            after[partition]
        );
    }
    assert_eq!(
        b_taken.all().len(),
        taken_by_b,
        "nothing moved to b: {:?}",
        b_taken.all()
    );
    again.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_restarting_in_place_gets_its_partitions_back_and_nothing_moves() {
    comes_back_to_the_same_partitions(LeaseMode::PerPartition).await;
}

#[tokio::test(start_paused = true)]
async fn a_node_restarting_in_place_gets_its_partitions_back_and_nothing_moves_by_session() {
    comes_back_to_the_same_partitions(LeaseMode::Session).await;
}

async fn never_comes_back(mode: LeaseMode) {
    let store = store(8, mode).await;
    let (a, b, _) = settled(&store).await;
    a.restart().await;
    sleep(Duration::from_millis(1300)).await;
    assert_eq!(b.owned().len(), 4, "the window has not passed");
    sleep(Duration::from_secs(2)).await;
    assert_eq!(b.owned().len(), 8, "after the window the others take them");
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reserved_partitions_go_to_the_others_once_the_window_has_passed() {
    never_comes_back(LeaseMode::PerPartition).await;
}

#[tokio::test(start_paused = true)]
async fn reserved_partitions_go_to_the_others_once_the_window_has_passed_by_session() {
    never_comes_back(LeaseMode::Session).await;
}

/// What the reservation is for: a plain shutdown hands everything to b at once.
#[tokio::test(start_paused = true)]
async fn a_plain_shutdown_hands_everything_over_at_once() {
    let store = store(8, LeaseMode::PerPartition).await;
    let (a, b, _) = settled(&store).await;
    a.shutdown().await;
    sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.owned().len(), 8);
    b.shutdown().await;
}

/// The group's window is capped at four times its `acquire_after`, whatever it is set to.
#[test]
fn the_restart_window_defaults_to_acquire_after_and_is_capped() {
    let config = ParticipantConfig::fast(node("a"), 8);
    let timings = leasehold::GroupTimings::of(&config);
    let mut record = leasehold::GroupRecord::new(Some(timings));
    assert_eq!(record.restart_window(Duration::ZERO), config.acquire_after);
    record.restart_window = Some(Duration::from_secs(3));
    assert_eq!(
        record.restart_window(Duration::ZERO),
        Duration::from_secs(3)
    );
    record.restart_window = Some(Duration::from_secs(3600));
    assert_eq!(
        record.restart_window(Duration::ZERO),
        config.acquire_after * leasehold::MAX_RESTART_WINDOW_FACTOR
    );
}

/// A group whose window is zero hands a restarting node's partitions over at once.
#[tokio::test(start_paused = true)]
async fn a_window_of_zero_makes_a_restart_a_hand_off() {
    let store = store(8, LeaseMode::PerPartition).await;
    admin::set_restart_window(&*store, &group(), Some(Duration::ZERO))
        .await
        .unwrap();
    let (a, b, _) = settled(&store).await;
    a.restart().await;
    sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.owned().len(), 8);
    b.shutdown().await;
}
