//! A holder checking what it holds against what it reads: lease listings that show a held
//! record changed behind its back, takes that a session re-read or the end of a session
//! left unsure, and member records that cannot be read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::time::Instant;

use crate::error::StoreError;
use crate::planner::session_tag;
use crate::record::in_key_order;
use crate::record::StoredLease;
use crate::store::LeaseWrite;
use crate::types::{NodeId, PartitionId, Version};

use super::runner::Runner;
use crate::types::LossReason;

impl Runner {
    /// With session leases, drops at once every lease that a listing sent at `sent` shows
    /// is no longer this node's ([`Holding::contradicted_by`]): whatever changed it, nothing
    /// this node writes later could make it its own again. (Renewing per partition, every
    /// renewal is such a check, made every heartbeat.)
    ///
    /// [`Holding::contradicted_by`]: crate::planner::Holding::contradicted_by
    pub(super) fn check_holdings(
        &mut self,
        sent: Instant,
        now: Instant,
        records: &mut Vec<StoredLease>,
    ) {
        if self.holdings.is_empty() {
            return;
        }
        // Stores list in key order already, and the view's merge needs it too: this costs
        // one pass over the listing, and each holding a binary search.
        in_key_order(records);
        let listed = |partition: &PartitionId| {
            records
                .binary_search_by_key(partition, |stored| stored.key)
                .ok()
                .map(|index| &records[index])
        };
        let me = &self.config.node;
        let changed: Vec<PartitionId> = self
            .holdings
            .iter()
            .filter(|(partition, holding)| {
                let stored = listed(partition).map(|stored| (&stored.value, &stored.version));
                holding.contradicted_by(me, sent, stored)
            })
            .map(|(partition, _)| *partition)
            .collect();
        for partition in changed {
            match listed(&partition) {
                Some(stored) => {
                    tracing::warn!(node = %self.config.node, %partition, owner = ?stored.value.owner, epoch = %stored.value.epoch, state = ?stored.value.state, "a held lease's record changed behind this node's back; dropping it")
                }
                None => {
                    tracing::warn!(node = %self.config.node, %partition, "a held lease's record is gone or unreadable; dropping it")
                }
            }
            self.lose(partition, LossReason::Changed, now);
        }
    }

    /// With session leases, checks the takes that succeeded while this node re-read its
    /// session after a failed renewal. That re-read drops the leases held whose records
    /// changed, but a take in flight was not yet held: a change to its record made before the
    /// re-read (an operator taking the partition offline, say) changed the session, and the
    /// re-read adopted that change unseen. So each such take is read back: a record no longer
    /// as written is not held. A change after this read changes the session again, and the
    /// next renewal's re-read sees it.
    pub(super) async fn verify_takes(
        &mut self,
        settled: &mut [(LeaseWrite, Result<Version, StoreError>)],
    ) {
        let taken: Vec<PartitionId> = settled
            .iter()
            .filter(|(_, result)| result.is_ok())
            .map(|(write, _)| write.partition)
            .collect();
        if taken.is_empty() {
            return;
        }
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let current = self
            .call(async move { store.get_leases(&group, &taken).await })
            .await
            .map(|rows| {
                rows.into_iter()
                    .filter_map(|(partition, stored)| Some((partition, stored?.version)))
                    .collect::<BTreeMap<PartitionId, Version>>()
            });
        for (write, result) in settled.iter_mut() {
            let Ok(version) = result else {
                continue;
            };
            let partition = write.partition;
            if matches!(&current, Ok(current) if current.get(&partition) == Some(&*version)) {
                continue;
            }
            // Never served here: if the record still names this node under this epoch, it is
            // released at once.
            let now = self.clock.now();
            self.never_served(write, now);
            tracing::info!(node = %self.config.node, %partition, "a take changed under a session re-read; not held");
            *result = Err(match &current {
                // The read failed: whether the take still stands is unknown.
                Err(error) => error.summarize(),
                Ok(_) => StoreError::Conflict {
                    key: crate::RecordKey::Lease(partition),
                },
            });
        }
    }

    /// Notes that the take `write` is never served here: a record that still names this
    /// node under its epoch and session is freed at `deadline` (with session leases, where
    /// the node's own session would otherwise keep it alive).
    pub(super) fn never_served(&mut self, write: &LeaseWrite, deadline: tokio::time::Instant) {
        self.observed.lost.insert(
            write.partition,
            (
                write.record.epoch,
                session_tag(write.record.session),
                deadline,
            ),
        );
    }

    /// Marks the successful takes of `settled` as never held: their records name a session
    /// of this node that has ended. Each is released by the deadline it would have had.
    pub(super) fn disown_takes(
        &mut self,
        settled: &mut [(LeaseWrite, Result<Version, StoreError>)],
        valid_until: tokio::time::Instant,
    ) {
        for (write, result) in settled.iter_mut() {
            if result.is_ok() {
                self.never_served(write, valid_until);
                tracing::info!(node = %self.config.node, partition = %write.partition, "a take outlived its session; not held");
                *result = Err(StoreError::Conflict {
                    key: crate::RecordKey::Lease(write.partition),
                });
            }
        }
    }
}

/// The nodes whose member records a listing reported unreadable.
pub(super) fn corrupt_members(errors: &[StoreError]) -> BTreeSet<NodeId> {
    errors
        .iter()
        .filter_map(|error| match error.key() {
            Some(crate::RecordKey::Member(node)) => Some(node.clone()),
            _ => None,
        })
        .collect()
}
