//! The server: serves the buckets it holds a lease on, and answers `not owner` for the rest.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use leasehold::{
    GroupName, NodeId, Participant, ParticipantConfig, PartitionId, Router, WorkPermit,
};
use leasehold_process::{serve, Process};

use crate::api::{ErrorBody, Read, ServerStats, Written, GROUP, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::data::{DataError, DataStore, WriteOutcome};

/// How often the server's own router re-reads the whole lease table, besides following the
/// store's change notices. It only feeds the owner hints of `not owner` answers.
const ROUTER_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The longest the HTTP side waits for requests in flight once the leases are handed off.
const HTTP_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A server's settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The server's name in the group; a restart under the same name gets its buckets back.
    pub id: NodeId,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The URL it advertises to clients; `http://{listen}` if unset.
    pub advertise: Option<String>,
    /// The lease store's URL (any scheme `leasehold-process` reads; `sqlite:` in the demos).
    pub store_url: String,
    /// The shared data file.
    pub data_path: PathBuf,
    /// How many buckets (partitions) the key space has.
    pub buckets: u32,
    /// Short lease timings ([`ParticipantConfig::fast`]) for tests and demos.
    pub fast: bool,
    /// The limit on each data table call.
    pub data_timeout: Duration,
    /// The most buckets taken in one scan; all of them if unset.
    pub max_acquires_per_scan: Option<u32>,
}

struct AppState {
    node: NodeId,
    buckets: u32,
    participant: Participant,
    router: Router,
    data: DataStore,
    shutting_down: AtomicBool,
    served: AtomicU64,
    not_owner: AtomicU64,
    stale_refused: AtomicU64,
}

/// An error answer: a status and a JSON body.
struct ApiError(StatusCode, ErrorBody);

impl ApiError {
    fn plain(status: StatusCode, error: &str, bucket: Option<u32>) -> ApiError {
        ApiError(
            status,
            ErrorBody {
                error: error.to_owned(),
                bucket,
                owner: None,
                address: None,
            },
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

impl From<DataError> for ApiError {
    fn from(error: DataError) -> ApiError {
        tracing::warn!(error = %error, cause = ?std::error::Error::source(&error), "data store call failed");
        ApiError::plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "data store unavailable",
            None,
        )
    }
}

/// Runs a server until SIGTERM or SIGINT, then hands its buckets off and returns. While the
/// lease store cannot be reached it waits for it, trying again with back-off. Returns an
/// error if it cannot start, or if its lease loop ends on its own.
pub async fn run(config: ServerConfig) -> anyhow::Result<()> {
    let group = GroupName::new(GROUP).context("group name")?;
    let data = DataStore::open_waiting(&config.data_path, config.data_timeout)
        .await
        .with_context(|| format!("opening the data file {}", config.data_path.display()))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let process = Process::new(&config.store_url, participant_config(&config, group))?
        .create_records()
        .follow_router(ROUTER_POLL_INTERVAL);
    let Some(mut running) = process.start().await? else {
        return Ok(());
    };
    let state = Arc::new(AppState {
        node: config.id.clone(),
        buckets: config.buckets,
        participant: running.participant().clone(),
        router: running.router().cloned().context("the bucket map")?,
        data,
        shutting_down: AtomicBool::new(false),
        served: AtomicU64::new(0),
        not_owner: AtomicU64::new(0),
        stale_refused: AtomicU64::new(0),
    });
    let app = axum::Router::new()
        .route("/kv/{key}", get(get_key).put(put_key).delete(delete_key))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/stats", get(stats))
        .layer(DefaultBodyLimit::max(MAX_VALUE_BYTES))
        .with_state(Arc::clone(&state));

    let http = serve::spawn(listener, app, serve::Limits::default(), "bucket-kv");

    let reason = running.wait().await;
    state.shutting_down.store(true, Ordering::SeqCst);
    // The HTTP side keeps answering while the leases are handed off, so that requests for
    // buckets being given up get `not owner` (and a retry elsewhere) rather than a refused
    // connection.
    running.stop().await;
    if !http.shutdown(HTTP_DRAIN_TIMEOUT).await {
        tracing::warn!("requests still in flight after the drain timeout");
    }
    reason.into_result()
}

/// The participant's settings for `config`.
fn participant_config(config: &ServerConfig, group: GroupName) -> ParticipantConfig {
    let mut participant_config = if config.fast {
        ParticipantConfig::fast(config.id.clone(), config.buckets)
    } else {
        ParticipantConfig::new(config.id.clone(), config.buckets)
    };
    participant_config.group = group;
    // A node above its share releases its whole surplus in one scan, and a bucket released
    // for a taker stays unserved until the taker takes it: letting the taker take every one
    // at once keeps a hand-off to one scan, where the default of 16 per scan would leave most
    // of a restarted server's buckets unserved for several.
    participant_config.max_acquires_per_scan = config
        .max_acquires_per_scan
        .unwrap_or(config.buckets)
        .max(1);
    participant_config.advertise = Some(
        config
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{}", config.listen)),
    );
    participant_config
}

async fn readyz(State(state): State<Arc<AppState>>) -> StatusCode {
    // Ready once the server holds its share: a rolling restart moves on only after the
    // restarted server has taken its buckets back.
    let target = state.participant.status().target;
    let owned = state.participant.owned().len();
    if state.shutting_down.load(Ordering::SeqCst) || target == 0 || owned < target as usize {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn stats(State(state): State<Arc<AppState>>) -> Json<ServerStats> {
    Json(ServerStats {
        server: state.node.to_string(),
        served: state.served.load(Ordering::Relaxed),
        not_owner: state.not_owner.load(Ordering::Relaxed),
        stale_writes_refused: state.stale_refused.load(Ordering::Relaxed),
        buckets_owned: state.participant.owned().len(),
    })
}

impl AppState {
    /// The key from the path, checked, and its bucket.
    fn bucket_of(
        &self,
        key: Result<Path<String>, PathRejection>,
    ) -> Result<(String, u32), ApiError> {
        let Ok(Path(key)) = key else {
            return Err(ApiError::plain(StatusCode::BAD_REQUEST, "bad key", None));
        };
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(ApiError::plain(StatusCode::BAD_REQUEST, "bad key", None));
        }
        let bucket = leasehold::partition_for_key(&key, self.buckets).0;
        Ok((key, bucket))
    }

    /// A work permit on `bucket`, or the `not owner` answer naming who the router believes
    /// holds it.
    fn permit(&self, bucket: u32) -> Result<WorkPermit, ApiError> {
        if let Some(permit) = self.participant.permit(PartitionId(bucket)) {
            return Ok(permit);
        }
        self.not_owner.fetch_add(1, Ordering::Relaxed);
        // Our own name is no hint: the router may not have seen us give the bucket up yet.
        let owner = self
            .router
            .owner_of_partition(PartitionId(bucket))
            .filter(|owner| *owner != self.node);
        let address = owner
            .as_ref()
            .and_then(|owner| self.router.address_of(owner));
        Err(ApiError(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorBody {
                error: "not owner".to_owned(),
                bucket: Some(bucket),
                owner: owner.map(|owner| owner.to_string()),
                address: address.map(|address| address.to_string()),
            },
        ))
    }

    fn written(
        &self,
        bucket: u32,
        epoch: u64,
        outcome: WriteOutcome,
    ) -> Result<Json<Written>, ApiError> {
        match outcome {
            WriteOutcome::Applied { existed } => {
                self.served.fetch_add(1, Ordering::Relaxed);
                Ok(Json(Written {
                    bucket,
                    epoch,
                    server: self.node.to_string(),
                    existed,
                }))
            }
            WriteOutcome::Stale { highest } => {
                self.stale_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    bucket,
                    epoch,
                    highest,
                    "write refused: a newer owner has written"
                );
                Err(ApiError::plain(
                    StatusCode::CONFLICT,
                    "stale epoch",
                    Some(bucket),
                ))
            }
        }
    }
}

async fn put_key(
    State(state): State<Arc<AppState>>,
    key: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Written>, ApiError> {
    let (key, bucket) = state.bucket_of(key)?;
    let body =
        body.map_err(|rejection| ApiError::plain(rejection.status(), "bad value", Some(bucket)))?;
    let value = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::plain(StatusCode::BAD_REQUEST, "bad value", Some(bucket)))?;
    // Held until the write is committed: a hand-off of the bucket waits for it.
    let permit = state.permit(bucket)?;
    let epoch = permit.epoch().0;
    let outcome = state.data.put(bucket, key, value, epoch).await?;
    drop(permit);
    state.written(bucket, epoch, outcome)
}

async fn delete_key(
    State(state): State<Arc<AppState>>,
    key: Result<Path<String>, PathRejection>,
) -> Result<Json<Written>, ApiError> {
    let (key, bucket) = state.bucket_of(key)?;
    let permit = state.permit(bucket)?;
    let epoch = permit.epoch().0;
    let outcome = state.data.delete(bucket, key, epoch).await?;
    drop(permit);
    state.written(bucket, epoch, outcome)
}

async fn get_key(
    State(state): State<Arc<AppState>>,
    key: Result<Path<String>, PathRejection>,
) -> Result<Json<Read>, ApiError> {
    let (key, bucket) = state.bucket_of(key)?;
    // Reads go through the owner as well, as they must where each server keeps its buckets'
    // data to itself.
    let permit = state.permit(bucket)?;
    let stored = state.data.get(bucket, key).await?;
    let epoch = permit.epoch().0;
    drop(permit);
    state.served.fetch_add(1, Ordering::Relaxed);
    Ok(Json(Read {
        bucket,
        epoch,
        server: state.node.to_string(),
        value: stored.map(|stored| stored.value),
    }))
}
