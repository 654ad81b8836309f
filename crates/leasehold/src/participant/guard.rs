//! What a participant hands the application: lease guards, loss notices and callbacks.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::types::{Epoch, PartitionId};

/// Proof, checked against the local clock, that this node holds a partition's lease.
///
/// Carries the epoch as a fencing token: pass it along with every write to a resource that
/// can remember the highest epoch it accepted per partition, and the resource can refuse a
/// stale owner even after a pause longer than the lease. Check [`LeaseGuard::is_valid`]
/// again before each state-changing step, not just once.
#[derive(Clone)]
pub struct LeaseGuard {
    partition: PartitionId,
    epoch: Epoch,
    valid_until: Instant,
    clock: Arc<dyn Clock>,
}

impl LeaseGuard {
    pub(crate) fn new(
        partition: PartitionId,
        epoch: Epoch,
        valid_until: Instant,
        clock: Arc<dyn Clock>,
    ) -> LeaseGuard {
        LeaseGuard {
            partition,
            epoch,
            valid_until,
            clock,
        }
    }

    /// The partition this lease is for.
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// The fencing token of this tenure.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The instant, on this node's clock, at which the lease ends unless renewed. A guard is
    /// a snapshot: renewals after it was taken do not move this deadline.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether the deadline is still ahead on this node's clock.
    pub fn is_valid(&self) -> bool {
        self.clock.now() < self.valid_until
    }

    /// Time left before the deadline, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(self.clock.now())
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("partition", &self.partition)
            .field("epoch", &self.epoch)
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// Why a node stopped holding a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The deadline passed without a successful renewal (store slow, down or throttled).
    Expired,
    /// A renewal found the record changed or gone: another node took it, or an operator
    /// kicked, prohibited, took offline or deleted it.
    Conflict,
    /// This node handed it off: rebalancing, draining, [`crate::Participant::release`] or
    /// shutdown.
    Released,
}

impl LossReason {
    /// The lowercase name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "expired",
            LossReason::Conflict => "conflict",
            LossReason::Released => "released",
        }
    }
}

/// A lease this node no longer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the tenure that ended.
    pub epoch: Epoch,
    /// Why it ended.
    pub reason: LossReason,
    /// When this node stopped holding it, on its clock: the deadline for an expiry, the
    /// moment of the decision otherwise.
    pub at: Instant,
}

/// Notifications from a participant to the application.
///
/// Called on the participant's task: keep them short and never block; hand real work to
/// the application's own tasks.
pub trait Callbacks: Send + Sync + 'static {
    /// This node now holds `lease`: start serving the partition.
    fn on_acquired(&self, lease: &LeaseGuard) {
        let _ = lease;
    }

    /// This node no longer holds a lease: stop serving the partition now. For an expiry this
    /// fires at the deadline even if the store is unreachable.
    fn on_lost(&self, loss: &Loss) {
        let _ = loss;
    }

    /// The current load of a held partition, published in its lease record.
    fn load(&self, partition: PartitionId) -> Option<f64> {
        let _ = partition;
        None
    }
}

/// No callbacks: the application polls [`crate::Participant::lease`] instead.
impl Callbacks for () {}

/// Shared callbacks: one value serving several participants.
impl<T: Callbacks + ?Sized> Callbacks for Arc<T> {
    fn on_acquired(&self, lease: &LeaseGuard) {
        (**self).on_acquired(lease)
    }

    fn on_lost(&self, loss: &Loss) {
        (**self).on_lost(loss)
    }

    fn load(&self, partition: PartitionId) -> Option<f64> {
        (**self).load(partition)
    }
}
