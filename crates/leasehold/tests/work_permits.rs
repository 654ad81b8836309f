//! Guards and work permits under controlled time: a lease given up stops new work at once,
//! and is written released only once the work in flight under it has ended.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    admin, Callbacks, GroupName, LeaseGuard, LeaseState, LeaseStore, Loss, LossReason, MemoryStore,
    NodeId, Participant, ParticipantConfig, PartitionId, StoredLease,
};
use tokio::time::{sleep, Instant};

/// What the application was told, in order.
#[derive(Debug, Clone, PartialEq)]
enum Told {
    HandingOff(PartitionId),
    Lost(PartitionId, LossReason),
}

#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<(Told, Instant)>>>);

impl Log {
    fn told(&self) -> Vec<Told> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }

    fn when(&self, wanted: &Told) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        log.iter().find(|(t, _)| t == wanted).map(|(_, at)| *at)
    }
}

impl Callbacks for Log {
    fn on_handing_off(&self, lease: &LeaseGuard) {
        assert!(
            !lease.is_valid(),
            "a lease being handed off takes no new work"
        );
        assert!(lease.permit().is_none());
        let told = Told::HandingOff(lease.partition());
        self.0.lock().unwrap().push((told, Instant::now()));
    }

    fn on_lost(&self, loss: &Loss) {
        let told = Told::Lost(loss.partition, loss.reason);
        self.0.lock().unwrap().push((told, Instant::now()));
    }
}

fn group() -> GroupName {
    GroupName::new("default").unwrap()
}

async fn store_with(partitions: u32) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    admin::init(&*store, &group(), partitions).await.unwrap();
    store
}

fn config(name: &str, partitions: u32) -> ParticipantConfig {
    ParticipantConfig::fast(NodeId::new(name).unwrap(), partitions)
}

async fn lease_of(store: &MemoryStore, partition: u32) -> StoredLease {
    store
        .get_lease(&group(), PartitionId(partition))
        .await
        .unwrap()
        .unwrap()
}

const P0: PartitionId = PartitionId(0);

/// Starts `node`'s graceful shutdown, which waits for the work in flight, on a task of its
/// own.
fn shut_down_in_background(node: &Participant) -> tokio::task::JoinHandle<()> {
    let node = node.clone();
    tokio::spawn(async move { node.shutdown().await })
}

/// Whether the group has no member records left.
async fn no_members(store: &MemoryStore) -> bool {
    let members = store.list_members(&group()).await.unwrap();
    members.records.is_empty()
}

#[tokio::test(start_paused = true)]
async fn a_guard_turns_invalid_the_moment_its_lease_is_given_up() {
    let store = store_with(2).await;
    let a = Participant::start(store.clone(), config("a", 2), ()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let guard = a.lease(P0).expect("held");
    assert!(guard.is_valid());
    assert!(a.release(P0).await);
    assert!(!guard.is_valid(), "invalid well before its deadline");
    assert!(guard.remaining() > Duration::ZERO);
    assert!(guard.permit().is_none(), "no new work");
    assert!(a.lease(P0).is_none());
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_release_waits_for_the_work_in_flight_renewing_meanwhile() {
    let store = store_with(2).await;
    let log = Log::default();
    let patient = config("a", 2).with_drain_timeout(Duration::from_secs(10));
    let a = Participant::start(store.clone(), patient, log.clone()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(P0).expect("held");
    let before = lease_of(&store, 0).await.version;
    assert!(a.release(P0).await);
    assert!(a.permit(P0).is_none(), "no new permit once handing off");
    let handing_off = |a: &Participant| -> Vec<PartitionId> {
        a.handing_off().iter().map(LeaseGuard::partition).collect()
    };
    assert_eq!(handing_off(&a), vec![P0], "the other lease is still served");
    assert_eq!(a.partitions(), 2);
    let shown = format!("{a:?}");
    assert!(
        shown.contains(r#"NodeId("a")"#) && shown.contains("owned"),
        "{shown}"
    );
    // Three lease validities: without renewals the lease would have expired twice over.
    sleep(Duration::from_secs(3)).await;
    let during = lease_of(&store, 0).await;
    assert_eq!(
        during.value.state,
        LeaseState::Held,
        "not released under running work"
    );
    assert_ne!(during.version, before, "renewed while the work ran");
    assert!(permit.is_valid(), "the work in flight may finish");
    assert_eq!(log.told(), vec![Told::HandingOff(P0)]);

    let done_at = Instant::now();
    drop(permit);
    // Less than the scan a lone node would need to take the partition back.
    sleep(Duration::from_millis(1)).await;
    assert_eq!(lease_of(&store, 0).await.value.state, LeaseState::Released);
    assert!(handing_off(&a).is_empty());
    assert_eq!(
        log.told(),
        vec![Told::HandingOff(P0), Told::Lost(P0, LossReason::Released)]
    );
    let released_at = log.when(&Told::Lost(P0, LossReason::Released)).unwrap();
    assert!(released_at >= done_at, "released only after the work ended");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn work_that_outlives_the_drain_timeout_lets_the_lease_expire_unreleased() {
    let store = store_with(1).await;
    let log = Log::default();
    let a = Participant::start(store.clone(), config("a", 1), log.clone()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(P0).expect("held");
    let released_at = Instant::now();
    assert!(a.release(P0).await);
    // fast(): drain_timeout 1 s, lease_validity 1 s, acquire_after 1.5 s.
    sleep(Duration::from_millis(1200)).await;
    let frozen = lease_of(&store, 0).await;
    assert_eq!(
        frozen.value.state,
        LeaseState::Held,
        "never written released"
    );
    sleep(Duration::from_millis(600)).await;
    assert_eq!(
        lease_of(&store, 0).await.version,
        frozen.version,
        "no renewal once the drain timeout passed"
    );
    sleep(Duration::from_millis(500)).await;
    assert!(!permit.is_valid(), "never valid past the lease's deadline");
    assert_eq!(permit.remaining(), Duration::ZERO);
    let expired_at = log
        .when(&Told::Lost(P0, LossReason::Expired))
        .expect("it expired");
    let waited = expired_at - released_at;
    assert!(
        waited > Duration::from_secs(1) && waited <= Duration::from_millis(2100),
        "renewed through the drain timeout, then left to expire: {waited:?}"
    );
    assert_eq!(lease_of(&store, 0).await.version, frozen.version);

    // Taken again only the slow way: after acquire_after, as after a crash.
    drop(permit);
    sleep(Duration::from_secs(2)).await;
    let taken = lease_of(&store, 0).await;
    assert_eq!(taken.value.epoch, frozen.value.epoch.next());
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_permits_before_releasing() {
    let store = store_with(2).await;
    let log = Log::default();
    let a = Participant::start(store.clone(), config("a", 2), log.clone()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(PartitionId(1)).expect("held");
    let worker = tokio::spawn(async move {
        sleep(Duration::from_millis(600)).await;
        drop(permit);
        Instant::now()
    });
    a.shutdown().await;
    let finished = worker.await.unwrap();
    assert_eq!(lease_of(&store, 0).await.value.state, LeaseState::Released);
    assert_eq!(lease_of(&store, 1).await.value.state, LeaseState::Released);
    let released = log
        .when(&Told::Lost(PartitionId(1), LossReason::Released))
        .expect("released");
    assert!(released >= finished, "partition 1 waited for its work");
    let free = log
        .when(&Told::Lost(P0, LossReason::Released))
        .expect("released");
    assert!(free < finished, "partition 0 had no work and went at once");
    assert!(
        no_members(&store).await,
        "member record removed on the way out"
    );
}

/// Fails if a node on its way out releases before removing its member record (the others
/// would see free partitions while still counting it, and leave them for a later scan), or
/// writes the record back at a heartbeat while its work in flight ends.
#[tokio::test(start_paused = true)]
async fn a_leaving_node_removes_its_member_record_before_releasing() {
    let store = store_with(2).await;
    let a = Participant::start(store.clone(), config("a", 2), ()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(PartitionId(1)).expect("held");
    let leaving = shut_down_in_background(&a);
    // Several heartbeats pass while the work under partition 1 goes on, within the drain
    // timeout.
    sleep(Duration::from_millis(800)).await;
    let members = store.list_members(&group()).await.unwrap();
    assert!(members.records.is_empty(), "{:?}", members.records);
    let held = lease_of(&store, 1).await.value;
    assert_eq!(held.state, LeaseState::Held, "still renewed under its work");
    assert_eq!(held.owner, Some(NodeId::new("a").unwrap()));
    drop(permit);
    leaving.await.unwrap();
    assert_eq!(lease_of(&store, 1).await.value.state, LeaseState::Released);
    assert!(no_members(&store).await);
}

/// With session leases, fails if a node on its way out deletes its session while a record
/// still names it under that session: a hand-off whose work outlived the drain timeout ends
/// at the lease's deadline, and nothing else ever releases the record, so the others would
/// wait `acquire_after` more from seeing the session gone (the simulator found partitions
/// left unowned that way).
#[tokio::test(start_paused = true)]
async fn with_session_leases_a_leaving_node_releases_what_expired_before_its_session_goes() {
    let store = store_with(1).await;
    admin::set_lease_mode(&*store, &group(), leasehold::LeaseMode::Session)
        .await
        .unwrap();
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    sleep(Duration::from_millis(300)).await;
    let permit = a.permit(P0).expect("held");
    let leaving = shut_down_in_background(&a);
    // fast(): drain_timeout 1 s, lease_validity 1 s. The work goes on past both.
    sleep(Duration::from_millis(3000)).await;
    assert!(leaving.is_finished(), "the shutdown ends at the deadline");
    assert!(!permit.is_valid(), "never valid past the lease's deadline");
    let record = lease_of(&store, 0).await.value;
    assert_eq!(record.state, LeaseState::Released, "{record:?}");
    assert_eq!(record.owner, None);
    assert!(no_members(&store).await);
    drop(permit);
    leaving.await.unwrap();
}

/// The same, when the first release of the expired lease fails (a write that never reached
/// the store): the leaving node reads the record again and releases it then, before its
/// session goes.
///
/// Fails if a release that failed on the way out is left for `acquire_after` after the
/// session is gone, with no scan to come to retry it.
#[tokio::test(start_paused = true)]
async fn a_leaving_node_whose_release_of_an_expired_lease_failed_reads_it_again() {
    let memory = store_with(1).await;
    admin::set_lease_mode(&*memory, &group(), leasehold::LeaseMode::Session)
        .await
        .unwrap();
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    sleep(Duration::from_millis(300)).await;
    let permit = a.permit(P0).expect("held");
    // Renewals by session write member records: the release is the next batch written.
    store.drop_batches(1);
    let leaving = shut_down_in_background(&a);
    sleep(Duration::from_millis(3000)).await;
    assert!(leaving.is_finished(), "the shutdown ends at the deadline");
    let record = lease_of(&memory, 0).await.value;
    assert_eq!(record.state, LeaseState::Released, "{record:?}");
    assert!(no_members(&memory).await);
    drop(permit);
    leaving.await.unwrap();
}

/// A release by a node that stays names it as the partition's previous owner, hands the
/// partition to nobody in particular, keeps its epoch and stamps the write.
///
/// Fails if a release that is not a hand-off to a named member leaves out where the
/// partition was: balancing by load and restarts in place read it.
#[tokio::test(start_paused = true)]
async fn a_release_names_the_node_as_previous_owner() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    sleep(Duration::from_millis(300)).await;
    let epoch = a.lease(P0).expect("held").epoch();
    assert!(a.release(P0).await);
    // Written as soon as the loop turns, with no work in flight: look before it takes the
    // partition back.
    let mut record = lease_of(&store, 0).await.value;
    for _ in 0..50 {
        if record.state == LeaseState::Released {
            break;
        }
        sleep(Duration::from_millis(1)).await;
        record = lease_of(&store, 0).await.value;
    }
    assert_eq!(record.state, LeaseState::Released, "{record:?}");
    assert_eq!(record.owner, None);
    assert_eq!(record.epoch, epoch);
    assert_eq!(record.previous_owner, Some(NodeId::new("a").unwrap()));
    assert_eq!(record.handed_to, None);
    assert!(record.written_at_unix_ms.is_some());
    a.shutdown().await;
}

/// Fails if a crash (abort) in the middle of a graceful shutdown leaves the task running: the
/// shutdown holds the task's handle while it waits for the work in flight, and an abort that
/// could not reach the task left it handing off leases whose guards the abort had ended (the
/// simulator found it spinning at its drain deadline).
#[tokio::test(start_paused = true)]
async fn an_abort_during_a_shutdown_stops_the_task() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(P0).expect("held");
    let leaving = shut_down_in_background(&a);
    sleep(Duration::from_millis(100)).await;
    a.abort();
    let stopped = tokio::time::timeout(Duration::from_millis(50), a.stopped()).await;
    assert!(stopped.is_ok(), "the task still runs after the abort");
    assert!(!permit.is_valid(), "an aborted node serves nothing");
    leaving.await.unwrap();
    assert_eq!(
        lease_of(&store, 0).await.value.state,
        LeaseState::Held,
        "a crash writes nothing: the lease is left to expire"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_invalidates_its_permits_at_once() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(P0).expect("held");
    admin::kick(&*store, &group(), P0).await.unwrap();
    sleep(Duration::from_millis(300)).await;
    assert!(a.lease(P0).is_none(), "lost at the next renewal");
    assert!(
        !permit.is_valid(),
        "its work must stop: the record is not ours"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn many_releases_at_once_all_complete() {
    let partitions = 100;
    let store = store_with(partitions).await;
    let log = Log::default();
    let a = Participant::start(store.clone(), config("a", partitions), log.clone()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), partitions as usize);
    for partition in 0..partitions {
        assert!(a.release(PartitionId(partition)).await);
    }
    sleep(Duration::from_millis(50)).await;
    let released = log
        .told()
        .into_iter()
        .filter(|told| matches!(told, Told::Lost(_, LossReason::Released)))
        .count();
    assert_eq!(released, partitions as usize);
    a.shutdown().await;
}

/// Callbacks that panic on every notice.
struct Panicky;

impl Callbacks for Panicky {
    fn on_acquired(&self, _: &LeaseGuard) {
        panic!("a bug in the application");
    }

    fn on_lost(&self, _: &Loss) {
        panic!("another bug in the application");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_callback_does_not_stop_the_lease_loop() {
    let store = store_with(2).await;
    let a = Participant::start(store.clone(), config("a", 2), Panicky).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 2, "still holding and renewing");
    let status = a.status();
    assert!(status.callback_panics >= 2, "{status:?}");
    let version = lease_of(&store, 0).await.version;
    sleep(Duration::from_secs(1)).await;
    assert_ne!(lease_of(&store, 0).await.version, version, "renewals go on");
    a.shutdown().await;
    assert_eq!(lease_of(&store, 0).await.value.state, LeaseState::Released);
}

#[tokio::test(start_paused = true)]
async fn when_every_handle_is_dropped_the_application_hears_of_every_lease_ending() {
    let store = store_with(2).await;
    let log = Log::default();
    let a = Participant::start(store.clone(), config("a", 2), log.clone()).unwrap();
    sleep(Duration::from_millis(100)).await;
    let permit = a.permit(P0).expect("held");
    drop(a);
    sleep(Duration::from_millis(10)).await;
    assert!(!permit.is_valid(), "nothing renews the lease any more");
    let mut told = log.told();
    told.sort_by_key(|t| format!("{t:?}"));
    assert_eq!(
        told,
        vec![
            Told::Lost(P0, LossReason::Stopped),
            Told::Lost(PartitionId(1), LossReason::Stopped)
        ]
    );
    assert_eq!(
        lease_of(&store, 0).await.value.state,
        LeaseState::Held,
        "left to expire, not released"
    );
}

#[tokio::test(start_paused = true)]
async fn stopped_resolves_once_the_task_has_ended() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    let watcher = a.clone();
    let stopped = tokio::spawn(async move { watcher.stopped().await });
    sleep(Duration::from_secs(1)).await;
    assert!(!stopped.is_finished());
    a.shutdown().await;
    tokio::time::timeout(Duration::from_millis(10), stopped)
        .await
        .expect("resolved at the end of the shutdown")
        .unwrap();
}

/// `node`'s lease on `partition` once it serves it; fails rather than waits for ever.
async fn acquired(node: &Participant, partition: PartitionId) -> LeaseGuard {
    tokio::time::timeout(Duration::from_secs(60), node.acquired(partition))
        .await
        .expect("acquired resolves once the partition is taken")
        .expect("running")
}

/// The instant `lost` resolved, once it has.
fn watch_lost(
    lost: impl std::future::Future<Output = ()> + Send + 'static,
) -> Arc<Mutex<Option<Instant>>> {
    let at = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&at);
    tokio::spawn(async move {
        lost.await;
        *seen.lock().unwrap() = Some(Instant::now());
    });
    at
}

/// Fails if [`LeaseGuard::lost`] resolves at the guard's own deadline rather than following
/// the lease through its renewals, or later than the moment the hand-off begins.
#[tokio::test(start_paused = true)]
async fn a_guards_lost_future_follows_renewals_and_resolves_when_the_hand_off_begins() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    let guard = acquired(&a, P0).await;
    let lost = {
        let guard = guard.clone();
        watch_lost(async move { guard.lost().await })
    };
    // Ten lease validities: the guard's own deadline is long past, the lease renewed.
    sleep(Duration::from_secs(10)).await;
    assert!(!guard.is_valid(), "a guard is a snapshot");
    assert!(a.lease(P0).is_some(), "still held");
    assert_eq!(
        *lost.lock().unwrap(),
        None,
        "pending while the lease is held"
    );

    let released_at = Instant::now();
    assert!(a.release(P0).await);
    sleep(Duration::from_millis(1)).await;
    assert_eq!(*lost.lock().unwrap(), Some(released_at));
    // Over already: resolves at once.
    tokio::time::timeout(Duration::from_millis(1), guard.lost())
        .await
        .expect("resolved at once");
    a.shutdown().await;
}

/// Fails if [`WorkPermit::lost`] resolves at the start of a hand-off (which waits for the
/// permit), or later than the lease's deadline once renewals stop.
#[tokio::test(start_paused = true)]
async fn a_permits_lost_future_outlasts_the_hand_off_and_resolves_at_the_deadline() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    let guard = acquired(&a, P0).await;
    let permit = guard.permit().expect("serving");
    let permit_lost = {
        let permit = a.permit(P0).expect("serving");
        watch_lost(async move { permit.lost().await })
    };
    let guard_lost = watch_lost(async move { guard.lost().await });

    let released_at = Instant::now();
    assert!(a.release(P0).await);
    sleep(Duration::from_millis(1)).await;
    assert_eq!(*guard_lost.lock().unwrap(), Some(released_at));
    assert_eq!(
        *permit_lost.lock().unwrap(),
        None,
        "the hand-off waits for it"
    );
    // fast(): the drain timeout (1 s) passes, renewals stop, the lease runs out (1 s later).
    sleep(Duration::from_secs(3)).await;
    assert!(!permit.is_valid());
    let at = permit_lost
        .lock()
        .unwrap()
        .expect("resolved once the lease ran out");
    assert!(
        at <= permit.valid_until(),
        "no later than the deadline: {:?} after it",
        at - permit.valid_until()
    );
    assert!(
        at > released_at + Duration::from_secs(1),
        "not before the drain timeout"
    );
    drop(permit);
    a.shutdown().await;
}

/// Fails if [`Participant::acquired`] misses a take that happens while it waits, or keeps
/// waiting after the participant stopped.
#[tokio::test(start_paused = true)]
async fn acquired_waits_for_the_take_and_ends_with_the_participant() {
    let store = store_with(1).await;
    let a = Participant::start(store.clone(), config("a", 1), ()).unwrap();
    let held = acquired(&a, P0).await;
    let b = Participant::start(store.clone(), config("b", 1), ()).unwrap();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.acquired(P0).await })
    };
    sleep(Duration::from_secs(5)).await;
    assert!(!waiting.is_finished(), "a holds it");
    a.shutdown().await;
    let taken = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("b hears of its take")
        .unwrap()
        .expect("b takes it once a has gone");
    assert!(taken.epoch() > held.epoch(), "a new tenure");
    assert!(taken.is_valid());
    assert!(
        b.acquired(PartitionId(1)).await.is_none(),
        "beyond the count"
    );
    b.shutdown().await;
    assert!(b.acquired(P0).await.is_none(), "stopped");
}

/// Fails if the event stream and the callbacks disagree, or if the stream does not end
/// once the participant stopped.
#[tokio::test(start_paused = true)]
async fn the_event_stream_tells_what_the_callbacks_are_told_then_ends() {
    let store = store_with(2).await;
    let log = Log::default();
    let a = Participant::start(store.clone(), config("a", 2), log.clone()).unwrap();
    let mut events = a.events();
    let mut acquired = Vec::new();
    while acquired.len() < 2 {
        match events.next().await.expect("running").expect("kept up") {
            leasehold::LeaseEvent::Acquired(lease) => acquired.push(lease.partition()),
            other => panic!("only takes so far: {other:?}"),
        }
    }
    acquired.sort();
    assert_eq!(acquired, vec![P0, PartitionId(1)]);
    assert!(a.release(P0).await);
    sleep(Duration::from_millis(1)).await;
    a.shutdown().await;
    let mut told = Vec::new();
    while let Some(event) = events.next().await {
        match event.expect("kept up") {
            leasehold::LeaseEvent::HandingOff(lease) => {
                told.push(Told::HandingOff(lease.partition()))
            }
            leasehold::LeaseEvent::Lost(loss) => told.push(Told::Lost(loss.partition, loss.reason)),
            // A scan between the release and the shutdown may take the partition back.
            leasehold::LeaseEvent::Acquired(_) => {}
            other => panic!("an event of a kind unknown here: {other:?}"),
        }
    }
    assert_eq!(told, log.told(), "the callbacks' order");
    for partition in [P0, PartitionId(1)] {
        assert!(
            told.contains(&Told::Lost(partition, LossReason::Released)),
            "{partition} released: {told:?}"
        );
    }
}
