//! A check of the conformance suite on change hints: what each names.

use std::sync::Arc;

use crate::error::StoreError;
use crate::record::{LeaseState, MemberRecord};
use crate::store::{LeaseStore, PutMode};
use crate::types::PartitionId;

use super::checks::{create, held_by, node};
use super::unique_group;

/// The next hint of `feed`; panics if none comes within 10 s or the feed has ended.
pub async fn next_hint(feed: &mut crate::store::ChangeFeed) -> crate::store::Change {
    tokio::time::timeout(std::time::Duration::from_secs(10), feed.next())
        .await
        .expect("a change hint within 10 s")
        .expect("the feed is still open")
}

/// Change hints, where the store offers them (a store without them must say
/// `NotSupported`): each lease and member write in the group is reported, naming what
/// changed, and writes in other groups and of the group record are not. A hint may be coarse (`Lease(p)`, `Member(n)`) but never wrong: a
/// `LeaseWritten` carries the state written, and `MemberUpdated` only follows a rewrite of
/// an existing member.
pub async fn change_hints_name_what_changed(store: Arc<dyn LeaseStore>) {
    use crate::store::Change;
    let group = unique_group("hints");
    let other = unique_group("hints-other");
    let mut feed = match store.watch(&group).await {
        Ok(feed) => feed,
        Err(StoreError::NotSupported(_)) => {
            println!("change hints: not offered by this store (readers poll)");
            return;
        }
        Err(error) => panic!("watch failed: {error}"),
    };
    let lease_hint = |change: &Change, partition: u32, state: LeaseState| match change {
        Change::Lease(p) => *p == PartitionId(partition),
        Change::LeaseWritten {
            partition: p,
            state: s,
        } => *p == PartitionId(partition) && *s == state,
        _ => false,
    };

    create(&*store, &other, 1).await;
    // Nodes read the group record when they join, not at a scan: its writes are no hint.
    let record = crate::group::GroupRecord::default();
    let version = store
        .put_group(&group, &record, PutMode::Create)
        .await
        .expect("create the group record");
    store
        .put_group(&group, &record, PutMode::Update(version))
        .await
        .expect("update the group record");
    let v1 = create(&*store, &group, 7).await;
    let hint = next_hint(&mut feed).await;
    assert!(
        lease_hint(&hint, 7, LeaseState::Released),
        "create of 7 in the group, the group record's writes unreported: {hint:?}"
    );
    let v2 = store
        .put_lease(
            &group,
            PartitionId(7),
            &held_by("n1", 1),
            PutMode::Update(v1),
        )
        .await
        .expect("update");
    let hint = next_hint(&mut feed).await;
    assert!(
        lease_hint(&hint, 7, LeaseState::Held),
        "update of 7: {hint:?}"
    );

    let member = node("node-1");
    let created = store
        .put_member(&group, &member, &MemberRecord::default(), PutMode::Create)
        .await
        .expect("create member");
    let hint = next_hint(&mut feed).await;
    assert_eq!(
        hint,
        Change::Member(member.clone()),
        "a join is never reported as a rewrite"
    );
    store
        .put_member(
            &group,
            &member,
            &MemberRecord::default(),
            PutMode::Update(created),
        )
        .await
        .expect("rewrite member");
    let hint = next_hint(&mut feed).await;
    assert!(
        matches!(&hint, Change::MemberUpdated(n) | Change::Member(n) if *n == member),
        "member rewrite: {hint:?}"
    );

    store
        .delete_lease(&group, PartitionId(7), &v2)
        .await
        .expect("delete");
    let hint = next_hint(&mut feed).await;
    assert_eq!(
        hint,
        Change::Lease(PartitionId(7)),
        "a delete has no state to report"
    );
}
