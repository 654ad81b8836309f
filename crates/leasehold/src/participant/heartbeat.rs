//! Keeping what is held: renewing leases, settling writes whose outcome is unknown, and
//! the member record that tells the others this node is alive.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::StoreError;
use crate::metrics::Renewal;
use crate::record::MemberRecord;
use crate::store::{LeaseWrite, PutMode};
use crate::types::{is_valid_load, PartitionId, Version};

use super::halt::Halt;
use super::runner::Runner;
use crate::types::LossReason;

/// Stamps of member writes whose outcome may be unknown, kept to recognise this process's
/// own last write when a session renewal fails its compare-and-set, or when the node deletes
/// its record on the way out. Any of them may be the one that landed, so the window outlasts
/// by far any store outage a lease survives: a stamp pushed out would make this process take
/// its own write for another's and end its own session, or leave its record behind (at a
/// heartbeat of 250 ms, 1,024 renewals of unknown outcome are over four minutes).
const MAX_MEMBER_STAMPS: usize = 1024;

/// With session leases, the relative change in a partition's load that is worth a write of
/// its lease record.
const LOAD_CHANGE: f64 = 0.10;

/// With session leases, the fewest heartbeats between two load writes of one lease record.
const LOAD_PUBLISH_HEARTBEATS: u32 = 5;

impl Runner {
    pub(super) async fn renew(&mut self) {
        self.expire_due();
        if self.holdings.is_empty() {
            return;
        }
        // With session leases the member record renews them all ([`Runner::write_member`]);
        // a lease record is written only to publish a load that moved.
        if self.session_mode() {
            // A process whose session was replaced writes nothing it could avoid.
            if self.halted.is_some() {
                return;
            }
            return self.publish_loads().await;
        }
        let written_at = self.write_stamp();
        let handoffs = &self.handoffs;
        let now = self.clock.now();
        let writes: Vec<LeaseWrite> = self
            .holdings
            .iter()
            .filter(|(partition, _)| handoffs.get(partition).is_none_or(|h| h.renews_at(now)))
            .map(|(partition, holding)| {
                let mut record = holding.record.clone();
                record.written_at_unix_ms = written_at;
                // A load no store could keep (JSON has no NaN) or that makes no sense is left
                // out rather than failing the renewal.
                record.load = self
                    .contain("load", |callbacks| callbacks.load(*partition))
                    .flatten()
                    .filter(|load| is_valid_load(*load));
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
        self.unsettle(&writes);
        // Validity counts from before the request leaves: the write can only land later.
        let sent_at = self.clock.now();
        let batch = writes.len();
        let results = self.put_leases(&writes).await;
        let results = self.settle("renewal", writes, results).await;
        let took = self.clock.now().saturating_duration_since(sent_at);
        self.record(|metrics| {
            metrics.renewal_batch_size.observe(batch as f64);
            metrics.renewal_batch_duration.observe(took.as_secs_f64());
            for (_, result) in &results {
                metrics.renewed(match result {
                    Ok(_) => Renewal::Renewed,
                    Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {
                        Renewal::Conflict
                    }
                    Err(_) => Renewal::Error,
                });
            }
        });
        let valid_until = sent_at + self.config.lease_validity;
        let mut own_conflicts = Vec::new();
        let mut renewed = Vec::with_capacity(batch);
        for (write, result) in results {
            match result {
                Ok(version) => {
                    let now = self.clock.now();
                    self.late_renewals.remove(&write.partition);
                    if let Some(holding) = self.holdings.get_mut(&write.partition) {
                        holding.version = version;
                        holding.record = write.record;
                        holding.valid_until = valid_until;
                        holding.settled_at = Some(now);
                        renewed.push(write.partition);
                    }
                }
                // Perhaps against a renewal of this node's own that landed late.
                Err(StoreError::Conflict { .. }) if self.may_have_landed_late(write.partition) => {
                    own_conflicts.push(write.partition);
                }
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {
                    let now = self.clock.now();
                    self.lose(write.partition, LossReason::Conflict, now);
                }
                // Outcome still unknown: the lease stands until its deadline, and the next
                // renewal will tell, the write perhaps landing in between.
                Err(error) if error.is_transient() => {
                    if self.holdings.contains_key(&write.partition) {
                        self.renewal_unknown(write.partition, write.record, sent_at);
                    }
                }
                Err(_) => {}
            }
        }
        self.shared.extend(renewed, valid_until);
        self.resolve_late_renewals(own_conflicts).await;
        self.expire_due();
    }

    /// With session leases, writes the lease records whose partition's load has moved by
    /// more than [`LOAD_CHANGE`] since it was last written, each at most once per
    /// [`LOAD_PUBLISH_HEARTBEATS`] heartbeats: the others balance on the loads in the lease
    /// records, and a fleet whose loads hold steady writes none. The write is the holder's
    /// own compare-and-set; it extends no lease (the session does that).
    async fn publish_loads(&mut self) {
        let now = self.clock.now();
        let every = self.config.heartbeat * LOAD_PUBLISH_HEARTBEATS;
        let mut writes = Vec::new();
        for (partition, holding) in &self.holdings {
            // A hand-off starts with its entry here and the holding marked together.
            if self.handoffs.contains_key(partition) {
                continue;
            }
            if self
                .load_published
                .get(partition)
                .is_some_and(|at| now < *at + every)
            {
                continue;
            }
            let load = self
                .contain("load", |callbacks| callbacks.load(*partition))
                .flatten()
                .filter(|load| is_valid_load(*load));
            let moved = match (holding.record.load, load) {
                (Some(old), Some(new)) => (old - new).abs() > LOAD_CHANGE * old.max(new),
                (old, new) => old.is_some() != new.is_some(),
            };
            if moved {
                let mut record = holding.record.clone();
                record.load = load;
                writes.push(LeaseWrite {
                    partition: *partition,
                    record,
                    mode: PutMode::Update(holding.version.clone()),
                });
            }
        }
        if writes.is_empty() {
            return;
        }
        let written_at = self.write_stamp();
        for write in &mut writes {
            write.record.written_at_unix_ms = written_at;
        }
        self.unsettle(&writes);
        let results = self.put_leases(&writes).await;
        let now = self.clock.now();
        for (write, result) in self.settle("load update", writes, results).await {
            match result {
                Ok(version) => {
                    if let Some(holding) = self.holdings.get_mut(&write.partition) {
                        holding.version = version;
                        holding.record = write.record;
                        holding.settled_at = Some(now);
                        self.load_published.insert(write.partition, now);
                    }
                }
                // Changed behind this node's back, which changed its session too: its next
                // renewal re-reads the rest.
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {
                    self.lose(write.partition, LossReason::Conflict, now);
                }
                Err(_) => {}
            }
        }
    }

    /// Marks the holdings about to be written as unsettled until the reply: a listing
    /// racing the writes may show them or not, and tells nothing about what else changed.
    fn unsettle(&mut self, writes: &[LeaseWrite]) {
        for write in writes {
            if let Some(holding) = self.holdings.get_mut(&write.partition) {
                holding.settled_at = None;
            }
        }
    }

    /// Pairs each write with its result, and resolves writes whose outcome is unknown
    /// (time-out, lost connection) by reading the records back once: a record equal to what
    /// we sent is our write, landed. Any other writer changes the owner, epoch or note, and
    /// every write of ours carries its own stamp ([`Runner::write_stamp`]), so equality
    /// cannot be a coincidence.
    pub(super) async fn settle(
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
        // Those rows alone are read back: on a large table a listing for each batch of
        // unknown outcome would cost the store most when it is slowest.
        let partitions: Vec<PartitionId> = settled
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(StoreError::is_transient))
            .map(|(write, _)| write.partition)
            .collect();
        if partitions.is_empty() {
            return settled;
        }
        let unknown = partitions.len();
        tracing::warn!(node = %self.config.node, unknown, "{what} outcome unknown; reading back");
        // A read that fails leaves every outcome unknown.
        let current = self.read_back(&partitions).await;
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

    /// The sum of the loads the application reported for the leases held, as of their last
    /// renewal; `None` while it reports none.
    fn total_load(&self) -> Option<f64> {
        self.holdings
            .values()
            .filter_map(|holding| holding.record.load)
            .filter(|load| is_valid_load(*load))
            .fold(None, |total, load| Some(total.unwrap_or(0.0) + load))
    }

    /// Writes this node's member record (with session leases: renews the session), at most
    /// one such call in flight at a time (see [`Runner::member_call`]).
    pub(super) async fn write_member(&mut self) {
        let outer = std::mem::replace(&mut self.member_call, true);
        self.write_member_record().await;
        self.member_call = outer;
    }

    async fn write_member_record(&mut self) {
        // Two attempts: the second after adopting what an operator changed (drain/undrain),
        // or, with session leases, what another node's transaction changed.
        for _ in 0..2 {
            self.heartbeats += 1;
            let stamp = self.write_stamp();
            let record = MemberRecord {
                // A node on its way out asks for nothing more: with session leases it keeps
                // its record (its session) until it has handed everything off.
                weight: if self.stopping.is_some() {
                    0
                } else {
                    self.config.weight
                },
                draining: self.draining,
                load: self.total_load(),
                heartbeat: self.heartbeats,
                written_at_unix_ms: stamp,
                lease_validity: Some(self.config.lease_validity),
                acquire_after: Some(self.config.acquire_after),
                // Published so that a monitor can tell partitions no node has room for.
                max_partitions: (self.config.max_partitions_per_node < self.config.partitions)
                    .then_some(self.config.max_partitions_per_node),
                address: self.config.advertise.clone(),
                metadata: self.config.metadata.clone(),
                // Read by the others' load balancing: their share of the fleet's load, and
                // the ceiling above which they must not send this node more.
                capacity: self.config.capacity,
                max_load: self.config.max_load,
                session: self.session_mode().then_some(self.session_id),
                replaced: self.replaced.filter(|_| self.session_mode()),
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
            let session = self.session_mode();
            self.member_stamps.push(stamp.unwrap_or_default());
            if self.member_stamps.len() > MAX_MEMBER_STAMPS {
                self.member_stamps.remove(0);
            }
            // Validity counts from before the request leaves: the write can only land later.
            let sent_at = self.clock.now();
            let result = self
                .call(async move { store.put_member(&group, &node, &record, mode).await })
                .await;
            match result {
                Ok(version) => {
                    self.member_version = Some(version);
                    self.member_stamp = stamp;
                    self.member_syncs += 1;
                    let now = self.clock.now();
                    // Acknowledged: whatever was sent before it can no longer be the last
                    // write of this process the store holds.
                    self.member_stamps.clear();
                    self.member_stamps.push(stamp.unwrap_or_default());
                    if session {
                        self.session_renewed(sent_at, now);
                    }
                    self.schedule.member_written(now);
                    if std::mem::take(&mut self.recheck_group) {
                        self.check_again().await;
                    }
                    return;
                }
                Err(StoreError::NotFound { .. }) => self.member_record_gone(),
                Err(StoreError::Conflict { .. } | StoreError::AlreadyExists { .. }) => {
                    // Refused, so certainly not landed: its stamp would only crowd out of
                    // the window the stamp of a write that did land. A store that keeps
                    // refusing (a re-read that keeps failing) would otherwise push this
                    // process's own last write out, and it would end its own session.
                    self.forget_stamp(stamp);
                    if session {
                        self.reconcile_session().await;
                        if self.halted.is_some() {
                            return;
                        }
                    } else {
                        self.adopt_member_record().await;
                    }
                }
                Err(error) => {
                    tracing::warn!(node = %self.config.node, %error, "member heartbeat failed");
                    self.schedule.member_write_failed();
                    return;
                }
            }
        }
    }

    /// Drops the stamp of a member write the store refused.
    fn forget_stamp(&mut self, stamp: Option<u64>) {
        let stamp = stamp.unwrap_or_default();
        self.member_stamps.retain(|kept| *kept != stamp);
    }

    /// A successful session renewal sent at `sent_at`: nothing this node holds was changed
    /// behind its back since its last renewal (any such change fails the renewal), so every
    /// lease it holds and still renews is valid until `sent_at` plus the lease validity.
    fn session_renewed(&mut self, sent_at: tokio::time::Instant, now: tokio::time::Instant) {
        let since = self.session_read_at.take().unwrap_or(now);
        self.observed.own_session_since.get_or_insert(since);
        let valid_until = sent_at + self.config.lease_validity;
        let handoffs = &self.handoffs;
        let mut renewed = Vec::with_capacity(self.holdings.len());
        for (partition, holding) in self.holdings.iter_mut() {
            // A hand-off whose work outlived the drain limit is left to run out.
            if handoffs
                .get(partition)
                .is_some_and(|h| !h.renews_at(sent_at))
            {
                continue;
            }
            if holding.valid_until < valid_until {
                holding.valid_until = valid_until;
                renewed.push(*partition);
            }
        }
        self.shared.extend(renewed, valid_until);
    }

    /// This node's session ended (deleted, or taken over by another process under the same
    /// name): everything it held is lost now, and records still naming this node are
    /// waited on again from its next session.
    fn end_session(&mut self) {
        let now = self.clock.now();
        let held: Vec<PartitionId> = self.holdings.keys().copied().collect();
        if !held.is_empty() {
            tracing::warn!(node = %self.config.node, held = held.len(), "session lost; dropping every lease it held");
        }
        for partition in held {
            self.lose(partition, LossReason::Conflict, now);
        }
        // A process taking the name over while it joins had no session of its own to end.
        if self.observed.own_session_since.take().is_some() {
            self.shared
                .update_status(|status| status.sessions_ended += 1);
            self.record(|metrics| {
                metrics.sessions_ended.inc();
            });
        }
        self.member_stamps.clear();
        // The next session is told apart from this one: the records this one's leases left
        // behind are waited on from its end, whatever the next renews.
        self.session_id = self.draw_session_id();
        self.replaced = None;
    }

    /// After a session renewal failed its compare-and-set: reads the session, then the
    /// records of the leases held — in that order, so that a change made after the session
    /// was read changes it again and fails the next renewal — and drops every lease whose
    /// record changed. A session last written by another process under this name ends
    /// this one's.
    async fn reconcile_session(&mut self) {
        // A take in flight now is not among the leases re-read below (see `Runner::acquire`).
        self.session_rereads += 1;
        let (store, group, node) = (
            Arc::clone(&self.store),
            self.config.group.clone(),
            self.config.node.clone(),
        );
        let stored = match self
            .call(async move { store.get_member(&group, &node).await })
            .await
        {
            Ok(Some(stored)) => stored,
            Ok(None) => return self.member_record_gone(),
            Err(error) => {
                tracing::warn!(node = %self.config.node, %error, "reading own session failed");
                return;
            }
        };
        // Stamps are milliseconds of a wall clock, which two processes under one name can
        // share; the session identity tells them apart.
        let ours = stored.value.session == Some(self.session_id)
            && stored
                .value
                .written_at_unix_ms
                .is_some_and(|stamp| self.member_stamps.contains(&stamp));
        // A process that has had a session of its own, finding another identity there (or
        // none), was replaced; one still joining takes the name over below.
        if self.member_stamp.is_some() && stored.value.session != Some(self.session_id) {
            // Another process wrote its own session over this one's: it took the name over.
            // Writing back would end its session in turn, at every heartbeat, for ever.
            let halt = Halt::Replaced {
                node: self.config.node.clone(),
                successor: stored.value.session,
                address: stored.value.address.clone(),
            };
            tracing::error!(node = %self.config.node, error = %halt, "replaced by another process; handing off what it holds and stopping");
            // Neither written nor deleted again: the record is the successor's.
            self.member_version = None;
            // Takes in flight name the session that ended: they are not held (see
            // `Runner::acquire`). What is held stays valid to its deadline, renewed no more,
            // and is handed off (see `Runner::hand_everything_off`).
            self.session_id = self.draw_session_id();
            self.halted = Some(halt);
            return;
        }
        if !ours {
            self.end_session();
            // This node's next write replaces that session, on the condition that it is still
            // at the version just read: that process's last renewal is the one read here.
            self.replaced = stored
                .value
                .session
                .zip(stored.value.written_at_unix_ms)
                .map(|(session, stamp)| crate::record::replaced_mark(session, stamp));
            // Another process's last renewal (a previous one under this name) was made
            // before this read: if this node's next write finds the session still at this
            // version, nothing renewed it since, and what that process held runs out
            // `lease_validity` from before now.
            self.session_read_at = Some(self.clock.now());
        }
        self.set_draining(stored.value.draining);
        self.member_syncs += 1;
        if self.holdings.is_empty() {
            self.member_version = Some(stored.version);
            return;
        }
        let held: Vec<PartitionId> = self.holdings.keys().copied().collect();
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let current = self
            .call(async move {
                let rows = store.get_leases(&group, &held).await?;
                let current: BTreeMap<PartitionId, _> = rows
                    .into_iter()
                    .filter_map(|(partition, stored)| Some((partition, stored?)))
                    .collect();
                Ok::<_, StoreError>(current)
            })
            .await;
        let current = match current {
            Ok(current) => current,
            Err(error) => {
                // The session's version is adopted only after a complete re-read, so the
                // next renewal fails again until one succeeds.
                tracing::warn!(node = %self.config.node, %error, "re-reading held leases failed");
                return;
            }
        };
        self.member_version = Some(stored.version);
        let now = self.clock.now();
        let changed: Vec<PartitionId> = self
            .holdings
            .iter()
            .filter(|(partition, holding)| {
                current
                    .get(partition)
                    .is_none_or(|stored| stored.version != holding.version)
            })
            .map(|(partition, _)| *partition)
            .collect();
        for partition in changed {
            self.lose(partition, LossReason::Conflict, now);
            // The view learns the record as read: one still naming this node (a kick) is
            // waited on, and released, from now.
            match current.get(&partition) {
                Some(stored) => self.observed.leases.insert(
                    partition,
                    &stored.value,
                    stored.version.clone(),
                    now,
                ),
                None => self.observed.leases.forget(partition),
            }
            self.schedule
                .want_leases(crate::planner::ListingCause::HoldingChanged);
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
                self.member_syncs += 1;
            }
            Ok(None) => self.member_record_gone(),
            Err(error) => {
                tracing::warn!(node = %self.config.node, %error, "reading own member record failed")
            }
        }
    }

    /// This node's member record was found missing, by a write or a read: deleted while the
    /// node was away (see `forget_dead_members`, which never deletes a draining record), so
    /// the last instruction it carried was "not draining", whatever this node last adopted.
    /// With session leases the session is gone, and whatever it held with it: the others
    /// wait from when they saw it go, not on this node. The node registers again, checking
    /// the group record anew. Every path that finds the record gone comes here, so that none
    /// writes back a drain an operator has since lifted.
    fn member_record_gone(&mut self) {
        if self.session_mode() {
            self.end_session();
            self.session_read_at = None;
        }
        self.member_version = None;
        self.set_draining(false);
        self.recheck_group = true;
    }

    pub(super) fn set_draining(&mut self, draining: bool) {
        if draining != self.draining {
            tracing::info!(node = %self.config.node, draining, "drain state changed by an operator");
            self.draining = draining;
            self.shared
                .update_status(|status| status.draining = draining);
        }
    }
}
