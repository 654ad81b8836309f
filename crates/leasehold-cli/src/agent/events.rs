//! The agent's event stream: lease events kept for readers that resume with
//! `Last-Event-ID`, and sent as server-sent events to live ones.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use leasehold::{Callbacks, LeaseGuard, Loss, LossReason, PartitionId};
use serde_json::json;
use tokio::sync::broadcast;

use super::{Agent, Refusal, EVENTS_KEPT};
use crate::http::error;

/// The lease events a worker follows, kept for resuming readers and sent to live ones.
#[derive(Debug)]
pub(super) struct Events {
    kept: Mutex<Kept>,
    live: broadcast::Sender<(u64, Arc<str>)>,
}

/// The latest events, by id, and the last id given.
#[derive(Debug, Default)]
struct Kept {
    /// The id before this process's first event: `Last-Event-ID: 0` resumes from there.
    base: u64,
    last: u64,
    events: VecDeque<(u64, Arc<str>)>,
}

impl Events {
    pub(super) fn new() -> Events {
        // Ids start above any an earlier process under this address gave out (a thousand
        // per millisecond of its life): a reader resuming with an id from before a restart
        // is then told that what came after it is gone, instead of missing the new
        // process's first events whose ids it had already seen.
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64)
            .saturating_mul(1000);
        Events {
            kept: Mutex::new(Kept {
                base,
                last: base,
                events: VecDeque::new(),
            }),
            live: broadcast::channel(EVENTS_KEPT).0,
        }
    }

    fn push(&self, kind: &str, partition: PartitionId, epoch: u64) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.last += 1;
        let id = kept.last;
        let data: Arc<str> =
            json!({"id": id, "kind": kind, "partition": partition.0, "epoch": epoch})
                .to_string()
                .into();
        if kept.events.len() == EVENTS_KEPT {
            kept.events.pop_front();
        }
        kept.events.push_back((id, Arc::clone(&data)));
        // Sent under the lock, so that a reader that read the kept events under it misses
        // nothing sent after.
        let _ = self.live.send((id, data));
    }
}

/// Turns the participant's notifications into events.
pub(super) struct EventCallbacks(pub(super) Arc<Events>, pub(super) Arc<Loads>);

/// The load workers last reported per partition held here, published with each renewal
/// for balancing by load.
pub(super) type Loads = Mutex<BTreeMap<PartitionId, f64>>;

impl Callbacks for EventCallbacks {
    fn on_acquired(&self, lease: &LeaseGuard) {
        self.0.push("acquired", lease.partition(), lease.epoch().0);
    }

    fn on_handing_off(&self, lease: &LeaseGuard) {
        self.0.push("releasing", lease.partition(), lease.epoch().0);
    }

    fn on_lost(&self, loss: &Loss) {
        let kind = match loss.reason {
            LossReason::Released => "released",
            _ => "lost",
        };
        self.0.push(kind, loss.partition, loss.epoch.0);
        // The next holder's workers report their own.
        self.1
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&loss.partition);
    }

    fn load(&self, partition: PartitionId) -> Option<f64> {
        let loads = self.1.lock().unwrap_or_else(|e| e.into_inner());
        loads.get(&partition).copied()
    }
}

/// `Last-Event-ID`, if the reader resumes.
fn resume_from(headers: &HeaderMap) -> Result<Option<u64>, Refusal> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    "Last-Event-ID is not an event id".into(),
                )
            }),
    }
}

pub(super) async fn events(
    State(agent): State<Arc<Agent>>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    // With a token, streams are for its holders: anyone else could fill every slot.
    if let Err(refusal) = agent.check(&headers) {
        return refusal.into_response();
    }
    if agent.node.get().is_none() {
        return agent.not_started();
    }
    let after = match resume_from(&headers) {
        Ok(after) => after,
        Err(refusal) => return refusal.into_response(),
    };
    let slot = match agent.streams.take_for(&extensions) {
        Ok(slot) => slot,
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, why),
    };
    let (backlog, receiver) = {
        let kept = agent.events.kept.lock().unwrap_or_else(|e| e.into_inner());
        let receiver = agent.events.live.subscribe();
        let oldest = kept.events.front().map_or(kept.last + 1, |(id, _)| *id);
        // 0: every event of this process, as far as they are kept.
        let after = after.map(|after| if after == 0 { kept.base } else { after });
        if let Some(after) = after {
            // Older than what is kept, or from another process of this agent (ids restart
            // above the last process's at each start).
            if after.saturating_add(1) < oldest || after > kept.last {
                return error(
                    StatusCode::GONE,
                    format!(
                        "events after {after} are no longer kept (the oldest is {oldest}): \
                         read /v1/leases and follow from now"
                    ),
                );
            }
        }
        let backlog: Vec<(u64, Arc<str>)> = match after {
            Some(after) => kept
                .events
                .iter()
                .filter(|(id, _)| *id > after)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        (backlog, receiver)
    };
    let event = |(id, data): (u64, Arc<str>)| {
        Event::default()
            .id(id.to_string())
            .event("lease")
            .data(data.as_ref())
    };
    // The stream keeps its slot until it ends.
    let live = stream::unfold(Some((receiver, slot)), move |open| async move {
        let (mut receiver, slot) = open?;
        match receiver.recv().await {
            Ok(item) => Some((event(item), Some((receiver, slot)))),
            // A reader this slow would hold the agent back: it is told why, and cut off.
            Err(broadcast::error::RecvError::Lagged(missed)) => Some((
                Event::default().event("error").data(
                    json!({"error": format!("too slow: {missed} events missed; reconnect with Last-Event-ID")})
                        .to_string(),
                ),
                None,
            )),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    let stream = stream::iter(backlog.into_iter().map(event)).chain(live);
    Sse::new(stream.map(Ok::<_, Infallible>))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response()
}
