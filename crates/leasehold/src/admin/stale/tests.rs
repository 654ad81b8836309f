//! One test per kind of finding of the stale check: each builds a table whose only finding
//! is that kind, so that a kind the check stops reporting, or reports under another name,
//! fails exactly one test.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::admin::{nudge, raise_epoch_floor};
use crate::error::StoreError;
use crate::record::{LeaseRecord, MemberRecord};
use crate::store::PutMode;
use crate::testing::FaultyStore;
use crate::MemoryStore;

/// No problem at all, for [`problems`].
const NONE: [&str; 0] = [];

fn group() -> GroupName {
    GroupName::new("orders").unwrap()
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// A record no probe complains about without a live node: offline.
fn offline() -> LeaseRecord {
    LeaseRecord {
        state: LeaseState::Offline,
        ..LeaseRecord::released()
    }
}

fn held_by(owner: &str) -> LeaseRecord {
    LeaseRecord {
        owner: Some(node(owner)),
        epoch: Epoch(1),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    }
}

/// Writes `record` as partition `partition`, creating it or replacing what is there.
async fn write(store: &MemoryStore, partition: u32, record: LeaseRecord) {
    let current = store.get_lease(&group(), PartitionId(partition)).await;
    let mode = match current.unwrap() {
        Some(current) => PutMode::Update(current.version),
        None => PutMode::Create,
    };
    let partition = PartitionId(partition);
    store
        .put_lease(&group(), partition, &record, mode)
        .await
        .unwrap();
}

/// A group of `partitions` offline partitions: a table with nothing to report.
async fn quiet_table(partitions: u32) -> MemoryStore {
    let store = MemoryStore::new();
    crate::admin::ensure_group(&store, &group()).await.unwrap();
    for partition in 0..partitions {
        write(&store, partition, offline()).await;
    }
    store
}

/// Writes (or rewrites, changing its version) the member record of `name`.
async fn write_member(store: &MemoryStore, name: &str, record: MemberRecord) {
    let current = store.get_member(&group(), &node(name)).await.unwrap();
    let mode = current.map_or(PutMode::Create, |c| PutMode::Update(c.version));
    store
        .put_member(&group(), &node(name), &record, mode)
        .await
        .unwrap();
}

/// Both samples at once: nothing can change in between.
async fn check(store: &MemoryStore, min_nodes: usize, expected: Option<u32>) -> StaleReport {
    stale_check(store, &group(), Duration::ZERO, min_nodes, expected)
        .await
        .unwrap()
}

/// Runs the check with `change` applied to the store between its two samples. Time is
/// paused, so the watch passes only once the test has nothing left to do.
async fn check_across(
    store: &MemoryStore,
    min_nodes: usize,
    change: impl AsyncFnOnce(&MemoryStore),
) -> StaleReport {
    let counting = Arc::new(FaultyStore::new(Arc::new(store.clone())));
    let probe = Arc::clone(&counting);
    let check = tokio::spawn(async move {
        stale_check(&*probe, &group(), Duration::from_secs(1), min_nodes, None).await
    });
    // The in-memory store answers without yielding, so the task takes its whole first
    // sample in the poll that lists the leases, and is asleep once the listing is counted.
    while counting.listings() == 0 {
        tokio::task::yield_now().await;
    }
    change(store).await;
    let report = check.await.unwrap().unwrap();
    assert_eq!(
        counting.listings(),
        2,
        "the change fell between the samples"
    );
    report
}

/// The kinds of problem `report` shows, by name, checked against its own verdict.
fn problems(report: &StaleReport) -> Vec<&'static str> {
    let kinds = [
        ("unrenewed", !report.unrenewed.is_empty()),
        ("unowned", !report.unowned.is_empty()),
        ("missing", report.missing_count > 0),
        ("corrupt", !report.corrupt.is_empty()),
        ("epochs back", !report.epochs_back.is_empty()),
        (
            "reservation run out",
            !report.reservations_run_out.is_empty(),
        ),
        ("too few nodes", report.live_nodes.len() < report.min_nodes),
    ];
    let found: Vec<&'static str> = kinds
        .into_iter()
        .filter(|(_, shown)| *shown)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(report.has_problems(), !found.is_empty(), "{report:?}");
    // Damage that does not heal by itself, and only that, is critical.
    let critical = ["missing", "corrupt", "epochs back"];
    let damaged = found.iter().any(|kind| critical.contains(kind));
    assert_eq!(report.is_critical(), damaged, "{report:?}");
    found
}

/// Fails if offline partitions are counted as unowned or as a problem, or are not listed.
#[tokio::test]
async fn offline_partitions_are_listed_and_not_a_problem() {
    let store = quiet_table(3).await;
    let report = check(&store, 0, None).await;
    assert_eq!(report.offline, [0, 1, 2].map(PartitionId));
    assert_eq!(problems(&report), NONE, "{report:?}");
}

/// Fails if a held lease whose version stayed the same is not reported with its owner, or
/// if one renewed between the samples is.
#[tokio::test(start_paused = true)]
async fn a_lease_not_renewed_between_the_samples_is_reported_with_its_owner() {
    let store = quiet_table(3).await;
    write(&store, 1, held_by("server-1")).await;
    write(&store, 2, held_by("server-2")).await;
    let report = check_across(&store, 0, async |store| {
        write(store, 2, held_by("server-2")).await;
    })
    .await;
    assert_eq!(report.unrenewed, [(PartitionId(1), Some(node("server-1")))]);
    assert_eq!(problems(&report), ["unrenewed"], "{report:?}");
}

/// Fails if a released record, or one marked held with no owner, is not reported unowned.
#[tokio::test]
async fn released_and_ownerless_partitions_are_unowned() {
    let store = quiet_table(3).await;
    write(&store, 1, LeaseRecord::released()).await;
    let ownerless = LeaseRecord {
        owner: None,
        ..held_by("server-1")
    };
    write(&store, 2, ownerless).await;
    let report = check(&store, 0, None).await;
    assert_eq!(report.unowned, [1, 2].map(PartitionId));
    assert_eq!(report.offline, [PartitionId(0)]);
    assert_eq!(problems(&report), ["unowned"], "{report:?}");
}

/// Fails if partitions below the expected count with no record are not a problem.
#[tokio::test]
async fn partitions_without_a_record_are_missing() {
    let store = MemoryStore::new();
    write(&store, 0, offline()).await;
    write(&store, 2, offline()).await;
    let report = check(&store, 0, Some(4)).await;
    assert_eq!(report.missing, [1, 3].map(PartitionId));
    assert_eq!(report.missing_count, 2);
    assert_eq!(problems(&report), ["missing"], "{report:?}");
}

/// Fails if an unreadable lease record is not reported, or is reported as missing.
#[tokio::test]
async fn an_unreadable_lease_record_is_corrupt() {
    let store = quiet_table(3).await;
    store.corrupt_lease(&group(), PartitionId(1));
    let report = check(&store, 0, None).await;
    assert_eq!(report.corrupt, ["corrupt lease 1: deliberately corrupted"]);
    assert_eq!(problems(&report), ["corrupt"], "{report:?}");
}

/// Fails if an unreadable member record is left out of the report: it hides a node from
/// every participant's balancing.
#[tokio::test]
async fn an_unreadable_member_record_is_corrupt() {
    let store = quiet_table(2).await;
    write_member(&store, "server-1", MemberRecord::default()).await;
    write_member(&store, "server-2", MemberRecord::default()).await;
    store.corrupt_member(&group(), &node("server-2"));
    let report = check(&store, 0, None).await;
    assert_eq!(
        report.corrupt,
        ["corrupt member server-2: deliberately corrupted"]
    );
    assert_eq!(problems(&report), ["corrupt"], "{report:?}");
}

/// Fails if a record below the group's epoch floor is not reported with the floor, or if
/// one at the floor is.
#[tokio::test]
async fn an_epoch_below_the_group_floor_has_gone_back() {
    let store = quiet_table(3).await;
    raise_epoch_floor(&store, &group(), Epoch(5)).await.unwrap();
    let at_floor = LeaseRecord {
        epoch: Epoch(5),
        ..offline()
    };
    // Partition 1 keeps epoch 0: created again by hand, from scratch.
    write(&store, 0, at_floor.clone()).await;
    write(&store, 2, at_floor).await;
    let report = check(&store, 0, None).await;
    assert_eq!(report.epochs_back, [(PartitionId(1), Epoch(0), Epoch(5))]);
    assert_eq!(problems(&report), ["epochs back"], "{report:?}");
}

/// Fails if an epoch lower in the second sample than in the first is not reported with the
/// first sample's epoch.
#[tokio::test(start_paused = true)]
async fn an_epoch_lower_than_in_the_first_sample_has_gone_back() {
    let store = quiet_table(2).await;
    let seven = LeaseRecord {
        epoch: Epoch(7),
        ..offline()
    };
    write(&store, 1, seven).await;
    let report = check_across(&store, 0, async |store| {
        let three = LeaseRecord {
            epoch: Epoch(3),
            ..offline()
        };
        write(store, 1, three).await;
    })
    .await;
    assert_eq!(report.epochs_back, [(PartitionId(1), Epoch(3), Epoch(7))]);
    assert_eq!(problems(&report), ["epochs back"], "{report:?}");
}

/// Fails if members whose record did not change count as live, if the operator's record
/// counts as a node, or if exactly `min_nodes` live nodes is a problem.
#[tokio::test(start_paused = true)]
async fn fewer_live_nodes_than_the_minimum_is_a_problem() {
    let store = quiet_table(2).await;
    for name in ["server-1", "server-2"] {
        write_member(&store, name, MemberRecord::default()).await;
    }
    let renew = async |store: &MemoryStore| {
        write_member(store, "server-1", MemberRecord::default()).await;
        nudge(store, &group()).await.unwrap();
    };
    let report = check_across(&store, 2, renew).await;
    assert_eq!(report.live_nodes, [node("server-1")]);
    assert_eq!(problems(&report), ["too few nodes"], "{report:?}");

    let report = check_across(&store, 1, renew).await;
    assert_eq!(report.live_nodes, [node("server-1")]);
    assert_eq!(problems(&report), NONE, "{report:?}");
}

/// Fails if draining members are not listed, or are counted as a problem.
#[tokio::test]
async fn draining_members_are_listed_and_not_a_problem() {
    let store = quiet_table(2).await;
    let draining = MemberRecord {
        draining: true,
        ..MemberRecord::default()
    };
    write_member(&store, "server-1", draining).await;
    write_member(&store, "server-2", MemberRecord::default()).await;
    let report = check(&store, 0, None).await;
    assert_eq!(report.draining, [node("server-1")]);
    assert_eq!(problems(&report), NONE, "{report:?}");
}

/// Fails if a store failure in the second sample is swallowed into a report instead of
/// failing the check: a probe must say it could not check, not that all is well.
#[tokio::test(start_paused = true)]
async fn a_store_failure_between_the_samples_fails_the_check() {
    let store = quiet_table(2).await;
    let faulty = Arc::new(FaultyStore::new(Arc::new(store.clone())));
    let probe = Arc::clone(&faulty);
    let check = tokio::spawn(async move {
        stale_check(&*probe, &group(), Duration::from_secs(1), 0, None).await
    });
    while faulty.listings() == 0 {
        tokio::task::yield_now().await;
    }
    faulty.set_reads_throttled(true);
    let result = check.await.unwrap();
    assert!(
        matches!(result, Err(AdminError::Store(StoreError::Throttled { .. }))),
        "{result:?}"
    );
    assert_eq!(faulty.listings(), 2);
}

/// With session leases: fails if a lease whose holder renewed its session between the
/// samples is reported unrenewed, or if one whose holder's session was only written back
/// unchanged by others (a take, a drain) is not, or if that holder counts as live.
#[tokio::test(start_paused = true)]
async fn with_sessions_a_lease_is_renewed_by_its_holders_session() {
    let store = quiet_table(3).await;
    crate::admin::set_lease_mode(&store, &group(), crate::LeaseMode::Session)
        .await
        .unwrap();
    write(&store, 1, held_by("server-1")).await;
    write(&store, 2, held_by("server-2")).await;
    let session = |heartbeat| MemberRecord {
        heartbeat,
        written_at_unix_ms: Some(1_700_000_000_000 + heartbeat),
        ..MemberRecord::default()
    };
    write_member(&store, "server-1", session(1)).await;
    write_member(&store, "server-2", session(1)).await;
    let report = check_across(&store, 0, async |store| {
        // server-2 renews; server-1's session is only written back as it was.
        write_member(store, "server-2", session(2)).await;
        write_member(store, "server-1", session(1)).await;
    })
    .await;
    assert_eq!(report.unrenewed, [(PartitionId(1), Some(node("server-1")))]);
    assert_eq!(report.live_nodes, [node("server-2")]);
    assert_eq!(problems(&report), ["unrenewed"], "{report:?}");
}

#[tokio::test]
async fn with_sessions_a_lease_of_an_ended_session_is_unrenewed_whatever_the_next_renews() {
    let store = quiet_table(3).await;
    crate::admin::set_lease_mode(&store, &group(), crate::LeaseMode::Session)
        .await
        .unwrap();
    let under = |session| LeaseRecord {
        session: Some(session),
        ..held_by("server-1")
    };
    write(&store, 1, under(7)).await;
    write(&store, 2, under(8)).await;
    let session = |id, heartbeat| MemberRecord {
        session: Some(id),
        heartbeat,
        written_at_unix_ms: Some(1_700_000_000_000 + heartbeat),
        ..MemberRecord::default()
    };
    write_member(&store, "server-1", session(8, 1)).await;
    let report = check_across(&store, 0, async |store| {
        write_member(store, "server-1", session(8, 2)).await;
    })
    .await;
    assert_eq!(report.unrenewed, [(PartitionId(1), Some(node("server-1")))]);
    assert_eq!(report.live_nodes, [node("server-1")]);
}

/// Fails if a partition reserved for a restarting node within its window is counted as
/// unowned, or if one whose window ran out long ago is not a problem.
#[tokio::test]
async fn reserved_partitions_are_listed_and_a_reservation_run_out_is_a_problem() {
    let store = quiet_table(3).await;
    crate::admin::set_timings(
        &store,
        &group(),
        crate::GroupTimings {
            lease_validity: Duration::from_secs(10),
            acquire_after: Duration::from_secs(15),
            max_clock_drift: 0.01,
        },
        false,
    )
    .await
    .unwrap();
    let reserved = |written_ms_ago: u64| {
        let mut record = LeaseRecord {
            written_at_unix_ms: Some(unix_ms_now() - written_ms_ago),
            ..LeaseRecord::released()
        };
        record.reserve_for(&node("restarting"));
        record
    };
    // Written 1 s and then 20 s ago: within twice the window of 15 s (the others count the
    // window from when they first see the record, and this machine's clock is not the
    // writer's).
    for written_ms_ago in [1_000, 20_000] {
        write(&store, 0, reserved(written_ms_ago)).await;
        let report = check(&store, 0, None).await;
        assert_eq!(report.reserved, [(PartitionId(0), node("restarting"))]);
        assert_eq!(problems(&report), NONE, "{report:?}");
    }
    // Written 31 s ago against a window of 15 s: more than twice the window.
    write(&store, 0, reserved(31_000)).await;
    let report = check(&store, 0, None).await;
    assert!(report.reserved.is_empty());
    assert_eq!(
        report.reservations_run_out,
        [(PartitionId(0), node("restarting"))]
    );
    assert_eq!(problems(&report), ["reservation run out"]);
}
