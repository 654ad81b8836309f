//! Change hints from an etcd watch on a group's prefix.

use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchStream};
use leasehold::backoff::Backoff;
use leasehold::{Change, ChangeFeed, LeaseRecord, StoreError};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::error::map_error;
use crate::keys::{parse_in_group, KeyName};

/// How many times in a row a lost watch is reopened before the feed ends and readers poll.
const MAX_REOPEN_ATTEMPTS: u32 = 10;
const FIRST_REOPEN_DELAY: Duration = Duration::from_millis(100);
const MAX_REOPEN_DELAY: Duration = Duration::from_secs(5);

/// Opens a watch on `prefix` and starts the task that turns its events into hints.
///
/// Returns once etcd has confirmed the watch, so every write that completes afterwards is
/// reported, and none that completed before it was called.
pub(crate) async fn start(
    client: Client,
    prefix: String,
    limit: Duration,
) -> Result<ChangeFeed, StoreError> {
    let stream = open(&client, &prefix, limit).await?;
    let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
    let task = tokio::spawn(run(client, prefix, stream, sender, limit));
    Ok(ChangeFeed::new(receiver, Some(task.abort_handle())))
}

async fn open(client: &Client, prefix: &str, limit: Duration) -> Result<WatchStream, StoreError> {
    let opening = async {
        // A watch without a start revision begins at the revision of the member that serves
        // it, which may lag behind writes the leader has already answered: it would report
        // writes made before it was opened. A linearizable read names the revision every
        // answered write is at or below; the watch starts just past it.
        let current = client
            .kv_client()
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_err(|e| map_error("read the revision to watch from", limit, e))?;
        let Some(revision) = current.header().map(|h| h.revision()).filter(|r| *r > 0) else {
            // Starting from revision 1 would replay the whole history.
            return Err(StoreError::Unavailable {
                message: "etcd reply carried no revision".to_owned(),
                source: None,
            });
        };
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut stream = client
            .watch_client()
            .watch(prefix, Some(options))
            .await
            .map_err(|e| map_error("open watch", limit, e))?;
        match stream.message().await {
            Ok(Some(response)) if response.created() && !response.canceled() => Ok(stream),
            Ok(_) => Err(StoreError::Unavailable {
                message: "etcd did not confirm the watch".to_owned(),
                source: None,
            }),
            Err(error) => Err(map_error("confirm watch", limit, error)),
        }
    };
    tokio::time::timeout(limit, opening)
        .await
        .unwrap_or(Err(StoreError::Timeout(limit)))
}

async fn run(
    client: Client,
    prefix: String,
    mut stream: WatchStream,
    sender: mpsc::Sender<Change>,
    limit: Duration,
) {
    loop {
        if forward(&mut stream, &prefix, &sender).await.is_err() {
            return;
        }
        tracing::debug!(%prefix, "etcd watch lost; reopening");
        // Events may have been missed: whatever the reader knows may be stale.
        if let Err(TrySendError::Closed(_)) = sender.try_send(Change::Unknown) {
            return;
        }
        match reopen(&client, &prefix, limit).await {
            Some(reopened) => stream = reopened,
            None => {
                tracing::warn!(%prefix, "etcd watch could not be reopened; change hints end");
                return;
            }
        }
        // Writes between the loss and the reopening were not seen by either watch.
        if sender.send(Change::Unknown).await.is_err() {
            return;
        }
    }
}

async fn reopen(client: &Client, prefix: &str, limit: Duration) -> Option<WatchStream> {
    // Each attempt follows a pause, the first included: the watch has just failed.
    let mut retries = Backoff::new(FIRST_REOPEN_DELAY, MAX_REOPEN_DELAY);
    for _ in 0..MAX_REOPEN_ATTEMPTS {
        tokio::time::sleep(retries.failed()).await;
        if let Ok(stream) = open(client, prefix, limit).await {
            return Some(stream);
        }
    }
    None
}

/// Forwards events until the watch ends (`Ok`) or the reader has gone (`Err`).
async fn forward(
    stream: &mut WatchStream,
    prefix: &str,
    sender: &mpsc::Sender<Change>,
) -> Result<(), ()> {
    loop {
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) | Err(_) => return Ok(()),
        };
        if response.canceled() {
            return Ok(());
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let rest = kv.key().strip_prefix(prefix.as_bytes()).unwrap_or_default();
            let deleted = event.event_type() == EventType::Delete;
            let change = match parse_in_group(rest) {
                KeyName::Lease(partition) if !deleted => {
                    match leasehold::codec::decode::<LeaseRecord>(partition, kv.value()) {
                        Ok(record) => Change::LeaseWritten {
                            partition,
                            state: record.state,
                        },
                        Err(_) => Change::Lease(partition),
                    }
                }
                KeyName::Lease(partition) => Change::Lease(partition),
                // A put of an existing key is a heartbeat or a drain flag, not a join.
                KeyName::Member(node) if !deleted && kv.create_revision() != kv.mod_revision() => {
                    Change::MemberUpdated(node)
                }
                KeyName::Member(node) => Change::Member(node),
                // Nodes read the group record when they join, not on a scan: a rescan
                // prompted by its writes would learn nothing.
                KeyName::Group => continue,
                KeyName::Other => Change::Unknown,
            };
            // A full channel already holds a pending hint, which is all a reader needs.
            if let Err(TrySendError::Closed(_)) = sender.try_send(change) {
                return Err(());
            }
        }
    }
}
