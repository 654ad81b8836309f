//! What the HTTP endpoints of `node --metrics-listen` and `monitor` share: binding with a
//! clear error, JSON errors, a small body limit, and the Prometheus scrape.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use leasehold::metrics::Registry;
use tokio::net::TcpListener;

/// The largest request body any endpoint reads: actions carry a node name or a partition.
pub const MAX_BODY: usize = 16 * 1024;

/// A JSON error response: `{"error": "..."}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, Json(body)).into_response()
}

/// The answer to a path no route has.
pub async fn not_found(uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", uri.path()),
    )
}

/// `/metrics` for `registry`: OpenMetrics when the scraper accepts it (Prometheus does),
/// the older Prometheus text format otherwise.
pub fn scrape(registry: &Registry, headers: &HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let (content_type, text) = if openmetrics {
        let text = leasehold::metrics::encode(registry);
        (leasehold::metrics::CONTENT_TYPE, text)
    } else {
        let text = leasehold::metrics::encode_text(registry);
        (leasehold::metrics::TEXT_CONTENT_TYPE, text)
    };
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// `/metrics` and `/healthz` over `registry`, for a node.
pub fn metrics_routes(registry: Arc<Registry>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| async move { scrape(&registry, &headers) }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// Binds `address` (`HOST:PORT`; port 0 picks a free one), naming it in the error.
pub async fn bind(address: &str, what: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} for {what}"))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {what}"))?;
    Ok((listener, bound))
}

/// Serves `router` on `listener` in the background, with the body limit and JSON 404s. A
/// failure of the server is logged, never fatal to the process it reports on.
pub fn spawn(listener: TcpListener, router: Router, what: &'static str) {
    let router = router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY));
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "the {what} server stopped");
        }
    });
}

/// The longest bearer token read from a token file.
const MAX_TOKEN: usize = 4096;

/// Reads a token file (`--token-file`): one token, without spaces, naming the file in any
/// error.
pub fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || token.len() > MAX_TOKEN || token.contains(char::is_whitespace) {
        anyhow::bail!(
            "the token file {} must hold one token of 1 to {MAX_TOKEN} characters without spaces",
            path.display()
        );
    }
    Ok(token.to_string())
}

/// Whether the request carries `Authorization: Bearer <token>`, compared in time
/// independent of where it differs.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (given, token) = (given.as_bytes(), token.as_bytes());
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}
