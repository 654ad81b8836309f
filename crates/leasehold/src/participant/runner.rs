//! The participant's background task: executes plans against the store.
//!
//! This file holds the loop, its events and what every step shares (store calls that keep
//! deadlines, losing a lease, containing callbacks). The steps themselves are beside it:
//! [`heartbeat`](super::heartbeat) renews, [`scan`](super::scan) reads and takes,
//! [`handoff`](super::handoff) gives leases up.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::clock::{Clock, SeededRng};
use crate::config::ParticipantConfig;
use crate::error::StoreError;
use crate::metrics::{set_count, NodeMetrics};
use crate::planner::{Holding, Observed, ScanSchedule};
use crate::store::{Change, ChangeFeed, LeaseStore, LeaseWrite};
use crate::types::{PartitionId, Version};

use super::guard::{Callbacks, Loss};
use super::halt::Halt;
use super::{LeaseEvent, Shared};
use crate::types::LossReason;

/// A callback that takes longer than the heartbeat divided by this is counted as slow: it
/// holds up renewals, which run on the same loop.
const SLOW_CALLBACK_DIVISOR: u32 = 10;

/// Requests from handles to the task. Releases are not among them: a handle marks the
/// lease itself (see [`Shared::hand_off`]) and wakes the task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Hand every lease off and stop, answering on `done`; with `restart`, each lease is
    /// written released but reserved for this node's name (see [`super::Participant::restart`]).
    Shutdown {
        done: oneshot::Sender<()>,
        restart: bool,
    },
}

/// A renewal whose outcome stayed unknown after its read-back: what it wrote, and when it was
/// sent (see `participant/late.rs`).
#[derive(Debug, Clone)]
pub(super) struct LateRenewal {
    pub(super) record: crate::record::LeaseRecord,
    pub(super) sent_at: Instant,
}

/// A lease being given up, waiting for the work in flight under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Handoff {
    /// Renewed while permits are held, until this instant at the latest.
    Draining { until: Instant },
    /// Permits outlived the drain timeout: no longer renewed, left to expire unreleased.
    Abandoned,
}

impl Handoff {
    /// Whether a renewal sent at `sent_at` may extend the lease: only within the drain
    /// limit. A renewal sent later (the runner was held up in slow store calls and marks the
    /// hand-off abandoned only after its heartbeat) would keep an excluded or drained
    /// partition past the bound its operator was promised.
    pub(super) fn renews_at(self, sent_at: Instant) -> bool {
        match self {
            Handoff::Draining { until } => sent_at < until,
            Handoff::Abandoned => false,
        }
    }
}

enum Event {
    Command(Option<Command>),
    Expire,
    Tick,
    Change(Option<Change>),
    Progress,
}

pub(crate) struct Runner {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) config: ParticipantConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: SeededRng,
    pub(crate) callbacks: Arc<dyn Callbacks>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: mpsc::Receiver<Command>,
    pub(super) holdings: BTreeMap<PartitionId, Holding>,
    /// The holdings being handed off (each marked [`Holding::handing_off`]).
    pub(super) handoffs: BTreeMap<PartitionId, Handoff>,
    /// A heartbeat (renewals and the member record) is under way: the calls it makes must
    /// not start another.
    pub(super) beating: bool,
    /// A write or delete of this node's member record is waiting for its reply: a heartbeat
    /// that comes due meanwhile renews the leases but leaves the member record alone. Two
    /// writes of one record in flight from one process answer in any order, and the
    /// version adopted from the reply that came last may be one the other already replaced;
    /// with session leases the next renewal would then find its own session "changed".
    pub(super) member_call: bool,
    /// Counts this node's writes and reads of its own member record. A member listing sent
    /// before the latest of them may show an older drain flag than the one adopted since.
    pub(super) member_syncs: u64,
    /// Set once a shutdown was asked for: the task hands every lease off, takes nothing new,
    /// and answers here when the last one is gone.
    pub(super) stopping: Option<oneshot::Sender<()>>,
    /// Set with `stopping` when the node stops to restart in place: what it releases stays
    /// reserved for its name.
    pub(super) restarting: bool,
    pub(super) observed: Observed,
    pub(super) member_version: Option<Version>,
    pub(super) heartbeats: u64,
    pub(super) draining: bool,
    pub(super) feed: Option<ChangeFeed>,
    pub(super) next_heartbeat: Instant,
    /// When to scan and what to read: decided apart, as the plans are.
    pub(super) schedule: ScanSchedule,
    pub(super) wake_at: Option<Instant>,
    pub(super) reported_corrupt: BTreeSet<String>,
    pub(super) last_stamp: u64,
    /// Set when this node must stop by itself (it no longer fits the group record, or
    /// another process took over its name): it takes and writes nothing more, and the task
    /// ends at the end of the current event.
    pub(super) halted: Option<Halt>,
    /// The stamp of this process's last member write that the store acknowledged: a record
    /// under this node's name that shows it is this process's own. Set once this process
    /// has had a record (with session leases, a session) of its own in the store: one that
    /// then finds another process's session under its name was replaced, and stops, where
    /// one still joining takes the name over.
    pub(super) member_stamp: Option<u64>,
    /// The group record must be checked again at the next member write (this node had to
    /// register again).
    pub(super) recheck_group: bool,
    /// The group's generation ([`crate::GroupRecord::generation`]) at this node's first check
    /// of the group record: a later check that finds another stops the node.
    pub(super) generation: Option<u64>,
    /// The node's series, when the application asked for metrics.
    pub(crate) metrics: Option<Arc<NodeMetrics>>,
    /// Leases being handed back to the node that held them before this one: their released
    /// records name it (see [`crate::planner::Plan::return_to`]).
    pub(super) returning: BTreeMap<PartitionId, crate::types::NodeId>,
    /// When this node moved partitions to balance load, within the last churn window.
    pub(super) load_moves: std::collections::VecDeque<Instant>,
    /// Members counted live at the last decision, this node included.
    pub(super) live_members: usize,
    /// The stamps of this process's member writes that may have landed: the last one the
    /// store acknowledged and those sent since (see [`Runner::write_member`]).
    pub(super) member_stamps: Vec<u64>,
    /// With session leases, when this node read a session last written by another process
    /// under its name, before writing it over.
    pub(super) session_read_at: Option<Instant>,
    /// With session leases, when each held lease's record was last written with its load.
    pub(super) load_published: BTreeMap<PartitionId, Instant>,
    /// Renewals of held leases whose outcome stayed unknown (see [`super::late`]).
    pub(super) late_renewals: BTreeMap<PartitionId, Vec<LateRenewal>>,
    /// With session leases, how many times this node has re-read its session after a failed
    /// renewal.
    pub(super) session_rereads: u64,
    /// With session leases, the identity of the current session ([`MemberRecord::session`]),
    /// drawn anew whenever a session ends.
    ///
    /// [`MemberRecord::session`]: crate::MemberRecord::session
    pub(super) session_id: u64,
    /// Where session identities come from when a run must replay exactly
    /// ([`crate::Environment::session_seed`]); the operating system's randomness otherwise.
    pub(super) session_rng: Option<SeededRng>,
    /// With session leases, the stamp of the last write of the session this one began by
    /// writing over ([`MemberRecord::replaced`]).
    ///
    /// [`MemberRecord::replaced`]: crate::MemberRecord::replaced
    pub(super) replaced: Option<u64>,
    /// The partitions this node handed off while staying, with the version of the released
    /// record it wrote and how many times in a row it came back unclaimed before: taking one
    /// back at that version, nobody having taken it meanwhile, sets the tenure's
    /// [`Holding::keep_until`]. At most one entry per partition.
    ///
    /// [`Holding::keep_until`]: crate::planner::Holding::keep_until
    pub(super) released: BTreeMap<PartitionId, (Version, u32)>,
    /// Of the leases held, those taken back unclaimed, with how many times in a row.
    pub(super) bounces: BTreeMap<PartitionId, u32>,
}

impl Runner {
    /// A runner on `environment`'s clock and seeds (its metrics are set apart).
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        environment: super::Environment,
        callbacks: Arc<dyn Callbacks>,
        shared: Arc<Shared>,
        commands: mpsc::Receiver<Command>,
    ) -> Runner {
        let clock = environment.clock;
        let now = clock.now();
        let mut runner = Runner {
            store,
            config,
            clock,
            rng: SeededRng::new(environment.seed),
            callbacks,
            shared,
            commands,
            holdings: BTreeMap::new(),
            handoffs: BTreeMap::new(),
            beating: false,
            member_call: false,
            member_syncs: 0,
            stopping: None,
            restarting: false,
            observed: Observed::default(),
            member_version: None,
            heartbeats: 0,
            draining: false,
            feed: None,
            next_heartbeat: now,
            schedule: ScanSchedule::new(now),
            wake_at: None,
            reported_corrupt: BTreeSet::new(),
            last_stamp: 0,
            halted: None,
            member_stamp: None,
            recheck_group: false,
            generation: None,
            metrics: None,
            returning: BTreeMap::new(),
            load_moves: std::collections::VecDeque::new(),
            live_members: 1,
            member_stamps: Vec::new(),
            session_read_at: None,
            load_published: BTreeMap::new(),
            late_renewals: BTreeMap::new(),
            session_rereads: 0,
            session_id: 0,
            session_rng: environment.session_seed.map(SeededRng::new),
            replaced: None,
            released: BTreeMap::new(),
            bounces: BTreeMap::new(),
        };
        runner.session_id = runner.draw_session_id();
        runner
    }

    /// How many more partitions this node may move to balance load before its churn budget
    /// for the window ending `now` runs out: its even part of the fleet's budget (the
    /// budget's fraction of the table, over the members counted live), at least one.
    pub(super) fn load_moves_left(&mut self, now: Instant) -> u32 {
        while self
            .load_moves
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= self.config.churn_window)
        {
            self.load_moves.pop_front();
        }
        let fleet = f64::from(self.config.partitions) * self.config.churn_budget;
        let allowed = ((fleet / self.live_members.max(1) as f64) as u32).max(1);
        allowed.saturating_sub(self.load_moves.len() as u32)
    }

    /// A new session identity: nonzero and within a signed 64-bit integer, so that every
    /// store and every tool shows it as written. Apart from the jitter's generator, so that
    /// a seed replays the same timings whatever the mode.
    pub(super) fn draw_session_id(&mut self) -> u64 {
        let bits = match &mut self.session_rng {
            Some(rng) => rng.next_u64(),
            None => getrandom::u64().unwrap_or_else(|error| {
                tracing::warn!(%error, "no randomness from the operating system; session identity drawn from the time and process id");
                SeededRng::from_entropy().next_u64()
            }),
        };
        session_identity(bits)
    }

    /// Whether the group renews leases by session ([`crate::LeaseMode::Session`]).
    pub(super) fn session_mode(&self) -> bool {
        self.observed.lease_mode == crate::group::LeaseMode::Session
    }

    pub(crate) async fn run(mut self) {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        match store.watch(&group).await {
            Ok(feed) => self.feed = Some(feed),
            Err(StoreError::NotSupported(_)) => {}
            Err(error) => tracing::warn!(%error, "change notifications unavailable; polling"),
        }
        if !self.join().await {
            return;
        }
        let progress = Arc::clone(&self.shared.progress);
        loop {
            let expire = self.sleep_until(self.earliest_deadline());
            let next_tick = [
                Some(self.next_heartbeat),
                // A node on its way out neither scans nor takes anything.
                (!self.winding_down()).then_some(self.schedule.next_scan()),
                self.wake_at.filter(|_| !self.winding_down()),
                self.drain_deadline(),
            ]
            .into_iter()
            .flatten()
            .min();
            let tick = self.sleep_until(next_tick);
            let event = tokio::select! {
                biased;
                command = self.commands.recv(), if !self.winding_down() => Event::Command(command),
                _ = expire => Event::Expire,
                _ = progress.notified() => Event::Progress,
                change = next_change(&mut self.feed) => Event::Change(change),
                _ = tick => Event::Tick,
            };
            match event {
                // Every handle is gone: stop without I/O; held leases expire on schedule.
                Event::Command(None) => return,
                Event::Command(Some(Command::Shutdown { done, restart })) => {
                    self.stopping = Some(done);
                    self.restarting = restart;
                    // The member record goes first, so that whoever sees the releases also
                    // sees this node gone and counts its partitions in its own share:
                    // the releases are then taken at once, not after another scan. With
                    // session leases it is the session renewing what is being handed off,
                    // so it stays, weighing nothing, until the hand-offs are done.
                    if self.session_mode() {
                        self.write_member().await;
                    } else {
                        self.remove_member().await;
                    }
                    let all: Vec<PartitionId> = self.holdings.keys().copied().collect();
                    // In a group balanced by load, each to a member with room for it;
                    // restarting in place, to this node's name.
                    if !restart {
                        let now = self.clock.now();
                        self.returning.extend(crate::planner::directions(
                            now,
                            &self.config,
                            &self.observed,
                            &self.holdings,
                            &all,
                        ));
                    }
                    self.release(all).await;
                }
                Event::Expire => self.expire_due(),
                Event::Progress => {
                    if self.adopt_excluded() && self.stopping.is_none() {
                        self.act().await;
                    }
                    self.advance_handoffs().await;
                }
                Event::Change(Some(change)) => {
                    let now = self.clock.now();
                    self.schedule.change_noticed(now, &change, &self.config);
                }
                Event::Change(None) => self.feed = None,
                Event::Tick => self.tick().await,
            }
            self.record_holdings();
            if let Some(Halt::Refused(_)) = &self.halted {
                // Held leases end with the task (see `Drop`); they are not released: the
                // group no longer vouches for this node's timings. The member record this
                // node just registered goes, so it shows no node that is gone.
                self.remove_member().await;
                if let Some(halt) = self.halted.take() {
                    self.publish_halt(halt);
                }
                return;
            }
            if self.halted.is_some() {
                self.hand_everything_off().await;
            }
            if self.winding_down() && self.holdings.is_empty() {
                if self.session_mode() {
                    self.clear_lost().await;
                }
                // Nothing to remove once replaced: the record is the successor's.
                self.remove_member().await;
                if let Some(halt) = self.halted.take() {
                    self.publish_halt(halt);
                }
                if let Some(done) = self.stopping.take() {
                    let _ = done.send(());
                }
                return;
            }
        }
    }

    /// Whether this node is on its way out, shut down or stopping by itself: it scans,
    /// takes and accepts nothing more, and hands off what it holds.
    pub(super) fn winding_down(&self) -> bool {
        self.stopping.is_some() || self.halted.is_some()
    }

    /// Once another process took this node's name over: hands off every lease not yet on
    /// its way out, as a shutdown does. Its session renews nothing any more, so each lease
    /// is written released as soon as the work under it ends, or runs out at its deadline,
    /// whichever comes first; either way the others take it without waiting
    /// `acquire_after` (see [`Runner::clear_lost`]).
    async fn hand_everything_off(&mut self) {
        let pending: Vec<PartitionId> = self
            .holdings
            .iter()
            .filter(|(_, holding)| !holding.handing_off)
            .map(|(partition, _)| *partition)
            .collect();
        if !pending.is_empty() {
            self.release(pending).await;
        }
    }

    /// Tells the handles why the task is about to end by itself.
    pub(super) fn publish_halt(&self, halt: Halt) {
        if let Halt::Refused(mismatch) = &halt {
            self.shared.joined.send_replace(Some(Err(mismatch.clone())));
        }
        *self.shared.halt.lock().unwrap_or_else(|e| e.into_inner()) = Some(halt);
    }

    /// The soonest instant at which a lease being handed off stops waiting for its permits.
    fn drain_deadline(&self) -> Option<Instant> {
        self.handoffs
            .values()
            .filter_map(|handoff| match handoff {
                Handoff::Draining { until } => Some(*until),
                Handoff::Abandoned => None,
            })
            .min()
    }

    /// The wall-clock stamp for a write: the time in milliseconds, but strictly increasing,
    /// so no two writes of this node ever carry equal records. [`Runner::settle`] depends on
    /// that: two renewals sent within one millisecond (or one delayed behind another) would
    /// otherwise be indistinguishable on read-back.
    pub(super) fn write_stamp(&mut self) -> Option<u64> {
        self.last_stamp = self.clock.unix_ms().max(self.last_stamp + 1);
        Some(self.last_stamp)
    }

    fn sleep_until(&self, deadline: Option<Instant>) -> crate::clock::Sleep {
        match deadline {
            Some(deadline) => self.clock.sleep_until(deadline),
            None => Box::pin(std::future::pending()),
        }
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.holdings.values().map(|h| h.valid_until).min()
    }

    /// Awaits a store call while still dropping leases at their deadlines, so a hung store
    /// can delay the loop but never the end of a lease.
    ///
    /// Renewals keep their schedule meanwhile: when the heartbeat comes due while a scan,
    /// an acquisition or a release waits on the store, the renewal goes out then, not after.
    /// A slow listing can delay finding new partitions, never keeping the ones held.
    pub(super) async fn call<T>(&mut self, call: impl Future<Output = T>) -> T {
        tokio::pin!(call);
        loop {
            let expire = self.sleep_until(self.earliest_deadline());
            let beat = self.sleep_until((!self.beating).then_some(self.next_heartbeat));
            // Biased, deadline first: when a reply and a deadline arrive together, the lease
            // ends before the reply is read (a late renewal never revives it), and the order
            // does not depend on Tokio's random branch choice, so simulations replay exactly.
            tokio::select! {
                biased;
                _ = expire => self.expire_due(),
                output = &mut call => return output,
                _ = beat => self.beat().await,
            }
        }
    }

    /// Writes a batch of lease records through [`Runner::call`], one result per write.
    pub(super) async fn put_leases(
        &mut self,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let batch = writes.to_vec();
        self.call(async move { store.put_leases(&group, &batch).await })
            .await
    }

    /// Renews every held lease and rewrites the member record. Boxed: it makes store calls
    /// itself, and [`Runner::call`] runs it while waiting on another.
    fn beat(&mut self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.beating = true;
            let now = self.clock.now();
            self.next_heartbeat = now + self.rng.shorten(self.config.heartbeat, self.config.jitter);
            self.renew().await;
            // A node on its way out has removed its member record and must not write it
            // back: the others already count its partitions as theirs to take.
            if (self.stopping.is_none() || self.session_mode())
                && self.halted.is_none()
                && !self.member_call
            {
                self.write_member().await;
            }
            self.beating = false;
        })
    }

    async fn tick(&mut self) {
        if self.clock.now() >= self.next_heartbeat {
            self.beat().await;
        }
        if !self.handoffs.is_empty() {
            self.advance_handoffs().await;
        }
        if self.winding_down() {
            // A node on its way out takes nothing new.
            return;
        }
        let now = self.clock.now();
        if self.schedule.is_due(now) {
            self.scan().await;
        } else if self.wake_at.is_some_and(|wake| wake <= now) {
            self.wake_at = None;
            self.act().await;
        }
    }

    /// Adopts the exclusion list [`Participant::set_excluded`] left since the task last
    /// looked, if any; returns whether there was one. Looked at between store calls as well
    /// as when woken, so that a take whose reply comes after the list changed is never
    /// served.
    ///
    /// [`Participant::set_excluded`]: super::Participant::set_excluded
    pub(super) fn adopt_excluded(&mut self) -> bool {
        match self.shared.take_excluded() {
            Some(excluded) => {
                self.config.excluded = excluded;
                true
            }
            None => false,
        }
    }

    /// Sets the gauges of what the node holds, when it has metrics.
    fn record_holdings(&self) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        set_count(&metrics.held, self.holdings.len());
        set_count(&metrics.handing_off, self.handoffs.len());
        metrics.draining.set(i64::from(self.draining));
        let left = match self.earliest_deadline() {
            Some(deadline) => deadline
                .saturating_duration_since(self.clock.now())
                .as_secs_f64(),
            None => f64::INFINITY,
        };
        metrics.deadline.set(left);
    }

    /// Records something in the node's series, when it has metrics.
    pub(super) fn record(&self, what: impl FnOnce(&NodeMetrics)) {
        if let Some(metrics) = &self.metrics {
            what(metrics);
        }
    }

    pub(super) fn expire_due(&mut self) {
        let now = self.clock.now();
        let due: Vec<(PartitionId, Instant)> = self
            .holdings
            .iter()
            .filter(|(_, h)| h.valid_until <= now)
            .map(|(p, h)| (*p, h.valid_until))
            .collect();
        for (partition, deadline) in due {
            self.lose(partition, LossReason::Expired, deadline);
        }
    }

    pub(super) fn lose(&mut self, partition: PartitionId, reason: LossReason, at: Instant) {
        let Some(holding) = self.holdings.remove(&partition) else {
            return;
        };
        self.handoffs.remove(&partition);
        self.returning.remove(&partition);
        self.load_published.remove(&partition);
        self.late_renewals.remove(&partition);
        if self.session_mode() {
            self.observed.lost.insert(
                partition,
                (
                    holding.epoch,
                    crate::planner::session_tag(holding.record.session),
                    holding.valid_until,
                ),
            );
        }
        self.schedule.holdings_changed();
        let negative_control =
            reason == LossReason::Released && self.config.controls.release_ignores_permits;
        if let Some(tenure) = self.shared.remove(partition) {
            // Every guard and permit of it turns invalid now. The negative control leaves
            // the permits valid to the deadline, as if the release had not waited for them.
            if !negative_control {
                tenure.end();
            }
        }
        tracing::info!(node = %self.config.node, %partition, epoch = %holding.epoch, reason = reason.as_str(), "lease lost");
        self.record(|metrics| metrics.lost(reason));
        let loss = Loss {
            partition,
            epoch: holding.epoch,
            reason,
            at,
        };
        self.contain("on_lost", |callbacks| callbacks.on_lost(&loss));
        self.shared.announce(|| LeaseEvent::Lost(loss));
    }

    /// Runs an application callback, containing a panic in it: the lease loop must outlive a
    /// bug in the application's code, or every lease of the node would end unannounced.
    pub(super) fn contain<T>(
        &self,
        what: &'static str,
        call: impl FnOnce(&dyn Callbacks) -> T,
    ) -> Option<T> {
        let callbacks = &*self.callbacks;
        // Real time, not the node's clock: a callback holds up the loop for as long as the
        // CPU spends in it, whatever the clock says.
        // Timed only for the metrics: `load` runs for every lease at every renewal.
        let started = self.metrics.is_some().then(std::time::Instant::now);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(callbacks)));
        if started.is_some_and(|at| at.elapsed() > self.config.heartbeat / SLOW_CALLBACK_DIVISOR) {
            self.record(|metrics| metrics.callback_slow(what));
        }
        match outcome {
            Ok(value) => Some(value),
            Err(_) => {
                tracing::error!(node = %self.config.node, callback = what, "a callback panicked; the lease loop carries on");
                self.shared
                    .update_status(|status| status.callback_panics += 1);
                self.record(|metrics| metrics.callback_panicked(what));
                None
            }
        }
    }
}

async fn next_change(feed: &mut Option<ChangeFeed>) -> Option<Change> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

/// However the task ends — shut down, every handle dropped, or a failure unwinding through
/// it — its leases end with it: their guards and permits turn invalid and the application
/// hears of each, unless the task was aborted as a crash is simulated.
impl Drop for Runner {
    fn drop(&mut self) {
        if !self
            .shared
            .aborted
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let now = self.clock.now();
            for partition in self.holdings.keys().copied().collect::<Vec<_>>() {
                self.lose(partition, LossReason::Stopped, now);
            }
        }
        self.shared.stopped.send_replace(true);
    }
}

/// A session identity from 64 random bits: the sign bit cleared, so that stores with signed
/// 64-bit integers (PostgreSQL's `bigint`, SQLite's `INTEGER`) and every tool show it as
/// written, and never zero.
fn session_identity(bits: u64) -> u64 {
    (bits & i64::MAX as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::session_identity;

    #[test]
    fn session_identities_are_positive_signed_64_bit_integers() {
        assert_eq!(session_identity(u64::MAX), i64::MAX as u64);
        assert_eq!(session_identity(1 << 63), 1);
        assert_eq!(session_identity(0), 1);
        assert_eq!(session_identity(12_345), 12_345);
        assert_eq!(session_identity((1 << 63) | 7), 7);
    }
}
