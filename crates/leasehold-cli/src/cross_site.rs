//! What keeps a web page from using the agent or the monitor through the browser of
//! someone on the same host: DNS rebinding (a page whose name resolves to 127.0.0.1, so
//! that its requests carry its own `Host`), cross-site requests (a form or `fetch` posting
//! to `http://127.0.0.1:7464`), and framing of the monitor's page.
//!
//! - Without a token, a request must name a loopback `Host` (`127.0.0.1`, `[::1]`,
//!   `localhost`, any port) when the server listens on loopback, and must not come from
//!   another site (`Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin` that is
//!   not the `Host`). `/healthz` is exempt: it says nothing.
//! - In every mode, a request that changes something (`POST`, `PUT`, `PATCH`, `DELETE`)
//!   must carry `Content-Type: application/json`, an `Authorization` header, or
//!   `X-Leasehold-Request`: a browser sends none of them cross-site without asking the server
//!   first (a CORS preflight, which these servers never grant).
//! - Every response says how to treat it: no content sniffing, no framing, no referrer, and
//!   a content security policy that allows only the server's own scripts, styles and
//!   connections.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// The header a client sends to show its request is not a cross-site form post.
pub const REQUEST_HEADER: &str = "x-leasehold-request";

/// The content security policy of every response: the page's own scripts, styles and
/// connections only, no framing, no forms.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; \
                      base-uri 'none'; form-action 'none'";

/// How a server is reached and guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// Whether requests that change something must carry the server's token.
    pub has_token: bool,
    /// Whether the server listens on a loopback address only.
    pub loopback: bool,
}

/// The middleware: refuses what [the module](self) says, and adds the response headers.
pub async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    if let Some(refusal) = refusal(
        guard,
        request.method(),
        request.uri().path(),
        request.headers(),
    ) {
        let body = serde_json::json!({ "error": refusal });
        return with_headers((StatusCode::FORBIDDEN, Json(body)).into_response());
    }
    with_headers(next.run(request).await)
}

fn refusal(guard: Guard, method: &Method, path: &str, headers: &HeaderMap) -> Option<String> {
    if !guard.has_token && path != "/healthz" {
        if guard.loopback && !host_is_loopback(headers) {
            return Some(
                "the Host header must be a loopback address (127.0.0.1, [::1] or localhost) \
                 when the server has no token"
                    .into(),
            );
        }
        if let Some(site) = text(headers, "sec-fetch-site") {
            if site != "same-origin" && site != "none" {
                return Some(format!("a request from another site ({site}) is refused"));
            }
        }
        if let Some(origin) = text(headers, header::ORIGIN.as_str()) {
            let host = text(headers, header::HOST.as_str()).unwrap_or_default();
            let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
            if authority.is_empty() || !authority.eq_ignore_ascii_case(host) {
                return Some(format!(
                    "a request from another origin ({origin}) is refused"
                ));
            }
        }
    }
    let changes = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if changes && !announced(headers) {
        return Some(String::from(
            "a request that changes something must send Content-Type: application/json, an \
             Authorization header, or X-Leasehold-Request: 1 (so that no web page can send \
             it through a browser)",
        ));
    }
    None
}

/// Whether the request carries what no cross-site form post can.
fn announced(headers: &HeaderMap) -> bool {
    let json = text(headers, header::CONTENT_TYPE.as_str()).is_some_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("application/json"))
    });
    json || headers.contains_key(header::AUTHORIZATION) || headers.contains_key(REQUEST_HEADER)
}

fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = text(headers, header::HOST.as_str()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "127.0.0.1" || name == "::1" || name.eq_ignore_ascii_case("localhost")
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn with_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CONTENT_SECURITY_POLICY, POLICY),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    const OPEN: Guard = Guard {
        has_token: false,
        loopback: true,
    };

    #[test]
    fn loopback_hosts_are_told_apart_from_rebound_names() {
        for host in [
            "127.0.0.1:7464",
            "127.0.0.1",
            "[::1]:7464",
            "localhost:1",
            "LOCALHOST",
        ] {
            assert!(host_is_loopback(&headers(&[("host", host)])), "{host}");
        }
        for host in ["evil.example:7464", "127.0.0.1.evil.example", "[::2]:1", ""] {
            assert!(!host_is_loopback(&headers(&[("host", host)])), "{host}");
        }
        assert!(!host_is_loopback(&HeaderMap::new()));
    }

    #[test]
    fn without_a_token_only_same_origin_requests_from_a_loopback_host_pass() {
        let get = |pairs: &[(&'static str, &'static str)]| {
            refusal(OPEN, &Method::GET, "/v1/leases", &headers(pairs))
        };
        assert_eq!(get(&[("host", "127.0.0.1:7464")]), None);
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:7464"),
                ("sec-fetch-site", "same-origin")
            ]),
            None
        );
        assert_eq!(
            get(&[
                ("host", "127.0.0.1:7464"),
                ("origin", "http://127.0.0.1:7464")
            ]),
            None
        );
        assert!(get(&[("host", "evil.example:7464")]).is_some());
        assert!(get(&[("host", "127.0.0.1:7464"), ("sec-fetch-site", "same-site")]).is_some());
        assert!(get(&[
            ("host", "127.0.0.1:7464"),
            ("origin", "http://evil.example")
        ])
        .is_some());
        assert!(get(&[("host", "127.0.0.1:7464"), ("origin", "null")]).is_some());
        let health = refusal(OPEN, &Method::GET, "/healthz", &headers(&[("host", "x")]));
        assert_eq!(health, None);
        // With a token, names and origins are the token's business.
        let guarded = Guard {
            has_token: true,
            loopback: true,
        };
        let far = headers(&[("host", "agent.internal:7464"), ("origin", "http://x")]);
        assert_eq!(refusal(guarded, &Method::GET, "/v1/leases", &far), None);
    }

    #[test]
    fn a_change_must_carry_what_no_form_post_can() {
        let host = ("host", "127.0.0.1:7464");
        let post = |pairs: &[(&'static str, &'static str)]| {
            refusal(OPEN, &Method::POST, "/v1/drain", &headers(pairs))
        };
        assert!(post(&[host]).is_some());
        assert!(post(&[host, ("content-type", "text/plain")]).is_some());
        assert!(post(&[host, ("content-type", "application/x-www-form-urlencoded")]).is_some());
        assert_eq!(post(&[host, ("content-type", "application/json")]), None);
        assert_eq!(
            post(&[host, ("content-type", "Application/JSON; charset=utf-8")]),
            None
        );
        assert_eq!(post(&[host, ("x-leasehold-request", "1")]), None);
        assert_eq!(post(&[host, ("authorization", "Bearer t")]), None);
    }
}
