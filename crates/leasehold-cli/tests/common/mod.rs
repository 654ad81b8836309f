//! Helpers for tests that run the `leasehold` binary as real processes over an SQLite file,
//! or over PostgreSQL in a group of their own.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::LeaseMode;
use serde_json::Value;

pub mod fuzz;
pub mod http;
pub mod python;

/// Fast node timings: renew every 200 ms, valid 1 s, take over after 1.3 s. A renewal may
/// land up to 800 ms late before its lease runs out: on a machine whose cores other programs
/// keep busy, a process waits that long for a turn now and then, and a test that assumes
/// it never does fails for the machine's sake, not the product's.
pub const FAST: [&str; 8] = [
    "--heartbeat",
    "200ms",
    "--validity",
    "1s",
    "--acquire-after",
    "1300ms",
    "--scan-interval",
    "100ms",
];

/// `--validity` in [`FAST`]: no lease, and no permit under it, outlives its last renewal by
/// more than this.
pub const FAST_VALIDITY: Duration = Duration::from_secs(1);

/// The wait after which a lease abandoned by its holder is taken over, with margin.
pub const TAKEOVER: Duration = Duration::from_millis(1300);

/// How long [`Site::assert_leases_renewed_by_sessions`] watches a settled table: five
/// heartbeats of [`FAST`], each a renewal that would write every lease record held per
/// partition.
const SETTLED_WINDOW: Duration = Duration::from_millis(1000);

/// A temporary directory holding the processes' logs, and the store they run against: an
/// SQLite file in the directory, or a group of its own on a shared server.
pub struct Site {
    directory: tempfile::TempDir,
    server: Option<Server>,
}

/// A store shared with other tests: the site keeps to its own group there.
struct Server {
    url: String,
    group: String,
}

impl Site {
    /// A new empty site over an SQLite file.
    pub fn new() -> Site {
        Site {
            directory: tempfile::tempdir().expect("temporary directory"),
            server: None,
        }
    }

    /// A new site over the PostgreSQL server at `LEASEHOLD_TEST_POSTGRES_URL`; `None` when
    /// the test is to skip.
    pub fn postgres() -> Option<Site> {
        let url = leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL")?;
        Some(Site::on_server(url))
    }

    /// A path inside the site's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.directory.path().join(name)
    }

    /// The `--store` URL of the site's database.
    pub fn store(&self) -> String {
        match &self.server {
            Some(server) => server.url.clone(),
            None => format!("sqlite://{}", self.path("leases.db").display()),
        }
    }

    /// `--store` and, on a shared server, `--group`: what every process of the site is given.
    fn store_args(&self) -> Vec<String> {
        let mut args = vec!["--store".to_owned(), self.store()];
        if let Some(server) = &self.server {
            args.extend(["--group".to_owned(), server.group.clone()]);
        }
        args
    }

    /// Runs `leasehold --store <site> args...` to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        let store_args = self.store_args();
        let mut all: Vec<&str> = store_args.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        leasehold(&all)
    }

    /// Prepares a group of `partitions` renewing in `mode`, before any node starts. Per
    /// partition, the default, it leaves creating the group to the nodes' `--partitions`; any
    /// other mode must be in the group record before the first node joins.
    pub fn create_group(&self, partitions: u32, mode: LeaseMode) {
        if mode != LeaseMode::PerPartition {
            let partitions = partitions.to_string();
            self.ok(&[
                "init",
                "--partitions",
                &partitions,
                "--lease-mode",
                mode.as_str(),
            ]);
        }
    }

    /// Asserts that the nodes renew by session: over several heartbeats in which no partition
    /// changes hands, no lease record is written, while every holder's member record is.
    /// Retries while partitions still move, as after a failover or a hand-off.
    pub fn assert_leases_renewed_by_sessions(&self) {
        let window = SETTLED_WINDOW;
        for _ in 0..10 {
            let before = self.status();
            sleep(window);
            let after = self.status();
            let tenures = |status: &Value| {
                partitions(status)
                    .into_iter()
                    .map(|p| (p.partition, p.holder, p.epoch, p.state))
                    .collect::<Vec<_>>()
            };
            if tenures(&before) != tenures(&after) {
                continue;
            }
            let (leases_before, leases_after) = (partitions(&before), partitions(&after));
            for (old, new) in leases_before.iter().zip(&leases_after) {
                assert_eq!(
                    old.version, new.version,
                    "partition {}: its lease record was written in {window:?} in which it \
                     stayed with {:?}\nbefore: {before:#}\nafter: {after:#}",
                    old.partition, new.holder
                );
            }
            let holders: BTreeSet<_> = leases_after
                .iter()
                .filter_map(|p| p.holder.clone())
                .collect();
            assert!(!holders.is_empty(), "nobody holds anything: {after:#}");
            let (members_before, members_after) = (members(&before), members(&after));
            for holder in &holders {
                let (Some(old), Some(new)) =
                    (members_before.get(holder), members_after.get(holder))
                else {
                    panic!("holder {holder} has no member record: {before:#}\n{after:#}");
                };
                assert!(
                    old.version != new.version && new.heartbeat > old.heartbeat,
                    "holder {holder}'s session was not renewed in {window:?}: \
                     {old:?} then {new:?}"
                );
            }
            return;
        }
        panic!(
            "partitions kept changing hands for 10 windows of {window:?}\nnode logs:\n{}",
            self.node_logs()
        );
    }

    /// Runs a command that must succeed, returning its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert_eq!(run.code, 0, "leasehold {args:?} failed: {run:?}");
        run.stdout
    }

    /// `status --json`, parsed.
    pub fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).expect("status --json is JSON")
    }

    /// Per partition, its holder (owner of a held record), from `status --json`; empty
    /// while the group does not exist yet, for polling while nodes start.
    pub fn holders(&self) -> BTreeMap<u64, Option<String>> {
        let run = self.run(&["status", "--json"]);
        if run.code != 0 {
            assert!(
                run.stderr.contains("does not exist"),
                "status failed: {run:?}"
            );
            return BTreeMap::new();
        }
        let status: Value = serde_json::from_str(&run.stdout).expect("status --json is JSON");
        partitions(&status)
            .into_iter()
            .map(|p| (p.partition, p.holder))
            .collect()
    }

    /// Polls `condition` every 50 ms for at most `limit`; returns whether it came true.
    pub fn poll(&self, limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if condition() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Like [`wait_for`], with every node's stderr in the failure message.
    pub fn wait_for(&self, limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !condition() {
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what}\nstatus:\n{}\nnode logs:\n{}",
                    self.run(&["status", "--by-node"]).stdout,
                    self.node_logs()
                );
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Every node's stderr, each under its file name.
    pub fn node_logs(&self) -> String {
        let mut logs = String::new();
        for entry in std::fs::read_dir(self.directory.path()).expect("read site") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "err") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                logs.push_str(&format!("== {}\n{text}", path.display()));
            }
        }
        logs
    }

    /// Starts `leasehold node --id ID` with fast timings and `extra` flags; its stderr goes
    /// to `<id>.err` in the site for diagnosis.
    pub fn node(&self, id: &str, extra: &[&str]) -> NodeProcess {
        let stderr = File::create(self.path(&format!("{id}.err"))).expect("stderr file");
        let stdout = File::create(self.path(&format!("{id}.out"))).expect("stdout file");
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(self.store_args())
            .args(["node", "--id", id])
            .args(FAST)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start leasehold node");
        NodeProcess {
            id: id.to_owned(),
            child,
            exited: false,
        }
    }

    /// Starts `leasehold --store <site> args...` in the background as `name`: standard
    /// output to `<name>.out`, standard error to `<name>.err`.
    pub fn process(&self, name: &str, args: &[&str]) -> NodeProcess {
        self.process_on(name, &self.store(), args)
    }

    /// Starts `leasehold --store STORE args...` as `name`, in the site's group but through
    /// another address of its server (a proxy's, say); output as [`Site::process`].
    pub fn process_on(&self, name: &str, store: &str, args: &[&str]) -> NodeProcess {
        self.spawn(name, store, args, &[])
    }

    /// [`Site::process`] with `env` set for the process.
    pub fn process_with_env(&self, name: &str, args: &[&str], env: &[(&str, &str)]) -> NodeProcess {
        self.spawn(name, &self.store(), args, env)
    }

    fn spawn(&self, name: &str, store: &str, args: &[&str], env: &[(&str, &str)]) -> NodeProcess {
        let stderr = File::create(self.path(&format!("{name}.err"))).expect("stderr file");
        let stdout = File::create(self.path(&format!("{name}.out"))).expect("stdout file");
        let mut store_args = self.store_args();
        store_args[1] = store.to_owned();
        let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(store_args)
            .args(args)
            .env_remove("LEASEHOLD_GROUP")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start leasehold");
        NodeProcess {
            id: name.to_owned(),
            child,
            exited: false,
        }
    }

    /// A site over the store at `url`, shared with other tests, in a group of its own.
    pub fn on_server(url: String) -> Site {
        Site {
            server: Some(Server {
                url,
                group: unique_group(),
            }),
            ..Site::new()
        }
    }

    /// The first `http://` URL a process started here printed on its standard output
    /// (`<name>.out`), waiting for it: the address a server bound.
    pub fn printed_url(&self, name: &str) -> String {
        let path = self.path(&format!("{name}.out"));
        let mut url = None;
        self.wait_for(
            Duration::from_secs(30),
            &format!("{name} to print its address"),
            || {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                url = text
                    .split_whitespace()
                    .find(|word| word.starts_with("http://"))
                    .map(str::to_string);
                url.is_some()
            },
        );
        url.unwrap()
    }

    /// The stderr a node wrote so far.
    pub fn node_stderr(&self, id: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{id}.err"))).unwrap_or_default()
    }
}

/// Runs `leasehold args...` to completion, with no store or log settings from the
/// environment.
pub fn leasehold(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("LEASEHOLD_GROUP")
        .stdin(Stdio::null())
        .output()
        .expect("run leasehold");
    Run::from(output)
}

/// One finished command.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1 if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// A running `leasehold node`, killed when dropped if it is still running.
pub struct NodeProcess {
    /// Its `--id`.
    pub id: String,
    child: Child,
    exited: bool,
}

impl NodeProcess {
    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) with the `kill` command.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.id);
    }

    /// Kills the node with SIGKILL and returns once it is gone.
    pub fn kill(&mut self) {
        self.signal("KILL");
        self.child.wait().expect("wait for killed node");
        self.exited = true;
    }

    /// Sends SIGTERM and waits up to `limit` for the exit code.
    pub fn terminate(&mut self, limit: Duration) -> i32 {
        self.signal("TERM");
        self.exit_code(limit)
    }

    /// Waits up to `limit` for the process to exit by itself; returns its exit code.
    pub fn exit_code(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for node") {
                self.exited = true;
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "process {} did not exit within {limit:?}",
                self.id
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        !self.exited && self.child.try_wait().expect("poll node").is_none()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if !self.exited {
            // A stopped process must be continued, or SIGKILL still ends it; either way reap it.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One partition of `status --json`.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// The partition.
    pub partition: u64,
    /// The owner if the record is held.
    pub holder: Option<String>,
    /// The epoch.
    pub epoch: u64,
    /// `held`, `released` or `offline`.
    pub state: String,
    /// The record's version in the store, which every write changes.
    pub version: String,
    /// Milliseconds since the record was written, by this machine's clock.
    pub age_ms: Option<u64>,
}

/// One member record of `status --json`.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// The record's version in the store, which every write changes.
    pub version: String,
    /// How many heartbeats the node has written.
    pub heartbeat: u64,
}

/// The partitions of a `status --json` document.
pub fn partitions(status: &Value) -> Vec<PartitionView> {
    status["partitions"]
        .as_array()
        .expect("partitions array")
        .iter()
        .map(|p| {
            let state = p["state"].as_str().expect("state").to_owned();
            let owner = p["owner"].as_str().map(str::to_owned);
            PartitionView {
                partition: p["partition"].as_u64().expect("partition"),
                holder: owner.filter(|_| state == "held"),
                epoch: p["epoch"].as_u64().expect("epoch"),
                state,
                version: p["version"].as_str().expect("version").to_owned(),
                age_ms: p["age_ms"].as_u64(),
            }
        })
        .collect()
}

/// The member records of a `status --json` document, by node.
pub fn members(status: &Value) -> BTreeMap<String, MemberView> {
    status["members"]
        .as_array()
        .expect("members array")
        .iter()
        .map(|m| {
            let view = MemberView {
                version: m["version"].as_str().expect("version").to_owned(),
                heartbeat: m["heartbeat"].as_u64().expect("heartbeat"),
            };
            (m["node"].as_str().expect("node").to_owned(), view)
        })
        .collect()
}

/// A group name no other test process uses, for tests sharing a server.
fn unique_group() -> String {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    let count = COUNT.fetch_add(1, Ordering::SeqCst);
    format!("cli-nodes-{}-{count}-{nanos}", std::process::id())
}

/// Polls `condition` every 50 ms until it holds, failing the test after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        sleep(Duration::from_millis(50));
    }
}

/// Nanoseconds since the Unix epoch, as the node's logs write them.
pub fn unix_ns_now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// One line of a fence or work log: `<unix_ns> <node> <event> <partition> <epoch>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When, in nanoseconds since the Unix epoch.
    pub at: u128,
    /// Which node wrote it.
    pub node: String,
    /// `acquired`, `released`, `expired`, `conflict`, `stopped` or `work`.
    pub event: String,
    /// The partition.
    pub partition: u32,
    /// The epoch.
    pub epoch: u64,
}

/// Reads every line of a fence or work log, panicking on a malformed one.
pub fn read_log(path: &Path) -> Vec<LogLine> {
    parse_log(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The complete lines of a work log that running nodes may be appending to.
pub fn read_log_so_far(path: &Path) -> Vec<LogLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or(0, |end| end + 1);
    parse_log(&text[..complete])
}

fn parse_log(text: &str) -> Vec<LogLine> {
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 5, "malformed log line {line:?}");
            LogLine {
                at: fields[0].parse().expect("time"),
                node: fields[1].to_owned(),
                event: fields[2].to_owned(),
                partition: fields[3].parse().expect("partition"),
                epoch: fields[4].parse().expect("epoch"),
            }
        })
        .collect()
}

/// Asserts that stderr names each of `needles` and shows no panic.
pub fn assert_clean_error(run: &Run, needles: &[&str]) {
    assert_clean_error_exiting(run, 2, needles);
}

/// [`assert_clean_error`] for a command that exits with `code` on an error (`stale`: 3).
pub fn assert_clean_error_exiting(run: &Run, code: i32, needles: &[&str]) {
    assert_eq!(run.code, code, "expected exit code {code}: {run:?}");
    for needle in needles {
        assert!(
            run.stderr.contains(needle),
            "stderr should name {needle:?}: {run:?}"
        );
    }
    assert!(!run.stderr.contains("panicked"), "{run:?}");
    assert!(!run.stderr.contains("RUST_BACKTRACE"), "{run:?}");
}

/// Whether a node's log (`stderr`) says it lost the tenure `epoch` of `partition` other than
/// by handing it off: the lease expired (its renewals did not land in time), or a renewal
/// whose outcome was unknown landed late and the next found the record changed (a conflict).
/// A hand-off ends a tenure as released, and only after the units under it.
pub fn lost_under(stderr: &str, partition: u32, epoch: u64) -> bool {
    let tenure = format!("partition={partition} epoch={epoch} reason=");
    stderr.lines().any(|line| {
        line.contains("lease lost")
            && line.contains(&tenure)
            && !line.contains("reason=\"released\"")
    })
}
