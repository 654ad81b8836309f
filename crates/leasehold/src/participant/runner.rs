//! The participant's background task: executes plans against the store.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::clock::{Clock, SeededRng};
use crate::config::ParticipantConfig;
use crate::error::StoreError;
use crate::planner::{
    self, Acquisition, Holding, Observed, PlanInput, Reading, ScanSchedule, Takes,
};
use crate::record::{unix_ms_now, LeaseState, MemberRecord};
use crate::store::{Change, ChangeFeed, LeaseStore, LeaseWrite, PutMode};
use crate::types::{NodeId, PartitionId, Version};

use super::guard::{Callbacks, Loss, LossReason, Phase, Tenure};
use super::Shared;

/// Requests from handles to the task. Releases are not among them: a handle marks the
/// lease itself (see [`Shared::hand_off`]) and wakes the task.
#[derive(Debug)]
pub(crate) enum Command {
    Shutdown(oneshot::Sender<()>),
}

/// A lease being given up, waiting for the work in flight under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    /// Renewed while permits are held, until this instant at the latest.
    Draining { until: Instant },
    /// Permits outlived the drain timeout: no longer renewed, left to expire unreleased.
    Abandoned,
}

/// Stale member records deleted per scan at most, so that clearing a backlog never delays
/// the scan's own work by much.
const MAX_FORGOTTEN_PER_SCAN: usize = 16;

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
    holdings: BTreeMap<PartitionId, Holding>,
    /// The holdings being handed off (each marked [`Holding::handing_off`]).
    handoffs: BTreeMap<PartitionId, Handoff>,
    /// A heartbeat (renewals and the member record) is under way: the calls it makes must
    /// not start another.
    beating: bool,
    /// Set once a shutdown was asked for: the task hands every lease off, takes nothing new,
    /// and answers here when the last one is gone.
    stopping: Option<oneshot::Sender<()>>,
    observed: Observed,
    member_version: Option<Version>,
    heartbeats: u64,
    draining: bool,
    feed: Option<ChangeFeed>,
    next_heartbeat: Instant,
    /// When to scan and what to read: decided apart, as the plans are.
    schedule: ScanSchedule,
    wake_at: Option<Instant>,
    reported_corrupt: BTreeSet<String>,
    last_stamp: u64,
}

impl Runner {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        config: ParticipantConfig,
        clock: Arc<dyn Clock>,
        rng: SeededRng,
        callbacks: Arc<dyn Callbacks>,
        shared: Arc<Shared>,
        commands: mpsc::Receiver<Command>,
    ) -> Runner {
        let now = clock.now();
        Runner {
            store,
            config,
            clock,
            rng,
            callbacks,
            shared,
            commands,
            holdings: BTreeMap::new(),
            handoffs: BTreeMap::new(),
            beating: false,
            stopping: None,
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
        }
    }

    pub(crate) async fn run(mut self) {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        match store.watch(&group).await {
            Ok(feed) => self.feed = Some(feed),
            Err(StoreError::NotSupported(_)) => {}
            Err(error) => tracing::warn!(%error, "change notifications unavailable; polling"),
        }
        let progress = Arc::clone(&self.shared.progress);
        loop {
            let expire = self.sleep_until(self.earliest_deadline());
            let next_tick = [
                Some(self.next_heartbeat),
                // A node on its way out neither scans nor takes anything.
                self.stopping.is_none().then_some(self.schedule.next_scan()),
                self.wake_at.filter(|_| self.stopping.is_none()),
                self.drain_deadline(),
            ]
            .into_iter()
            .flatten()
            .min();
            let tick = self.sleep_until(next_tick);
            let event = tokio::select! {
                biased;
                command = self.commands.recv(), if self.stopping.is_none() => Event::Command(command),
                _ = expire => Event::Expire,
                _ = progress.notified() => Event::Progress,
                change = next_change(&mut self.feed) => Event::Change(change),
                _ = tick => Event::Tick,
            };
            match event {
                // Every handle is gone: stop without I/O; held leases expire on schedule.
                Event::Command(None) => return,
                Event::Command(Some(Command::Shutdown(done))) => {
                    self.stopping = Some(done);
                    let all: Vec<PartitionId> = self.holdings.keys().copied().collect();
                    self.release(all).await;
                }
                Event::Expire => self.expire_due(),
                Event::Progress => self.advance_handoffs().await,
                Event::Change(Some(change)) => {
                    let now = self.clock.now();
                    self.schedule.change_noticed(now, &change, &self.config);
                }
                Event::Change(None) => self.feed = None,
                Event::Tick => self.tick().await,
            }
            if self.stopping.is_some() && self.holdings.is_empty() {
                self.remove_member().await;
                if let Some(done) = self.stopping.take() {
                    let _ = done.send(());
                }
                return;
            }
        }
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
    fn write_stamp(&mut self) -> Option<u64> {
        self.last_stamp = unix_ms_now().max(self.last_stamp + 1);
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
    async fn call<T>(&mut self, call: impl Future<Output = T>) -> T {
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

    /// Renews every held lease and rewrites the member record. Boxed: it makes store calls
    /// itself, and [`Runner::call`] runs it while waiting on another.
    fn beat(&mut self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            self.beating = true;
            let now = self.clock.now();
            self.next_heartbeat = now + self.rng.shorten(self.config.heartbeat, self.config.jitter);
            self.renew().await;
            self.write_member().await;
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
        if self.stopping.is_some() {
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

    fn expire_due(&mut self) {
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

    fn lose(&mut self, partition: PartitionId, reason: LossReason, at: Instant) {
        let Some(holding) = self.holdings.remove(&partition) else {
            return;
        };
        self.handoffs.remove(&partition);
        self.schedule.holdings_changed();
        let negative_control =
            reason == LossReason::Released && self.config.unsafe_release_ignores_permits;
        if let Some(tenure) = self.shared.remove(partition) {
            // Every guard and permit of it turns invalid now. The negative control leaves
            // the permits valid to the deadline, as if the release had not waited for them.
            if !negative_control {
                tenure.end();
            }
        }
        tracing::info!(node = %self.config.node, %partition, epoch = %holding.epoch, reason = reason.as_str(), "lease lost");
        let loss = Loss {
            partition,
            epoch: holding.epoch,
            reason,
            at,
        };
        self.contain("on_lost", |callbacks| callbacks.on_lost(&loss));
    }

    /// Runs an application callback, containing a panic in it: the lease loop must outlive a
    /// bug in the application's code, or every lease of the node would end unannounced.
    fn contain<T>(&self, what: &'static str, call: impl FnOnce(&dyn Callbacks) -> T) -> Option<T> {
        let callbacks = &*self.callbacks;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(callbacks))) {
            Ok(value) => Some(value),
            Err(_) => {
                tracing::error!(node = %self.config.node, callback = what, "a callback panicked; the lease loop carries on");
                self.shared
                    .update_status(|status| status.callback_panics += 1);
                None
            }
        }
    }

    async fn renew(&mut self) {
        self.expire_due();
        if self.holdings.is_empty() {
            return;
        }
        let written_at = self.write_stamp();
        let handoffs = &self.handoffs;
        let writes: Vec<LeaseWrite> = self
            .holdings
            .iter()
            .filter(|(partition, _)| handoffs.get(partition) != Some(&Handoff::Abandoned))
            .map(|(partition, holding)| {
                let mut record = holding.record.clone();
                record.written_at_unix_ms = written_at;
                record.load = self
                    .contain("load", |callbacks| callbacks.load(*partition))
                    .flatten();
                LeaseWrite {
                    partition: *partition,
                    record,
                    mode: PutMode::Update(holding.version.clone()),
                }
            })
            .collect();
        if writes.is_empty() {
            return;
        }
        // Validity counts from before the request leaves: the write can only land later.
        let sent_at = self.clock.now();
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let batch = writes.clone();
        let results = self
            .call(async move { store.put_leases(&group, &batch).await })
            .await;
        let results = self.settle("renewal", writes, results).await;
        let valid_until = sent_at + self.config.lease_validity;
        for (write, result) in results {
            match result {
                Ok(version) => {
                    if let Some(holding) = self.holdings.get_mut(&write.partition) {
                        holding.version = version;
                        holding.record = write.record;
                        holding.valid_until = valid_until;
                        self.shared.extend(write.partition, valid_until);
                    }
                }
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {
                    let now = self.clock.now();
                    self.lose(write.partition, LossReason::Conflict, now);
                }
                // Outcome still unknown: the lease stands until its deadline, and the next
                // renewal will tell.
                Err(_) => {}
            }
        }
        self.expire_due();
    }

    /// Pairs each write with its result, and resolves writes whose outcome is unknown
    /// (time-out, lost connection) by reading the records back once: a record equal to what
    /// we sent is our write, landed. Any other writer changes the owner, epoch or note, and
    /// every write of ours carries its own stamp ([`Runner::write_stamp`]), so equality
    /// cannot be a coincidence.
    async fn settle(
        &mut self,
        what: &'static str,
        writes: Vec<LeaseWrite>,
        results: Result<Vec<Result<Version, StoreError>>, StoreError>,
    ) -> Vec<(LeaseWrite, Result<Version, StoreError>)> {
        let results: Vec<Result<Version, StoreError>> = match results {
            Ok(results) => results,
            Err(error) => writes.iter().map(|_| Err(error.summarize())).collect(),
        };
        let mut settled: Vec<(LeaseWrite, Result<Version, StoreError>)> =
            writes.into_iter().zip(results).collect();
        let unknown = settled
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(StoreError::is_transient))
            .count();
        if unknown == 0 {
            return settled;
        }
        tracing::warn!(node = %self.config.node, unknown, "{what} outcome unknown; reading back");
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let Ok(listing) = self
            .call(async move { store.list_leases(&group).await })
            .await
        else {
            return settled;
        };
        let current: BTreeMap<PartitionId, crate::record::StoredLease> =
            listing.records.into_iter().map(|r| (r.key, r)).collect();
        for (write, result) in &mut settled {
            if !result.as_ref().is_err_and(StoreError::is_transient) {
                continue;
            }
            if let Some(stored) = current.get(&write.partition) {
                if stored.value == write.record {
                    *result = Ok(stored.version.clone());
                }
            }
        }
        settled
    }

    async fn write_member(&mut self) {
        // Two attempts: the second after adopting what an operator changed (drain/undrain).
        for _ in 0..2 {
            self.heartbeats += 1;
            let record = MemberRecord {
                weight: self.config.weight,
                draining: self.draining,
                load: None,
                heartbeat: self.heartbeats,
                written_at_unix_ms: self.write_stamp(),
            };
            let mode = match &self.member_version {
                Some(version) => PutMode::Update(version.clone()),
                None => PutMode::Create,
            };
            let (store, group, node) = (
                Arc::clone(&self.store),
                self.config.group.clone(),
                self.config.node.clone(),
            );
            let result = self
                .call(async move { store.put_member(&group, &node, &record, mode).await })
                .await;
            match result {
                Ok(version) => {
                    self.member_version = Some(version);
                    let now = self.clock.now();
                    self.schedule.member_written(now);
                    return;
                }
                // Deleted while this node was away (see `forget_dead_members`, which never
                // deletes a draining record): the last instruction it carried was "not
                // draining", whatever this node last adopted. Register again accordingly.
                Err(StoreError::NotFound { .. }) => {
                    self.member_version = None;
                    self.set_draining(false);
                }
                Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => {
                    self.adopt_member_record().await
                }
                Err(error) => {
                    tracing::warn!(node = %self.config.node, %error, "member heartbeat failed");
                    self.schedule.member_write_failed();
                    return;
                }
            }
        }
    }

    async fn adopt_member_record(&mut self) {
        let (store, group, node) = (
            Arc::clone(&self.store),
            self.config.group.clone(),
            self.config.node.clone(),
        );
        match self
            .call(async move { store.get_member(&group, &node).await })
            .await
        {
            Ok(Some(stored)) => {
                self.set_draining(stored.value.draining);
                self.member_version = Some(stored.version);
            }
            Ok(None) => self.member_version = None,
            Err(error) => {
                tracing::warn!(node = %self.config.node, %error, "reading own member record failed")
            }
        }
    }

    fn set_draining(&mut self, draining: bool) {
        if draining != self.draining {
            tracing::info!(node = %self.config.node, draining, "drain state changed by an operator");
            self.draining = draining;
            self.shared
                .update_status(|status| status.draining = draining);
        }
    }

    /// Reads the member records, and the lease table when the schedule says it may hold
    /// something to act on (see [`ScanSchedule::reading`]), then plans on what it read.
    async fn scan(&mut self) {
        self.schedule.scan_started(self.clock.now());
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let members = match self
            .call(async move { store.list_members(&group).await })
            .await
        {
            Ok(members) => members,
            Err(error) => return self.scan_failed(error),
        };
        // Observations are stamped when the reply arrived, after every write they reflect.
        let now = self.clock.now();
        self.report_corrupt(&members.corrupt);
        self.observed.observe_members(now, members.records);
        if let Some(own) = self.observed.members.get(&self.config.node) {
            let draining = own.draining;
            self.set_draining(draining);
        }
        let members_at = now;
        let reading = self
            .schedule
            .reading(now, &self.observed, &self.config, self.draining);
        let list_leases = reading == Reading::Leases;
        if list_leases {
            let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
            let leases = match self
                .call(async move { store.list_leases(&group).await })
                .await
            {
                Ok(leases) => leases,
                Err(error) => {
                    self.schedule.want_leases();
                    return self.scan_failed(error);
                }
            };
            let now = self.clock.now();
            self.report_corrupt(&leases.corrupt);
            self.observed.observe_leases(now, leases.records);
            self.schedule.leases_listed(
                now,
                members_at,
                &self.observed,
                &self.config,
                self.draining,
                &mut self.rng,
            );
        }
        let now = self.clock.now();
        self.schedule
            .scan_succeeded(now, &self.config, &mut self.rng);
        self.shared.update_status(|status| {
            status.scans += 1;
            status.lease_listings += u64::from(list_leases);
            status.last_scan_error = None;
        });
        // Plans are made on a fresh table, or on a recent one while taking a share batch by
        // batch: a settled node that skipped the listing has nothing to do, and an old view
        // would only send compare-and-sets bound to fail.
        if reading.plans() {
            self.act().await;
        }
        self.forget_dead_members().await;
    }

    fn scan_failed(&mut self, error: StoreError) {
        let now = self.clock.now();
        let backoff = self.schedule.scan_failed(now, &self.config, &mut self.rng);
        tracing::warn!(node = %self.config.node, %error, ?backoff, "scan failed; backing off");
        let message = error.to_string();
        self.shared
            .update_status(|status| status.last_scan_error = Some(message));
    }

    fn report_corrupt(&mut self, errors: &[StoreError]) {
        for error in errors {
            if self.reported_corrupt.insert(error.to_string()) {
                tracing::warn!(node = %self.config.node, %error, "skipping a record that cannot be read");
            }
        }
    }

    /// Deletes member records that have not changed for `forget_members_after`. One node
    /// does it, the live member with the smallest name in this node's view, so a fleet does
    /// not race to delete the same records; the delete is conditional on the version seen, so
    /// a node that came back meanwhile keeps its record. A record marked draining is kept:
    /// the drain is an operator's instruction for when that node returns.
    async fn forget_dead_members(&mut self) {
        let now = self.clock.now();
        let timeout = self.config.member_timeout();
        let me = &self.config.node;
        // Members are ordered by name: the first live one decides.
        let smallest_live = self
            .observed
            .members
            .iter()
            .find(|seen| seen.node == *me || now < seen.first_seen + timeout);
        if smallest_live.is_some_and(|seen| seen.node != *me) {
            return;
        }
        let forget_after = self.config.forget_members_after;
        let dead: Vec<(NodeId, Version)> = self
            .observed
            .members
            .others(me)
            .filter(|seen| !seen.draining && seen.first_seen + forget_after <= now)
            .take(MAX_FORGOTTEN_PER_SCAN)
            .map(|seen| (seen.node.clone(), seen.version.clone()))
            .collect();
        for (node, version) in dead {
            let (store, group, gone) = (
                Arc::clone(&self.store),
                self.config.group.clone(),
                node.clone(),
            );
            let result = self
                .call(async move { store.delete_member(&group, &gone, &version).await })
                .await;
            match result {
                Ok(()) => {
                    tracing::info!(node = %self.config.node, member = %node, "forgot a member silent for forget_members_after");
                    self.observed.members.remove(&node);
                }
                // It came back, or another node removed it first.
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                Err(error) => {
                    tracing::warn!(node = %self.config.node, %error, "could not delete a stale member record");
                    return;
                }
            }
        }
    }

    async fn act(&mut self) {
        let now = self.clock.now();
        let plan = planner::plan(
            &PlanInput {
                now,
                config: &self.config,
                observed: &self.observed,
                holdings: &self.holdings,
                draining: self.draining,
            },
            &mut self.rng,
        );
        self.shared.update_status(|status| {
            status.target = plan.target;
            status.live_members = plan.live_members;
        });
        self.schedule
            .planned(plan.settled() && self.handoffs.is_empty());
        self.wake_at = plan.wake_at;
        for partition in plan.drop {
            let deadline = self.holdings[&partition].valid_until;
            self.lose(partition, LossReason::Expired, deadline);
        }
        let released = !plan.release.is_empty();
        if released {
            self.release(plan.release).await;
        }
        if !plan.acquire.is_empty() {
            let planned = plan.acquire.len();
            let taken = self.acquire(plan.acquire).await;
            let takes = Takes {
                planned,
                taken,
                off_stripe: plan.off_stripe,
                released,
                held: self.holdings.len(),
                target: plan.target,
            };
            self.schedule.took(&takes, &self.config);
        }
    }

    /// Takes the partitions, returning how many it now holds of them.
    async fn acquire(&mut self, acquisitions: Vec<Acquisition>) -> usize {
        let written_at = self.write_stamp();
        let writes: Vec<LeaseWrite> = acquisitions
            .into_iter()
            .map(|a| {
                let mut record = a.record;
                record.written_at_unix_ms = written_at;
                LeaseWrite {
                    partition: a.partition,
                    record,
                    mode: PutMode::Update(a.expected),
                }
            })
            .collect();
        let sent_at = self.clock.now();
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let batch = writes.clone();
        let results = self
            .call(async move { store.put_leases(&group, &batch).await })
            .await;
        let valid_until = sent_at + self.config.lease_validity;
        let mut taken = 0;
        for (write, result) in self.settle("acquisition", writes, results).await {
            let Ok(version) = result else {
                // Someone else wrote the row, or the write's fate stays unknown: the view of
                // it is out of date, and the row waits a full acquire_after from its next
                // sighting, which the next scan makes.
                self.observed.leases.forget(write.partition);
                self.schedule.want_leases();
                continue;
            };
            // The row is now exactly what this node wrote.
            self.observed.leases.insert(
                write.partition,
                &write.record,
                version.clone(),
                self.clock.now(),
            );
            if self.clock.now() >= valid_until {
                // The reply came too late to serve at all; the lease runs out unused.
                continue;
            }
            let epoch = write.record.epoch;
            self.holdings.insert(
                write.partition,
                Holding {
                    epoch,
                    version,
                    record: write.record,
                    valid_until,
                    acquired_at: sent_at,
                    handing_off: false,
                },
            );
            let tenure = Tenure::new(
                write.partition,
                epoch,
                valid_until,
                Arc::clone(&self.clock),
                Arc::clone(&self.shared.progress),
            );
            self.shared.insert(Arc::clone(&tenure));
            tracing::info!(node = %self.config.node, partition = %write.partition, %epoch, "lease acquired");
            self.contain("on_acquired", |callbacks| {
                callbacks.on_acquired(&tenure.snapshot())
            });
            taken += 1;
        }
        taken
    }

    /// Starts handing leases off: no new work on them from now on, and each is written
    /// released once the work in flight under it has ended (see [`Runner::advance_handoffs`]).
    async fn release(&mut self, partitions: Vec<PartitionId>) {
        for partition in partitions {
            self.shared.hand_off(partition);
        }
        self.advance_handoffs().await;
    }

    /// Moves every hand-off on: starts those that handles or plans asked for, writes
    /// released those whose permits are all dropped, and stops renewing those whose permits
    /// outlived the drain timeout, leaving them to expire.
    async fn advance_handoffs(&mut self) {
        let now = self.clock.now();
        let mut ready = Vec::new();
        let partitions: Vec<PartitionId> = self.holdings.keys().copied().collect();
        for partition in partitions {
            let Some(tenure) = self.shared.tenure(partition) else {
                continue;
            };
            if tenure.phase() != Phase::HandingOff {
                continue;
            }
            let handoff = *self
                .handoffs
                .entry(partition)
                .or_insert_with(|| Handoff::Draining {
                    until: now + self.config.drain_timeout,
                });
            let holding = self.holdings.get_mut(&partition).expect("listed above");
            if !holding.handing_off {
                holding.handing_off = true;
                self.schedule.holdings_changed();
                tracing::info!(node = %self.config.node, %partition, epoch = %holding.epoch, permits = tenure.permits(), "handing lease off");
                self.contain("on_handing_off", |callbacks| {
                    callbacks.on_handing_off(&tenure.snapshot())
                });
            }
            let Handoff::Draining { until } = handoff else {
                continue;
            };
            if tenure.permits() == 0 || self.config.unsafe_release_ignores_permits {
                ready.push(partition);
            } else if until <= now {
                tracing::warn!(node = %self.config.node, %partition, permits = tenure.permits(), drain_timeout = ?self.config.drain_timeout, "work outlived the drain timeout; letting the lease expire instead of releasing it");
                self.handoffs.insert(partition, Handoff::Abandoned);
            }
        }
        self.write_released(ready).await;
    }

    /// Ends the tenures and writes their records released: the work under them is over.
    async fn write_released(&mut self, partitions: Vec<PartitionId>) {
        let now = self.clock.now();
        let written_at = self.write_stamp();
        let mut writes = Vec::new();
        for partition in partitions {
            let Some(holding) = self.holdings.get(&partition) else {
                continue;
            };
            let mut record = holding.record.clone();
            record.state = LeaseState::Released;
            record.owner = None;
            record.load = None;
            record.written_at_unix_ms = written_at;
            writes.push(LeaseWrite {
                partition,
                record,
                mode: PutMode::Update(holding.version.clone()),
            });
            self.lose(partition, LossReason::Released, now);
        }
        if writes.is_empty() {
            return;
        }
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let batch = writes.clone();
        let outcome = self
            .call(async move { store.put_leases(&group, &batch).await })
            .await;
        let failed = match outcome {
            Ok(results) => results.iter().filter(|r| r.is_err()).count(),
            Err(_) => writes.len(),
        };
        if failed > 0 {
            // Not fatal: an unreleased lease simply expires and is taken after acquire_after.
            tracing::warn!(node = %self.config.node, failed, "some releases were not written");
        }
    }

    /// Deletes this node's member record on the way out, so that the others stop counting
    /// it at once.
    async fn remove_member(&mut self) {
        let Some(mut version) = self.member_version.take() else {
            return;
        };
        // Two attempts: an operator may have rewritten the record (drain) since our last write.
        for attempt in 0..2 {
            let (store, group, node) = (
                Arc::clone(&self.store),
                self.config.group.clone(),
                self.config.node.clone(),
            );
            let result = self
                .call(async move {
                    match store.delete_member(&group, &node, &version).await {
                        Err(StoreError::Conflict { .. }) => Err(store
                            .get_member(&group, &node)
                            .await
                            .map(|m| m.map(|m| m.version))),
                        other => Ok(other),
                    }
                })
                .await;
            match result {
                Ok(Ok(()) | Err(StoreError::NotFound { .. })) => return,
                Err(Ok(Some(current))) if attempt == 0 => version = current,
                Err(Ok(None)) => return,
                Ok(Err(error)) | Err(Err(error)) => {
                    tracing::warn!(node = %self.config.node, %error, "could not remove member record");
                    return;
                }
                Err(Ok(Some(_))) => {
                    tracing::warn!(node = %self.config.node, "member record kept changing; left for expiry");
                    return;
                }
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
