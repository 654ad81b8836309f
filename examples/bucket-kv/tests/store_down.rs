//! A server started while its lease store or its data file cannot be used waits for it, and
//! serves once it can: the file is held locked (as a busy or unreachable store would be, or
//! the other servers of a loaded host writing to the data file they share) until the server
//! has shown it is waiting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

const BINARY: &str = env!("CARGO_BIN_EXE_bucket-kv");
/// Generous for a loaded machine: the waits below end as soon as what they wait for shows.
const LIMIT: Duration = Duration::from_secs(60);
const WAITING: &str = "the store cannot be reached; trying again";
const DATA_WAITING: &str = "the data file is busy; trying again";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status code of `GET path`, if the server answered.
fn status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

fn wait_until(what: &str, server: &mut Child, log: &Path, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        if let Some(status) = server.try_wait().unwrap() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the server exited with {status} before {what}; its log:\n{log}");
        }
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_started_while_its_store_is_locked_waits_and_serves_once_it_is_free() {
    started_while_locked("leases.db", WAITING);
}

#[test]
fn a_server_started_while_its_data_file_is_locked_waits_and_serves_once_it_is_free() {
    started_while_locked("data.db", DATA_WAITING);
}

/// Starts a server while `file` (its lease store or its data file) is held in an exclusive
/// transaction, sees it log `waiting` twice, frees the file, and sees it serve and stop.
fn started_while_locked(file: &str, waiting: &str) {
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path().join("leases.db");
    let log = directory.path().join("server.log");
    let mut lock = rusqlite::Connection::open(directory.path().join(file)).unwrap();
    let holding = lock.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive);
    let holding = holding.unwrap();

    let port = free_port();
    let mut server = Command::new(BINARY)
        .arg("server")
        .args(["--id", "server-1", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--store")
        .arg(format!("sqlite:{}", store.display()))
        .arg("--data")
        .arg(directory.path().join("data.db"))
        .args(["--buckets", "8", "--fast"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let tries = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.matches(waiting).count()
    };
    wait_until("it retried twice", &mut server, &log, || tries() >= 2);

    holding.rollback().unwrap();
    drop(lock);
    wait_until("it held its buckets", &mut server, &log, || {
        status(port, "/readyz") == Some(200)
    });

    kill_process(Pid::from_child(&server), Signal::TERM).unwrap();
    let deadline = Instant::now() + LIMIT;
    let exit = loop {
        if let Some(exit) = server.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {LIMIT:?} of SIGTERM"
        );
        sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exit.success(), "{exit}; its log:\n{text}");
}
