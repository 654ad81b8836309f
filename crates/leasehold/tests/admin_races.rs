//! Operator commands racing the nodes that write the same records. A store wrapper lets a
//! rival write a record just before the command's own conditional write of it, a set number
//! of times, so every retry path runs the same way each time, and each conflict comes from
//! the store's own compare-and-set.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use async_trait::async_trait;
use leasehold::admin::{self, AdminError, Destroy};
use leasehold::{
    unix_ms_now, Epoch, GroupName, GroupRecord, LeaseMode, LeaseRecord, LeaseState, LeaseStore,
    LeaseWrite, Listing, MemberRecord, MemoryStore, NodeId, PartitionId, PutMode, RecordKey,
    StoreError, StoredGroup, StoredLease, StoredMember, TxnWrite, Version,
};

/// Past this many attempts at one kind of record, a command is taken to retry without bound.
const RUNAWAY_ATTEMPTS: u32 = 1_000;

/// A [`MemoryStore`] in which a rival beats the caller to its next conditional writes.
#[derive(Debug, Default)]
struct RacedStore {
    inner: MemoryStore,
    /// Lease writes and deletes still to be preceded by a rival's write of the same record.
    lease_races: AtomicU32,
    /// The same for member records.
    member_races: AtomicU32,
    /// The same for the group record.
    group_races: AtomicU32,
    /// Whether the rival of a lease write acquires it at the next epoch, as a node taking the
    /// partition would, rather than renewing it.
    rival_takes: AtomicBool,
    /// A rival building the group out (`init` with this many partitions) right after the
    /// caller's next read of the group record.
    rival_init: std::sync::Mutex<Option<u32>>,
    /// A node registering (its member record created) at the caller's next listing of the
    /// lease table: after `destroy` deleted the member records it listed.
    rival_join: std::sync::Mutex<Option<NodeId>>,
    /// The version that node's record was created at.
    joined: std::sync::Mutex<Option<Version>>,
    lease_attempts: AtomicU32,
    member_attempts: AtomicU32,
    group_attempts: AtomicU32,
    /// Lease records deleted one by one, and batches of deletes.
    single_deletes: AtomicU32,
    delete_batches: AtomicU32,
}

impl RacedStore {
    fn race_leases(&self, count: u32) {
        self.lease_races.store(count, Ordering::SeqCst);
    }

    fn race_members(&self, count: u32) {
        self.member_races.store(count, Ordering::SeqCst);
    }

    fn race_groups(&self, count: u32) {
        self.group_races.store(count, Ordering::SeqCst);
    }

    /// Counts an attempt, and says whether a rival writes first.
    fn attempt(attempts: &AtomicU32, races: &AtomicU32) -> bool {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(
            attempt <= RUNAWAY_ATTEMPTS,
            "{attempt} attempts: retried without bound"
        );
        races
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok()
    }

    async fn rival_lease(&self, group: &GroupName, partition: PartitionId) {
        let current = self.inner.get_lease(group, partition).await.unwrap();
        let current = current.expect("the rival writes an existing lease record");
        let mut record = current.value;
        if self.rival_takes.load(Ordering::SeqCst) {
            record.owner = Some(node("rival"));
            record.epoch = record.epoch.next();
            record.state = LeaseState::Held;
        }
        record.written_at_unix_ms = Some(unix_ms_now());
        let mode = PutMode::Update(current.version);
        self.inner
            .put_lease(group, partition, &record, mode)
            .await
            .unwrap();
    }

    /// A heartbeat of an existing member, or another operator's nudge creating the
    /// operator's record.
    async fn rival_member(&self, group: &GroupName, member: &NodeId) {
        let (record, mode) = match self.inner.get_member(group, member).await.unwrap() {
            Some(current) => {
                let record = MemberRecord {
                    heartbeat: current.value.heartbeat + 1,
                    ..current.value
                };
                (record, PutMode::Update(current.version))
            }
            None => {
                let record = MemberRecord {
                    weight: 0,
                    draining: true,
                    heartbeat: 1,
                    ..MemberRecord::default()
                };
                (record, PutMode::Create)
            }
        };
        self.inner
            .put_member(group, member, &record, mode)
            .await
            .unwrap();
    }

    /// A delete of a lease record, after a rival's write of it while races are left.
    async fn delete_raced(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        if Self::attempt(&self.lease_attempts, &self.lease_races) {
            self.rival_lease(group, partition).await;
        }
        self.inner.delete_lease(group, partition, version).await
    }

    /// Another operator raising the epoch floor by one.
    async fn rival_group(&self, group: &GroupName) {
        let current = self.inner.get_group(group).await.unwrap();
        let current = current.expect("the rival writes an existing group record");
        let record = GroupRecord {
            epoch_floor: current.value.epoch_floor.next(),
            ..current.value
        };
        let mode = PutMode::Update(current.version);
        self.inner.put_group(group, &record, mode).await.unwrap();
    }
}

#[async_trait]
impl LeaseStore for RacedStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let joining = self.rival_join.lock().unwrap().take();
        if let Some(joiner) = joining {
            let record = MemberRecord::default();
            let put = self
                .inner
                .put_member(group, &joiner, &record, PutMode::Create);
            *self.joined.lock().unwrap() = Some(put.await.unwrap());
        }
        self.inner.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.inner.get_lease(group, partition).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        if Self::attempt(&self.lease_attempts, &self.lease_races) {
            self.rival_lease(group, partition).await;
        }
        self.inner.put_lease(group, partition, record, mode).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.inner.put_leases(group, writes).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.single_deletes.fetch_add(1, Ordering::SeqCst);
        self.delete_raced(group, partition, version).await
    }

    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.delete_batches.fetch_add(1, Ordering::SeqCst);
        let mut results = Vec::with_capacity(deletes.len());
        for (partition, version) in deletes {
            results.push(self.delete_raced(group, *partition, version).await);
        }
        Ok(results)
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.inner.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.inner.get_member(group, node).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        if Self::attempt(&self.member_attempts, &self.member_races) {
            self.rival_member(group, node).await;
        }
        self.inner.put_member(group, node, record, mode).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        if Self::attempt(&self.member_attempts, &self.member_races) {
            self.rival_member(group, node).await;
        }
        self.inner.delete_member(group, node, version).await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        self.inner.transact(group, writes).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let read = self.inner.get_group(group).await;
        let rival = self.rival_init.lock().unwrap().take();
        if let Some(partitions) = rival {
            // The read is answered as it was; the rival's build-out lands right after it.
            admin::init(&self.inner, group, partitions).await.unwrap();
        }
        read
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        if Self::attempt(&self.group_attempts, &self.group_races) {
            self.rival_group(group).await;
        }
        self.inner.put_group(group, record, mode).await
    }
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn orders() -> GroupName {
    GroupName::new("orders").unwrap()
}

/// A group of `partitions` released partitions, with partition 2 (if any) held by `holder`
/// at epoch 3, and no attempt counted yet.
async fn group_with(partitions: u32) -> RacedStore {
    let store = RacedStore::default();
    let group = orders();
    admin::init(&store, &group, partitions).await.unwrap();
    if partitions > 2 {
        let held = LeaseRecord {
            owner: Some(node("holder")),
            epoch: Epoch(3),
            state: LeaseState::Held,
            ..LeaseRecord::released()
        };
        set_lease(&store, PartitionId(2), held).await;
    }
    store.lease_attempts.store(0, Ordering::SeqCst);
    store
}

/// Writes a lease record as it is, past the races.
async fn set_lease(store: &RacedStore, partition: PartitionId, record: LeaseRecord) {
    let group = orders();
    let current = store.inner.get_lease(&group, partition).await.unwrap();
    let mode = PutMode::Update(current.unwrap().version);
    let put = store.inner.put_lease(&group, partition, &record, mode);
    put.await.unwrap();
}

/// Registers `member` as a node would, past the races.
async fn add_member(store: &RacedStore, member: &NodeId) {
    let (group, record) = (orders(), MemberRecord::default());
    let put = store
        .inner
        .put_member(&group, member, &record, PutMode::Create);
    put.await.unwrap();
}

async fn lease(store: &RacedStore, partition: PartitionId) -> LeaseRecord {
    let stored = store.inner.get_lease(&orders(), partition).await.unwrap();
    stored.expect("the lease record exists").value
}

/// Asserts that `result` gave up on `key`, and that its message names the record and as many
/// attempts as `attempts` counted.
fn assert_contended<T: std::fmt::Debug>(
    result: Result<T, AdminError>,
    key: RecordKey,
    attempts: &AtomicU32,
) -> u32 {
    let attempts = attempts.load(Ordering::SeqCst);
    let error = result.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, AdminError::Contended { key: named } if *named == key),
        "{error:?}"
    );
    assert_eq!(
        message,
        format!("{key} kept changing; gave up after {attempts} attempts")
    );
    assert!(attempts > 1, "gave up without retrying");
    attempts
}

/// A holder renews partition 2 before each of the command's first three writes; the fourth
/// goes through, on top of the holder's last renewal.
///
/// Fails if `update_lease` gives up at a conflict instead of reading the record again and
/// retrying.
#[tokio::test]
async fn an_operator_change_retries_past_renewals() {
    let store = group_with(4).await;
    let group = orders();
    store.race_leases(3);
    let written = admin::prohibit(&store, &group, PartitionId(2), &node("bad"))
        .await
        .unwrap();
    assert_eq!(store.lease_attempts.load(Ordering::SeqCst), 4);
    assert_eq!(written.prohibited, vec![node("bad")]);
    assert_eq!(
        (written.owner, written.epoch),
        (Some(node("holder")), Epoch(3)),
        "the holder's tenure is kept: only its renewals raced"
    );
    let stored = lease(&store, PartitionId(2)).await;
    assert_eq!(stored.prohibited, vec![node("bad")]);
    assert_eq!(stored.note.as_deref(), Some("prohibited bad"));
    let operator = store.inner.get_member(&group, &NodeId::operator()).await;
    assert!(
        operator.unwrap().is_some(),
        "the change nudged settled nodes"
    );
}

/// A holder renews partition 2 before every write of the command: it gives up, naming the
/// record and how many attempts it made, and leaves the record as the holder wrote it. With
/// one conflict fewer, the same command succeeds on its last attempt.
///
/// Fails if `update_lease` retries without bound, names another record, or makes fewer
/// attempts than its error says.
#[tokio::test]
async fn an_operator_change_gives_up_naming_the_lease_that_kept_changing() {
    let store = group_with(4).await;
    let group = orders();
    store.race_leases(u32::MAX);
    let refused = admin::prohibit(&store, &group, PartitionId(2), &node("bad")).await;
    let attempts = assert_contended(
        refused,
        RecordKey::Lease(PartitionId(2)),
        &store.lease_attempts,
    );
    assert!(lease(&store, PartitionId(2)).await.prohibited.is_empty());

    store.lease_attempts.store(0, Ordering::SeqCst);
    store.race_leases(attempts - 1);
    admin::prohibit(&store, &group, PartitionId(2), &node("bad"))
        .await
        .unwrap();
    assert_eq!(store.lease_attempts.load(Ordering::SeqCst), attempts);
}

/// The node heartbeats before each of the command's first three writes of its member
/// record; the fourth sets the drain flag on the node's latest record.
///
/// Fails if `set_draining` gives up at a conflict instead of reading the record again and
/// retrying.
#[tokio::test]
async fn a_drain_retries_past_heartbeats() {
    let store = group_with(1).await;
    let group = orders();
    let server = node("server-1");
    add_member(&store, &server).await;
    store.race_members(3);
    let written = admin::set_draining(&store, &group, &server, true)
        .await
        .unwrap();
    assert_eq!(store.member_attempts.load(Ordering::SeqCst), 4);
    assert!(written.draining);
    assert_eq!(written.heartbeat, 3, "written over the third heartbeat");
    let stored = store.inner.get_member(&group, &server).await.unwrap();
    assert!(stored.unwrap().value.draining);
}

/// The node heartbeats before every write of the command: it gives up naming the member,
/// and the node is not marked draining.
///
/// Fails if `set_draining` retries without bound, names another record, or makes fewer
/// attempts than its error says.
#[tokio::test]
async fn a_drain_gives_up_naming_the_member_that_kept_changing() {
    let store = group_with(1).await;
    let group = orders();
    let server = node("server-1");
    add_member(&store, &server).await;
    store.race_members(u32::MAX);
    let refused = admin::set_draining(&store, &group, &server, true).await;
    assert_contended(
        refused,
        RecordKey::Member(server.clone()),
        &store.member_attempts,
    );
    let stored = store.inner.get_member(&group, &server).await.unwrap();
    assert!(!stored.unwrap().value.draining);
}

/// Another command's nudge gets in first, once creating the operator's record and once
/// rewriting it: either way the nudge has been made, so it succeeds without another write,
/// and so does the lease change that nudges.
///
/// Fails if `nudge` reports a lost race (`AlreadyExists` or `Conflict`) as an error, or
/// retries it.
#[tokio::test]
async fn a_nudge_that_loses_to_another_succeeds() {
    let store = group_with(4).await;
    let group = orders();
    async fn heartbeat(store: &RacedStore) -> u64 {
        let operator = store.inner.get_member(&orders(), &NodeId::operator()).await;
        operator
            .unwrap()
            .expect("the operator's record")
            .value
            .heartbeat
    }

    store.race_members(1);
    admin::nudge(&store, &group).await.unwrap();
    assert_eq!(store.member_attempts.load(Ordering::SeqCst), 1);
    assert_eq!(heartbeat(&store).await, 1, "the rival's record stands");

    store.race_members(1);
    admin::nudge(&store, &group).await.unwrap();
    assert_eq!(store.member_attempts.load(Ordering::SeqCst), 2);
    assert_eq!(heartbeat(&store).await, 2, "the rival's rewrite stands");

    store.race_members(1);
    admin::kick(&store, &group, PartitionId(2)).await.unwrap();
    assert_eq!(store.member_attempts.load(Ordering::SeqCst), 3);
    assert_eq!(
        lease(&store, PartitionId(2)).await.note.as_deref(),
        Some("kicked")
    );
}

/// Another operator raises the epoch floor before each of the first three writes of the
/// group record; the fourth raises it to the floor asked for. With a rival before every
/// write, the command gives up naming the group record.
///
/// Fails if the group record's update gives up at a conflict instead of reading the record
/// again and retrying, retries without bound, or makes fewer attempts than its error says.
#[tokio::test]
async fn a_group_record_change_retries_past_other_writers_and_then_gives_up() {
    let store = group_with(1).await;
    let group = orders();
    store.group_attempts.store(0, Ordering::SeqCst);
    store.race_groups(3);
    let written = admin::raise_epoch_floor(&store, &group, Epoch(20))
        .await
        .unwrap();
    assert_eq!(store.group_attempts.load(Ordering::SeqCst), 4);
    assert_eq!(written.epoch_floor, Epoch(20));
    let stored = store.inner.get_group(&group).await.unwrap().unwrap();
    assert_eq!(stored.value.epoch_floor, Epoch(20));

    store.group_attempts.store(0, Ordering::SeqCst);
    store.race_groups(u32::MAX);
    let refused = admin::raise_epoch_floor(&store, &group, Epoch(10_000)).await;
    let attempts = assert_contended(refused, RecordKey::Group, &store.group_attempts);
    let stored = store.inner.get_group(&group).await.unwrap().unwrap();
    assert_eq!(
        stored.value.epoch_floor,
        Epoch(20 + u64::from(attempts)),
        "only the rival's raises landed"
    );
}

/// A node takes partition 0 at epoch 8 between `destroy`'s listing (highest epoch 7) and its
/// delete: the delete conflicts, and the record deleted on the retry carries epoch 8, so the
/// floor must be 8 and a group built again must start there.
///
/// Fails if `destroy` raises the floor only to the highest epoch of its listing, not to the
/// epoch of the record it actually deleted.
#[tokio::test]
async fn destroy_raises_the_floor_to_an_epoch_taken_after_its_listing() {
    let store = group_with(2).await;
    let group = orders();
    let held = LeaseRecord {
        owner: Some(node("holder")),
        epoch: Epoch(7),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    };
    set_lease(&store, PartitionId(0), held).await;
    store.rival_takes.store(true, Ordering::SeqCst);
    store.race_leases(1);
    assert_eq!(
        admin::destroy(&store, &group, Destroy::Force)
            .await
            .unwrap(),
        2
    );
    assert_eq!(store.inner.lease_count(), 0);
    let kept = store.inner.get_group(&group).await.unwrap().unwrap();
    assert_eq!(kept.value.epoch_floor, Epoch(8));
    admin::init(&store, &group, 2).await.unwrap();
    let rebuilt = store.inner.list_leases(&group).await.unwrap();
    assert!(rebuilt.records.iter().all(|r| r.value.epoch == Epoch(8)));
}

/// Nodes take partition 0 again before every delete: `destroy` gives up naming it, and the
/// record is still there.
///
/// Fails if `destroy` retries a delete without bound, names another record, or makes fewer
/// attempts than its error says.
#[tokio::test]
async fn destroy_gives_up_on_a_lease_that_kept_changing() {
    // One partition: every attempt counted is on the record the error names.
    let store = group_with(1).await;
    let group = orders();
    store.rival_takes.store(true, Ordering::SeqCst);
    store.race_leases(u32::MAX);
    let refused = admin::destroy(&store, &group, Destroy::Force).await;
    assert_contended(
        refused,
        RecordKey::Lease(PartitionId(0)),
        &store.lease_attempts,
    );
    let left = lease(&store, PartitionId(0)).await;
    assert_eq!(left.owner, Some(node("rival")));
}

/// Fails if a node building out a new group alongside another takes the other's fresh
/// records for a group whose record was deleted: it read the group record missing just
/// before the other created it and its records, and must read it again rather than refuse
/// the group as `MissingRecord`.
#[tokio::test]
async fn two_build_outs_of_a_new_group_at_once_both_succeed() {
    let store = RacedStore::default();
    let group = orders();
    *store.rival_init.lock().unwrap() = Some(4);
    let outcome = admin::init(&store, &group, 4).await.unwrap();
    assert_eq!((outcome.created, outcome.existing), (0, 4));
    assert!(store.inner.get_group(&group).await.unwrap().is_some());
}

/// A node registers after `destroy` deleted the member records and takes partition 2 by
/// session: the forced destroy takes that record offline together with the node's session
/// (so the node's next renewal fails and it stops serving) before deleting it, one at a
/// time; the other records go in a batch. Progress counts every record.
///
/// Fails if a record held by session is deleted alone (its holder would keep serving
/// under a session nothing ended, while the group is built again), if records held by
/// nobody are deleted one by one, or if the count or the progress leaves records out.
#[tokio::test]
async fn a_forced_destroy_by_session_ends_the_session_of_a_node_that_joined_during_it() {
    let store = RacedStore::default();
    let group = orders();
    let template = GroupRecord {
        lease_mode: LeaseMode::Session,
        ..GroupRecord::default()
    };
    admin::ensure_group_as(&store, &group, &template)
        .await
        .unwrap();
    admin::init(&store, &group, 4).await.unwrap();
    let joiner = node("joiner");
    let held = LeaseRecord {
        owner: Some(joiner.clone()),
        epoch: Epoch(3),
        state: LeaseState::Held,
        ..LeaseRecord::released()
    };
    set_lease(&store, PartitionId(2), held).await;
    *store.rival_join.lock().unwrap() = Some(joiner.clone());
    let mut progress = Vec::new();
    let removed = admin::destroy_with_progress(&store, &group, Destroy::Force, &mut |d, t| {
        progress.push((d, t))
    })
    .await
    .unwrap();
    assert_eq!(removed, 4);
    assert_eq!(store.inner.lease_count(), 0);
    assert_eq!(progress.first(), Some(&(0, 4)));
    assert_eq!(progress.last(), Some(&(4, 4)));
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "{progress:?}"
    );
    assert_eq!(store.single_deletes.load(Ordering::SeqCst), 1);
    assert_eq!(store.delete_batches.load(Ordering::SeqCst), 1);
    // The joiner's record was written with the hold's end: a renewal at the version it
    // registered with fails.
    let session = store.inner.get_member(&group, &joiner).await.unwrap();
    let session = session.expect("the joiner's record stays");
    let registered = store.joined.lock().unwrap().clone().unwrap();
    assert_ne!(session.version, registered);
    let renewal =
        store
            .inner
            .put_member(&group, &joiner, &session.value, PutMode::Update(registered));
    assert!(matches!(renewal.await, Err(StoreError::Conflict { .. })));
}

/// The node heartbeats before every delete of its member record: a forced destroy gives up
/// naming it, and the record is still there.
///
/// Fails if `destroy` retries a member delete without bound, or makes more attempts than
/// its error says.
#[tokio::test]
async fn destroy_gives_up_on_a_member_record_that_kept_changing() {
    let store = group_with(1).await;
    let group = orders();
    let server = node("server-1");
    add_member(&store, &server).await;
    store.race_members(u32::MAX);
    let refused = admin::destroy(&store, &group, Destroy::Force).await;
    assert_contended(
        refused,
        RecordKey::Member(server.clone()),
        &store.member_attempts,
    );
    let stored = store.inner.get_member(&group, &server).await.unwrap();
    assert!(stored.is_some());
}
