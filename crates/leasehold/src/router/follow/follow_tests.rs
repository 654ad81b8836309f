//! Routers that follow the store: what they pick up by themselves, from change notices or by
//! polling, and what that costs the store.

use super::*;
use crate::router::*;
use crate::store::{LeaseWrite, PutMode};
use crate::testing::FaultyStore;
use crate::MemoryStore;

const PARTITIONS: u32 = 8;
/// Longer than any test here runs: only change notices can update the map.
const NO_POLL: Duration = Duration::from_secs(24 * 3600);

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn group() -> GroupName {
    GroupName::new("orders").unwrap()
}

/// A group of `partitions` released partitions in a store that notifies, and a wrapper
/// over it that counts a router's reads (and can refuse them). Tests write to the inner
/// store, so their own reads are not counted.
async fn stores(partitions: u32) -> (Arc<MemoryStore>, Arc<FaultyStore>) {
    let memory = Arc::new(MemoryStore::new());
    crate::admin::init(&*memory, &group(), partitions)
        .await
        .unwrap();
    let faulty = Arc::new(FaultyStore::new(memory.clone()));
    (memory, faulty)
}

/// Rewrites a partition's record as a node taking, renewing, releasing or losing it would.
async fn write(store: &MemoryStore, partition: u32, state: LeaseState, owner: &str) {
    let partition = PartitionId(partition);
    let current = store.get_lease(&group(), partition).await.unwrap().unwrap();
    let record = LeaseRecord {
        owner: Some(node(owner)),
        epoch: current.value.epoch.next(),
        state,
        ..current.value
    };
    let mode = PutMode::Update(current.version);
    store
        .put_lease(&group(), partition, &record, mode)
        .await
        .unwrap();
}

/// Deletes a partition's record, as an operator might.
async fn delete(store: &MemoryStore, partition: u32) {
    let partition = PartitionId(partition);
    let group = group();
    let current = store.get_lease(&group, partition).await.unwrap().unwrap();
    let deleted = store.delete_lease(&group, partition, &current.version);
    deleted.await.unwrap();
}

async fn follow(store: &Arc<FaultyStore>, partitions: u32, poll_interval: Duration) -> Router {
    let store: Arc<dyn LeaseStore> = store.clone();
    Router::follow(store, group(), partitions, poll_interval)
        .await
        .unwrap()
}

/// Lets the follower act on what was just written; virtual time, far below any poll.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// A partition handed from `a` to `b` (released, then taken) shows no owner and then
/// `b`, with no refresh call and long before any poll; a hand-off written in one burst
/// ends with `b` too.
///
/// Fails if the follower ignores the notices, or applies them out of order.
#[tokio::test(start_paused = true)]
async fn a_hand_off_shows_without_a_refresh() {
    let (memory, faulty) = stores(PARTITIONS).await;
    write(&memory, 3, LeaseState::Held, "a").await;
    write(&memory, 4, LeaseState::Held, "a").await;
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    assert_eq!(router.owner_of_partition(PartitionId(3)), Some(node("a")));

    write(&memory, 3, LeaseState::Released, "a").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(3)), None);
    write(&memory, 3, LeaseState::Held, "b").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(3)), Some(node("b")));

    write(&memory, 4, LeaseState::Released, "a").await;
    write(&memory, 4, LeaseState::Held, "b").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(4)), Some(node("b")));
    assert_eq!(faulty.listings(), 1, "no reload: only the first load");
}

/// Released and offline notices say all there is to know: their entries clear without a
/// store read. Renewals of partitions with an owner, by far the commonest writes, cost
/// nothing either.
///
/// Fails if the follower reads the store for notices that need no read.
#[tokio::test(start_paused = true)]
async fn releases_and_renewals_cost_no_read() {
    let (memory, faulty) = stores(PARTITIONS).await;
    for partition in [1, 2, 5] {
        write(&memory, partition, LeaseState::Held, "a").await;
    }
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    let reads = faulty.reads();

    write(&memory, 1, LeaseState::Released, "a").await;
    write(&memory, 2, LeaseState::Offline, "a").await;
    for _ in 0..3 {
        write(&memory, 5, LeaseState::Held, "a").await;
        settle().await;
    }
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(1)), None);
    assert_eq!(router.owner_of_partition(PartitionId(2)), None);
    assert_eq!(router.owner_of_partition(PartitionId(5)), Some(node("a")));
    assert_eq!(faulty.reads(), reads);
}

/// A lease taken over after its holder died reads like a renewal, so it shows at the
/// next poll, not before.
///
/// Fails if the poll does not run while notices flow, or runs early.
#[tokio::test(start_paused = true)]
async fn a_takeover_shows_at_the_next_poll() {
    let (memory, faulty) = stores(PARTITIONS).await;
    write(&memory, 6, LeaseState::Held, "a").await;
    let router = follow(&faulty, PARTITIONS, Duration::from_secs(10)).await;
    write(&memory, 6, LeaseState::Held, "b").await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(router.owner_of_partition(PartitionId(6)), Some(node("a")));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(router.owner_of_partition(PartitionId(6)), Some(node("b")));
    assert_eq!(faulty.listings(), 2);
}

/// Where the store cannot notify, the router reloads the map every poll interval.
///
/// Fails if a router without notices never updates, or polls faster than asked.
#[tokio::test(start_paused = true)]
async fn without_notices_the_router_polls() {
    let (memory, faulty) = stores(PARTITIONS).await;
    faulty.turn_notices_off();
    write(&memory, 2, LeaseState::Held, "a").await;
    let router = follow(&faulty, PARTITIONS, Duration::from_secs(10)).await;
    write(&memory, 2, LeaseState::Released, "a").await;
    write(&memory, 2, LeaseState::Held, "b").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(router.owner_of_partition(PartitionId(2)), Some(node("a")));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(router.owner_of_partition(PartitionId(2)), Some(node("b")));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(faulty.listings(), 5, "the first load and one each 10 s");
}

/// A burst of notices about more partitions than are worth reading one by one (a group
/// taken at start-up) costs one reload, not a read each.
///
/// Fails if the follower reads every partition, or reloads once per notice.
#[tokio::test(start_paused = true)]
async fn a_burst_of_notices_costs_one_reload() {
    let partitions = 64;
    let (memory, faulty) = stores(partitions).await;
    let router = follow(&faulty, partitions, NO_POLL).await;
    let listing = memory.list_leases(&group()).await.unwrap();
    let writes: Vec<LeaseWrite> = listing
        .records
        .into_iter()
        .map(|lease| LeaseWrite {
            partition: lease.key,
            record: LeaseRecord {
                owner: Some(node("a")),
                epoch: lease.value.epoch.next(),
                state: LeaseState::Held,
                ..lease.value
            },
            mode: PutMode::Update(lease.version),
        })
        .collect();
    memory.put_leases(&group(), &writes).await.unwrap();
    settle().await;
    assert_eq!(faulty.listings(), 1, "not within a second of the last");
    tokio::time::sleep(Router::MIN_RELOAD_INTERVAL).await;
    settle().await;
    assert!(router.map().values().all(|owner| owner == &Some(node("a"))));
    assert_eq!(faulty.listings(), 2);
    assert_eq!(faulty.record_reads(), 0);
}

/// A member that joins with an address is routable at once, without a poll, and one
/// that leaves takes its address with it; heartbeats read nothing.
///
/// Fails if addresses are read only at polls, or re-read at every heartbeat.
#[tokio::test(start_paused = true)]
async fn addresses_follow_members_joining_and_leaving() {
    let (memory, faulty) = stores(PARTITIONS).await;
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    assert_eq!(router.address_of(&node("a")), None);
    let record = crate::MemberRecord {
        address: Some("http://a.example:8080".into()),
        ..crate::MemberRecord::default()
    };
    let version = memory
        .put_member(&group(), &node("a"), &record, PutMode::Create)
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        router.address_of(&node("a")).as_deref(),
        Some("http://a.example:8080")
    );
    write(&memory, 2, LeaseState::Held, "a").await;
    settle().await;
    let key = (0..)
        .map(|i| format!("key-{i}"))
        .find(|key| router.partition_of(key) == PartitionId(2))
        .unwrap();
    let route = router.route(&key);
    assert_eq!(route.owner, Some(node("a")));
    assert_eq!(route.address.as_deref(), Some("http://a.example:8080"));

    let member_listings = faulty.member_listings();
    let beat = crate::MemberRecord {
        heartbeat: 1,
        ..record
    };
    let version = memory
        .put_member(&group(), &node("a"), &beat, PutMode::Update(version))
        .await
        .unwrap();
    settle().await;
    assert_eq!(
        faulty.member_listings(),
        member_listings,
        "a heartbeat reads nothing"
    );
    memory
        .delete_member(&group(), &node("a"), &version)
        .await
        .unwrap();
    settle().await;
    assert_eq!(router.address_of(&node("a")), None);
}

/// While the store refuses reads, the router retries less and less often, up to
/// [`Router::MAX_BACKOFF`] apart, and polls as usual again once the store recovers.
///
/// Fails if failed polls are retried at the poll rate, or never again.
#[tokio::test(start_paused = true)]
async fn failed_polls_back_off() {
    let (memory, faulty) = stores(PARTITIONS).await;
    faulty.turn_notices_off();
    let router = follow(&faulty, PARTITIONS, Duration::from_secs(1)).await;
    faulty.set_reads_throttled(true);
    write(&memory, 0, LeaseState::Held, "a").await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    // Retries 1, 2, 4, ... 32 s apart, then every 60 s: at 1, 2, 4, 8, 16, 32, 64,
    // 124, ... 544 s.
    assert_eq!(faulty.listings(), 1 + 15);
    assert_eq!(router.owner_of_partition(PartitionId(0)), None);

    faulty.set_reads_throttled(false);
    // Half a second off the poll schedule, so that no poll falls on a count below.
    tokio::time::sleep(Router::MAX_BACKOFF + Duration::from_millis(500)).await;
    assert_eq!(router.owner_of_partition(PartitionId(0)), Some(node("a")));
    let listings = faulty.listings();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(faulty.listings(), listings + 10);
}

/// The follower runs while any clone of its router lives, and stops with the last.
///
/// Fails if dropping a clone stops it, or dropping them all leaves it polling.
#[tokio::test(start_paused = true)]
async fn the_follower_stops_with_the_last_router() {
    let (_memory, faulty) = stores(PARTITIONS).await;
    faulty.turn_notices_off();
    let router = follow(&faulty, PARTITIONS, Duration::from_secs(1)).await;
    let clone = router.clone();
    drop(router);
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(faulty.listings(), 1 + 3);
    drop(clone);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(faulty.listings(), 1 + 3);
}

/// Notices of rows beyond the group's count (left by a larger table) cost no read, while
/// a record deleted within it is read again, and its entry cleared.
///
/// Fails if the follower reads strays, or ignores a deletion until the next poll.
#[tokio::test(start_paused = true)]
async fn strays_cost_no_read_and_a_deleted_record_is_read_again() {
    let (memory, faulty) = stores(PARTITIONS).await;
    write(&memory, 3, LeaseState::Held, "a").await;
    // The first partition past the count: taken, then deleted.
    let stray = PARTITIONS;
    let (group, record) = (group(), LeaseRecord::released());
    let create = memory.put_lease(&group, PartitionId(stray), &record, PutMode::Create);
    create.await.unwrap();
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    let reads = faulty.record_reads();
    write(&memory, stray, LeaseState::Held, "b").await;
    delete(&memory, stray).await;
    settle().await;
    assert_eq!(faulty.record_reads(), reads, "strays are never read");

    let deleted = PartitionId(3);
    delete(&memory, 3).await;
    settle().await;
    assert_eq!(router.owner_of_partition(deleted), None);
    assert_eq!(faulty.record_reads(), reads + 1);
    assert_eq!(faulty.listings(), 1, "no reload");
}

/// Up to [`Router::MAX_REREADS`] partitions taken where the map shows no owner are read
/// one by one, with no reload. (More than that, and the table is read whole instead:
/// `a_burst_of_notices_costs_one_reload`.)
///
/// Fails if the bound is one less than it says.
#[tokio::test(start_paused = true)]
async fn takes_up_to_the_reread_bound_are_read_one_by_one() {
    let partitions = 32;
    let (memory, faulty) = stores(partitions).await;
    let router = follow(&faulty, partitions, NO_POLL).await;
    for partition in 0..Router::MAX_REREADS as u32 {
        write(&memory, partition, LeaseState::Held, "a").await;
    }
    tokio::time::sleep(Router::MIN_RELOAD_INTERVAL).await;
    settle().await;
    assert_eq!(faulty.record_reads(), Router::MAX_REREADS as u64);
    assert_eq!(faulty.listings(), 1);
    assert_eq!(router.owner_of_partition(PartitionId(0)), Some(node("a")));
}

/// A re-read the store refused is not tried again while it backs off, whatever notices
/// come meanwhile, and is tried again once the back-off is over, long before the next
/// poll.
///
/// Fails if a failed re-read is retried at the next notice, or waits for the poll.
#[tokio::test(start_paused = true)]
async fn a_failed_reread_is_tried_again_after_its_back_off_only() {
    let (memory, faulty) = stores(PARTITIONS).await;
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    faulty.set_lease_reads_throttled(true);
    write(&memory, 2, LeaseState::Held, "a").await;
    settle().await;
    let reads = faulty.record_reads();
    assert_eq!(
        reads, 1,
        "the take of a partition the map shows vacant is read"
    );
    faulty.set_lease_reads_throttled(false);
    write(&memory, 3, LeaseState::Held, "a").await;
    settle().await;
    assert_eq!(faulty.record_reads(), reads, "backing off");
    tokio::time::sleep(Router::MAX_BACKOFF).await;
    assert_eq!(router.owner_of_partition(PartitionId(2)), Some(node("a")));
    assert_eq!(router.owner_of_partition(PartitionId(3)), Some(node("a")));
    assert_eq!(faulty.listings(), 1, "read again, not reloaded");
}

/// A router whose store cannot give it change notices polls, and asks for them again
/// every [`Router::MAX_BACKOFF`] until it has them; then a change shows at once.
///
/// Fails if a failed watch is retried at once (a store whose notices are down would be
/// asked again in a loop), or never.
#[tokio::test(start_paused = true)]
async fn a_failed_watch_is_tried_again_after_the_longest_back_off() {
    let (memory, faulty) = stores(PARTITIONS).await;
    faulty.fail_watches(2);
    let poll_interval = Duration::from_secs(3600);
    let router = follow(&faulty, PARTITIONS, poll_interval).await;
    let second = Duration::from_secs(1);
    tokio::time::sleep(Router::MAX_BACKOFF - second).await;
    assert_eq!(faulty.watches(), 1, "the first, at the start");
    tokio::time::sleep(2 * second).await;
    assert_eq!(faulty.watches(), 2, "the second, failed too");
    tokio::time::sleep(Router::MAX_BACKOFF - 2 * second).await;
    assert_eq!(faulty.watches(), 2);
    tokio::time::sleep(2 * second).await;
    assert_eq!(faulty.watches(), 3, "the third, answered");
    write(&memory, 5, LeaseState::Held, "a").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(5)), Some(node("a")));
}

/// A router whose change feed ends (a listener connection dropped) reads the table at
/// once, polls, and watches again only [`Router::MAX_BACKOFF`] later; the new feed's
/// first reload catches up what changed while there was none, and changes show at once
/// again.
///
/// Fails if an ended feed is read on as if it were alive, if nothing reads the table
/// when it ends, or if the store is asked for a new feed at once rather than after the
/// back-off.
#[tokio::test(start_paused = true)]
async fn an_ended_feed_is_watched_again_after_the_longest_back_off() {
    let (memory, faulty) = stores(PARTITIONS).await;
    let router = follow(&faulty, PARTITIONS, NO_POLL).await;
    tokio::time::sleep(Router::MIN_RELOAD_INTERVAL).await;
    write(&memory, 1, LeaseState::Held, "a").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(1)), Some(node("a")));
    let listings = faulty.listings();

    faulty.end_feeds();
    settle().await;
    assert_eq!(
        faulty.listings(),
        listings + 1,
        "the table read once the feed ends"
    );
    write(&memory, 2, LeaseState::Held, "b").await;
    let second = Duration::from_secs(1);
    tokio::time::sleep(Router::MAX_BACKOFF - second).await;
    assert_eq!(faulty.watches(), 1, "no new feed before the back-off");
    assert_eq!(
        router.owner_of_partition(PartitionId(2)),
        None,
        "no notice came"
    );

    tokio::time::sleep(2 * second).await;
    assert_eq!(faulty.watches(), 2, "a new feed after it");
    assert_eq!(
        router.owner_of_partition(PartitionId(2)),
        Some(node("b")),
        "caught up by the reload on the new feed"
    );
    write(&memory, 3, LeaseState::Held, "c").await;
    settle().await;
    assert_eq!(router.owner_of_partition(PartitionId(3)), Some(node("c")));
}

/// The poll interval is refused at zero and above [`ParticipantConfig::MAX_DURATION`],
/// and accepted at that bound.
#[tokio::test]
async fn a_poll_interval_beyond_the_bounds_is_refused() {
    let (_memory, faulty) = stores(PARTITIONS).await;
    let store: Arc<dyn LeaseStore> = faulty;
    let longest = crate::ParticipantConfig::MAX_DURATION;
    for wrong in [Duration::ZERO, longest + Duration::from_nanos(1)] {
        let follow = Router::follow(store.clone(), group(), PARTITIONS, wrong);
        let error = follow.await.unwrap_err();
        assert!(
            matches!(error, StoreError::Invalid(_)),
            "{wrong:?}: {error}"
        );
    }
    let router = Router::follow(store, group(), PARTITIONS, longest).await;
    let router = router.unwrap();
    let shown = format!("{router:?}");
    assert!(
        shown.contains("orders")
            && shown.contains(&PARTITIONS.to_string())
            && shown.contains("following: true"),
        "{shown}"
    );
}
