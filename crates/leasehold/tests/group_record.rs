//! The group record at work: nodes whose timings do not fit it are refused, the first node
//! sets what a bare group lacks, records of older versions are read and kept whole, and
//! fencing tokens never go back. Controlled time: Tokio's clock is paused.

use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::recreate_by_hand;
use leasehold::{
    admin, GroupMismatch, GroupName, GroupRecord, GroupTimings, JoinError, LeaseStore, MemoryStore,
    NodeId, Participant, ParticipantConfig, PartitionId, PutMode,
};
use tokio::time::sleep;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn config(name: &str, lease_validity_ms: u64, acquire_after_ms: u64) -> ParticipantConfig {
    ParticipantConfig::fast(node(name), 4)
        .with_lease_validity(Duration::from_millis(lease_validity_ms))
        .with_acquire_after(Duration::from_millis(acquire_after_ms))
}

async fn group_with_partitions(store: &MemoryStore) -> GroupName {
    let group = GroupName::new("default").unwrap();
    admin::init(store, &group, 4).await.unwrap();
    group
}

#[tokio::test(start_paused = true)]
async fn the_first_node_sets_the_timings_and_a_node_that_does_not_fit_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    let first = Participant::join(store.clone(), config("a", 1000, 1500), ())
        .await
        .expect("a bare group admits its first node");
    let record = store.get_group(&group).await.unwrap().unwrap().value;
    assert_eq!(
        record.timings.map(|t| (t.lease_validity, t.acquire_after)),
        Some((Duration::from_millis(1000), Duration::from_millis(1500)))
    );

    // Takes over sooner than the first node's leases allow: two owners at once.
    let refused = Participant::join(store.clone(), config("b", 1000, 1200), ()).await;
    let Err(JoinError::Group(GroupMismatch::UnsafeTimings { node, .. })) = &refused else {
        panic!("expected a refusal, got {refused:?}");
    };
    assert_eq!(node.as_str(), "b");
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains("1.2s") && message.contains("1.5s"),
        "the error names both sides: {message}"
    );
    // Holds its leases longer than the group allows.
    assert!(
        Participant::join(store.clone(), config("c", 1400, 3000), ())
            .await
            .is_err()
    );
    // A refused node never registered.
    let members = store.list_members(&group).await.unwrap();
    let names: Vec<&str> = members.records.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(names, vec!["a"]);

    // Shorter leases and a longer wait fit: a second configuration on the same table.
    let second = Participant::join(store.clone(), config("d", 500, 2000), ())
        .await
        .expect("fits");
    sleep(Duration::from_secs(5)).await;
    assert_eq!(first.owned().len() + second.owned().len(), 4);
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_started_node_that_does_not_fit_takes_nothing_and_says_why() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    let timings = GroupTimings::of(&config("x", 1000, 1500));
    admin::set_timings(&*store, &group, timings, false)
        .await
        .unwrap();
    let participant = Participant::start(store.clone(), config("b", 2000, 3000), ()).unwrap();
    participant.stopped().await;
    assert!(participant.owned().is_empty());
    assert!(matches!(
        participant.refusal(),
        Some(GroupMismatch::UnsafeTimings { .. })
    ));
    let leases = store.list_leases(&group).await.unwrap();
    assert!(leases.records.iter().all(|l| l.value.owner.is_none()));
}

#[tokio::test(start_paused = true)]
async fn older_records_are_read_and_a_newer_format_is_refused() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    // A group record written by a newer version: its fields survive this node's adoption
    // of its timings.
    let current = store.get_group(&group).await.unwrap().unwrap();
    let mut record = current.value.clone();
    record
        .other
        .insert("quorum".into(), serde_json::json!({"size": 3}));
    store
        .put_group(&group, &record, PutMode::Update(current.version))
        .await
        .unwrap();
    // A member record as an older version wrote it: no timings.
    let legacy: leasehold::MemberRecord =
        serde_json::from_str(r#"{"weight":1,"draining":false,"heartbeat":7}"#).unwrap();
    assert_eq!(legacy.timings(), None);
    store
        .put_member(&group, &node("legacy"), &legacy, PutMode::Create)
        .await
        .unwrap();

    let participant = Participant::join(store.clone(), config("a", 1000, 1500), ())
        .await
        .unwrap();
    let adopted = store.get_group(&group).await.unwrap().unwrap().value;
    assert!(adopted.timings.is_some());
    assert_eq!(adopted.other["quorum"]["size"], 3, "kept whole");
    participant.shutdown().await;

    let current = store.get_group(&group).await.unwrap().unwrap();
    let newer = GroupRecord {
        format: leasehold::FORMAT_VERSION + 1,
        ..current.value
    };
    store
        .put_group(&group, &newer, PutMode::Update(current.version))
        .await
        .unwrap();
    let refused = Participant::join(store.clone(), config("a", 1000, 1500), ()).await;
    assert!(
        matches!(
            refused,
            Err(JoinError::Group(GroupMismatch::UnknownFormat { .. }))
        ),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_record_recreated_behind_the_nodes_back_never_gets_a_lower_token() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    let participant = Participant::join(store.clone(), config("a", 1000, 1500), ())
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    for _ in 0..3 {
        participant.release(PartitionId(2)).await;
        sleep(Duration::from_secs(1)).await;
    }
    let before = participant
        .lease(PartitionId(2))
        .expect("taken again")
        .epoch();
    assert!(before.0 >= 3, "{before}");

    // Taken out of service, then deleted by hand and re-created at epoch 0.
    admin::offline(&*store, &group, PartitionId(2))
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    assert!(participant.lease(PartitionId(2)).is_none());
    recreate_by_hand(&*store, &group, PartitionId(2))
        .await
        .unwrap();
    sleep(Duration::from_secs(3)).await;
    let after = participant
        .lease(PartitionId(2))
        .expect("taken again")
        .epoch();
    assert!(
        after > before,
        "the token after re-creation ({after}) must exceed the one before ({before})"
    );
    participant.shutdown().await;
}

/// Fails if a node that never saw the group's earlier epochs issues tokens below the
/// group's floor: after a destroy and an init the records start at epoch 0 again, and only
/// the floor the destroy left in the group record keeps a resource's fence ahead of them.
#[tokio::test(start_paused = true)]
async fn a_new_node_takes_above_the_groups_epoch_floor() {
    for mode in [
        leasehold::LeaseMode::PerPartition,
        leasehold::LeaseMode::Session,
    ] {
        let store = Arc::new(MemoryStore::new());
        let group = group_with_partitions(&store).await;
        admin::set_lease_mode(&*store, &group, mode).await.unwrap();
        admin::raise_epoch_floor(&*store, &group, leasehold::Epoch(57))
            .await
            .unwrap();
        let node = Participant::join(store.clone(), config("a", 1000, 1500), ())
            .await
            .unwrap();
        sleep(Duration::from_secs(3)).await;
        let epochs: Vec<_> = (0..4)
            .map(|p| node.lease(PartitionId(p)).expect("held").epoch().0)
            .collect();
        assert!(epochs.iter().all(|&e| e > 57), "{mode}: {epochs:?}");
        node.shutdown().await;
    }
}

/// Fails if a node joins while a change of lease mode is under way, or if asking for the
/// mode a group has does not clear a change left half done.
#[tokio::test(start_paused = true)]
async fn no_node_joins_while_the_lease_mode_is_changing() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    let current = store.get_group(&group).await.unwrap().unwrap();
    let half_done = GroupRecord {
        pending_lease_mode: Some(leasehold::LeaseMode::Session),
        ..current.value
    };
    store
        .put_group(&group, &half_done, PutMode::Update(current.version))
        .await
        .unwrap();
    let refused = Participant::join(store.clone(), config("a", 1000, 1500), ()).await;
    match refused {
        Err(JoinError::Group(GroupMismatch::LeaseModeChanging { to, .. })) => {
            assert_eq!(to, leasehold::LeaseMode::Session)
        }
        other => panic!("{other:?}"),
    }
    assert!(store.list_members(&group).await.unwrap().is_empty());
    let record = admin::set_lease_mode(&*store, &group, leasehold::LeaseMode::PerPartition)
        .await
        .unwrap();
    assert_eq!(record.pending_lease_mode, None);
    let joined = Participant::join(store.clone(), config("a", 1000, 1500), ()).await;
    joined
        .expect("joins once the change is withdrawn")
        .shutdown()
        .await;
}

/// Fails if a change of lease mode and a joining node can both go ahead: the node would
/// renew one way while the group takes the other. The operator's store answers slowly, so
/// nodes register between its writes; whatever the interleaving, either the change is
/// refused or every node that joined meanwhile stops.
#[tokio::test(start_paused = true)]
async fn a_lease_mode_change_racing_joining_nodes_never_leaves_one_under_the_old_mode() {
    let mut outcomes = std::collections::BTreeSet::new();
    for delay_ms in (0u64..=240).step_by(10) {
        let store = Arc::new(MemoryStore::new());
        let group = group_with_partitions(&store).await;
        let operator = Arc::new(leasehold::testing::FaultyStore::new(store.clone()));
        operator.set_latency(Duration::from_millis(30));
        let change = tokio::spawn({
            let (operator, group) = (operator.clone(), group.clone());
            async move { admin::set_lease_mode(&*operator, &group, leasehold::LeaseMode::Session).await }
        });
        sleep(Duration::from_millis(delay_ms)).await;
        let joiner = Participant::start(store.clone(), config("a", 1000, 1500), ()).unwrap();
        let changed = change.await.unwrap();
        sleep(Duration::from_secs(2)).await;
        let running = joiner.halt().is_none();
        let mode = store.get_group(&group).await.unwrap().unwrap().value;
        assert_eq!(mode.pending_lease_mode, None, "after {delay_ms} ms");
        // A node renewing by session publishes its session in its member record.
        let member = store.get_member(&group, &node("a")).await.unwrap();
        let renews_by_session = member.is_some_and(|m| m.value.session.is_some());
        if running {
            assert_eq!(
                renews_by_session,
                mode.lease_mode == leasehold::LeaseMode::Session,
                "after {delay_ms} ms: the group is in mode {} (change: {changed:?})",
                mode.lease_mode
            );
        }
        outcomes.insert((changed.is_ok(), running));
        joiner.shutdown().await;
    }
    // Every way it can go: refused for the node, the node refused, the node after it.
    assert!(outcomes.len() >= 3, "{outcomes:?}");
}

/// Shorter timings than [`config`]'s: a node with those holds its leases too long for them.
fn shorter_timings() -> GroupTimings {
    GroupTimings {
        lease_validity: Duration::from_millis(500),
        acquire_after: Duration::from_millis(1000),
        max_clock_drift: ParticipantConfig::fast(node("x"), 4).max_clock_drift,
    }
}

/// Fails if a node that had to register again (its member record was deleted while it was
/// away, as a long pause allows) goes on without reading the group record again: with no
/// member record to hold them back, the timings or the lease mode may have changed meanwhile.
#[tokio::test(start_paused = true)]
async fn a_node_that_registers_again_is_checked_again_against_the_group_record() {
    for change in ["timings", "lease mode"] {
        let store = Arc::new(MemoryStore::new());
        let group = group_with_partitions(&store).await;
        let a = Participant::join(store.clone(), config("a", 1000, 1500), ())
            .await
            .unwrap();
        sleep(Duration::from_secs(2)).await;
        assert!(a.lease(PartitionId(0)).is_some());
        // No await between these that waits: the node cannot register again before the
        // change is made.
        let member = store.get_member(&group, &node("a")).await.unwrap().unwrap();
        store
            .delete_member(&group, &node("a"), &member.version)
            .await
            .unwrap();
        if change == "timings" {
            admin::set_timings(&*store, &group, shorter_timings(), false)
                .await
                .expect("no member left to refuse it");
        } else {
            admin::set_lease_mode(&*store, &group, leasehold::LeaseMode::Session)
                .await
                .expect("no member left to refuse it");
        }
        sleep(Duration::from_secs(3)).await;
        assert!(
            matches!(a.halt(), Some(leasehold::Halt::Refused(_))),
            "after a {change} change: {:?}",
            a.halt()
        );
        assert!(a.leases().is_empty(), "after a {change} change");
        a.shutdown().await;
    }
}

/// Fails without the second check at admission (after the member record is written): a
/// change of timings that listed the members just before the node registered, after the
/// node had read the group record, would let a node run under timings it does not fit. The
/// node's store answers slowly and the operator's quickly, so the operator's steps fall
/// between the node's.
#[tokio::test(start_paused = true)]
async fn a_timings_change_racing_a_joining_node_never_leaves_it_running_unfit() {
    let mut outcomes = std::collections::BTreeSet::new();
    for delay_ms in (0u64..=150).step_by(5) {
        let store = Arc::new(MemoryStore::new());
        let group = group_with_partitions(&store).await;
        // The group's timings are set before the race: the joiner adopts nothing.
        let timings = leasehold::GroupTimings::of(&config("x", 1000, 1500));
        admin::set_timings(&*store, &group, timings, false)
            .await
            .unwrap();
        let slow = Arc::new(leasehold::testing::FaultyStore::new(store.clone()));
        slow.set_latency(Duration::from_millis(50));
        let joiner = Participant::start(slow, config("a", 1000, 1500), ()).unwrap();
        sleep(Duration::from_millis(delay_ms)).await;
        let operator = Arc::new(leasehold::testing::FaultyStore::new(store.clone()));
        operator.set_latency(Duration::from_millis(10));
        let changed = admin::set_timings(&*operator, &group, shorter_timings(), false).await;
        sleep(Duration::from_secs(2)).await;
        let running = joiner.halt().is_none();
        let record = store.get_group(&group).await.unwrap().unwrap().value;
        if running {
            assert_eq!(
                record.admits(&config("a", 1000, 1500)),
                Ok(()),
                "after {delay_ms} ms the node runs under timings it does not fit \
                 (change: {changed:?})"
            );
        }
        outcomes.insert((changed.is_ok(), running));
        joiner.shutdown().await;
    }
    // The race went more than one way: the change refused for the node, the node refused,
    // or both.
    assert!(outcomes.len() >= 2, "{outcomes:?}");
}

/// Fails if a node joins a group whose group record is missing while its lease records are
/// there (it would take the default mode and a floor of zero), or if `lease-mode` does not
/// create it again above every epoch listed.
#[tokio::test(start_paused = true)]
async fn a_group_record_deleted_by_hand_is_never_made_up_again() {
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    let first = Participant::join(store.clone(), config("a", 1000, 1500), ())
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    let highest = first.lease(PartitionId(0)).expect("held").epoch();
    first.shutdown().await;
    store.remove_group_record(&group);
    let refused = Participant::join(store.clone(), config("a", 1000, 1500), ()).await;
    assert!(
        matches!(
            refused,
            Err(JoinError::Group(GroupMismatch::MissingRecord {
                leases: 4,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert!(store.get_group(&group).await.unwrap().is_none());
    let record = admin::set_lease_mode(&*store, &group, leasehold::LeaseMode::Session)
        .await
        .unwrap();
    assert_eq!(record.lease_mode, leasehold::LeaseMode::Session);
    assert!(record.epoch_floor >= highest, "{record:?}");
    let joined = Participant::join(store.clone(), config("a", 1000, 1500), ()).await;
    joined.expect("joins the group as rebuilt").shutdown().await;
}

/// A group record as a build of record format 1 wrote it.
async fn downgrade_to_format_1(store: &MemoryStore, group: &GroupName) {
    let current = store.get_group(group).await.unwrap().unwrap();
    let old: GroupRecord = serde_json::from_str(
        r#"{"format":1,"timings":null,"pending_timings":null,"epoch_floor":0,"lease_mode":"per_partition"}"#,
    )
    .unwrap();
    store
        .put_group(group, &old, PutMode::Update(current.version))
        .await
        .unwrap();
}

/// Fails if a group of the previous record format is not joined as it is (a rolling upgrade
/// would need a step of its own), or if the commands that rely on the newer fields leave its
/// format as it was: a node of an older build, which ignores a generation and a pending
/// lease mode, would keep joining it.
#[tokio::test(start_paused = true)]
async fn a_group_of_the_previous_format_is_joined_as_it_is_and_raised_by_what_needs_more() {
    assert_eq!(leasehold::FORMAT_VERSION, 2);
    let store = Arc::new(MemoryStore::new());
    let group = group_with_partitions(&store).await;
    downgrade_to_format_1(&store, &group).await;
    let node = Participant::join(store.clone(), config("a", 1000, 1500), ())
        .await
        .expect("joins a group of format 1");
    sleep(Duration::from_secs(2)).await;
    assert_eq!(node.owned().len(), 4);
    let joined = store.get_group(&group).await.unwrap().unwrap().value;
    assert_eq!(joined.format, 1, "a join leaves the format alone");
    assert!(joined.timings.is_some(), "the first node's timings adopted");
    node.shutdown().await;

    admin::set_lease_mode(&*store, &group, leasehold::LeaseMode::Session)
        .await
        .unwrap();
    let changed = store.get_group(&group).await.unwrap().unwrap().value;
    assert_eq!(
        (changed.format, changed.lease_mode),
        (2, leasehold::LeaseMode::Session)
    );

    downgrade_to_format_1(&store, &group).await;
    admin::destroy(&*store, &group, admin::Destroy::IfNoMembers)
        .await
        .unwrap();
    let destroyed = store.get_group(&group).await.unwrap().unwrap().value;
    assert_eq!((destroyed.format, destroyed.generation), (2, 1));
}

/// A node that cannot read the group record while it joins tries again after a back-off
/// that grows up to the scan back-off's ceiling, and joins once the store answers.
///
/// Fails if it tries again at once: a fleet starting on a store that hangs would ask it
/// again as fast as its calls time out.
#[tokio::test(start_paused = true)]
async fn a_node_that_cannot_read_the_group_record_backs_off_while_it_joins() {
    let memory = Arc::new(MemoryStore::new());
    group_with_partitions(&memory).await;
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    store.set_hung(true);
    let config = config("a", 1000, 1500);
    let a = Participant::start(store.clone(), config.clone(), ()).unwrap();
    sleep(Duration::from_secs(20)).await;
    // Each try waits out its time limit (250 ms), then 250 ms, 500 ms and 1 s (the scan
    // back-off's ceiling) from then on: about sixteen tries in twenty seconds, not eighty.
    let tries = store.record_reads();
    assert!(
        (10..=20).contains(&tries),
        "{tries} reads of the group record"
    );
    store.set_hung(false);
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned().len(), 4);
    a.shutdown().await;
}
