//! Session leases: rows read alone, dead sessions kept while named and taken over once
//! replaced, takes that meet other takers.

use super::*;

/// The group of [`store_with`] renewing by session.
async fn session_store(partitions: u32) -> Arc<MemoryStore> {
    let store = store_with(partitions).await;
    admin::set_lease_mode(&*store, &default_group(), LeaseMode::Session)
        .await
        .unwrap();
    store
}

fn default_group() -> GroupName {
    GroupName::new("default").unwrap()
}

/// Nodes `a`, `b` and `c`, configured by `config`, holding two of six partitions each;
/// then `a` crashes. Returns `b` and `c`, and the recorder they share.
async fn three_then_a_crashes(
    store: &Arc<MemoryStore>,
    config: impl Fn(&str) -> ParticipantConfig,
) -> (Participant, Participant, Recorder) {
    let a = start(store, config("a"), &Recorder::default());
    let recorder = Recorder::default();
    let b = start(store, config("b"), &recorder);
    let c = start(store, config("c"), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(counts(&[&a, &b, &c]), vec![2, 2, 2]);
    a.abort();
    (b, c, recorder)
}

/// Waits out `acquire_after` and a few scans, then checks that `b` and `c` hold the six
/// partitions between them, and stops them.
async fn assert_taken_over(b: Participant, c: Participant) {
    let timings = config("b", 6);
    sleep(timings.acquire_after + timings.scan_interval * 4).await;
    assert_eq!(counts(&[&b, &c]), vec![3, 3]);
    b.shutdown().await;
    c.shutdown().await;
}

/// By session, a dead member's record stays while records still name its session (here
/// the others are at their cap and cannot take them): deleting it would start every
/// taker's wait again from when each saw it gone.
#[tokio::test(start_paused = true)]
async fn by_session_a_dead_member_still_named_by_records_is_not_forgotten() {
    let store = session_store(6).await;
    let forgetful = |name: &str| {
        config(name, 6)
            .with_forget_members_after(Duration::from_secs(5))
            .with_max_partitions_per_node(2)
    };
    let (b, c, _recorder) = three_then_a_crashes(&store, forgetful).await;
    sleep(Duration::from_secs(15)).await;
    let members = store.list_members(&default_group()).await.unwrap().records;
    let names: Vec<String> = members.iter().map(|m| m.key.to_string()).collect();
    assert_eq!(names, ["a", "b", "c"], "a's session still named");
    b.shutdown().await;
    c.shutdown().await;
}

/// By session, the leases of a dead node whose session another process under its name
/// replaced without clearing them (it stopped again first, say) are taken over by the
/// others: from an ended session, each record read again before its take. Without the
/// take, they stay unserved for good: nothing renews an ended session.
#[tokio::test(start_paused = true)]
async fn by_session_the_leases_of_a_replaced_session_are_taken_over() {
    let store = session_store(6).await;
    let (b, c, _recorder) = three_then_a_crashes(&store, |name| config(name, 6)).await;
    let group = default_group();
    let session = store.get_member(&group, &node("a")).await.unwrap().unwrap();
    let replaced = MemberRecord {
        session: session.value.session.map(|id| id ^ 1),
        ..session.value.clone()
    };
    let mode = PutMode::Update(session.version);
    store
        .put_member(&group, &node("a"), &replaced, mode)
        .await
        .unwrap();
    assert_taken_over(b, c).await;
}

/// By session, a take from a silent holder's session that finds the session changed by
/// another taker (its renewal the same, its version not) reads it again and is made at
/// once, not at a later scan as a lost race.
#[tokio::test(start_paused = true)]
async fn by_session_a_take_that_meets_another_takers_change_to_the_session_goes_again() {
    let memory = session_store(2).await;
    let a = start(&memory, config("a", 2), &Recorder::default());
    sleep(Duration::from_secs(1)).await;
    let recorder = Recorder::default();
    let b_store = Arc::new(FaultyStore::new(memory.clone()));
    let b = Participant::start(
        b_store.clone(),
        config("b", 2),
        recorder.callbacks(&node("b")),
    )
    .unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(counts(&[&a, &b]), vec![1, 1]);
    a.abort();
    // The first take's transaction meets a's session rewritten as it stands.
    b_store.renew_before_transactions(1);
    let timings = config("b", 2);
    sleep(timings.acquire_after + timings.scan_interval * 4).await;
    assert_eq!(b.owned().len(), 2);
    assert_eq!(
        b_store.renewals_before_transactions_left(),
        0,
        "the take met it"
    );
    let started = b.status().scans_started;
    assert_eq!(
        started.get(&leasehold::planner::ScanCause::LostRace),
        None,
        "{started:?}"
    );
    b.shutdown().await;
}

/// By session, a node that hears of a row released while it is settled reads that row
/// alone, at its next scan, rather than the table.
#[tokio::test(start_paused = true)]
async fn by_session_a_settled_node_reads_a_released_row_alone() {
    let memory = session_store(8).await;
    let recorder = Recorder::default();
    let quiet = |name: &str| config(name, 8).with_relist_after(Duration::from_secs(60));
    let a = start(&memory, quiet("a"), &recorder);
    // b's calls are counted apart. Both draw their jitter from fixed seeds: a scan of b's
    // that fell between the release and a's retake would find the row free, which is work
    // for somebody, and read the table next (as it must); these seeds keep b's scans out of
    // that window.
    let b_store = Arc::new(FaultyStore::new(memory.clone()));
    let b = start(&b_store, quiet("b"), &recorder);
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    let before = (b.status(), b_store.record_reads(), b_store.listings());
    let released = a.owned()[0];
    assert!(a.release(released).await);
    sleep(Duration::from_secs(2)).await;
    let after = b.status();
    assert!(after.scans >= before.0.scans + 4, "{after:?}");
    assert_eq!(
        b_store.listings(),
        before.2,
        "b never read the table: {:?} then {after:?}",
        before.0
    );
    assert_eq!(after.lease_listings, before.0.lease_listings);
    assert_eq!(
        b_store.record_reads() - before.1,
        1,
        "b read the released row, and no other record"
    );
    // Settled, b heard of the release without bringing its scan forward: each of its
    // scans since ran at its interval. (Before, notices of the members joining may have
    // brought one forward, depending on when they arrived.)
    use leasehold::planner::ScanCause;
    let started = &after.scans_started;
    assert_eq!(started.get(&ScanCause::Start), Some(&1), "{started:?}");
    let interval = |status: &leasehold::Status| {
        let started = &status.scans_started;
        started.get(&ScanCause::Interval).copied().unwrap_or(0)
    };
    assert_eq!(
        interval(&after) - interval(&before.0),
        after.scans - before.0.scans,
        "{:?} then {:?}",
        before.0.scans_started,
        after.scans_started
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// By session, the leases of a dead node whose session record was deleted behind the
/// fleet's back (by hand, say) are taken over `acquire_after` from the first listing of the
/// members sent after the leases were seen that shows it gone.
#[tokio::test(start_paused = true)]
async fn by_session_the_leases_of_a_deleted_session_are_taken_over() {
    let store = session_store(6).await;
    let (b, c, _recorder) = three_then_a_crashes(&store, |name| config(name, 6)).await;
    let group = default_group();
    let session = store.get_member(&group, &node("a")).await.unwrap().unwrap();
    store
        .delete_member(&group, &node("a"), &session.version)
        .await
        .unwrap();
    assert_taken_over(b, c).await;
}
