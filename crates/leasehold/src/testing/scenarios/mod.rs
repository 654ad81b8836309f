//! Participant scenarios against a real store, for backend crates' integration tests.
//!
//! These run in real time (a server cannot be paused), with short timings, and check the
//! safety rule as it happens: a [`FenceRecorder`] shared by every participant of the process
//! fails the test the moment a partition would have two holders, or an epoch would not
//! increase. Lease logic itself is tested with controlled time in the core; here the question
//! is whether a backend keeps it safe and live against a real server.
//!
//! Each scenario's `_with_mode` form runs it in a group set to a [`LeaseMode`]; with session
//! leases it also checks what sessions promise, where the scenario can see it cheaply.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::admin;
use crate::config::ParticipantConfig;
use crate::error::StoreError;
use crate::group::LeaseMode;
use crate::participant::{Callbacks, LeaseGuard, Loss, Participant};
use crate::record::LeaseState;
use crate::store::LeaseStore;
use crate::types::LossReason;
use crate::types::{GroupName, NodeId, PartitionId, Version};

mod failover;
mod handoff;
mod throttle;

pub use failover::{
    crash_takeover, crash_takeover_with_mode, store_outage, store_outage_with_mode,
};
pub use handoff::{release_latency, release_latency_with_mode};
pub use throttle::{throttled_scans, throttled_scans_with_mode, ThrottleFigures};

/// Short real-time timings for scenarios: renew every 200 ms, validity 800 ms, take over after
/// 1.2 s, scan every 200 ms, store calls limited to 200 ms.
pub fn scenario_config(node: &str, group: &GroupName, partitions: u32) -> ParticipantConfig {
    let mut config = ParticipantConfig::fast(NodeId::new(node).expect("valid node"), partitions)
        .with_group(group.clone());
    config.heartbeat = Duration::from_millis(200);
    config.scan_interval = Duration::from_millis(200);
    config.store_timeout = Duration::from_millis(200);
    config.lease_validity = Duration::from_millis(800);
    config.acquire_after = Duration::from_millis(1200);
    config
}

/// One line of the recorder's audit trail.
#[derive(Debug, Clone, PartialEq)]
pub struct FenceEvent {
    /// The node.
    pub node: NodeId,
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the tenure.
    pub epoch: u64,
    /// `None` for an acquisition, the reason for a loss.
    pub lost: Option<LossReason>,
    /// When it happened (for a loss: when the node stopped holding).
    pub at: Instant,
}

#[derive(Debug, Default)]
struct FenceState {
    holders: BTreeMap<PartitionId, (NodeId, u64)>,
    highest_epoch: BTreeMap<PartitionId, u64>,
    events: Vec<FenceEvent>,
    violations: Vec<String>,
}

/// Records every participant's acquisitions and losses in this process and checks, as they
/// happen, that no partition has two holders and that epochs strictly increase.
#[derive(Debug, Clone, Default)]
pub struct FenceRecorder {
    state: Arc<Mutex<FenceState>>,
}

impl FenceRecorder {
    /// The callbacks for one node.
    pub fn callbacks(&self, node: &NodeId) -> Arc<dyn Callbacks> {
        Arc::new(NodeFence {
            node: node.clone(),
            recorder: self.clone(),
        })
    }

    /// Forgets a crashed node's beliefs: a dead process holds nothing.
    pub fn crashed(&self, node: &NodeId) {
        let mut state = self.lock();
        state.holders.retain(|_, (holder, _)| holder != node);
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<FenceEvent> {
        self.lock().events.clone()
    }

    /// Panics with every violation seen, if any.
    pub fn assert_safe(&self) {
        let state = self.lock();
        assert!(
            state.violations.is_empty(),
            "safety violations: {:#?}",
            state.violations
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct NodeFence {
    node: NodeId,
    recorder: FenceRecorder,
}

impl Callbacks for NodeFence {
    fn on_acquired(&self, lease: &LeaseGuard) {
        let mut state = self.recorder.lock();
        let partition = lease.partition();
        let epoch = lease.epoch().0;
        if let Some((holder, held_epoch)) = state.holders.get(&partition).cloned() {
            state.violations.push(format!(
                "{} acquired partition {partition} (epoch {epoch}) while {holder} holds it (epoch {held_epoch})",
                self.node
            ));
        }
        let highest = state.highest_epoch.get(&partition).copied().unwrap_or(0);
        if epoch <= highest {
            state.violations.push(format!(
                "partition {partition}: epoch {epoch} acquired after epoch {highest}"
            ));
        }
        state.highest_epoch.insert(partition, epoch);
        state.holders.insert(partition, (self.node.clone(), epoch));
        state.events.push(FenceEvent {
            node: self.node.clone(),
            partition,
            epoch,
            lost: None,
            at: Instant::now(),
        });
    }

    fn on_lost(&self, loss: &Loss) {
        let mut state = self.recorder.lock();
        if state.holders.get(&loss.partition).map(|(n, _)| n) == Some(&self.node) {
            state.holders.remove(&loss.partition);
        }
        state.events.push(FenceEvent {
            node: self.node.clone(),
            partition: loss.partition,
            epoch: loss.epoch.0,
            lost: Some(loss.reason),
            at: loss.at,
        });
    }
}

/// A group of in-process participants on one store.
pub struct Fleet {
    /// The store they share.
    pub store: Arc<dyn LeaseStore>,
    /// Their group.
    pub group: GroupName,
    /// How many partitions it has.
    pub partitions: u32,
    /// How the group renews its leases.
    pub lease_mode: LeaseMode,
    /// The running participants.
    pub nodes: Vec<Participant>,
    /// Their shared audit trail.
    pub recorder: FenceRecorder,
}

impl Fleet {
    /// Initialises `group` with `partitions` partitions and starts `count` participants named
    /// `node-0`, `node-1`, … with [`scenario_config`] timings adjusted by `adjust`.
    pub async fn start(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
        count: usize,
        adjust: impl Fn(&mut ParticipantConfig),
    ) -> Fleet {
        let mode = LeaseMode::default();
        Fleet::start_with_mode(store, group, partitions, count, mode, adjust).await
    }

    /// [`Fleet::start`] in a group set to `lease_mode` after it is initialised and before
    /// any node joins: the nodes read the mode when they join.
    pub async fn start_with_mode(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
        count: usize,
        lease_mode: LeaseMode,
        adjust: impl Fn(&mut ParticipantConfig),
    ) -> Fleet {
        admin::init(&*store, &group, partitions)
            .await
            .expect("init the group");
        admin::set_lease_mode(&*store, &group, lease_mode)
            .await
            .expect("set the group's lease mode");
        let recorder = FenceRecorder::default();
        let nodes = (0..count)
            .map(|index| {
                let mut config = scenario_config(&format!("node-{index}"), &group, partitions);
                adjust(&mut config);
                let callbacks = recorder.callbacks(&config.node);
                Participant::start(Arc::clone(&store), config, callbacks)
                    .expect("scenario timings are valid")
            })
            .collect();
        Fleet {
            store,
            group,
            partitions,
            lease_mode,
            nodes,
            recorder,
        }
    }

    /// How many partitions the running participants hold between them.
    pub fn owned_total(&self) -> usize {
        self.nodes.iter().map(|n| n.owned().len()).sum()
    }

    /// Waits up to `limit` until every partition is held, returning how long it took.
    pub async fn wait_all_owned(&self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.owned_total() == self.partitions as usize {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Waits up to `limit` until every partition is held and no two nodes' counts differ by
    /// more than one.
    pub async fn wait_balanced(&self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let counts: Vec<usize> = self.nodes.iter().map(|n| n.owned().len()).collect();
            let (low, high) = (counts.iter().min(), counts.iter().max());
            if self.owned_total() == self.partitions as usize
                && high.zip(low).is_some_and(|(h, l)| h - l <= 1)
            {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Waits up to `limit` until every lease a node serves is backed by the store: the
    /// partition's record names that node as holder at that lease's epoch. Returns the last
    /// disagreement if it persists: a node acting on a tenure the store does not record, as a
    /// write applied twice or lost behind a reply could leave it.
    pub async fn beliefs_match_store(&self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            // Bounded, so that a hung store fails the check instead of hanging the test.
            let disagreement = tokio::time::timeout(limit, self.first_unbacked_belief())
                .await
                .unwrap_or_else(|_| Some(format!("the store did not answer within {limit:?}")));
            match disagreement {
                None => return Ok(()),
                Some(found) if start.elapsed() >= limit => return Err(found),
                Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn first_unbacked_belief(&self) -> Option<String> {
        for node in &self.nodes {
            for lease in node.leases().into_iter().filter(LeaseGuard::is_valid) {
                let partition = lease.partition();
                let stored = match self.store.get_lease(&self.group, partition).await {
                    Ok(stored) => stored.map(|s| s.value),
                    Err(error) => return Some(format!("reading partition {partition}: {error}")),
                };
                let backed = stored.as_ref().is_some_and(|record| {
                    record.state == LeaseState::Held
                        && record.owner.as_ref() == Some(node.node())
                        && record.epoch == lease.epoch()
                });
                if !backed {
                    return Some(format!(
                        "{} serves partition {partition} at epoch {}, the store has {stored:?}",
                        node.node(),
                        lease.epoch().0
                    ));
                }
            }
        }
        None
    }

    /// Waits up to `limit` until every running node has written its member record `renewals`
    /// more times, and checks that no lease record was written meanwhile. With session leases
    /// that is the promise: a settled fleet renews by its sessions alone, and writes a lease
    /// record only when a partition changes hands. Call it once the fleet has settled.
    pub async fn renews_by_sessions(&self, renewals: u64, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        let before = Versions::read(&*self.store, &self.group).await?;
        loop {
            let now = Versions::read(&*self.store, &self.group).await?;
            let written = now.leases_written_since(&before);
            if !written.is_empty() {
                return Err(format!("partitions {written:?}: lease records written"));
            }
            let mut nodes = self.nodes.iter().map(Participant::node);
            match nodes.find(|node| now.renewals_since(&before, node) < renewals) {
                None => return Ok(()),
                Some(node) if start.elapsed() >= limit => {
                    return Err(format!("{node}: under {renewals} renewals in {limit:?}"))
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// With session leases, fails the test unless the settled fleet renews a few times by its
    /// sessions alone. The limit is many heartbeats, so that only renewals that stop fail.
    async fn expect_sessions_alone(&self) {
        if self.lease_mode == LeaseMode::Session {
            let check = self.renews_by_sessions(3, Duration::from_secs(10));
            check.await.expect("the fleet renews by its sessions alone");
        }
    }

    /// Crashes node `index`: its task stops without releasing anything.
    pub fn crash(&mut self, index: usize) -> NodeId {
        let node = self.nodes.remove(index);
        node.abort();
        self.recorder.crashed(node.node());
        node.node().clone()
    }

    /// Shuts every node down gracefully and checks the audit trail.
    pub async fn finish(self) {
        for node in &self.nodes {
            node.shutdown().await;
        }
        self.recorder.assert_safe();
    }
}

/// The versions of a group's records at one moment, to tell which were written since.
struct Versions {
    leases: BTreeMap<PartitionId, Version>,
    /// Each member record's version and heartbeat count.
    members: BTreeMap<NodeId, (Version, u64)>,
}

impl Versions {
    async fn read(store: &dyn LeaseStore, group: &GroupName) -> Result<Versions, String> {
        let failed = |error: StoreError| format!("reading the records of {group}: {error}");
        let leases = store.list_leases(group).await.map_err(failed)?;
        let members = store.list_members(group).await.map_err(failed)?;
        Ok(Versions {
            leases: leases
                .records
                .into_iter()
                .map(|r| (r.key, r.version))
                .collect(),
            members: members
                .records
                .into_iter()
                .map(|r| (r.key, (r.version, r.value.heartbeat)))
                .collect(),
        })
    }

    /// The partitions whose lease record was written, created or deleted since `earlier`.
    fn leases_written_since(&self, earlier: &Versions) -> Vec<PartitionId> {
        let partitions: std::collections::BTreeSet<_> =
            self.leases.keys().chain(earlier.leases.keys()).collect();
        partitions
            .into_iter()
            .filter(|partition| self.leases.get(partition) != earlier.leases.get(partition))
            .copied()
            .collect()
    }

    /// How many heartbeats `node` has written into its member record since `earlier`: none
    /// if the record is gone or unchanged.
    fn renewals_since(&self, earlier: &Versions, node: &NodeId) -> u64 {
        match (earlier.members.get(node), self.members.get(node)) {
            (Some((was, from)), Some((now, to))) if was != now => to.saturating_sub(*from),
            (None, Some((_, to))) => *to,
            _ => 0,
        }
    }
}
