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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold::metrics::Registry;
use leasehold::{Callbacks, GroupName, LeaseStore, Participant, PartitionId, Router, WorkPermit};
use serde_json::json;

use crate::announce::{announcing, Announcement};
use crate::cli::{AgentArgs, Cli};
use crate::cross_site::Guard;
use crate::http::{authorized, error};
use crate::node_process;
use crate::stream_slots::StreamSlots;
use crate::Outcome;
use leasehold_process::serve::ServeMetrics;
use leasehold_process::{Process, StoreWait};

mod api;
mod events;
use api::routes;
use events::{EventCallbacks, Events, Loads};

/// Permits outstanding at once: each holds a lease's hand-off open.
const MAX_PERMITS: usize = 10_000;
/// Event streams served at once: each holds a connection and a task.
const MAX_STREAMS: usize = 64;
/// Event streams served at once to one address.
const MAX_STREAMS_PER_PEER: usize = 16;
/// Events kept for a reader resuming with `Last-Event-ID`.
const EVENTS_KEPT: usize = 1024;
/// How often permits that ran out (lease lost or past its deadline) are dropped.
const REAP_EVERY: Duration = Duration::from_millis(250);
/// How often the agent's router reloads the whole map besides following change notices.
const ROUTER_POLL: Duration = Duration::from_secs(5);

/// A request refused: its status and what was wrong.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// What the handlers share.
struct Agent {
    /// Set once the store is reached and the node started; until then `/v1` answers 503.
    node: OnceLock<Node>,
    /// How the wait for the store is going, for the 503 answers meanwhile.
    wait: Arc<StoreWait>,
    permits: Mutex<BTreeMap<u64, Held>>,
    /// Loads reported by workers, shared with the node's callbacks.
    loads: Arc<Loads>,
    next_permit: AtomicU64,
    /// Turned off at SIGTERM: the permits outstanding end, no new one is granted.
    granting: AtomicBool,
    token: Option<String>,
    registry: Arc<Registry>,
    events: Arc<Events>,
    streams: Arc<StreamSlots>,
}

/// A permit the agent holds for a worker, and when it ends by itself if the worker never
/// ends it (a worker that crashed holding it).
struct Held {
    permit: WorkPermit,
    expires: Option<tokio::time::Instant>,
}

/// The longest time-to-live a permit may be given.
const MAX_PERMIT_TTL: Duration = Duration::from_secs(24 * 3600);

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
    let events = Arc::new(Events::new());
    let loads: Arc<Loads> = Arc::default();
    let callbacks: Arc<dyn Callbacks> =
        Arc::new(EventCallbacks(Arc::clone(&events), Arc::clone(&loads)));
    let (process, work) = node_process::prepare(cli, &args.node, None, Some(callbacks))?;
    let mut registry = Registry::default();
    let serving = ServeMetrics::register(&mut registry);
    let process = process.metrics_in(registry).follow_router(ROUTER_POLL);
    let (listener, bound) = crate::http::bind(&args.listen, "the agent").await?;
    let agent = Arc::new(Agent {
        node: OnceLock::new(),
        wait: process.store_wait(),
        permits: Mutex::new(BTreeMap::new()),
        next_permit: AtomicU64::new(1),
        granting: AtomicBool::new(true),
        token,
        registry: process.registry().cloned().unwrap_or_default(),
        events,
        loads,
        streams: StreamSlots::new(MAX_STREAMS, MAX_STREAMS_PER_PEER),
    });
    let reaper = tokio::spawn(reap(Arc::clone(&agent)));
    // Without a token the agent listens on loopback only (checked above).
    let guard = Guard {
        has_token: agent.token.is_some(),
        loopback: bound.ip().is_loopback(),
    };
    crate::http::spawn(
        listener,
        routes(Arc::clone(&agent)),
        guard,
        "agent",
        serving,
    );
    let announcement = Announcement::new(format!("listening on http://{bound}/"));
    let serving = serve(cli, process, work, &agent, &announcement);
    let outcome = announcing(&agent.wait, &announcement, serving).await;
    reaper.abort();
    outcome
}

/// Reaches the store and starts the node, hands it to the handlers (making `announcement`),
/// and runs it until a signal.
async fn serve(
    cli: &Cli,
    process: Process,
    work: node_process::Work,
    agent: &Agent,
    announcement: &Announcement,
) -> anyhow::Result<Outcome> {
    let Some(mut running) = process.start().await.map_err(node_process::explain)? else {
        return Ok(Outcome::Success);
    };
    let node = Node {
        participant: running.participant().clone(),
        router: running
            .router()
            .cloned()
            .expect("the process follows the router"),
        store: Arc::clone(running.store()),
        group: cli.group.clone(),
        partitions: running.partitions(),
    };
    if agent.node.set(node).is_err() {
        unreachable!("the agent's node is set once");
    }
    announcement.say()?;
    let beside = work.start(&running);
    let reason = running.wait().await;
    agent.granting.store(false, Ordering::SeqCst);
    node_process::stop(running, beside).await;
    reason.into_result()?;
    Ok(Outcome::Success)
}

/// Drops permits that no longer hold anything (their lease was lost, or ran out) and those
/// past their time-to-live, whose worker never ended them.
async fn reap(agent: Arc<Agent>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let now = tokio::time::Instant::now();
        agent.permits().retain(|id, held| {
            let expired = held.expires.is_some_and(|at| at <= now);
            if expired {
                let partition = held.permit.partition();
                tracing::warn!(permit = id, %partition, "a permit reached its time-to-live without being ended; ending it");
            }
            held.permit.is_valid() && !expired
        });
    }
}

impl Agent {
    fn permits(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Held>> {
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
    /// Not the cause when the agent has a token: it names the store's host and path, and an
    /// agent with a token may listen where anyone can ask (the log has it).
    fn waiting(&self, message: &str) -> Response {
        let cause = match self.token {
            None => self.wait.last_error(),
            Some(_) => None,
        };
        let body = json!({
            "error": message,
            "waiting_for_store": true,
            "failed_attempts": self.wait.failures(),
            "last_store_error": cause,
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
