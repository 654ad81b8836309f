//! Renewals whose outcome stayed unknown, and that land after they were read back.
//!
//! A renewal that times out is read back once ([`Runner::settle`]). A write still on its way
//! then (queued behind a lock, or on a server or a thread slower than the caller's time
//! limit) can land afterwards, changing the record's version under the holder. The holder's
//! next renewal, made on the version it knew, fails its compare-and-set against the holder's
//! own write. Taken for another writer's, that conflict drops a lease nobody else touched:
//! on a loaded machine, every store stall longer than the time limit would cost the leases
//! renewed in it. So the renewals left unknown are kept, and a conflict on such a lease reads
//! the record: found exactly as one of them wrote it (each write carries its own stamp, see
//! [`Runner::write_stamp`]), the lease is still this node's, at the version that write made.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::error::StoreError;
use crate::record::{LeaseRecord, StoredLease};
use crate::store::{LeaseWrite, PutMode};
use crate::types::{LossReason, PartitionId, Version};

use super::runner::{LateRenewal, Runner};

/// Renewals of unknown outcome kept per lease. They are all compare-and-sets on the one
/// version the holder knew, so at most one of them can have landed; a lease whose store
/// stalls for more renewals than this in a row is dropped on the conflict, as any other.
const MAX_LATE_RENEWALS: usize = 4;

impl Runner {
    /// Keeps a renewal whose outcome stayed unknown after its read-back: it may land later.
    pub(super) fn renewal_unknown(
        &mut self,
        partition: PartitionId,
        record: LeaseRecord,
        sent_at: Instant,
    ) {
        let late = self.late_renewals.entry(partition).or_default();
        if late.len() == MAX_LATE_RENEWALS {
            late.remove(0);
        }
        late.push(LateRenewal { record, sent_at });
    }

    /// Whether a conflict on `partition` may be with one of this node's own renewals.
    pub(super) fn may_have_landed_late(&self, partition: PartitionId) -> bool {
        self.late_renewals.contains_key(&partition)
    }

    /// Reads the records of `partitions` back, through [`Runner::call`]; an empty map when
    /// the read fails.
    pub(super) async fn read_back(
        &mut self,
        partitions: &[PartitionId],
    ) -> BTreeMap<PartitionId, StoredLease> {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let read = partitions.to_vec();
        match self
            .call(async move { store.get_leases(&group, &read).await })
            .await
        {
            Ok(rows) => rows
                .into_iter()
                .filter_map(|(partition, stored)| Some((partition, stored?)))
                .collect(),
            Err(error) => {
                tracing::warn!(node = %self.config.node, %error, "reading back leases after a failed write failed");
                BTreeMap::new()
            }
        }
    }

    /// Writes again the releases in `writes` that failed their compare-and-set against a
    /// renewal of this node's own that landed late (`late`, kept from before the release),
    /// on the version that renewal made, and puts the new results in `results`. Unwritten,
    /// such a release would leave the partition to expire (and, restarting in place, not
    /// reserved); the work under it is over either way.
    pub(super) async fn release_over_late_renewals(
        &mut self,
        writes: &mut [LeaseWrite],
        results: &mut [Result<Version, StoreError>],
        late: BTreeMap<PartitionId, Vec<LateRenewal>>,
    ) {
        let conflicted: Vec<PartitionId> = writes
            .iter()
            .zip(results.iter())
            .filter(|(write, result)| {
                matches!(result, Err(StoreError::Conflict { .. }))
                    && late.contains_key(&write.partition)
            })
            .map(|(write, _)| write.partition)
            .collect();
        if conflicted.is_empty() {
            return;
        }
        let current = self.read_back(&conflicted).await;
        let mut again = Vec::new();
        for (index, write) in writes.iter_mut().enumerate() {
            let own = current.get(&write.partition).filter(|stored| {
                late.get(&write.partition)
                    .is_some_and(|renewals| renewals.iter().any(|r| r.record == stored.value))
            });
            if let (Some(stored), true) = (own, conflicted.contains(&write.partition)) {
                write.mode = PutMode::Update(stored.version.clone());
                again.push(index);
            }
        }
        if again.is_empty() {
            return;
        }
        let batch: Vec<LeaseWrite> = again.iter().map(|i| writes[*i].clone()).collect();
        match self.put_leases(&batch).await {
            Ok(retried) => {
                for (index, result) in again.into_iter().zip(retried) {
                    results[index] = result;
                }
            }
            Err(error) => {
                for index in again {
                    results[index] = Err(error.summarize());
                }
            }
        }
    }

    /// Resolves renewals that failed their compare-and-set on leases with renewals of unknown
    /// outcome: each record is read, and a lease whose record is exactly one of those writes
    /// is kept at the version it made, valid `lease_validity` from when that write was sent
    /// (the rule of any renewal: it can only have landed later). Any other record, or none,
    /// or a read that fails, drops the lease as a conflict would have.
    pub(super) async fn resolve_late_renewals(&mut self, partitions: Vec<PartitionId>) {
        if partitions.is_empty() {
            return;
        }
        let current = self.read_back(&partitions).await;
        let now = self.clock.now();
        for partition in partitions {
            let late = self.late_renewals.remove(&partition).unwrap_or_default();
            let landed = current.get(&partition).and_then(|stored| {
                late.into_iter()
                    .find(|renewal| renewal.record == stored.value)
                    .map(|renewal| (stored.version.clone(), renewal))
            });
            // The read waited on the store: the lease may have run out meanwhile, and an
            // ended lease is never revived.
            let Some(holding) = self.holdings.get_mut(&partition) else {
                continue;
            };
            match landed {
                Some((version, renewal)) => {
                    let valid_until = renewal.sent_at + self.config.lease_validity;
                    holding.version = version;
                    holding.record = renewal.record;
                    holding.settled_at = Some(now);
                    if valid_until > holding.valid_until {
                        holding.valid_until = valid_until;
                        self.shared.extend([partition], valid_until);
                    }
                    tracing::info!(node = %self.config.node, %partition, "a renewal of unknown outcome landed after it was read back; the lease stands");
                }
                None => self.lose(partition, LossReason::Conflict, now),
            }
        }
    }
}
