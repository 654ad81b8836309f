use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::group::{GroupRecord, FORMAT_VERSION};
use crate::types::Epoch;
use crate::MemoryStore;

#[tokio::test]
async fn init_creates_only_what_is_missing_and_counts_damaged_records() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    let first = init(&store, &group, 4).await.unwrap();
    assert_eq!((first.created, first.existing), (4, 0));
    // A damaged last record still makes the group four partitions long.
    store.corrupt_lease(&group, PartitionId(3));
    let refused = init(&store, &group, 3).await.unwrap_err();
    assert!(
        matches!(
            refused,
            AdminError::PartitionCountMismatch {
                existing: 4,
                requested: 3,
                ..
            }
        ),
        "{refused:?}"
    );
    let grown = init(&store, &group, 6).await.unwrap();
    assert_eq!((grown.created, grown.existing), (2, 4));
    let listing = store.list_leases(&group).await.unwrap();
    assert_eq!((listing.partition_count(), listing.len()), (6, 6));
    assert_eq!(
        listing.corrupt[0].key(),
        Some(&RecordKey::Lease(PartitionId(3))),
        "the damaged record is left for an operator, not overwritten"
    );
}

async fn create_released(
    store: &MemoryStore,
    group: &GroupName,
    partitions: impl IntoIterator<Item = u32>,
) {
    for partition in partitions {
        let record = LeaseRecord::released();
        let created = store.put_lease(group, PartitionId(partition), &record, PutMode::Create);
        created.await.unwrap();
    }
}

#[tokio::test]
async fn stale_check_counts_a_stray_huge_partition_without_allocating_by_it() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 4).await.unwrap();
    create_released(&store, &group, [1_000_000, u32::MAX]).await;
    let told = stale_check(&store, &group, Duration::ZERO, 0, Some(4))
        .await
        .unwrap();
    assert_eq!((told.missing_count, told.missing.len()), (0, 0));
    let inferred = stale_check(&store, &group, Duration::ZERO, 0, None)
        .await
        .unwrap();
    assert_eq!(inferred.missing_count, u64::from(u32::MAX) - 5);
    assert_eq!(inferred.missing.len(), StaleReport::MISSING_LISTED);
    assert_eq!(inferred.missing[0], PartitionId(4));
    assert!(inferred.has_problems());
}

#[tokio::test]
async fn stale_check_lists_the_gaps_in_order() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    create_released(&store, &group, [1, 2, 5]).await;
    let report = stale_check(&store, &group, Duration::ZERO, 0, Some(8))
        .await
        .unwrap();
    assert_eq!(report.missing, [0, 3, 4, 6, 7].map(PartitionId));
    assert_eq!(report.missing_count, 5);
}

#[test]
fn contended_names_the_record() {
    let error = AdminError::Contended {
        key: RecordKey::Lease(PartitionId(7)),
    };
    assert_eq!(
        error.to_string(),
        format!("lease 7 kept changing; gave up after {MAX_ATTEMPTS} attempts")
    );
}

fn timings(lease_validity: u64, acquire_after: u64) -> GroupTimings {
    GroupTimings {
        lease_validity: Duration::from_secs(lease_validity),
        acquire_after: Duration::from_secs(acquire_after),
        max_clock_drift: 0.01,
    }
}

async fn add_member(store: &MemoryStore, group: &GroupName, name: &str, t: Option<GroupTimings>) {
    let record = MemberRecord {
        lease_validity: t.map(|t| t.lease_validity),
        acquire_after: t.map(|t| t.acquire_after),
        ..MemberRecord::default()
    };
    let node = NodeId::new(name).unwrap();
    store
        .put_member(group, &node, &record, PutMode::Create)
        .await
        .unwrap();
}

#[tokio::test]
async fn destroy_refuses_while_members_are_present_and_keeps_the_epoch_floor() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    update_lease(&store, &group, PartitionId(1), |r| r.epoch = Epoch(57))
        .await
        .unwrap();
    add_member(&store, &group, "server-1", None).await;
    let refused = destroy(&store, &group, Destroy::IfNoMembers).await;
    assert!(
        matches!(&refused, Err(AdminError::MembersPresent { nodes, .. }) if nodes.len() == 1),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().to_string().contains("server-1"));
    assert_eq!(
        store.list_leases(&group).await.unwrap().len(),
        2,
        "nothing deleted"
    );

    // Two leases, the member and the operator's record written by the update.
    assert_eq!(destroy(&store, &group, Destroy::Force).await.unwrap(), 4);
    let kept = store
        .get_group(&group)
        .await
        .unwrap()
        .expect("the group record stays");
    assert_eq!(kept.value.epoch_floor, Epoch(57));
    init(&store, &group, 2).await.unwrap();
    let recreated = store.list_leases(&group).await.unwrap();
    assert!(recreated.records.iter().all(|r| r.value.epoch == Epoch(57)));
}

/// Fails if a member record that cannot be read does not count as a member: its node may
/// well be running, and a destroy that waits for no members would delete what it serves.
#[tokio::test]
async fn destroy_counts_an_unreadable_member_record_as_a_member() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    let damaged = NodeId::new("server-2").unwrap();
    store.corrupt_member(&group, &damaged);
    let refused = destroy(&store, &group, Destroy::IfNoMembers).await;
    assert!(
        matches!(&refused, Err(AdminError::MembersPresent { nodes, .. }) if *nodes == [damaged.clone()]),
        "{refused:?}"
    );
    assert_eq!(store.list_leases(&group).await.unwrap().len(), 2);
}

#[tokio::test]
async fn timings_change_only_when_every_member_fits_them() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    set_timings(&store, &group, timings(30, 45), false)
        .await
        .unwrap();
    add_member(&store, &group, "old", Some(timings(30, 45))).await;
    add_member(&store, &group, "new", Some(timings(10, 45))).await;

    let refused = set_timings(&store, &group, timings(10, 15), false)
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(&refused, AdminError::TimingsRefused { misfits, .. } if misfits.len() == 1),
        "{message}"
    );
    assert!(
        message.contains("old") && !message.contains("new,"),
        "{message}"
    );
    let record = store.get_group(&group).await.unwrap().unwrap().value;
    assert_eq!(record.timings, Some(timings(30, 45)), "unchanged");
    assert_eq!(
        record.pending_timings, None,
        "the pending change is withdrawn"
    );

    // Once the last node restarted inside both, the change goes through.
    let old = NodeId::new("old").unwrap();
    let stored = store.get_member(&group, &old).await.unwrap().unwrap();
    store
        .delete_member(&group, &old, &stored.version)
        .await
        .unwrap();
    let changed = set_timings(&store, &group, timings(10, 15), false)
        .await
        .unwrap();
    assert_eq!(changed.timings, Some(timings(10, 15)));

    // Members that publish no timings hold a change back unless it is forced.
    add_member(&store, &group, "legacy", None).await;
    let unknown = set_timings(&store, &group, timings(5, 15), false).await;
    assert!(
        matches!(unknown, Err(AdminError::TimingsRefused { ref unknown, .. }) if unknown.len() == 1)
    );
    set_timings(&store, &group, timings(5, 15), true)
        .await
        .unwrap();

    let unsafe_timings = set_timings(&store, &group, timings(10, 10), true).await;
    assert!(matches!(unsafe_timings, Err(AdminError::UnsafeTimings(_))));
}

#[tokio::test]
async fn operator_commands_refuse_a_group_of_a_newer_format() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    let current = store.get_group(&group).await.unwrap().unwrap();
    let newer = GroupRecord {
        format: FORMAT_VERSION + 1,
        ..current.value
    };
    store
        .put_group(&group, &newer, PutMode::Update(current.version))
        .await
        .unwrap();
    let kicked = kick(&store, &group, PartitionId(0)).await;
    assert!(matches!(kicked, Err(AdminError::Group(_))), "{kicked:?}");
    add_member(&store, &group, "server-1", None).await;
    let server = NodeId::new("server-1").unwrap();
    let drained = set_draining(&store, &group, &server, true).await;
    assert!(matches!(drained, Err(AdminError::Group(_))), "{drained:?}");
    let member = store.get_member(&group, &server).await.unwrap().unwrap();
    assert!(!member.value.draining);
    assert!(init(&store, &group, 2).await.is_err());
}

/// Fails if a group record is created in the format of the template it was given rather
/// than the format this build writes: a template copied from an older group's record would
/// otherwise create a new group that builds of that older format join without knowing
/// what it holds.
#[tokio::test]
async fn a_group_record_is_created_in_the_current_format_whatever_the_template() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    let template = GroupRecord {
        format: 1,
        ..GroupRecord::default()
    };
    let created = ensure_group_as(&store, &group, &template).await.unwrap();
    assert_eq!(created.value.format, FORMAT_VERSION);
    let stored = store.get_group(&group).await.unwrap().unwrap();
    assert_eq!(stored.value.format, FORMAT_VERSION);
}

/// Fails if raising the floor to where it already is, or below, rewrites the group record:
/// `destroy` raises it once per deleted record, and each needless write is a conflict for a
/// node joining meanwhile.
#[tokio::test]
async fn raising_the_floor_to_where_it_is_writes_nothing() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 1).await.unwrap();
    raise_epoch_floor(&store, &group, Epoch(10)).await.unwrap();
    let before = store.get_group(&group).await.unwrap().unwrap().version;
    for epoch in [10, 3] {
        let record = raise_epoch_floor(&store, &group, Epoch(epoch))
            .await
            .unwrap();
        assert_eq!(record.epoch_floor, Epoch(10), "never lowered");
    }
    let after = store.get_group(&group).await.unwrap().unwrap().version;
    assert_eq!(before, after, "the record was not rewritten");
}

#[tokio::test]
async fn stale_reports_epochs_that_went_back() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 3).await.unwrap();
    raise_epoch_floor(&store, &group, Epoch(10)).await.unwrap();
    // Partition 2 re-created by hand at epoch 0, below the floor.
    crate::testing::recreate_by_hand(&store, &group, PartitionId(2))
        .await
        .unwrap();
    let report = stale_check(&store, &group, Duration::ZERO, 0, Some(3))
        .await
        .unwrap();
    assert!(report.has_problems());
    assert_eq!(
        report.epochs_back,
        vec![
            (PartitionId(0), Epoch(0), Epoch(10)),
            (PartitionId(1), Epoch(0), Epoch(10)),
            (PartitionId(2), Epoch(0), Epoch(10)),
        ]
    );
}

/// Fails if `allow` leaves the node on the prohibited list, removes other nodes from it, or
/// does not write the record.
#[tokio::test]
async fn allow_takes_one_node_off_the_prohibited_list() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
    prohibit(&store, &group, PartitionId(1), &a).await.unwrap();
    prohibit(&store, &group, PartitionId(1), &b).await.unwrap();
    let record = allow(&store, &group, PartitionId(1), &a).await.unwrap();
    assert_eq!(record.prohibited, vec![b.clone()]);
    let stored = store
        .get_lease(&group, PartitionId(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.value.prohibited, vec![b]);
    assert_eq!(stored.value.note.as_deref(), Some("allowed a"));
}

/// Fails if a record another process created between `init_listed`'s listing and its own
/// write is counted as created, or not at all, or if created records carry no write time
/// (which `status` shows operators as the record's age).
#[tokio::test]
async fn init_counts_a_record_created_meanwhile_as_existing_and_stamps_what_it_writes() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    let listing = store.list_leases(&group).await.unwrap();
    // Another process building the group out got in first: its group record, then a lease.
    ensure_group(&store, &group).await.unwrap();
    store
        .put_lease(
            &group,
            PartitionId(2),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await
        .unwrap();
    let outcome = init_listed(&store, &group, 4, &listing).await.unwrap();
    assert_eq!((outcome.created, outcome.existing), (3, 1));
    let written = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert!(written.value.written_at_unix_ms.is_some());
}

/// Fails if a nudge does not rewrite the operator's record with the next heartbeat.
#[tokio::test]
async fn every_nudge_advances_the_operators_record() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    let mut heartbeats = Vec::new();
    for _ in 0..3 {
        nudge(&store, &group).await.unwrap();
        let record = store
            .get_member(&group, &NodeId::operator())
            .await
            .unwrap()
            .unwrap();
        heartbeats.push(record.value.heartbeat);
    }
    assert_eq!(heartbeats, vec![1, 2, 3]);
}

/// Fails if a forced destroy leaves the member record of a node that renewed meanwhile:
/// with session leases that record is what keeps the node's leases, so the node would go on
/// serving partitions whose records are gone.
#[tokio::test]
async fn a_forced_destroy_deletes_member_records_renewed_under_it() {
    let memory = Arc::new(MemoryStore::new());
    let store = crate::testing::FaultyStore::new(memory.clone());
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    crate::admin::set_lease_mode(&store, &group, crate::LeaseMode::Session)
        .await
        .unwrap();
    add_member(&memory, &group, "server-1", None).await;
    store.renew_before_member_deletes(2);
    destroy(&store, &group, Destroy::Force).await.unwrap();
    let left = memory.list_members(&group).await.unwrap();
    assert!(left.records.is_empty(), "{:?}", left.records);
}

#[tokio::test]
async fn the_lease_mode_changes_only_with_no_members() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 2).await.unwrap();
    add_member(&store, &group, "server-1", None).await;
    let refused = crate::admin::set_lease_mode(&store, &group, crate::LeaseMode::Session)
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(&refused, AdminError::ModeChangeWithMembers { nodes, .. } if nodes.len() == 1),
        "{message}"
    );
    assert!(
        message.contains("server-1") && !message.contains("force"),
        "{message}"
    );
}

/// Records created in a group used before are held by nobody (taken only after
/// `acquire_after`); each sign of earlier use is enough alone, and a new group starts free.
#[tokio::test]
async fn records_built_in_a_group_used_before_are_held_by_nobody_whatever_shows_the_use() {
    let fresh = MemoryStore::new();
    let group: GroupName = "g".parse().unwrap();
    let outcome = init(&fresh, &group, 2).await.unwrap();
    assert!(!outcome.held_by_nobody, "{outcome:?}");

    // A generation raised (destroyed before), nothing else.
    let destroyed = MemoryStore::new();
    create_released(&destroyed, &group, 0..2).await;
    destroy(&destroyed, &group, Destroy::Force).await.unwrap();
    let record = ensure_group(&destroyed, &group).await.unwrap();
    assert!(record.value.generation > 0 && record.value.epoch_floor == Epoch(0));
    assert!(init(&destroyed, &group, 2).await.unwrap().held_by_nobody);

    // An epoch floor, nothing else.
    let floored = MemoryStore::new();
    raise_epoch_floor(&floored, &group, Epoch(3)).await.unwrap();
    assert!(init(&floored, &group, 2).await.unwrap().held_by_nobody);

    // A record taken once (in use), nothing else.
    let used = MemoryStore::new();
    ensure_group(&used, &group).await.unwrap();
    let mut taken = LeaseRecord::released();
    taken.epoch = Epoch(1);
    used.put_lease(&group, PartitionId(0), &taken, PutMode::Create)
        .await
        .unwrap();
    assert!(init(&used, &group, 2).await.unwrap().held_by_nobody);
}

/// Fails if the restart window's bound is not `MAX_RESTART_WINDOW_FACTOR` times the group's
/// `acquire_after`, inclusive: a window that long is allowed, a nanosecond more is refused
/// naming the bound, and the record keeps the last window allowed.
#[tokio::test]
async fn the_restart_window_may_reach_its_bound_and_no_further() {
    let store = MemoryStore::new();
    let group = GroupName::new("orders").unwrap();
    init(&store, &group, 1).await.unwrap();
    set_timings(&store, &group, timings(30, 45), false)
        .await
        .unwrap();
    let most = Duration::from_secs(45) * crate::group::MAX_RESTART_WINDOW_FACTOR;
    for allowed in [Duration::from_secs(1), most] {
        let record = set_restart_window(&store, &group, Some(allowed)).await;
        assert_eq!(record.unwrap().restart_window, Some(allowed));
    }
    let beyond = most + Duration::from_nanos(1);
    let refused = set_restart_window(&store, &group, Some(beyond)).await;
    assert!(
        matches!(&refused, Err(AdminError::RestartWindowTooLong { window, most: bound, .. })
            if *window == beyond && *bound == most),
        "{refused:?}"
    );
    let stored = store.get_group(&group).await.unwrap().unwrap();
    assert_eq!(stored.value.restart_window, Some(most));
}
