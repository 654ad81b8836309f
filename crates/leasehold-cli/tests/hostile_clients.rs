//! The agent and the monitor under clients that hold connections: thousands of idle
//! connections and a client sending its headers a byte at a time. The server's file
//! descriptors and memory stay bounded, `/healthz` answers again once the idle connections
//! have been cut off by the header-read timeout, and the slow client is cut off by it too.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::EventStream;
use common::{http, NodeProcess, Site, FAST};

/// Idle connections opened against each server.
const FLOOD: usize = 2000;
/// The servers' cap on connections (`leasehold_process::serve::Limits`'s default), and what
/// the process holds open besides.
const MAX_CONNECTIONS: usize = 512;
const OTHER_FILES: usize = 128;
/// The servers' header-read timeout, and a margin for a loaded machine.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(20);

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The status code of `GET /healthz` on a new connection, if the server answered.
fn healthz(at: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(at).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// Sends a request's headers a byte every 200 ms; returns how long the server let it.
fn slow_headers(at: String) -> Duration {
    let mut stream = TcpStream::connect(&at).unwrap();
    let started = Instant::now();
    for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        .iter()
        .cycle()
    {
        if stream.write_all(&[*byte]).is_err() {
            break;
        }
        let mut probe = [0u8; 64];
        stream.set_nonblocking(true).unwrap();
        let closed = matches!(stream.read(&mut probe), Ok(0));
        stream.set_nonblocking(false).unwrap();
        if closed {
            break;
        }
        assert!(started.elapsed() < HEADER_TIMEOUT + MARGIN, "still served");
        std::thread::sleep(Duration::from_millis(200));
    }
    started.elapsed()
}

fn holds_up(server: &NodeProcess, at: &str) {
    let pid = server.pid();
    assert_eq!(healthz(at), Some(200));
    let resident_before = resident_kib(pid);
    let slow = std::thread::spawn({
        let at = at.to_owned();
        move || slow_headers(at)
    });
    let flood: Vec<TcpStream> = (0..FLOOD)
        .filter_map(|_| TcpStream::connect(at).ok())
        .collect();
    assert!(
        flood.len() > FLOOD / 2,
        "only {} connections opened",
        flood.len()
    );
    std::thread::sleep(Duration::from_millis(500));
    let files = open_files(pid);
    assert!(
        files <= MAX_CONNECTIONS + OTHER_FILES,
        "{files} files open with {} connections held",
        flood.len()
    );
    let grown = resident_kib(pid).saturating_sub(resident_before);
    assert!(grown < 64 * 1024, "resident memory grew by {grown} KiB");

    // Answered again once the idle connections are cut off, while the flood still holds
    // its sockets open.
    let deadline = Instant::now() + HEADER_TIMEOUT + MARGIN;
    while healthz(at) != Some(200) {
        assert!(Instant::now() < deadline, "/healthz unanswered");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The refusals are counted where Prometheus reads them.
    let metrics = http::get(at, "/metrics").body;
    let refused = metrics
        .lines()
        .find_map(|line| line.strip_prefix("leasehold_http_connections_refused_total "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no refusal count in:\n{metrics}"));
    assert!(refused >= 1.0, "{refused}");
    let cut = slow.join().unwrap();
    eprintln!("{at}: {files} files open under the flood, resident memory +{grown} KiB, the slow client cut off after {cut:?}");
    assert!(
        cut < HEADER_TIMEOUT + MARGIN,
        "the slow client was served {cut:?}"
    );
    drop(flood);
}

#[test]
fn the_agent_and_the_monitor_hold_up_under_idle_and_slow_connections() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let mut args = vec!["agent", "--id", "a", "--listen", "127.0.0.1:0"];
    args.extend(FAST);
    let agent = site.process("a", &args);
    let agent_at = http::authority(&site.printed_url("a")).to_string();
    holds_up(&agent, &agent_at);

    let monitor = site.process("monitor", &["monitor", "--listen", "127.0.0.1:0"]);
    let monitor_at = http::authority(&site.printed_url("monitor")).to_string();
    holds_up(&monitor, &monitor_at);
}

/// A request as a browser would send it for a page of `origin` (`None`: a plain program),
/// with `host` as its Host header.
fn browser_post(at: &str, host: &str, path: &str, extra: &[&str]) -> http::Response {
    let mut text = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for header in extra {
        text.push_str(header);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    http::raw(at, text.as_bytes()).expect("an answer")
}

#[test]
fn web_pages_cannot_use_an_agent_without_a_token_through_a_browser() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let mut args = vec!["agent", "--id", "a", "--listen", "127.0.0.1:0"];
    args.extend(FAST);
    let _agent = site.process("a", &args);
    let at = http::authority(&site.printed_url("a")).to_string();
    site.wait_for(Duration::from_secs(60), "the agent ready", || {
        http::get(&at, "/readyz").status == 200
    });
    let marker = "X-Leasehold-Request: 1";
    // DNS rebinding: the page's own name, resolved to 127.0.0.1.
    let rebound = browser_post(&at, "evil.example:7464", "/v1/drain", &[marker]);
    assert_eq!(rebound.status, 403, "{rebound:?}");
    // A cross-site form post: no header a page could not send.
    let form = browser_post(&at, &at, "/v1/drain", &["Content-Type: text/plain"]);
    assert_eq!(form.status, 403, "{form:?}");
    assert!(form.body.contains("X-Leasehold-Request"), "{form:?}");
    // A fetch from another site that got past the other checks.
    let other = browser_post(
        &at,
        &at,
        "/v1/drain",
        &[marker, "Origin: http://evil.example"],
    );
    assert_eq!(other.status, 403, "{other:?}");
    let fetched = browser_post(
        &at,
        &at,
        "/v1/drain",
        &[marker, "Sec-Fetch-Site: cross-site"],
    );
    assert_eq!(fetched.status, 403, "{fetched:?}");
    assert_eq!(http::get(&at, "/v1/leases").status, 200);
    for refused in [rebound, form, other, fetched] {
        assert_eq!(refused.header("x-frame-options"), Some("DENY"));
    }
    // A program's request passes, and the node was never drained before it.
    let draining = || {
        let status = site.status();
        let members = status["members"].as_array().cloned().unwrap_or_default();
        members
            .iter()
            .any(|m| m["node"] == "a" && m["draining"] == true)
    };
    assert!(!draining(), "a refused request drained the node");
    let drained = browser_post(&at, &at, "/v1/drain", &[marker]);
    assert_eq!(drained.status, 200, "{drained:?}");
    site.wait_for(Duration::from_secs(30), "the drain in the table", draining);
}

#[test]
fn the_monitors_page_is_served_with_a_policy_against_framing_and_foreign_code() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let _monitor = site.process("monitor", &["monitor", "--listen", "127.0.0.1:0"]);
    let at = http::authority(&site.printed_url("monitor")).to_string();
    let page = http::get(&at, "/");
    assert_eq!(page.status, 200);
    let policy = page.header("content-security-policy").unwrap_or_default();
    assert!(policy.contains("default-src 'self'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let rebound = http::raw(
        &at,
        b"GET /api/map HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(rebound.expect("an answer").status, 403);
}

#[test]
fn one_address_cannot_take_every_event_stream_slot() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let _monitor = site.process("monitor", &["monitor", "--listen", "127.0.0.1:0"]);
    let at = http::authority(&site.printed_url("monitor")).to_string();
    // Eight from one address (the monitor's cap per peer), each answered with its map.
    let mut open: Vec<EventStream> = (0..8)
        .map(|_| EventStream::open(&at, "/api/events"))
        .collect();
    let refused = http::get(&at, "/api/events");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.body.contains("from 127.0.0.1"), "{refused:?}");
    // A stream that ends gives its slot back.
    drop(open.pop());
    site.wait_for(Duration::from_secs(30), "the slot given back", || {
        let mut stream = std::net::TcpStream::connect(&at).unwrap();
        let request = format!("GET /api/events HTTP/1.1\r\nHost: {at}\r\n\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
    });
}
