//! Serving HTTP with limits, for every server of the project (the agent, the monitor, the
//! metrics endpoint, the example applications): a client that is slow, idle or one of
//! thousands cannot take the process's memory, its file descriptors, or the answers its
//! supervisor's probes need.
//!
//! - Request headers must arrive within [`Limits::header_read_timeout`], counted from when
//!   the connection is ready for a request: it cuts off a client sending a byte at a time,
//!   and a connection kept open without a request, new or kept alive.
//! - A handler must produce its response's head within [`Limits::request_timeout`] (503
//!   otherwise); a streamed body (an event stream) is not limited.
//! - At most [`Limits::max_connections`] connections are served at once; one more is closed
//!   at once, logged (once a minute while it lasts) and counted ([`Server::refused`]).
//! - A client that stops reading a response (an event stream) is cut off once its window
//!   has stayed closed for [`Limits::stalled_reader_timeout`].
//! - Each request carries its peer's address, as axum's `ConnectInfo<SocketAddr>`.
//! - Accept errors (out of file descriptors) are logged, and the loop pauses before
//!   accepting again instead of spinning.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use leasehold::metrics::Registry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tower::ServiceExt;

/// How long the accept loop pauses after an accept error.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// How often the refusal of connections over the cap is logged while it lasts.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// The limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection may take to send a request's headers, from when it is ready
    /// for one (opened, or done with the previous request). Default 10 s.
    pub header_read_timeout: Duration,
    /// How long a handler may take to produce its response's head. Default 30 s.
    pub request_timeout: Duration,
    /// Connections served at once. Default 512.
    pub max_connections: usize,
    /// How long a response may wait on a client that does not read it (its TCP receive
    /// window closed), or whose host is gone, before the connection is cut
    /// (`TCP_USER_TIMEOUT`). Default 30 s.
    pub stalled_reader_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 512,
            stalled_reader_timeout: Duration::from_secs(30),
        }
    }
}

/// The serving figures of one server, to register with its other metrics:
/// `leasehold_http_connections_open` and `leasehold_http_connections_refused_total`.
#[derive(Debug, Clone, Default)]
pub struct ServeMetrics {
    open: Gauge,
    refused: Counter,
}

impl ServeMetrics {
    /// Registers the figures in `registry`.
    pub fn register(registry: &mut Registry) -> ServeMetrics {
        let metrics = ServeMetrics::default();
        let r = registry.sub_registry_with_prefix("leasehold");
        r.register(
            "http_connections_open",
            "HTTP connections being served",
            metrics.open.clone(),
        );
        r.register(
            "http_connections_refused",
            "HTTP connections closed at once because the server's cap was reached",
            metrics.refused.clone(),
        );
        metrics
    }
}

/// A server running in the background. Dropping it leaves the server running for the life
/// of the process.
#[derive(Debug)]
pub struct Server {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    connections: Arc<Semaphore>,
    max_connections: usize,
    refused: Arc<AtomicU64>,
}

impl Server {
    /// Connections refused because [`Limits::max_connections`] were open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.max_connections - self.connections.available_permits()
    }

    /// Stops accepting, lets the requests in flight finish (each connection closes after
    /// its current response), and returns once every connection has closed or `grace` has
    /// passed, whichever comes first; whether all closed in time.
    pub async fn shutdown(self, grace: Duration) -> bool {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let all = u32::try_from(self.max_connections).unwrap_or(u32::MAX);
        let closed = tokio::time::timeout(grace, self.connections.acquire_many(all)).await;
        matches!(closed, Ok(Ok(_)))
    }
}

/// Serves `router` on `listener` in the background, within `limits`; `what` names the
/// server in the log.
pub fn spawn(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    what: &'static str,
) -> Server {
    spawn_counted(listener, router, limits, what, ServeMetrics::default())
}

/// Like [`spawn`], counting connections in `metrics`.
pub fn spawn_counted(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    what: &'static str,
    metrics: ServeMetrics,
) -> Server {
    let (stop, stopped) = watch::channel(false);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let refused = Arc::new(AtomicU64::new(0));
    let accepting = accept(
        Accepting {
            listener,
            router,
            limits,
            what,
            metrics,
        },
        stopped,
        Arc::clone(&connections),
        Arc::clone(&refused),
    );
    Server {
        stop,
        task: tokio::spawn(accepting),
        connections,
        max_connections: limits.max_connections,
        refused,
    }
}

/// What the accept loop serves, and how.
struct Accepting {
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    what: &'static str,
    metrics: ServeMetrics,
}

async fn accept(
    accepting: Accepting,
    mut stopped: watch::Receiver<bool>,
    connections: Arc<Semaphore>,
    refused: Arc<AtomicU64>,
) {
    let Accepting {
        listener,
        router,
        limits,
        what,
        metrics,
    } = accepting;
    let mut last_refusal_log: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop_requested(&mut stopped) => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(server = what, %error, "cannot accept a connection; pausing");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            let count = refused.fetch_add(1, Ordering::Relaxed) + 1;
            metrics.refused.inc();
            let now = tokio::time::Instant::now();
            if last_refusal_log.is_none_or(|at| now >= at + REFUSAL_LOG_EVERY) {
                last_refusal_log = Some(now);
                tracing::warn!(
                    server = what,
                    max_connections = limits.max_connections,
                    refused = count,
                    "connection limit reached; closing new connections until some close"
                );
            }
            drop(stream);
            continue;
        };
        // A client that stops reading (its receive window closed) while a response is
        // written to it is cut off after this long, as is one whose host vanished.
        let socket = socket2::SockRef::from(&stream);
        if let Err(error) = socket.set_tcp_user_timeout(Some(limits.stalled_reader_timeout)) {
            tracing::debug!(server = what, %error, "cannot set TCP_USER_TIMEOUT");
        }
        let router = router.clone();
        let stopped = stopped.clone();
        let open = metrics.open.clone();
        open.inc();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, limits, stopped).await;
            open.dec();
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
) {
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let router = router.clone();
        // Handlers that count by client (event-stream slots) read it as axum's ConnectInfo.
        request.extensions_mut().insert(ConnectInfo(peer));
        async move {
            let handling = router.oneshot(request.map(Body::new));
            match tokio::time::timeout(limits.request_timeout, handling).await {
                Ok(response) => response,
                Err(_) => Ok::<Response<Body>, Infallible>(too_slow()),
            }
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        // A failed connection (a client gone, headers too slow) concerns that client only.
        _ = &mut connection => {}
        () = stop_requested(&mut stopped) => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Resolves once a stop is asked for; never, once the [`Server`] was dropped (the server
/// then runs for the life of the process).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    if stopped.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn too_slow() -> Response<Body> {
    let body = serde_json::json!({ "error": "the request took too long" });
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// Serves `router` on `listener` until `shutdown` resolves, within `limits`, then stops
/// as [`Server::shutdown`] does, giving requests in flight `grace`.
pub async fn serve_until(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> bool {
    let server = spawn(listener, router, limits, what);
    shutdown.await;
    server.shutdown(grace).await
}
