//! Releasing the records that still name this node although it holds them no longer: with
//! session leases nothing else would ever free them. A record under another session than
//! this process's may be a newer process's under the same name, which this one, paused or
//! cut off, has not heard of yet: it is released only while the name's member record still
//! shows this process's session, in the same transaction.

use std::sync::Arc;

use crate::error::StoreError;
use crate::planner::{self, session_tag};
use crate::record::{LeaseRecord, LeaseState, StoredMember};
use crate::store::{LeaseStore, LeaseWrite, PutMode, TxnWrite};
use crate::types::RecordKey;
use crate::types::{GroupName, NodeId, PartitionId, Version};

use super::runner::Runner;

impl Runner {
    /// Writes released the records that name this node although it holds them no longer
    /// ([`crate::planner::Plan::clear`]): with session leases nothing else would ever free
    /// them. Nothing runs under them here, and whatever ran under them elsewhere has stopped.
    pub(super) async fn clear(&mut self, rows: Vec<(PartitionId, Version)>) {
        let written_at = self.write_stamp();
        let writes: Vec<LeaseWrite> = rows
            .into_iter()
            .filter_map(|(partition, version)| {
                let seen = self.observed.leases.get(partition)?;
                let record = LeaseRecord {
                    owner: None,
                    epoch: seen.epoch,
                    state: LeaseState::Released,
                    prohibited: self.observed.leases.prohibited(partition).to_vec(),
                    load: seen.load().map(f64::from),
                    previous_owner: Some(self.config.node.clone()),
                    written_at_unix_ms: written_at,
                    ..LeaseRecord::default()
                };
                Some(LeaseWrite {
                    partition,
                    record,
                    mode: PutMode::Update(version),
                })
            })
            .collect();
        tracing::info!(node = %self.config.node, rows = writes.len(), "releasing records that still name this node");
        let results = self.put_clears(&writes).await;
        let results = self
            .settle("release of a stale record", writes, results)
            .await;
        for (write, result) in results {
            match result {
                Ok(version) => {
                    let now = self.clock.now();
                    self.observed
                        .leases
                        .insert(write.partition, &write.record, version, now);
                }
                Err(_) => {
                    self.observed.leases.forget(write.partition);
                    self.schedule
                        .want_leases(crate::planner::ListingCause::WriteFailed);
                }
            }
        }
    }

    /// With session leases, on the way out: writes released the records of leases lost here
    /// whose deadline has passed and that still name this node under the epoch and session
    /// they were lost with (a hand-off whose work outlived the drain timeout, say). Nothing
    /// runs under them any more, and once the session is deleted the others would wait
    /// `acquire_after` from seeing it gone before taking them.
    ///
    /// A record rewritten since this node last read it (an operator's note on a release that
    /// was never written, say) fails the first write's compare-and-set; with no scan to come
    /// on the way out, those rows are read again and released once more if they still name
    /// this node so.
    pub(super) async fn clear_lost(&mut self) {
        let rows = self.lost_rows_named();
        if rows.is_empty() {
            return;
        }
        self.clear(rows).await;
        // A failed write leaves its row out of the view (see `clear`).
        let unsure: Vec<PartitionId> = self
            .lost_due()
            .filter(|partition| self.observed.leases.get(*partition).is_none())
            .collect();
        if unsure.is_empty() {
            return;
        }
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let read = self
            .call(async move { store.get_leases(&group, &unsure).await })
            .await;
        let Ok(rows) = read else {
            return;
        };
        let now = self.clock.now();
        self.observed.observe_rows(now, rows);
        let rows = self.lost_rows_named();
        if !rows.is_empty() {
            self.clear(rows).await;
        }
    }

    /// The leases lost here whose deadline has passed.
    fn lost_due(&self) -> impl Iterator<Item = PartitionId> + '_ {
        let now = self.clock.now();
        self.observed
            .lost
            .iter()
            .filter(move |(_, (_, _, deadline))| *deadline <= now)
            .map(|(partition, _)| *partition)
    }

    /// Of the leases lost here whose deadline has passed, the rows the view shows still
    /// naming this node as it held them (see [`planner::lost_rows_named`]).
    fn lost_rows_named(&self) -> Vec<(PartitionId, Version)> {
        planner::lost_rows_named(self.clock.now(), &self.config.node, &self.observed)
    }

    /// Writes the releases of [`Runner::clear`]. Records under this process's current
    /// session go as they are; the others only with the name's member record, in one
    /// transaction each (see the module's comment).
    async fn put_clears(
        &mut self,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let own = session_tag(Some(self.session_id));
        let foreign = writes.iter().any(|write| {
            self.observed
                .leases
                .get(write.partition)
                .is_none_or(|seen| seen.session != own)
        });
        if !foreign {
            return self.put_leases(writes).await;
        }
        let (store, group, node) = (
            Arc::clone(&self.store),
            self.config.group.clone(),
            self.config.node.clone(),
        );
        let (session, batch) = (self.session_id, writes.to_vec());
        let cleared = self
            .call(async move { clear_under_session(&*store, &group, &node, session, batch).await })
            .await?;
        // The transactions rewrote the member record as it was: the next renewal starts
        // from the version they left, unless a renewal meanwhile has moved it on already.
        if let Some((read, written)) = cleared.member_versions {
            if self.member_version.as_ref() == Some(&read) {
                self.member_version = Some(written);
            }
        }
        Ok(cleared.results)
    }
}

/// What [`clear_under_session`] did.
struct Cleared {
    /// One result per write.
    results: Vec<Result<Version, StoreError>>,
    /// The member record's version as read, and as the transactions left it, if any wrote.
    member_versions: Option<(Version, Version)>,
}

/// How many times one batch of [`clear_under_session`] reads the member record again after
/// finding it renewed meanwhile by this very process (its heartbeat runs while the batch
/// waits on the store) before leaving the rest to the next scan.
const MEMBER_REREADS: usize = 3;

/// Each of `writes` in a transaction with `node`'s member record, rewritten as it stands,
/// made only while that record shows `session`. A record showing another session (or none)
/// means another process has taken the name over: nothing more is written.
async fn clear_under_session(
    store: &dyn LeaseStore,
    group: &GroupName,
    node: &NodeId,
    session: u64,
    writes: Vec<LeaseWrite>,
) -> Result<Cleared, StoreError> {
    let replaced = || StoreError::Conflict {
        key: RecordKey::Member(node.clone()),
    };
    let refused = |count: usize| (0..count).map(|_| Err(replaced())).collect();
    let ours = |member: Option<StoredMember>| member.filter(|m| m.value.session == Some(session));
    let Some(mut member) = ours(store.get_member(group, node).await?) else {
        return Ok(Cleared {
            results: refused(writes.len()),
            member_versions: None,
        });
    };
    let mut read = member.version.clone();
    let mut version = member.version.clone();
    let mut rereads = 0;
    let mut results = Vec::with_capacity(writes.len());
    let mut pending = writes.iter().peekable();
    while let Some(write) = pending.peek() {
        let txn = [
            TxnWrite::Lease((*write).clone()),
            TxnWrite::Member {
                node: node.clone(),
                record: member.value.clone(),
                mode: PutMode::Update(version.clone()),
            },
        ];
        match store.transact(group, &txn).await {
            Ok(versions) => match <[Version; 2]>::try_from(versions) {
                Ok([lease, written]) => {
                    version = written;
                    results.push(Ok(lease));
                }
                Err(_) => results.push(Err(StoreError::Unavailable {
                    message: "the store answered a transaction with the wrong number of versions"
                        .to_owned(),
                    source: None,
                })),
            },
            // The member record changed since it was read: this process's own renewal, made
            // while the batch waited, or another process that has taken the name over. Only
            // a record that still shows this session lets the rest go on.
            Err(StoreError::Conflict { key }) if key == RecordKey::Member(node.clone()) => {
                let again = match rereads < MEMBER_REREADS {
                    true => ours(store.get_member(group, node).await?),
                    false => None,
                };
                rereads += 1;
                match again {
                    Some(current) => {
                        read = current.version.clone();
                        version = current.version.clone();
                        member = current;
                        continue;
                    }
                    None => {
                        results.extend(refused(pending.len()));
                        break;
                    }
                }
            }
            Err(error) => results.push(Err(error)),
        }
        pending.next();
    }
    let member_versions = (version != read).then_some((read, version));
    Ok(Cleared {
        results,
        member_versions,
    })
}

#[cfg(all(test, feature = "testing"))]
mod tests;
