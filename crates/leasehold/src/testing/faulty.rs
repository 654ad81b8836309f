//! A store wrapper that injects faults on demand and counts calls: for tests of how
//! participants behave when a store hangs, loses replies or throttles.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc::error::TrySendError;

use crate::error::StoreError;
use crate::group::{GroupRecord, StoredGroup};
use crate::record::{LeaseRecord, MemberRecord, StoredLease, StoredMember};
use crate::store::{ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode};
use crate::types::{GroupName, NodeId, PartitionId, Version};

/// Wraps a store and, when told to:
/// - hangs every call, as a partitioned network would ([`FaultyStore::set_hung`]);
/// - applies batch writes but loses their replies, answering a time-out
///   ([`FaultyStore::lose_batch_replies`]), and member writes likewise
///   ([`FaultyStore::lose_member_replies`]);
/// - loses batch writes on the way in, answering a time-out without applying them
///   ([`FaultyStore::drop_batches`]);
/// - answers batch writes with a time-out at once and applies them only later, as a write
///   queued behind a lock or a slow server does after its caller gave up
///   ([`FaultyStore::land_batches_late`]);
/// - fails every listing with [`StoreError::Throttled`], as an overloaded service answers
///   HTTP 429/503, while writes go through ([`FaultyStore::set_reads_throttled`]), and
///   single lease reads too ([`FaultyStore::set_lease_reads_throttled`]);
/// - offers no change notices, so participants poll ([`FaultyStore::turn_notices_off`]),
///   or ends the feeds it has handed out, as a dropped listener connection does
///   ([`FaultyStore::end_feeds`]);
/// - rewrites a member record just before deleting it, as a node renewing at that moment
///   would ([`FaultyStore::renew_before_member_deletes`]);
/// - answers every call only after a delay, as a distant or busy store does
///   ([`FaultyStore::set_latency`]);
/// - applies member writes and deletes at once but answers them only after a delay, as a
///   reply held up on its way back does ([`FaultyStore::set_member_reply_delay`]), and
///   lease batch writes and transactions likewise ([`FaultyStore::set_batch_reply_delay`]).
///
/// Counts the reads attempted (lease listings, member listings, single-record reads) and the
/// batch writes made, throttled or failed ones included: a test bounds how hard a participant
/// leans on a store that is refusing it.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn LeaseStore>,
    hung: AtomicBool,
    lost_replies: AtomicU32,
    lost_member_replies: AtomicU32,
    dropped_batches: AtomicU32,
    late_batches: AtomicU32,
    late_batch_delay_ns: AtomicU64,
    reads_throttled: AtomicBool,
    lease_reads_throttled: AtomicBool,
    listings: AtomicU64,
    member_listings: AtomicU64,
    member_deletes: AtomicU64,
    record_reads: AtomicU64,
    batches: AtomicU64,
    notices_off: AtomicBool,
    failing_watches: AtomicU32,
    watches: AtomicU64,
    feeds_ended: tokio::sync::watch::Sender<u64>,
    renewals_before_deletes: AtomicU32,
    renewals_before_transactions: AtomicU32,
    rewrites_before_batches: AtomicU32,
    latency_ns: AtomicU64,
    member_reply_delay_ns: AtomicU64,
    batch_reply_delay_ns: AtomicU64,
}

impl FaultyStore {
    /// Wraps `inner`, injecting nothing yet.
    pub fn new(inner: Arc<dyn LeaseStore>) -> FaultyStore {
        FaultyStore {
            inner,
            hung: AtomicBool::new(false),
            lost_replies: AtomicU32::new(0),
            lost_member_replies: AtomicU32::new(0),
            dropped_batches: AtomicU32::new(0),
            late_batches: AtomicU32::new(0),
            late_batch_delay_ns: AtomicU64::new(0),
            reads_throttled: AtomicBool::new(false),
            lease_reads_throttled: AtomicBool::new(false),
            listings: AtomicU64::new(0),
            member_listings: AtomicU64::new(0),
            member_deletes: AtomicU64::new(0),
            record_reads: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            notices_off: AtomicBool::new(false),
            failing_watches: AtomicU32::new(0),
            watches: AtomicU64::new(0),
            feeds_ended: tokio::sync::watch::Sender::new(0),
            renewals_before_deletes: AtomicU32::new(0),
            renewals_before_transactions: AtomicU32::new(0),
            rewrites_before_batches: AtomicU32::new(0),
            latency_ns: AtomicU64::new(0),
            member_reply_delay_ns: AtomicU64::new(0),
            batch_reply_delay_ns: AtomicU64::new(0),
        }
    }

    /// Each of the next `count` member deletes first rewrites the record as it stands, so
    /// the delete finds it at a newer version than the caller read: a running node's renewal
    /// racing an operator's delete.
    pub fn renew_before_member_deletes(&self, count: u32) {
        self.renewals_before_deletes.store(count, Ordering::SeqCst);
    }

    /// Each of the next `count` transactions first rewrites, as they stand, the member
    /// records it writes, so that its condition on them fails: the member's own renewal
    /// racing a write made together with its record.
    pub fn renew_before_transactions(&self, count: u32) {
        self.renewals_before_transactions
            .store(count, Ordering::SeqCst);
    }

    /// Transactions still to be preceded by a renewal (see
    /// [`FaultyStore::renew_before_transactions`]).
    pub fn renewals_before_transactions_left(&self) -> u32 {
        self.renewals_before_transactions.load(Ordering::SeqCst)
    }

    /// Each of the next `count` batches of lease writes first rewrites, as they stand, the
    /// records it writes, so that every write of the batch finds its record at a newer
    /// version than the caller read: another node's writes landing first, a lost race.
    pub fn rewrite_before_batches(&self, count: u32) {
        self.rewrites_before_batches.store(count, Ordering::SeqCst);
    }

    /// Rewrites `node`'s member record as it stands, if there is one: a renewal.
    async fn renew_member(&self, group: &GroupName, node: &NodeId) -> Result<(), StoreError> {
        if let Some(current) = self.inner.get_member(group, node).await? {
            let mode = PutMode::Update(current.version);
            self.inner
                .put_member(group, node, &current.value, mode)
                .await?;
        }
        Ok(())
    }

    /// Delays every call from now on by `latency` before it reaches the store.
    pub fn set_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.store(nanos, Ordering::SeqCst);
    }

    /// Applies every member write and delete from now on at once, and answers it `delay`
    /// later: the writer learns of its own write only after whatever it does meanwhile.
    pub fn set_member_reply_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.member_reply_delay_ns.store(nanos, Ordering::SeqCst);
    }

    /// Applies every lease batch write and transaction from now on at once, and answers it
    /// `delay` later.
    pub fn set_batch_reply_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.batch_reply_delay_ns.store(nanos, Ordering::SeqCst);
    }

    /// Makes every call from now on hang until this is turned off again.
    pub fn set_hung(&self, hung: bool) {
        self.hung.store(hung, Ordering::SeqCst);
    }

    /// The next `count` batch writes are applied, but answer [`StoreError::Timeout`].
    pub fn lose_batch_replies(&self, count: u32) {
        self.lost_replies.store(count, Ordering::SeqCst);
    }

    /// The next `count` batch writes never reach the store, and answer
    /// [`StoreError::Timeout`].
    pub fn drop_batches(&self, count: u32) {
        self.dropped_batches.store(count, Ordering::SeqCst);
    }

    /// The next `count` batch writes answer [`StoreError::Timeout`] at once and are applied
    /// `delay` later, after a caller reading the records back at once would have read them.
    pub fn land_batches_late(&self, count: u32, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.late_batch_delay_ns.store(nanos, Ordering::SeqCst);
        self.late_batches.store(count, Ordering::SeqCst);
    }

    /// The next `count` member record writes are applied, but answer
    /// [`StoreError::Timeout`]: a renewal whose reply never came back.
    pub fn lose_member_replies(&self, count: u32) {
        self.lost_member_replies.store(count, Ordering::SeqCst);
    }

    /// Member write replies still to be lost.
    pub fn member_replies_left_to_lose(&self) -> u32 {
        self.lost_member_replies.load(Ordering::SeqCst)
    }

    /// Batch replies still to be lost.
    pub fn replies_left_to_lose(&self) -> u32 {
        self.lost_replies.load(Ordering::SeqCst)
    }

    /// Starts or stops throttling listings.
    pub fn set_reads_throttled(&self, throttled: bool) {
        self.reads_throttled.store(throttled, Ordering::SeqCst);
    }

    /// Fails every read of a single lease record with [`StoreError::Throttled`] from now on,
    /// until this is turned off again; member reads and writes go through.
    pub fn set_lease_reads_throttled(&self, throttled: bool) {
        self.lease_reads_throttled
            .store(throttled, Ordering::SeqCst);
    }

    /// Answers [`LeaseStore::watch`] with [`StoreError::NotSupported`] from now on, so
    /// participants started afterwards learn of changes only by polling.
    pub fn turn_notices_off(&self) {
        self.notices_off.store(true, Ordering::SeqCst);
    }

    /// Answers the next `count` calls of [`LeaseStore::watch`] with
    /// [`StoreError::Unavailable`]: a store whose notices are down for a while.
    pub fn fail_watches(&self, count: u32) {
        self.failing_watches.store(count, Ordering::SeqCst);
    }

    /// Ends every change feed handed out so far: each answers `None` once the notices
    /// already waiting in it are read. Feeds asked for afterwards work as usual.
    pub fn end_feeds(&self) {
        self.feeds_ended.send_modify(|ended| *ended += 1);
    }

    /// Calls of [`LeaseStore::watch`] so far, failed or not.
    pub fn watches(&self) -> u64 {
        self.watches.load(Ordering::SeqCst)
    }

    /// Lease listings attempted so far (throttled or not).
    pub fn listings(&self) -> u64 {
        self.listings.load(Ordering::SeqCst)
    }

    /// Member listings attempted so far (throttled or not).
    pub fn member_listings(&self) -> u64 {
        self.member_listings.load(Ordering::SeqCst)
    }

    /// Deletes of member records attempted so far.
    pub fn member_deletes(&self) -> u64 {
        self.member_deletes.load(Ordering::SeqCst)
    }

    /// Reads of one lease, member or group record attempted so far.
    pub fn record_reads(&self) -> u64 {
        self.record_reads.load(Ordering::SeqCst)
    }

    /// Every read attempted so far: lease and member listings and single-record reads.
    pub fn reads(&self) -> u64 {
        self.listings() + self.member_listings() + self.record_reads()
    }

    /// Batch writes (renewals, acquisitions, releases) attempted so far.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    async fn gate(&self) {
        let latency = self.latency_ns.load(Ordering::SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_nanos(latency)).await;
        }
        while self.hung.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Holds a reply back for the delay `nanos` holds, if any.
    async fn linger(nanos: &AtomicU64) {
        let delay = nanos.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_nanos(delay)).await;
        }
    }

    async fn read_gate(&self) -> Result<(), StoreError> {
        self.gate().await;
        if self.reads_throttled.load(Ordering::SeqCst) {
            return Err(StoreError::Throttled {
                message: "server busy (injected)".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.read_gate().await?;
        self.inner.list_leases(group).await
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.record_reads.fetch_add(1, Ordering::SeqCst);
        self.gate().await;
        if self.lease_reads_throttled.load(Ordering::SeqCst) {
            return Err(StoreError::Throttled {
                message: "server busy (injected)".into(),
            });
        }
        self.inner.get_lease(group, partition).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.gate().await;
        self.inner.put_lease(group, partition, record, mode).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.gate().await;
        if take_one(&self.dropped_batches) {
            return Err(StoreError::Timeout(Duration::from_millis(250)));
        }
        if take_one(&self.late_batches) {
            let delay = Duration::from_nanos(self.late_batch_delay_ns.load(Ordering::SeqCst));
            let (inner, group, writes) = (Arc::clone(&self.inner), group.clone(), writes.to_vec());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = inner.put_leases(&group, &writes).await;
            });
            return Err(StoreError::Timeout(Duration::from_millis(250)));
        }
        if take_one(&self.rewrites_before_batches) {
            for write in writes {
                if let Some(current) = self.inner.get_lease(group, write.partition).await? {
                    let mode = PutMode::Update(current.version);
                    self.inner
                        .put_lease(group, write.partition, &current.value, mode)
                        .await?;
                }
            }
        }
        let results = self.inner.put_leases(group, writes).await;
        if take_one(&self.lost_replies) {
            return Err(StoreError::Timeout(Duration::from_millis(250)));
        }
        Self::linger(&self.batch_reply_delay_ns).await;
        results
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.gate().await;
        self.inner.delete_lease(group, partition, version).await
    }

    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.gate().await;
        self.inner.delete_leases(group, deletes).await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[crate::store::TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        self.gate().await;
        let renew = take_one(&self.renewals_before_transactions);
        if renew {
            for write in writes {
                if let crate::store::TxnWrite::Member { node, .. } = write {
                    self.renew_member(group, node).await?;
                }
            }
        }
        let results = self.inner.transact(group, writes).await;
        Self::linger(&self.batch_reply_delay_ns).await;
        results
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.record_reads.fetch_add(1, Ordering::SeqCst);
        self.gate().await;
        self.inner.get_group(group).await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.gate().await;
        self.inner.put_group(group, record, mode).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        self.member_listings.fetch_add(1, Ordering::SeqCst);
        self.read_gate().await?;
        self.inner.list_members(group).await
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.record_reads.fetch_add(1, Ordering::SeqCst);
        self.gate().await;
        self.inner.get_member(group, node).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.gate().await;
        let reply = self.inner.put_member(group, node, record, mode).await;
        if reply.is_ok() && take_one(&self.lost_member_replies) {
            return Err(StoreError::Timeout(Duration::from_millis(250)));
        }
        Self::linger(&self.member_reply_delay_ns).await;
        reply
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.member_deletes.fetch_add(1, Ordering::SeqCst);
        self.gate().await;
        let renew = take_one(&self.renewals_before_deletes);
        if renew {
            self.renew_member(group, node).await?;
        }
        let reply = self.inner.delete_member(group, node, version).await;
        Self::linger(&self.member_reply_delay_ns).await;
        reply
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        if self.notices_off.load(Ordering::SeqCst) {
            return Err(StoreError::NotSupported("change notices turned off"));
        }
        if take_one(&self.failing_watches) {
            return Err(StoreError::Unavailable {
                message: "change notices unavailable".into(),
                source: None,
            });
        }
        let mut inner = self.inner.watch(group).await?;
        // Ends already sent count as seen: only a later one ends this feed.
        let mut ended = self.feeds_ended.subscribe();
        let (sender, receiver) = tokio::sync::mpsc::channel(ChangeFeed::CAPACITY);
        let forward = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = ended.changed() => return,
                    change = inner.next() => match change {
                        // Full, the hint is dropped, as every store's own feed does.
                        Some(change) => match sender.try_send(change) {
                            Ok(()) | Err(TrySendError::Full(_)) => {}
                            Err(TrySendError::Closed(_)) => return,
                        },
                        None => return,
                    },
                }
            }
        });
        Ok(ChangeFeed::new(receiver, Some(forward.abort_handle())))
    }
}

/// Counts one off `counter` unless it is already zero: whether a fault was left to inject.
fn take_one(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok()
}
