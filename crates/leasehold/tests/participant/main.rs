//! Participant behaviour under controlled time: Tokio's clock is paused and advances only
//! when every task waits, so each run is exact and takes no real time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::testing::FaultyStore;
use leasehold::{
    admin, Callbacks, Environment, GroupName, LeaseGuard, LeaseMode, LeaseRecord, LeaseState,
    LeaseStore, Loss, LossReason, MemberRecord, MemoryStore, NodeId, Participant,
    ParticipantConfig, PartitionId, PutMode, StoredLease, TokioClock,
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

async fn sleep_until_just_before(deadline: Instant) {
    tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
}

mod leases;
mod members;
mod sessions;
