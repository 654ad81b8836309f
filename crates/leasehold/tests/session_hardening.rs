//! Session leases against what happens outside the protocol: records changed behind a
//! holder's back, a second process under the same name, a member record a reader cannot
//! decode. Each test fails without the mechanism it names.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    admin, Callbacks, GroupName, Halt, LeaseMode, LeaseRecord, LeaseStore, Loss, LossReason,
    MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId, PutMode,
};
use tokio::time::sleep;

#[derive(Default, Clone)]
struct Losses(Arc<Mutex<Vec<(PartitionId, LossReason)>>>);

impl Losses {
    fn of(&self, partition: PartitionId) -> Vec<LossReason> {
        let losses = self.0.lock().unwrap();
        losses
            .iter()
            .filter(|(p, _)| *p == partition)
            .map(|(_, reason)| *reason)
            .collect()
    }
}

impl Callbacks for Losses {
    fn on_lost(&self, loss: &Loss) {
        self.0.lock().unwrap().push((loss.partition, loss.reason));
    }
}

fn group() -> GroupName {
    GroupName::new("default").unwrap()
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

async fn session_store(partitions: u32) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    admin::init(&*store, &group(), partitions).await.unwrap();
    admin::set_lease_mode(&*store, &group(), LeaseMode::Session)
        .await
        .unwrap();
    store
}

fn config(name: &str, partitions: u32) -> ParticipantConfig {
    ParticipantConfig::fast(node(name), partitions)
}

const P0: PartitionId = PartitionId(0);

/// Node `name`, started alone on the group of [`session_store`] and left until it holds
/// all four partitions.
async fn holding_all(
    store: &Arc<MemoryStore>,
    name: &str,
    callbacks: impl Callbacks,
) -> Participant {
    let node = Participant::start(store.clone(), config(name, 4), callbacks).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(node.owned().len(), 4);
    node
}

/// Fails without the holdings check against lease listings: a session holder never writes
/// its lease records to renew them, so a record deleted and created again released (an
/// operator's `destroy` then `init`, a restore) left it serving for as long as its session
/// renewed, while any other node could take the new record at once.
#[tokio::test(start_paused = true)]
async fn a_session_holder_drops_a_lease_whose_record_was_replaced_behind_its_back() {
    let store = session_store(4).await;
    let losses = Losses::default();
    let a = holding_all(&store, "a", losses.clone()).await;
    let guard = a.lease(P0).expect("held");
    let stored = store.get_lease(&group(), P0).await.unwrap().unwrap();
    store
        .delete_lease(&group(), P0, &stored.version)
        .await
        .unwrap();
    let mut released = LeaseRecord::released();
    released.epoch = stored.value.epoch;
    store
        .put_lease(&group(), P0, &released, PutMode::Create)
        .await
        .unwrap();
    // A few scans: the relist that a settled node makes on a change notice or on its own.
    sleep(Duration::from_secs(2)).await;
    assert!(!guard.is_valid(), "the old tenure ends with the listing");
    assert!(
        losses.of(P0).contains(&LossReason::Changed),
        "{:?}",
        losses.of(P0)
    );
    a.shutdown().await;
}

/// Fails if the process whose session another process under the same name wrote over
/// carries on: both would end each other's session at every heartbeat, and the name's
/// partitions would flap for ever. The older process stops, says who replaced it, and
/// leaves the newer one's member record alone.
#[tokio::test(start_paused = true)]
async fn of_two_processes_under_one_name_the_replaced_one_stops_and_names_its_successor() {
    let store = session_store(4).await;
    let first = holding_all(&store, "a", ()).await;
    let mut second_config = config("a", 4);
    second_config.advertise = Some("http://10.0.0.2:8080".to_owned());
    let second = Participant::start(store.clone(), second_config, ()).unwrap();
    let halt = tokio::time::timeout(Duration::from_secs(2), first.stopped())
        .await
        .expect("the first process stops within a few heartbeats");
    let successor = store
        .get_member(&group(), &node("a"))
        .await
        .unwrap()
        .unwrap()
        .value;
    match &halt {
        Some(Halt::Replaced {
            node: name,
            successor: id,
            address,
        }) => {
            assert_eq!(name, &node("a"));
            assert_eq!(*id, successor.session);
            assert_eq!(address.as_deref(), Some("http://10.0.0.2:8080"));
        }
        other => panic!("{other:?}"),
    }
    let message = halt.unwrap().to_string();
    assert!(message.contains("http://10.0.0.2:8080"), "{message}");
    assert!(first.owned().is_empty());
    // With no work in flight, the first handed everything off as it stopped: the second
    // takes it at its next scans, not `acquire_after` (1.5 s) after its session began.
    sleep(Duration::from_millis(800)).await;
    assert_eq!(second.owned().len(), 4);
    // The fleet settles on the second process: every partition held once, its session left
    // alone from then on.
    sleep(Duration::from_secs(5)).await;
    assert_eq!(second.owned().len(), 4);
    let later = store
        .get_member(&group(), &node("a"))
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(later.session, successor.session);
    assert!(second.halt().is_none());
    second.shutdown().await;
}

/// Fails if a node that never renewed a session of its own is taken for a replaced one: a
/// process restarting under its name writes over the session its crashed predecessor left,
/// and carries on.
#[tokio::test(start_paused = true)]
async fn a_restart_under_the_same_name_takes_the_name_over_and_keeps_running() {
    let store = session_store(4).await;
    let first = holding_all(&store, "a", ()).await;
    first.abort();
    let second = Participant::start(store.clone(), config("a", 4), ()).unwrap();
    sleep(Duration::from_secs(6)).await;
    assert!(second.halt().is_none());
    assert_eq!(second.owned().len(), 4);
    second.shutdown().await;
}

/// Fails if a member record that a reader cannot decode counts as absent: with session
/// leases that record is its holder's session, which may be renewing, and the reader would
/// take the holder's partitions with a write that leaves its session alone.
#[tokio::test(start_paused = true)]
async fn a_member_record_that_cannot_be_read_is_never_taken_from() {
    let store = session_store(4).await;
    let a = holding_all(&store, "a", ()).await;
    // a is gone, and its session record damaged: nobody can tell whether it renews.
    a.abort();
    store.corrupt_member(&group(), &node("a"));
    let b = Participant::start(store.clone(), config("b", 4), ()).unwrap();
    sleep(Duration::from_secs(10)).await;
    assert!(b.owned().is_empty(), "{:?}", b.owned());
    let damaged = store.list_members(&group()).await.unwrap().corrupt;
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    b.shutdown().await;
}

/// Fails if a replaced process drops work in flight, or leaves what it held to be waited
/// on: like a shutdown, it takes no new work, lets the work under a permit finish (within
/// the lease it still has: its session renews nothing any more), and hands each lease off
/// as soon as its work is done.
#[tokio::test(start_paused = true)]
async fn a_replaced_process_finishes_its_work_in_flight_then_hands_off() {
    let store = session_store(4).await;
    let first = holding_all(&store, "a", ()).await;
    let permit = first.permit(P0).expect("held");
    let second = Participant::start(store.clone(), config("a", 4), ()).unwrap();
    // fast(): renewals every 250 ms, validity 1 s. The first learns within a heartbeat and
    // its last lease runs at least 750 ms past the second's start.
    sleep(Duration::from_millis(600)).await;
    assert!(permit.is_valid(), "the work in flight keeps its permit");
    assert!(first.lease(P0).is_none(), "no new work on it");
    assert_eq!(second.owned().len(), 3, "{:?}", second.owned());
    assert!(second.lease(P0).is_none());
    drop(permit);
    let halt = tokio::time::timeout(Duration::from_millis(500), first.stopped())
        .await
        .expect("stops once its last hand-off is written");
    assert!(matches!(halt, Some(Halt::Replaced { .. })), "{halt:?}");
    sleep(Duration::from_millis(500)).await;
    assert_eq!(second.owned().len(), 4);
    second.shutdown().await;
}

/// How many of `nodes` believe they hold `partition` now.
fn believers(nodes: &[&Participant], partition: PartitionId) -> usize {
    nodes
        .iter()
        .filter(|node| node.lease(partition).is_some_and(|l| l.is_valid()))
        .count()
}

/// Fails without the group's generation (the running nodes re-register during the destroy
/// and carry on in the group built again), or if `init` after a destroy creates released
/// records that a new node takes at once. The operator's sequence on a live fleet: a slow
/// forced destroy while two session nodes run, then `init`, then a node started on the new
/// table. No partition may have two believers at any instant, the old nodes must stop
/// naming the destroy, and the new node ends up with everything.
#[tokio::test(start_paused = true)]
async fn a_destroy_on_a_live_fleet_then_init_never_makes_two_owners() {
    const PARTITIONS: u32 = 16;
    let store = session_store(PARTITIONS).await;
    let a = Participant::start(store.clone(), config("a", PARTITIONS), ()).unwrap();
    let b = Participant::start(store.clone(), config("b", PARTITIONS), ()).unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(a.owned().len() + b.owned().len(), PARTITIONS as usize);
    // The operator's connection is slow: the nodes run many heartbeats and scans while the
    // records go one by one.
    let operator = Arc::new(leasehold::testing::FaultyStore::new(store.clone()));
    operator.set_latency(Duration::from_millis(40));
    let destroyed = tokio::spawn({
        let operator = operator.clone();
        async move { admin::destroy(&*operator, &group(), admin::Destroy::Force).await }
    });
    let mut c: Option<Participant> = None;
    let mut built_again = false;
    for _ in 0..1_000 {
        sleep(Duration::from_millis(10)).await;
        if destroyed.is_finished() && !built_again {
            let outcome = admin::init(&*store, &group(), PARTITIONS).await.unwrap();
            assert!(outcome.held_by_nobody, "{outcome:?}");
            c = Some(Participant::start(store.clone(), config("c", PARTITIONS), ()).unwrap());
            built_again = true;
        }
        let nodes: Vec<&Participant> = [Some(&a), Some(&b), c.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        for p in 0..PARTITIONS {
            assert!(believers(&nodes, PartitionId(p)) <= 1, "partition {p}");
        }
    }
    assert!(destroyed.await.unwrap().unwrap() > 0);
    for old in [&a, &b] {
        match old.halt() {
            Some(Halt::Refused(leasehold::GroupMismatch::Destroyed { .. })) => {}
            other => panic!("{other:?}"),
        }
    }
    let c = c.expect("started");
    assert_eq!(c.owned().len(), PARTITIONS as usize);
    c.shutdown().await;
}

/// Fails if `init` after a destroy creates records a node may take at once: a holder cut off
/// from the store during the destroy learns of nothing, and keeps serving to the end of its
/// lease. Records created held by nobody make the new node wait `acquire_after` first.
#[tokio::test(start_paused = true)]
async fn records_created_again_after_a_destroy_wait_out_a_holder_cut_off_from_the_store() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let store = Arc::new(MemoryStore::new());
        admin::init(&*store, &group(), 4).await.unwrap();
        admin::set_lease_mode(&*store, &group(), mode)
            .await
            .unwrap();
        let cut_off = Arc::new(leasehold::testing::FaultyStore::new(store.clone()));
        let a = Participant::start(cut_off.clone(), config("a", 4), ()).unwrap();
        sleep(Duration::from_secs(3)).await;
        assert_eq!(a.owned().len(), 4);
        cut_off.set_hung(true);
        admin::destroy(&*store, &group(), admin::Destroy::Force)
            .await
            .unwrap();
        admin::init(&*store, &group(), 4).await.unwrap();
        admin::set_lease_mode(&*store, &group(), mode)
            .await
            .unwrap();
        let c = Participant::start(store.clone(), config("c", 4), ()).unwrap();
        let mut taken = false;
        for _ in 0..400 {
            sleep(Duration::from_millis(10)).await;
            for p in 0..4 {
                assert!(
                    believers(&[&a, &c], PartitionId(p)) <= 1,
                    "{mode}: partition {p}"
                );
            }
            taken |= !c.owned().is_empty();
        }
        assert!(
            taken,
            "{mode}: the new node takes them once the wait is over"
        );
        c.shutdown().await;
        a.abort();
    }
}

/// Fails if a session take whose outcome stayed unknown (its reply lost, and the read-back
/// that would have told failing too) is not released at the deadline it would have had: a
/// record naming this node under its live session is never served and never taken by
/// another, so without that deadline it waits `acquire_after` from when it is next seen.
#[tokio::test(start_paused = true)]
async fn a_session_take_of_unknown_outcome_is_released_at_its_deadline() {
    let store = Arc::new(leasehold::testing::FaultyStore::new(session_store(1).await));
    store.set_latency(Duration::from_millis(50));
    store.lose_batch_replies(1);
    let config = config("a", 1);
    let (validity, acquire_after) = (config.lease_validity, config.acquire_after);
    let a = Participant::start(store.clone(), config, ()).unwrap();
    // The take is on its way: the read-back that would settle it fails too.
    let started = tokio::time::Instant::now();
    while store.batches() == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "no take sent");
        sleep(Duration::from_millis(1)).await;
    }
    let sent = tokio::time::Instant::now();
    store.set_reads_throttled(true);
    store.set_lease_reads_throttled(true);
    sleep(Duration::from_millis(200)).await;
    store.set_reads_throttled(false);
    store.set_lease_reads_throttled(false);
    assert!(
        a.lease(P0).is_none(),
        "a take of unknown outcome is not served"
    );
    let record = store.get_lease(&group(), P0).await.unwrap().unwrap().value;
    assert_eq!(record.owner, Some(node("a")), "the take landed");
    // Released at its deadline (validity after it was sent) and taken again at the next
    // scan, before acquire_after has passed: 1.35 s here, and 2.1 s without the deadline.
    while a.lease(P0).is_none() && sent.elapsed() < Duration::from_secs(10) {
        sleep(Duration::from_millis(10)).await;
    }
    assert!(
        sent.elapsed() > validity && sent.elapsed() < acquire_after,
        "served again {:?} after the take",
        sent.elapsed()
    );
    a.shutdown().await;
}

/// Fails if a heartbeat comes due while a member write is waiting for its reply and writes
/// the member record itself: the reply that arrives last is not the write that landed last,
/// the node adopts a version already gone, and its next renewal finds the session
/// "changed" and ends it, taking with it the work in flight of a clean shutdown. The
/// write at the start of a shutdown is the one a slow reply catches; the delete at its end
/// would otherwise be followed by a write that registers the stopped node again.
#[tokio::test(start_paused = true)]
async fn a_member_write_with_a_slow_reply_never_ends_the_writers_own_session() {
    let memory = session_store(4).await;
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let losses = Losses::default();
    let mut config = config("a", 4);
    // Work of 2 s is waited for, not abandoned.
    config.drain_timeout = Duration::from_secs(5);
    let a = Participant::start(store.clone(), config.clone(), losses.clone()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 4);
    let permit = a.permit(P0).expect("held");
    // Nearly a heartbeat, within the store timeout: every member write's reply is still
    // on its way when the next heartbeat comes due, the shutdown's first write included.
    store.set_member_reply_delay(config.store_timeout.mul_f64(0.9));
    let work = async {
        sleep(Duration::from_secs(2)).await;
        assert!(
            permit.is_valid(),
            "the work's permit ran out under it; losses: {:?}",
            losses.of(P0)
        );
        drop(permit);
    };
    tokio::join!(a.shutdown(), work);
    assert_eq!(losses.of(P0), vec![LossReason::Released]);
    let released = memory.get_lease(&group(), P0).await.unwrap().unwrap();
    assert_eq!(released.value.owner, None, "handed off, not left to expire");
    let member = memory.get_member(&group(), &node("a")).await.unwrap();
    assert!(
        member.is_none(),
        "registered again after leaving: {member:?}"
    );
    assert_eq!(a.status().sessions_ended, 0);
}

/// A session deleted behind its holder's back (an operator, or the others forgetting a
/// node they took for dead) ends: every lease goes at once, and the count says so, which
/// is how an operator tells an ended session from leases that ran out.
#[tokio::test(start_paused = true)]
async fn a_session_deleted_behind_its_holder_ends_and_is_counted() {
    let store = session_store(4).await;
    let losses = Losses::default();
    let a = holding_all(&store, "a", losses.clone()).await;
    assert_eq!(a.status().sessions_ended, 0);
    let session = store.get_member(&group(), a.node()).await.unwrap().unwrap();
    store
        .delete_member(&group(), a.node(), &session.version)
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(a.status().sessions_ended, 1);
    assert_eq!(losses.of(P0).first(), Some(&LossReason::Conflict));
    a.shutdown().await;
}

/// Fails if the stamps of renewals the store refused count against the window of stamps a
/// process recognises as its own: with its session's version moved under it (a transaction
/// writing the record back as it was) and its re-reads refused for many heartbeats, the
/// process would push its own last write out of the window and, reads back, end its own
/// session.
#[tokio::test(start_paused = true)]
async fn renewals_refused_for_many_heartbeats_never_end_the_session_they_renew() {
    let memory = session_store(4).await;
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    // Two thousand heartbeats to a validity: the window of stamps (1,024) fills long before
    // the leases run out (a node holding nothing adopts the version without a re-read).
    let mut config = config("a", 4);
    config.heartbeat = Duration::from_millis(100);
    config.store_timeout = Duration::from_millis(100);
    config.lease_validity = Duration::from_secs(200);
    config.acquire_after = Duration::from_secs(210);
    let a = Participant::start(store.clone(), config, ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 4);
    store.set_lease_reads_throttled(true);
    let session = memory
        .get_member(&group(), a.node())
        .await
        .unwrap()
        .unwrap();
    memory
        .put_member(
            &group(),
            a.node(),
            &session.value,
            PutMode::Update(session.version),
        )
        .await
        .unwrap();
    // Each heartbeat a renewal refused and a re-read that fails: two stamps a heartbeat.
    sleep(Duration::from_secs(60)).await;
    store.set_lease_reads_throttled(false);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.status().sessions_ended, 0);
    assert_eq!(a.owned().len(), 4, "held again under the same session");
    a.shutdown().await;
}

/// Fails without the read-back of takes made across a session re-read: a take whose reply
/// is still on its way when a renewal fails and the session is re-read is not among the
/// leases re-read, so an operator's change to its record made meanwhile (which changed the
/// session, failing the renewal) is adopted unseen, and the node serves a partition taken
/// offline for as long as its listings fail.
#[tokio::test(start_paused = true)]
async fn a_take_changed_while_the_session_is_re_read_is_not_held() {
    const P1: PartitionId = PartitionId(1);
    let memory = session_store(2).await;
    admin::offline(&*memory, &group(), P1).await.unwrap();
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let config = config("a", 2);
    let a = Participant::start(store.clone(), config.clone(), ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned(), vec![P0]);
    // The take lands at once and is answered nearly a heartbeat later: the next heartbeat
    // comes due while its reply is on the way.
    store.set_batch_reply_delay(config.store_timeout.mul_f64(0.9));
    admin::online(&*memory, &group(), P1).await.unwrap();
    let mut landed = false;
    for _ in 0..3_000 {
        let record = memory.get_lease(&group(), P1).await.unwrap().unwrap();
        if record.value.owner.as_ref() == Some(a.node()) {
            landed = true;
            break;
        }
        sleep(Duration::from_millis(1)).await;
    }
    assert!(landed, "a took the partition back online");
    // The operator takes it offline again the moment the take lands; listings fail from
    // then on, so only the read-back of the take can tell.
    store.set_reads_throttled(true);
    admin::offline(&*memory, &group(), P1).await.unwrap();
    sleep(Duration::from_secs(2)).await;
    assert!(a.lease(P1).is_none(), "a serves a partition taken offline");
    store.set_reads_throttled(false);
    a.shutdown().await;
}

/// Fails if the window of stamps by which a process recognises its own session writes is
/// shorter than an outage a fleet rides out: with every renewal's reply lost for ten
/// seconds, the one that landed first is the store's last write of the session, and a
/// window of sixteen had pushed its stamp out by the time replies came back.
#[tokio::test(start_paused = true)]
async fn a_long_run_of_renewals_of_unknown_outcome_never_ends_the_session_they_renew() {
    let memory = session_store(4).await;
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let config = config("a", 4);
    let a = Participant::start(store.clone(), config.clone(), ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 4);
    // Applied, and answered after the store timeout: each renewal's outcome is unknown.
    store.set_member_reply_delay(config.store_timeout * 2);
    sleep(Duration::from_secs(10)).await;
    store.set_member_reply_delay(Duration::ZERO);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.status().sessions_ended, 0);
    a.shutdown().await;
}

/// A record left held by a previous process under this node's name is released once its
/// wait has run out, keeping what the record says about the partition (its epoch, its
/// prohibitions, its last load) and naming this node as the previous owner, with a write
/// stamp. The release is made together with the node's member record (a newer process may
/// have taken the name over meanwhile): a renewal that gets in between makes it read the
/// record again, and the node's session goes on.
///
/// Fails if the release writes the record afresh: an epoch gone back to zero would let a
/// resource's fencing accept an older holder again, and prohibitions and load would be
/// forgotten. Fails too if it is written without the member record, or if the node then
/// renews from the member record's version before that write.
#[tokio::test(start_paused = true)]
async fn a_record_left_by_a_previous_process_is_released_keeping_what_it_says() {
    let memory = session_store(4).await;
    let stored = memory.get_lease(&group(), P0).await.unwrap().unwrap();
    let left = LeaseRecord {
        owner: Some(node("a")),
        epoch: leasehold::Epoch(5),
        state: leasehold::LeaseState::Held,
        // Prohibited on it, so that it does not take it back once released.
        prohibited: vec![node("a")],
        load: Some(3.0),
        session: Some(12_345),
        ..LeaseRecord::released()
    };
    memory
        .put_lease(&group(), P0, &left, PutMode::Update(stored.version))
        .await
        .unwrap();
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    store.renew_before_transactions(1);
    let a = Participant::start(store.clone(), config("a", 4), ()).unwrap();
    sleep(Duration::from_secs(10)).await;
    let released = memory.get_lease(&group(), P0).await.unwrap().unwrap().value;
    assert_eq!(
        released.state,
        leasehold::LeaseState::Released,
        "{released:?}"
    );
    assert_eq!(released.owner, None);
    assert_eq!(released.epoch, leasehold::Epoch(5));
    assert_eq!(released.prohibited, [node("a")]);
    assert_eq!(released.load, Some(3.0));
    assert_eq!(released.previous_owner, Some(node("a")));
    assert!(released.written_at_unix_ms.is_some(), "{released:?}");
    assert_eq!(store.renewals_before_transactions_left(), 0);
    sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 3);
    assert_eq!(a.status().sessions_ended, 0, "{:?}", a.status());
    a.shutdown().await;
}

/// Takes in flight while the taker's session ends (its member record deleted by an
/// operator) name a session the others wait on from its end; the taker's next session
/// renews nothing of them.
///
/// Fails if such a take is held once its reply arrives: the node would serve it under its
/// next session for as long as that renews, while the others take it once the ended
/// session's wait has run out.
#[tokio::test(start_paused = true)]
async fn a_take_that_outlives_its_session_is_never_served() {
    let memory = session_store(8).await;
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let config = config("a", 8);
    // Every take is answered just before its time limit: heartbeats fall in between.
    store.set_batch_reply_delay(config.store_timeout.mul_f64(0.9));
    let a = Participant::start(store.clone(), config, ()).unwrap();
    let mut ended = 0;
    for round in 0..2000 {
        sleep(Duration::from_millis(10)).await;
        let Some(member) = memory.get_member(&group(), &node("a")).await.unwrap() else {
            continue;
        };
        // Registered again: whatever it serves names its new session.
        let owned = a.owned();
        let listing = memory.list_leases(&group()).await.unwrap();
        for lease in &listing.records {
            assert!(
                !owned.contains(&lease.key) || lease.value.session == member.value.session,
                "a serves {} under a session that ended: {:?}",
                lease.key,
                lease.value
            );
        }
        // A take has landed and its reply is still on its way: the operator deletes the
        // taker's member record.
        let in_flight = listing.records.iter().any(|lease| {
            lease.value.owner.as_ref() == Some(&node("a"))
                && lease.value.session == member.value.session
                && !owned.contains(&lease.key)
        });
        if in_flight
            && memory
                .delete_member(&group(), &node("a"), &member.version)
                .await
                .is_ok()
        {
            ended += 1;
        }
        // Something to take again, now and then: a partition kicked off it.
        if round % 200 == 199 {
            let kicked = PartitionId(round / 200 % 8);
            admin::kick(&*memory, &group(), kicked).await.unwrap();
        }
    }
    assert!(ended >= 5, "{ended}");
    a.shutdown().await;
}
