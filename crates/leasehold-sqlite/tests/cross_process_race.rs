//! Two OS processes racing compare-and-set increments on one record of one file.
//!
//! The parent test re-runs this test binary as a second process, selecting the ignored
//! `race_child_process` test, and runs its own writers while the child runs its.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::testing::{increment_loop, unique_group};
use leasehold::PutMode;
use leasehold::{Epoch, GroupName, LeaseRecord, LeaseStore, MemberRecord, NodeId, PartitionId};
use leasehold_sqlite::{SqliteOptions, SqliteStore};

const PATH_VARIABLE: &str = "LEASEHOLD_SQLITE_RACE_PATH";
const GROUP_VARIABLE: &str = "LEASEHOLD_SQLITE_RACE_GROUP";
const CHILD_TEST: &str = "race_child_process";
const RESULT_PREFIX: &str = "race-child-successes=";
const WRITERS_PER_PROCESS: u32 = 4;
const INCREMENTS_PER_WRITER: u32 = 50;
const CHILD_START_LIMIT: Duration = Duration::from_secs(60);

/// Generous lock waits: on a loaded two-core machine a writer can queue behind seven others
/// many times over, and a busy error would end the test rather than measure anything.
fn race_options() -> SqliteOptions {
    SqliteOptions::default()
        .busy_timeout(Duration::from_secs(30))
        .max_connections(WRITERS_PER_PROCESS as usize)
}

fn ready_marker() -> NodeId {
    NodeId::new("race-child-ready").expect("valid node id")
}

async fn run_writers(store: &SqliteStore, group: &GroupName, first_writer: u32) -> u64 {
    let mut tasks = tokio::task::JoinSet::new();
    for writer in first_writer..first_writer + WRITERS_PER_PROCESS {
        let store: Arc<dyn LeaseStore> = Arc::new(store.clone());
        let group = group.clone();
        tasks.spawn(
            async move { increment_loop(&*store, &group, writer, INCREMENTS_PER_WRITER).await },
        );
    }
    let mut successes = 0;
    while let Some(result) = tasks.join_next().await {
        successes += result.expect("writer task");
    }
    successes
}

fn spawn_child(path: &Path, group: &GroupName) -> std::process::Child {
    Command::new(std::env::current_exe().expect("path of this test binary"))
        .args(["--ignored", "--exact", CHILD_TEST, "--nocapture"])
        .env(PATH_VARIABLE, path)
        .env(GROUP_VARIABLE, group.as_str())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second process")
}

/// Waits until the child has opened the file and announced itself, so both processes'
/// writers really run at the same time.
async fn wait_for_child(store: &SqliteStore, group: &GroupName) {
    let started = Instant::now();
    while store
        .get_member(group, &ready_marker())
        .await
        .expect("read the child's marker")
        .is_none()
    {
        assert!(
            started.elapsed() < CHILD_START_LIMIT,
            "the second process did not start within {CHILD_START_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn child_successes(output: &std::process::Output) -> u64 {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "second process failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(RESULT_PREFIX))
        .unwrap_or_else(|| panic!("no {RESULT_PREFIX} line from the child:\n{stdout}"))
        .trim()
        .parse()
        .expect("a count of successes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_race_increments_on_one_file() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("race.db");
    let store = SqliteStore::open_with(&path, race_options())
        .await
        .expect("open the store");
    let group = unique_group("cross-process");
    store
        .put_lease(
            &group,
            PartitionId(0),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .expect("create the record");

    let child = spawn_child(&path, &group);
    wait_for_child(&store, &group).await;
    let started = Instant::now();
    let own = run_writers(&store, &group, 0).await;
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("waiting thread")
        .expect("wait for the second process");
    let child = child_successes(&output);
    println!(
        "cross-process race: {own} + {child} increments in {:?}",
        started.elapsed()
    );

    let total = u64::from(2 * WRITERS_PER_PROCESS * INCREMENTS_PER_WRITER);
    assert_eq!(own, total / 2, "this process's successes");
    assert_eq!(own + child, total, "successes of both processes");
    let last = store
        .get_lease(&group, PartitionId(0))
        .await
        .expect("read")
        .expect("record exists");
    assert_eq!(
        last.value.epoch,
        Epoch(total),
        "no increment lost or doubled"
    );
}

/// The second process of [`two_processes_race_increments_on_one_file`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the second process of two_processes_race_increments_on_one_file, which starts it"]
async fn race_child_process() {
    let (Ok(path), Ok(group)) = (std::env::var(PATH_VARIABLE), std::env::var(GROUP_VARIABLE))
    else {
        println!("skipped: started only by two_processes_race_increments_on_one_file");
        return;
    };
    let group = GroupName::new(group).expect("group from the parent");
    let store = SqliteStore::open_with(&path, race_options())
        .await
        .expect("open the parent's file");
    store
        .put_member(
            &group,
            &ready_marker(),
            &MemberRecord::default(),
            PutMode::Create,
        )
        .await
        .expect("announce readiness");
    let successes = run_writers(&store, &group, WRITERS_PER_PROCESS).await;
    println!("{RESULT_PREFIX}{successes}");
}
