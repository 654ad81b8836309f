//! Participant behaviour under controlled time: Tokio's clock is paused and advances only
//! when every task waits, so each run is exact and takes no real time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::testing::FaultyStore;
use leasehold::{
    admin, Callbacks, Environment, GroupName, LeaseGuard, LeaseMode, LeaseRecord, LeaseState,
    LeaseStore, Loss, LossReason, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId,
    PutMode, StoredLease, TokioClock,
};
use tokio::time::{sleep, Instant};

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Acquired,
    Lost(LossReason),
}

#[derive(Debug, Clone)]
struct Event {
    node: NodeId,
    partition: PartitionId,
    epoch: u64,
    kind: Kind,
    at: Instant,
}

/// What the callbacks of every node record.
#[derive(Debug, Default)]
struct Shared {
    events: Mutex<Vec<Event>>,
    holders: Mutex<BTreeMap<PartitionId, NodeId>>,
    /// Partitions that had two holders at once, and losses of leases not held. Kept rather
    /// than raised in the callback: a participant contains a callback's panic, so a panic
    /// there would fail nothing.
    violations: Mutex<Vec<String>>,
}

/// Records every callback of every node and checks, as each happens, that no partition has
/// two holders at once. A test fails when its recorder is dropped, if any check failed.
#[derive(Debug, Default, Clone)]
struct Recorder {
    shared: Arc<Shared>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let violations = self.shared.violations.lock().unwrap();
        assert!(violations.is_empty(), "{violations:#?}");
    }
}

struct NodeCallbacks {
    node: NodeId,
    recorder: Arc<Shared>,
}

impl Callbacks for NodeCallbacks {
    fn on_acquired(&self, lease: &LeaseGuard) {
        let mut holders = self.recorder.holders.lock().unwrap();
        if let Some(other) = holders.insert(lease.partition(), self.node.clone()) {
            self.recorder.violations.lock().unwrap().push(format!(
                "{} acquired {} while {other} holds it",
                self.node,
                lease.partition()
            ));
        }
        self.recorder.events.lock().unwrap().push(Event {
            node: self.node.clone(),
            partition: lease.partition(),
            epoch: lease.epoch().0,
            kind: Kind::Acquired,
            at: Instant::now(),
        });
    }

    fn on_lost(&self, loss: &Loss) {
        let mut holders = self.recorder.holders.lock().unwrap();
        let holder = holders.remove(&loss.partition);
        if holder.as_ref() != Some(&self.node) {
            self.recorder.violations.lock().unwrap().push(format!(
                "{} lost {}, held by {holder:?}",
                self.node, loss.partition
            ));
        }
        self.recorder.events.lock().unwrap().push(Event {
            node: self.node.clone(),
            partition: loss.partition,
            epoch: loss.epoch.0,
            kind: Kind::Lost(loss.reason),
            at: Instant::now(),
        });
    }
}

impl Recorder {
    fn callbacks(&self, node: &NodeId) -> NodeCallbacks {
        NodeCallbacks {
            node: node.clone(),
            recorder: Arc::clone(&self.shared),
        }
    }

    fn events(&self) -> Vec<Event> {
        self.shared.events.lock().unwrap().clone()
    }

    fn crashed(&self, node: &NodeId) {
        // A crashed node's beliefs end with it.
        self.shared
            .holders
            .lock()
            .unwrap()
            .retain(|_, holder| holder != node);
    }
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn config(name: &str, partitions: u32) -> ParticipantConfig {
    ParticipantConfig::fast(node(name), partitions)
}

async fn store_with(partitions: u32) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let group = GroupName::new("default").unwrap();
    admin::init(&*store, &group, partitions).await.unwrap();
    store
}

fn start<S: LeaseStore + 'static>(
    store: &Arc<S>,
    config: ParticipantConfig,
    recorder: &Recorder,
) -> Participant {
    let callbacks = recorder.callbacks(&config.node);
    let environment = Environment {
        clock: Arc::new(TokioClock),
        seed: config.node.as_str().bytes().map(u64::from).sum(),
        metrics: None,
        session_seed: None,
    };
    Participant::start_with(store.clone(), config, callbacks, environment).unwrap()
}

fn counts(participants: &[&Participant]) -> Vec<usize> {
    participants.iter().map(|p| p.owned().len()).collect()
}

async fn lease_of(store: &MemoryStore, partition: u32) -> StoredLease {
    let group = GroupName::new("default").unwrap();
    store
        .get_lease(&group, PartitionId(partition))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_renewed_and_keeps_its_epoch() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    sleep(Duration::from_millis(100)).await;
    let first = a.lease(PartitionId(0)).expect("held");
    let version = lease_of(&store, 0).await.version;
    sleep(Duration::from_secs(30)).await;
    let later = a
        .lease(PartitionId(0))
        .expect("still held after many validity periods");
    assert_eq!(later.epoch(), first.epoch());
    assert!(later.valid_until() > first.valid_until() + Duration::from_secs(29));
    assert_ne!(
        lease_of(&store, 0).await.version,
        version,
        "renewals rewrote the record"
    );
    assert_eq!(recorder.events().len(), 4, "four acquisitions, no losses");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_conflict_loses_the_lease_at_once() {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_millis(100)).await;
    let guard = a.lease(PartitionId(1)).expect("held");
    let group = GroupName::new("default").unwrap();
    let kicked_at = Instant::now();
    admin::kick(&*store, &group, PartitionId(1)).await.unwrap();
    sleep(Duration::from_millis(260)).await;
    assert!(
        a.lease(PartitionId(1)).is_none(),
        "dropped at the first failed renewal"
    );
    let lost = recorder
        .events()
        .into_iter()
        .find(|e| e.kind == Kind::Lost(LossReason::Conflict))
        .expect("a conflict loss");
    assert_eq!(lost.partition, PartitionId(1));
    assert!(
        lost.at < guard.valid_until(),
        "lost before its deadline, at the renewal"
    );
    assert!(
        lost.at - kicked_at <= Duration::from_millis(250),
        "within one heartbeat"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn with_the_store_hung_the_lease_ends_exactly_at_its_deadline() {
    let store = Arc::new(FaultyStore::new(store_with(3).await));
    let recorder = Recorder::default();
    let mut cfg = config("a", 3);
    // A long store timeout, so the hung call is still in flight when the deadline comes.
    cfg.store_timeout = cfg.heartbeat;
    let a = Participant::start(store.clone(), cfg, recorder.callbacks(&node("a"))).unwrap();
    sleep(Duration::from_millis(100)).await;
    let guard = a.lease(PartitionId(0)).expect("held");
    store.set_hung(true);
    let deadline = guard.valid_until();
    sleep_until_just_before(deadline).await;
    assert!(
        a.lease(PartitionId(0)).is_some(),
        "valid until the deadline"
    );
    sleep(Duration::from_millis(2)).await;
    assert!(
        a.lease(PartitionId(0)).is_none(),
        "None once the deadline passed"
    );
    assert!(!guard.is_valid());
    let losses: Vec<Event> = recorder
        .events()
        .into_iter()
        .filter(|e| e.kind == Kind::Lost(LossReason::Expired))
        .collect();
    assert_eq!(losses.len(), 3, "every lease lost by expiry");
    for loss in losses {
        assert!(
            loss.at <= deadline + Duration::from_millis(1),
            "callback fired at the deadline, not later"
        );
        assert!(loss.at >= deadline - Duration::from_millis(1));
    }
    a.abort();
}

async fn sleep_until_just_before(deadline: Instant) {
    tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_nodes_partitions_are_taken_only_after_acquire_after() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.owned().len(), 4);
    a.abort();
    recorder.crashed(&node("a"));
    let b_started = Instant::now();
    let b = start(&store, config("b", 4), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(b.owned().len(), 4, "b took over everything");
    let acquire_after = config("b", 4).acquire_after;
    for event in recorder.events().iter().filter(|e| e.node == node("b")) {
        assert_eq!(event.kind, Kind::Acquired);
        assert!(
            event.at >= b_started + acquire_after,
            "taken {:?} after start",
            event.at - b_started
        );
        assert!(
            event.at <= b_started + acquire_after + Duration::from_millis(300),
            "taken at the timer, not much later"
        );
        assert_eq!(event.epoch, 2, "epoch + 1 on takeover");
    }
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_released_partition_is_taken_at_the_next_scan() {
    let store = store_with(2).await;
    let group = GroupName::new("default").unwrap();
    // Partition 1 looks freshly held by another node, so it must wait acquire_after...
    let current = lease_of(&store, 1).await;
    let ghost = LeaseRecord {
        owner: Some(node("ghost")),
        epoch: leasehold::Epoch(1),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    };
    let v = store
        .put_lease(
            &group,
            PartitionId(1),
            &ghost,
            PutMode::Update(current.version),
        )
        .await
        .unwrap();
    let recorder = Recorder::default();
    // Heartbeats four scans apart: the loop wakes for scans of their own.
    let config = config("a", 2)
        .with_heartbeat(Duration::from_secs(1))
        .with_lease_validity(Duration::from_secs(3))
        .with_acquire_after(Duration::from_millis(4500));
    let a = start(&store, config, &recorder);
    sleep(Duration::from_millis(500)).await;
    assert_eq!(a.owned(), vec![PartitionId(0)]);
    // ...until its holder releases it: then it is taken within one scan interval.
    let released = LeaseRecord {
        state: LeaseState::Released,
        owner: None,
        ..ghost
    };
    store
        .put_lease(&group, PartitionId(1), &released, PutMode::Update(v))
        .await
        .unwrap();
    let at = Instant::now();
    sleep(Duration::from_millis(300)).await;
    assert_eq!(a.owned(), vec![PartitionId(0), PartitionId(1)]);
    let taken = recorder
        .events()
        .into_iter()
        .find(|e| e.partition == PartitionId(1))
        .unwrap();
    assert!(
        taken.at - at <= Duration::from_millis(280),
        "within a scan interval: {:?}",
        taken.at - at
    );
    assert_eq!(taken.epoch, 2);
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn max_partitions_per_node_is_respected() {
    let store = store_with(16).await;
    let recorder = Recorder::default();
    let a = start(
        &store,
        config("a", 16).with_max_partitions_per_node(5),
        &recorder,
    );
    // Without a cap of its own, a node publishes none.
    let b = start(
        &store,
        config("b", 16).with_max_partitions_per_node(16),
        &recorder,
    );
    sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 5);
    assert_eq!(a.status().target, 5);
    // Published, so that a monitor can tell partitions no node has room for.
    let group = GroupName::new("default").unwrap();
    let published = |name: &str| {
        let store = Arc::clone(&store);
        let (group, name) = (group.clone(), node(name));
        async move {
            let record = store.get_member(&group, &name).await.unwrap().unwrap();
            record.value.max_partitions
        }
    };
    assert_eq!(published("a").await, Some(5));
    assert_eq!(published("b").await, None);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn three_nodes_converge_and_a_fourth_gets_its_share_by_cooperative_release() {
    converge_then_join(store_with(64).await, |name| config(name, 64)).await;
}

/// The same with settled nodes skipping the lease table, and no change notices: the
/// joiner's new member record is all that makes them read it and hand off.
#[tokio::test(start_paused = true)]
async fn settled_nodes_that_skip_the_lease_table_still_hand_off_to_a_joiner() {
    let store = Arc::new(FaultyStore::new(store_with(64).await));
    store.turn_notices_off();
    converge_then_join(store, |name| {
        config(name, 64).with_relist_after(Duration::from_secs(3600))
    })
    .await;
}

async fn converge_then_join<S: LeaseStore + 'static>(
    store: Arc<S>,
    config: impl Fn(&str) -> ParticipantConfig,
) {
    let recorder = Recorder::default();
    let a = start(&store, config("a"), &recorder);
    let b = start(&store, config("b"), &recorder);
    let c = start(&store, config("c"), &recorder);
    sleep(Duration::from_secs(15)).await;
    let mut three = counts(&[&a, &b, &c]);
    three.sort();
    assert_eq!(three, vec![21, 21, 22]);

    let joined = Instant::now();
    let d = start(&store, config("d"), &recorder);
    sleep(Duration::from_secs(15)).await;
    assert_eq!(counts(&[&a, &b, &c, &d]), vec![16, 16, 16, 16]);
    let events = recorder.events();
    assert!(
        events.iter().all(|e| !matches!(
            e.kind,
            Kind::Lost(LossReason::Expired | LossReason::Conflict)
        )),
        "hand-off was cooperative: no expiry, no conflict"
    );
    let d_first = events
        .iter()
        .filter(|e| e.node == node("d"))
        .map(|e| e.at)
        .min()
        .unwrap();
    assert!(
        d_first - joined < config("d").acquire_after,
        "d was handed released partitions without waiting for an expiry"
    );
    for p in [&a, &b, &c, &d] {
        p.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn epochs_strictly_increase_per_partition_through_churn() {
    let store = store_with(12).await;
    let recorder = Recorder::default();
    let mut nodes: Vec<Participant> = ["a", "b", "c"]
        .iter()
        .map(|n| start(&store, config(n, 12), &recorder))
        .collect();
    for round in 0..6 {
        sleep(Duration::from_secs(4)).await;
        // Crash one node and bring a fresh one in, alternating with graceful shutdowns.
        let victim = nodes.remove(0);
        if round % 2 == 0 {
            victim.abort();
            recorder.crashed(victim.node());
        } else {
            victim.shutdown().await;
        }
        nodes.push(start(&store, config(&format!("n{round}"), 12), &recorder));
    }
    sleep(Duration::from_secs(6)).await;
    let mut last: BTreeMap<PartitionId, u64> = BTreeMap::new();
    let mut acquisitions = 0;
    for event in recorder
        .events()
        .iter()
        .filter(|e| e.kind == Kind::Acquired)
    {
        acquisitions += 1;
        if let Some(previous) = last.insert(event.partition, event.epoch) {
            assert!(
                event.epoch > previous,
                "partition {} epoch {} after {previous}",
                event.partition,
                event.epoch
            );
        }
    }
    assert!(
        acquisitions > 24,
        "churn moved partitions: {acquisitions} acquisitions"
    );
    let total: usize = nodes.iter().map(|n| n.owned().len()).sum();
    assert_eq!(total, 12, "every partition owned after churn");
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_leaves_every_held_row_released() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    sleep(Duration::from_secs(5)).await;
    a.shutdown().await;
    b.shutdown().await;
    let group = GroupName::new("default").unwrap();
    let rows = store.list_leases(&group).await.unwrap().records;
    assert_eq!(rows.len(), 8);
    for row in rows {
        assert_eq!(
            row.value.state,
            LeaseState::Released,
            "partition {}",
            row.key
        );
        assert_eq!(row.value.owner, None);
    }
    assert!(
        store.list_members(&group).await.unwrap().records.is_empty(),
        "member records removed"
    );
    assert!(a.owned().is_empty() && b.owned().is_empty());
}

#[tokio::test(start_paused = true)]
async fn drain_hands_a_nodes_partitions_off_without_expiry() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    let group = GroupName::new("default").unwrap();
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counts(&[&a, &b]), vec![0, 8]);
    assert!(a.status().draining);
    assert!(recorder
        .events()
        .iter()
        .all(|e| !matches!(e.kind, Kind::Lost(LossReason::Expired))));
    admin::set_draining(&*store, &group, &node("a"), false)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        counts(&[&a, &b]),
        vec![4, 4],
        "undrained node gets its share back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn explicit_release_stops_serving_at_once() {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_millis(100)).await;
    assert!(a.release(PartitionId(0)).await);
    assert!(
        a.lease(PartitionId(0)).is_none(),
        "None immediately after release"
    );
    assert!(!a.release(PartitionId(0)).await, "not held any more");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn invalid_config_is_refused_at_start() {
    let store = Arc::new(MemoryStore::new());
    let mut bad = config("a", 4);
    bad.acquire_after = bad.lease_validity;
    let error = Participant::start(store, bad, ()).unwrap_err().to_string();
    assert!(error.contains("acquire_after"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_whose_reply_was_lost_is_recognised_and_the_lease_kept() {
    let store = Arc::new(FaultyStore::new(store_with(3).await));
    let recorder = Recorder::default();
    let a = Participant::start(
        store.clone(),
        config("a", 3),
        recorder.callbacks(&node("a")),
    )
    .unwrap();
    sleep(Duration::from_millis(100)).await;
    assert_eq!(a.owned().len(), 3);
    // The next two renewal batches land but their replies are lost.
    let reads = store.record_reads();
    store.lose_batch_replies(2);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(store.replies_left_to_lose(), 0, "the replies were lost");
    // Each batch read back row by row, not by listing the table.
    assert!(
        store.record_reads() >= reads + 6,
        "{}",
        store.record_reads() - reads
    );
    assert_eq!(
        a.owned().len(),
        3,
        "leases kept: the landed writes were recognised as ours"
    );
    assert!(
        recorder.events().iter().all(|e| e.kind == Kind::Acquired),
        "no loss at all: {:?}",
        recorder.events()
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_whose_reply_was_lost_is_recognised() {
    let store = Arc::new(FaultyStore::new(store_with(2).await));
    store.lose_batch_replies(1);
    let recorder = Recorder::default();
    let a = Participant::start(store, config("a", 2), recorder.callbacks(&node("a"))).unwrap();
    sleep(Duration::from_millis(100)).await;
    assert_eq!(a.owned().len(), 2, "taken at once despite the lost reply");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_lost_on_the_way_is_not_mistaken_for_the_one_before() {
    // Paused time runs many heartbeats inside one wall-clock millisecond, so consecutive
    // renewals would carry equal records if only the clock stamped them.
    let store = Arc::new(FaultyStore::new(store_with(1).await));
    let recorder = Recorder::default();
    let a = Participant::start(
        store.clone(),
        config("a", 1),
        recorder.callbacks(&node("a")),
    )
    .unwrap();
    sleep(Duration::from_secs(2)).await;
    let before = a.lease(PartitionId(0)).expect("held").valid_until();
    store.drop_batches(1);
    // Past the next heartbeat (250 ms), before the one after.
    sleep(Duration::from_millis(300)).await;
    let after = a.lease(PartitionId(0)).expect("still valid").valid_until();
    assert_eq!(
        after, before,
        "the dropped renewal must not extend the lease: the read-back shows the previous one"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        a.lease(PartitionId(0)).expect("renewed").valid_until() > before,
        "the next renewal, conditioned on the version still current, lands"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_silent_for_forget_members_after_is_deleted_and_may_return() {
    let store = store_with(4).await;
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    let forgetful = |name: &str| config(name, 4).with_forget_members_after(Duration::from_secs(5));
    // The node that crashes has the smaller name: a dead member never blocks the clean-up.
    // It records apart: a crash ends its leases without callbacks.
    let a = start(&store, forgetful("a"), &Recorder::default());
    let b = start(&store, forgetful("b"), &recorder);
    sleep(Duration::from_secs(2)).await;
    a.abort();
    let members = || async {
        let listing = store.list_members(&group).await.unwrap();
        listing
            .records
            .into_iter()
            .map(|m| m.key.to_string())
            .collect::<Vec<_>>()
    };
    sleep(Duration::from_secs(3)).await;
    assert_eq!(members().await, ["a", "b"], "stale, not yet forgotten");
    sleep(Duration::from_secs(4)).await;
    assert_eq!(members().await, ["b"], "forgotten after 5 s of silence");
    assert_eq!(
        b.owned().len(),
        4,
        "its partitions were taken over meanwhile"
    );
    let a = start(&store, forgetful("a"), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        members().await,
        ["a", "b"],
        "a node that returns registers again"
    );
    assert_eq!(counts(&[&a, &b]), vec![2, 2]);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_member_record_vanished_registers_again_undrained() {
    // Member records are only forgotten while not draining, so a vanished record's last word
    // was "not draining", even if this node had not yet seen an undrain.
    let store = store_with(2).await;
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    let b = start(&store, config("b", 2), &recorder);
    sleep(Duration::from_secs(2)).await;
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counts(&[&a, &b]), vec![0, 2], "a drained");
    let record = store.get_member(&group, &node("a")).await.unwrap().unwrap();
    assert!(record.value.draining);
    store
        .delete_member(&group, &node("a"), &record.version)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    let record = store.get_member(&group, &node("a")).await.unwrap();
    assert!(
        record.is_some_and(|r| !r.value.draining),
        "registered again, not draining"
    );
    assert_eq!(counts(&[&a, &b]), vec![1, 1], "a serves again");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_prohibited_partition_is_still_served_by_a_permitted_node() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    let b = start(&store, config("b", 4), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![2, 2]);
    let group = GroupName::new("default").unwrap();
    let victim = a.owned()[0];
    admin::prohibit(&*store, &group, victim, &node("a"))
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![2, 2], "balanced again");
    assert!(a.lease(victim).is_none(), "a keeps off it");
    assert!(b.lease(victim).is_some(), "b serves it");
    a.shutdown().await;
    b.shutdown().await;
}

/// Node "a" of a two-partition group, running for a second, that an operator has just
/// marked draining.
async fn running_node_just_drained() -> (Arc<MemoryStore>, Recorder, GroupName, Participant) {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_secs(1)).await;
    let group = GroupName::new("default").unwrap();
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    (store, recorder, group, a)
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_reaches_a_node_only_as_it_stops_is_kept_for_its_return() {
    let (store, recorder, group, a) = running_node_just_drained().await;
    a.shutdown().await;
    // The operator's instruction outlives the process, so that it comes back drained.
    let members = store.list_members(&group).await.unwrap().records;
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(members[0].value.draining);
    assert!(a.owned().is_empty());
    let b = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert!(b.status().draining, "the new process adopts the drain");
    assert!(b.owned().is_empty());
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_drained_node_leaves_its_drain_in_place_on_the_way_out() {
    let (store, _recorder, group, a) = running_node_just_drained().await;
    sleep(Duration::from_secs(3)).await;
    assert!(a.status().draining);
    a.shutdown().await;
    let members = store.list_members(&group).await.unwrap().records;
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(members[0].value.draining);
}

#[tokio::test(start_paused = true)]
async fn a_node_undrained_before_it_stops_removes_its_member_record() {
    let (store, _recorder, group, a) = running_node_just_drained().await;
    sleep(Duration::from_secs(3)).await;
    admin::set_draining(&*store, &group, &node("a"), false)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    assert!(!a.status().draining);
    a.shutdown().await;
    assert!(store.list_members(&group).await.unwrap().records.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_operator_change_reaches_settled_nodes_at_their_next_scan() {
    let store = Arc::new(FaultyStore::new(store_with(8).await));
    store.turn_notices_off();
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    // Left alone, settled nodes would not read the table again for an hour.
    let quiet = |name: &str| config(name, 8).with_relist_after(Duration::from_secs(3600));
    let a = Participant::start(store.clone(), quiet("a"), recorder.callbacks(&node("a"))).unwrap();
    let b = Participant::start(store.clone(), quiet("b"), recorder.callbacks(&node("b"))).unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // Out of service, the partition's holder drops it, and the two settle at 4 and 3.
    admin::offline(&*store, &group, PartitionId(7))
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(a.owned().len() + b.owned().len(), 7);
    sleep(Duration::from_secs(5)).await;

    // Back in service, it is taken once its record has been unchanged for acquire_after
    // (as every record an operator wrote is), not after relist_after.
    let listings = (a.status().lease_listings, b.status().lease_listings);
    admin::online(&*store, &group, PartitionId(7))
        .await
        .unwrap();
    let timings = quiet("a");
    sleep(timings.acquire_after + timings.scan_interval * 3).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    assert!(a.status().lease_listings > listings.0 && b.status().lease_listings > listings.1);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_taking_its_share_in_batches_reads_its_stripe_once_per_acquire_after() {
    let store = Arc::new(FaultyStore::new(store_with(64).await));
    store.turn_notices_off();
    let recorder = Recorder::default();
    let config = config("a", 64)
        .with_relist_after(Duration::from_secs(60))
        .with_max_acquires_per_scan(8);
    let (scan, acquire_after) = (config.scan_interval, config.acquire_after);
    let a = Participant::start(store.clone(), config, recorder.callbacks(&node("a"))).unwrap();
    sleep(scan * 12).await;
    assert_eq!(a.owned().len(), 64, "eight batches of eight");
    // Its stripe (alone, the whole table) read row by row, batches from it for
    // acquire_after, the stripe again and the last batches, and once more to see that
    // nothing is left in it: never the table, and not one reading per batch (8 × 64 rows).
    let (listings, reads) = (store.listings(), store.record_reads());
    assert_eq!(listings, 0, "{reads} records read");
    assert!((3 * 64..4 * 64).contains(&reads), "{reads} records read");
    assert!(
        acquire_after < scan * 8,
        "the view ages out before the share is full"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_settled_node_reads_the_lease_table_only_when_something_changes() {
    let store = Arc::new(FaultyStore::new(store_with(8).await));
    store.turn_notices_off();
    let recorder = Recorder::default();
    let relist_after = Duration::from_secs(60);
    let quiet = |name: &str| config(name, 8).with_relist_after(relist_after);
    let a = Participant::start(store.clone(), quiet("a"), recorder.callbacks(&node("a"))).unwrap();
    let b = Participant::start(store.clone(), quiet("b"), recorder.callbacks(&node("b"))).unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // Settled: some eighty scans between them, and not one of them reads the leases.
    let before = (store.listings(), a.status());
    sleep(Duration::from_secs(10)).await;
    assert_eq!(
        store.listings(),
        before.0,
        "settled nodes read only member records"
    );
    let after = a.status();
    assert!(after.scans >= before.1.scans + 30, "{after:?}");
    assert_eq!(after.lease_listings, before.1.lease_listings);

    // A crash shows as a missed heartbeat: the survivor reads the table at once, and takes
    // the dead node's partitions as soon as their records have been unchanged long enough.
    b.abort();
    recorder.crashed(&node("b"));
    let crashed = Instant::now();
    let acquire_after = quiet("a").acquire_after;
    sleep_until_just_before(crashed + acquire_after).await;
    assert_eq!(a.owned().len(), 4, "nothing taken before acquire_after");
    sleep(Duration::from_secs(1)).await;
    assert_eq!(a.owned().len(), 8, "taken within a second of acquire_after");

    // Settled again, the table is still read in case something changed that no notice
    // reported: by each node within relist_after × live members, spread by half either way,
    // so by some node about every relist_after. The survivor is alone.
    sleep(Duration::from_secs(5)).await;
    let before = store.listings();
    sleep(relist_after.mul_f64(1.6)).await;
    let relists = store.listings() - before;
    assert!(
        (1..=3).contains(&relists),
        "{relists} listings in {:?}",
        relist_after.mul_f64(1.6)
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_exclusion_set_while_running_hands_the_partitions_off_and_keeps_them_away() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    let mine: Vec<PartitionId> = a.owned().into_iter().take(2).collect();
    let permit = a.permit(mine[0]).expect("a holds it");
    a.set_excluded(mine.iter().copied().collect()).unwrap();
    // New work stops at once; the work in flight holds the hand-off open.
    assert!(a.lease(mine[0]).is_none() && a.lease(mine[1]).is_none());
    assert!(permit.is_valid());
    drop(permit);
    tokio::time::sleep(Duration::from_secs(5)).await;
    for partition in &mine {
        assert!(
            !a.owned().contains(partition),
            "{partition} still held by a"
        );
        assert!(b.owned().contains(partition), "{partition} not taken by b");
    }
    assert_eq!(a.owned().len() + b.owned().len(), 8);
    // Settled: b keeps what a cannot take, without handing it back and forth, and a gets
    // its share from the rest.
    let acquisitions = || {
        recorder
            .events()
            .iter()
            .filter(|e| e.kind == Kind::Acquired)
            .count()
    };
    let before = acquisitions();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(acquisitions(), before, "{:?}", recorder.events());
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // The exclusion outlives b: its partitions go to a, but not the excluded ones.
    b.abort();
    recorder.crashed(&node("b"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 6);
    assert!(mine.iter().all(|p| !a.owned().contains(p)));

    // Lifting it lets a take them.
    a.set_excluded(Default::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 8);
    let refused = a.set_excluded([PartitionId(9)].into()).unwrap_err();
    assert!(refused.to_string().contains("9"), "{refused}");
    a.shutdown().await;
}

/// Reports partition p's load as p.
struct LoadByNumber;

impl Callbacks for LoadByNumber {
    fn load(&self, partition: PartitionId) -> Option<f64> {
        Some(f64::from(partition.0))
    }
}

/// Renewing per partition, each renewal carries the load; by session, no renewal writes a
/// lease record, so the loads are written on their own: the others balance on them.
#[tokio::test(start_paused = true)]
async fn leases_carry_their_load_and_the_member_record_the_sum() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let store = store_with(4).await;
        let group = GroupName::new("default").unwrap();
        admin::set_lease_mode(&*store, &group, mode).await.unwrap();
        let participant = Participant::start(store.clone(), config("a", 4), LoadByNumber).unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(participant.owned().len(), 4);
        for partition in 0..4 {
            assert_eq!(
                lease_of(&store, partition).await.value.load,
                Some(f64::from(partition)),
                "{mode}"
            );
        }
        let member = store
            .get_member(&group, &node("a"))
            .await
            .unwrap()
            .expect("member record");
        assert_eq!(member.value.load, Some(6.0), "{mode}");
        participant.shutdown().await;
    }
}
