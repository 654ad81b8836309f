//! Finding the owner of a key: the client side of a partitioned service.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::error::StoreError;
use crate::record::{LeaseRecord, LeaseState};
use crate::store::LeaseStore;
use crate::types::{GroupName, NodeId, PartitionId};

use self::follow::{Follower, FollowerTask};
use self::table::Table;

mod follow;
mod table;

const FNV_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// The 32-bit FNV-1a hash of `bytes`.
///
/// This is the function DurableTask uses to assign instances to partitions; it is stable
/// across releases, platforms and languages, so any client can compute a key's partition.
///
/// ```
/// assert_eq!(leasehold::fnv1a_32(b""), 0x811c9dc5);
/// assert_eq!(leasehold::fnv1a_32(b"a"), 0xe40c292c);
/// ```
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The partition of `key`: FNV-1a 32-bit over its UTF-8 bytes, modulo `partitions`.
///
/// ```
/// use leasehold::{partition_for_key, PartitionId};
/// assert_eq!(partition_for_key("order-42", 16), PartitionId(4));
/// ```
///
/// # Panics
///
/// If `partitions` is zero.
pub fn partition_for_key(key: &str, partitions: u32) -> PartitionId {
    assert!(partitions > 0, "a group has at least one partition");
    PartitionId(fnv1a_32(key.as_bytes()) % partitions)
}

/// The answer a server gives for a partition it does not hold, so the client can correct its
/// map: with the owner it believes current, if it knows one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("not the owner of partition {partition}{}", owner_hint.as_ref().map(|o| format!(" (try {o})")).unwrap_or_default())]
pub struct NotOwner {
    /// The partition asked about.
    pub partition: PartitionId,
    /// Who the server believes owns it, if anyone.
    pub owner_hint: Option<NodeId>,
}

/// Where a key's requests go: what [`Router::route`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The key's partition.
    pub partition: PartitionId,
    /// Its owner in the router's map, if it has one.
    pub owner: Option<NodeId>,
    /// The address the owner advertises, if it advertises one.
    pub address: Option<Arc<str>>,
}

/// A client's cached map from partitions to owners.
///
/// Read the whole table once, route each request with [`Router::owner_of_key`], and on a
/// [`NotOwner`] answer call [`Router::not_owner`] to correct the one entry. The map is a hint:
/// the server that answers is the one that checks its lease. A router made by
/// [`Router::follow`] also keeps the map fresh by itself, from the store's change notices and
/// by polling.
///
/// Lookups never wait or lock: every change publishes a new immutable map, and each thread
/// keeps the map it last read, checking with one atomic load that it is still the latest.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use leasehold::{admin, GroupName, MemoryStore, Router};
///
/// let store = Arc::new(MemoryStore::new());
/// let group = GroupName::new("default").unwrap();
/// admin::init(&*store, &group, 8).await.unwrap();
/// let router = Router::connect(store, group, 8).await.unwrap();
/// let (partition, owner) = router.owner_of_key("customer-17");
/// assert!(partition.0 < 8);
/// assert_eq!(owner, None, "nobody has taken it yet");
/// # });
/// ```
#[derive(Clone)]
pub struct Router {
    table: Arc<Table>,
    /// The task keeping the map fresh, if this router follows the store: aborted when the
    /// last clone of the router is dropped.
    follower: Option<Arc<FollowerTask>>,
}

/// The time limit on each store call a router makes.
pub const ROUTER_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("group", &self.table.group)
            .field("partitions", &self.table.partitions)
            .field("following", &self.follower.is_some())
            .finish()
    }
}

impl Router {
    /// The shortest time between two reloads of the whole map that change notices prompt (a
    /// notice that names no partition, or more partitions than are worth reading one by one),
    /// so that a burst of notices costs one listing, not one each.
    pub const MIN_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

    /// The longest a following router waits after a failed store call before it tries again.
    /// The wait starts at [`Router::MIN_RELOAD_INTERVAL`] and doubles with each failure in a
    /// row.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

    /// The most partitions a following router re-reads one by one after change notices;
    /// notices about more than these reload the whole map instead.
    pub const MAX_REREADS: usize = 16;

    /// A router for `group` with `partitions` partitions, its map loaded from the store. Every
    /// store call is limited to [`ROUTER_STORE_TIMEOUT`], so a hung store fails a refresh
    /// instead of hanging the client. The map changes only when the caller refreshes or
    /// corrects it; [`Router::follow`] makes one that keeps itself fresh.
    pub async fn connect(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
    ) -> Result<Router, StoreError> {
        let table = Table::new(store, group, partitions)?;
        table.refresh().await?;
        Ok(Router {
            table: Arc::new(table),
            follower: None,
        })
    }

    /// Connects like [`Router::connect`], then keeps the map fresh in a task on the current
    /// Tokio runtime until the last clone of the router is dropped:
    ///
    /// - where the store pushes change notices ([`LeaseStore::watch`]), a lease written
    ///   released or offline clears its entry at once without a store read, a lease taken
    ///   where the map shows no owner (the common hand-off) is re-read at once, and a notice
    ///   that names nothing reloads the whole map, at most once per
    ///   [`Router::MIN_RELOAD_INTERVAL`];
    /// - whether or not it does, the whole map is reloaded every `poll_interval`: the only
    ///   news where the store cannot notify, and where it can, the backstop for notices lost
    ///   and for what a notice cannot tell (a renewal and a takeover after the holder died
    ///   look alike, so renewals of partitions that have an owner are not re-read);
    /// - failed store calls are retried with a backoff capped at [`Router::MAX_BACKOFF`].
    ///
    /// Fails as [`Router::connect`] does, or with [`StoreError::Invalid`] if
    /// `poll_interval` is zero or longer than [`ParticipantConfig::MAX_DURATION`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId, Router};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 8);
    /// admin::init(&*store, &config.group, 8).await.unwrap();
    /// let poll_interval = Duration::from_secs(30);
    /// let router = Router::follow(store.clone(), config.group.clone(), 8, poll_interval)
    ///     .await
    ///     .unwrap();
    /// assert_eq!(router.owner_of_partition(PartitionId(3)), None);
    ///
    /// let server = Participant::start(store, config, ()).unwrap();
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    /// // No refresh call, and well within the poll interval: the router followed the store.
    /// assert_eq!(router.owner_of_partition(PartitionId(3)).as_ref(), Some(server.node()));
    ///
    /// server.shutdown().await; // releases every lease
    /// tokio::time::sleep(Duration::from_millis(10)).await;
    /// assert_eq!(router.owner_of_partition(PartitionId(3)), None);
    /// # });
    /// ```
    pub async fn follow(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
        poll_interval: Duration,
    ) -> Result<Router, StoreError> {
        if poll_interval.is_zero() || poll_interval > ParticipantConfig::MAX_DURATION {
            return Err(StoreError::Invalid(format!(
                "a router's poll interval must be above zero and at most {:?}, got {poll_interval:?}",
                ParticipantConfig::MAX_DURATION
            )));
        }
        let table = Arc::new(Table::new(store, group, partitions)?);
        // Subscribed before the first load, so that nothing written after the load is missed.
        let (feed, rewatch_at) = match table.store.watch(&table.group).await {
            Ok(feed) => (Some(feed), None),
            Err(StoreError::NotSupported(_)) => (None, None),
            Err(error) => {
                tracing::warn!(group = %table.group, %error, "router: change notices unavailable; polling");
                (None, Some(Instant::now() + Router::MAX_BACKOFF))
            }
        };
        let loaded_at = Instant::now();
        table.refresh().await?;
        let follower = Follower::new(
            Arc::clone(&table),
            poll_interval,
            feed,
            rewatch_at,
            loaded_at,
        );
        let task = tokio::spawn(follower.run()).abort_handle();
        Ok(Router {
            table,
            follower: Some(Arc::new(FollowerTask(task))),
        })
    }

    /// The partition of `key`.
    pub fn partition_of(&self, key: &str) -> PartitionId {
        partition_for_key(key, self.table.partitions)
    }

    /// The cached owner of `partition`: `None` if nobody holds it or it is unknown.
    pub fn owner_of_partition(&self, partition: PartitionId) -> Option<NodeId> {
        self.table.read(|owners| owners.get(partition).cloned())
    }

    /// The address `node` advertises in its member record ([`ParticipantConfig::advertise`]),
    /// as of the router's last reading of the members: at each refresh or reload, and, for a
    /// following router, when a member joins or leaves.
    pub fn address_of(&self, node: &NodeId) -> Option<Arc<str>> {
        self.table.addresses.load().get(node).cloned()
    }

    /// Where to send a request for `key`: its partition, the cached owner and the address the
    /// owner advertises.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, Router};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let mut config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 4);
    /// config.advertise = Some("http://10.0.0.7:8080".into());
    /// admin::init(&*store, &config.group, 4).await.unwrap();
    /// let group = config.group.clone();
    /// let server = Participant::start(store.clone(), config, ()).unwrap();
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    ///
    /// let router = Router::connect(store, group, 4).await.unwrap();
    /// let route = router.route("order-42");
    /// assert_eq!(route.owner.as_ref(), Some(server.node()));
    /// assert_eq!(route.address.as_deref(), Some("http://10.0.0.7:8080"));
    /// # });
    /// ```
    pub fn route(&self, key: &str) -> Route {
        let (partition, owner) = self.owner_of_key(key);
        let address = owner.as_ref().and_then(|owner| self.address_of(owner));
        Route {
            partition,
            owner,
            address,
        }
    }

    /// The partition of `key` and its cached owner.
    pub fn owner_of_key(&self, key: &str) -> (PartitionId, Option<NodeId>) {
        let partition = self.partition_of(key);
        (partition, self.owner_of_partition(partition))
    }

    /// Calls `route` with the partition of `key` and its cached owner, borrowed: what
    /// [`Router::owner_of_key`] answers, without cloning the owner's name. A clone moves a
    /// reference count that every thread routing to that owner shares, which costs more
    /// than the rest of the lookup, and more still when many threads route at once.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use leasehold::{admin, GroupName, MemoryStore, Router};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let group = GroupName::new("default").unwrap();
    /// admin::init(&*store, &group, 8).await.unwrap();
    /// let router = Router::connect(store, group, 8).await.unwrap();
    /// let address = router.with_owner_of_key("customer-17", |partition, owner| {
    ///     owner.map(|node| format!("http://{node}/partitions/{partition}"))
    /// });
    /// assert_eq!(address, None, "nobody has taken it yet");
    /// # });
    /// ```
    pub fn with_owner_of_key<T>(
        &self,
        key: &str,
        route: impl FnOnce(PartitionId, Option<&NodeId>) -> T,
    ) -> T {
        let partition = self.partition_of(key);
        self.table
            .read(|owners| route(partition, owners.get(partition)))
    }

    /// The whole cached map, every partition with its owner if it has one.
    pub fn map(&self) -> BTreeMap<PartitionId, Option<NodeId>> {
        let owners = self.table.owners.load();
        (0..self.table.partitions)
            .map(PartitionId)
            .map(|partition| (partition, owners.get(partition).cloned()))
            .collect()
    }

    /// Reloads the whole map from the store.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        self.table.refresh().await
    }

    /// Re-reads one partition's owner from the store, after a wrong-owner answer. A
    /// partition beyond the group's count is read but never added to the map, as
    /// [`Router::refresh`] leaves stray records out.
    pub async fn invalidate(&self, partition: PartitionId) -> Result<Option<NodeId>, StoreError> {
        self.table.reread(partition).await
    }

    /// Corrects the map after a server answered [`NotOwner`]: takes its hint if it gave one,
    /// otherwise re-reads the partition. Returns the owner to try next.
    pub async fn not_owner(&self, answer: &NotOwner) -> Result<Option<NodeId>, StoreError> {
        match &answer.owner_hint {
            Some(hint) => {
                self.table.correct([(answer.partition, Some(hint.clone()))]);
                Ok(Some(hint.clone()))
            }
            None => self.invalidate(answer.partition).await,
        }
    }
}

fn owner(record: &LeaseRecord) -> Option<NodeId> {
    match record.state {
        LeaseState::Held => record.owner.clone(),
        LeaseState::Released | LeaseState::Offline => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published FNV-1a 32-bit test vectors, so that clients in other languages agree.
    #[test]
    fn fnv1a_matches_published_vectors() {
        let vectors: [(&[u8], u32); 6] = [
            (b"", 0x811c_9dc5),
            (b"a", 0xe40c_292c),
            (b"b", 0xe70c_2de5),
            (b"foo", 0xa9f3_7ed7),
            (b"foobar", 0xbf9c_f968),
            (b"chongo was here!\n", 0xd49930d5),
        ];
        for (input, expected) in vectors {
            assert_eq!(
                fnv1a_32(input),
                expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn keys_map_to_stable_partitions() {
        // Golden values computed independently; changing them breaks every deployed client.
        assert_eq!(fnv1a_32(b"order-42"), 0x5724_46f4);
        assert_eq!(partition_for_key("order-42", 16), PartitionId(4));
        assert_eq!(
            partition_for_key("mailbox:alice@example.com", 65_536),
            PartitionId(60_712)
        );
        assert_eq!(
            partition_for_key("customer-17", 65_536),
            PartitionId(26_720)
        );
        assert_eq!(partition_for_key("foo", 4), PartitionId(3));
        assert_eq!(partition_for_key("", 4), PartitionId(1));
    }

    #[test]
    fn not_owner_names_the_partition_and_hint() {
        let answer = NotOwner {
            partition: PartitionId(7),
            owner_hint: Some(NodeId::new("n2").unwrap()),
        };
        assert_eq!(answer.to_string(), "not the owner of partition 7 (try n2)");
        let json = serde_json::to_string(&answer).unwrap();
        assert_eq!(json, r#"{"partition":7,"owner_hint":"n2"}"#);
    }
}

#[cfg(all(test, feature = "testing"))]
mod timeout_tests {
    use super::*;
    use crate::testing::FaultyStore;
    use crate::MemoryStore;

    #[tokio::test(start_paused = true)]
    async fn a_hung_store_fails_a_refresh_instead_of_hanging_it() {
        let store = Arc::new(FaultyStore::new(Arc::new(MemoryStore::new())));
        let group = GroupName::new("default").unwrap();
        crate::admin::init(&*store, &group, 4).await.unwrap();
        let router = Router::connect(store.clone(), group, 4).await.unwrap();
        store.set_hung(true);
        let error = router.refresh().await.unwrap_err();
        assert!(
            matches!(error, StoreError::Timeout(limit) if limit == ROUTER_STORE_TIMEOUT),
            "{error}"
        );
    }
}
