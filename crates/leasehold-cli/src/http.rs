//! What the HTTP endpoints of `node --metrics-listen` and `monitor` share: binding with a
//! clear error, JSON errors, a small body limit, and the Prometheus scrape.

use anyhow::Context;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tokio::net::TcpListener;

use leasehold_process::serve;

use crate::cross_site::{self, Guard};
pub use leasehold_process::{bind, not_found, scrape};

/// The largest request body any endpoint reads: actions carry a node name or a partition.
pub const MAX_BODY: usize = 16 * 1024;

/// A JSON error response: `{"error": "..."}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, Json(body)).into_response()
}

/// Serves `router` on `listener` in the background, with the body limit, JSON 404s, the
/// checks against cross-site use ([`crate::cross_site`]) and the limits every server has
/// ([`leasehold_process::serve`]: header and request timeouts, a connection cap). It runs
/// for the life of the process.
pub fn spawn(listener: TcpListener, router: Router, guard: Guard, what: &'static str) {
    let router = router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(guard, cross_site::guard));
    drop(serve::spawn(
        listener,
        router,
        serve::Limits::default(),
        what,
    ));
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
