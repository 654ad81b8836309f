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
pub fn spawn(
    listener: TcpListener,
    router: Router,
    guard: Guard,
    what: &'static str,
    metrics: serve::ServeMetrics,
) {
    let router = router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(guard, cross_site::guard));
    let limits = serve::Limits::default();
    drop(serve::spawn_counted(
        listener, router, limits, what, metrics,
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
    // Visible ASCII only: a header carries nothing else intact, so any other character
    // would make a token that no request can match.
    let visible = token.bytes().all(|byte| byte.is_ascii_graphic());
    if token.is_empty() || token.len() > MAX_TOKEN || !visible {
        anyhow::bail!(
            "the token file {} must hold one token of 1 to {MAX_TOKEN} visible ASCII characters \
             (no spaces, control or non-ASCII characters)",
            path.display()
        );
    }
    warn_if_readable_by_others(path);
    Ok(token.to_string())
}

/// Warns when a token file can be read by other users than its owner: anyone who reads it
/// can do what the token allows.
fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(), mode = format!("{:o}", mode & 0o777),
                "the token file can be read by other users; `chmod 600` it"
            );
        }
    }
}

/// Whether the request carries `Authorization: Bearer <token>` (the scheme in any case, as
/// HTTP has it), compared in time independent of where it differs.
pub fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, credentials) = value.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| credentials.trim_start())
        })
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with_authorization(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case_and_the_token_exactly() {
        for good in ["Bearer t0k", "bearer t0k", "BEARER t0k", "Bearer  t0k"] {
            assert!(authorized(&with_authorization(good), "t0k"), "{good}");
        }
        for bad in [
            "Basic t0k",
            "Bearert0k",
            "Bearer t0K",
            "Bearer t0k0",
            "t0k",
            "Bearer ",
        ] {
            assert!(!authorized(&with_authorization(bad), "t0k"), "{bad}");
        }
        assert!(!authorized(&HeaderMap::new(), "t0k"));
    }

    #[test]
    fn a_token_no_header_could_carry_is_refused_at_start() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("token");
        for bad in [
            "tök",
            "a\u{7}b",
            "two words",
            "",
            &"x".repeat(MAX_TOKEN + 1),
        ] {
            std::fs::write(&file, bad).unwrap();
            let error = read_token(&file).expect_err(bad).to_string();
            assert!(error.contains("visible ASCII"), "{bad:?}: {error}");
        }
        std::fs::write(&file, "s3cret-Token_1\n").unwrap();
        assert_eq!(read_token(&file).unwrap(), "s3cret-Token_1");
    }
}
