//! Change hints for one group from a persistent recursive ZooKeeper watch.

use std::sync::Arc;
use std::time::Duration;

use leasehold::backoff::Backoff;
use leasehold::{Change, ChangeFeed, GroupName, NodeId, StoreError};
use tokio::sync::mpsc;
use zookeeper_client::{AddWatchMode, EventType, PersistentWatcher, WatchedEvent};

use crate::connection::map_error;
use crate::paths::{parse_partition, GROUP_RECORD};
use crate::shared::Shared;

/// Attempts to watch again after the session expired, about a minute in all, before the feed
/// ends and its reader falls back to polling.
const REWATCH_ATTEMPTS: u32 = 30;
const REWATCH_FIRST_DELAY: Duration = Duration::from_millis(200);
const REWATCH_MAX_DELAY: Duration = Duration::from_secs(2);

/// Watches everything under the group's znode (ZooKeeper 3.6 or later) and forwards each
/// event as a hint on a bounded channel, owned by the returned feed.
pub(crate) async fn open(shared: Arc<Shared>, group: GroupName) -> Result<ChangeFeed, StoreError> {
    let path = shared.layout.group(&group);
    let watcher = add_watch(&shared, &path).await?;
    let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
    let task = tokio::spawn(forward(shared, path, watcher, sender));
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

/// Runs until the feed is dropped (which aborts it) or the watch cannot be set up again.
async fn forward(
    shared: Arc<Shared>,
    path: String,
    mut watcher: PersistentWatcher,
    sender: mpsc::Sender<Change>,
) {
    loop {
        let event = watcher.changed().await;
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
        if let Some(change) = change_for(&path, &event) {
            if !offer(&sender, change) {
                return;
            }
        }
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
/// join rather than on a scan. ZooKeeper events carry no data, so a lease hint cannot tell a
/// renewal from a release: readers treat it as "look soon".
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
