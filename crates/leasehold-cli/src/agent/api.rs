//! The agent's HTTP routes and their handlers: leases, permits, releases, loads, drains and
//! routing (`docs/agent-openapi.yaml` describes each).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router as Routes};
use leasehold::{admin, LeaseGuard, PartitionId};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{events, Agent, Held, Refusal, MAX_PERMITS, MAX_PERMIT_TTL};
use crate::http::{error, scrape};

/// The one parameter of a route's path, as text. Axum refuses a segment that is not UTF-8
/// in plain text; this answers with the JSON error every other refusal has.
struct Segment(String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Segment, Refusal> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(text)) => Ok(Segment(text)),
            Err(rejection) => Err(Refusal(rejection.status(), rejection.body_text())),
        }
    }
}

fn lease_json(lease: &LeaseGuard) -> Value {
    json!({
        "partition": lease.partition().0,
        "epoch": lease.epoch().0,
        "ms_left": lease.remaining().as_millis() as u64,
    })
}

pub(super) fn routes(agent: Arc<Agent>) -> Routes {
    Routes::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(
                |State(agent): State<Arc<Agent>>, headers: HeaderMap| async move {
                    scrape(&agent.registry, &headers)
                },
            ),
        )
        .route("/v1/leases", get(leases))
        .route("/v1/leases/{partition}", get(lease))
        .route("/v1/leases/{partition}/permits", post(grant))
        .route("/v1/leases/{partition}/release", post(release))
        .route("/v1/leases/{partition}/load", put(report_load))
        .route("/v1/permits", get(permits))
        .route("/v1/permits/{id}", delete(end_permit))
        .route("/v1/drain", post(drain))
        .route("/v1/undrain", post(undrain))
        .route("/v1/route", get(route))
        .route("/v1/map", get(map))
        .route("/v1/events", get(events::events))
        .with_state(agent)
}

async fn readyz(State(agent): State<Arc<Agent>>) -> Response {
    let Some(node) = agent.node.get() else {
        return agent.waiting("not ready: waiting for the store");
    };
    let status = node.participant.status();
    if status.scans == 0 {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no scan done yet",
        );
    }
    if status.draining || !agent.granting.load(Ordering::SeqCst) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "not ready: draining");
    }
    "ready\n".into_response()
}

async fn leases(State(agent): State<Arc<Agent>>) -> Response {
    let Some(node) = agent.node.get() else {
        return agent.not_started();
    };
    let leases: Vec<Value> = node.participant.leases().iter().map(lease_json).collect();
    Json(json!({ "node": node.participant.node().to_string(), "leases": leases })).into_response()
}

async fn lease(State(agent): State<Arc<Agent>>, Segment(partition): Segment) -> Response {
    let Some(node) = agent.node.get() else {
        return agent.not_started();
    };
    let partition = match node.partition(&partition) {
        Ok(partition) => partition,
        Err(refusal) => return refusal.into_response(),
    };
    match node.participant.lease(partition) {
        Some(lease) => Json(lease_json(&lease)).into_response(),
        None => node.not_here(partition),
    }
}

/// The query of `POST /v1/leases/{p}/permits`.
#[derive(Deserialize)]
struct GrantQuery {
    /// Ends the permit by itself after this long, if the worker has not.
    ttl_ms: Option<u64>,
}

async fn grant(
    State(agent): State<Arc<Agent>>,
    Segment(partition): Segment,
    query: Result<Query<GrantQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let (node, partition) = match agent.mutating(&headers, &partition) {
        Ok(target) => target,
        Err(answer) => return *answer,
    };
    let max_ttl = MAX_PERMIT_TTL.as_millis() as u64;
    let ttl = match query {
        Ok(Query(GrantQuery { ttl_ms: None })) => None,
        Ok(Query(GrantQuery { ttl_ms: Some(ms) })) if (1..=max_ttl).contains(&ms) => {
            Some(Duration::from_millis(ms))
        }
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("ttl_ms must be a whole number of milliseconds from 1 to {max_ttl}"),
            )
        }
    };
    if !agent.granting.load(Ordering::SeqCst) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is stopping: no new permits",
        );
    }
    let Some(permit) = node.participant.permit(partition) else {
        return node.not_here(partition);
    };
    let mut permits = agent.permits();
    if permits.len() >= MAX_PERMITS {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{MAX_PERMITS} permits are outstanding; end some first"),
        );
    }
    let id = agent.next_permit.fetch_add(1, Ordering::Relaxed);
    let expires = ttl.map(|ttl| tokio::time::Instant::now() + ttl);
    let held = Held { permit, expires };
    let body = permit_json(id, &held);
    permits.insert(id, held);
    (StatusCode::CREATED, Json(body)).into_response()
}

fn permit_json(id: u64, held: &Held) -> Value {
    let mut body = json!({
        "id": id,
        "partition": held.permit.partition().0,
        "epoch": held.permit.epoch().0,
        "ms_left": held.permit.remaining().as_millis() as u64,
    });
    if let Some(expires) = held.expires {
        let left = expires.saturating_duration_since(tokio::time::Instant::now());
        body["ttl_ms_left"] = json!(left.as_millis() as u64);
    }
    body
}

/// `GET /v1/permits`: the permits outstanding, for a worker restarted after a crash to find
/// and end what it left.
async fn permits(State(agent): State<Arc<Agent>>) -> Response {
    if agent.node.get().is_none() {
        return agent.not_started();
    }
    let listed: Vec<Value> = agent
        .permits()
        .iter()
        .filter(|(_, held)| held.permit.is_valid())
        .map(|(id, held)| permit_json(*id, held))
        .collect();
    Json(json!({ "permits": listed })).into_response()
}

async fn end_permit(
    State(agent): State<Arc<Agent>>,
    Segment(id): Segment,
    headers: HeaderMap,
) -> Response {
    if let Err(refusal) = agent.check(&headers) {
        return refusal.into_response();
    }
    if agent.node.get().is_none() {
        return agent.not_started();
    }
    let Ok(id) = id.parse::<u64>() else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{id:?} is not a permit id"),
        );
    };
    match agent.permits().remove(&id) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no permit {id}: ended already, or its lease ran out"),
        ),
    }
}

async fn release(
    State(agent): State<Arc<Agent>>,
    Segment(partition): Segment,
    headers: HeaderMap,
) -> Response {
    let (node, partition) = match agent.mutating(&headers, &partition) {
        Ok(target) => target,
        Err(answer) => return *answer,
    };
    if node.participant.release(partition).await {
        Json(json!({ "partition": partition.0, "releasing": true })).into_response()
    } else {
        node.not_here(partition)
    }
}

/// `PUT /v1/leases/{p}/load` with `{"load": X}`: the partition's load as the worker measures
/// it (any non-negative number, one unit across the group), published with the next renewal
/// so that the group balances by load.
async fn report_load(
    State(agent): State<Arc<Agent>>,
    Segment(partition): Segment,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (node, partition) = match agent.mutating(&headers, &partition) {
        Ok(target) => target,
        Err(answer) => return *answer,
    };
    let load = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|value| value.get("load").and_then(Value::as_f64))
        .filter(|load| leasehold::is_valid_load(*load));
    let Some(load) = load else {
        return error(
            StatusCode::BAD_REQUEST,
            r#"the body must be {"load": X} with X a number from 0 to 1e12"#,
        );
    };
    if node.participant.lease(partition).is_none() {
        return node.not_here(partition);
    }
    agent
        .loads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(partition, load);
    Json(json!({ "partition": partition.0, "load": load })).into_response()
}

async fn set_draining(agent: &Agent, headers: &HeaderMap, draining: bool) -> Response {
    if let Err(refusal) = agent.check(headers) {
        return refusal.into_response();
    }
    let Some(node) = agent.node.get() else {
        return agent.not_started();
    };
    let name = node.participant.node();
    match admin::set_draining(&*node.store, &node.group, name, draining).await {
        Ok(_) => Json(json!({ "node": name.to_string(), "draining": draining })).into_response(),
        Err(failure) => error(StatusCode::SERVICE_UNAVAILABLE, failure.to_string()),
    }
}

async fn drain(State(agent): State<Arc<Agent>>, headers: HeaderMap) -> Response {
    set_draining(&agent, &headers, true).await
}

async fn undrain(State(agent): State<Arc<Agent>>, headers: HeaderMap) -> Response {
    set_draining(&agent, &headers, false).await
}

#[derive(Debug, Deserialize)]
struct RouteQuery {
    key: Option<String>,
}

async fn route(
    State(agent): State<Arc<Agent>>,
    query: Result<Query<RouteQuery>, QueryRejection>,
) -> Response {
    let Some(node) = agent.node.get() else {
        return agent.not_started();
    };
    // A query that does not read as one key (`?key=a&key=b`) gets the JSON error too.
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let Some(key) = query.key else {
        return error(StatusCode::BAD_REQUEST, "give the key: /v1/route?key=K");
    };
    let route = node.router.route(&key);
    let epoch = node
        .participant
        .lease(route.partition)
        .map(|lease| lease.epoch().0);
    Json(json!({
        "key": key,
        "partition": route.partition.0,
        "owner": route.owner.map(|o| o.to_string()),
        "address": route.address.as_deref(),
        "epoch": epoch,
    }))
    .into_response()
}

async fn map(State(agent): State<Arc<Agent>>) -> Response {
    let Some(node) = agent.node.get() else {
        return agent.not_started();
    };
    let partitions: Vec<Value> = (0..node.partitions)
        .map(|p| {
            let owner = node.router.owner_of_partition(PartitionId(p));
            let address = owner.as_ref().and_then(|o| node.router.address_of(o));
            json!({
                "partition": p,
                "owner": owner.map(|o| o.to_string()),
                "address": address.as_deref(),
            })
        })
        .collect();
    Json(json!({ "group": node.group.to_string(), "partitions": partitions })).into_response()
}
