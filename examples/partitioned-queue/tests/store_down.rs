//! A consumer started while its lease store cannot be used waits for it, and consumes once
//! it can: the store's SQLite file is held locked (as a busy or unreachable store would be)
//! until the consumer has shown it is waiting.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

const BINARY: &str = env!("CARGO_BIN_EXE_partitioned-queue");
const PARTITIONS: u32 = 4;
/// Generous for a loaded machine: the waits below end as soon as what they wait for shows.
const LIMIT: Duration = Duration::from_secs(60);
const WAITING: &str = "the store cannot be reached; trying again";

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn wait_until(what: &str, consumer: &mut Child, log: &Path, mut done: impl FnMut(&str) -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done(&log_of(log)) {
        if let Some(status) = consumer.try_wait().unwrap() {
            panic!(
                "the consumer exited with {status} before {what}; its log:\n{}",
                log_of(log)
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {LIMIT:?}; log:\n{}",
            log_of(log)
        );
        sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_consumer_started_while_its_store_is_locked_waits_and_consumes_once_it_is_free() {
    let (Some(amqp), Some(pg)) = (
        leasehold::testing::service_env("LEASEHOLD_TEST_AMQP_URL", "RabbitMQ"),
        leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL"),
    ) else {
        return;
    };
    let directory = tempfile::tempdir().unwrap();
    let store = directory.path().join("leases.db");
    let log = directory.path().join("consumer.log");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    let suffix = format!("{}_{nanos}", std::process::id());
    let queue_args = [
        "--amqp".to_owned(),
        amqp,
        "--partitions".to_owned(),
        PARTITIONS.to_string(),
        "--queue-prefix".to_owned(),
        format!("waiting-{suffix}"),
    ];
    let ledger_args = [
        "--pg".to_owned(),
        pg,
        "--schema".to_owned(),
        format!("pq_waiting_{suffix}"),
    ];
    let lock = rusqlite::Connection::open(&store).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let mut consumer = Command::new(BINARY)
        .args([
            "consumer",
            "--id",
            "consumer-0",
            "--group",
            "waiting",
            "--fast",
        ])
        .arg("--store")
        .arg(format!("sqlite:{}", store.display()))
        .args(&queue_args)
        .args(&ledger_args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("it retried twice", &mut consumer, &log, |text| {
        text.matches(WAITING).count() >= 2
    });
    assert!(
        !log_of(&log).contains("lease acquired"),
        "nothing is taken while it waits"
    );

    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    wait_until("it took every partition", &mut consumer, &log, |text| {
        text.matches("lease acquired").count() >= PARTITIONS as usize
    });

    let pid = Pid::from_raw(i32::try_from(consumer.id()).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    let deadline = Instant::now() + LIMIT;
    let exit = loop {
        if let Some(exit) = consumer.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {LIMIT:?} of SIGTERM"
        );
        sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit}; its log:\n{}", log_of(&log));

    let teardown = Command::new(BINARY)
        .arg("teardown")
        .args(&queue_args)
        .args(&ledger_args)
        .output()
        .unwrap();
    assert!(teardown.status.success(), "{teardown:?}");
}
