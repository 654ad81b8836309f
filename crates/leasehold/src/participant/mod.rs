//! The participant: a server's membership in a group, holding and renewing leases in the
//! background.

mod clear;
mod events;
mod guard;
mod halt;
mod handoff;
mod heartbeat;
mod holdings;
mod join;
mod late;
mod runner;
mod scan;
mod slots;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{broadcast, mpsc, oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock::{Clock, SeededRng, TokioClock};
use crate::config::{ConfigError, ParticipantConfig};
use crate::group::GroupMismatch;
use crate::metrics::{MeteredStore, Metrics};
use crate::store::{LeaseStore, TimeoutStore};
use crate::types::{NodeId, PartitionId};

pub use events::{LeaseEvent, LeaseEvents, Missed};
pub use guard::{Callbacks, LeaseGuard, Loss, WorkPermit};
use guard::{Phase, Tenure};
pub use halt::Halt;
use runner::{Command, Runner};
use slots::Slots;

/// Commands queued from handles to the task: only a shutdown is ever sent.
const COMMAND_CAPACITY: usize = 4;

/// Where a participant's time and randomness come from, and where it reports.
#[derive(Debug, Clone)]
pub struct Environment {
    /// The node's monotonic clock.
    pub clock: Arc<dyn Clock>,
    /// Seed for jitter and for the order in which free partitions are tried.
    pub seed: u64,
    /// Where to record the node's metrics ([`crate::metrics`]); none by default.
    pub metrics: Option<Metrics>,
    /// Where session identities ([`crate::MemberRecord::session`]) come from: `None` (the
    /// default), the operating system's randomness, so that no two processes draw the same
    /// one whatever their seeds; `Some(seed)` only where a run must replay exactly (the
    /// simulator). Two processes under one name with the same seed here cannot be told
    /// apart.
    pub session_seed: Option<u64>,
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            clock: Arc::new(TokioClock),
            seed: SeededRng::from_entropy().next_u64(),
            metrics: None,
            session_seed: None,
        }
    }
}

/// Why [`Participant::join`] did not join its group.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The configuration is invalid on its own.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The group record does not admit this node.
    #[error(transparent)]
    Group(#[from] GroupMismatch),
    /// The participant was shut down or dropped before it joined.
    #[error("the participant stopped before it joined its group")]
    Stopped,
    /// The participant stopped by itself before it joined: another process took its name
    /// over while it registered.
    #[error(transparent)]
    Halted(Halt),
}

/// A snapshot of what a participant's background loop last decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// How many partitions this node aims to hold.
    pub target: u32,
    /// Members counted live at the last decision, this node included.
    pub live_members: usize,
    /// Whether an operator has asked this node to drain.
    pub draining: bool,
    /// Completed scans.
    pub scans: u64,
    /// Scans that read the lease table as well as the member records: all of them with a
    /// zero [`ParticipantConfig::relist_after`], far fewer once settled otherwise.
    pub lease_listings: u64,
    /// Scans that set out to read the lease table, by why they did, whether or not the
    /// reading succeeded: what sends a large fleet's nodes to the table.
    pub listings_started: std::collections::BTreeMap<crate::planner::ListingCause, u64>,
    /// Scans started, by why each ran when it did: what makes a node scan more often than
    /// its scan interval.
    pub scans_started: std::collections::BTreeMap<crate::planner::ScanCause, u64>,
    /// Why the last scan failed, if it did.
    pub last_scan_error: Option<String>,
    /// Application callbacks that panicked (each contained and logged).
    pub callback_panics: u64,
    /// With session leases: sessions that ended under this node while it ran (its member
    /// record deleted, or written by another process), each dropping every lease it held.
    /// A count that moves with neither an operator nor a second process under this name at
    /// work points at the store or at this library.
    pub sessions_ended: u64,
    /// When the application reports load: this node's load and its fair share of the
    /// fleet's, at the last decision.
    pub load: Option<(f64, f64)>,
    /// How many more partitions this node may move to balance load in the current churn
    /// window ([`ParticipantConfig::churn_budget`]).
    pub load_moves_left: u32,
    /// Load above [`ParticipantConfig::max_load`] that no member had room for at the last
    /// decision: it stays on this node.
    pub load_spillover: f64,
}

/// State shared between handles and the task. Locks are held only for map operations,
/// never across an await.
struct Shared {
    leases: RwLock<Leases>,
    /// The tenures of `leases` by partition, so that [`Participant::lease`] finds one with
    /// atomic loads and no lock. Written only under `leases`' write lock, so the two always
    /// agree for a reader holding that lock.
    slots: Slots,
    status: RwLock<Status>,
    /// Wakes the task when a hand-off may go on (see [`Tenure`]).
    progress: Arc<Notify>,
    /// Set by [`Participant::abort`]: the task ends as in a crash, telling nobody.
    aborted: AtomicBool,
    /// Turns true when the task has ended, for whatever reason.
    stopped: watch::Sender<bool>,
    /// Why the task ended by itself, if it did; set before `stopped` turns true.
    halt: Mutex<Option<Halt>>,
    /// `None` while the node is joining; then whether the group record admitted it.
    joined: watch::Sender<Option<Result<(), GroupMismatch>>>,
    /// A new exclusion list from [`Participant::set_excluded`], for the task to adopt.
    excluded: Mutex<Option<BTreeSet<PartitionId>>>,
    /// Wakes [`Participant::acquired`] whenever a lease is taken.
    taken: Notify,
    /// What [`Participant::events`] subscribers hear, made at the first subscription: its
    /// buffer of [`events::EVENT_CAPACITY`] events is a quarter of a megabyte, which most
    /// participants, never subscribed to, need not carry.
    events: std::sync::OnceLock<broadcast::Sender<LeaseEvent>>,
}

/// The tenures held, those being handed off included, with a counter of changes to them
/// kept under the same lock, so that a reader sees the two agree.
#[derive(Default)]
struct Leases {
    held: BTreeMap<PartitionId, Arc<Tenure>>,
    changes: u64,
}

impl Leases {
    fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
    }
}

impl Shared {
    fn new(partitions: u32) -> Shared {
        Shared {
            leases: RwLock::new(Leases::default()),
            slots: Slots::new(partitions),
            status: RwLock::new(Status::default()),
            progress: Arc::new(Notify::new()),
            aborted: AtomicBool::new(false),
            stopped: watch::Sender::new(false),
            halt: Mutex::new(None),
            joined: watch::Sender::new(None),
            excluded: Mutex::new(None),
            taken: Notify::new(),
            events: std::sync::OnceLock::new(),
        }
    }

    fn write_leases(&self) -> std::sync::RwLockWriteGuard<'_, Leases> {
        self.leases.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read_leases(&self) -> std::sync::RwLockReadGuard<'_, Leases> {
        self.leases.read().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, tenure: Arc<Tenure>) {
        let mut leases = self.write_leases();
        self.slots
            .store(tenure.partition(), Some(Arc::clone(&tenure)));
        leases.held.insert(tenure.partition(), tenure);
        leases.changed();
        drop(leases);
        self.taken.notify_waiters();
    }

    /// The tenure of `partition`, from its slot without locking, or from the map for a
    /// partition without a slot (in a group too large to give every partition one; the
    /// planner never takes one beyond the group's count, but a caller may name it).
    fn tenure(&self, partition: PartitionId) -> Option<Arc<Tenure>> {
        if self.slots.covers(partition) {
            return self.slots.get(partition)?.load_full();
        }
        self.read_leases().held.get(&partition).cloned()
    }

    /// Moves the deadline of leases still held; never re-adds one released meanwhile. One
    /// lock for a whole renewal: a node renews every lease it holds at each heartbeat.
    fn extend(&self, partitions: impl IntoIterator<Item = PartitionId>, valid_until: Instant) {
        let mut leases = self.write_leases();
        let mut extended = false;
        for partition in partitions {
            if let Some(tenure) = leases.held.get(&partition) {
                tenure.extend(valid_until);
                extended = true;
            }
        }
        if extended {
            leases.changed();
        }
    }

    /// Stops new work on a lease and wakes the task to hand it off. Returns whether the lease
    /// was serving until now. The mark, not a message, is what the task acts on, so a caller
    /// that gives up waiting can never leave a lease stopped but held.
    fn hand_off(&self, partition: PartitionId) -> bool {
        let mut leases = self.write_leases();
        let Some(tenure) = leases.held.get(&partition) else {
            return false;
        };
        let serving = tenure.hand_off();
        if serving {
            leases.changed();
            drop(leases);
            self.progress.notify_one();
        }
        serving
    }

    /// Takes a tenure out of the leases held; the caller ends it.
    fn remove(&self, partition: PartitionId) -> Option<Arc<Tenure>> {
        let mut leases = self.write_leases();
        let tenure = leases.held.remove(&partition)?;
        self.slots.store(partition, None);
        leases.changed();
        Some(tenure)
    }

    /// The exclusion list set since the task last looked, if any.
    fn take_excluded(&self) -> Option<BTreeSet<PartitionId>> {
        self.excluded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn update_status(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.write().unwrap_or_else(|e| e.into_inner()));
    }
}

/// A server's membership in a group: holds, renews, balances and hands off leases in a
/// background task, and answers "do I hold partition p?" from memory.
///
/// Cheap to clone; every clone talks to the same task. [`Participant::shutdown`] releases
/// every held lease and ends the task. Dropping every handle without shutting down stops the
/// task without writing anything, so leases then expire on schedule, as after a crash.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId};
///
/// let store = Arc::new(MemoryStore::new());
/// let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 8);
/// admin::init(&*store, &config.group, 8).await.unwrap();
///
/// let participant = Participant::start(store, config, ()).unwrap();
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// let lease = participant.lease(PartitionId(3)).expect("a lone node takes every partition");
/// assert!(lease.is_valid());
/// println!("serving partition 3 with fencing token {}", lease.epoch());
/// participant.shutdown().await;
/// # });
/// ```
#[derive(Clone)]
pub struct Participant {
    inner: Arc<Inner>,
}

struct Inner {
    node: NodeId,
    partitions: u32,
    /// The simulator's negative control: exclusions change nothing.
    ignore_exclusions: bool,
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Kept apart from `task`, which [`Participant::shutdown`] takes to await it: a crash
    /// (abort) in the middle of a graceful shutdown must still stop the task.
    abort: tokio::task::AbortHandle,
}

impl fmt::Debug for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Participant")
            .field("node", &self.inner.node)
            .field("owned", &self.owned())
            .finish()
    }
}

impl Participant {
    /// Validates `config` and starts taking part in its group, on the current Tokio runtime,
    /// with the real clock. Every store call is limited to `config.store_timeout`.
    pub fn start(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        callbacks: impl Callbacks,
    ) -> Result<Participant, ConfigError> {
        Participant::start_with(store, config, callbacks, Environment::default())
    }

    /// Starts like [`Participant::start`] and waits until the node has checked the group
    /// record: returns the participant once the group admits it, or why it did not. Waits
    /// through store outages (the check is retried); bound it with a timeout if needed.
    pub async fn join(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        callbacks: impl Callbacks,
    ) -> Result<Participant, JoinError> {
        let participant = Participant::start(store, config, callbacks)?;
        participant.joined().await?;
        Ok(participant)
    }

    /// Resolves once the node has checked the group record: `Ok` while the group admits it,
    /// the refusal otherwise ([`Participant::start`] returns before the check; the node takes
    /// nothing until it passes, and its task ends if it fails).
    pub async fn joined(&self) -> Result<(), JoinError> {
        let mut joined = self.inner.shared.joined.subscribe();
        let mut stopped = self.inner.shared.stopped.subscribe();
        loop {
            if let Some(result) = joined.borrow_and_update().clone() {
                return result.map_err(JoinError::Group);
            }
            if *stopped.borrow_and_update() {
                return Err(match self.halt() {
                    Some(Halt::Refused(mismatch)) => JoinError::Group(mismatch),
                    Some(halt) => JoinError::Halted(halt),
                    None => JoinError::Stopped,
                });
            }
            // Both senders live in the shared state this handle keeps: neither can close.
            tokio::select! {
                _ = joined.changed() => {}
                _ = stopped.changed() => {}
            }
        }
    }

    /// Why the group record refused this node, if it did: at start, or later when the node
    /// had to register again and no longer fitted.
    pub fn refusal(&self) -> Option<GroupMismatch> {
        self.inner.shared.joined.borrow().clone()?.err()
    }

    /// Like [`Participant::start`], with an injected clock and seed (tests, simulation).
    pub fn start_with(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        callbacks: impl Callbacks,
        environment: Environment,
    ) -> Result<Participant, ConfigError> {
        config.validate()?;
        let store: Arc<dyn LeaseStore> = Arc::new(
            TimeoutStore::new(store, config.store_timeout)
                .with_listing_limit(config.listing_timeout()),
        );
        Ok(Participant::spawn(
            store,
            config,
            Arc::new(callbacks),
            environment,
        ))
    }

    /// Starts without validating `config`: for the simulator's deliberately unsafe
    /// negative controls only. A configuration that breaks the safety rule can let two
    /// nodes hold one partition at once.
    #[doc(hidden)]
    pub fn start_unchecked(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        callbacks: Arc<dyn Callbacks>,
        environment: Environment,
    ) -> Participant {
        let store: Arc<dyn LeaseStore> = Arc::new(
            TimeoutStore::new(store, config.store_timeout)
                .with_listing_limit(config.listing_timeout()),
        );
        Participant::spawn(store, config, callbacks, environment)
    }

    fn spawn(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        callbacks: Arc<dyn Callbacks>,
        mut environment: Environment,
    ) -> Participant {
        let shared = Arc::new(Shared::new(config.partitions));
        let (config_partitions, ignore_exclusions) =
            (config.partitions, config.controls.ignore_exclusions);
        let (commands, receiver) = mpsc::channel(COMMAND_CAPACITY);
        let node = config.node.clone();
        let metrics = environment
            .metrics
            .take()
            .map(|metrics| Arc::new(metrics.node(&config.group, &config.node)));
        let store = match &metrics {
            Some(metrics) => Arc::new(MeteredStore::new(store, Arc::clone(metrics))),
            None => store,
        };
        let mut runner = Runner::new(
            store,
            config,
            environment,
            callbacks,
            Arc::clone(&shared),
            receiver,
        );
        runner.metrics = metrics;
        let task = tokio::spawn(runner.run());
        Participant {
            inner: Arc::new(Inner {
                node,
                partitions: config_partitions,
                ignore_exclusions,
                shared,
                commands,
                abort: task.abort_handle(),
                task: Mutex::new(Some(task)),
            }),
        }
    }

    /// This node's name.
    pub fn node(&self) -> &NodeId {
        &self.inner.node
    }

    /// How many partitions the group has: the lease table's partitions are `0..partitions()`.
    pub fn partitions(&self) -> u32 {
        self.inner.partitions
    }

    /// The lease on `partition`, if this node holds it, is open to new work on it (not
    /// handing it off) and its deadline has not passed on the local clock. Answers from
    /// memory; never waits for the background task.
    pub fn lease(&self, partition: PartitionId) -> Option<LeaseGuard> {
        let shared = &self.inner.shared;
        if shared.slots.covers(partition) {
            // Borrowed from the slot, not cloned out of it: the guard takes its own reference
            // only on a hit.
            return shared.slots.get(partition)?.load().as_ref()?.guard();
        }
        shared.tenure(partition)?.guard()
    }

    /// A permit for one unit of work on `partition`: [`LeaseGuard::permit`] of
    /// [`Participant::lease`]. Hold it while the work runs; a hand-off of the partition waits
    /// until it is dropped.
    pub fn permit(&self, partition: PartitionId) -> Option<WorkPermit> {
        self.lease(partition)?.permit()
    }

    /// The partitions this node holds now, in order.
    pub fn owned(&self) -> Vec<PartitionId> {
        // What `leases` answers, without a guard (and a reference count) per lease.
        self.inner
            .shared
            .read_leases()
            .held
            .values()
            .filter(|tenure| tenure.serving_until().is_some())
            .map(|tenure| tenure.partition())
            .collect()
    }

    /// Every lease this node holds now, in partition order: what [`Participant::lease`]
    /// answers for each of [`Participant::owned`], read at one instant.
    pub fn leases(&self) -> Vec<LeaseGuard> {
        self.inner
            .shared
            .read_leases()
            .held
            .values()
            .filter_map(Tenure::guard)
            .collect()
    }

    /// The leases this node is handing off, in partition order: still its own, renewed while
    /// the work in flight under them ends, but no longer open to new work (their guards are
    /// not valid). Each is written released once its last permit is dropped.
    pub fn handing_off(&self) -> Vec<LeaseGuard> {
        self.inner
            .shared
            .read_leases()
            .held
            .values()
            .filter(|tenure| tenure.phase() == Phase::HandingOff)
            .map(Tenure::snapshot)
            .collect()
    }

    /// A counter that moves whenever this node's leases change: one taken, renewed, released,
    /// lost or dropped. While it stays the same, [`Participant::leases`] returns the same
    /// leases with the same deadlines, less any whose deadline has since passed; so whatever
    /// is derived from them (a routing table, a registry entry) need only be rebuilt when it
    /// moves.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 4);
    /// admin::init(&*store, &config.group, 4).await.unwrap();
    /// let participant = Participant::start(store, config, ()).unwrap();
    /// let before = participant.lease_changes();
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    /// assert_ne!(participant.lease_changes(), before, "the leases were taken meanwhile");
    /// assert_eq!(participant.leases().len(), 4);
    /// # });
    /// ```
    pub fn lease_changes(&self) -> u64 {
        self.inner.shared.read_leases().changes
    }

    /// What the background loop last decided.
    pub fn status(&self) -> Status {
        self.inner
            .shared
            .status
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Gives up `partition` so that another node can take it at once. From this call on,
    /// [`Participant::lease`] answers `None` for it and no new permit is given; the record is
    /// written released as soon as every [`WorkPermit`] already taken on it is dropped (see
    /// [`ParticipantConfig::drain_timeout`]). Returns whether this node was serving it.
    pub async fn release(&self, partition: PartitionId) -> bool {
        self.inner.shared.hand_off(partition)
    }

    /// Replaces this node's exclusion list ([`ParticipantConfig::excluded`]): from now on it
    /// takes none of `excluded` (a take already sent whose reply comes later is not served:
    /// its record is left to run out), and hands off those it holds as in a drain (new work
    /// on them stops at once, the records are released once their permits are dropped).
    /// Refuses a list naming partitions the group does not have, keeping the old one.
    pub fn set_excluded(&self, excluded: BTreeSet<PartitionId>) -> Result<(), ConfigError> {
        ParticipantConfig::check_excluded(self.inner.partitions, &excluded)?;
        let shared = &self.inner.shared;
        if !self.inner.ignore_exclusions {
            let leases = shared.read_leases();
            let affected: Vec<PartitionId> = leases
                .held
                .keys()
                .filter(|p| excluded.contains(p))
                .copied()
                .collect();
            drop(leases);
            // No new permit from this call on, whatever the task is doing.
            for partition in affected {
                shared.hand_off(partition);
            }
        }
        *shared.excluded.lock().unwrap_or_else(|e| e.into_inner()) = Some(excluded);
        shared.progress.notify_one();
        Ok(())
    }

    /// Releases every held lease (a graceful hand-off), removes this node's member record and
    /// waits for the background task to end. Later calls return at once.
    pub async fn shutdown(&self) {
        self.stop(false).await
    }

    /// Stops for a restart in place: as [`Participant::shutdown`], the work in flight ends
    /// first (up to the drain timeout), but each lease is then written released *reserved
    /// for this node's name*. A process that starts under the same name takes them back at
    /// once, each under a higher epoch (a new tenure, which fencing tells apart from this
    /// one); the others leave them alone for the group's restart window
    /// ([`crate::GroupRecord::restart_window`], by default its `acquire_after`), counted
    /// from when each first sees them, and take them as any released lease after it. Nothing
    /// moves if the process is back within the window; the partitions are served by nobody
    /// in between. Later calls, and calls after a shutdown, return at once.
    pub async fn restart(&self) {
        self.stop(true).await
    }

    async fn stop(&self, restart: bool) {
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(task) = task else {
            return;
        };
        let (done, finished) = oneshot::channel();
        if self
            .inner
            .commands
            .send(Command::Shutdown { done, restart })
            .await
            .is_ok()
        {
            let _ = finished.await;
        }
        if let Err(error) = task.await {
            if error.is_panic() {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }

    /// Resolves once the background task has ended: after [`Participant::shutdown`], or
    /// unexpectedly. Held leases are reported lost ([`LossReason::Stopped`](crate::LossReason::Stopped)) when the task
    /// ends without releasing them. A process built on a participant should watch this and
    /// exit when it resolves without a shutdown, so that its supervisor restarts it.
    ///
    /// Returns why the task stopped by itself ([`Halt`]), or `None` after a shutdown, when
    /// every handle was dropped, or when the task failed.
    pub async fn stopped(&self) -> Option<Halt> {
        let mut stopped = self.inner.shared.stopped.subscribe();
        // The sender lives in the shared state this handle keeps: it cannot close.
        let _ = stopped.wait_for(|stopped| *stopped).await;
        self.halt()
    }

    /// Why the background task stopped by itself, if it did ([`Participant::stopped`]).
    pub fn halt(&self) -> Option<Halt> {
        self.inner
            .shared
            .halt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops the background task at once without writing anything, as a crash would: held
    /// leases stay in the store until they expire. For tests, demos and simulations.
    pub fn abort(&self) {
        self.inner.shared.aborted.store(true, Ordering::SeqCst);
        let shared = &self.inner.shared;
        let mut leases = shared.write_leases();
        for tenure in std::mem::take(&mut leases.held).into_values() {
            shared.slots.store(tenure.partition(), None);
            tenure.end();
        }
        leases.changed();
        drop(leases);
        self.inner.abort.abort();
    }
}
