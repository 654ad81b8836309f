//! The Python worker in `examples/python-worker`, with the client installed from
//! `clients/python`, beside agents on one SQLite file, through a crash (SIGKILL), a drain, a
//! restart, a shutdown (SIGTERM) and a freeze (SIGSTOP). Checked from the workers' own logs: no
//! two units of work on one partition overlap in time, epochs never go back, and a partition
//! changes workers only with a higher epoch.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{http, unix_ns_now, NodeProcess, Site};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
/// No permit outlives the lease it was granted under.
const VALIDITY: Duration = common::FAST_VALIDITY;

struct Agent {
    at: String,
    process: NodeProcess,
}

/// Starts agent `id` as process `name` (a restart needs a fresh name for its output files),
/// listening on `port`, with the token `token-<id>`.
fn agent(site: &Site, name: &str, id: &str, port: u16) -> Agent {
    let token = token_file(site, id);
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["agent", "--id", id];
    args.extend(common::FAST);
    args.extend(["--listen", &listen, "--token-file", &token]);
    let process = site.process(name, &args);
    let at = http::authority(&site.printed_url(name)).to_string();
    Agent { at, process }
}

fn token_file(site: &Site, id: &str) -> String {
    let path = site.path(&format!("token-{id}"));
    std::fs::write(&path, format!("token-{id}\n")).unwrap();
    path.to_str().unwrap().to_string()
}

/// A port free now, so that a restarted agent can listen where its worker reconnects.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A running `worker.py`, killed when dropped if it is still running.
struct Worker {
    name: String,
    log: PathBuf,
    child: Child,
    exited: bool,
}

impl Worker {
    /// Starts `worker-<id>` beside `agent`, logging its units to `worker-<id>.log` and its
    /// messages to `worker-<id>.err`.
    fn start(site: &Site, id: &str, agent: &Agent) -> Worker {
        let name = format!("worker-{id}");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/python-worker/worker.py"
        );
        let log = site.path(&format!("{name}.log"));
        let stderr = File::create(site.path(&format!("{name}.err"))).unwrap();
        let child = common::python::client_python()
            .arg(script)
            .args(["--agent", &format!("http://{}", agent.at)])
            .args(["--token-file", &token_file(site, id)])
            .arg("--log")
            .arg(&log)
            .args(["--name", &name, "--unit-ms", "30"])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("the environment's python runs");
        Worker {
            name,
            log,
            child,
            exited: false,
        }
    }

    fn is_running(&mut self) -> bool {
        !self.exited && self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM and waits up to `limit` for the exit code.
    fn terminate(&mut self, limit: Duration) -> i32 {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM {}", self.name);
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.exited = true;
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop within {limit:?} of SIGTERM",
                self.name
            );
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One unit of work, as a worker logged it.
#[derive(Debug, Clone)]
struct Unit {
    worker: String,
    partition: u64,
    epoch: u64,
    start_ns: u128,
    end_ns: u128,
}

/// Every complete line of the work logs (a worker may be writing the last one).
fn units(logs: &[&Path]) -> Vec<Unit> {
    let mut units = Vec::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        for line in text[..complete].lines() {
            let unit: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: bad line {line:?}: {e}", log.display()));
            let number = |field: &str| {
                unit[field]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{}: no {field} in {line:?}", log.display()))
            };
            units.push(Unit {
                worker: unit["worker"].as_str().unwrap().to_string(),
                partition: number("partition"),
                epoch: number("epoch"),
                start_ns: number("start_ns").into(),
                end_ns: number("end_ns").into(),
            });
        }
    }
    units
}

/// Whether every partition is held by one of `holders` and is being worked on by its
/// holder's worker: a unit of it started after `since_ns`.
fn all_worked_by_holders(site: &Site, logs: &[&Path], since_ns: u128, holders: &[&str]) -> bool {
    let held = site.holders();
    let recent: BTreeSet<(String, u64)> = units(logs)
        .into_iter()
        .filter(|unit| unit.start_ns > since_ns)
        .map(|unit| (unit.worker, unit.partition))
        .collect();
    !held.is_empty()
        && held.iter().all(|(partition, holder)| match holder {
            Some(holder) => {
                holders.contains(&holder.as_str())
                    && recent.contains(&(format!("worker-{holder}"), *partition))
            }
            None => false,
        })
}

fn held_by(site: &Site, node: &str) -> Vec<u64> {
    site.holders()
        .into_iter()
        .filter(|(_, holder)| holder.as_deref() == Some(node))
        .map(|(partition, _)| partition)
        .collect()
}

/// Per partition, the units in the order they started.
fn by_partition(units: &[Unit]) -> BTreeMap<u64, Vec<Unit>> {
    let mut by_partition: BTreeMap<u64, Vec<Unit>> = BTreeMap::new();
    for unit in units {
        by_partition
            .entry(unit.partition)
            .or_default()
            .push(unit.clone());
    }
    for list in by_partition.values_mut() {
        list.sort_by_key(|unit| (unit.start_ns, unit.end_ns));
    }
    by_partition
}

/// The units on a partition that start before an earlier one on it has ended: by another
/// worker that is two servers at once, by the same one two tenures at once. Each is
/// described with the earlier unit it overlaps.
fn overlaps(partitions: &BTreeMap<u64, Vec<Unit>>) -> Vec<String> {
    let mut found = Vec::new();
    for (partition, units) in partitions {
        let mut latest: Option<&Unit> = None;
        for unit in units {
            if unit.end_ns < unit.start_ns {
                found.push(format!("{unit:?} ends before it starts"));
            }
            if let Some(before) = latest.filter(|before| unit.start_ns < before.end_ns) {
                found.push(format!(
                    "partition {partition}: overlap of {:?}:\n    {before:?}\n    {unit:?}",
                    Duration::from_nanos((before.end_ns - unit.start_ns) as u64)
                ));
            }
            if latest.is_none_or(|before| unit.end_ns > before.end_ns) {
                latest = Some(unit);
            }
        }
    }
    found
}

/// Where the epochs on a partition, in the order its units started, go back, or stay the
/// same from one worker to another.
fn stale_epochs(partitions: &BTreeMap<u64, Vec<Unit>>) -> Vec<String> {
    let mut found = Vec::new();
    for (partition, units) in partitions {
        for pair in units.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if after.epoch < before.epoch
                || (after.worker != before.worker && after.epoch == before.epoch)
            {
                found.push(format!(
                    "partition {partition}: epoch {} after {}:\n    {before:?}\n    {after:?}",
                    after.epoch, before.epoch
                ));
            }
        }
    }
    found
}

/// Per partition, each pair of consecutive units by different workers: the last unit of
/// one and the first of the next.
fn hand_overs(partitions: &BTreeMap<u64, Vec<Unit>>) -> Vec<(Unit, Unit)> {
    partitions
        .values()
        .flat_map(|units| units.windows(2))
        .filter(|pair| pair[0].worker != pair[1].worker)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

fn gap(before: &Unit, after: &Unit) -> Duration {
    Duration::from_nanos(after.start_ns.saturating_sub(before.end_ns) as u64)
}

/// The shortest gap of the hand-overs from `from`'s worker after `since_ns`.
fn shortest_gap(hand_overs: &[(Unit, Unit)], from: &str, since_ns: u128) -> Option<Duration> {
    hand_overs
        .iter()
        .filter(|(before, after)| before.worker == from && after.start_ns > since_ns)
        .map(|(before, after)| gap(before, after))
        .min()
}

/// Reads every work log, fails the test with each overlap and stale epoch found (the first
/// few in full), and returns the units by partition.
fn checked_logs(site: &Site, workers: &[&Worker]) -> BTreeMap<u64, Vec<Unit>> {
    let logs: Vec<&Path> = workers.iter().map(|worker| worker.log.as_path()).collect();
    let partitions = by_partition(&units(&logs));
    for (what, problems) in [
        ("overlapping units", overlaps(&partitions)),
        ("stale epochs", stale_epochs(&partitions)),
    ] {
        assert!(
            problems.is_empty(),
            "{} {what} in the logs under {}; the first ones:\n{}",
            problems.len(),
            site.path("").display(),
            problems[..problems.len().min(10)].join("\n")
        );
    }
    partitions
}

/// Three agents and their workers; a is killed, b drained, a restarted, c stopped. Every
/// partition passes from worker to worker at least twice, and each hand-over must be clean.
#[test]
fn python_workers_never_overlap_through_a_crash_a_drain_and_a_shutdown() {
    // Installed before any agent starts, so that the times reported are the scenario's.
    common::python::python_client_venv();
    let started_ns = unix_ns_now();
    let site = Site::new();
    site.ok(&["init", "--partitions", "12"]);
    let port_a = free_port();
    let mut a = agent(&site, "a", "a", port_a);
    let b = agent(&site, "b", "b", free_port());
    let mut c = agent(&site, "c", "c", free_port());
    let mut worker_a = Worker::start(&site, "a", &a);
    let mut worker_b = Worker::start(&site, "b", &b);
    let mut worker_c = Worker::start(&site, "c", &c);
    let (log_a, log_b, log_c) = (
        worker_a.log.clone(),
        worker_b.log.clone(),
        worker_c.log.clone(),
    );
    let logs = [log_a.as_path(), &log_b, &log_c];
    let worked_by =
        |since_ns: u128, holders: &[&str]| all_worked_by_holders(&site, &logs, since_ns, holders);

    site.wait_for(WAIT, "four partitions each, all worked on", || {
        let counts = ["a", "b", "c"].map(|node| held_by(&site, node).len());
        counts == [4, 4, 4] && worked_by(0, &["a", "b", "c"])
    });
    let balanced_ns = unix_ns_now();
    site.wait_for(WAIT, "every partition worked on by its holder", || {
        worked_by(balanced_ns, &["a", "b", "c"])
    });
    let first_of_a = held_by(&site, "a");
    let first_of_b = held_by(&site, "b");

    // a dies: its worker stops on its own, and its partitions go to b and c once their
    // leases expire. None of worker a's permits outlives the lease it came from.
    a.process.kill();
    let killed_ns = unix_ns_now();
    site.wait_for(WAIT, "b and c to work on a's partitions", || {
        worked_by(killed_ns, &["b", "c"])
    });
    assert!(
        site.node_stderr("worker-a").contains("all work stopped"),
        "worker a did not notice its agent was gone"
    );
    assert!(worker_a.is_running(), "worker a exited with its agent");

    // b drains: its partitions are handed over cooperatively, all to c.
    let drain_ns = unix_ns_now();
    // The drain is one write to the store: with three agents on one SQLite file, it can find
    // the database locked and answer 503, which asks for a retry.
    site.wait_for(WAIT, "the drain to be accepted", || {
        let response = http::request(
            &b.at,
            "POST",
            "/v1/drain",
            &["Authorization: Bearer token-b"],
            "",
        );
        assert!([200, 503].contains(&response.status), "{response:?}");
        response.status == 200
    });
    site.wait_for(WAIT, "c to work on every partition", || {
        worked_by(drain_ns, &["c"])
    });

    // a comes back where its worker keeps reconnecting, and takes half from c.
    let restart_ns = unix_ns_now();
    let _a = agent(&site, "a-restarted", "a", port_a);
    site.wait_for(WAIT, "a and c to work on six partitions each", || {
        held_by(&site, "a").len() == 6
            && held_by(&site, "c").len() == 6
            && worked_by(restart_ns, &["a", "c"])
    });

    // c stops: it hands everything over once its worker ends the permits, then exits 0.
    let stop_ns = unix_ns_now();
    assert_eq!(c.process.terminate(WAIT), 0, "{}", site.node_logs());
    site.wait_for(WAIT, "a to work on every partition", || {
        worked_by(stop_ns, &["a"])
    });

    for worker in [&mut worker_a, &mut worker_b, &mut worker_c] {
        assert_eq!(worker.terminate(WAIT), 0, "{}", site.node_logs());
    }
    let partitions = checked_logs(&site, &[&worker_a, &worker_b, &worker_c]);
    // Worker a, without an agent between the kill and the restart, started nothing once its
    // permits (no longer than the leases) had run out.
    let late: Vec<&Unit> = partitions
        .values()
        .flatten()
        .filter(|unit| unit.worker == "worker-a")
        .filter(|unit| (killed_ns + VALIDITY.as_nanos()..restart_ns).contains(&unit.start_ns))
        .collect();
    assert!(
        late.is_empty(),
        "worker a started units after its agent's leases ran out: {late:?}"
    );

    // Every partition was worked on by c (holding all after the drain) and by a (holding
    // all at the end); b's first partitions by b; a's first ones by b or c after the kill.
    for (partition, units) in &partitions {
        let by = |worker: &str| units.iter().any(|unit| unit.worker == worker);
        assert!(by("worker-a") && by("worker-c"), "partition {partition}");
        if first_of_b.contains(partition) {
            assert!(by("worker-b"), "partition {partition}");
        }
        if first_of_a.contains(partition) {
            assert!(
                units
                    .iter()
                    .any(|unit| unit.worker != "worker-a" && unit.start_ns > killed_ns),
                "partition {partition} was not taken over after the kill"
            );
        }
    }
    assert_eq!(partitions.len(), 12);
    let hand_overs = hand_overs(&partitions);
    let at = |ns: u128| Duration::from_millis(((ns - started_ns) / 1_000_000) as u64);
    eprintln!(
        "{} units, {} hand-overs between workers, the shortest gap {:?}, after the kill {:?}; \
         balanced at {:?}, killed at {:?}, drained at {:?}, restarted at {:?}, stopped at \
         {:?}, all done at {:?}",
        partitions.values().map(Vec::len).sum::<usize>(),
        hand_overs.len(),
        hand_overs.iter().map(|(b, a)| gap(b, a)).min(),
        shortest_gap(&hand_overs, "worker-a", killed_ns),
        at(balanced_ns),
        at(killed_ns),
        at(drain_ns),
        at(restart_ns),
        at(stop_ns),
        at(unix_ns_now()),
    );
}

/// An agent frozen with SIGSTOP keeps its connections open, so its worker is told nothing
/// and goes on under the permits it holds. Each must run out before another node may take
/// the partition: the deadline alone keeps the two workers apart.
#[test]
fn a_worker_beside_a_frozen_agent_stops_at_its_permits_deadline() {
    common::python::python_client_venv();
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let a = agent(&site, "a", "a", free_port());
    let b = agent(&site, "b", "b", free_port());
    let mut worker_a = Worker::start(&site, "a", &a);
    let mut worker_b = Worker::start(&site, "b", &b);
    let (log_a, log_b) = (worker_a.log.clone(), worker_b.log.clone());
    let logs = [log_a.as_path(), &log_b];
    let mut frozen_ns = 0;
    let mut after_freeze = 0;
    let mut attempts = 0;
    for attempt in 1.. {
        attempts = attempt;
        site.wait_for(WAIT, "two partitions each, all worked on", || {
            held_by(&site, "a").len() == 2
                && held_by(&site, "b").len() == 2
                && all_worked_by_holders(&site, &logs, frozen_ns, &["a", "b"])
        });
        a.process.signal("STOP");
        frozen_ns = unix_ns_now();
        let taken_over = site.poll(Duration::from_secs(5), || {
            all_worked_by_holders(&site, &logs, frozen_ns, &["b"])
        });
        after_freeze = units(&[&log_a])
            .iter()
            .filter(|unit| unit.start_ns > frozen_ns)
            .count();
        // Two ways a freeze can miss the point. It landed inside one of a's SQLite
        // transactions (likelier on a busy host): a holds the database's write lock, no
        // process can write until it runs again, and nothing is taken over (b cannot even
        // renew). Or it landed as worker a was renewing its permits: nothing ran under an
        // old permit. Either way, freeze again.
        if taken_over && after_freeze > 0 {
            break;
        }
        eprintln!("freeze {attempt}: taken over {taken_over}, {after_freeze} units after it");
        assert!(
            attempt < 6,
            "no takeover after a freeze with work under the old permits in {attempt} \
             attempts\n{}",
            site.node_logs()
        );
        a.process.signal("CONT");
    }
    a.process.signal("CONT");
    // Thawed, a finds its leases gone and takes its share back from b.
    let thawed_ns = unix_ns_now();
    site.wait_for(WAIT, "a to work on two partitions again", || {
        held_by(&site, "a").len() == 2
            && all_worked_by_holders(&site, &logs, thawed_ns, &["a", "b"])
    });

    for worker in [&mut worker_a, &mut worker_b] {
        assert_eq!(worker.terminate(WAIT), 0, "{}", site.node_logs());
    }
    let partitions = checked_logs(&site, &[&worker_a, &worker_b]);
    let hand_overs = hand_overs(&partitions);
    eprintln!(
        "worker a did {after_freeze} units after its agent froze (freeze {attempts}); the \
         shortest gap before b took over {:?}",
        shortest_gap(&hand_overs, "worker-a", frozen_ns)
    );
}

/// The checks themselves, on made-up logs: they must catch what they are there to catch.
#[test]
fn the_log_checks_catch_overlaps_and_stale_epochs() {
    let unit = |worker: &str, epoch: u64, start_ns: u128, end_ns: u128| Unit {
        worker: worker.to_string(),
        partition: 0,
        epoch,
        start_ns,
        end_ns,
    };
    let check = |units: &[Unit]| {
        let partitions = by_partition(units);
        (overlaps(&partitions).len(), stale_epochs(&partitions).len())
    };
    let clean = [
        unit("x", 1, 0, 10),
        unit("y", 2, 10, 20),
        unit("y", 2, 20, 30),
    ];
    assert_eq!(check(&clean), (0, 0));
    let hand_overs = hand_overs(&by_partition(&clean));
    assert_eq!(hand_overs.len(), 1);
    assert_eq!(gap(&hand_overs[0].0, &hand_overs[0].1), Duration::ZERO);
    // The second unit ends first: the third still overlaps the first.
    let overlapping = [
        unit("x", 1, 0, 30),
        unit("y", 2, 10, 15),
        unit("y", 2, 20, 40),
    ];
    assert_eq!(check(&overlapping), (2, 0));
    assert_eq!(check(&[unit("x", 2, 0, 10), unit("y", 2, 10, 20)]), (0, 1));
    assert_eq!(check(&[unit("x", 2, 0, 10), unit("x", 1, 10, 20)]), (0, 1));
}
