//! Members and operators: silent members forgotten, records vanished, prohibitions, drains,
//! operator changes reaching settled nodes, stripes, exclusions, loads.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_member_silent_for_forget_members_after_is_deleted_and_may_return() {
    let store = store_with(4).await;
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    let forgetful = |name: &str| config(name, 4).with_forget_members_after(Duration::from_secs(5));
    // The node that crashes has the smaller name: a dead member never blocks the clean-up.
    // It records apart: a crash ends its leases without callbacks.
    let a = start(&store, forgetful("a"), &Recorder::default());
    let b = start(&store, forgetful("b"), &recorder);
    sleep(Duration::from_secs(2)).await;
    a.abort();
    let members = || async {
        let listing = store.list_members(&group).await.unwrap();
        listing
            .records
            .into_iter()
            .map(|m| m.key.to_string())
            .collect::<Vec<_>>()
    };
    sleep(Duration::from_secs(3)).await;
    assert_eq!(members().await, ["a", "b"], "stale, not yet forgotten");
    sleep(Duration::from_secs(4)).await;
    assert_eq!(members().await, ["b"], "forgotten after 5 s of silence");
    assert_eq!(
        b.owned().len(),
        4,
        "its partitions were taken over meanwhile"
    );
    let a = start(&store, forgetful("a"), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        members().await,
        ["a", "b"],
        "a node that returns registers again"
    );
    assert_eq!(counts(&[&a, &b]), vec![2, 2]);
    a.shutdown().await;
    b.shutdown().await;
}

/// In both lease modes, a dead member's record is deleted once silent for
/// `forget_members_after` (by session, once no record names its session), and by one node
/// alone: the live member with the smallest name. The other never tries.
#[tokio::test(start_paused = true)]
async fn a_dead_member_is_forgotten_in_both_modes_by_the_smallest_live_member_alone() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let memory = store_with(6).await;
        let group = GroupName::new("default").unwrap();
        admin::set_lease_mode(&*memory, &group, mode).await.unwrap();
        let forgetful =
            |name: &str| config(name, 6).with_forget_members_after(Duration::from_secs(5));
        let a = start(&memory, forgetful("a"), &Recorder::default());
        let recorder = Recorder::default();
        let b = start(&memory, forgetful("b"), &recorder);
        let c_store = Arc::new(FaultyStore::new(memory.clone()));
        let c = Participant::start(
            c_store.clone(),
            forgetful("c"),
            recorder.callbacks(&node("c")),
        )
        .unwrap();
        sleep(Duration::from_secs(3)).await;
        assert_eq!(counts(&[&a, &b, &c]), vec![2, 2, 2], "{mode}");
        a.abort();
        sleep(Duration::from_secs(10)).await;
        let members: Vec<String> = memory
            .list_members(&group)
            .await
            .unwrap()
            .records
            .into_iter()
            .map(|m| m.key.to_string())
            .collect();
        assert_eq!(members, ["b", "c"], "{mode}: a forgotten");
        assert_eq!(counts(&[&b, &c]), vec![3, 3], "{mode}");
        assert_eq!(
            c_store.member_deletes(),
            0,
            "{mode}: b, the smaller, deletes"
        );
        b.shutdown().await;
        c.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_member_record_vanished_registers_again_undrained() {
    // Member records are only forgotten while not draining, so a vanished record's last word
    // was "not draining", even if this node had not yet seen an undrain.
    let store = store_with(2).await;
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    let b = start(&store, config("b", 2), &recorder);
    sleep(Duration::from_secs(2)).await;
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counts(&[&a, &b]), vec![0, 2], "a drained");
    let record = store.get_member(&group, &node("a")).await.unwrap().unwrap();
    assert!(record.value.draining);
    store
        .delete_member(&group, &node("a"), &record.version)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    let record = store.get_member(&group, &node("a")).await.unwrap();
    assert!(
        record.is_some_and(|r| !r.value.draining),
        "registered again, not draining"
    );
    assert_eq!(counts(&[&a, &b]), vec![1, 1], "a serves again");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_prohibited_partition_is_still_served_by_a_permitted_node() {
    let store = store_with(4).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 4), &recorder);
    let b = start(&store, config("b", 4), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![2, 2]);
    let group = GroupName::new("default").unwrap();
    let victim = a.owned()[0];
    admin::prohibit(&*store, &group, victim, &node("a"))
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![2, 2], "balanced again");
    assert!(a.lease(victim).is_none(), "a keeps off it");
    assert!(b.lease(victim).is_some(), "b serves it");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn drain_hands_a_nodes_partitions_off_without_expiry() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    let group = GroupName::new("default").unwrap();
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counts(&[&a, &b]), vec![0, 8]);
    assert!(a.status().draining);
    assert!(recorder
        .events()
        .iter()
        .all(|e| !matches!(e.kind, Kind::Lost(LossReason::Expired))));
    admin::set_draining(&*store, &group, &node("a"), false)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(
        counts(&[&a, &b]),
        vec![4, 4],
        "undrained node gets its share back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// A drain reaches a node at its next scan, which reads its member record, and not only at
/// its next heartbeat, whose write finds the record changed: here heartbeats are 5 s apart
/// and scans a quarter of a second.
#[tokio::test(start_paused = true)]
async fn a_drain_is_adopted_at_the_next_scan_between_heartbeats() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let slow_beats = |name: &str| {
        config(name, 8)
            .with_heartbeat(Duration::from_secs(5))
            .with_lease_validity(Duration::from_secs(10))
            .with_acquire_after(Duration::from_secs(15))
    };
    let a = start(&store, slow_beats("a"), &recorder);
    let b = start(&store, slow_beats("b"), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    let group = GroupName::new("default").unwrap();
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    assert!(a.status().draining, "adopted within four scans");
    assert_eq!(counts(&[&a, &b]), vec![0, 8]);
    a.shutdown().await;
    b.shutdown().await;
}

/// Node "a" of a two-partition group, running for a second, that an operator has just
/// marked draining.
async fn running_node_just_drained() -> (Arc<MemoryStore>, Recorder, GroupName, Participant) {
    let store = store_with(2).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_secs(1)).await;
    let group = GroupName::new("default").unwrap();
    admin::set_draining(&*store, &group, &node("a"), true)
        .await
        .unwrap();
    (store, recorder, group, a)
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_reaches_a_node_only_as_it_stops_is_kept_for_its_return() {
    let (store, recorder, group, a) = running_node_just_drained().await;
    a.shutdown().await;
    // The operator's instruction outlives the process, so that it comes back drained.
    let members = store.list_members(&group).await.unwrap().records;
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(members[0].value.draining);
    assert!(a.owned().is_empty());
    let b = start(&store, config("a", 2), &recorder);
    sleep(Duration::from_secs(3)).await;
    assert!(b.status().draining, "the new process adopts the drain");
    assert!(b.owned().is_empty());
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_drained_node_leaves_its_drain_in_place_on_the_way_out() {
    let (store, _recorder, group, a) = running_node_just_drained().await;
    sleep(Duration::from_secs(3)).await;
    assert!(a.status().draining);
    a.shutdown().await;
    let members = store.list_members(&group).await.unwrap().records;
    assert_eq!(members.len(), 1, "{members:?}");
    assert!(members[0].value.draining);
}

#[tokio::test(start_paused = true)]
async fn a_node_undrained_before_it_stops_removes_its_member_record() {
    let (store, _recorder, group, a) = running_node_just_drained().await;
    sleep(Duration::from_secs(3)).await;
    admin::set_draining(&*store, &group, &node("a"), false)
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    assert!(!a.status().draining);
    a.shutdown().await;
    assert!(store.list_members(&group).await.unwrap().records.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_operator_change_reaches_settled_nodes_at_their_next_scan() {
    let store = Arc::new(FaultyStore::new(store_with(8).await));
    store.turn_notices_off();
    let group = GroupName::new("default").unwrap();
    let recorder = Recorder::default();
    // Left alone, settled nodes would not read the table again for an hour.
    let quiet = |name: &str| config(name, 8).with_relist_after(Duration::from_secs(3600));
    let a = Participant::start(store.clone(), quiet("a"), recorder.callbacks(&node("a"))).unwrap();
    let b = Participant::start(store.clone(), quiet("b"), recorder.callbacks(&node("b"))).unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // Out of service, the partition's holder drops it, and the two settle at 4 and 3.
    admin::offline(&*store, &group, PartitionId(7))
        .await
        .unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(a.owned().len() + b.owned().len(), 7);
    sleep(Duration::from_secs(5)).await;

    // Back in service, it is taken once its record has been unchanged for acquire_after
    // (as every record an operator wrote is), not after relist_after.
    let listings = (a.status().lease_listings, b.status().lease_listings);
    admin::online(&*store, &group, PartitionId(7))
        .await
        .unwrap();
    let timings = quiet("a");
    sleep(timings.acquire_after + timings.scan_interval * 3).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);
    assert!(a.status().lease_listings > listings.0 && b.status().lease_listings > listings.1);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_taking_its_share_in_batches_reads_its_stripe_once_per_acquire_after() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let memory = store_with(64).await;
        admin::set_lease_mode(&*memory, &GroupName::new("default").unwrap(), mode)
            .await
            .unwrap();
        let store = Arc::new(FaultyStore::new(memory));
        store.turn_notices_off();
        let recorder = Recorder::default();
        let config = config("a", 64)
            .with_relist_after(Duration::from_secs(60))
            .with_max_acquires_per_scan(8);
        let (scan, acquire_after) = (config.scan_interval, config.acquire_after);
        let a = Participant::start(store.clone(), config, recorder.callbacks(&node("a"))).unwrap();
        sleep(scan * 12).await;
        assert_eq!(a.owned().len(), 64, "{mode}: eight batches of eight");
        // Its stripe (alone, the whole table) read row by row, batches from it for
        // acquire_after, the stripe again and the last batches, and once more to see that
        // nothing is left in it: never the table, not one reading per batch (8 × 64 rows),
        // and no take read back.
        let (listings, reads) = (store.listings(), store.record_reads());
        assert_eq!(listings, 0, "{mode}: {reads} records read");
        assert!(
            (3 * 64..4 * 64).contains(&reads),
            "{mode}: {reads} records read"
        );
        assert!(
            acquire_after < scan * 8,
            "the view ages out before the share is full"
        );
        a.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_settled_node_reads_the_lease_table_only_when_something_changes() {
    let store = Arc::new(FaultyStore::new(store_with(8).await));
    store.turn_notices_off();
    let recorder = Recorder::default();
    let relist_after = Duration::from_secs(60);
    let quiet = |name: &str| config(name, 8).with_relist_after(relist_after);
    let a = Participant::start(store.clone(), quiet("a"), recorder.callbacks(&node("a"))).unwrap();
    let b = Participant::start(store.clone(), quiet("b"), recorder.callbacks(&node("b"))).unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // Settled: some eighty scans between them, and not one of them reads the leases.
    let before = (store.listings(), a.status());
    sleep(Duration::from_secs(10)).await;
    assert_eq!(
        store.listings(),
        before.0,
        "settled nodes read only member records"
    );
    let after = a.status();
    assert!(after.scans >= before.1.scans + 30, "{after:?}");
    assert_eq!(after.lease_listings, before.1.lease_listings);

    // A crash shows as a missed heartbeat: the survivor reads the table at once, and takes
    // the dead node's partitions as soon as their records have been unchanged long enough.
    b.abort();
    recorder.crashed(&node("b"));
    let crashed = Instant::now();
    let acquire_after = quiet("a").acquire_after;
    sleep_until_just_before(crashed + acquire_after).await;
    assert_eq!(a.owned().len(), 4, "nothing taken before acquire_after");
    sleep(Duration::from_secs(1)).await;
    assert_eq!(a.owned().len(), 8, "taken within a second of acquire_after");

    // Settled again, the table is still read in case something changed that no notice
    // reported: by each node within relist_after × live members, spread by half either way,
    // so by some node about every relist_after. The survivor is alone.
    sleep(Duration::from_secs(5)).await;
    let before = store.listings();
    sleep(relist_after.mul_f64(1.6)).await;
    let relists = store.listings() - before;
    assert!(
        (1..=3).contains(&relists),
        "{relists} listings in {:?}",
        relist_after.mul_f64(1.6)
    );
    a.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_exclusion_set_while_running_hands_the_partitions_off_and_keeps_them_away() {
    let store = store_with(8).await;
    let recorder = Recorder::default();
    let a = start(&store, config("a", 8), &recorder);
    let b = start(&store, config("b", 8), &recorder);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    let mine: Vec<PartitionId> = a.owned().into_iter().take(2).collect();
    let permit = a.permit(mine[0]).expect("a holds it");
    a.set_excluded(mine.iter().copied().collect()).unwrap();
    // New work stops at once; the work in flight holds the hand-off open.
    assert!(a.lease(mine[0]).is_none() && a.lease(mine[1]).is_none());
    assert!(permit.is_valid());
    drop(permit);
    tokio::time::sleep(Duration::from_secs(5)).await;
    for partition in &mine {
        assert!(
            !a.owned().contains(partition),
            "{partition} still held by a"
        );
        assert!(b.owned().contains(partition), "{partition} not taken by b");
    }
    assert_eq!(a.owned().len() + b.owned().len(), 8);
    // Settled: b keeps what a cannot take, without handing it back and forth, and a gets
    // its share from the rest.
    let acquisitions = || {
        recorder
            .events()
            .iter()
            .filter(|e| e.kind == Kind::Acquired)
            .count()
    };
    let before = acquisitions();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(acquisitions(), before, "{:?}", recorder.events());
    assert_eq!(counts(&[&a, &b]), vec![4, 4]);

    // The exclusion outlives b: its partitions go to a, but not the excluded ones.
    b.abort();
    recorder.crashed(&node("b"));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 6);
    assert!(mine.iter().all(|p| !a.owned().contains(p)));

    // Lifting it lets a take them.
    a.set_excluded(Default::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 8);
    let refused = a.set_excluded([PartitionId(9)].into()).unwrap_err();
    assert!(refused.to_string().contains("9"), "{refused}");
    a.shutdown().await;
}

/// Reports partition p's load as p.
struct LoadByNumber;

impl Callbacks for LoadByNumber {
    fn load(&self, partition: PartitionId) -> Option<f64> {
        Some(f64::from(partition.0))
    }
}

/// Renewing per partition, each renewal carries the load; by session, no renewal writes a
/// lease record, so the loads are written on their own: the others balance on them.
#[tokio::test(start_paused = true)]
async fn leases_carry_their_load_and_the_member_record_the_sum() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let store = store_with(4).await;
        let group = GroupName::new("default").unwrap();
        admin::set_lease_mode(&*store, &group, mode).await.unwrap();
        let participant = Participant::start(store.clone(), config("a", 4), LoadByNumber).unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(participant.owned().len(), 4);
        for partition in 0..4 {
            assert_eq!(
                lease_of(&store, partition).await.value.load,
                Some(f64::from(partition)),
                "{mode}"
            );
        }
        let member = store
            .get_member(&group, &node("a"))
            .await
            .unwrap()
            .expect("member record");
        assert_eq!(member.value.load, Some(6.0), "{mode}");
        participant.shutdown().await;
    }
}
