//! The process life cycle on real stores: records built out, a store that cannot be used
//! at start waited for, a stop asked for at any point honoured, partitions handed off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{admin, GroupName, LeaseState, LeaseStore, MemoryStore, NodeId, ParticipantConfig};
use leasehold_process::{Process, StopReason};
use tokio::sync::oneshot;

/// Generous for a loaded machine: each wait ends as soon as what it waits for shows.
const LIMIT: Duration = Duration::from_secs(60);

fn config(node: &str, partitions: u32) -> ParticipantConfig {
    ParticipantConfig::fast(NodeId::new(node).unwrap(), partitions)
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stop_signal() -> (
    oneshot::Sender<()>,
    impl std::future::Future<Output = ()> + Send,
) {
    let (stop, stopped) = oneshot::channel::<()>();
    (stop, async move {
        let _ = stopped.await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_builds_out_its_records_holds_them_and_hands_them_off_on_request() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let (stop, requested) = stop_signal();
    let process = Process::with_store(Arc::clone(&store), config("a", 4))
        .create_records()
        .follow_router(Duration::from_secs(1))
        .shutdown_on(requested);
    let mut running = process
        .start()
        .await
        .unwrap()
        .expect("no stop was asked for");
    assert_eq!(running.partitions(), 4);
    let participant = running.participant().clone();
    wait_until("all four held", || participant.owned().len() == 4).await;
    assert!(running.router().is_some());

    stop.send(()).unwrap();
    let reason = running.wait().await;
    assert_eq!(reason, StopReason::Requested("shutdown".into()));
    running.stop().await;
    let group = GroupName::new("default").unwrap();
    let listing = store.list_leases(&group).await.unwrap();
    assert_eq!(listing.len(), 4);
    for lease in &listing.records {
        assert_eq!(lease.value.state, LeaseState::Released, "{lease:?}");
    }
    reason.into_result().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_read_from_the_table_configures_the_participant_for_it() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let group = GroupName::new("default").unwrap();
    admin::init(&*store, &group, 6).await.unwrap();
    let (stop, requested) = stop_signal();
    // The configuration checked before the count is known has one partition; built for
    // the table's six, its defaults (the cap on partitions per node) must allow all six.
    let process = Process::with_store(Arc::clone(&store), config("a", 1))
        .partitions_from_table(|partitions| config("a", partitions))
        .shutdown_on(requested);
    let mut running = process.start().await.unwrap().unwrap();
    assert_eq!(running.partitions(), 6);
    let participant = running.participant().clone();
    wait_until("all six held", || participant.owned().len() == 6).await;
    stop.send(()).unwrap();
    assert!(matches!(running.wait().await, StopReason::Requested(_)));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_waiting_cannot_fix_fails_at_once() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let group = GroupName::new("default").unwrap();
    let missing = Process::with_store(Arc::clone(&store), config("a", 4))
        .start()
        .await
        .err()
        .expect("a group without records is an error");
    assert!(
        format!("{missing:#}").contains("does not exist"),
        "{missing:#}"
    );

    admin::init(&*store, &group, 4).await.unwrap();
    let other_count = Process::with_store(Arc::clone(&store), config("a", 8))
        .start()
        .await
        .err()
        .expect("another partition count is an error");
    assert!(
        format!("{other_count:#}").contains("has 4 partitions"),
        "{other_count:#}"
    );

    let mut unfit = config("a", 4);
    unfit.acquire_after = unfit.lease_validity / 2;
    let invalid = Process::with_store(store, unfit).start().await.err();
    let invalid = invalid.expect("timings that break the safety rule are an error");
    assert!(
        format!("{invalid:#}").contains("invalid configuration"),
        "{invalid:#}"
    );
}

/// Holds the SQLite file at `path` locked, as a busy or unreachable store would be.
struct Lock(rusqlite::Connection);

impl Lock {
    fn hold(path: &std::path::Path) -> Lock {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection.execute_batch("BEGIN EXCLUSIVE").unwrap();
        Lock(connection)
    }

    fn free(self) {
        self.0.execute_batch("ROLLBACK").unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_used_at_start_is_waited_for() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let lock = Lock::hold(&path);
    let url = format!("sqlite:{}", path.display());
    let (stop, requested) = stop_signal();
    let process = Process::new(&url, config("a", 4))
        .unwrap()
        .create_records()
        .shutdown_on(requested);
    let wait = process.store_wait();
    let starting = tokio::spawn(process.start());
    wait_until("two failed attempts", || wait.failures() >= 2).await;
    assert!(!starting.is_finished(), "it waits rather than fail");
    let why = wait.last_error().unwrap();
    assert!(why.contains("store"), "{why}");

    lock.free();
    let mut running = starting.await.unwrap().unwrap().unwrap();
    let participant = running.participant().clone();
    wait_until("all four held", || participant.owned().len() == 4).await;
    stop.send(()).unwrap();
    running.wait().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_asked_for_while_waiting_for_the_store_ends_the_wait_with_nothing_held() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("leases.db");
    let _lock = Lock::hold(&path);
    let (stop, requested) = stop_signal();
    let process = Process::new(&format!("sqlite:{}", path.display()), config("a", 4))
        .unwrap()
        .create_records()
        .shutdown_on(requested);
    let wait = process.store_wait();
    let starting = tokio::spawn(process.start());
    wait_until("a failed attempt", || wait.failures() >= 1).await;
    stop.send(()).unwrap();
    let started = tokio::time::timeout(LIMIT, starting)
        .await
        .unwrap()
        .unwrap();
    assert!(started.unwrap().is_none(), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_asked_for_stay_recorded_whatever_environment_comes_after() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let (stop, requested) = stop_signal();
    let process = Process::with_store(store, config("a", 4))
        .create_records()
        .metrics()
        .environment(leasehold::Environment::default())
        .shutdown_on(requested);
    let registry = Arc::clone(process.registry().expect("a registry"));
    let mut running = process.start().await.unwrap().unwrap();
    let participant = running.participant().clone();
    wait_until("all four held", || participant.owned().len() == 4).await;
    let text = leasehold::metrics::encode_text(&registry);
    assert!(text.contains("leasehold_leases_held{"), "{text}");
    stop.send(()).unwrap();
    running.wait().await;
    running.stop().await;
}
