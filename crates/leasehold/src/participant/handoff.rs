//! Giving leases up: a hand-off stops new work at once, waits for the work in flight (up to
//! the drain timeout), then writes the lease released; on shutdown the member record goes
//! first.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::StoreError;
use crate::record::LeaseState;
use crate::store::{LeaseWrite, PutMode};
use crate::types::PartitionId;

use super::guard::Phase;
use super::runner::{Handoff, Runner};
use super::LeaseEvent;
use crate::types::LossReason;

impl Runner {
    /// Starts handing leases off: no new work on them from now on, and each is written
    /// released once the work in flight under it has ended (see [`Runner::advance_handoffs`]).
    pub(super) async fn release(&mut self, partitions: Vec<PartitionId>) {
        for partition in partitions {
            self.shared.hand_off(partition);
        }
        self.advance_handoffs().await;
    }

    /// Moves every hand-off on: starts those that handles or plans asked for, writes
    /// released those whose permits are all dropped, and stops renewing those whose permits
    /// outlived the drain timeout, leaving them to expire.
    pub(super) async fn advance_handoffs(&mut self) {
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
                    until: tenure.handing_off_since().unwrap_or(now) + self.config.drain_timeout,
                });
            let holding = self.holdings.get_mut(&partition).expect("listed above");
            if !holding.handing_off {
                holding.handing_off = true;
                self.schedule.holdings_changed();
                tracing::info!(node = %self.config.node, %partition, epoch = %holding.epoch, permits = tenure.permits(), "handing lease off");
                self.contain("on_handing_off", |callbacks| {
                    callbacks.on_handing_off(&tenure.snapshot())
                });
                self.shared
                    .announce(|| LeaseEvent::HandingOff(tenure.snapshot()));
            }
            let Handoff::Draining { until } = handoff else {
                continue;
            };
            if tenure.permits() == 0 || self.config.controls.release_ignores_permits {
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
        // Decided once for the batch: a drain adopted while the writes are on their way
        // changes neither what they say nor what is remembered of them.
        let leaving = self.draining || self.winding_down();
        let mut writes = Vec::new();
        let mut late = BTreeMap::new();
        for partition in partitions {
            let Some(holding) = self.holdings.get(&partition) else {
                continue;
            };
            let mut record = holding.record.clone();
            record.state = LeaseState::Released;
            record.owner = None;
            record.session = None;
            // The node it is handed to, if any: the others leave it to that node for a while.
            // The node the partition goes back to should it come back: this one when it
            // leaves (drains, stops) or lets the partition go to anyone; when it hands the
            // partition to a member while staying (to balance, or back to where it was), the
            // node it came from, so that a move for balance does not erase where the
            // partition lived before its holder went away.
            record.handed_to = self.returning.get(&partition).cloned();
            if record.handed_to.is_none() || leaving {
                record.previous_owner = Some(self.config.node.clone());
            }
            // Restarting in place: handed to this node's own name, which marks it reserved
            // (`LeaseRecord::is_reserved`): the process starting next under the name takes
            // it back at once, the others only after the group's restart window.
            if self.restarting {
                record.reserve_for(&self.config.node);
            }
            // The load stays: it is the partition's, and tells the next taker what it takes on.
            record.written_at_unix_ms = written_at;
            writes.push(LeaseWrite {
                partition,
                record,
                mode: PutMode::Update(holding.version.clone()),
            });
            if let Some(renewals) = self.late_renewals.get(&partition) {
                late.insert(partition, renewals.clone());
            }
            self.lose(partition, LossReason::Released, now);
        }
        if writes.is_empty() {
            return;
        }
        let mut outcome = self.put_leases(&writes).await;
        if let Ok(results) = &mut outcome {
            self.release_over_late_renewals(&mut writes, results, late)
                .await;
        }
        let failed = match &outcome {
            Ok(results) => results.iter().filter(|r| r.is_err()).count(),
            Err(_) => writes.len(),
        };
        if let (Ok(results), false) = (&outcome, leaving) {
            for (write, result) in writes.iter().zip(results) {
                if let Ok(version) = result {
                    let bounces = self.bounces.remove(&write.partition).unwrap_or(0);
                    self.released
                        .insert(write.partition, (version.clone(), bounces));
                }
            }
        }
        let written = writes.len() - failed;
        self.record(|metrics| {
            metrics.releases.inc_by(written as u64);
        });
        if failed > 0 {
            // Not fatal: an unreleased lease simply expires and is taken after acquire_after.
            tracing::warn!(node = %self.config.node, failed, "some releases were not written");
        }
    }

    /// Deletes this node's member record on the way out, before its releases, so that the
    /// others stop counting it at once and take what it releases as their own share.
    ///
    /// Only this process's own record goes, and never a drain: one rewritten since its last
    /// write is deleted only if it still shows this process's last renewal (an operator's
    /// undrain keeps it). Another process's session under the same name stays, and so does
    /// a record marked draining: the drain is an operator's instruction for when the node
    /// comes back, as it is to [`Runner::forget_dead_members`].
    pub(super) async fn remove_member(&mut self) {
        let outer = std::mem::replace(&mut self.member_call, true);
        self.delete_member_record().await;
        self.member_call = outer;
    }

    async fn delete_member_record(&mut self) {
        if self.draining {
            tracing::info!(node = %self.config.node, "leaving the member record in place, drained, for the node's return");
            self.member_version = None;
            return;
        }
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
                        Err(StoreError::Conflict { .. }) => {
                            Err(store.get_member(&group, &node).await)
                        }
                        other => Ok(other),
                    }
                })
                .await;
            match result {
                Ok(Ok(()) | Err(StoreError::NotFound { .. })) => return,
                Err(Ok(Some(current))) if !self.is_own_member_record(&current.value) => {
                    tracing::info!(node = %self.config.node, "the member record was rewritten by another process or an operator since; left in place");
                    return;
                }
                Err(Ok(Some(current))) if attempt == 0 => version = current.version,
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

    /// Whether `record`, read under this node's name, still shows this process's last
    /// renewal of it (acknowledged, or sent since and unanswered), and no drain.
    fn is_own_member_record(&self, record: &crate::MemberRecord) -> bool {
        // The window holds the last acknowledged write's stamp and those sent since: a write
        // whose reply was lost may have landed after the acknowledged one.
        self.member_stamp.is_some()
            && record
                .written_at_unix_ms
                .is_some_and(|stamp| self.member_stamps.contains(&stamp))
            && (!self.session_mode() || record.session == Some(self.session_id))
            && !record.draining
    }
}
