//! Change feeds of the SQLite store: a thread per feed polls the file for commits.
//!
//! SQLite has no notification that reaches other processes, but `PRAGMA data_version` on a
//! connection moves whenever another connection, of this process or any other, commits to
//! the file. A read-only connection asks it every [change poll
//! interval](crate::SqliteOptions::change_poll_interval), and when it moves, reads what
//! changed in the group ([`GroupWatch`]).

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use leasehold::backoff::Backoff;
use leasehold::{Change, ChangeFeed, GroupName, LeaseState, StoreError};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::changes::GroupWatch;
use crate::options::SqliteOptions;

/// The wait before the first retry after a failed poll; each failure in a row doubles it.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(50);
/// The longest wait between retries: a broken file costs one attempt every two seconds, and
/// hints resume at most that long after it is readable again.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// After reading a group's rows, the poller rests at least this many times as long as the
/// read took, less one: on a large group under a stream of commits, the watcher then uses
/// at most about a tenth of a core. Checking an idle file takes microseconds, far below it.
const LOOK_SHARE_DIVISOR: u32 = 10;

/// Starts polling `path` for changes to `group`. Returns once the first look is taken, so
/// every commit that completes afterwards is reported.
pub(crate) async fn start(
    path: &Path,
    options: &SqliteOptions,
    group: &GroupName,
) -> Result<ChangeFeed, StoreError> {
    let (feed, _poller) = start_polling(path, options, group).await?;
    Ok(feed)
}

/// [`start`], also returning the polling thread, which ends once the feed is dropped.
pub(crate) async fn start_polling(
    path: &Path,
    options: &SqliteOptions,
    group: &GroupName,
) -> Result<(ChangeFeed, JoinHandle<()>), StoreError> {
    let limit = options.call_timeout_limit();
    let busy_timeout = options.busy_timeout_limit().min(limit);
    let (path, group) = (path.to_owned(), group.clone());
    let label = format!("group {group} in {}", path.display());
    let opening = tokio::task::spawn_blocking(move || {
        let watch = GroupWatch::open(&path, &group, busy_timeout)?;
        Ok::<_, StoreError>(FileSource {
            path,
            group,
            busy_timeout,
            watch: Some(watch),
        })
    });
    let source = match tokio::time::timeout(limit, opening).await {
        Ok(joined) => joined.map_err(|error| {
            StoreError::unavailable("the thread opening the change watch failed", error)
        })??,
        Err(_) => return Err(StoreError::Timeout(limit)),
    };
    spawn(source, options.change_poll_period(), label)
}

/// Where a poller finds its hints: the file, or a stand-in in tests.
trait Source: Send + 'static {
    /// The hints since the last call. After an error, the next call starts over.
    fn changes(&mut self) -> Result<Vec<Change>, StoreError>;
}

struct FileSource {
    path: PathBuf,
    group: GroupName,
    busy_timeout: Duration,
    watch: Option<GroupWatch>,
}

impl Source for FileSource {
    fn changes(&mut self) -> Result<Vec<Change>, StoreError> {
        let Some(watch) = self.watch.as_mut() else {
            self.watch = Some(GroupWatch::open(
                &self.path,
                &self.group,
                self.busy_timeout,
            )?);
            // Commits made while the file could not be read went unseen.
            return Ok(vec![Change::Unknown]);
        };
        let changes = watch.changes();
        if changes.is_err() {
            // A new connection also finds a file that was replaced under the old one.
            self.watch = None;
        }
        changes
    }
}

// A thread of its own rather than `spawn_blocking` for each poll: a feed lives as long as its
// participant and polls about two hundred times a second, so it would keep a pooled thread
// busy for good anyway, and each poll would add a runtime timer, a hand-off to the pool and
// a wake-up back on the runtime to the one wake-up a sleeping thread costs. Needing no
// runtime, notices are not held up by a busy one either. The thread ends at its next tick
// once the feed, which owns the receiver, is dropped: there is nothing to abort.
fn spawn<S: Source>(
    source: S,
    interval: Duration,
    label: String,
) -> Result<(ChangeFeed, JoinHandle<()>), StoreError> {
    let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
    let poller = Poller {
        source,
        outbox: Outbox::new(sender),
        interval,
        retries: Retries::default(),
        label,
    };
    let thread = std::thread::Builder::new()
        .name("leasehold-watch".to_owned())
        .spawn(move || poller.run())
        .map_err(|error| StoreError::unavailable("starting the change watch thread", error))?;
    Ok((ChangeFeed::new(receiver, None), thread))
}

struct Poller<S> {
    source: S,
    outbox: Outbox,
    interval: Duration,
    retries: Retries,
    label: String,
}

impl<S: Source> Poller<S> {
    /// Polls until the feed is dropped. Failures never end it: the feed stays open and
    /// silent while they last, and its reader scans on its own schedule meanwhile.
    fn run(mut self) {
        let mut next_look = Instant::now();
        loop {
            std::thread::sleep(self.interval);
            if !self.outbox.flush() {
                return;
            }
            let started = Instant::now();
            if started < next_look {
                continue;
            }
            match self.source.changes() {
                Ok(changes) => {
                    self.retries.succeeded(&self.label);
                    if !self.outbox.deliver(changes) {
                        return;
                    }
                    next_look = Instant::now() + started.elapsed() * (LOOK_SHARE_DIVISOR - 1);
                }
                Err(error) => {
                    next_look = Instant::now() + self.retries.failed(&self.label, &error);
                }
            }
        }
    }
}

/// Failed polls in a row, logged once per outage, and the waits they call for.
#[derive(Debug)]
struct Retries(Backoff);

impl Default for Retries {
    fn default() -> Retries {
        Retries(Backoff::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY))
    }
}

impl Retries {
    fn failed(&mut self, label: &str, error: &StoreError) -> Duration {
        let delay = self.0.failed();
        // One warning per outage: while it lasts, the store's own calls fail and say so.
        if self.0.failures() == 1 {
            tracing::warn!(
                watch = label,
                %error,
                "polling for changes failed; retrying with back-off, \
                 and readers scan on their own schedule meanwhile"
            );
        } else {
            tracing::debug!(
                watch = label,
                %error,
                failures = self.0.failures(),
                ?delay,
                "polling for changes failed again"
            );
        }
        delay
    }

    fn succeeded(&mut self, label: &str) {
        if self.0.failures() > 0 {
            tracing::info!(
                watch = label,
                failures = self.0.failures(),
                "polling for changes works again"
            );
            self.0.succeeded();
        }
    }
}

/// Whether a participant ignores `change` (see [`Change`]): renewals and heartbeats.
fn is_routine(change: &Change) -> bool {
    matches!(
        change,
        Change::LeaseWritten {
            state: LeaseState::Held,
            ..
        } | Change::MemberUpdated(_)
    )
}

/// The sending side of a feed, which never waits for its reader: what does not fit is
/// coalesced into one [`Change::Unknown`], sent as soon as there is room.
#[derive(Debug)]
struct Outbox {
    sender: mpsc::Sender<Change>,
    /// A [`Change::Unknown`] is owed: hints were left out since the reader last had room.
    owed: bool,
}

impl Outbox {
    fn new(sender: mpsc::Sender<Change>) -> Outbox {
        Outbox {
            sender,
            owed: false,
        }
    }

    /// Sends what is owed, if there is room. False once the reader has gone.
    fn flush(&mut self) -> bool {
        if self.sender.is_closed() {
            return false;
        }
        if self.owed {
            match self.sender.try_send(Change::Unknown) {
                Ok(()) => self.owed = false,
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Closed(_)) => return false,
            }
        }
        true
    }

    /// Offers `changes` without waiting. False once the reader has gone.
    fn deliver(&mut self, mut changes: Vec<Change>) -> bool {
        if changes.contains(&Change::Unknown) {
            // The reader will re-read everything, so the named hints would add nothing.
            changes = vec![Change::Unknown];
        }
        if self.owed || changes.is_empty() {
            // An owed Unknown covers these too: the reader will re-read everything.
            return self.flush();
        }
        let room = self.sender.capacity();
        if changes.len() > room {
            // Readers skip renewals and heartbeats, so those are the first to leave out; a
            // large group's renewal batch then sends nothing instead of waking every reader.
            changes.retain(|change| !is_routine(change));
        }
        if changes.len() > room {
            self.owed = true;
            return self.flush();
        }
        for change in changes {
            match self.sender.try_send(change) {
                Ok(()) => {}
                Err(TrySendError::Closed(_)) => return false,
                // Only this thread sends, so the room counted above is still there.
                Err(TrySendError::Full(_)) => {
                    self.owed = true;
                    return self.flush();
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use leasehold::{NodeId, PartitionId};

    use super::*;

    const WAIT_LIMIT: Duration = Duration::from_secs(5);

    fn written(partition: u32, state: LeaseState) -> Change {
        Change::LeaseWritten {
            partition: PartitionId(partition),
            state,
        }
    }

    #[test]
    fn retries_back_off_exponentially_up_to_the_cap() {
        let mut retries = Retries::default();
        let error = StoreError::Timeout(Duration::from_secs(1));
        let delays: Vec<_> = (1..=8).map(|_| retries.failed("test", &error)).collect();
        let millis = |ms| Duration::from_millis(ms);
        assert_eq!(
            delays,
            [50, 100, 200, 400, 800, 1600, 2000, 2000].map(millis)
        );
        retries.succeeded("test");
        assert_eq!(retries.failed("test", &error), FIRST_RETRY_DELAY);
    }

    #[test]
    fn a_lagging_reader_gets_one_unknown_hint_not_a_backlog() {
        let (sender, mut receiver) = mpsc::channel(2);
        let mut outbox = Outbox::new(sender);
        assert!(outbox.deliver(vec![Change::Lease(PartitionId(1))]));
        assert!(outbox.deliver(vec![Change::Lease(PartitionId(2))]));
        // Full: these are coalesced, and the poller goes on without waiting.
        assert!(outbox.deliver(vec![Change::Lease(PartitionId(3))]));
        assert!(outbox.deliver(vec![written(4, LeaseState::Released)]));
        assert!(outbox.flush());
        assert_eq!(receiver.try_recv(), Ok(Change::Lease(PartitionId(1))));
        assert!(outbox.flush());
        assert_eq!(receiver.try_recv(), Ok(Change::Lease(PartitionId(2))));
        assert_eq!(receiver.try_recv(), Ok(Change::Unknown));
        assert!(
            receiver.try_recv().is_err(),
            "one hint for all that was left out"
        );
    }

    #[test]
    fn renewals_are_left_out_first_when_a_batch_does_not_fit() {
        let (sender, mut receiver) = mpsc::channel(2);
        let mut outbox = Outbox::new(sender);
        let node = NodeId::new("node-1").unwrap();
        let mut batch: Vec<_> = (0..10).map(|p| written(p, LeaseState::Held)).collect();
        batch.push(Change::MemberUpdated(node));
        batch.push(written(10, LeaseState::Released));
        assert!(outbox.deliver(batch));
        assert_eq!(receiver.try_recv(), Ok(written(10, LeaseState::Released)));
        assert!(receiver.try_recv().is_err());
        // A renewal that fits is still reported as what it is.
        assert!(outbox.deliver(vec![written(0, LeaseState::Held)]));
        assert_eq!(receiver.try_recv(), Ok(written(0, LeaseState::Held)));
    }

    #[test]
    fn a_dropped_reader_stops_the_outbox() {
        let (sender, receiver) = mpsc::channel(2);
        let mut outbox = Outbox::new(sender);
        drop(receiver);
        assert!(!outbox.flush());
        assert!(!outbox.deliver(vec![Change::Unknown]));
    }

    /// Answers from a script, then no changes; counts the calls.
    struct Scripted {
        answers: VecDeque<Result<Vec<Change>, StoreError>>,
        calls: Arc<Mutex<u32>>,
    }

    impl Source for Scripted {
        fn changes(&mut self) -> Result<Vec<Change>, StoreError> {
            *self.calls.lock().unwrap() += 1;
            self.answers.pop_front().unwrap_or(Ok(Vec::new()))
        }
    }

    fn failure() -> StoreError {
        StoreError::Unavailable {
            message: "the file could not be read".to_owned(),
            source: None,
        }
    }

    #[tokio::test]
    async fn failed_polls_are_retried_and_hints_resume() {
        let calls = Arc::new(Mutex::new(0));
        let source = Scripted {
            answers: VecDeque::from([
                Err(failure()),
                Err(failure()),
                Err(failure()),
                Ok(vec![Change::Unknown]),
            ]),
            calls: Arc::clone(&calls),
        };
        let (mut feed, thread) = spawn(source, Duration::from_millis(1), "test".into()).unwrap();
        let hint = tokio::time::timeout(WAIT_LIMIT, feed.next()).await;
        assert_eq!(hint, Ok(Some(Change::Unknown)));
        assert!(*calls.lock().unwrap() >= 4);
        drop(feed);
        wait_until_finished(&thread).await;
    }

    #[tokio::test]
    async fn dropping_the_feed_ends_the_thread() {
        let source = Scripted {
            answers: VecDeque::new(),
            calls: Arc::default(),
        };
        let (feed, thread) = spawn(source, Duration::from_millis(1), "test".into()).unwrap();
        assert!(!thread.is_finished());
        drop(feed);
        wait_until_finished(&thread).await;
    }

    #[tokio::test]
    async fn a_feed_on_a_file_polls_until_dropped() {
        let directory = tempfile::tempdir().unwrap();
        let store = crate::SqliteStore::open(directory.path().join("watch.db"))
            .await
            .unwrap();
        let group = GroupName::new("orders").unwrap();
        let (feed, thread) = start_polling(store.path(), store.options(), &group)
            .await
            .unwrap();
        assert!(!thread.is_finished());
        drop(feed);
        wait_until_finished(&thread).await;
    }

    async fn wait_until_finished(thread: &JoinHandle<()>) {
        let started = Instant::now();
        while !thread.is_finished() {
            assert!(
                started.elapsed() < WAIT_LIMIT,
                "the polling thread still runs {WAIT_LIMIT:?} after its feed was dropped"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
