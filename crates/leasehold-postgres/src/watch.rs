//! Change hints from `LISTEN` on the store's channel, over a connection of their own,
//! shared by every feed a store (and its clones) opened on one group: a process running many
//! participants on one store client holds one listening connection per group, not one per
//! participant, which on a large fleet would exhaust the server's connections.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::backoff::Backoff;
use leasehold::{Change, ChangeFeed, GroupName, LeaseState, NodeId, PartitionId, StoreError};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

use crate::connection::Target;
use crate::error::map_error;
use crate::options::PostgresOptions;

/// How many times in a row a lost listening connection is reopened before the feeds end and
/// readers fall back to polling.
const MAX_REOPEN_ATTEMPTS: u32 = 10;

/// How often a quiet listening connection checks that some feed is still read: it is closed
/// this long at most after the last one is dropped.
const READERS_CHECK: Duration = Duration::from_secs(5);

/// The feeds one listening connection fills. Closed (`None`) once the listener has ended, so
/// that the next [`Fanout::join`] fails and a new listener is started.
#[derive(Debug, Clone)]
pub(crate) struct Fanout(Arc<Mutex<Option<Vec<mpsc::Sender<Change>>>>>);

impl Fanout {
    fn new() -> Fanout {
        Fanout(Arc::new(Mutex::new(Some(Vec::new()))))
    }

    fn readers(&self) -> std::sync::MutexGuard<'_, Option<Vec<mpsc::Sender<Change>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new feed from this listener, or `None` once it has ended.
    pub(crate) fn join(&self) -> Option<ChangeFeed> {
        let mut readers = self.readers();
        let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
        readers.as_mut()?.push(sender);
        Some(ChangeFeed::new(receiver, None))
    }

    /// Offers `change` to every feed (a full one already holds a pending hint, which is all
    /// its reader needs) and forgets the dropped ones; returns whether any is left. With none
    /// left the fanout closes.
    fn offer(&self, change: &Change) -> bool {
        self.keep(|sender| {
            !matches!(
                sender.try_send(change.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        })
    }

    /// Whether any feed is still read; closes the fanout if none is.
    fn read(&self) -> bool {
        self.keep(|sender| !sender.is_closed())
    }

    fn keep(&self, open: impl FnMut(&mpsc::Sender<Change>) -> bool) -> bool {
        let mut readers = self.readers();
        let Some(senders) = readers.as_mut() else {
            return false;
        };
        senders.retain(open);
        if senders.is_empty() {
            *readers = None;
            return false;
        }
        true
    }

    /// Ends every feed: their readers fall back to polling.
    fn close(&self) {
        *self.readers() = None;
    }
}

/// Opens a listening connection for `group` and starts the task that turns notifications
/// into hints; returns the listener's fanout and its first feed. Returns once `LISTEN` is
/// in force, so every later write is reported.
pub(crate) async fn start(
    target: Target,
    channel: String,
    group: GroupName,
    options: PostgresOptions,
) -> Result<(Fanout, ChangeFeed), StoreError> {
    let fanout = Fanout::new();
    let feed = fanout.join().expect("a new fanout is open");
    let (ready, listening) = oneshot::channel();
    let listener = Listener {
        target,
        channel,
        group,
        options,
        fanout: fanout.clone(),
    };
    tokio::spawn(listener.run(ready));
    match listening.await {
        Ok(Ok(())) => Ok((fanout, feed)),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(StoreError::Unavailable {
            message: "the listening task ended before it was listening".to_owned(),
            source: None,
        }),
    }
}

struct Listener {
    target: Target,
    channel: String,
    group: GroupName,
    options: PostgresOptions,
    fanout: Fanout,
}

/// Why one listening connection ended.
enum Ended {
    /// The feed was dropped: stop.
    ReaderGone,
    /// The connection failed, or was lost after listening.
    Lost {
        error: StoreError,
        was_listening: bool,
    },
}

impl Ended {
    fn not_listening(error: StoreError) -> Ended {
        Ended::Lost {
            error,
            was_listening: false,
        }
    }

    fn lost(error: StoreError) -> Ended {
        Ended::Lost {
            error,
            was_listening: true,
        }
    }
}

impl Listener {
    async fn run(self, ready: oneshot::Sender<Result<(), StoreError>>) {
        self.serve(ready).await;
        // However it ended, no feed hears from it again: the next `watch` starts another.
        self.fanout.close();
    }

    async fn serve(&self, ready: oneshot::Sender<Result<(), StoreError>>) {
        let mut ready = Some(ready);
        let mut retries = Backoff::new(
            self.options.min_reconnect_delay,
            self.options.max_reconnect_delay,
        );
        loop {
            let (error, was_listening) = match self.listen_once(&mut ready).await {
                Ended::ReaderGone => return,
                Ended::Lost {
                    error,
                    was_listening,
                } => (error, was_listening),
            };
            if let Some(ready) = ready.take() {
                // The first connection failed: `watch` reports why.
                let _ = ready.send(Err(error));
                return;
            }
            if was_listening {
                tracing::debug!(%error, channel = %self.channel, "listening connection lost");
                retries.succeeded();
                // Changes may be missed from now on: whatever the reader knows may be stale.
                if !self.fanout.offer(&Change::Unknown) {
                    return;
                }
            }
            let delay = retries.failed();
            if retries.failures() > MAX_REOPEN_ATTEMPTS {
                tracing::warn!(channel = %self.channel, "cannot listen again; change hints end");
                return;
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Connects, listens, and forwards notifications until the connection ends.
    async fn listen_once(
        &self,
        ready: &mut Option<oneshot::Sender<Result<(), StoreError>>>,
    ) -> Ended {
        let timeout = self.options.statement_timeout;
        let limit = self.options.connect_timeout;
        let connecting =
            tokio::time::timeout(limit, self.target.config.connect(self.target.tls.clone())).await;
        let (client, mut connection) = match connecting {
            Ok(Ok(pair)) => pair,
            Ok(Err(error)) => {
                return Ended::not_listening(map_error("connect to listen", timeout, error))
            }
            Err(_) => return Ended::not_listening(StoreError::Timeout(limit)),
        };
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        let listen = format!("LISTEN {}", self.channel);
        let listening = client.batch_execute(&listen);
        tokio::pin!(listening);
        // The connection must be driven while LISTEN runs.
        let started = tokio::time::timeout(limit, async {
            loop {
                tokio::select! {
                    result = &mut listening => return result.map_err(|e| map_error("listen", timeout, e)),
                    message = messages.next() => if message.is_none() {
                        return Err(StoreError::Unavailable {
                            message: "connection closed before LISTEN".to_owned(),
                            source: None,
                        });
                    },
                }
            }
        })
        .await
        .unwrap_or(Err(StoreError::Timeout(limit)));
        if let Err(error) = started {
            return Ended::not_listening(error);
        }
        match ready.take() {
            Some(ready) => {
                let _ = ready.send(Ok(()));
            }
            // Listening again after a loss: changes in between were not seen.
            None => {
                if !self.fanout.offer(&Change::Unknown) {
                    return Ended::ReaderGone;
                }
            }
        }
        let mut check = tokio::time::interval(READERS_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                _ = check.tick() => {
                    if !self.fanout.read() {
                        return Ended::ReaderGone;
                    }
                    continue;
                }
            };
            match message {
                Some(Ok(AsyncMessage::Notification(notice))) => {
                    let Some(change) = parse(&self.group, notice.payload()) else {
                        continue;
                    };
                    if !self.fanout.offer(&change) {
                        return Ended::ReaderGone;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return Ended::lost(map_error("listen", timeout, error)),
                None => {
                    return Ended::lost(StoreError::Unavailable {
                        message: "listening connection closed".to_owned(),
                        source: None,
                    })
                }
            }
        }
    }
}

/// The hint for a payload `<group> lease <partition> [<state>]` or
/// `<group> member <node> [insert|update|delete]` of `group`.
fn parse(group: &GroupName, payload: &str) -> Option<Change> {
    let mut words = payload.split(' ');
    if words.next()? != group.as_str() {
        return None;
    }
    let change = match (words.next(), words.next(), words.next()) {
        (Some("lease"), Some(number), detail) => number.parse().ok().map(|n| {
            let partition = PartitionId(n);
            match detail.and_then(LeaseState::parse) {
                Some(state) => Change::LeaseWritten { partition, state },
                None => Change::Lease(partition),
            }
        }),
        (Some("member"), Some(name), detail) => NodeId::new(name).ok().map(|node| match detail {
            Some("update") => Change::MemberUpdated(node),
            _ => Change::Member(node),
        }),
        _ => None,
    };
    Some(change.unwrap_or(Change::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_of_other_groups_are_ignored() {
        let group = GroupName::new("orders").unwrap();
        assert_eq!(
            parse(&group, "orders lease 12"),
            Some(Change::Lease(PartitionId(12)))
        );
        assert_eq!(
            parse(&group, "orders member node-1"),
            Some(Change::Member(NodeId::new("node-1").unwrap()))
        );
        assert_eq!(
            parse(&group, "orders lease 12 released"),
            Some(Change::LeaseWritten {
                partition: PartitionId(12),
                state: LeaseState::Released
            })
        );
        assert_eq!(
            parse(&group, "orders member node-1 update"),
            Some(Change::MemberUpdated(NodeId::new("node-1").unwrap()))
        );
        assert_eq!(
            parse(&group, "orders member node-1 insert"),
            Some(Change::Member(NodeId::new("node-1").unwrap()))
        );
        assert_eq!(parse(&group, "orders-2 lease 12"), None);
        assert_eq!(parse(&group, "orders lease x"), Some(Change::Unknown));
    }
}
