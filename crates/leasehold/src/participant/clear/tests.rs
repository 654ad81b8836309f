//! Releases made together with the name's member record: re-read after the process's own
//! renewal got in between, given up after a few such re-reads or as soon as another process
//! has taken the name over.

use std::sync::Arc;

use super::*;
use crate::record::MemberRecord;
use crate::testing::FaultyStore;
use crate::types::Epoch;
use crate::{admin, MemoryStore};

const SESSION: u64 = 7;

fn group() -> GroupName {
    GroupName::new("orders").unwrap()
}

fn node() -> NodeId {
    NodeId::new("a").unwrap()
}

/// A group of three partitions, each held by `a` under an earlier session, and `a`'s member
/// record under `session`; the releases of all three, each at the version listed.
async fn left_held(session: u64) -> (Arc<FaultyStore>, Vec<LeaseWrite>) {
    let memory = Arc::new(MemoryStore::new());
    admin::init(&*memory, &group(), 3).await.unwrap();
    let member = MemberRecord {
        session: Some(session),
        ..MemberRecord::default()
    };
    memory
        .put_member(&group(), &node(), &member, PutMode::Create)
        .await
        .unwrap();
    let mut writes = Vec::new();
    for partition in (0..3).map(PartitionId) {
        let listed = memory
            .get_lease(&group(), partition)
            .await
            .unwrap()
            .unwrap();
        let held = LeaseRecord {
            owner: Some(node()),
            epoch: Epoch(4),
            state: LeaseState::Held,
            session: Some(SESSION - 1),
            ..LeaseRecord::released()
        };
        let version = memory
            .put_lease(&group(), partition, &held, PutMode::Update(listed.version))
            .await
            .unwrap();
        let record = LeaseRecord {
            epoch: Epoch(4),
            previous_owner: Some(node()),
            ..LeaseRecord::released()
        };
        writes.push(LeaseWrite {
            partition,
            record,
            mode: PutMode::Update(version),
        });
    }
    (Arc::new(FaultyStore::new(memory)), writes)
}

async fn states(store: &FaultyStore) -> Vec<LeaseState> {
    let leases = store.list_leases(&group()).await.unwrap();
    leases.records.iter().map(|r| r.value.state).collect()
}

fn refused_by_member(result: &Result<Version, StoreError>) -> bool {
    matches!(result, Err(StoreError::Conflict { key: RecordKey::Member(n) }) if *n == node())
}

/// Fails if a release whose transaction lost to the process's own renewal is given up
/// (the record would name the node for ever), or if the member record's new version is not
/// handed back (the next renewal would conflict with the node's own write).
#[tokio::test]
async fn a_release_that_lost_to_a_renewal_reads_the_member_record_again_and_goes_on() {
    let (store, writes) = left_held(SESSION).await;
    store.renew_before_transactions(2);
    let cleared = clear_under_session(&*store, &group(), &node(), SESSION, writes)
        .await
        .unwrap();
    assert!(
        cleared.results.iter().all(Result::is_ok),
        "{:?}",
        cleared.results
    );
    assert_eq!(states(&store).await, [LeaseState::Released; 3]);
    let member = store.get_member(&group(), &node()).await.unwrap().unwrap();
    let (read, written) = cleared
        .member_versions
        .expect("the member record was written");
    assert_eq!(written, member.version);
    assert_ne!(read, written);
}

/// Fails if the re-reads after renewals are not bounded by `MEMBER_REREADS`, or if the
/// writes left are not refused once they run out.
#[tokio::test]
async fn a_name_renewed_before_every_attempt_is_given_up_after_a_few_rereads() {
    let (store, writes) = left_held(SESSION).await;
    store.renew_before_transactions(10);
    let cleared = clear_under_session(&*store, &group(), &node(), SESSION, writes)
        .await
        .unwrap();
    assert_eq!(cleared.results.len(), 3);
    assert!(
        cleared.results.iter().all(refused_by_member),
        "{:?}",
        cleared.results
    );
    let attempts = 10 - store.renewals_before_transactions_left() as usize;
    assert_eq!(attempts, 1 + MEMBER_REREADS);
    assert_eq!(states(&store).await, [LeaseState::Held; 3]);
    assert!(cleared.member_versions.is_none());
}

/// Fails if a conflict on a lease record is taken for one on the member record: only that
/// release fails, and the others go on.
#[tokio::test]
async fn a_release_of_a_record_changed_meanwhile_fails_alone() {
    let (store, mut writes) = left_held(SESSION).await;
    writes[1].mode = PutMode::Update(Version::from_number(1));
    let cleared = clear_under_session(&*store, &group(), &node(), SESSION, writes)
        .await
        .unwrap();
    let lease_conflict = matches!(
        &cleared.results[1],
        Err(StoreError::Conflict {
            key: RecordKey::Lease(PartitionId(1))
        })
    );
    assert!(lease_conflict, "{:?}", cleared.results);
    assert!(cleared.results[0].is_ok() && cleared.results[2].is_ok());
    let states = states(&store).await;
    assert_eq!(
        states,
        [LeaseState::Released, LeaseState::Held, LeaseState::Released]
    );
}

/// Fails if a process whose name another process has taken over releases anything.
#[tokio::test]
async fn a_name_taken_over_by_another_process_releases_nothing() {
    let (store, writes) = left_held(SESSION + 1).await;
    let cleared = clear_under_session(&*store, &group(), &node(), SESSION, writes)
        .await
        .unwrap();
    assert!(
        cleared.results.iter().all(refused_by_member),
        "{:?}",
        cleared.results
    );
    assert_eq!(states(&store).await, [LeaseState::Held; 3]);
}
