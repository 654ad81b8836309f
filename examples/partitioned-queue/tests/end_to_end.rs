//! Four consumers share sixteen partition queues while they are killed, paused past their
//! leases, drained and restarted; afterwards every event must have been applied exactly once,
//! in sequence per order. Needs RabbitMQ and PostgreSQL (`scripts/services.sh start`); a
//! missing server fails the test, or skips it under `LEASEHOLD_SKIP_SERVICES=1`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

const BINARY: &str = env!("CARGO_BIN_EXE_partitioned-queue");
const CONSUMERS: usize = 4;
const PARTITIONS: u32 = 16;
const ORDERS: u32 = 500;
const EVENTS_PER_ORDER: u32 = 40;
/// Longer than the lease (1 s) plus the takeover wait (1.5 s) of `--fast`, and than the
/// broker's heartbeat timeout, so the paused consumer's partitions move and its connection
/// is closed under it.
const LONG_PAUSE: Duration = Duration::from_secs(7);
/// Longer than the lease, shorter than the heartbeat timeout: the partitions move while the
/// paused consumer still holds messages unacknowledged on a live connection.
const SHORT_PAUSE: Duration = Duration::from_secs(3);
/// How long the events may stop being applied before the run counts as stuck: a loaded
/// machine applies them slowly, but goes on applying them.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest wait for the producer to publish the rest once the chaos is over, and for
/// the last events however steadily they are applied: a loaded machine publishes and
/// applies slowly.
const APPLY_LIMIT: Duration = Duration::from_secs(600);
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

struct Experiment {
    amqp: String,
    pg: String,
    suffix: String,
    logs: PathBuf,
}

impl Experiment {
    fn queue_args(&self) -> Vec<String> {
        vec![
            "--amqp".into(),
            self.amqp.clone(),
            "--partitions".into(),
            PARTITIONS.to_string(),
            "--queue-prefix".into(),
            format!("orders-{}", self.suffix),
        ]
    }

    fn ledger_args(&self) -> Vec<String> {
        vec![
            "--pg".into(),
            self.pg.clone(),
            "--schema".into(),
            format!("pq_{}", self.suffix),
        ]
    }

    fn group(&self) -> String {
        format!("pq-{}", self.suffix)
    }

    fn log(&self, name: &str) -> File {
        File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{name}.log")))
            .expect("open a log file")
    }

    fn start_consumer(&self, index: usize) -> Child {
        let id = format!("consumer-{index}");
        Command::new(BINARY)
            .arg("consumer")
            .args([
                "--id",
                &id,
                "--store",
                &self.pg,
                "--group",
                &self.group(),
                "--fast",
            ])
            .args(self.queue_args())
            .args(self.ledger_args())
            .args(
                std::env::var("PQ_CONSUMER_EXTRA")
                    .ok()
                    .as_deref()
                    .map(str::split_whitespace)
                    .into_iter()
                    .flatten(),
            )
            .stdout(Stdio::null())
            .stderr(self.log(&id))
            .spawn()
            .expect("start a consumer")
    }

    fn start_producer(&self) -> Child {
        Command::new(BINARY)
            .arg("producer")
            .args(self.queue_args())
            .args(["--orders", &ORDERS.to_string()])
            .args(["--events-per-order", &EVENTS_PER_ORDER.to_string()])
            .stdout(Stdio::null())
            .stderr(self.log("producer"))
            .spawn()
            .expect("start the producer")
    }

    fn run(&self, args: &[String]) -> (bool, String) {
        let output = Command::new(BINARY)
            .args(args)
            .output()
            .expect("run a subcommand");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        (output.status.success(), format!("{stdout}{stderr}"))
    }

    fn check(&self) -> (bool, String) {
        let mut args = vec!["check".to_owned()];
        args.extend(self.ledger_args());
        args.extend(["--orders".into(), ORDERS.to_string()]);
        args.extend(["--events-per-order".into(), EVENTS_PER_ORDER.to_string()]);
        self.run(&args)
    }

    /// Drains `consumer-{index}`, or with `undo` clears its drain.
    fn drain(&self, index: usize, undo: bool) {
        let mut args = vec!["drain".to_owned(), "--store".into(), self.pg.clone()];
        args.extend(["--group".into(), self.group()]);
        args.extend(["--id".into(), format!("consumer-{index}")]);
        if undo {
            args.push("--undo".into());
        }
        let (ok, output) = self.run(&args);
        assert!(
            ok,
            "drain (undo {undo}) of consumer-{index} failed: {output}"
        );
    }
}

/// The count after `applied` in a `check` report.
fn applied_count(report: &str) -> Option<u64> {
    let (_, rest) = report.split_once("applied ")?;
    rest.split_whitespace().next()?.parse().ok()
}

fn signal(child: &Child, signal: Signal) {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .expect("a process id");
    // The child is not reaped until waited for, so its id cannot name another process.
    kill_process(pid, signal).expect("send a signal");
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        sleep(Duration::from_millis(50));
    }
    None
}

fn log_tail(logs: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(15);
        out.push_str(&format!(
            "--- {}\n{}\n",
            entry.path().display(),
            lines[start..].join("\n")
        ));
    }
    out
}

#[test]
fn every_event_applied_exactly_once_in_sequence_through_crashes_pauses_and_drains() {
    let (Some(amqp), Some(pg)) = (
        leasehold::testing::service_env("LEASEHOLD_TEST_AMQP_URL", "RabbitMQ"),
        leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL"),
    ) else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    let suffix = format!("{}_{nanos}", std::process::id());
    let logs = std::env::temp_dir().join(format!("partitioned-queue-{suffix}"));
    std::fs::create_dir_all(&logs).expect("create the log folder");
    let experiment = Experiment {
        amqp,
        pg,
        suffix,
        logs,
    };
    let started = Instant::now();

    let mut consumers: Vec<Child> = (0..CONSUMERS)
        .map(|i| experiment.start_consumer(i))
        .collect();
    sleep(Duration::from_secs(2));
    let mut producer = experiment.start_producer();

    // A crash: the leases expire and are taken over; unacknowledged messages come back when
    // the broker sees the connection close.
    sleep(Duration::from_secs(2));
    consumers[0].kill().expect("SIGKILL consumer-0");
    consumers[0].wait().expect("reap consumer-0");
    sleep(Duration::from_secs(1));
    consumers[0] = experiment.start_consumer(0);

    // A pause past the lease but within the heartbeat timeout: the partitions move while the
    // paused consumer still holds deliveries, and it may wake mid-write with a stale epoch.
    sleep(Duration::from_secs(2));
    signal(&consumers[1], Signal::STOP);
    sleep(SHORT_PAUSE);
    signal(&consumers[1], Signal::CONT);

    // A drain: a cooperative hand-off, then a graceful exit.
    sleep(Duration::from_secs(2));
    experiment.drain(2, false);
    sleep(Duration::from_secs(2));
    signal(&consumers[2], Signal::TERM);
    let status = wait_with_timeout(&mut consumers[2], EXIT_TIMEOUT).expect("consumer-2 exits");
    assert!(
        status.success(),
        "consumer-2 after SIGTERM: {status}\n{}",
        log_tail(&experiment.logs)
    );
    // The drain outlives the process, as an operator's instruction: undrained, the
    // restarted consumer takes partitions again.
    experiment.drain(2, true);
    consumers[2] = experiment.start_consumer(2);

    // A pause past the heartbeat timeout: the broker closes the connection under it.
    sleep(Duration::from_secs(1));
    signal(&consumers[3], Signal::STOP);
    sleep(LONG_PAUSE);
    signal(&consumers[3], Signal::CONT);

    // Another crash, of a consumer that has just taken partitions over.
    sleep(Duration::from_secs(1));
    consumers[1].kill().expect("SIGKILL consumer-1");
    consumers[1].wait().expect("reap consumer-1");
    consumers[1] = experiment.start_consumer(1);
    let chaos = started.elapsed();

    let status = wait_with_timeout(&mut producer, APPLY_LIMIT).expect("the producer ends");
    assert!(
        status.success(),
        "producer: {status}\n{}",
        log_tail(&experiment.logs)
    );

    let waiting = Instant::now();
    let mut progress = Instant::now();
    let (mut complete, mut report) = experiment.check();
    let mut applied = applied_count(&report);
    // Duplicates, sequence breaks and epoch regressions never heal: only missing events
    // are worth waiting for.
    let healable = |report: &str| {
        [
            "duplicates 0 ",
            "out_of_sequence 0 ",
            "epoch_regressions 0 ",
        ]
        .iter()
        .all(|clean| report.contains(clean))
    };
    while !complete
        && healable(&report)
        && progress.elapsed() < STALL_TIMEOUT
        && waiting.elapsed() < APPLY_LIMIT
    {
        sleep(Duration::from_millis(500));
        (complete, report) = experiment.check();
        let now_applied = applied_count(&report);
        if now_applied > applied {
            (applied, progress) = (now_applied, Instant::now());
        }
    }
    let settled = started.elapsed();

    for (index, consumer) in consumers.iter_mut().enumerate() {
        signal(consumer, Signal::TERM);
        let status = wait_with_timeout(consumer, EXIT_TIMEOUT);
        if status.is_none() {
            let _ = consumer.kill();
        }
        assert!(
            status.is_some_and(|s| s.success()),
            "consumer-{index} after SIGTERM: {status:?}\n{}",
            log_tail(&experiment.logs)
        );
    }
    println!(
        "chaos {:.1}s, all applied after {:.1}s: {report}",
        chaos.as_secs_f64(),
        settled.as_secs_f64()
    );
    assert!(
        complete,
        "not every event applied exactly once in sequence: {report} (none applied for the \
         last {:.0?}, {:.0?} after the producer ended)\nlogs in {}\n{}",
        progress.elapsed(),
        waiting.elapsed(),
        experiment.logs.display(),
        log_tail(&experiment.logs)
    );
    let mut teardown = vec!["teardown".to_owned()];
    teardown.extend(experiment.queue_args());
    teardown.extend(experiment.ledger_args());
    let (ok, output) = experiment.run(&teardown);
    assert!(ok, "teardown: {output}");
    let _ = std::fs::remove_dir_all(&experiment.logs);
}
