//! What the planner reads and what it returns.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::record::LeaseRecord;
use crate::types::{NodeId, PartitionId, Version};

use super::{Holding, Observed, SessionSeen};

/// One compare-and-set that would take a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Acquisition {
    /// The partition to take.
    pub partition: PartitionId,
    /// The version observed, which must still be current for the write to succeed.
    pub expected: Version,
    /// With session leases, the holder's session as this node waited on it: the take
    /// changes the session in the same transaction, conditional on its version, and only
    /// while the session still shows the renewal waited on. The holder's next renewal then
    /// fails, and it re-reads what it holds.
    pub session: Option<SessionSeen>,
    /// The record to write: owner = this node, state held, and an epoch above any seen on the
    /// partition and the group's floor ([`LeaseView::next_epoch`](super::LeaseView::next_epoch)).
    pub record: LeaseRecord,
    /// With session leases, the ended session the lease was taken under, when the take
    /// relies on that session having ended ([`Observed::ended_session`]): the record is read
    /// again first, and written only if it still names that very session.
    pub ended_session: Option<u64>,
}

/// What the runner should do now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Leases whose validity has run out: stop serving them now.
    pub drop: Vec<PartitionId>,
    /// Leases still valid and serving, to renew at the heartbeat (leases being handed off
    /// are renewed too, apart from these, while they wait for their work in flight).
    pub renew: Vec<PartitionId>,
    /// Leases to hand off cooperatively: stop work, then write them released.
    pub release: Vec<PartitionId>,
    /// Of `release`, those handed back to the node that held them before this one, a live
    /// member below its target (it came back under its name): written released naming it,
    /// so that it takes them first.
    pub return_to: BTreeMap<PartitionId, NodeId>,
    /// Partitions to take now.
    pub acquire: Vec<Acquisition>,
    /// How many partitions this node should hold.
    pub target: u32,
    /// How many members were counted live, this node included.
    pub live_members: usize,
    /// The next instant at which a wanted partition becomes takeable, if any: the runner
    /// sets a timer for it instead of waiting for the next scan.
    pub wake_at: Option<Instant>,
    /// Partitions in the view that some node could take now (released, or left unrenewed
    /// for `acquire_after`), whether or not this node may: while any remain, the table is
    /// worth reading again.
    pub takeable: u32,
    /// Records in the view that still name this node as holder although it does not hold
    /// them: a lease that ran out during a pause, a write whose reply was lost, a previous
    /// process under the same name. They become takeable after `acquire_after`, and this
    /// node may be the only one watching them.
    pub disowned: u32,
    /// How many of `acquire` lie outside this node's [`Stripe`](super::Stripe): rows other nodes take
    /// first, which a view not read just now may show free when they are not.
    pub off_stripe: u32,
    /// Of `release`, how many hand off load to balance it and count against the churn
    /// budget ([`ParticipantConfig::churn_budget`]).
    pub shed: u32,
    /// This node's load and fair share of the fleet's, when the application reports load.
    pub load: Option<(f64, f64)>,
    /// Load above this node's [`ParticipantConfig::max_load`] that no member has room for.
    pub load_spillover: f64,
    /// With session leases, records that name this node although it does not hold them,
    /// whose wait has run out (see [`Observed::held_since`]): whatever wrote them — a
    /// previous process under this name, a lease that ran out here, a write whose reply was
    /// lost — has stopped. This node's session would keep them alive for ever, so it writes
    /// them released, each on the version seen.
    pub clear: Vec<(PartitionId, Version)>,
}

impl Plan {
    /// Whether this node has nothing to do until something changes: at its target, with no
    /// hand-off, take or timer pending and no partition left free in its view. A settled
    /// node need not read the lease table again until the membership changes (see
    /// [`ParticipantConfig::relist_after`]).
    pub fn settled(&self) -> bool {
        self.acquire.is_empty()
            && self.release.is_empty()
            && self.clear.is_empty()
            && self.wake_at.is_none()
            && self.takeable == 0
            && self.disowned == 0
            && self.renew.len() == self.target as usize
    }
}

/// Everything the planner reads.
#[derive(Debug)]
pub struct PlanInput<'a> {
    /// The current instant on this node's clock.
    pub now: Instant,
    /// This node's configuration.
    pub config: &'a ParticipantConfig,
    /// This node's view of the table.
    pub observed: &'a Observed,
    /// The leases this node holds.
    pub holdings: &'a BTreeMap<PartitionId, Holding>,
    /// Whether this node has been asked to drain.
    pub draining: bool,
    /// How many more partitions this node may move to balance load within the current
    /// churn window ([`ParticipantConfig::churn_budget`]).
    pub load_moves_left: u32,
}
