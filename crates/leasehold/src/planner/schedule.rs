//! When to read the table, apart from reading it: the scan schedule is a second pure decision
//! beside [`plan`](super::plan). It is told instants and events (a scan began, a listing
//! arrived, a notice came, a write failed) and answers when the next scan is due and what it
//! must read; the runner does the reading.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Backoff, Jitter};
use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::record::LeaseState;
use crate::store::Change;
use crate::types::Version;

use super::{MemberShare, Observed};

mod listing;
mod scan_cause;

use listing::ListingBackoff;
pub use listing::ListingCause;
pub use scan_cause::ScanCause;

/// A change notice brings the next scan forward to this soon, coalescing bursts.
const CHANGE_DEBOUNCE: Duration = Duration::from_millis(5);
/// Scans brought forward by notices start at least this fraction of the scan interval
/// apart: a fleet starting together, or rebalancing, sends a burst of hints, and every node
/// answering each one at once would read the table N² times.
const NOTICE_SCAN_GAP_DIVISOR: u32 = 10;
/// The same for a release, which is what a quick hand-off waits for: a shorter gap.
const RELEASE_SCAN_GAP_DIVISOR: u32 = 50;
/// ...unless the group is large: every node short of its share hears every release, and
/// one of them taking the row is all it needs. The gap grows to this fraction of the scan
/// interval per member, so that the fleet's scans brought forward by releases stay under
/// this many per scan interval (member listings of the whole group each); from this many
/// members on, a release waits for the next scheduled scan.
const RELEASE_SCANS_PER_INTERVAL: u32 = 500;
/// The most scans a node of a starting fleet waits for the others to register before it
/// takes anything: a minute at the default scan interval.
pub const MAX_START_WAITS: u32 = 6;
/// The most rows named by notices that a settled node reads one by one instead of the whole
/// table: beyond this many, one listing costs the store less.
pub const MAX_ROW_READS: usize = 32;

/// What a scan reads once it has the member records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Nothing more, and it plans nothing: the fleet is starting (see
    /// [`ScanSchedule::reading`]), the node is settled and nothing in the table can be
    /// waiting for it, or its last listing timed out and the next must wait (see
    /// [`ScanSchedule::listing_failed`]).
    MembersOnly,
    /// Nothing more: it plans on the lease view it has, to take the next batch of its share.
    View,
    /// The lease table, then it plans on that.
    Leases,
    /// Only the rows of this node's own stripe ([`own_stripe`](super::own_stripe)), instead
    /// of the table it has never read, then it plans on them. A fleet of a thousand nodes
    /// starting together would otherwise each read all 65,536 rows at once, and a store
    /// serving those listings has little left for the writes that keep leases alive. Nodes
    /// that agree on the membership take disjoint stripes that cover the table; a node
    /// reads its stripe again while its takes from it all succeed, and once it holds the
    /// stripe, it has nothing left to do. One whose stripe leaves it short (rows held by
    /// others, or a race lost) reads the table at its next scan, as every later reading
    /// does.
    Stripe,
    /// Only the rows that notices named as released or offline since the last reading
    /// ([`ScanSchedule::take_rows_due`]), then it plans on the view they update. A fleet
    /// of a thousand nodes hears of every hand-off; each reading a handful of rows instead of
    /// the whole table keeps a hand-off from costing the store a thousand listings.
    Rows,
}

impl Reading {
    /// Whether the scan makes a plan after reading.
    pub fn plans(self) -> bool {
        self != Reading::MembersOnly
    }
}

/// How the takes of one plan went, for [`ScanSchedule::took`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takes {
    /// How many partitions the plan set out to take.
    pub planned: usize,
    /// How many of them the node now holds.
    pub taken: usize,
    /// How many of them another node wrote first (a compare-and-set conflict): races for a
    /// free row, lost.
    pub lost_races: usize,
    /// How many of them lay outside the node's [`Stripe`](super::Stripe).
    pub off_stripe: u32,
    /// Whether the same plan also released leases.
    pub released: bool,
    /// How many leases the node holds now.
    pub held: usize,
    /// How many it should hold.
    pub target: u32,
}

/// When a node scans its group's table and how much of it each scan reads.
///
/// Like [`plan`](super::plan), it never reads a clock and does no I/O: every method takes the
/// instant it applies at, and the draws that spread scans apart come from the caller's
/// [`SeededRng`], so a simulation replays exactly.
///
/// ```
/// use std::time::Duration;
/// use leasehold::SeededRng;
/// use leasehold::planner::ScanSchedule;
/// use leasehold::{NodeId, ParticipantConfig};
///
/// let config = ParticipantConfig::new(NodeId::new("a").unwrap(), 64);
/// let start = tokio::time::Instant::now();
/// let mut schedule = ScanSchedule::new(start);
/// assert!(schedule.is_due(start));
/// schedule.scan_started(start);
/// schedule.scan_succeeded(start, &config, &mut SeededRng::new(7));
/// assert!(schedule.next_scan() >= start + Duration::from_secs(9));
/// ```
#[derive(Debug, Clone)]
pub struct ScanSchedule {
    next_scan: Instant,
    /// Why the next scan is due when it is.
    scan_cause: ScanCause,
    last_scan: Option<Instant>,
    /// Scans failed in a row: each doubles the wait, up to
    /// [`ParticipantConfig::max_scan_backoff`].
    failures: u32,
    /// The last member write failed: the next one that succeeds shows the store is back.
    member_write_failing: bool,
    /// The next scan must read the lease table, whatever else it finds.
    leases_due: bool,
    /// What first set `leases_due` since the last reading of the table.
    due_for: ListingCause,
    /// Why the last scan that read the table did.
    listing_cause: Option<ListingCause>,
    /// When the table may be listed again after listings that timed out.
    listing: ListingBackoff,
    /// Rows that notices named as released or offline since the last reading: a node that
    /// skips the table reads these (see [`Reading::Rows`]).
    rows_due: std::collections::BTreeSet<crate::types::PartitionId>,
    /// Rows named as released or offline since the last listing: a notice that one of them
    /// is held again makes it due again, to see who took it.
    vacated: std::collections::BTreeSet<crate::types::PartitionId>,
    /// When a settled node reads the lease table again regardless: `relist_after` after
    /// the last reading, spread by the jitter so that a fleet which settled together does
    /// not read the whole table together.
    relist_at: Option<Instant>,
    /// Whether the last plan left nothing to do (see [`Plan::settled`](super::Plan::settled)).
    settled: bool,
    /// Whether the next scan may plan on the view it has instead of reading the lease table
    /// (see [`ScanSchedule::took`]).
    ramping: bool,
    /// Whether the last plan's takes all succeeded, all in this node's stripe, with nothing
    /// released (see [`ScanSchedule::took`]).
    took_whole: bool,
    /// Whether this node has scanned at all.
    joined: bool,
    /// Scans this node has waited for its fleet to register, and how many member records
    /// the last of them showed (see [`ScanSchedule::fleet_starting`]).
    start_waits: u32,
    members_at_start: usize,
    /// The live membership the last lease listing was planned with.
    membership: Vec<MemberShare>,
    /// How many member records the last scan read.
    members_seen: usize,
    /// The version of the operator's record ([`NodeId::operator`](crate::NodeId::operator))
    /// when the lease table was last read: an operator command changed the table since if it
    /// differs.
    operator_mark: Option<Version>,
}

impl ScanSchedule {
    /// A node starting at `now`: it scans at once, and reads the lease table.
    pub fn new(now: Instant) -> ScanSchedule {
        ScanSchedule {
            next_scan: now,
            scan_cause: ScanCause::Start,
            last_scan: None,
            failures: 0,
            member_write_failing: false,
            leases_due: true,
            due_for: ListingCause::Start,
            listing_cause: None,
            listing: ListingBackoff::default(),
            rows_due: std::collections::BTreeSet::new(),
            vacated: std::collections::BTreeSet::new(),
            relist_at: None,
            settled: false,
            ramping: false,
            took_whole: false,
            joined: false,
            start_waits: 0,
            members_at_start: 0,
            membership: Vec::new(),
            members_seen: 0,
            operator_mark: None,
        }
    }

    /// When the next scan is due.
    pub fn next_scan(&self) -> Instant {
        self.next_scan
    }

    /// Why the next scan is due when it is.
    pub fn scan_cause(&self) -> ScanCause {
        self.scan_cause
    }

    /// Whether a scan is due at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        now >= self.next_scan
    }

    /// Whether the next scan must read the lease table whatever else it finds.
    pub fn leases_due(&self) -> bool {
        self.leases_due
    }

    /// When a settled node reads the lease table again although nothing asked for it.
    pub fn relist_at(&self) -> Option<Instant> {
        self.relist_at
    }

    /// How many scans failed in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Makes the next scan read the lease table for `cause` (a take failed, a race was lost,
    /// a notice named too many rows, …): the view of some row is out of date. The first cause
    /// since the last reading is the one counted.
    pub fn want_leases(&mut self, cause: ListingCause) {
        if !self.leases_due {
            self.leases_due = true;
            self.due_for = cause;
        }
    }

    /// The scan's reading of the table, or of rows notices named, failed: the next one reads
    /// the table.
    pub fn reading_failed(&mut self) {
        self.leases_due = true;
        self.due_for = ListingCause::ReadFailed;
    }

    /// A listing of the table failed at `now` with `error`: the next scan reads the table,
    /// but one that timed out or was throttled waits for the listing back-off first (see
    /// [`ParticipantConfig::max_listing_backoff`]), a draw from `rng`. Returns that wait.
    pub fn listing_failed(
        &mut self,
        now: Instant,
        error: &crate::error::StoreError,
        config: &ParticipantConfig,
        rng: &mut SeededRng,
    ) -> Option<Duration> {
        self.reading_failed();
        self.listing.failed(now, error, config, rng)
    }

    /// A listing of the whole table arrived: the listing back-off starts again.
    pub fn listing_succeeded(&mut self) {
        self.listing.succeeded();
    }

    /// When the next listing of the table may start, while listings that timed out hold it
    /// back.
    pub fn listing_retry_at(&self) -> Option<Instant> {
        self.listing.retry_at()
    }

    /// Why the last scan that read the whole table ([`Reading::Leases`]) did.
    pub fn listing_cause(&self) -> Option<ListingCause> {
        self.listing_cause
    }

    /// Brings the next scan forward for a change that may free a partition or change the
    /// membership. Renewals and member heartbeats change nothing to act on; and a scan that
    /// is backing off from a failing or throttling store stays backed off.
    pub fn change_noticed(&mut self, now: Instant, change: &Change, config: &ParticipantConfig) {
        if let Change::LeaseWritten {
            partition,
            state: LeaseState::Held,
        } = change
        {
            // A row read as vacated, taken since: read again, so that the view counts it
            // with its taker (a view that shows it free would count a member short).
            if self.vacated.remove(partition) && !self.leases_due {
                self.rows_due.insert(*partition);
            }
            return;
        }
        if matches!(change, Change::MemberUpdated(_)) {
            return;
        }
        // A member created or deleted, or notices lost: a node that may skip the table reads
        // the member records soon, and the table only if what it reads asks for it (a live
        // membership changed, its plan unsettled). Sent to the table by the notice itself,
        // every node of a fleet would read it for each node that registers again, and all
        // at once whenever the store's notices lapse.
        let hinted =
            matches!(change, Change::Member(_) | Change::Unknown) && !config.relist_after.is_zero();
        // A released or offline row, named: a node that may skip the table reads that row
        // alone, unless so many are named that one listing is cheaper.
        let named = match change {
            Change::LeaseWritten { partition, .. } if !config.relist_after.is_zero() => {
                Some(*partition)
            }
            _ => None,
        };
        match named {
            _ if hinted => {}
            Some(partition)
                if !self.leases_due
                    && self.rows_due.len() < MAX_ROW_READS
                    && self.vacated.len() < 4 * MAX_ROW_READS =>
            {
                self.rows_due.insert(partition);
                self.vacated.insert(partition);
                // A settled node is at its target: a freed row is for the nodes below theirs,
                // which read the table on their own. It reads the row at its next scan, where
                // it finds a row nobody else took; brought forward, every node of a fleet
                // would read every row of a rebalance at once.
                if self.settled {
                    return;
                }
            }
            _ => {
                self.want_leases(ListingCause::Notice);
                self.rows_due.clear();
                self.vacated.clear();
            }
        }
        if self.failures > 0 {
            return;
        }
        let mut soon = now + CHANGE_DEBOUNCE;
        let interval = config.scan_interval;
        let (gap, cause) = match change {
            Change::LeaseWritten {
                state: LeaseState::Released,
                ..
            } => {
                let members = u32::try_from(self.members_seen).unwrap_or(u32::MAX);
                let per_fleet = interval.saturating_mul(members) / RELEASE_SCANS_PER_INTERVAL;
                let gap = (interval / RELEASE_SCAN_GAP_DIVISOR).max(per_fleet);
                (gap, ScanCause::Release)
            }
            _ => (interval / NOTICE_SCAN_GAP_DIVISOR, ScanCause::Notice),
        };
        if let Some(last) = self.last_scan {
            soon = soon.max(last + gap);
        }
        self.bring_forward(soon, cause);
    }

    /// Moves the next scan to `at` if that is sooner, for `cause`.
    fn bring_forward(&mut self, at: Instant, cause: ScanCause) {
        if at < self.next_scan {
            self.next_scan = at;
            self.scan_cause = cause;
        }
    }

    /// A scan begins at `now`.
    pub fn scan_started(&mut self, now: Instant) {
        self.last_scan = Some(now);
    }

    /// Decides what a scan reads after the member records it read at `now` into `observed`.
    /// `draining` is this node's own drain state.
    pub fn reading(
        &mut self,
        now: Instant,
        observed: &Observed,
        config: &ParticipantConfig,
        draining: bool,
    ) -> Reading {
        self.members_seen = observed.members.len();
        // Only a node that may skip the table compares memberships.
        let same_members = !config.relist_after.is_zero()
            && observed.membership_is(now, config, draining, &self.membership);
        if self.fleet_starting(observed, config) {
            Reading::MembersOnly
        } else if self.plan_on_view(now, observed, config, same_members) {
            Reading::View
        } else if let Some(cause) = self.leases_wanted(now, observed, config, same_members) {
            if self.stripe_will_do(observed, config, same_members) {
                Reading::Stripe
            } else if self.listing.waiting(now) {
                // An old view would only send compare-and-sets bound to fail. A draining
                // node takes nothing: what it releases it knows without the table, and it
                // must not wait out the back-off to hand its partitions off.
                if draining {
                    Reading::View
                } else {
                    Reading::MembersOnly
                }
            } else {
                self.listing_cause = Some(cause);
                Reading::Leases
            }
        } else if !self.rows_due.is_empty() {
            // With session leases a held row's wait runs on its holder's member record, read
            // every scan, so the rest of an old view still judges it right. Per partition it
            // runs on the row's version, which every renewal changes: an old view would make
            // held rows look abandoned, so the node reads the table.
            match observed.lease_mode {
                crate::group::LeaseMode::Session => Reading::Rows,
                crate::group::LeaseMode::PerPartition => {
                    self.listing_cause = Some(ListingCause::Rows);
                    Reading::Leases
                }
            }
        } else {
            Reading::MembersOnly
        }
    }

    /// The rows a [`Reading::Rows`] reads, in partition order; they are no longer due. A
    /// reading that fails asks for the whole table instead ([`ScanSchedule::want_leases`]).
    pub fn take_rows_due(&mut self) -> Vec<crate::types::PartitionId> {
        std::mem::take(&mut self.rows_due).into_iter().collect()
    }

    /// The lease table, or this node's stripe of it ([`Reading::Stripe`]), was read into
    /// `observed`, arriving at `now`, after the member records read at `members_at`. A node
    /// that may skip later readings notes the membership it will plan with, and when it reads
    /// the table again regardless (a draw from `rng`).
    pub fn leases_listed(
        &mut self,
        now: Instant,
        members_at: Instant,
        observed: &Observed,
        config: &ParticipantConfig,
        draining: bool,
        rng: &mut SeededRng,
    ) {
        if !config.relist_after.is_zero() {
            let membership = observed.membership(members_at, config, draining);
            self.relist_at = Some(now + relist_wait(config, membership.len(), rng));
            self.membership = membership;
        }
        self.leases_due = false;
        self.rows_due.clear();
        self.vacated.clear();
        self.operator_mark = observed.operator_mark.clone();
    }

    /// A scan ended well at `now`: the next one comes a scan interval later, spread by the
    /// jitter (a draw from `rng`).
    pub fn scan_succeeded(
        &mut self,
        now: Instant,
        config: &ParticipantConfig,
        rng: &mut SeededRng,
    ) {
        self.failures = 0;
        self.next_scan = now + rng.spread(config.scan_interval, config.jitter);
        self.scan_cause = ScanCause::Interval;
    }

    /// A scan failed at `now`: the next waits twice as long as the last, up to
    /// [`ParticipantConfig::max_scan_backoff`], spread by the jitter (a draw from `rng`).
    /// Returns the wait before the spread.
    pub fn scan_failed(
        &mut self,
        now: Instant,
        config: &ParticipantConfig,
        rng: &mut SeededRng,
    ) -> Duration {
        let mut backoff = Backoff::new(
            config.scan_interval.saturating_mul(2),
            config.max_scan_backoff(),
        )
        .jitter(Jitter::Spread(config.jitter))
        .after_failures(self.failures);
        self.next_scan = now + backoff.failed_jittered(rng);
        self.scan_cause = ScanCause::Retry;
        self.failures = backoff.failures();
        backoff.ceiling(self.failures)
    }

    /// A write of the member record failed.
    pub fn member_write_failed(&mut self) {
        self.member_write_failing = true;
    }

    /// A write of the member record succeeded at `now`. After failed ones, while scans were
    /// failing too, an outage is over: the back-off ends and the next scan comes at once, to
    /// find what expired meanwhile.
    pub fn member_written(&mut self, now: Instant) {
        if std::mem::take(&mut self.member_write_failing) && self.failures > 0 {
            self.failures = 0;
            self.bring_forward(now + CHANGE_DEBOUNCE, ScanCause::Recovered);
        }
    }

    /// A plan was made; `settled` says it left nothing to do (see
    /// [`Plan::settled`](super::Plan::settled)) and no hand-off is under way.
    pub fn planned(&mut self, settled: bool) {
        self.settled = settled;
        self.ramping = false;
        self.took_whole = false;
    }

    /// The leases held changed outside a plan (one was lost, or a hand-off began): the node
    /// is no longer settled, and its view no longer fit to plan on.
    pub fn holdings_changed(&mut self) {
        self.settled = false;
        self.ramping = false;
        self.took_whole = false;
    }

    /// The takes of the last plan ended. The next scan may plan on the view it has if they
    /// were a full batch ([`ParticipantConfig::max_acquires_per_scan`]) that all succeeded,
    /// all in the node's stripe, with nothing released, and more are wanted.
    ///
    /// A node still below its target that lost a race for a free row scans again as soon as
    /// after a release: nodes released to at once pick rows at random, and the winner's write
    /// is a renewal-like hint that wakes nobody, so the loser would otherwise wait a whole
    /// scan interval while the row it wanted is gone and another free one waits for it.
    pub fn took(&mut self, takes: &Takes, config: &ParticipantConfig) {
        self.took_whole = takes.planned > 0
            && takes.taken == takes.planned
            && takes.off_stripe == 0
            && !takes.released;
        self.ramping = self.took_whole
            && takes.planned >= config.max_acquires_per_scan as usize
            && takes.held < takes.target as usize;
        if takes.lost_races > 0 && takes.held < takes.target as usize && self.failures == 0 {
            self.want_leases(ListingCause::LostRace);
            if let Some(last) = self.last_scan {
                let soon = last + config.scan_interval / RELEASE_SCAN_GAP_DIVISOR;
                self.bring_forward(soon, ScanCause::LostRace);
            }
        }
    }

    /// Whether this node's stripe is all a reading of the table needs: it has never read the
    /// table, or its view holds only its stripe and its last plan's takes all succeeded, in
    /// a membership unchanged since (to take the rest of the stripe once the view is older
    /// than `acquire_after`, or to see that nothing is left in it). A plan that takes
    /// nothing, or loses a race, sends the node to the table.
    fn stripe_will_do(
        &self,
        observed: &Observed,
        config: &ParticipantConfig,
        same_members: bool,
    ) -> bool {
        if config.relist_after.is_zero() {
            return false;
        }
        observed.listed_at.is_none()
            || (observed.partial
                && self.took_whole
                && !self.leases_due
                && same_members
                && observed.operator_mark == self.operator_mark)
    }

    /// Whether this is the first scan of a node on a large table whose fleet is starting
    /// with it: every member it sees has written its record once or twice. It then takes
    /// nothing until its next scan, once the others have registered too, so that every node
    /// counts the same members and takes its own stripe, where a node counting only those
    /// that beat it to the store would take rows the stripes give others. While the member
    /// records keep growing in number from one scan to the next (a store slow to answer
    /// registers a large fleet over several scans), it waits again, up to
    /// [`MAX_START_WAITS`] scans. A node joining a running fleet does not wait.
    fn fleet_starting(&mut self, observed: &Observed, config: &ParticipantConfig) -> bool {
        let first = !std::mem::replace(&mut self.joined, true);
        let count = observed.members.len();
        let previous = std::mem::replace(&mut self.members_at_start, count);
        let wait = if first {
            !config.relist_after.is_zero()
                && observed.members.iter().all(|seen| seen.heartbeat <= 2)
        } else {
            // Waiting, it has read nothing but member records.
            self.start_waits > 0 && self.start_waits < MAX_START_WAITS && count != previous
        };
        if wait {
            self.start_waits += 1;
        } else {
            self.start_waits = 0;
        }
        wait
    }

    /// Whether this scan should plan on the view it has, without reading the lease table: a
    /// node taking its share batch by batch (see [`ParticipantConfig::max_acquires_per_scan`])
    /// whose last batch all succeeded, in a membership that has not changed since its last
    /// reading, not older than `acquire_after` (so no record seen held in it can have come
    /// to look abandoned). Members take their own stripes of the table first
    /// ([`Stripe`](super::Stripe)), so such a view rarely offers a row another node took
    /// since; a take that fails sends the next scan back to the table. Never with a zero
    /// `relist_after`, which promises a reading every scan.
    fn plan_on_view(
        &self,
        now: Instant,
        observed: &Observed,
        config: &ParticipantConfig,
        same_members: bool,
    ) -> bool {
        self.ramping
            && !config.relist_after.is_zero()
            && !self.leases_due
            && same_members
            && observed.operator_mark == self.operator_mark
            && observed
                .listed_at
                .is_some_and(|at| now < at + config.acquire_after)
    }

    /// Whether this scan should read the lease table. Always with a zero
    /// [`ParticipantConfig::relist_after`]. Otherwise only when it may hold something to act
    /// on: the last plan was not settled, the membership (and so every target) changed, a
    /// notice or a lost lease asked for it, an operator command changed the table, a member
    /// missed a heartbeat, or `relist_after` has passed.
    ///
    /// A missed heartbeat matters because a crashed member's leases become takeable
    /// `acquire_after` after a survivor first sees their last versions: the survivors read
    /// the table as soon as its member record stops changing, not only once it stops counting
    /// live.
    fn leases_wanted(
        &self,
        now: Instant,
        observed: &Observed,
        config: &ParticipantConfig,
        same_members: bool,
    ) -> Option<ListingCause> {
        let cause = if config.relist_after.is_zero() {
            ListingCause::EveryScan
        } else if self.leases_due {
            self.due_for
        } else if !self.settled {
            ListingCause::Unsettled
        } else if !same_members {
            ListingCause::Membership
        } else if observed.operator_mark != self.operator_mark {
            ListingCause::Operator
        } else if self.relist_at.is_none_or(|at| at <= now) {
            ListingCause::Periodic
        } else if missed_heartbeat(now, observed, config) {
            ListingCause::MissedHeartbeat
        } else {
            return None;
        };
        Some(cause)
    }
}

/// Whether a member other than `config.node` has missed a heartbeat as `observed` shows it
/// at `now`. A member rewrites its record at least every heartbeat; one that has looked the
/// same for longer has missed one, until it stops counting live altogether.
///
/// With session leases a silent member's leases wait on its member record, which every scan
/// reads, from its last renewal seen: none can be taken before `acquire_after` of silence.
/// Reading the table sooner would find nothing to take, and a fleet whose store is busy
/// misses heartbeats all the time: a thousand nodes each reading the table at every
/// missed heartbeat is what keeps such a store busy.
fn missed_heartbeat(now: Instant, observed: &Observed, config: &ParticipantConfig) -> bool {
    let mut missed = config.heartbeat + config.heartbeat / 20;
    if observed.lease_mode == crate::group::LeaseMode::Session {
        missed = missed.max(config.acquire_after);
    }
    let Some(missed_since) = now.checked_sub(missed) else {
        return false;
    };
    let silent_since = now.checked_sub(config.member_timeout());
    observed.members.others(&config.node).any(|seen| {
        seen.first_seen <= missed_since && silent_since.is_none_or(|at| at < seen.first_seen)
    })
}

/// How long a settled node waits before reading the lease table regardless: `relist_after ×
/// live members`, spread by half either way. The fleet as a whole then reads it about every
/// `relist_after`, at scattered moments, whatever its size: one reading by any node finds
/// what nothing signalled (a row it sees free it takes, or watches until taken), so a
/// thousand nodes need not each read 65,536 rows to find it.
fn relist_wait(config: &ParticipantConfig, live_members: usize, rng: &mut SeededRng) -> Duration {
    let live = u32::try_from(live_members.max(1)).unwrap_or(u32::MAX);
    let period = config.relist_after.saturating_mul(live);
    rng.spread(period, 0.5)
}

#[cfg(test)]
mod tests;
