//! `leasehold exec`: a command runs only while its node holds the lease, and two nodes'
//! commands never work at once, through a kill, a pause, a drain and a SIGTERM of the
//! holding `exec` process.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{Site, FAST};
use leasehold::LeaseMode;

/// A command that appends `<unix_ns> <node> work <partition> <epoch>` every 50 ms, and a
/// `stop` line when asked to stop: every line is a unit of work done under the lease.
fn worker_script(log: &std::path::Path) -> String {
    let log = log.display();
    format!(
        "line() {{ echo \"$(date +%s%N) $LEASEHOLD_NODE $1 $LEASEHOLD_PARTITION $LEASEHOLD_EPOCH\" >> {log}; }}
         trap 'line stop; exit 0' TERM
         while :; do line work; sleep 0.05; done"
    )
}

/// One line of the work log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    node: String,
    word: String,
    partition: u32,
    epoch: u64,
}

fn read_log(path: &std::path::Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, node, word, partition, epoch] => Some(Line {
                    node: node.to_string(),
                    word: word.to_string(),
                    partition: partition.parse().ok()?,
                    epoch: epoch.parse().ok()?,
                }),
                _ => None,
            }
        })
        .collect()
}

/// The runs in the order their work reached the file: each run is one node under one epoch.
/// Appends to one file are ordered by when they happened, so a run whose lines resume after
/// another run's began was working while the other was: the overlap this test forbids.
fn runs_in_order(lines: &[Line]) -> Vec<(String, u64)> {
    let mut runs: Vec<(String, u64)> = Vec::new();
    for line in lines {
        let run = (line.node.clone(), line.epoch);
        if runs.last() == Some(&run) {
            continue;
        }
        assert!(
            !runs.contains(&run),
            "{} worked under epoch {} again after {:?} had begun: two commands worked at once\n{lines:#?}",
            run.0,
            run.1,
            runs.last()
        );
        runs.push(run);
    }
    runs
}

/// The runs of each partition, in the order their work reached the file ([`runs_in_order`]).
fn runs_by_partition(lines: &[Line]) -> std::collections::BTreeMap<u32, Vec<(String, u64)>> {
    let mut by_partition: std::collections::BTreeMap<u32, Vec<Line>> = Default::default();
    for line in lines {
        by_partition
            .entry(line.partition)
            .or_default()
            .push(line.clone());
    }
    by_partition
        .into_iter()
        .map(|(partition, lines)| (partition, runs_in_order(&lines)))
        .collect()
}

fn exec_args<'a>(id: &'a str, script: &'a str) -> Vec<&'a str> {
    exec_args_over(id, "1", script)
}

/// `exec --restart` over a group of `partitions`, running `script` under each lease.
fn exec_args_over<'a>(id: &'a str, partitions: &'a str, script: &'a str) -> Vec<&'a str> {
    let mut args = vec!["exec", "--id", id, "--partitions", partitions, "--restart"];
    args.extend(FAST);
    args.extend(["--", "sh", "-c", script]);
    args
}

/// What a node logs when a write waited out SQLite's busy timeout behind another process.
const SQLITE_LOCKED: &str = "the database stayed locked by another connection";

#[test]
fn commands_never_work_at_once_through_kill_pause_drain_and_sigterm() {
    commands_never_work_at_once(LeaseMode::PerPartition);
}

#[test]
fn commands_never_work_at_once_through_kill_pause_drain_and_sigterm_by_session() {
    commands_never_work_at_once(LeaseMode::Session);
}

fn commands_never_work_at_once(mode: LeaseMode) {
    let site = Site::new();
    site.create_group(1, mode);
    let log = site.path("work.log");
    let script = worker_script(&log);
    let mut a = site.process("a", &exec_args("a", &script));
    let mut b = site.process("b", &exec_args("b", &script));
    let limit = Duration::from_secs(30);
    let last_worker = || read_log(&log).last().map(|line| line.node.clone());
    // Waits until the node that is not `from` has done five units of work since it took
    // over, and returns its name: long enough for a command left running by `from` to show
    // in the log among them.
    let other_than = |node: &str| if node == "a" { "b" } else { "a" };
    let took_over = |from: &str| {
        let other = other_than(from);
        let lines = read_log(&log);
        let newest = |node: &str| {
            let epochs = lines.iter().filter(|line| line.node == node);
            epochs.map(|line| line.epoch).max().unwrap_or(0)
        };
        let tenure = newest(other);
        tenure > newest(from)
            && lines
                .iter()
                .filter(|line| line.node == other && line.epoch == tenure)
                .count()
                >= 5
    };
    let taken_over = |from: &str, how: &str| {
        let other = other_than(from);
        site.wait_for(limit, &format!("{other} to work after {how}"), || {
            took_over(from)
        });
        other.to_string()
    };
    site.wait_for(limit, "the first command to work", || {
        last_worker().is_some()
    });
    let mut holder = last_worker().unwrap();

    // SIGKILL of the holding exec alone: its watchdog stops the command.
    {
        let victim = if holder == "a" { &mut a } else { &mut b };
        victim.kill();
    }
    holder = taken_over(&holder, "a kill");
    let restarted = if holder == "a" { "b" } else { "a" };
    let replacement = site.process(restarted, &exec_args(restarted, &script));
    if restarted == "a" {
        a = replacement;
    } else {
        b = replacement;
    }

    // SIGSTOP of the holding exec: its watchdog kills the command at the lease's deadline,
    // and the other node takes over while it is still paused.
    //
    // A process stopped inside one of SQLite's write transactions holds the file's write
    // lock until it continues: every other process's writes then fail for their whole busy
    // timeout, and nobody can take over. That is SQLite's behaviour with any paused writer,
    // and the lease's safety stands (nobody takes over). A machine busy enough to slow the
    // writes makes it more likely; when the other node reports the lock, the pause is
    // undone and made again, twice at most.
    {
        let paused = holder.clone();
        let victim = if paused == "a" { &a } else { &b };
        let locked = || {
            site.node_stderr(other_than(&paused))
                .matches(SQLITE_LOCKED)
                .count()
        };
        for attempt in 1.. {
            let locked_before = locked();
            victim.signal("STOP");
            let moved = site.poll(limit, || took_over(&paused));
            if moved || locked() == locked_before || attempt == 3 {
                holder = taken_over(&paused, "a pause");
                victim.signal("CONT");
                break;
            }
            victim.signal("CONT");
            sleep(Duration::from_millis(500));
        }
    }

    // A drain: the command is stopped with SIGTERM before the hand-off.
    site.ok(&["drain", &holder]);
    let drained = holder.clone();
    holder = taken_over(&drained, "a drain");
    site.ok(&["undrain", &drained]);

    // SIGTERM of the holding exec: it stops the command, hands off and exits 0.
    {
        let victim = if holder == "a" { &mut a } else { &mut b };
        assert_eq!(victim.terminate(limit), 0, "{}", site.node_logs());
    }
    let last = taken_over(&holder, "a SIGTERM");
    let survivor = if last == "a" { &mut a } else { &mut b };
    assert_eq!(survivor.terminate(limit), 0, "{}", site.node_logs());

    let lines = read_log(&log);
    let runs = runs_in_order(&lines);
    assert!(
        runs.len() >= 5,
        "five tenures expected (start, kill, pause, drain, SIGTERM): {runs:?}"
    );
    // The graceful stops let the command finish: a `stop` line closes the drained run.
    let drained_stops = lines
        .iter()
        .filter(|line| line.word == "stop" && line.node == drained)
        .count();
    assert!(drained_stops > 0, "{lines:#?}");
}

/// Fails if a node's commands for several partitions interfere: two `exec` processes share
/// four partitions, one is killed and its commands stop while the other takes over all four,
/// then it comes back and takes its share back by hand-off. No partition's runs interleave.
#[test]
fn one_command_per_partition_held_and_none_shared_through_a_kill_and_a_return() {
    let site = Site::new();
    let log = site.path("work.log");
    let script = worker_script(&log);
    let mut a = site.process("a", &exec_args_over("a", "4", &script));
    let b = site.process("b", &exec_args_over("b", "4", &script));
    let limit = Duration::from_secs(30);
    // Who works on each partition now: the node of its last line.
    let workers = || {
        let mut last = std::collections::BTreeMap::new();
        for line in read_log(&log) {
            last.insert(line.partition, line.node);
        }
        last
    };
    site.wait_for(limit, "both nodes to work on two partitions each", || {
        let workers = workers();
        workers.len() == 4 && workers.values().filter(|node| *node == "a").count() == 2
    });
    a.kill();
    site.wait_for(limit, "b to work on all four partitions", || {
        workers().values().all(|node| node == "b")
    });
    let mut a = site.process("a", &exec_args_over("a", "4", &script));
    site.wait_for(limit, "a to take two partitions back", || {
        workers().values().filter(|node| *node == "a").count() == 2
    });
    assert_eq!(a.terminate(limit), 0, "{}", site.node_logs());
    let mut b = b;
    assert_eq!(b.terminate(limit), 0, "{}", site.node_logs());
    let runs = runs_by_partition(&read_log(&log));
    assert_eq!(runs.len(), 4, "{runs:?}");
    // b worked on every partition (all four after the kill), a on two after its return.
    for runs in runs.values() {
        assert!(runs.iter().any(|(node, _)| node == "b"), "{runs:?}");
    }
}

#[test]
fn the_command_gets_its_partition_and_fencing_token_and_its_status_is_returned() {
    let site = Site::new();
    let mut args = vec!["exec", "--id", "solo", "--partitions", "1"];
    args.extend(FAST);
    args.extend([
        "--",
        "sh",
        "-c",
        "echo \"$LEASEHOLD_NODE $LEASEHOLD_GROUP $LEASEHOLD_PARTITION $LEASEHOLD_EPOCH\"; exit 7",
    ]);
    let run = site.run(&args);
    assert_eq!(run.code, 7, "{run:?}");
    assert_eq!(run.stdout.trim(), "solo default 0 1", "{run:?}");
    // The next tenure fences the first: its token is higher.
    let run = site.run(&args);
    assert_eq!(run.stdout.trim(), "solo default 0 2", "{run:?}");

    let mut missing = vec!["exec", "--id", "solo"];
    missing.extend(FAST);
    missing.extend(["--", "/nonexistent/command"]);
    let run = site.run(&missing);
    assert_eq!(run.code, 127, "{run:?}");
    assert!(
        run.stderr.contains("cannot run /nonexistent/command"),
        "{run:?}"
    );

    let mut beyond = vec!["exec", "--id", "solo", "--hold", "4"];
    beyond.extend(FAST);
    beyond.extend(["--", "true"]);
    let run = site.run(&beyond);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--hold names partition 4"), "{run:?}");

    let mut grace = vec!["exec", "--id", "solo", "--grace", "900ms"];
    grace.extend(FAST);
    grace.extend(["--", "true"]);
    let run = site.run(&grace);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--grace = 900ms"), "{run:?}");
}

#[test]
fn without_restart_a_lost_lease_ends_exec_with_75() {
    let site = Site::new();
    let log = site.path("work.log");
    let script = worker_script(&log);
    let mut args = vec!["exec", "--id", "once", "--partitions", "1"];
    args.extend(FAST);
    args.extend(["--", "sh", "-c", &script]);
    let mut once = site.process("once", &args);
    site.wait_for(Duration::from_secs(30), "the command to work", || {
        !read_log(&log).is_empty()
    });
    site.ok(&["kick", "0"]);
    assert_eq!(
        once.exit_code(Duration::from_secs(30)),
        75,
        "{}",
        site.node_logs()
    );
}
