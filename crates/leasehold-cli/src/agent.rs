//! `agent`: one participant, as `node` runs it, with an HTTP/JSON API for a worker written in
//! any language on the same host: its leases, work permits, releases, drains, routing and an
//! event stream.
//!
//! Times cross the API only as durations (`ms_left`), never as instants of the agent's clock:
//! a worker counts a permit's deadline from the moment it *sent* the request, on its own
//! monotonic clock, so that a slow reply can only shorten it.
//!
//! The API is served from the start, before the store is reached: while the agent waits for
//! it, `/healthz` answers, `/readyz` and every `/v1` endpoint answer 503 saying so. The routes
//! and their answers are described in `docs/agent-openapi.yaml`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router as Routes};
use futures_util::stream::{self, StreamExt};
use leasehold::admin;
use leasehold::metrics::Registry;
use leasehold::{
    Callbacks, GroupName, LeaseGuard, LeaseStore, Loss, LossReason, Participant, PartitionId,
    Router, WorkPermit,
};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::cli::{AgentArgs, Cli};
use crate::http::{authorized, error, scrape};
use crate::node::{self, Announcement, StoreWait};
use crate::Outcome;

/// Permits outstanding at once: each holds a lease's hand-off open.
const MAX_PERMITS: usize = 10_000;
/// Event streams served at once: each holds a connection and a task.
const MAX_STREAMS: usize = 64;
/// Events kept for a reader resuming with `Last-Event-ID`.
const EVENTS_KEPT: usize = 1024;
/// How often permits that ran out (lease lost or past its deadline) are dropped.
const REAP_EVERY: Duration = Duration::from_millis(250);
/// How often the agent's router reloads the whole map besides following change notices.
const ROUTER_POLL: Duration = Duration::from_secs(5);

/// The lease events a worker follows, kept for resuming readers and sent to live ones.
#[derive(Debug)]
struct Events {
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

/// A request refused: its status and what was wrong.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

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

impl Events {
    fn new() -> Events {
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
struct EventCallbacks(Arc<Events>, Arc<Loads>);

/// The load workers last reported per partition held here, published with each renewal
/// for balancing by load.
type Loads = Mutex<BTreeMap<PartitionId, f64>>;

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

/// What the handlers share.
struct Agent {
    /// Set once the store is reached and the node started; until then `/v1` answers 503.
    node: OnceLock<Node>,
    /// How the wait for the store is going, for the 503 answers meanwhile.
    wait: StoreWait,
    permits: Mutex<BTreeMap<u64, WorkPermit>>,
    /// Loads reported by workers, shared with the node's callbacks.
    loads: Arc<Loads>,
    next_permit: AtomicU64,
    /// Turned off at SIGTERM: the permits outstanding end, no new one is granted.
    granting: AtomicBool,
    token: Option<String>,
    registry: Arc<Registry>,
    events: Arc<Events>,
    streams: Arc<tokio::sync::Semaphore>,
}

/// The started node the handlers act on, and what it was started on.
struct Node {
    participant: Participant,
    router: Router,
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    partitions: u32,
}

/// Runs `agent` until SIGTERM or SIGINT: then stops granting permits, waits for those
/// outstanding (up to the drain timeout), releases every lease and exits. The API is served
/// while the store is being reached, so that a supervisor sees the agent alive and a worker
/// sees why it is not ready.
pub async fn run(cli: &Cli, args: &AgentArgs) -> anyhow::Result<Outcome> {
    let token = args
        .token_file
        .as_deref()
        .map(crate::http::read_token)
        .transpose()?;
    let address: SocketAddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {} is not HOST:PORT", args.listen))?;
    if let Some(metrics) = &args.node.metrics_listen {
        // Accepted silently, it would leave a scrape target configured that never answers.
        anyhow::bail!(
            "--metrics-listen {metrics}: the agent serves /metrics on --listen {}; leave \
             --metrics-listen out",
            args.listen
        );
    }
    if token.is_none() && !address.ip().is_loopback() {
        anyhow::bail!(
            "--listen {address} is not a loopback address: give --token-file, so that only \
             holders of the token can release leases or drain the node"
        );
    }
    let prepared = node::prepare(cli, &args.node, true)?;
    let (listener, bound) = crate::http::bind(&args.listen, "the agent").await?;
    let events = Arc::new(Events::new());
    let loads: Arc<Loads> = Arc::default();
    let callbacks: Arc<dyn Callbacks> =
        Arc::new(EventCallbacks(Arc::clone(&events), Arc::clone(&loads)));
    let agent = Arc::new(Agent {
        node: OnceLock::new(),
        wait: StoreWait::default(),
        permits: Mutex::new(BTreeMap::new()),
        next_permit: AtomicU64::new(1),
        granting: AtomicBool::new(true),
        token,
        registry: prepared.registry.clone().unwrap_or_default(),
        events,
        loads,
        streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
    });
    let reaper = tokio::spawn(reap(Arc::clone(&agent)));
    crate::http::spawn(listener, routes(Arc::clone(&agent)), "agent");
    let announcement = Announcement::new(format!("listening on http://{bound}/"));
    let serving = serve(cli, args, prepared, callbacks, &agent, &announcement);
    let outcome = node::announcing(&agent.wait, &announcement, serving).await;
    reaper.abort();
    outcome
}

/// Reaches the store and starts the node, hands it to the handlers (making `announcement`),
/// and runs it until a signal.
async fn serve(
    cli: &Cli,
    args: &AgentArgs,
    prepared: node::Prepared,
    callbacks: Arc<dyn Callbacks>,
    agent: &Agent,
    announcement: &Announcement,
) -> anyhow::Result<Outcome> {
    let connected = prepared
        .connect(cli, &args.node, Some(callbacks), &agent.wait)
        .await?;
    let Some(mut started) = connected else {
        return Ok(Outcome::Success);
    };
    let (store, group) = (
        Arc::clone(&started.table.store),
        started.table.group.clone(),
    );
    let partitions = started.partitions;
    let following = started
        .retry(cli.timeout, &agent.wait, || {
            let (store, group) = (Arc::clone(&store), group.clone());
            async move {
                Router::follow(store, group, partitions, ROUTER_POLL)
                    .await
                    .context("cannot read the lease table for routing")
            }
        })
        .await?;
    if let Some(router) = following {
        let node = Node {
            participant: started.participant.clone(),
            router,
            store,
            group,
            partitions,
        };
        if agent.node.set(node).is_err() {
            unreachable!("the agent's node is set once");
        }
        announcement.say()?;
        let served = started.serve_until_signal(&args.node).await;
        agent.granting.store(false, Ordering::SeqCst);
        served?;
    }
    started.stop().await;
    Ok(Outcome::Success)
}

/// Drops permits that no longer hold anything: their lease was lost, or ran out.
async fn reap(agent: Arc<Agent>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        agent.permits().retain(|_, permit| permit.is_valid());
    }
}

impl Agent {
    fn permits(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, WorkPermit>> {
        self.permits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses a mutating request without the token, when the agent has one.
    fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        match &self.token {
            Some(token) if !authorized(headers, token) => Err(Refusal(
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send Authorization: Bearer <the token in --token-file>"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// The answer to a `/v1` request while there is no node yet.
    fn not_started(&self) -> Response {
        self.waiting("the agent is waiting for the store: try again later")
    }

    /// The node and partition a mutating request on `/v1/leases/{partition}/…` is for, once
    /// its token is checked and the node has started; the answer to send otherwise (boxed:
    /// a response is large, and this is the rare path).
    fn mutating(
        &self,
        headers: &HeaderMap,
        segment: &str,
    ) -> Result<(&Node, PartitionId), Box<Response>> {
        self.check(headers)
            .map_err(|refusal| Box::new(refusal.into_response()))?;
        let node = self
            .node
            .get()
            .ok_or_else(|| Box::new(self.not_started()))?;
        let partition = node
            .partition(segment)
            .map_err(|refusal| Box::new(refusal.into_response()))?;
        Ok((node, partition))
    }

    /// 503 while the store has not been reached: how many attempts failed and why the last
    /// did, so that an operator reading `/readyz` sees the cause without the agent's log.
    fn waiting(&self, message: &str) -> Response {
        let body = json!({
            "error": message,
            "waiting_for_store": true,
            "failed_attempts": self.wait.failures(),
            "last_store_error": self.wait.last_error(),
        });
        // The agent is ready within moments of the store answering: polling every second
        // costs nothing and loses little.
        let retry = [(header::RETRY_AFTER, "1")];
        (StatusCode::SERVICE_UNAVAILABLE, retry, Json(body)).into_response()
    }
}

impl Node {
    fn partition(&self, text: &str) -> Result<PartitionId, Refusal> {
        match text.parse::<u32>() {
            Ok(p) if p < self.partitions => Ok(PartitionId(p)),
            Ok(p) => Err(Refusal(
                StatusCode::NOT_FOUND,
                format!(
                    "partition {p} does not exist (the group has 0 to {})",
                    self.partitions - 1
                ),
            )),
            Err(_) => Err(Refusal(
                StatusCode::BAD_REQUEST,
                format!("{text:?} is not a partition number"),
            )),
        }
    }

    /// The answer for a partition this node does not serve: who does, and where.
    fn not_here(&self, partition: PartitionId) -> Response {
        // The map is a hint that follows the table: one still naming this node is behind
        // (the lease was just released or lost), and says nothing useful.
        let owner = self
            .router
            .owner_of_partition(partition)
            .filter(|owner| owner != self.participant.node());
        let address = owner.as_ref().and_then(|o| self.router.address_of(o));
        let body = json!({
            "error": format!("not the owner of partition {partition}"),
            "partition": partition.0,
            "owner": owner.map(|o| o.to_string()),
            "address": address.as_deref(),
        });
        (StatusCode::CONFLICT, Json(body)).into_response()
    }
}

fn lease_json(lease: &LeaseGuard) -> Value {
    json!({
        "partition": lease.partition().0,
        "epoch": lease.epoch().0,
        "ms_left": lease.remaining().as_millis() as u64,
    })
}

fn routes(agent: Arc<Agent>) -> Routes {
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
        .route("/v1/permits/{id}", delete(end_permit))
        .route("/v1/drain", post(drain))
        .route("/v1/undrain", post(undrain))
        .route("/v1/route", get(route))
        .route("/v1/map", get(map))
        .route("/v1/events", get(events))
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

async fn grant(
    State(agent): State<Arc<Agent>>,
    Segment(partition): Segment,
    headers: HeaderMap,
) -> Response {
    let (node, partition) = match agent.mutating(&headers, &partition) {
        Ok(target) => target,
        Err(answer) => return *answer,
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
    let body = json!({
        "id": id,
        "partition": partition.0,
        "epoch": permit.epoch().0,
        "ms_left": permit.remaining().as_millis() as u64,
    });
    permits.insert(id, permit);
    (StatusCode::CREATED, Json(body)).into_response()
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
        .filter(|load| load.is_finite() && *load >= 0.0);
    let Some(load) = load else {
        return error(
            StatusCode::BAD_REQUEST,
            r#"the body must be {"load": X} with X a non-negative number"#,
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

async fn events(State(agent): State<Arc<Agent>>, headers: HeaderMap) -> Response {
    if agent.node.get().is_none() {
        return agent.not_started();
    }
    let after = match resume_from(&headers) {
        Ok(after) => after,
        Err(refusal) => return refusal.into_response(),
    };
    let Ok(slot) = Arc::clone(&agent.streams).try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} event streams are open; close one first"),
        );
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
