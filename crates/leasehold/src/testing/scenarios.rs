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
use std::future::Future;
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

/// Three nodes share 12 partitions; one crashes; the survivors take its partitions, with no
/// overlap and increasing epochs. Returns the failover time, counted from the crash.
///
/// `acquire_after` runs from when a survivor saw the dead node's last renewal, which went out
/// up to a heartbeat plus a slow store call before the crash; so each takeover is checked
/// against that renewal (the node's deadline for the lease, less the validity), not the crash.
pub async fn crash_takeover(store: Arc<dyn LeaseStore>, group: GroupName) -> Duration {
    crash_takeover_with_mode(store, group, LeaseMode::default()).await
}

/// [`crash_takeover`] in a group set to `lease_mode`.
///
/// With session leases it also checks that the settled fleet renews by its sessions alone
/// before the crash ([`Fleet::renews_by_sessions`]), and that the takeover changed the
/// crashed node's session: a take of a lease whose holder has a session is one transaction
/// with that session, so that the holder, were it only paused, would fail its next renewal.
pub async fn crash_takeover_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> Duration {
    let mut fleet = Fleet::start_with_mode(store, group, 12, 3, lease_mode, |_| {}).await;
    // Balanced first, so that no hand-off (taken without waiting) overlaps the crash.
    fleet
        .wait_balanced(Duration::from_secs(20))
        .await
        .expect("three nodes share every partition evenly");
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.expect_sessions_alone().await;
    let timings = scenario_config("x", &fleet.group, 1);
    // Read before the crash: a renewal sent after this only moves the takeover later.
    let renewed: BTreeMap<PartitionId, Instant> = fleet.nodes[0]
        .leases()
        .iter()
        .map(|lease| {
            (
                lease.partition(),
                lease.valid_until() - timings.lease_validity,
            )
        })
        .collect();
    assert!(!renewed.is_empty(), "the node to crash holds partitions");
    let crashed_at = Instant::now();
    let crashed = fleet.crash(0);
    // Read after the crash: a renewal still in flight then can only change the session
    // again, never hide a take's change.
    let session_at_crash = session_version(&fleet, &crashed).await;
    let failover = fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("survivors take over every partition");
    let longest = check_takeovers(
        &fleet.recorder.events(),
        &renewed,
        (crashed_at, &crashed),
        timings.acquire_after,
    );
    println!(
        "crash_takeover ({lease_mode}): {crashed} crashed; all partitions owned again after \
         {failover:?}, at most {longest:?} after a last renewal (acquire_after {:?})",
        timings.acquire_after
    );
    if lease_mode == LeaseMode::Session {
        assert_ne!(
            session_version(&fleet, &crashed).await,
            session_at_crash,
            "taking {crashed}'s partitions changed its session"
        );
    }
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("after the takeover, every served lease is the store's record");
    fleet.finish().await;
    failover
}

/// The version of the crashed `node`'s member record, which stays (nothing deletes it).
async fn session_version(fleet: &Fleet, node: &NodeId) -> Version {
    let stored = fleet.store.get_member(&fleet.group, node).await;
    let stored = stored.expect("read a member record");
    stored.expect("the crashed node's session stays").version
}

/// Checks that every partition of the crashed node, last renewed as in `renewed`, was taken
/// after the crash, and no sooner than `acquire_after` after that renewal. Returns the
/// longest a take came after its renewal.
fn check_takeovers(
    events: &[FenceEvent],
    renewed: &BTreeMap<PartitionId, Instant>,
    (crashed_at, crashed): (Instant, &NodeId),
    acquire_after: Duration,
) -> Duration {
    let mut longest = Duration::ZERO;
    for (partition, renewed_at) in renewed {
        let taken = events
            .iter()
            .find(|e| e.partition == *partition && e.lost.is_none() && e.at > crashed_at)
            .unwrap_or_else(|| panic!("partition {partition} was taken over"));
        let waited = taken.at.saturating_duration_since(*renewed_at);
        assert!(
            waited >= acquire_after,
            "{} took partition {partition} {waited:?} after {crashed}'s last renewal, sooner \
             than acquire_after {acquire_after:?}",
            taken.node,
        );
        longest = longest.max(waited);
    }
    longest
}

/// Three nodes hold every partition; `outage` makes the store unreachable for longer than the
/// lease validity (for example by stopping the server) and `recovery` brings it back. Every
/// lease must end by its deadline while the store is gone (loss callbacks fire), nothing
/// panics, no partition has two holders, and after recovery every partition is held again.
pub async fn store_outage<O, R>(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    outage: O,
    recovery: R,
) where
    O: Future<Output = ()>,
    R: Future<Output = ()>,
{
    store_outage_with_mode(store, group, LeaseMode::default(), outage, recovery).await;
}

/// [`store_outage`] in a group set to `lease_mode`. With session leases the balanced fleet
/// must renew by its sessions alone ([`Fleet::renews_by_sessions`]) before the outage;
/// after it, each node must release the records still naming it that its session would
/// keep alive, for the fleet to hold every partition again.
pub async fn store_outage_with_mode<O, R>(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
    outage: O,
    recovery: R,
) where
    O: Future<Output = ()>,
    R: Future<Output = ()>,
{
    let fleet = Fleet::start_with_mode(store, group, 12, 3, lease_mode, |_| {}).await;
    fleet
        .wait_all_owned(Duration::from_secs(20))
        .await
        .expect("three nodes own every partition");
    if lease_mode == LeaseMode::Session {
        // Balanced, so that no hand-off writes a lease record while the sessions are watched.
        fleet
            .wait_balanced(Duration::from_secs(20))
            .await
            .expect("three nodes share every partition evenly");
        fleet.expect_sessions_alone().await;
    }
    let validity = scenario_config("x", &fleet.group, 1).lease_validity;
    let before = Instant::now();
    outage.await;
    // Every lease ends within its validity of the last renewal sent, which was sent before
    // the outage completed: counted from then, so that however long stopping the server
    // took stays out of the window.
    let started = Instant::now();
    let limit = validity + Duration::from_secs(2);
    while fleet.owned_total() > 0 && started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fleet.owned_total(),
        0,
        "every lease ended within {limit:?} of the outage"
    );
    // A lease stops answering `lease()` at its deadline by the clock; its loss callback
    // comes when the node's task next runs, which a loaded machine can delay.
    let losses = || -> Vec<LossReason> {
        fleet
            .recorder
            .events()
            .iter()
            .filter(|e| e.at >= before)
            .filter_map(|e| e.lost)
            .collect()
    };
    let called_back = Instant::now();
    while !losses().contains(&LossReason::Expired)
        && called_back.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let losses = losses();
    let expired = losses.iter().filter(|&&r| r == LossReason::Expired).count();
    println!("store_outage: {expired} leases expired on schedule while the store was gone");
    assert!(
        expired >= 1,
        "no loss callback said `expired` during the outage; the losses: {losses:?}"
    );
    recovery.await;
    let back = fleet
        .wait_all_owned(Duration::from_secs(60))
        .await
        .expect("every partition owned again after the store came back");
    println!("store_outage: all partitions owned again {back:?} after recovery");
    fleet
        .beliefs_match_store(Duration::from_secs(5))
        .await
        .expect("after recovery, every served lease is the store's record");
    fleet.finish().await;
}

/// With change notifications, a released partition is taken again without waiting for a
/// scheduled scan. Scans are scheduled every 30 s, so a take within 5 s is a notice's doing
/// (a notice that names no state, as ZooKeeper's, may wait up to a tenth of the scan
/// interval after the last scan): a fleet whose notices do not reach it passes only when a
/// scheduled scan of either node happens to fall in those 5 s, about one run in three.
/// Returns the delay.
///
/// Fails if release notices do not wake a scan (or nobody takes the partition).
pub async fn release_latency(store: Arc<dyn LeaseStore>, group: GroupName) -> Duration {
    release_latency_with_mode(store, group, LeaseMode::default()).await
}

/// [`release_latency`] in a group set to `lease_mode`. With session leases the two nodes,
/// each at its cap once every partition is held, must also renew by their sessions alone
/// before the release ([`Fleet::renews_by_sessions`]).
pub async fn release_latency_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> Duration {
    let scan = Duration::from_secs(30);
    let notified_within = scan / 6;
    let fleet = Fleet::start_with_mode(store, group, 4, 2, lease_mode, |c| {
        c.scan_interval = scan;
        c.max_partitions_per_node = 2;
    })
    .await;
    // Two nodes starting together may race for the same records; a loser tries again at
    // its next scan.
    fleet
        .wait_all_owned(scan * 3)
        .await
        .expect("two nodes own every partition");
    fleet.expect_sessions_alone().await;
    // Let a node below its cap by giving it room: one partition released.
    let (partition, released_at) = release_one(&fleet, scan * 3).await;
    // The giver is now below its cap too, and may take it back itself; whoever takes it, the
    // delay is what a notification-driven scan costs.
    let mut delay = None;
    while released_at.elapsed() < scan * 3 {
        if fleet
            .nodes
            .iter()
            .any(|node| node.lease(partition).is_some())
        {
            delay = Some(released_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delay = delay.expect("the released partition was taken again");
    println!(
        "release_latency ({lease_mode}): released partition taken again after {delay:?} (scan \
         interval {scan:?})"
    );
    assert!(
        delay < notified_within,
        "taken {delay:?} after its release: a scheduled scan, not a notice, found it"
    );
    fleet.finish().await;
    delay
}

/// Releases a partition that a node of `fleet` holds, and returns it with the instant of
/// its release. On a loaded machine a renewal late past its lease can cost a node what it
/// holds at any moment, even between reading what it holds and releasing it: then it tries
/// again, for up to `limit`.
async fn release_one(fleet: &Fleet, limit: Duration) -> (PartitionId, Instant) {
    let deadline = Instant::now() + limit;
    loop {
        let held = fleet
            .nodes
            .iter()
            .find_map(|node| Some((node, *node.owned().first()?)));
        if let Some((node, partition)) = held {
            let released_at = Instant::now();
            if node.release(partition).await {
                return (partition, released_at);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no node held a partition long enough to release it within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What [`throttled_scans`] measured while listings were throttled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleFigures {
    /// Listings the whole fleet attempted, of member and lease records. A throttled scan
    /// stops at its member listing, so each scan counts once.
    pub reads: u64,
    /// The most reads scans that back off allow: after a short ramp, one per node per
    /// `max_scan_backoff`.
    pub reads_allowed: u64,
    /// The fewest: throttled scans still come at least every `max_scan_backoff`, so that a
    /// store that recovers is read again within a few scan intervals.
    pub reads_required: u64,
    /// Reads the fleet would have made at its normal scan interval.
    pub reads_unthrottled: u64,
    /// Batch writes made (renewals, in a group that renews per partition).
    pub batches: u64,
    /// Renewals made: the batch writes per partition; with session leases, the heartbeats
    /// the nodes wrote into their member records.
    pub renewals: u64,
    /// Renewals expected at the heartbeat.
    pub batches_expected: u64,
}

impl ThrottleFigures {
    /// The bounds for `nodes` nodes with `config`'s timings throttled for `window`, with the
    /// counts measured.
    fn new(
        config: &ParticipantConfig,
        nodes: u64,
        window: Duration,
        reads: u64,
        batches: u64,
    ) -> Self {
        let per = |period: Duration| window.as_nanos() / period.as_nanos().max(1);
        let count = |scans: u128| u64::try_from(scans).unwrap_or(u64::MAX) * nodes;
        let backoff = config.max_scan_backoff();
        // A throttled node's waits double from two scan intervals up to max_scan_backoff,
        // each spread by the jitter either way. Fastest: the first scan at once, then every
        // wait spread short. Counting each wait as the longest leaves one scan over for the
        // first and one for the shorter waits before the longest; one more allows for a
        // member write that failed against a real server, which ends a back-off early.
        let allowed = per(backoff.mul_f64(1.0 - config.jitter)) + 3;
        // Slowest: the first scan a scan interval late, then every wait spread long. Counting
        // only the longest waits makes up for the first; one fewer allows for time spent on
        // renewals against a slow server.
        let required = per(backoff.mul_f64(1.0 + config.jitter)).saturating_sub(1);
        ThrottleFigures {
            reads,
            reads_allowed: count(allowed),
            reads_required: count(required),
            reads_unthrottled: count(per(config.scan_interval)),
            batches,
            renewals: batches,
            batches_expected: count(per(config.heartbeat)),
        }
    }
}

/// Two nodes hold 8 partitions; then every listing is throttled for 8 s. Scans must back off
/// to `max_scan_backoff`: every listing either node attempts is counted, and there must be far
/// fewer than the scan interval would make, but still about one per node per back-off.
/// Renewals keep their schedule meanwhile (no lease lost, renewals at the heartbeat rate).
pub async fn throttled_scans(store: Arc<dyn LeaseStore>, group: GroupName) -> ThrottleFigures {
    throttled_scans_with_mode(store, group, LeaseMode::default()).await
}

/// [`throttled_scans`] in a group set to `lease_mode`. With session leases the renewals
/// counted are the heartbeats in the member records, and no lease record may be written
/// while the listings are throttled: a fleet that keeps every lease renews by its sessions
/// alone, however its scans fare.
pub async fn throttled_scans_with_mode(
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    lease_mode: LeaseMode,
) -> ThrottleFigures {
    let throttle = Arc::new(crate::testing::FaultyStore::new(Arc::clone(&store)));
    // Leases of 2.4 s where the other scenarios have 800 ms, still renewed every 200 ms:
    // what this measures is the scans, whose bounds follow the scan interval alone, and a
    // loaded machine held renewals to Azurite back past 600 ms, so that a node lost all it
    // held.
    let longer = |config: &mut ParticipantConfig| {
        config.lease_validity = Duration::from_millis(2400);
        config.acquire_after = Duration::from_millis(3600);
    };
    let fleet = Fleet::start_with_mode(throttle.clone(), group, 8, 2, lease_mode, longer).await;
    fleet
        .wait_balanced(Duration::from_secs(20))
        .await
        .expect("two nodes share every partition");
    let mut config = scenario_config("x", &fleet.group, 8);
    longer(&mut config);
    // Long enough for several of the longest waits, so that the bounds tell back-off from
    // none, and a back-off that stops at max_scan_backoff from one that keeps doubling.
    let window = Duration::from_secs(8);
    // Read behind the throttle, which would refuse the listings and count them as scans.
    let read = || Versions::read(&*store, &fleet.group);
    let before = read().await.expect("read the records");
    // Scans, counted by their listings: a renewal that failed on a loaded machine re-reads
    // the session and its leases record by record, which is no scan.
    let scans = || throttle.listings() + throttle.member_listings();
    let (reads_before, batches_before) = (scans(), throttle.batches());
    throttle.set_reads_throttled(true);
    let started = Instant::now();
    let mut lowest_owned = fleet.owned_total();
    while started.elapsed() < window {
        lowest_owned = lowest_owned.min(fleet.owned_total());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Counted before the throttle lifts, so that no scan after the window is counted.
    let (reads, batches) = (scans() - reads_before, throttle.batches() - batches_before);
    throttle.set_reads_throttled(false);
    let after = read().await.expect("read the records");
    let nodes = fleet.nodes.len() as u64;
    let mut figures = ThrottleFigures::new(&config, nodes, window, reads, batches);
    let session = lease_mode == LeaseMode::Session;
    if session {
        let nodes = fleet.nodes.iter().map(Participant::node);
        figures.renewals = nodes.map(|node| after.renewals_since(&before, node)).sum();
    }
    println!(
        "throttled_scans ({lease_mode}): over {window:?} of throttling, {} listings attempted \
         ({}..={} allowed with back-off, about {} without), {} renewals (about {} expected at \
         the heartbeat), every lease kept: {}",
        figures.reads,
        figures.reads_required,
        figures.reads_allowed,
        figures.reads_unthrottled,
        figures.renewals,
        figures.batches_expected,
        lowest_owned == 8
    );
    assert_eq!(
        lowest_owned, 8,
        "renewals kept every lease while scans were throttled"
    );
    assert!(
        figures.reads <= figures.reads_allowed,
        "scans backed off: {figures:?}"
    );
    assert!(
        figures.reads >= figures.reads_required,
        "throttled scans kept retrying at the longest back-off: {figures:?}"
    );
    assert!(
        figures.renewals * 2 >= figures.batches_expected,
        "renewals kept their schedule: {figures:?}"
    );
    if session {
        let written = after.leases_written_since(&before);
        assert!(
            written.is_empty(),
            "lease records of partitions {written:?} were written while the sessions renewed \
             every lease: {figures:?}"
        );
    }
    fleet.finish().await;
    figures
}
