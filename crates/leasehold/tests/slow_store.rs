//! Renewals keep their schedule on a slow store: whatever the scans wait for, a lease is
//! renewed every heartbeat; and a take answered late is not served if the node has excluded
//! its partition meanwhile; a renewal whose reply was lost still counts as the node's own
//! when it leaves; an operator's drain survives member listings that arrive after it, and
//! listings of the table that time out. Controlled time: Tokio's clock is paused.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    admin, GroupName, GroupRecord, LeaseMode, LeaseRecord, LeaseState, LeaseStore, LeaseWrite,
    Listing, MemberRecord, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId,
    PutMode, StoreError, StoredGroup, StoredLease, StoredMember, Version,
};
use tokio::time::sleep;

/// The in-memory store, with the reply to every listing and read arriving `read_delay` after
/// the store answered it (so it may be out of date on arrival), listings of the lease table
/// `listing_delay` later still, and writes instant.
#[derive(Debug)]
struct SlowReads {
    inner: MemoryStore,
    read_delay: Duration,
    listing_delay: Mutex<Duration>,
    /// Reads of single lease records that fail before any succeeds.
    failing_gets: AtomicU32,
    /// Listings of the member records arrive this much later still.
    member_listing_delay: Duration,
    /// Set draining, by an operator, as soon as the store has answered the next listing of
    /// the member records: the listing's copy of it is old on arrival. The node's first
    /// write of its record as draining then times out without landing.
    drain_after_member_listing: Mutex<Option<NodeId>>,
    lose_draining_write: AtomicBool,
}

impl SlowReads {
    /// `inner`, answering at once.
    fn over(inner: MemoryStore) -> SlowReads {
        SlowReads {
            inner,
            read_delay: Duration::ZERO,
            listing_delay: Mutex::new(Duration::ZERO),
            failing_gets: AtomicU32::new(0),
            member_listing_delay: Duration::ZERO,
            drain_after_member_listing: Mutex::new(None),
            lose_draining_write: AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl LeaseStore for SlowReads {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let reply = self.inner.list_leases(group).await;
        let listing_delay = *self.listing_delay.lock().unwrap();
        sleep(self.read_delay + listing_delay).await;
        reply
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let failing = self.failing_gets.load(Ordering::Relaxed);
        if failing > 0 {
            self.failing_gets.store(failing - 1, Ordering::Relaxed);
            return Err(StoreError::Unavailable {
                message: "lease reads failing".into(),
                source: None,
            });
        }
        let reply = self.inner.get_lease(group, partition).await;
        sleep(self.read_delay).await;
        reply
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
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
        self.inner.delete_lease(group, partition, version).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let reply = self.inner.get_group(group).await;
        sleep(self.read_delay).await;
        reply
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        self.inner.put_group(group, record, mode).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let reply = self.inner.list_members(group).await;
        let drained = self.drain_after_member_listing.lock().unwrap().take();
        if let Some(node) = drained {
            admin::set_draining(&self.inner, group, &node, true)
                .await
                .unwrap();
            self.lose_draining_write.store(true, Ordering::SeqCst);
        }
        sleep(self.read_delay + self.member_listing_delay).await;
        reply
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let reply = self.inner.get_member(group, node).await;
        sleep(self.read_delay).await;
        reply
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        if record.draining && self.lose_draining_write.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Timeout(Duration::from_millis(250)));
        }
        self.inner.put_member(group, node, record, mode).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        self.inner.delete_member(group, node, version).await
    }
}

#[tokio::test(start_paused = true)]
async fn listings_near_the_store_timeout_cost_no_lease_over_a_hundred_heartbeats() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8).await.unwrap();
    // The shortest validity the rules allow: two heartbeats. A scan lists the members and
    // the leases, 0.9 × store_timeout each, so a loop that renewed only between scans
    // would let leases run out.
    let config = ParticipantConfig::new(NodeId::new("a").unwrap(), 8)
        .with_heartbeat(Duration::from_millis(250))
        .with_lease_validity(Duration::from_millis(500))
        .with_acquire_after(Duration::from_millis(750))
        .with_scan_interval(Duration::from_millis(250))
        .with_store_timeout(Duration::from_millis(250));
    let store = Arc::new(SlowReads {
        read_delay: config.store_timeout.mul_f64(0.9),
        ..SlowReads::over(inner)
    });
    let participant = Participant::start(store, config.clone(), ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(participant.owned().len(), 8, "took the whole table");
    let changes = participant.lease_changes();
    let mut held = Vec::new();
    for _ in 0..100 {
        sleep(config.heartbeat).await;
        held.push(participant.owned().len());
    }
    assert!(
        held.iter().all(|&n| n == 8),
        "leases came and went: {held:?}"
    );
    assert!(participant.lease_changes() > changes, "renewed meanwhile");
    participant.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_drain_during_a_slow_member_listing_is_kept() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8).await.unwrap();
    let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 8);
    let store = Arc::new(SlowReads {
        read_delay: config.store_timeout.mul_f64(0.9),
        ..SlowReads::over(inner.clone())
    });
    let a = Participant::start(store, config.clone(), ()).unwrap();
    let b_config = ParticipantConfig::fast(NodeId::new("b").unwrap(), 8);
    let b = Participant::start(Arc::new(inner.clone()), b_config, ()).unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(a.owned().len() + b.owned().len(), 8);
    admin::set_draining(&inner, &group, a.node(), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(10)).await;
    assert!(a.status().draining, "the operator's drain was kept");
    assert_eq!(a.owned().len(), 0, "a handed everything off");
    assert_eq!(b.owned().len(), 8);
    let record = inner.get_member(&group, a.node()).await.unwrap().unwrap();
    assert!(record.value.draining, "never written back as not draining");
    a.shutdown().await;
    b.shutdown().await;
}

/// Fails if a drain the node adopted from a refused heartbeat, while a listing of the member
/// records was on its way, is undone by that listing's older copy of its record when the
/// write that follows the adoption does not land: the node would write "not draining" back
/// over the operator's command.
#[tokio::test(start_paused = true)]
async fn a_drain_adopted_during_a_slow_member_listing_is_kept() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        drain_adopted_during_a_slow_member_listing(mode).await;
    }
}

async fn drain_adopted_during_a_slow_member_listing(mode: LeaseMode) {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8).await.unwrap();
    admin::set_lease_mode(&inner, &group, mode).await.unwrap();
    let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 8);
    let store = Arc::new(SlowReads {
        member_listing_delay: config.store_timeout.mul_f64(0.96),
        ..SlowReads::over(inner.clone())
    });
    let a = Participant::start(
        Arc::clone(&store) as Arc<dyn LeaseStore>,
        config.clone(),
        (),
    )
    .unwrap();
    let b_config = ParticipantConfig::fast(NodeId::new("b").unwrap(), 8);
    let b = Participant::start(Arc::new(inner.clone()), b_config, ()).unwrap();
    sleep(Duration::from_secs(5)).await;
    assert_eq!(a.owned().len() + b.owned().len(), 8);
    *store.drain_after_member_listing.lock().unwrap() = Some(a.node().clone());
    sleep(Duration::from_secs(10)).await;
    assert!(store.drain_after_member_listing.lock().unwrap().is_none());
    assert!(!store.lose_draining_write.load(Ordering::SeqCst));
    assert!(
        a.status().draining,
        "{mode:?}: the operator's drain was kept"
    );
    assert_eq!(a.owned().len(), 0, "a handed everything off");
    let record = inner.get_member(&group, a.node()).await.unwrap().unwrap();
    assert!(record.value.draining, "never written back as not draining");
    a.shutdown().await;
    b.shutdown().await;
}

/// Fails if a take whose reply comes after the node excluded its partition starts a tenure
/// there: the application would hear `Acquired` for, and could start work on, a partition
/// it had been told to keep off.
#[tokio::test(start_paused = true)]
async fn a_take_answered_after_an_exclusion_is_never_served() {
    const P1: PartitionId = PartitionId(1);
    let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 2);
    let group = config.group.clone();
    let memory = Arc::new(MemoryStore::new());
    admin::init(&*memory, &group, 2).await.unwrap();
    admin::offline(&*memory, &group, P1).await.unwrap();
    let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
    let a = Participant::start(store.clone(), config.clone(), ()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.owned(), vec![PartitionId(0)]);
    let mut events = a.events();
    // The take lands at once and is answered nearly a store timeout later.
    store.set_batch_reply_delay(config.store_timeout.mul_f64(0.9));
    admin::online(&*memory, &group, P1).await.unwrap();
    let mut landed = false;
    for _ in 0..3_000 {
        let record = memory.get_lease(&group, P1).await.unwrap().unwrap();
        if record.value.owner.as_ref() == Some(a.node()) {
            landed = true;
            break;
        }
        sleep(Duration::from_millis(1)).await;
    }
    assert!(landed, "a took the partition back online");
    a.set_excluded([P1].into()).unwrap();
    sleep(Duration::from_secs(2)).await;
    store.set_batch_reply_delay(Duration::ZERO);
    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
        if let Ok(leasehold::LeaseEvent::Acquired(lease)) = event {
            assert_ne!(
                lease.partition(),
                P1,
                "a started a tenure on p1 after excluding it"
            );
        }
    }
    assert!(a.lease(P1).is_none());
    a.shutdown().await;
}

/// Fails if a node leaving takes its own last renewal, applied but never answered, for
/// another process's write: it would leave its member record behind, and the others would
/// count it among the live members, and size their shares by it, until it timed out. Every
/// member write's reply is lost from one renewal on, so that the writes of the way out (with
/// session leases, the renewal that gives up its weight) are of unknown outcome too.
#[tokio::test(start_paused = true)]
async fn a_node_leaving_after_a_renewal_whose_reply_was_lost_deletes_its_member_record() {
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        let group = GroupName::new("default").unwrap();
        let memory = Arc::new(MemoryStore::new());
        admin::init(&*memory, &group, 4).await.unwrap();
        admin::set_lease_mode(&*memory, &group, mode).await.unwrap();
        let store = Arc::new(leasehold::testing::FaultyStore::new(memory.clone()));
        let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 4);
        let a = Participant::start(store.clone(), config, ()).unwrap();
        sleep(Duration::from_secs(3)).await;
        assert_eq!(a.owned().len(), 4);
        store.lose_member_replies(u32::MAX);
        while store.member_replies_left_to_lose() == u32::MAX {
            sleep(Duration::from_millis(1)).await;
        }
        a.shutdown().await;
        store.lose_member_replies(0);
        let left = memory
            .get_member(&group, &NodeId::new("a").unwrap())
            .await
            .unwrap();
        assert!(
            left.is_none(),
            "{mode:?}: member record left behind: {left:?}"
        );
    }
}

/// A listing of a large table is given longer than other calls
/// (`ParticipantConfig::listing_timeout`): on a store whose listings take one and a half
/// store timeouts, a node still reads the table and takes partitions, where listings cut
/// off at the store timeout would fail at every scan.
#[tokio::test(start_paused = true)]
async fn a_listing_slower_than_the_store_timeout_still_reads_a_large_table() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8192).await.unwrap();
    let mut config = ParticipantConfig::new(NodeId::new("a").unwrap(), 8192)
        .with_store_timeout(Duration::from_secs(1));
    config.relist_after = Duration::ZERO;
    assert_eq!(config.listing_timeout(), Duration::from_secs(2));
    let store = Arc::new(SlowReads {
        listing_delay: Mutex::new(Duration::from_millis(1500)),
        ..SlowReads::over(inner)
    });
    let participant = Participant::start(store, config, ()).unwrap();
    sleep(Duration::from_secs(30)).await;
    let status = participant.status();
    assert!(status.lease_listings > 0, "{status:?}");
    assert!(!participant.owned().is_empty(), "{status:?}");
    participant.shutdown().await;
}

/// A node that never read the table reads its own stripe, a few rows, where a large table
/// would cost the store a listing; a reading of the stripe that fails is tried again at the
/// next scan, not answered with a listing of the whole table, which on a store too busy
/// for a few rows would be the worst thing to ask of it.
#[tokio::test(start_paused = true)]
async fn a_failed_reading_of_its_stripe_sends_a_node_back_to_its_stripe_not_the_table() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 8192).await.unwrap();
    let config = ParticipantConfig::new(NodeId::new("a").unwrap(), 8192);
    let store = Arc::new(SlowReads::over(inner));
    let participant = Participant::start(store.clone(), config, ()).unwrap();
    // It read its stripe and takes it batch by batch, planning on that reading until it is
    // acquire_after old; the next two readings of the stripe then fail.
    sleep(Duration::from_secs(30)).await;
    let taken = participant.owned().len();
    assert!(taken >= 16, "{:?}", participant.status());
    store.failing_gets.store(33, Ordering::Relaxed);
    sleep(Duration::from_secs(120)).await;
    let status = participant.status();
    assert_eq!(store.failing_gets.load(Ordering::Relaxed), 0, "{status:?}");
    assert!(status.listings_started.is_empty(), "{status:?}");
    assert!(participant.owned().len() > taken, "{status:?}");
    participant.shutdown().await;
}

/// Listings of a large table that time out are retried after a back-off that grows with the
/// table (`ParticipantConfig::max_listing_backoff`), not at every scan: a fleet whose store
/// is too busy to send it the table would otherwise keep it that busy. Meanwhile the node
/// scans on, reading member records.
#[tokio::test(start_paused = true)]
async fn listings_that_time_out_are_retried_ever_more_rarely_while_scans_go_on() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 16_384).await.unwrap();
    let mut config = ParticipantConfig::new(NodeId::new("a").unwrap(), 16_384)
        .with_store_timeout(Duration::from_secs(1));
    config.relist_after = Duration::ZERO;
    assert_eq!(config.listing_timeout(), Duration::from_secs(4));
    assert_eq!(config.max_listing_backoff(), Duration::from_secs(160));
    let store = Arc::new(SlowReads {
        listing_delay: Mutex::new(Duration::from_secs(10)),
        ..SlowReads::over(inner)
    });
    let participant = Participant::start(store, config, ()).unwrap();
    sleep(Duration::from_secs(1200)).await;
    let status = participant.status();
    let listings: u64 = status.listings_started.values().sum();
    // Waits of 80 s and then 160 s (spread by the jitter), against 40 s at most at the scan
    // back-off's pace: about 8 listings in 20 minutes, not 30.
    assert!(
        (5..=11).contains(&listings),
        "{listings} listings: {status:?}"
    );
    assert_eq!(status.lease_listings, 0, "{status:?}");
    assert!(status.scans >= 80, "{status:?}");
    participant.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_drained_while_its_listings_time_out_hands_off_at_once() {
    let group = GroupName::new("default").unwrap();
    let inner = MemoryStore::new();
    admin::init(&inner, &group, 16_384).await.unwrap();
    let node = |name: &str| {
        let mut config = ParticipantConfig::new(NodeId::new(name).unwrap(), 16_384)
            .with_store_timeout(Duration::from_secs(1));
        config.relist_after = Duration::ZERO;
        config.max_partitions_per_node = 32;
        config.max_acquires_per_scan = 32;
        config
    };
    let store = Arc::new(SlowReads::over(inner.clone()));
    let a = Participant::start(Arc::clone(&store) as Arc<dyn LeaseStore>, node("a"), ()).unwrap();
    sleep(Duration::from_secs(60)).await;
    assert_eq!(a.owned().len(), 32);

    // From now on every listing outlasts its 4 s limit; a node that failed one waits 80 s
    // and then 160 s before the next. b joins and can list nothing.
    *store.listing_delay.lock().unwrap() = Duration::from_secs(10);
    let b = Participant::start(Arc::clone(&store) as Arc<dyn LeaseStore>, node("b"), ()).unwrap();
    for _ in 0..120 {
        if a.status().last_scan_error.is_some() {
            break;
        }
        sleep(Duration::from_secs(1)).await;
    }
    assert!(a.status().last_scan_error.is_some(), "{:?}", a.status());
    let listings = a.status().listings_started.values().sum::<u64>();

    admin::set_draining(&inner, &group, a.node(), true)
        .await
        .unwrap();
    sleep(Duration::from_secs(30)).await;
    assert!(a.status().draining);
    assert_eq!(
        a.owned().len(),
        0,
        "a handed its partitions off: {:?}",
        a.status()
    );
    let listed = inner.list_leases(&group).await.unwrap();
    let named: Vec<_> = listed
        .records
        .iter()
        .filter(|lease| {
            lease.value.state == LeaseState::Held && lease.value.owner.as_ref() == Some(a.node())
        })
        .map(|lease| lease.key)
        .collect();
    assert!(named.is_empty(), "rows still held by a: {named:?}");
    assert_eq!(
        a.status().listings_started.values().sum::<u64>(),
        listings,
        "without listing the table"
    );
    a.shutdown().await;
    b.shutdown().await;
}
