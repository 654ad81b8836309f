//! How a [`SqliteStore`](crate::SqliteStore) opens and uses its database file.

use std::time::Duration;

use leasehold::StoreError;

/// How hard SQLite works to keep a committed write through a power loss or an OS crash
/// (`PRAGMA synchronous`). Either way a commit survives the crash of the writing process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is flushed to disk before the write returns (`synchronous=FULL`).
    ///
    /// The default: a lease write that has been reported done stays done even if the machine
    /// loses power, so an epoch handed out as a fencing token is never handed out again.
    #[default]
    Full,
    /// Commits are flushed at checkpoints only (`synchronous=NORMAL`): faster, but the last
    /// commits before a power loss may be rolled back, and with them epochs that were
    /// already handed out. Choose it only when fencing tokens do not leave the machine.
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Settings for [`SqliteStore::open_with`](crate::SqliteStore::open_with).
///
/// # Time limits
///
/// Every call ends within [`SqliteOptions::call_timeout`], and a write that ran out of time
/// does not commit afterwards: waiting for the write lock (at most the busy timeout) stops
/// early enough to leave [`SqliteOptions::write_allowance`] of the call's time for the write
/// itself. So set the call timeout no longer than the time limit callers put on store calls
/// (a participant's `store_timeout`, which wraps the store in a `TimeoutStore`): a call that
/// the caller gave up on has then, as a rule, given up too. Not always: a write that itself
/// outlasts its allowance (its thread starved of CPU, a disk that stalls the sync) commits
/// after the call timed out, which callers must allow for, as participants do.
///
/// ```
/// use std::time::Duration;
/// use leasehold_sqlite::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions::default()
///     .busy_timeout(Duration::from_secs(10))
///     .synchronous(Synchronous::Full)
///     .max_connections(2)
///     .call_timeout(Duration::from_millis(250))
///     .change_poll_interval(Duration::from_millis(20));
/// assert_eq!(options.call_timeout_limit(), Duration::from_millis(250));
/// assert_eq!(options.write_allowance(), Duration::from_millis(62_500) / 1000);
/// assert_eq!(options.change_poll_period(), Duration::from_millis(20));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    busy_timeout: Duration,
    call_timeout: Option<Duration>,
    synchronous: Synchronous,
    max_connections: usize,
    change_poll_interval: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            call_timeout: None,
            synchronous: Synchronous::Full,
            max_connections: 4,
            change_poll_interval: Duration::from_millis(5),
        }
    }
}

impl SqliteOptions {
    /// The most connections one store opens to the file: calls beyond it wait their turn.
    pub const MAX_CONNECTIONS_LIMIT: usize = 64;

    /// The shortest [change poll interval](SqliteOptions::change_poll_interval): polling more
    /// often costs more wake-ups for nothing a participant can use, as it waits a few
    /// milliseconds after a notice before it scans.
    pub const MIN_CHANGE_POLL_INTERVAL: Duration = Duration::from_millis(1);

    /// The longest [change poll interval](SqliteOptions::change_poll_interval): beyond a
    /// second, a notice would often arrive after the scan it was meant to bring forward.
    pub const MAX_CHANGE_POLL_INTERVAL: Duration = Duration::from_secs(1);

    /// How long a call waits for another connection (in this process or another) to finish
    /// its write before failing with [`StoreError::Unavailable`]. Default 5 s. A call waits
    /// less when its call timeout leaves less (see [Time limits](SqliteOptions#time-limits)).
    #[must_use]
    pub fn busy_timeout(mut self, busy_timeout: Duration) -> Self {
        self.busy_timeout = busy_timeout;
        self
    }

    /// The limit on a whole call, waiting for a connection and for the write lock included,
    /// after which it fails with [`StoreError::Timeout`]. Default the busy timeout, which is
    /// also a participant's default `store_timeout`; at most the callers' own limit (see
    /// [Time limits](SqliteOptions#time-limits)).
    #[must_use]
    pub fn call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = Some(call_timeout);
        self
    }

    /// The durability of each commit. Default [`Synchronous::Full`].
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How many connections the store may keep open, so that reads run side by side.
    /// Default 4, at most [`SqliteOptions::MAX_CONNECTIONS_LIMIT`].
    #[must_use]
    pub fn max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// How often a [change feed](leasehold::LeaseStore::watch) checks the file for commits
    /// (`PRAGMA data_version` on a read-only connection of its own). Default 5 ms, between
    /// [`SqliteOptions::MIN_CHANGE_POLL_INTERVAL`] and
    /// [`SqliteOptions::MAX_CHANGE_POLL_INTERVAL`].
    ///
    /// A check of an idle file costs about a microsecond, so the default delivers a notice
    /// within a few milliseconds of the commit for little CPU; a longer interval trades that
    /// delay for fewer wake-ups.
    #[must_use]
    pub fn change_poll_interval(mut self, change_poll_interval: Duration) -> Self {
        self.change_poll_interval = change_poll_interval;
        self
    }

    /// The busy timeout in force.
    pub fn busy_timeout_limit(&self) -> Duration {
        self.busy_timeout
    }

    /// The call timeout in force: the one set, or the busy timeout.
    pub fn call_timeout_limit(&self) -> Duration {
        self.call_timeout.unwrap_or(self.busy_timeout)
    }

    /// The part of the call timeout kept for the write itself once it holds the lock: a
    /// quarter. A commit is an append to the write-ahead log and, with
    /// [`Synchronous::Full`], one flush: milliseconds on a healthy disk, so a quarter of any
    /// sensible call timeout leaves room for a slow flush too.
    pub fn write_allowance(&self) -> Duration {
        self.call_timeout_limit() / 4
    }

    /// The durability in force.
    pub fn synchronous_mode(&self) -> Synchronous {
        self.synchronous
    }

    /// The connection limit in force.
    pub fn connection_limit(&self) -> usize {
        self.max_connections
    }

    /// The change poll interval in force.
    pub fn change_poll_period(&self) -> Duration {
        self.change_poll_interval
    }

    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.max_connections == 0 || self.max_connections > Self::MAX_CONNECTIONS_LIMIT {
            return Err(StoreError::Invalid(format!(
                "max_connections is {}; it must be between 1 and {}",
                self.max_connections,
                Self::MAX_CONNECTIONS_LIMIT
            )));
        }
        let call_timeout = self.call_timeout_limit();
        if call_timeout.is_zero() {
            return Err(StoreError::Invalid(format!(
                "call_timeout {call_timeout:?} must be positive"
            )));
        }
        let interval = self.change_poll_interval;
        if !(Self::MIN_CHANGE_POLL_INTERVAL..=Self::MAX_CHANGE_POLL_INTERVAL).contains(&interval) {
            return Err(StoreError::Invalid(format!(
                "change_poll_interval is {interval:?}; it must be between {:?} and {:?}",
                Self::MIN_CHANGE_POLL_INTERVAL,
                Self::MAX_CHANGE_POLL_INTERVAL
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let options = SqliteOptions::default();
        options.validate().expect("defaults");
        assert_eq!(options.busy_timeout_limit(), Duration::from_secs(5));
        assert_eq!(options.call_timeout_limit(), Duration::from_secs(5));
        assert_eq!(options.synchronous_mode(), Synchronous::Full);
        assert_eq!(options.change_poll_period(), Duration::from_millis(5));
    }

    #[test]
    fn inconsistent_settings_are_refused_with_their_values() {
        let no_time = SqliteOptions::default().call_timeout(Duration::ZERO);
        let message = no_time.validate().unwrap_err().to_string();
        assert!(message.contains("call_timeout 0ns"), "{message}");
        let no_connections = SqliteOptions::default().max_connections(0);
        let message = no_connections.validate().unwrap_err().to_string();
        assert!(message.contains("max_connections is 0"), "{message}");
    }

    #[test]
    fn change_poll_intervals_outside_the_range_are_refused_with_their_value() {
        for (interval, named) in [
            (Duration::ZERO, "change_poll_interval is 0ns"),
            (Duration::from_micros(999), "change_poll_interval is 999µs"),
            (Duration::from_secs(3600), "change_poll_interval is 3600s"),
        ] {
            let options = SqliteOptions::default().change_poll_interval(interval);
            let message = options.validate().unwrap_err().to_string();
            assert!(message.contains(named), "{message}");
            assert!(message.contains("between 1ms and 1s"), "{message}");
        }
        for interval in [
            SqliteOptions::MIN_CHANGE_POLL_INTERVAL,
            SqliteOptions::MAX_CHANGE_POLL_INTERVAL,
        ] {
            let options = SqliteOptions::default().change_poll_interval(interval);
            options.validate().expect("the ends of the range are valid");
        }
    }
}
