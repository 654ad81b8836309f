//! A router that follows its store: change notices, re-reads, and polls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::StoreError;
use crate::record::LeaseState;
use crate::store::{Change, ChangeFeed};
use crate::types::PartitionId;

use super::table::Table;
use super::Router;

/// Aborts the follower when the last router sharing it is dropped.
#[derive(Debug)]
pub(super) struct FollowerTask(pub(super) tokio::task::AbortHandle);

impl Drop for FollowerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The background task of a router made by [`Router::follow`]. It alone reads the change
/// feed; its memory is bounded by the group's partition count.
pub(super) struct Follower {
    pub(super) table: Arc<Table>,
    pub(super) poll_interval: Duration,
    pub(super) feed: Option<ChangeFeed>,
    /// When to ask the store for a feed again, after asking failed or a feed ended.
    pub(super) rewatch_at: Option<Instant>,
    /// Partitions a notice said were written released or offline: nobody serves them.
    pub(super) vacated: BTreeSet<PartitionId>,
    /// Partitions a notice said were written, to re-read one by one; at most
    /// [`Router::MAX_REREADS`].
    pub(super) rereads: BTreeSet<PartitionId>,
    /// Notices taken from the feed since the follower last acted on them.
    pub(super) unread: usize,
    /// The whole map must be reloaded: a notice named nothing, or too many partitions, or
    /// notices may have been lost.
    pub(super) reload_due: bool,
    /// A member record was created or deleted: the addresses must be read again.
    pub(super) members_due: bool,
    pub(super) last_reload: Instant,
    /// After failed store calls: no store call before this instant.
    pub(super) backoff_until: Option<Instant>,
    /// Store calls failed in a row, and the waits they call for.
    pub(super) retries: Backoff,
}

impl Follower {
    pub(super) fn new(
        table: Arc<Table>,
        poll_interval: Duration,
        feed: Option<ChangeFeed>,
        rewatch_at: Option<Instant>,
        loaded_at: Instant,
    ) -> Follower {
        Follower {
            table,
            poll_interval,
            feed,
            rewatch_at,
            vacated: BTreeSet::new(),
            rereads: BTreeSet::new(),
            unread: 0,
            reload_due: false,
            members_due: false,
            last_reload: loaded_at,
            backoff_until: None,
            retries: Backoff::new(Router::MIN_RELOAD_INTERVAL, Router::MAX_BACKOFF),
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            let due = self.next_due(Instant::now());
            // Notices first, and every notice already waiting before acting on any, so that
            // a burst costs one new map; but never more than a feed's capacity at once, so
            // that a flood cannot starve the reload it calls for.
            tokio::select! {
                biased;
                change = next_change(&mut self.feed), if self.unread < ChangeFeed::CAPACITY => {
                    match change {
                        Some(change) => {
                            self.note(change);
                            continue;
                        }
                        None => self.feed_ended(),
                    }
                }
                () = std::future::ready(()), if self.unread > 0 => {}
                () = tokio::time::sleep_until(due) => {}
            }
            self.act().await;
        }
    }

    pub(super) fn note(&mut self, change: Change) {
        self.unread += 1;
        if self.unread >= ChangeFeed::CAPACITY {
            // A store drops notices while its feed is full: some may be lost.
            self.reload_due = true;
        }
        let partitions = self.table.partitions;
        match change {
            Change::LeaseWritten {
                partition,
                state: LeaseState::Released | LeaseState::Offline,
            } if partition.0 < partitions => {
                self.rereads.remove(&partition);
                self.vacated.insert(partition);
            }
            Change::LeaseWritten {
                partition,
                state: LeaseState::Held,
            } if partition.0 < partitions => {
                // Renewals outnumber every other write by far, and read the same as a
                // takeover: only a lease taken where the map has no owner is worth a read.
                let vacant = self.vacated.remove(&partition)
                    || self.table.owners.load().get(partition).is_none();
                if vacant {
                    self.reread_later(partition);
                }
            }
            Change::Lease(partition) if partition.0 < partitions => {
                self.vacated.remove(&partition);
                self.reread_later(partition);
            }
            // A member that joined or left may bring or take an address; heartbeats do not
            // change one (a member that changes its address while running is read at the
            // next poll).
            Change::Member(_) => self.members_due = true,
            // Strays beyond the group's count are never in the map.
            Change::LeaseWritten { .. } | Change::Lease(_) | Change::MemberUpdated(_) => {}
            Change::Unknown => self.reload_due = true,
        }
    }

    pub(super) fn reread_later(&mut self, partition: PartitionId) {
        if self.reload_due {
            return;
        }
        self.rereads.insert(partition);
        if self.rereads.len() > Router::MAX_REREADS {
            self.rereads.clear();
            self.reload_due = true;
        }
    }

    pub(super) fn feed_ended(&mut self) {
        tracing::warn!(group = %self.table.group, "router: change notices ended; polling");
        self.feed = None;
        self.unread = 0;
        self.reload_due = true;
        self.rewatch_at = Some(Instant::now() + Router::MAX_BACKOFF);
    }

    /// When the follower next has something to do, if no notice comes first.
    pub(super) fn next_due(&self, now: Instant) -> Instant {
        let mut due = self.last_reload + self.poll_interval;
        if self.reload_due {
            due = due.min(self.last_reload + Router::MIN_RELOAD_INTERVAL);
        } else if !self.rereads.is_empty() || self.members_due {
            due = now;
        }
        if let Some(rewatch_at) = self.rewatch_at {
            due = due.min(rewatch_at);
        }
        match self.backoff_until {
            Some(until) => due.max(until),
            None => due,
        }
    }

    pub(super) async fn act(&mut self) {
        self.unread = 0;
        if !self.vacated.is_empty() {
            let vacated = std::mem::take(&mut self.vacated);
            self.table.correct(vacated.into_iter().map(|p| (p, None)));
        }
        let now = Instant::now();
        if self.backoff_until.is_some_and(|until| now < until) {
            return;
        }
        if self.rewatch_at.is_some_and(|at| at <= now) {
            self.rewatch(now).await;
        }
        if now >= self.last_reload + self.poll_interval {
            self.reload_due = true;
        }
        let outcome = if self.reload_due {
            if now < self.last_reload + Router::MIN_RELOAD_INTERVAL {
                return;
            }
            self.reload(now).await
        } else if self.members_due {
            match self.table.refresh_addresses().await {
                Ok(()) => {
                    self.members_due = false;
                    self.reread().await
                }
                Err(error) => Err(error),
            }
        } else {
            self.reread().await
        };
        match outcome {
            Ok(()) => {
                self.retries.succeeded();
                self.backoff_until = None;
            }
            Err(error) => {
                let backoff = self.retries.failed();
                tracing::warn!(group = %self.table.group, %error, ?backoff, "router: could not read the lease table");
                self.backoff_until = Some(Instant::now() + backoff);
            }
        }
    }

    pub(super) async fn reload(&mut self, now: Instant) -> Result<(), StoreError> {
        self.table.refresh().await?;
        // The listing is newer than every notice noted before it was asked for.
        self.reload_due = false;
        self.members_due = false;
        self.rereads.clear();
        self.last_reload = now;
        Ok(())
    }

    pub(super) async fn reread(&mut self) -> Result<(), StoreError> {
        while let Some(partition) = self.rereads.first().copied() {
            self.table.reread(partition).await?;
            self.rereads.remove(&partition);
        }
        Ok(())
    }

    pub(super) async fn rewatch(&mut self, now: Instant) {
        match self.table.store.watch(&self.table.group).await {
            Ok(feed) => {
                self.feed = Some(feed);
                self.rewatch_at = None;
                // Whatever changed while there was no feed is caught up by one reload.
                self.reload_due = true;
            }
            Err(StoreError::NotSupported(_)) => self.rewatch_at = None,
            Err(error) => {
                tracing::warn!(group = %self.table.group, %error, "router: change notices still unavailable; polling");
                self.rewatch_at = Some(now + Router::MAX_BACKOFF);
            }
        }
    }
}

pub(super) async fn next_change(feed: &mut Option<ChangeFeed>) -> Option<Change> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

/// Routers that follow the store: what they pick up by themselves, from change notices or by
/// polling, and what that costs the store.
#[cfg(all(test, feature = "testing"))]
mod follow_tests;
