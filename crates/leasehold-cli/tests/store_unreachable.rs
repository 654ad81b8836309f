//! Starting while the store is down: `node` and `agent` keep trying to reach it with back-off,
//! logging each failure, until it answers or SIGTERM/SIGINT ends them (exit 0, at once);
//! the agent serves `/healthz` meanwhile and answers 503 elsewhere; what trying again cannot
//! fix still ends the process at once with exit 2.
//!
//! The unreachable stores are loopback ports where nothing listens, so those tests need no
//! server. The tests that watch a store come up reach the real server from the environment
//! `scripts/test.sh` sets up through a proxy started late; a missing server fails them (or
//! skips them under `LEASEHOLD_SKIP_SERVICES=1`).

mod common;

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::http;
use serde_json::Value;

/// What the node logs for each failed attempt.
const RETRY_LINE: &str = "the store cannot be reached; trying again";
/// How long a process may take to exit after SIGTERM or SIGINT while it waits for the store.
const PROMPT: Duration = Duration::from_secs(2);
/// The longest wait for anything that should happen within a few seconds.
const WAIT: Duration = Duration::from_secs(60);
/// How long an error that no retry can mend may take to end the process: one attempt.
const AT_ONCE: Duration = Duration::from_secs(10);
/// Timings a little slower than the SQLite tests', for a store across a proxy.
const TIMINGS: [&str; 8] = [
    "--heartbeat",
    "200ms",
    "--validity",
    "800ms",
    "--acquire-after",
    "1400ms",
    "--scan-interval",
    "200ms",
];

/// A loopback port where nothing listens (bound, read and let go).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free port")
        .port()
}

/// A name no earlier run used, for groups and key prefixes on shared servers.
fn unique(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("unreachable-{kind}-{}-{nanos}", std::process::id())
}

/// A `leasehold` process in the background, its output in files, killed if dropped running.
struct Process {
    name: String,
    child: Child,
    directory: tempfile::TempDir,
}

impl Process {
    fn start(name: &str, store: &str, args: &[&str]) -> Process {
        let directory = tempfile::tempdir().expect("temporary directory");
        let file = |suffix: &str| File::create(directory.path().join(suffix)).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["--store", store, "--group", &unique(name)])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file("out"))
            .stderr(file("err"))
            .spawn()
            .expect("start leasehold");
        Process {
            name: name.to_owned(),
            child,
            directory,
        }
    }

    fn read(&self, suffix: &str) -> String {
        let path: PathBuf = self.directory.path().join(suffix);
        std::fs::read_to_string(path).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        self.read("err")
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("poll the process").is_none()
    }

    /// Polls `condition` every 50 ms for at most `limit` while the process runs, failing
    /// with its stderr if it exits first or the time runs out.
    fn wait_for(
        &mut self,
        limit: Duration,
        what: &str,
        mut condition: impl FnMut(&mut Self) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        while !condition(self) {
            assert!(
                self.is_running(),
                "{}: exited while waiting for {what}\nstderr:\n{}",
                self.name,
                self.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "{}: timed out after {limit:?} waiting for {what}\nstderr:\n{}",
                self.name,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address of the agent's API, once printed.
    fn listening_at(&mut self) -> String {
        let mut at = None;
        self.wait_for(WAIT, "the agent to print its address", |process| {
            at = process
                .read("out")
                .split_whitespace()
                .find_map(|word| word.strip_prefix("http://"))
                .map(|rest| rest.trim_end_matches('/').to_owned());
            at.is_some()
        });
        at.unwrap()
    }

    /// Sends `signal` and returns the exit code and how long the exit took.
    fn stop(&mut self, signal: &str) -> (i32, Duration) {
        let sent = Instant::now();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.name);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the process") {
                return (status.code().unwrap_or(-1), sent.elapsed());
            }
            assert!(
                sent.elapsed() < WAIT,
                "{} did not exit after SIG{signal}\nstderr:\n{}",
                self.name,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit by itself within `limit`, returning its exit code.
    fn exit_code_within(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the process") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "{}: still running after {limit:?}\nstderr:\n{}",
                self.name,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn retries_logged(&self) -> usize {
        self.stderr()
            .lines()
            .filter(|line| line.contains(RETRY_LINE))
            .count()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pause a retry line announces (`retry_in=1.2s`, `retry_in=250ms`).
fn announced_pause(line: &str) -> Duration {
    let text = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("retry_in="))
        .unwrap_or_else(|| panic!("no retry_in in {line:?}"));
    if let Some(ms) = text.strip_suffix("ms") {
        Duration::from_secs_f64(ms.parse::<f64>().expect("milliseconds") / 1e3)
    } else {
        let seconds = text.strip_suffix('s').expect("a unit");
        Duration::from_secs_f64(seconds.parse().expect("seconds"))
    }
}

/// Starts a node on `store`, which nothing answers, and checks that it keeps trying, logging
/// the error and the next pause each time, until `signal` ends it at once with exit 0.
fn node_waits_until_stopped(kind: &str, store: &str, signal: &str) {
    let mut node = Process::start(kind, store, &["node", "--id", "n1", "--partitions", "4"]);
    node.wait_for(WAIT, "four failed attempts", |node| {
        node.retries_logged() >= 4
    });
    assert!(node.is_running(), "{kind}: {}", node.stderr());
    let stderr = node.stderr();
    let retries: Vec<&str> = stderr.lines().filter(|l| l.contains(RETRY_LINE)).collect();
    for (index, line) in retries.iter().enumerate() {
        assert!(line.contains(" WARN "), "{kind}: {line}");
        assert!(
            line.contains(&format!("attempt={}", index + 1)),
            "{kind}: {line}"
        );
        // Opening fails, or (etcd, which connects lazily) the first read.
        assert!(line.contains("store unavailable"), "{kind}: {line}");
        assert!(
            announced_pause(line) <= Duration::from_secs(5),
            "{kind}: {line}"
        );
    }
    // Equal jitter keeps each pause in the upper half of a ceiling that doubles from 100 ms.
    assert!(
        announced_pause(retries[0]) <= Duration::from_millis(100),
        "{stderr}"
    );
    assert!(
        announced_pause(retries[3]) >= Duration::from_millis(400),
        "{stderr}"
    );
    let (code, took) = node.stop(signal);
    assert_eq!(code, 0, "{kind}: {}", node.stderr());
    assert!(took < PROMPT, "{kind}: took {took:?} to stop");
    assert!(
        node.stderr()
            .contains("stopping before the store was reached"),
        "{kind}: {}",
        node.stderr()
    );
    assert!(!node.stderr().contains("panicked"), "{}", node.stderr());
}

#[test]
fn a_node_keeps_trying_an_unreachable_postgres_and_stops_at_once_on_sigterm() {
    let url = format!("postgres://leasehold@127.0.0.1:{}/leases", free_port());
    node_waits_until_stopped("postgres", &url, "TERM");
}

#[test]
fn a_node_keeps_trying_an_unreachable_zookeeper_and_stops_at_once_on_sigint() {
    let url = format!("zk://127.0.0.1:{}/leasehold", free_port());
    node_waits_until_stopped("zookeeper", &url, "INT");
}

#[test]
#[cfg(feature = "etcd")]
fn a_node_keeps_trying_an_unreachable_etcd_and_stops_at_once_on_sigterm() {
    let url = format!("etcd://127.0.0.1:{}/leasehold", free_port());
    node_waits_until_stopped("etcd", &url, "TERM");
}

/// A server that accepts connections and never answers holds each attempt until its time
/// limit: a signal must still end the process at once, not after the attempt.
#[test]
fn a_signal_ends_an_attempt_the_store_never_answers() {
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().unwrap().port();
    for (kind, url) in [
        (
            "postgres",
            format!("postgres://leasehold@127.0.0.1:{port}/leases"),
        ),
        ("zookeeper", format!("zk://127.0.0.1:{port}/leasehold")),
    ] {
        let mut node = Process::start(kind, &url, &["node", "--id", "n1", "--partitions", "4"]);
        thread::sleep(Duration::from_millis(500));
        assert!(node.is_running(), "{kind}: {}", node.stderr());
        // Each client waits seconds for an answer: the first attempt is still running.
        assert_eq!(node.retries_logged(), 0, "{kind}: {}", node.stderr());
        let (code, took) = node.stop("TERM");
        assert_eq!(code, 0, "{kind}: {}", node.stderr());
        assert!(took < PROMPT, "{kind}: took {took:?} to stop");
    }
    drop(silent);
}

/// What no wait can mend ends the process at once with exit 2, even on a store that could
/// be unreachable: a malformed URL here, a group that does not exist below.
#[test]
fn a_malformed_store_url_still_ends_the_node_at_once() {
    let agent = ["agent", "--id", "a1", "--listen", "127.0.0.1:0"];
    for args in [&["node", "--id", "n1"][..], &agent] {
        let mut process = Process::start("malformed", "zk://127.0.0.1:notaport/x", args);
        assert_eq!(process.exit_code_within(AT_ONCE), 2, "{}", process.stderr());
        let stderr = process.stderr();
        assert!(stderr.contains("invalid store URL"), "{stderr}");
        assert!(!stderr.contains(RETRY_LINE), "{stderr}");
    }
}

#[test]
fn a_group_that_was_never_initialised_still_ends_the_node_at_once() {
    let Some(url) = leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL")
    else {
        return;
    };
    let agent = ["agent", "--id", "a1", "--listen", "127.0.0.1:0"];
    for args in [&["node", "--id", "n1"][..], &agent] {
        let mut process = Process::start("uninitialised", &url, args);
        assert_eq!(process.exit_code_within(AT_ONCE), 2, "{}", process.stderr());
        let stderr = process.stderr();
        assert!(stderr.contains("does not exist"), "{stderr}");
        assert!(!stderr.contains(RETRY_LINE), "{stderr}");
    }
}

/// A TCP proxy on a loopback port to `upstream`, one pair of copying threads per
/// connection; it stops accepting when dropped.
struct Proxy {
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(port: u16, upstream: String) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the proxy's port");
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        if let Ok(server) = TcpStream::connect(&upstream) {
                            forward(client, server);
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(10));
                    }
                    Err(error) => panic!("proxy accept: {error}"),
                }
            }
        });
        Proxy { stop }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies bytes both ways until either side closes.
fn forward(client: TcpStream, server: TcpStream) {
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        thread::spawn(move || {
            let mut buffer = [0u8; 16 * 1024];
            while let Ok(read @ 1..) = from.read(&mut buffer) {
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    };
    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
    pipe(server, client);
}

/// An agent of four partitions, its API on a port the system picks.
const AGENT: [&str; 7] = [
    "agent",
    "--id",
    "a1",
    "--partitions",
    "4",
    "--listen",
    "127.0.0.1:0",
];

/// Starts an agent on `store` (at the proxy's port, where nothing listens yet), checks what
/// it answers while it waits, then starts the proxy to `upstream` and checks that the agent
/// becomes ready and takes every partition.
fn agent_waits_for_the_store(kind: &str, port: u16, upstream: String, store: &str) {
    let mut args = AGENT.to_vec();
    args.extend(TIMINGS);
    let mut agent = Process::start(kind, store, &args);
    let at = agent.listening_at();

    let health = http::get(&at, "/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    // A few seconds of back-off, as when the store restarts with the fleet.
    agent.wait_for(WAIT, "five failed attempts", |agent| {
        agent.retries_logged() >= 5
    });
    let ready = http::get(&at, "/readyz");
    assert_eq!(ready.status, 503, "{ready:?}");
    let body = ready.json();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("waiting for the store"),
        "{body}"
    );
    assert_eq!(body["waiting_for_store"], true, "{body}");
    assert!(body["failed_attempts"].as_u64().unwrap() >= 5, "{body}");
    assert!(
        body["last_store_error"]
            .as_str()
            .unwrap()
            .contains("cannot open store"),
        "{body}"
    );
    for (method, path) in [
        ("GET", "/v1/leases"),
        ("GET", "/v1/leases/1"),
        ("POST", "/v1/leases/1/permits"),
        ("POST", "/v1/leases/1/release"),
        ("DELETE", "/v1/permits/1"),
        ("POST", "/v1/drain"),
        ("GET", "/v1/route?key=k"),
        ("GET", "/v1/map"),
        ("GET", "/v1/events"),
    ] {
        let response = http::request(&at, method, path, &[], "");
        assert_eq!(response.status, 503, "{method} {path}: {response:?}");
        assert_eq!(
            response.json()["waiting_for_store"],
            true,
            "{method} {path}"
        );
    }
    assert!(agent.is_running(), "{}", agent.stderr());

    let _proxy = Proxy::start(port, upstream);
    agent.wait_for(WAIT, "the agent to be ready", |_| {
        http::get(&at, "/readyz").status == 200
    });
    agent.wait_for(WAIT, "the agent to hold every partition", |_| {
        let leases: Value = http::get(&at, "/v1/leases").json();
        leases["leases"].as_array().map_or(0, Vec::len) == 4
    });
    assert!(
        agent.stderr().contains("store reached"),
        "{}",
        agent.stderr()
    );
    let (code, _) = agent.stop("TERM");
    assert_eq!(code, 0, "{}", agent.stderr());
}

#[test]
fn an_agent_started_before_postgres_serves_meanwhile_and_takes_partitions_once_it_answers() {
    let Some(url) = leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL")
    else {
        return;
    };
    // postgres://USER@HOST:PORT/DATABASE: the same with the proxy's port.
    let (scheme_user, rest) = url.split_once('@').expect("a user in the URL");
    let (upstream, database) = rest.split_once('/').expect("a database in the URL");
    let port = free_port();
    let store = format!("{scheme_user}@127.0.0.1:{port}/{database}");
    agent_waits_for_the_store("postgres", port, upstream.to_owned(), &store);
}

#[test]
fn an_agent_started_before_zookeeper_serves_meanwhile_and_takes_partitions_once_it_answers() {
    let Some(hosts) = leasehold::testing::service_env("LEASEHOLD_TEST_ZOOKEEPER", "ZooKeeper")
    else {
        return;
    };
    let upstream = hosts.split(',').next().unwrap().to_owned();
    let port = free_port();
    let store = format!("zk://127.0.0.1:{port}/{}", unique("zk-prefix"));
    agent_waits_for_the_store("zookeeper", port, upstream, &store);
}

#[test]
fn a_monitor_waits_for_an_unreachable_store_and_shrugs_off_sighup() {
    let url = format!("postgres://leasehold@127.0.0.1:{}/leases", free_port());
    let args = ["monitor", "--listen", "127.0.0.1:0"];
    let mut monitor = Process::start("monitor", &url, &args);
    monitor.wait_for(WAIT, "two failed attempts", |monitor| {
        monitor.retries_logged() >= 2
    });
    let kill = |signal: &str| {
        let id = monitor.child.id().to_string();
        Command::new("kill")
            .args([signal, &id])
            .status()
            .expect("run kill")
    };
    assert!(kill("-HUP").success());
    monitor.wait_for(WAIT, "one more attempt after SIGHUP", |monitor| {
        monitor.retries_logged() >= 3
    });
    let (code, _) = monitor.stop("TERM");
    assert_eq!(code, 0, "{}", monitor.stderr());
}

#[test]
fn an_agent_with_a_token_keeps_the_store_it_waits_for_to_itself() {
    let url = format!("postgres://leasehold@127.0.0.1:{}/hidden_db", free_port());
    let directory = tempfile::tempdir().expect("temporary directory");
    let token = directory.path().join("token");
    std::fs::write(&token, "waiting-token").unwrap();
    let mut args = AGENT.to_vec();
    args.extend(["--token-file", token.to_str().unwrap()]);
    let mut agent = Process::start("agent-token", &url, &args);
    let at = agent.listening_at();
    agent.wait_for(WAIT, "two failed attempts", |agent| {
        agent.retries_logged() >= 2
    });
    let ready = http::get(&at, "/readyz");
    assert_eq!(ready.status, 503, "{ready:?}");
    let body = ready.json();
    assert!(body["failed_attempts"].as_u64().unwrap() >= 2, "{body}");
    assert!(body["last_store_error"].is_null(), "{body}");
    assert!(!ready.body.contains("hidden_db"), "{body}");
    assert!(
        agent.stderr().contains("hidden_db"),
        "the log keeps the cause"
    );
}
