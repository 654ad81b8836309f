//! Joining a group: before it takes anything, a node checks that it fits the group record
//! ([`crate::GroupRecord`]) — the format, the lease mode and the timings every node must fit.

use std::sync::Arc;

use crate::admin::{self, AdminError};
use crate::backoff::Backoff;
use crate::error::StoreError;
use crate::group::{GroupMismatch, GroupRecord, GroupTimings};

use super::runner::{Command, Runner};

/// Why a check of the group record did not admit this node.
enum Failure {
    /// The node does not fit the group: final.
    Refused(GroupMismatch),
    /// The store could not be read or written, or kept changing: tried again after a pause.
    Store(AdminError),
}

impl From<AdminError> for Failure {
    fn from(error: AdminError) -> Self {
        match error {
            AdminError::Group(mismatch) => Failure::Refused(mismatch),
            other => Failure::Store(other),
        }
    }
}

impl Runner {
    /// Checks this node against the group record and registers its member record, retrying
    /// with back-off while the store fails. Returns whether the node may go on; a refusal is
    /// published for [`crate::Participant::join`] and the task ends.
    ///
    /// The record is checked once before the member record is written, so that a node that
    /// does not fit never shows up as a member, and once after: a change of the group's
    /// timings ([`crate::admin::set_timings`]) writes its pending timings before it reads the
    /// members, so either it sees this node or this node sees its pending timings.
    pub(super) async fn join(&mut self) -> bool {
        // Store calls here are made directly: nothing is held yet, and no heartbeat may write
        // the member record before the first check.
        self.beating = true;
        let mut backoff = Backoff::new(self.config.scan_interval, self.config.max_scan_backoff());
        let outcome = loop {
            let checked = self.check_and_register().await;
            if let Some(halt) = self.halted.take() {
                // Another process took this name over while this one was registering: it
                // stops rather than try again, which would write over the newer session.
                self.beating = false;
                self.publish_halt(halt);
                return false;
            }
            match checked {
                Ok(()) => break Ok(()),
                Err(Failure::Refused(mismatch)) => break Err(mismatch),
                Err(Failure::Store(error)) => {
                    tracing::warn!(node = %self.config.node, %error, "could not read the group record; trying again");
                }
            }
            let wait = self.clock.sleep_until(self.clock.now() + backoff.failed());
            tokio::select! {
                command = self.commands.recv() => {
                    if let Some(Command::Shutdown { done, .. }) = command {
                        self.remove_member().await;
                        let _ = done.send(());
                    }
                    self.beating = false;
                    return false;
                }
                _ = wait => {}
            }
        };
        self.beating = false;
        match outcome {
            Ok(()) => {
                self.shared.joined.send_replace(Some(Ok(())));
                true
            }
            Err(mismatch) => {
                tracing::error!(node = %self.config.node, error = %mismatch, "refused by the group record");
                self.publish_halt(mismatch.into());
                false
            }
        }
    }

    async fn check_and_register(&mut self) -> Result<(), Failure> {
        self.admitted().await?;
        self.write_member().await;
        if self.member_version.is_none() {
            return Err(Failure::Store(AdminError::Store(StoreError::Unavailable {
                message: "the member record could not be written".to_owned(),
                source: None,
            })));
        }
        if let Err(failure) = self.admitted().await {
            if matches!(failure, Failure::Refused(_)) {
                self.remove_member().await;
            }
            return Err(failure);
        }
        Ok(())
    }

    /// Reads the group record (creating it, or adopting this node's timings when it sets
    /// none) and checks this node against it; keeps its epoch floor for acquisitions.
    async fn admitted(&mut self) -> Result<(), Failure> {
        let group = self.group_record().await?;
        if !self.config.controls.skip_group_check {
            group.admits(&self.config).map_err(Failure::Refused)?;
        }
        // The mode is the group's, fixed for as long as this node runs: a node that renewed
        // one way while the others take the other way would be unsafe.
        if self.member_syncs > 0 && group.lease_mode != self.observed.lease_mode {
            return Err(Failure::Refused(GroupMismatch::LeaseMode {
                group: self.config.group.clone(),
                mode: group.lease_mode,
            }));
        }
        // A destroy raises the generation before it deletes anything: a node that joined
        // before it stops rather than register again into what is built again after it.
        match self.generation {
            Some(joined) if joined != group.generation => {
                return Err(Failure::Refused(GroupMismatch::Destroyed {
                    group: self.config.group.clone(),
                    joined,
                    current: group.generation,
                }))
            }
            _ => self.generation = Some(group.generation),
        }
        self.observed.lease_mode = group.lease_mode;
        self.observed.restart_window = group.restart_window(self.config.acquire_after);
        self.observed.leases.set_epoch_floor(group.epoch_floor);
        Ok(())
    }

    /// The group record, adopting this node's timings if it sets none yet (a group built out
    /// before its first node joined).
    async fn group_record(&mut self) -> Result<GroupRecord, Failure> {
        let (store, group) = (Arc::clone(&self.store), self.config.group.clone());
        let own = GroupTimings::of(&self.config);
        let (record, adopted) = self
            .call(async move { admin::adopt_timings(&*store, &group, own).await })
            .await?;
        if adopted {
            tracing::info!(node = %self.config.node, group = %self.config.group, timings = %own, "the group adopts this node's timings");
        }
        Ok(record)
    }

    /// After this node had to register again (its member record was deleted while it was
    /// away, which a long pause allows), the group's timings may have changed meanwhile:
    /// checks again, and stops the node if it no longer fits.
    pub(super) async fn check_again(&mut self) {
        match self.admitted().await {
            Ok(()) => {}
            Err(Failure::Refused(mismatch)) => {
                tracing::error!(node = %self.config.node, error = %mismatch, "no longer fits the group record; stopping");
                self.halted = Some(mismatch.into());
            }
            Err(Failure::Store(error)) => {
                // Checked at the next registration, or the next attempt.
                tracing::warn!(node = %self.config.node, %error, "could not check the group record again");
                self.recheck_group = true;
            }
        }
    }
}
