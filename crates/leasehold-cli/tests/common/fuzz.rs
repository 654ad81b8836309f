//! Random requests against an HTTP endpoint: paths, query strings, bodies and headers no
//! well-behaved client sends.

use proptest::prelude::*;

use super::http;

fn segment(words: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(words).prop_map(str::to_string),
        Just("v1".to_string()),
        Just("%00".to_string()),
        Just("..".to_string()),
        Just("18446744073709551616".to_string()),
        "[a-zA-Z0-9%._~-]{0,12}",
    ]
}

fn request(
    words: &'static [&'static str],
) -> impl Strategy<Value = (String, String, String, bool)> {
    (
        prop_oneof![
            Just("GET"),
            Just("POST"),
            Just("PUT"),
            Just("DELETE"),
            Just("HEAD")
        ],
        prop::collection::vec(segment(words), 0..5),
        "[ -~]{0,40}",
        prop::collection::vec(any::<u8>().prop_map(|b| b % 128), 0..300),
        prop::bool::ANY,
    )
        .prop_map(|(method, segments, query, body, authorized)| {
            let mut path = format!("/{}", segments.join("/"));
            if !query.is_empty() {
                // Spaces are not allowed in a request target.
                path.push('?');
                path.push_str(&query.replace(' ', "+"));
            }
            let body = String::from_utf8_lossy(&body).into_owned();
            (method.to_string(), path, body, authorized)
        })
}

/// Sends 200 random requests to `at` (with the bearer token `fuzz-token` on about half)
/// and asserts that every answer is below 500 and that `/healthz` still answers. Requests
/// for `stream` (an endpoint that never ends) are skipped.
pub fn nothing_crashes(at: &str, words: &'static [&'static str], stream: &str) {
    let config = ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |((method, path, body, authorized) in request(words))| {
        if path.starts_with(stream) && method == "GET" {
            return Ok(());
        }
        let mut text = format!(
            "{method} {path} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        if authorized {
            text.push_str("Authorization: Bearer fuzz-token\r\n");
        }
        text.push_str("\r\n");
        text.push_str(&body);
        if let Some(response) = http::raw(at, text.as_bytes()) {
            prop_assert!(response.status < 500, "{method} {path} {body:?}: {response:?}");
        }
    });
    assert_eq!(http::get(at, "/healthz").body, "ok\n");
}
