//! Change hints for one group from a persistent recursive ZooKeeper watch.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use leasehold::backoff::Backoff;
use leasehold::{Change, ChangeFeed, GroupName, LeaseRecord, NodeId, PartitionId, StoreError};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use zookeeper_client::{AddWatchMode, EventType, PersistentWatcher, WatchedEvent};

use crate::connection::map_error;
use crate::paths::{parse_partition, GROUP_RECORD};
use crate::shared::Shared;

/// Attempts to watch again after the session expired, about a minute in all, before the feed
/// ends and its reader falls back to polling.
const REWATCH_ATTEMPTS: u32 = 30;
const REWATCH_FIRST_DELAY: Duration = Duration::from_millis(200);
const REWATCH_MAX_DELAY: Duration = Duration::from_secs(2);

/// Reads of written lease znodes in flight per feed; the rows of further events wait their
/// turn, each once however many events name it.
const STATE_READS_IN_FLIGHT: usize = 64;

/// Watches everything under the group's znode (ZooKeeper 3.6 or later) and forwards each
/// event as a hint on a bounded channel, owned by the returned feed.
pub(crate) async fn open(shared: Arc<Shared>, group: GroupName) -> Result<ChangeFeed, StoreError> {
    let path = shared.layout.group(&group);
    let watcher = add_watch(&shared, &path).await?;
    let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
    let task = tokio::spawn(forward(shared, group, path, watcher, sender));
    Ok(ChangeFeed::new(receiver, Some(task.abort_handle())))
}

async fn add_watch(shared: &Shared, path: &str) -> Result<PersistentWatcher, StoreError> {
    shared
        .connection
        .run(|client| async move {
            client
                .watch(path, AddWatchMode::PersistentRecursive)
                .await
                .map_err(map_error)
        })
        .await
}

/// Runs until the feed is dropped (which aborts it, and with it the reads in flight) or the
/// watch cannot be set up again.
///
/// ZooKeeper events carry no data, so a lease event says only that the row was written. A
/// reader told no more must read the row, and a participant told of many rows reads the
/// whole table: in a fleet that takes its partitions, every node would list the table for
/// the takes of the others. So the row is read here, once per event, and the hint carries
/// the state the row holds: a take or a renewal (held) is then nothing to act on, as with
/// the stores whose notices carry the record.
async fn forward(
    shared: Arc<Shared>,
    group: GroupName,
    path: String,
    mut watcher: PersistentWatcher,
    sender: mpsc::Sender<Change>,
) {
    let mut reads = StateReads::new(shared.clone(), group);
    loop {
        let event = tokio::select! {
            Some(change) = reads.next(), if reads.busy() => {
                if !offer(&sender, change) {
                    return;
                }
                continue;
            }
            event = watcher.changed() => event,
        };
        if event.event_type == EventType::Session {
            // Events during a disconnection can be lost (ZOOKEEPER-4698): ask for a re-read.
            if !offer(&sender, Change::Unknown) {
                return;
            }
            if event.session_state.is_terminated() {
                match rewatch(&shared, &path).await {
                    Some(renewed) => watcher = renewed,
                    None => return,
                }
                // Whatever changed while no watch was set went unreported.
                if !offer(&sender, Change::Unknown) {
                    return;
                }
            }
            continue;
        }
        let change = match change_for(&path, &event) {
            Some(Change::Lease(partition)) if event.event_type != EventType::NodeDeleted => {
                reads.add(partition);
                continue;
            }
            Some(change) => change,
            None => continue,
        };
        if !offer(&sender, change) {
            return;
        }
    }
}

/// The reads of rows that events named, at most [`STATE_READS_IN_FLIGHT`] at a time. What
/// waits is bounded by the table: a row is queued once until its read starts.
struct StateReads {
    shared: Arc<Shared>,
    group: GroupName,
    in_flight: JoinSet<Change>,
    queue: VecDeque<PartitionId>,
    queued: HashSet<PartitionId>,
}

impl StateReads {
    fn new(shared: Arc<Shared>, group: GroupName) -> StateReads {
        StateReads {
            shared,
            group,
            in_flight: JoinSet::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
        }
    }

    /// Whether a read is in flight (and so [`StateReads::next`] has something to wait for).
    fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Reads `partition`'s row now, or once a read in flight ends. A row already waiting
    /// is not queued again: its read starts after this event, so it sees this write.
    fn add(&mut self, partition: PartitionId) {
        if self.in_flight.len() < STATE_READS_IN_FLIGHT {
            self.start(partition);
        } else if self.queued.insert(partition) {
            self.queue.push_back(partition);
        }
    }

    fn start(&mut self, partition: PartitionId) {
        let shared = Arc::clone(&self.shared);
        let group = self.group.clone();
        self.in_flight
            .spawn(async move { written(&shared, &group, partition).await });
    }

    /// The hint of the next read to end; the next waiting row's read starts in its place.
    async fn next(&mut self) -> Option<Change> {
        let ended = self.in_flight.join_next().await?;
        if let Some(partition) = self.queue.pop_front() {
            self.queued.remove(&partition);
            self.start(partition);
        }
        // A read that panicked lost the row it was for: ask for a re-read.
        Some(ended.unwrap_or(Change::Unknown))
    }
}

/// The hint for a write of `partition`'s row: the state the row holds when read after the
/// event (the event's own write or a later one, whose event follows), or the bare row when
/// it cannot be read or decoded.
async fn written(shared: &Shared, group: &GroupName, partition: PartitionId) -> Change {
    let path = shared.layout.lease(group, partition);
    let read = shared
        .connection
        .run(|client| async move {
            match client.get_data(&path).await {
                Ok((data, _)) => Ok(Some(data)),
                Err(zookeeper_client::Error::NoNode) => Ok(None),
                Err(error) => Err(map_error(error)),
            }
        })
        .await;
    match read {
        Ok(Some(data)) => match leasehold::codec::decode::<LeaseRecord>(partition, &data) {
            Ok(record) => Change::LeaseWritten {
                partition,
                state: record.state,
            },
            Err(_) => Change::Lease(partition),
        },
        Ok(None) | Err(_) => Change::Lease(partition),
    }
}

/// Sends a hint unless the channel is full (hints are only hints); false once the feed is gone.
fn offer(sender: &mpsc::Sender<Change>, change: Change) -> bool {
    !matches!(
        sender.try_send(change),
        Err(mpsc::error::TrySendError::Closed(_))
    )
}

/// Sets the watch up again on a new session, backing off between attempts.
async fn rewatch(shared: &Shared, path: &str) -> Option<PersistentWatcher> {
    let mut retries = Backoff::new(REWATCH_FIRST_DELAY, REWATCH_MAX_DELAY);
    for attempt in 1..=REWATCH_ATTEMPTS {
        match add_watch(shared, path).await {
            Ok(watcher) => return Some(watcher),
            Err(error) => {
                tracing::warn!(%error, attempt, "cannot watch {path} again");
                tokio::time::sleep(retries.failed()).await;
            }
        }
    }
    tracing::warn!("giving up watching {path}; readers fall back to polling");
    None
}

/// The hint for an event at `<group path>/lease/<partition>` or `<group path>/member/<node>`;
/// `None` for the group's own directories and its group record, which nodes read when they
/// join rather than on a scan. A lease hint is bare here; [`forward`] reads the row to say
/// what it holds.
fn change_for(group_path: &str, event: &WatchedEvent) -> Option<Change> {
    let relative = event
        .path
        .strip_prefix(group_path)
        .and_then(|rest| rest.strip_prefix('/'))?;
    match relative.split_once('/') {
        Some(("lease", name)) => Some(
            parse_partition(name)
                .map(Change::Lease)
                .unwrap_or(Change::Unknown),
        ),
        Some(("member", name)) => Some(match NodeId::new(name) {
            // A data change of an existing member znode is a heartbeat or a drain flag.
            Ok(node) if event.event_type == EventType::NodeDataChanged => {
                Change::MemberUpdated(node)
            }
            Ok(node) => Change::Member(node),
            Err(_) => Change::Unknown,
        }),
        None if relative == "lease" || relative == "member" || relative == GROUP_RECORD => None,
        _ => Some(Change::Unknown),
    }
}
