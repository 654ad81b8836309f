//! The Prometheus scrape over HTTP: `/metrics` (OpenMetrics or the older text format, as
//! the scraper asks) and `/healthz`, served from before the store is reached so that a
//! supervisor sees the process alive while it waits.

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

use crate::serve::Limits;

/// The largest request body read: these endpoints take none.
const MAX_BODY: usize = 16 * 1024;

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

/// `/metrics` and `/healthz` over `registry`.
pub fn metrics_routes(registry: Arc<Registry>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| async move { scrape(&registry, &headers) }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// Binds `address` (`HOST:PORT`; port 0 picks a free one), naming it and `what` in the error.
pub async fn bind(address: &str, what: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} for {what}"))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot read the address bound for {what}"))?;
    Ok((listener, bound))
}

/// The answer to a path no route has, in the JSON every endpoint of the project answers
/// errors in.
pub async fn not_found(uri: Uri) -> Response {
    let body = serde_json::json!({ "error": format!("no such endpoint: {}", uri.path()) });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// Serves `/metrics` and `/healthz` over `registry` on `address` in the background, within
/// the default [`Limits`]; returns the address bound. A failure of the server once running is
/// logged, never fatal to the process it reports on.
pub async fn serve_metrics(address: &str, registry: Arc<Registry>) -> anyhow::Result<SocketAddr> {
    let (listener, bound) = bind(address, "metrics").await?;
    let routes = metrics_routes(registry)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY));
    drop(crate::serve::spawn(
        listener,
        routes,
        Limits::default(),
        "metrics",
    ));
    Ok(bound)
}
