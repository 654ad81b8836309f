//! Leases of one node and of a few: renewals, conflicts, expiry, takeovers, releases, replies lost.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_renewed_and_keeps_its_epoch() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    sleep(Duration::from_millis(100)).await;
    let first = a.lease(PartitionId(0)).expect("held");
    let version = lease_of(&store, 0).await.version;
    sleep(Duration::from_secs(30)).await;
    let later = a
        .lease(PartitionId(0))
        .expect("still held after many validity periods");
    assert_eq!(later.epoch(), first.epoch());
    assert!(later.valid_until() > first.valid_until() + Duration::from_secs(29));
    assert_ne!(
        lease_of(&store, 0).await.version,
        version,
        "renewals rewrote the record"
    );
    assert_eq!(recorder.events().len(), 4, "four acquisitions, no losses");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_conflict_loses_the_lease_at_once() {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_millis(100)).await;
    let guard = a.lease(PartitionId(1)).expect("held");
    let group = GroupName::new("default").unwrap();
    let kicked_at = Instant::now();
    admin::kick(&*store, &group, PartitionId(1)).await.unwrap();
    sleep(Duration::from_millis(260)).await;
    assert!(
        a.lease(PartitionId(1)).is_none(),
        "dropped at the first failed renewal"
    );
    let lost = recorder
        .events()
        .into_iter()
        .find(|e| e.kind == Kind::Lost(LossReason::Conflict))
        .expect("a conflict loss");
    assert_eq!(lost.partition, PartitionId(1));
    assert!(
        lost.at < guard.valid_until(),
        "lost before its deadline, at the renewal"
    );
    assert!(
        lost.at - kicked_at <= Duration::from_millis(250),
        "within one heartbeat"
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn with_the_store_hung_the_lease_ends_exactly_at_its_deadline() {
    let store = Arc::new(FaultyStore::new(store_with(3).await));
    let recorder = Recorder::default();
    let mut cfg = config("a", 3);
    // A long store timeout, so the hung call is still in flight when the deadline comes.
    cfg.store_timeout = cfg.heartbeat;
    let a = Participant::start(store.clone(), cfg, recorder.callbacks(&node("a"))).unwrap();
    sleep(Duration::from_millis(100)).await;
    let guard = a.lease(PartitionId(0)).expect("held");
    store.set_hung(true);
    let deadline = guard.valid_until();
    sleep_until_just_before(deadline).await;
    assert!(
        a.lease(PartitionId(0)).is_some(),
        "valid until the deadline"
    );
    sleep(Duration::from_millis(2)).await;
    assert!(
        a.lease(PartitionId(0)).is_none(),
        "None once the deadline passed"
    );
    assert!(!guard.is_valid());
    let losses: Vec<Event> = recorder
        .events()
        .into_iter()
        .filter(|e| e.kind == Kind::Lost(LossReason::Expired))
        .collect();
    assert_eq!(losses.len(), 3, "every lease lost by expiry");
    for loss in losses {
        assert!(
            loss.at <= deadline + Duration::from_millis(1),
            "callback fired at the deadline, not later"
        );
        assert!(loss.at >= deadline - Duration::from_millis(1));
    }
    a.abort();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_nodes_partitions_are_taken_only_after_acquire_after() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.owned().len(), 4);
    a.abort();
    recorder.crashed(&node("a"));
    let b_started = Instant::now();
    let b = start(&store, config("b", 4), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(b.owned().len(), 4, "b took over everything");
    let acquire_after = config("b", 4).acquire_after;
    for event in recorder.events().iter().filter(|e| e.node == node("b")) {
        assert_eq!(event.kind, Kind::Acquired);
        assert!(
            event.at >= b_started + acquire_after,
            "taken {:?} after start",
            event.at - b_started
        );
        assert!(
            event.at <= b_started + acquire_after + Duration::from_millis(300),
            "taken at the timer, not much later"
        );
        assert_eq!(event.epoch, 2, "epoch + 1 on takeover");
    }
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_released_partition_is_taken_at_the_next_scan() {
    let store = store_with(2).await;
    let group = GroupName::new("default").unwrap();
    // Partition 1 looks freshly held by another node, so it must wait acquire_after...
    let current = lease_of(&store, 1).await;
    let ghost = LeaseRecord {
        owner: Some(node("ghost")),
        epoch: leasehold::Epoch(1),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    };
    let v = store
        .put_lease(
            &group,
            PartitionId(1),
            &ghost,
            PutMode::Update(current.version),
        )
        .await
        .unwrap();
    let recorder = Recorder::default();
    // Heartbeats four scans apart: the loop wakes for scans of their own.
    let config = config("a", 2)
        .with_heartbeat(Duration::from_secs(1))
        .with_lease_validity(Duration::from_secs(3))
        .with_acquire_after(Duration::from_millis(4500));
    let a = start(&store, config, &recorder);
    sleep(Duration::from_millis(500)).await;
    assert_eq!(a.owned(), vec![PartitionId(0)]);
    // ...until its holder releases it: then it is taken within one scan interval.
    let released = LeaseRecord {
        state: LeaseState::Released,
        owner: None,
        ..ghost
    };
    store
        .put_lease(&group, PartitionId(1), &released, PutMode::Update(v))
        .await
        .unwrap();
    let at = Instant::now();
    sleep(Duration::from_millis(300)).await;
    assert_eq!(a.owned(), vec![PartitionId(0), PartitionId(1)]);
    let taken = recorder
        .events()
        .into_iter()
        .find(|e| e.partition == PartitionId(1))
        .unwrap();
    assert!(
        taken.at - at <= Duration::from_millis(280),
        "within a scan interval: {:?}",
        taken.at - at
    );
    assert_eq!(taken.epoch, 2);
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn max_partitions_per_node_is_respected() {
    let store = store_with(16).await;
    let recorder = Recorder::default();
    let a = start(
        &store,
        config("a", 16).with_max_partitions_per_node(5),
        &recorder,
    );
    // Without a cap of its own, a node publishes none.
    let b = start(
        &store,
        config("b", 16).with_max_partitions_per_node(16),
        &recorder,
    );
    sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 5);
    assert_eq!(a.status().target, 5);
    // Published, so that a monitor can tell partitions no node has room for.
    let group = GroupName::new("default").unwrap();
    let published = |name: &str| {
        let store = Arc::clone(&store);
        let (group, name) = (group.clone(), node(name));
        async move {
            let record = store.get_member(&group, &name).await.unwrap().unwrap();
            record.value.max_partitions
        }
    };
    assert_eq!(published("a").await, Some(5));
    assert_eq!(published("b").await, None);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn three_nodes_converge_and_a_fourth_gets_its_share_by_cooperative_release() {
    converge_then_join(store_with(64).await, |name| config(name, 64)).await;
}

/// The same with settled nodes skipping the lease table, and no change notices: the
/// joiner's new member record is all that makes them read it and hand off.
#[tokio::test(start_paused = true)]
async fn settled_nodes_that_skip_the_lease_table_still_hand_off_to_a_joiner() {
    let store = Arc::new(FaultyStore::new(store_with(64).await));
    store.turn_notices_off();
    converge_then_join(store, |name| {
        config(name, 64).with_relist_after(Duration::from_secs(3600))
    })
    .await;
}

async fn converge_then_join<S: LeaseStore + 'static>(
    store: Arc<S>,
    config: impl Fn(&str) -> ParticipantConfig,
) {
    let recorder = Recorder::default();
    let a = start(&store, config("a"), &recorder);
    let b = start(&store, config("b"), &recorder);
    let c = start(&store, config("c"), &recorder);
    sleep(Duration::from_secs(15)).await;
    let mut three = counts(&[&a, &b, &c]);
    three.sort();
    assert_eq!(three, vec![21, 21, 22]);

    let joined = Instant::now();
    let d = start(&store, config("d"), &recorder);
    sleep(Duration::from_secs(15)).await;
    assert_eq!(counts(&[&a, &b, &c, &d]), vec![16, 16, 16, 16]);
    let events = recorder.events();
    assert!(
        events.iter().all(|e| !matches!(
            e.kind,
            Kind::Lost(LossReason::Expired | LossReason::Conflict)
        )),
        "hand-off was cooperative: no expiry, no conflict"
    );
    let d_first = events
        .iter()
        .filter(|e| e.node == node("d"))
        .map(|e| e.at)
        .min()
        .unwrap();
    assert!(
        d_first - joined < config("d").acquire_after,
        "d was handed released partitions without waiting for an expiry"
    );
    for p in [&a, &b, &c, &d] {
        p.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn epochs_strictly_increase_per_partition_through_churn() {
    let store = store_with(12).await;
    let recorder = Recorder::default();
    let mut nodes: Vec<Participant> = ["a", "b", "c"]
        .iter()
        .map(|n| start(&store, config(n, 12), &recorder))
        .collect();
    for round in 0..6 {
        sleep(Duration::from_secs(4)).await;
        // Crash one node and bring a fresh one in, alternating with graceful shutdowns.
        let victim = nodes.remove(0);
        if round % 2 == 0 {
            victim.abort();
            recorder.crashed(victim.node());
        } else {
            victim.shutdown().await;
        }
        nodes.push(start(&store, config(&format!("n{round}"), 12), &recorder));
    }
    sleep(Duration::from_secs(6)).await;
    let mut last: BTreeMap<PartitionId, u64> = BTreeMap::new();
    let mut acquisitions = 0;
    for event in recorder
        .events()
        .iter()
        .filter(|e| e.kind == Kind::Acquired)
    {
        acquisitions += 1;
        if let Some(previous) = last.insert(event.partition, event.epoch) {
            assert!(
                event.epoch > previous,
                "partition {} epoch {} after {previous}",
                event.partition,
                event.epoch
            );
        }
    }
    assert!(
        acquisitions > 24,
        "churn moved partitions: {acquisitions} acquisitions"
    );
    let total: usize = nodes.iter().map(|n| n.owned().len()).sum();
    assert_eq!(total, 12, "every partition owned after churn");
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_leaves_every_held_row_released() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    sleep(Duration::from_secs(5)).await;
    a.shutdown().await;
    b.shutdown().await;
    let group = GroupName::new("default").unwrap();
    let rows = store.list_leases(&group).await.unwrap().records;
    assert_eq!(rows.len(), 8);
    for row in rows {
        assert_eq!(
            row.value.state,
            LeaseState::Released,
            "partition {}",
            row.key
        );
        assert_eq!(row.value.owner, None);
    }
    assert!(
        store.list_members(&group).await.unwrap().records.is_empty(),
        "member records removed"
    );
    assert!(a.owned().is_empty() && b.owned().is_empty());
}

#[tokio::test(start_paused = true)]
async fn explicit_release_stops_serving_at_once() {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_millis(100)).await;
    assert!(a.release(PartitionId(0)).await);
    assert!(
        a.lease(PartitionId(0)).is_none(),
        "None immediately after release"
    );
    assert!(!a.release(PartitionId(0)).await, "not held any more");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn invalid_config_is_refused_at_start() {
    let store = Arc::new(MemoryStore::new());
    let mut bad = config("a", 4);
    bad.acquire_after = bad.lease_validity;
    let error = Participant::start(store, bad, ()).unwrap_err().to_string();
    assert!(error.contains("acquire_after"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_whose_reply_was_lost_is_recognised_and_the_lease_kept() {
    let store = Arc::new(FaultyStore::new(store_with(3).await));
    let recorder = Recorder::default();
    let a = Participant::start(
        store.clone(),
        config("a", 3),
        recorder.callbacks(&node("a")),
    )
    .unwrap();
    sleep(Duration::from_millis(100)).await;
    assert_eq!(a.owned().len(), 3);
    // The next two renewal batches land but their replies are lost.
    let reads = store.record_reads();
    store.lose_batch_replies(2);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(store.replies_left_to_lose(), 0, "the replies were lost");
    // Each batch read back row by row, not by listing the table.
    assert!(
        store.record_reads() >= reads + 6,
        "{}",
        store.record_reads() - reads
    );
    assert_eq!(
        a.owned().len(),
        3,
        "leases kept: the landed writes were recognised as ours"
    );
    assert_no_loss(&recorder);
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_whose_reply_was_lost_is_recognised() {
    let store = Arc::new(FaultyStore::new(store_with(2).await));
    store.lose_batch_replies(1);
    let recorder = Recorder::default();
    let a = Participant::start(store, config("a", 2), recorder.callbacks(&node("a"))).unwrap();
    sleep(Duration::from_millis(100)).await;
    assert_eq!(a.owned().len(), 2, "taken at once despite the lost reply");
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_lost_on_the_way_is_not_mistaken_for_the_one_before() {
    // Paused time runs many heartbeats inside one wall-clock millisecond, so consecutive
    // renewals would carry equal records if only the clock stamped them.
    let store = Arc::new(FaultyStore::new(store_with(1).await));
    let recorder = Recorder::default();
    let a = Participant::start(
        store.clone(),
        config("a", 1),
        recorder.callbacks(&node("a")),
    )
    .unwrap();
    sleep(Duration::from_secs(2)).await;
    let before = a.lease(PartitionId(0)).expect("held").valid_until();
    store.drop_batches(1);
    // Past the next heartbeat (250 ms), before the one after.
    sleep(Duration::from_millis(300)).await;
    let after = a.lease(PartitionId(0)).expect("still valid").valid_until();
    assert_eq!(
        after, before,
        "the dropped renewal must not extend the lease: the read-back shows the previous one"
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        a.lease(PartitionId(0)).expect("renewed").valid_until() > before,
        "the next renewal, conditioned on the version still current, lands"
    );
    a.shutdown().await;
}

/// A renewal that times out and lands only after it was read back moves the records'
/// version under the holder, whose next renewal then fails its compare-and-set against its
/// own write: a store stalling past the time limit on a loaded machine. The lease is kept,
/// at the version and the validity that write made.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_lands_after_its_read_back_keeps_the_lease() {
    let store = Arc::new(FaultyStore::new(store_with(2).await));
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.owned().len(), 2);
    let before = a.lease(PartitionId(0)).expect("held").valid_until();
    // The next batch answers a time-out at once and lands 50 ms later, after its read-back
    // and before the renewal after it (a heartbeat is 250 ms).
    store.land_batches_late(1, Duration::from_millis(50));
    // Past the renewal that conflicts (about 500 ms from here), before the one after it.
    sleep(Duration::from_millis(450)).await;
    assert_eq!(
        a.owned().len(),
        2,
        "the conflict was with its own renewal: {:?}",
        recorder.events()
    );
    // Valid from when the late write was sent, a heartbeat after the renewal before it;
    // not from the renewal that conflicted, sent a heartbeat later still, which never
    // landed.
    let adopted = a.lease(PartitionId(0)).expect("held").valid_until();
    let heartbeat = config("a", 2).heartbeat;
    assert!(
        adopted > before && adopted <= before + heartbeat,
        "valid until {:?} after the previous renewal's deadline",
        adopted - before
    );
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 2, "and renewed at the version it made");
    assert_no_loss(&recorder);
    a.shutdown().await;
}

/// A hand-off made after a renewal of unknown outcome landed late, before the next renewal
/// found it: the release, conditioned on the version before that renewal, fails against the
/// node's own write, and is written again on the version the renewal made. Left unwritten,
/// the partition would wait for the lease to expire.
#[tokio::test(start_paused = true)]
async fn a_release_after_a_renewal_that_landed_late_is_still_written() {
    let store = Arc::new(FaultyStore::new(store_with(1).await));
    let recorder = Recorder::default();
    let a = start(&store, config("a", 1), &recorder);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.owned().len(), 1);
    store.land_batches_late(1, Duration::from_millis(50));
    // The late renewal is sent within a heartbeat and lands 50 ms after; the renewal after
    // it comes about 400 ms from here.
    sleep(Duration::from_millis(250)).await;
    assert_eq!(a.owned().len(), 1);
    a.shutdown().await;
    let group = GroupName::new("default").unwrap();
    let record = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap()
        .value;
    assert_eq!(record.state, LeaseState::Released, "{record:?}");
    assert_eq!(record.owner, None);
}

/// The same wait on a renewal of unknown outcome never keeps a lease that another writer
/// changed: a renewal that never landed, then a record rewritten behind the holder's back
/// (an operator's forced take, say), is a conflict like any other.
#[tokio::test(start_paused = true)]
async fn a_renewal_of_unknown_outcome_keeps_no_lease_changed_by_another() {
    let store = Arc::new(FaultyStore::new(store_with(1).await));
    let recorder = Recorder::default();
    let a = start(&store, config("a", 1), &recorder);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(a.owned().len(), 1);
    // A renewal lost on its way in: its outcome stays unknown after the read-back.
    store.drop_batches(1);
    sleep(Duration::from_millis(260)).await;
    let group = GroupName::new("default").unwrap();
    let current = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    let mut record = current.value.clone();
    record.note = Some("changed by another writer".into());
    store
        .put_lease(
            &group,
            PartitionId(0),
            &record,
            PutMode::Update(current.version),
        )
        .await
        .unwrap();
    sleep(Duration::from_millis(300)).await;
    assert!(a.owned().is_empty(), "dropped on the conflict");
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| e.kind == Kind::Lost(LossReason::Conflict)),
        "{:?}",
        recorder.events()
    );
    a.shutdown().await;
}

/// A node below its target that loses the races for free rows (another node's writes land
/// first) scans again a fiftieth of the scan interval later, not a whole interval: the rows
/// it wanted are gone, and others may be free.
#[tokio::test(start_paused = true)]
async fn a_node_that_loses_its_races_below_target_scans_again_soon() {
    let store = Arc::new(FaultyStore::new(store_with(4).await));
    store.rewrite_before_batches(1);
    let config = config("a", 4);
    let scan = config.scan_interval;
    let a = Participant::start(store.clone(), config, ()).unwrap();
    sleep(scan / 2).await;
    assert_eq!(
        a.owned().len(),
        4,
        "taken again before a scan interval passed"
    );
    let started = a.status().scans_started;
    assert_eq!(
        started.get(&leasehold::planner::ScanCause::LostRace),
        Some(&1),
        "{started:?}"
    );
    a.shutdown().await;
}

/// Asserts that nothing `recorder` heard of was a loss.
fn assert_no_loss(recorder: &Recorder) {
    assert!(
        recorder.events().iter().all(|e| e.kind == Kind::Acquired),
        "no loss at all: {:?}",
        recorder.events()
    );
}
