//! Finding the owner of a key: the client side of a partitioned service.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::record::LeaseState;
use crate::store::{LeaseStore, TimeoutStore};
use crate::types::{GroupName, NodeId, PartitionId};

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

/// A client's cached map from partitions to owners.
///
/// Read the whole table once, route each request with [`Router::owner_of_key`], and on a
/// [`NotOwner`] answer call [`Router::not_owner`] to correct the one entry. The map is a hint:
/// the server that answers is the one that checks its lease.
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
#[derive(Debug, Clone)]
pub struct Router {
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    partitions: u32,
    map: Arc<RwLock<BTreeMap<PartitionId, Option<NodeId>>>>,
}

/// The time limit on each store call a router makes.
pub const ROUTER_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Router {
    /// A router for `group` with `partitions` partitions, its map loaded from the store. Every
    /// store call is limited to [`ROUTER_STORE_TIMEOUT`], so a hung store fails a refresh
    /// instead of hanging the client.
    pub async fn connect(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
    ) -> Result<Router, StoreError> {
        if partitions == 0 {
            return Err(StoreError::Invalid(
                "a group has at least one partition".into(),
            ));
        }
        let router = Router {
            store: Arc::new(TimeoutStore::new(store, ROUTER_STORE_TIMEOUT)),
            group,
            partitions,
            map: Arc::default(),
        };
        router.refresh().await?;
        Ok(router)
    }

    /// The partition of `key`.
    pub fn partition_of(&self, key: &str) -> PartitionId {
        partition_for_key(key, self.partitions)
    }

    /// The cached owner of `partition`: `None` if nobody holds it or it is unknown.
    pub fn owner_of_partition(&self, partition: PartitionId) -> Option<NodeId> {
        self.read().get(&partition).cloned().flatten()
    }

    /// The partition of `key` and its cached owner.
    pub fn owner_of_key(&self, key: &str) -> (PartitionId, Option<NodeId>) {
        let partition = self.partition_of(key);
        (partition, self.owner_of_partition(partition))
    }

    /// The whole cached map, every partition with its owner if it has one.
    pub fn map(&self) -> BTreeMap<PartitionId, Option<NodeId>> {
        self.read().clone()
    }

    /// Reloads the whole map from the store.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let listing = self.store.list_leases(&self.group).await?;
        let mut map: BTreeMap<PartitionId, Option<NodeId>> = (0..self.partitions)
            .map(|p| (PartitionId(p), None))
            .collect();
        for lease in listing.records {
            if let Some(slot) = map.get_mut(&lease.key) {
                *slot = owner(&lease.value);
            }
        }
        *self.map.write().unwrap_or_else(|e| e.into_inner()) = map;
        Ok(())
    }

    /// Re-reads one partition's owner from the store, after a wrong-owner answer. A
    /// partition beyond the group's count is read but never added to the map, as
    /// [`Router::refresh`] leaves stray records out.
    pub async fn invalidate(&self, partition: PartitionId) -> Result<Option<NodeId>, StoreError> {
        let current = self
            .store
            .get_lease(&self.group, partition)
            .await?
            .and_then(|lease| owner(&lease.value));
        self.correct(partition, current.clone());
        Ok(current)
    }

    /// Sets the owner of a partition the map has; answers about any other are ignored.
    fn correct(&self, partition: PartitionId, owner: Option<NodeId>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(&partition) {
            *entry = owner;
        }
    }

    /// Corrects the map after a server answered [`NotOwner`]: takes its hint if it gave one,
    /// otherwise re-reads the partition. Returns the owner to try next.
    pub async fn not_owner(&self, answer: &NotOwner) -> Result<Option<NodeId>, StoreError> {
        match &answer.owner_hint {
            Some(hint) => {
                self.correct(answer.partition, Some(hint.clone()));
                Ok(Some(hint.clone()))
            }
            None => self.invalidate(answer.partition).await,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<PartitionId, Option<NodeId>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }
}

fn owner(record: &crate::record::LeaseRecord) -> Option<NodeId> {
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
