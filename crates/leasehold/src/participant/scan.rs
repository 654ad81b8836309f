//! Reading the table and acting on it: member and lease listings as the schedule asks,
//! forgetting long-dead members, planning, and taking partitions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::planner::{
    self, Acquisition, Holding, ListingCause, PlanInput, Reading, SessionSeen, Takes,
};
use crate::store::{LeaseWrite, PutMode};
use crate::types::{NodeId, PartitionId, Version};

use super::guard::Tenure;
use super::runner::Runner;
use super::LeaseEvent;
use crate::types::LossReason;

/// Stale member records deleted per scan at most, so that clearing a backlog never delays
/// the scan's own work by much.
const MAX_FORGOTTEN_PER_SCAN: usize = 16;

impl Runner {
    /// Reads the member records, and the lease table when the schedule says it may hold
    /// something to act on (see [`ScanSchedule::reading`]), then plans on what it read.
    ///
    /// [`ScanSchedule::reading`]: crate::planner::ScanSchedule::reading
    pub(super) async fn scan(&mut self) {
        let cause = self.schedule.scan_cause();
        self.shared.update_status(|status| {
            *status.scans_started.entry(cause).or_default() += 1;
        });
        self.schedule.scan_started(self.clock.now());
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let syncs_before = self.member_syncs;
        let sent = self.clock.now();
        let members = match self
            .call(async move { store.list_member_heads(&group).await })
            .await
        {
            Ok(members) => members,
            Err(error) => return self.scan_failed(error),
        };
        // Observations are stamped when the reply arrived, after every write they reflect.
        let now = self.clock.now();
        self.report_corrupt(&members.corrupt);
        self.record(|metrics| metrics.corrupt(true, members.corrupt.len()));
        self.observed.corrupt_members = super::holdings::corrupt_members(&members.corrupt);
        self.observed
            .observe_members_sent(sent, now, members.records);
        // A heartbeat during the listing wrote or read this node's own record after the
        // listing was taken: what it learned is newer than the listing's copy. A record the
        // listing could not decode says nothing: the view keeps its last readable copy,
        // whose drain flag may be older than an operator's change.
        let unreadable = self.observed.corrupt_members.contains(&self.config.node);
        let own = (!unreadable)
            .then(|| self.observed.members.get(&self.config.node))
            .flatten();
        if let Some(draining) = own.map(|own| own.draining) {
            if self.member_syncs == syncs_before {
                self.set_draining(draining);
            }
        }
        let members_at = now;
        let reading = self
            .schedule
            .reading(now, &self.observed, &self.config, self.draining);
        let list_leases = reading == Reading::Leases;
        if let Some(cause) = self.schedule.listing_cause().filter(|_| list_leases) {
            self.record(|metrics| metrics.listing_started(cause));
            self.shared.update_status(|status| {
                *status.listings_started.entry(cause).or_default() += 1;
            });
        }
        if list_leases {
            let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
            let leases_sent = self.clock.now();
            let mut leases = match self
                .call(async move { store.list_leases(&group).await })
                .await
            {
                Ok(leases) => leases,
                Err(error) => {
                    let now = self.clock.now();
                    let wait =
                        self.schedule
                            .listing_failed(now, &error, &self.config, &mut self.rng);
                    return self.scan_failed_listing(error, wait);
                }
            };
            self.schedule.listing_succeeded();
            let now = self.clock.now();
            self.report_corrupt(&leases.corrupt);
            self.record(|metrics| {
                metrics.corrupt(false, leases.corrupt.len());
                metrics.lease_listings.inc();
                metrics.lease_rows.inc_by(leases.len() as u64);
            });
            if self.session_mode() && !self.config.controls.ignore_listed_changes {
                self.check_holdings(leases_sent, now, &mut leases.records);
            }
            self.observed.observe_leases(now, leases.records);
            self.leases_read(now, members_at);
        }
        if reading == Reading::Stripe {
            if let Err(error) = self.read_stripe(members_at).await {
                // Nothing was learned, so the next scan decides as this one did, and reads
                // the stripe again while what chose it holds. Sending it to the table instead
                // would answer a store too slow for a few rows with a reading of all of them:
                // on a busy store, every node of a starting fleet at once.
                return self.scan_failed(error);
            }
        }
        if reading == Reading::Rows {
            if let Err(error) = self.read_rows().await {
                self.schedule.reading_failed();
                return self.scan_failed(error);
            }
        }
        let now = self.clock.now();
        self.schedule
            .scan_succeeded(now, &self.config, &mut self.rng);
        self.record(|metrics| {
            metrics.scans.inc();
            metrics.scan_backoff.set(0);
        });
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

    /// Reads the rows notices named since the last reading into the view.
    async fn read_rows(&mut self) -> Result<(), StoreError> {
        let partitions = self.schedule.take_rows_due();
        let rows = self.read_lease_rows(partitions).await?;
        let now = self.clock.now();
        self.observed.observe_rows(now, rows);
        Ok(())
    }

    /// Reads the rows of this node's own stripe, as the membership read at `members_at`
    /// lays the stripes out, into a view of those rows alone.
    async fn read_stripe(&mut self, members_at: tokio::time::Instant) -> Result<(), StoreError> {
        let partitions =
            planner::own_stripe(members_at, &self.config, &self.observed, self.draining);
        let rows = self.read_lease_rows(partitions).await?;
        let now = self.clock.now();
        self.observed.observe_stripe(now, rows);
        self.leases_read(now, members_at);
        Ok(())
    }

    /// Tells the schedule the table (or this node's stripe of it) was read into the view at
    /// `now`, after the member records read at `members_at`.
    fn leases_read(&mut self, now: tokio::time::Instant, members_at: tokio::time::Instant) {
        self.schedule.leases_listed(
            now,
            members_at,
            &self.observed,
            &self.config,
            self.draining,
            &mut self.rng,
        );
    }

    /// Reads `partitions`' lease records, a store call per group of them, counting them.
    async fn read_lease_rows(
        &mut self,
        partitions: Vec<PartitionId>,
    ) -> Result<Vec<(PartitionId, Option<crate::record::StoredLease>)>, StoreError> {
        let count = partitions.len() as u64;
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let rows = self
            .call(async move { store.get_leases(&group, &partitions).await })
            .await?;
        self.record(|metrics| {
            metrics.lease_row_reads.inc_by(count);
        });
        Ok(rows)
    }

    fn scan_failed(&mut self, error: StoreError) {
        self.scan_failed_listing(error, None);
    }

    /// A scan failed with `error`; when its listing of the table did, and the next listing
    /// waits `listing_wait`, one warning says both.
    fn scan_failed_listing(&mut self, error: StoreError, listing_wait: Option<Duration>) {
        let now = self.clock.now();
        let backoff = self.schedule.scan_failed(now, &self.config, &mut self.rng);
        match listing_wait {
            Some(wait) => tracing::warn!(node = %self.config.node, %error, ?backoff, ?wait,
                "listing of the lease table failed; listing it again after the wait"),
            None => {
                tracing::warn!(node = %self.config.node, %error, ?backoff, "scan failed; backing off")
            }
        }
        let level = self.schedule.failures();
        self.record(|metrics| {
            metrics.scan_failures.inc();
            metrics.scan_backoff.set(i64::from(level));
        });
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
        // A view of one stripe cannot tell which sessions records still name.
        if self.halted.is_some() || (self.session_mode() && self.observed.partial) {
            return;
        }
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
        // With session leases, a session that records still name stays until they are
        // taken: deleting it would restart every taker's wait on them, from when each sees
        // it gone.
        let session = self.session_mode();
        let tally = self.observed.leases.tally();
        let dead: Vec<(NodeId, Version)> = self
            .observed
            .members
            .others(me)
            .filter(|seen| !seen.draining && seen.first_seen + forget_after <= now)
            .filter(|seen| !session || tally.owner(&seen.node).held == 0)
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
                    self.observed.members.remove(&node, self.clock.now());
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

    pub(super) async fn act(&mut self) {
        // A node that must stop takes and hands off nothing more: it may not fit the
        // group's timings, or the records may be another process's now.
        if self.halted.is_some() {
            return;
        }
        let now = self.clock.now();
        planner::prune_lost(&mut self.observed, &self.config.node);
        let load_moves_left = self.load_moves_left(now);
        self.observed.notified = self.feed.is_some();
        let plan = planner::plan(
            &PlanInput {
                now,
                config: &self.config,
                observed: &self.observed,
                holdings: &self.holdings,
                draining: self.draining,
                load_moves_left,
            },
            &mut self.rng,
        );
        for _ in 0..plan.shed {
            self.load_moves.push_back(now);
        }
        let moves_left = load_moves_left.saturating_sub(plan.shed);
        self.live_members = plan.live_members;
        self.shared.update_status(|status| {
            status.target = plan.target;
            status.live_members = plan.live_members;
            status.load = plan.load;
            status.load_moves_left = moves_left;
            status.load_spillover = plan.load_spillover;
        });
        self.record(|metrics| {
            metrics.target.set(i64::from(plan.target));
            let (load, fair) = plan.load.unwrap_or((0.0, 0.0));
            metrics.load.set(load);
            metrics.fair_load.set(fair);
            metrics.load_spillover.set(plan.load_spillover);
            metrics.load_moves.inc_by(u64::from(plan.shed));
            crate::metrics::set_count(&metrics.live_members, plan.live_members);
        });
        self.schedule
            .planned(plan.settled() && self.handoffs.is_empty());
        self.wake_at = plan.wake_at;
        for partition in plan.drop {
            let deadline = self.holdings[&partition].valid_until;
            self.lose(partition, LossReason::Expired, deadline);
        }
        if !plan.clear.is_empty() {
            self.clear(plan.clear).await;
        }
        let released = !plan.release.is_empty();
        self.returning.extend(plan.return_to);
        if released {
            self.release(plan.release).await;
        }
        // With session leases, nothing is taken before this process's session is in the
        // store: a lease record naming a session nobody can read yet would look, to a node
        // listing the members meanwhile, like one whose session is gone.
        let unregistered = self.session_mode() && self.observed.own_session_since.is_none();
        if !plan.acquire.is_empty() && !unregistered {
            let planned = plan.acquire.len();
            let (taken, lost_races) = self.acquire(plan.acquire).await;
            let takes = Takes {
                planned,
                taken,
                lost_races,
                off_stripe: plan.off_stripe,
                released,
                held: self.holdings.len(),
                target: plan.target,
            };
            self.schedule.took(&takes, &self.config);
        }
    }

    /// Writes `writes` as [`LeaseStore::put_leases`] would, except that each write with a
    /// session beside it is one transaction that also changes that session, which must still
    /// be at the version this node waited on: the holder's next renewal then fails, and it
    /// re-reads what it holds. The session is written back as it stands.
    ///
    /// [`LeaseStore::put_leases`]: crate::LeaseStore::put_leases
    async fn take_from_sessions(
        &mut self,
        writes: &[LeaseWrite],
        sessions: Vec<Option<SessionSeen>>,
        ended: Vec<Option<u64>>,
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let batch = writes.to_vec();
        let unsafe_skip = self.config.controls.take_ignores_session;
        self.call(async move {
            let mut results = Vec::with_capacity(batch.len());
            for ((write, session), ended) in batch.into_iter().zip(sessions).zip(ended) {
                if let Some(ended) = ended {
                    results.push(take_from_ended_session(&*store, &group, write, ended).await);
                    continue;
                }
                let result = match session {
                    Some(_) if unsafe_skip => {
                        store
                            .put_lease(&group, write.partition, &write.record, write.mode)
                            .await
                    }
                    Some(seen) => take_with_session(&*store, &group, write, seen).await,
                    None => {
                        store
                            .put_lease(&group, write.partition, &write.record, write.mode)
                            .await
                    }
                };
                results.push(result);
            }
            Ok(results)
        })
        .await
    }

    /// Until when a partition just taken is kept from hand-offs for balance, having come back
    /// unclaimed `bounces` times in a row: two scan periods the first time, twice as long each
    /// time after, at most `churn_window`.
    fn keep_until(
        &mut self,
        partition: PartitionId,
        bounces: Option<&u32>,
    ) -> Option<tokio::time::Instant> {
        let Some(&bounces) = bounces else {
            self.bounces.remove(&partition);
            return None;
        };
        self.bounces.insert(partition, bounces);
        let wait = self
            .config
            .scan_interval
            .saturating_mul(1 << bounces.min(16))
            .min(self.config.churn_window);
        Some(self.clock.now() + wait)
    }

    /// Takes the partitions, returning how many it now holds of them.
    /// Writes the acquisitions; returns how many were taken, and how many were lost to
    /// another node's write.
    async fn acquire(&mut self, acquisitions: Vec<Acquisition>) -> (usize, usize) {
        let written_at = self.write_stamp();
        // Renewing per partition, the record carries this process's identity all the same:
        // two processes under one name, taking one record in the same millisecond, would
        // otherwise write equal records, and each could read back the other's write as its
        // own after a lost reply.
        let session_id = Some(self.session_id);
        let mut sessions = Vec::with_capacity(acquisitions.len());
        let mut ended = Vec::with_capacity(acquisitions.len());
        // Records this node released, still exactly as it wrote them: nobody took them.
        let mut unclaimed = BTreeMap::new();
        for a in &acquisitions {
            match self.released.remove(&a.partition) {
                Some((version, bounces)) if version == a.expected => {
                    unclaimed.insert(a.partition, bounces + 1);
                }
                _ => {}
            }
        }
        let writes: Vec<LeaseWrite> = acquisitions
            .into_iter()
            .map(|a| {
                let mut record = a.record;
                record.written_at_unix_ms = written_at;
                record.session = session_id;
                sessions.push(a.session);
                ended.push(a.ended_session);
                LeaseWrite {
                    partition: a.partition,
                    record,
                    mode: PutMode::Update(a.expected),
                }
            })
            .collect();
        let sent_at = self.clock.now();
        let rereads = self.session_rereads;
        let results = if sessions.iter().all(Option::is_none) && ended.iter().all(Option::is_none) {
            self.put_leases(&writes).await
        } else {
            self.take_from_sessions(&writes, sessions, ended).await
        };
        let valid_until = sent_at + self.config.lease_validity;
        let mut taken = 0;
        let mut lost_races = 0;
        let mut settled = self.settle("acquisition", writes, results).await;
        if self.session_mode() && self.session_rereads != rereads {
            self.verify_takes(&mut settled).await;
        }
        if session_id.is_some() && session_id != Some(self.session_id) {
            // The session these takes were written under ended while they were in flight:
            // the others wait on their records from its end, not on this process's next
            // session, so they are never served here.
            self.disown_takes(&mut settled, valid_until);
        }
        for (write, result) in settled {
            if let Err(StoreError::Conflict { .. }) = result {
                lost_races += 1;
            }
            // The holder's session renewed, or kept changing under other takes: the lease
            // record itself is as seen, and keeps its wait.
            if let Err(StoreError::Conflict {
                key: crate::RecordKey::Member(_),
            }) = result
            {
                self.schedule.want_leases(ListingCause::WriteFailed);
                continue;
            }
            if result.as_ref().is_err_and(StoreError::is_transient) && self.session_mode() {
                // The take may have landed: a record naming this node under this epoch was
                // never served here, and is released by the deadline it would have had.
                self.never_served(&write, valid_until);
            }
            let Ok(version) = result else {
                // Someone else wrote the row, or the write's fate stays unknown: the view of
                // it is out of date, and the row waits a full acquire_after from its next
                // sighting, which the next scan makes.
                self.observed.leases.forget(write.partition);
                self.schedule.want_leases(ListingCause::WriteFailed);
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
            self.adopt_excluded();
            if self.config.excludes(write.partition) {
                // Excluded while the take was in flight (its reply, or the read-back of an
                // unknown outcome, can come long after): never served here. Per partition
                // the record runs out unrenewed; by session it is freed at the deadline it
                // would have had.
                if self.session_mode() {
                    self.never_served(&write, valid_until);
                }
                continue;
            }
            let epoch = write.record.epoch;
            let keep_until = self.keep_until(write.partition, unclaimed.get(&write.partition));
            self.holdings.insert(
                write.partition,
                Holding {
                    epoch,
                    version,
                    record: write.record,
                    valid_until,
                    acquired_at: sent_at,
                    handing_off: false,
                    keep_until,
                    settled_at: Some(self.clock.now()),
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
            self.record(|metrics| {
                metrics.acquisitions.inc();
            });
            self.contain("on_acquired", |callbacks| {
                callbacks.on_acquired(&tenure.snapshot())
            });
            self.shared
                .announce(|| LeaseEvent::Acquired(tenure.snapshot()));
            taken += 1;
        }
        (taken, lost_races)
    }
}

/// One take of a lease held under a session that has ended: the record is read again and
/// written, compared on its version, only if it still names that very session — the view
/// that judged it ended keeps 32 bits of the lease's session.
async fn take_from_ended_session(
    store: &dyn crate::LeaseStore,
    group: &crate::GroupName,
    write: LeaseWrite,
    ended: u64,
) -> Result<Version, StoreError> {
    let conflict = || StoreError::Conflict {
        key: crate::RecordKey::Lease(write.partition),
    };
    let PutMode::Update(expected) = &write.mode else {
        return Err(conflict());
    };
    let current = store.get_lease(group, write.partition).await?;
    match current {
        Some(stored) if stored.version == *expected && stored.value.session == Some(ended) => {
            store
                .put_lease(group, write.partition, &write.record, write.mode)
                .await
        }
        _ => Err(conflict()),
    }
}

/// Attempts at one take from a holder's session that other takers' changes to the same
/// session may cost.
const SESSION_TAKE_ATTEMPTS: usize = 4;

/// One take from a holder's session: the lease record and the session, in one transaction
/// conditional on both, made only while the session still shows the renewal this node
/// waited on. Another taker's change to the session leaves that renewal in place: the
/// session is read again and the take tried again.
async fn take_with_session(
    store: &dyn crate::LeaseStore,
    group: &crate::GroupName,
    write: LeaseWrite,
    seen: SessionSeen,
) -> Result<Version, StoreError> {
    let session_key = || crate::RecordKey::Member(seen.node.clone());
    for _ in 0..SESSION_TAKE_ATTEMPTS {
        let Some(session) = store.get_member(group, &seen.node).await? else {
            return Err(StoreError::Conflict { key: session_key() });
        };
        if !seen.shows(&session.value) {
            // Renewed since: the holder is alive, and the wait starts again.
            return Err(StoreError::Conflict { key: session_key() });
        }
        let writes = [
            crate::TxnWrite::Lease(write.clone()),
            crate::TxnWrite::Member {
                node: seen.node.clone(),
                record: session.value,
                mode: PutMode::Update(session.version),
            },
        ];
        match store.transact(group, &writes).await {
            Ok(versions) => {
                return versions
                    .into_iter()
                    .next()
                    .ok_or_else(|| StoreError::Unavailable {
                        message: "the store answered a transaction without versions".to_owned(),
                        source: None,
                    })
            }
            Err(StoreError::Conflict { key }) if key == session_key() => continue,
            Err(error) => return Err(error),
        }
    }
    Err(StoreError::Conflict { key: session_key() })
}
