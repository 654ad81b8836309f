//! The properties every run must keep, one per file, each stated in its module's doc comment.
//! They are checked at every callback, at every store call a node makes, and at frequent
//! sampling points.

pub mod balance;
pub mod epochs;
pub mod exclusions;
pub mod fencing;
pub mod liveness;
pub mod reservations;
pub mod sessions;
pub mod single_owner;
pub mod work;

use std::fmt;

/// One incarnation of a simulated node: its index in the fleet and its process number,
/// which a restart increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Holder {
    /// The node's index (`n<index>` is its name).
    pub node: usize,
    /// Which process of that node: 1 for the first, +1 per restart.
    pub incarnation: u64,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}#{}", self.node, self.incarnation)
    }
}

/// The invariants, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Invariant {
    /// [`single_owner`]: no two nodes believe they hold one partition at once.
    SingleOwner,
    /// [`epochs`]: epochs strictly increase per partition across acquisitions.
    EpochOrder,
    /// [`fencing`]: what the fenced resources accepted and refused follows the epochs.
    Fencing,
    /// [`liveness`]: once faults stop, every partition is owned within a bound.
    Liveness,
    /// [`balance`]: whenever settled, owned counts differ by at most one.
    Balance,
    /// [`work`]: units of work of two processes on one partition never overlap.
    WorkOverlap,
    /// [`exclusions`]: a node serves no partition its exclusion list names.
    Exclusion,
    /// [`sessions`]: a process ends its own session only after another writer changed it.
    OwnSession,
    /// [`reservations`]: a partition reserved for a restarting node is left to it for the
    /// restart window.
    Reservation,
}

impl Invariant {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::SingleOwner => "single-owner",
            Invariant::EpochOrder => "epoch-order",
            Invariant::Fencing => "fencing",
            Invariant::Liveness => "liveness",
            Invariant::Balance => "balance",
            Invariant::WorkOverlap => "work-overlap",
            Invariant::Exclusion => "exclusion",
            Invariant::OwnSession => "own-session",
            Invariant::Reservation => "reservation",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
