//! Why a scan runs when it does: a scan interval after the last, after a failure's back-off,
//! or brought forward by a notice, a lost race or a store answering again. Counted, the causes
//! show what makes a fleet scan more often than its interval, each scan reading every member
//! record.

/// Why a scan ran when it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScanCause {
    /// The node's first scan.
    Start,
    /// A scan interval after the last scan that succeeded.
    Interval,
    /// After the back-off of a failed scan.
    Retry,
    /// Brought forward by a change notice: a member created or deleted, a row offline or
    /// taken, or notices lost.
    Notice,
    /// Brought forward by a notice of a released row, with a shorter gap: what a quick
    /// hand-off waits for.
    Release,
    /// Brought forward after a race for a free row was lost below target.
    LostRace,
    /// Brought forward when a member write succeeded after failed ones while scans failed
    /// too: the store is back, and what expired meanwhile is found at once.
    Recovered,
}

impl ScanCause {
    /// Every cause, in order.
    pub const ALL: [ScanCause; 7] = [
        ScanCause::Start,
        ScanCause::Interval,
        ScanCause::Retry,
        ScanCause::Notice,
        ScanCause::Release,
        ScanCause::LostRace,
        ScanCause::Recovered,
    ];

    /// The cause's name, as reports show it.
    pub fn name(self) -> &'static str {
        match self {
            ScanCause::Start => "start",
            ScanCause::Interval => "interval",
            ScanCause::Retry => "retry",
            ScanCause::Notice => "notice",
            ScanCause::Release => "release",
            ScanCause::LostRace => "lost_race",
            ScanCause::Recovered => "recovered",
        }
    }
}
