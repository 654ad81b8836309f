//! The monitor's endpoints: the page and its assets, `/metrics`, `/api/map`, the
//! `/api/events` stream, and the token-gated `/api/actions`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{header, Extensions, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use leasehold::admin::{self, AdminError};
use leasehold::metrics::Registry;
use leasehold::{NodeId, PartitionId, StoreError};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use super::{App, Item};
use crate::http::{authorized, error, scrape};
use crate::stream_slots::Slot;

const INDEX: &str = include_str!("assets/index.html");
/// The map page's script, as ES modules the page imports from `main.js` (no build step).
pub(super) const SCRIPTS: [(&str, &str); 9] = [
    ("/assets/main.js", include_str!("assets/main.js")),
    ("/assets/state.js", include_str!("assets/state.js")),
    ("/assets/dom.js", include_str!("assets/dom.js")),
    ("/assets/canvas.js", include_str!("assets/canvas.js")),
    ("/assets/plot.js", include_str!("assets/plot.js")),
    ("/assets/feed.js", include_str!("assets/feed.js")),
    ("/assets/actions.js", include_str!("assets/actions.js")),
    ("/assets/panels.js", include_str!("assets/panels.js")),
    ("/assets/stream.js", include_str!("assets/stream.js")),
];
const STYLE: &str = include_str!("assets/style.css");
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Every route of the monitor.
pub(super) fn routes(app: Arc<App>, registry: Arc<Registry>) -> Router {
    let mut router = Router::new().route(
        "/",
        get(|| async { asset("text/html; charset=utf-8", INDEX) }),
    );
    for (path, script) in SCRIPTS {
        router = router.route(
            path,
            get(move || async move { asset("text/javascript; charset=utf-8", script) }),
        );
    }
    router
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(move |headers: HeaderMap| async move { scrape(&registry, &headers) }),
        )
        .route("/api/map", get(map))
        .route("/api/events", get(events))
        .route("/api/actions/{action}", post(action))
        .with_state(app)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn map(State(app): State<Arc<App>>) -> Response {
    let (_, _, json) = app.map();
    json_body(json.to_string())
}

fn json_body(json: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// Where a stream stands: what it has sent, so that nothing older is sent again.
struct Cursor {
    app: Arc<App>,
    receiver: tokio::sync::broadcast::Receiver<Arc<Item>>,
    sequence: u64,
    change: u64,
    _permit: Slot,
}

async fn events(State(app): State<Arc<App>>, extensions: Extensions) -> Response {
    let permit = match app.streams.take_for(&extensions) {
        Ok(slot) => slot,
        Err(why) => return error(StatusCode::SERVICE_UNAVAILABLE, why),
    };
    // Subscribed before the map is taken, so that nothing between the two is missed; what
    // the map already shows is skipped by sequence and id.
    let receiver = app.events.subscribe();
    let (sequence, change, json) = app.map();
    let first = Event::default().event("map").data(json.as_ref());
    let cursor = Cursor {
        app,
        receiver,
        sequence,
        change,
        _permit: permit,
    };
    let rest = stream::unfold(cursor, next_event);
    let stream = stream::once(async move { first }).chain(rest);
    sse(stream)
}

fn sse(stream: impl Stream<Item = Event> + Send + 'static) -> Response {
    Sse::new(stream.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}

async fn next_event(mut cursor: Cursor) -> Option<(Event, Cursor)> {
    loop {
        let item = match cursor.receiver.recv().await {
            Ok(item) => item,
            // Fell behind: the whole map again, from which the stream carries on.
            Err(RecvError::Lagged(_)) => return Some((whole_map(&mut cursor), cursor)),
            Err(RecvError::Closed) => return None,
        };
        let event = match &*item {
            Item::Map { sequence } if *sequence > cursor.sequence => whole_map(&mut cursor),
            Item::Delta { sequence, json } if *sequence > cursor.sequence => {
                cursor.sequence = *sequence;
                Event::default().event("delta").data(json)
            }
            Item::Change { id, json } if *id > cursor.change => {
                cursor.change = *id;
                Event::default()
                    .event("change")
                    .id(id.to_string())
                    .data(json)
            }
            Item::Read { unix_ms } => Event::default()
                .event("read")
                .data(format!(r#"{{"read_at_unix_ms":{unix_ms}}}"#)),
            _ => continue,
        };
        return Some((event, cursor));
    }
}

fn whole_map(cursor: &mut Cursor) -> Event {
    let (sequence, change, json) = cursor.app.map();
    cursor.sequence = sequence;
    cursor.change = cursor.change.max(change);
    Event::default().event("map").data(json.as_ref())
}

/// The body of an action: a node for drain and undrain, a partition for the others.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    node: Option<String>,
    partition: Option<u32>,
}

async fn action(
    State(app): State<Arc<App>>,
    Path(action): Path<String>,
    headers: HeaderMap,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> Response {
    let Some(token) = &app.token else {
        return error(
            StatusCode::FORBIDDEN,
            "this monitor is read-only: start it with --token-file to allow actions",
        );
    };
    if !authorized(&headers, token) {
        return error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send Authorization: Bearer <the token in --token-file>",
        );
    }
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let (store, group) = (&*app.store, &app.group);
    let result = match action.as_str() {
        "drain" | "undrain" => {
            let node = match body.node.as_deref().map(NodeId::new) {
                Some(Ok(node)) => node,
                Some(Err(invalid)) => {
                    return error(StatusCode::UNPROCESSABLE_ENTITY, invalid.to_string())
                }
                None => {
                    return error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("{action} needs \"node\""),
                    )
                }
            };
            let draining = action == "drain";
            admin::set_draining(store, group, &node, draining)
                .await
                .map(|_| {
                    format!(
                        "node {node} {}",
                        if draining {
                            "is draining"
                        } else {
                            "may take partitions again"
                        }
                    )
                })
        }
        "kick" | "offline" | "online" => {
            let Some(partition) = body.partition.map(PartitionId) else {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("{action} needs \"partition\""),
                );
            };
            let done = match action.as_str() {
                "kick" => admin::kick(store, group, partition).await,
                "offline" => admin::offline(store, group, partition).await,
                _ => admin::online(store, group, partition).await,
            };
            done.map(|_| format!("partition {partition}: {action} done"))
        }
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("no such action: {other} (drain, undrain, kick, offline, online)"),
            )
        }
    };
    match result {
        Ok(message) => {
            tracing::info!(group = %app.group, action, %message, "action from the monitor");
            Json(serde_json::json!({ "ok": true, "message": message })).into_response()
        }
        Err(failure) => {
            let status = match &failure {
                AdminError::NoSuchPartition { .. }
                | AdminError::NoSuchNode { .. }
                | AdminError::NoSuchGroup(_) => StatusCode::NOT_FOUND,
                AdminError::Store(StoreError::Conflict { .. }) => StatusCode::CONFLICT,
                AdminError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            error(status, failure.to_string())
        }
    }
}
