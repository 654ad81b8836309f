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
    ParticipantConfig {
        lease_validity: Duration::from_millis(lease_validity_ms),
        acquire_after: Duration::from_millis(acquire_after_ms),
        ..ParticipantConfig::fast(node(name), 4)
    }
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
