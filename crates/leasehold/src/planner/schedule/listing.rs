//! Readings of the whole lease table: why a node sets out to make one, and when a node
//! whose last one timed out may try again.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Backoff, Jitter};
use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::error::StoreError;

/// Why a scan reads the whole lease table ([`Reading::Leases`](super::Reading::Leases)): in a large fleet each
/// listing is costly, and the causes, counted, show what sends nodes to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListingCause {
    /// [`ParticipantConfig::relist_after`] is zero: every scan reads the table.
    EveryScan,
    /// The node's last reading of the table, or of rows notices named, failed (a failed
    /// reading of its stripe reads the stripe again).
    ReadFailed,
    /// The node has not read the table since it started.
    Start,
    /// A take, or a release of a record left by an earlier process, failed or its outcome is
    /// unknown: the view of its row is out of date.
    WriteFailed,
    /// A race for a row was lost while the node is below its target: others are taking,
    /// and the view shows rows free that are not.
    LostRace,
    /// A change notice named more rows than are worth reading one by one, or did not say
    /// which.
    Notice,
    /// A lease this node held was found changed behind its back when its session was read
    /// again.
    HoldingChanged,
    /// The last plan left something to do.
    Unsettled,
    /// The live membership changed since the last reading (and with it every target).
    Membership,
    /// An operator command changed the table.
    Operator,
    /// The node's periodic reading ([`ParticipantConfig::relist_after`]).
    Periodic,
    /// A member missed a heartbeat: its leases may soon be free.
    MissedHeartbeat,
    /// Per partition, rows that notices named: an old view would show held rows abandoned.
    Rows,
}

impl ListingCause {
    /// Every cause, in order.
    pub const ALL: [ListingCause; 13] = [
        ListingCause::EveryScan,
        ListingCause::ReadFailed,
        ListingCause::Start,
        ListingCause::WriteFailed,
        ListingCause::LostRace,
        ListingCause::Notice,
        ListingCause::HoldingChanged,
        ListingCause::Unsettled,
        ListingCause::Membership,
        ListingCause::Operator,
        ListingCause::Periodic,
        ListingCause::MissedHeartbeat,
        ListingCause::Rows,
    ];

    /// The cause's name, as metrics and reports show it.
    pub fn name(self) -> &'static str {
        match self {
            ListingCause::EveryScan => "every_scan",
            ListingCause::ReadFailed => "read_failed",
            ListingCause::Start => "start",
            ListingCause::WriteFailed => "write_failed",
            ListingCause::LostRace => "lost_race",
            ListingCause::Notice => "notice",
            ListingCause::HoldingChanged => "holding_changed",
            ListingCause::Unsettled => "unsettled",
            ListingCause::Membership => "membership",
            ListingCause::Operator => "operator",
            ListingCause::Periodic => "periodic",
            ListingCause::MissedHeartbeat => "missed_heartbeat",
            ListingCause::Rows => "rows",
        }
    }
}

/// When a node whose listings of the table timed out or were throttled may list it again.
///
/// Such a failure says the store is up but cannot give this node the whole table now: it is
/// busy, often with the listings of other nodes. Retried at the scan back-off (at most
/// [`ParticipantConfig::max_scan_backoff`]), a thousand nodes each asking for 65,536 rows
/// every 40 s ask for more than a busy store can send, fail again, and never leave that
/// state. So a listing that failed this way is retried after a back-off of its own: half
/// of [`ParticipantConfig::max_listing_backoff`] after the first such failure, all of it
/// after the next ones. Both grow with the table, so a failing node asks its store for
/// about as many rows a second whatever the table's size: 20 s and then 40 s up to 4,096
/// partitions (two scan intervals, then the scan back-off's ceiling), 320 s and then 640 s
/// at 65,536. Meanwhile its scans go on reading member records (and its stripe, while
/// it is taking that), and renewals keep their schedule. A store that refuses or cannot be
/// reached is not this: the scan back-off alone answers it, and the node reads the table as
/// soon as the store is back.
#[derive(Debug, Clone, Default)]
pub(super) struct ListingBackoff {
    /// Listings in a row that timed out or were throttled.
    failures: u32,
    /// No listing before this instant.
    retry_at: Option<Instant>,
}

impl ListingBackoff {
    /// A listing failed at `now` with `error`. Returns the wait before the next listing when
    /// the failure asks for one (a draw from `rng`).
    pub(super) fn failed(
        &mut self,
        now: Instant,
        error: &StoreError,
        config: &ParticipantConfig,
        rng: &mut SeededRng,
    ) -> Option<Duration> {
        if !matches!(error, StoreError::Timeout(_) | StoreError::Throttled { .. }) {
            return None;
        }
        // From half the ceiling: a first failure on a large table already says the fleet
        // asks for more rows than the store sends, and retries at the scan back-off's pace
        // would keep asking (two scan intervals, as before, on a table read every scan).
        let ceiling = config.max_listing_backoff();
        let mut backoff = Backoff::new(ceiling / 2, ceiling)
            .jitter(Jitter::Spread(config.jitter))
            .after_failures(self.failures);
        let wait = backoff.failed_jittered(rng);
        self.failures = backoff.failures();
        self.retry_at = Some(now + wait);
        Some(wait)
    }

    /// A listing arrived: the next failure waits the least again.
    pub(super) fn succeeded(&mut self) {
        *self = ListingBackoff::default();
    }

    /// Whether a listing must wait at `now`.
    pub(super) fn waiting(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|at| now < at)
    }

    /// When the next listing may start, if it must wait.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

#[cfg(test)]
mod tests;
