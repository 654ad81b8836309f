//! The published owner map of a router, and the copy each thread keeps at hand.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::error::StoreError;
use crate::store::{LeaseStore, TimeoutStore};
use crate::types::{GroupName, NodeId, PartitionId};

use super::{owner, ROUTER_STORE_TIMEOUT};

/// Partitions per chunk of a published map, as a power of two.
pub(super) const CHUNK_BITS: u32 = 8;
pub(super) const CHUNK_LEN: usize = 1 << CHUNK_BITS;

/// An immutable map from partition number to owner, in chunks of [`CHUNK_LEN`] partitions.
///
/// A lookup is two indexings; a correction copies the list of chunks and the one chunk it
/// changes, and shares the rest with the map it replaces. A flat list would make every
/// correction copy the whole map: at 65,536 partitions, as many reference-count increments.
#[derive(Debug)]
pub(super) struct Owners {
    pub(super) chunks: Vec<Arc<[Option<NodeId>]>>,
}

impl Owners {
    pub(super) fn new(owners: &[Option<NodeId>]) -> Owners {
        Owners {
            chunks: owners.chunks(CHUNK_LEN).map(Arc::from).collect(),
        }
    }

    /// A map of `owners` that shares every chunk it has in common with this one, so that a
    /// reload that changes little allocates little, and maps kept by readers (see
    /// [`RECENT`]) share most of their memory with the current one.
    pub(super) fn reloaded(&self, owners: &[Option<NodeId>]) -> Owners {
        let chunks = owners
            .chunks(CHUNK_LEN)
            .enumerate()
            .map(|(index, chunk)| match self.chunks.get(index) {
                Some(current) if **current == *chunk => Arc::clone(current),
                _ => Arc::from(chunk),
            })
            .collect();
        Owners { chunks }
    }

    pub(super) fn get(&self, partition: PartitionId) -> Option<&NodeId> {
        let index = usize::try_from(partition.0).ok()?;
        self.chunks
            .get(index >> CHUNK_BITS)?
            .get(index & (CHUNK_LEN - 1))?
            .as_ref()
    }

    /// A copy with `updates` applied; an update beyond the map is ignored.
    pub(super) fn with(
        &self,
        updates: impl IntoIterator<Item = (PartitionId, Option<NodeId>)>,
    ) -> Owners {
        let mut chunks = self.chunks.clone();
        for (partition, owner) in updates {
            let Ok(index) = usize::try_from(partition.0) else {
                continue;
            };
            let Some(chunk) = chunks.get_mut(index >> CHUNK_BITS) else {
                continue;
            };
            if let Some(entry) = Arc::make_mut(chunk).get_mut(index & (CHUNK_LEN - 1)) {
                *entry = owner;
            }
        }
        Owners { chunks }
    }
}

/// How many routers' maps each thread keeps at hand (see [`RECENT`]).
pub(super) const RECENT_MAPS: usize = 4;

thread_local! {
    /// The map each thread last read from a few routers, with the version it was read at,
    /// by [`Table::id`] modulo [`RECENT_MAPS`].
    ///
    /// Loading the published map takes arc-swap two read-modify-write instructions, about
    /// as long as the rest of a lookup together; a map kept here costs one plain atomic load
    /// of the version to check. The price: a thread keeps the map it last read alive until
    /// it reads again or ends, sharing all but the chunks changed since (see
    /// [`Owners::reloaded`]).
    static RECENT: RefCell<[Option<Recent>; RECENT_MAPS]> =
        const { RefCell::new([const { None }; RECENT_MAPS]) };
}

/// A map one thread read, at [`Table::version`] `version`.
pub(super) struct Recent {
    pub(super) table: u64,
    pub(super) version: u64,
    pub(super) owners: Arc<Owners>,
}

/// Numbers tables, so that a thread never takes one router's map for another's.
pub(super) static NEXT_TABLE: AtomicU64 = AtomicU64::new(0);

/// What every clone of a router shares, the follower task included.
pub(super) struct Table {
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) group: GroupName,
    pub(super) partitions: u32,
    /// Unique in the process.
    pub(super) id: u64,
    pub(super) owners: ArcSwap<Owners>,
    /// Counts the maps published, each moved past only once its map is in `owners`.
    pub(super) version: AtomicU64,
    /// Held while a map is built from the published one and published in turn, so that two
    /// corrections at once cannot lose one.
    pub(super) writer: Mutex<()>,
    /// The address each member advertises, from the member records.
    pub(super) addresses: ArcSwap<Addresses>,
}

/// Members' advertised addresses, by name.
pub(super) type Addresses = BTreeMap<NodeId, Arc<str>>;

impl Table {
    pub(super) fn new(
        store: Arc<dyn LeaseStore>,
        group: GroupName,
        partitions: u32,
    ) -> Result<Table, StoreError> {
        if partitions == 0 {
            return Err(StoreError::Invalid(
                "a group has at least one partition".into(),
            ));
        }
        let vacant = vec![None; partitions as usize];
        Ok(Table {
            store: Arc::new(TimeoutStore::new(store, ROUTER_STORE_TIMEOUT)),
            group,
            partitions,
            id: NEXT_TABLE.fetch_add(1, Ordering::Relaxed),
            owners: ArcSwap::from_pointee(Owners::new(&vacant)),
            version: AtomicU64::new(0),
            writer: Mutex::new(()),
            addresses: ArcSwap::from_pointee(Addresses::new()),
        })
    }

    /// Runs `read` on the current map: the one this thread kept, if no map was published
    /// since, and otherwise the published one, kept for next time.
    pub(super) fn read<T>(&self, read: impl FnOnce(&Owners) -> T) -> T {
        // Read before the map: a map kept under this version is at least as new as it.
        let version = self.version.load(Ordering::Acquire);
        let mut read = Some(read);
        let kept = RECENT.try_with(|recent| {
            // Busy only while a read looks a router up itself; that lookup goes the slow way.
            let mut recent = recent.try_borrow_mut().ok()?;
            let slot = &mut recent[(self.id % RECENT_MAPS as u64) as usize];
            let fresh =
                matches!(slot, Some(kept) if kept.table == self.id && kept.version == version);
            if !fresh {
                *slot = Some(Recent {
                    table: self.id,
                    version,
                    owners: self.owners.load_full(),
                });
            }
            let owners = &slot.as_ref()?.owners;
            Some(read.take()?(owners))
        });
        if let Ok(Some(value)) = kept {
            return value;
        }
        // The thread's maps were busy, or are gone because the thread is ending.
        let read = read.expect("taken only by a read that returned");
        read(&self.owners.load())
    }

    /// Publishes the map `build` makes from the current one.
    pub(super) fn publish(&self, build: impl FnOnce(&Owners) -> Owners) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let next = build(&self.owners.load());
        self.owners.store(Arc::new(next));
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Reloads the whole map, then the members' addresses.
    pub(super) async fn refresh(&self) -> Result<(), StoreError> {
        let listing = self.store.list_leases(&self.group).await?;
        let mut owners = vec![None; self.partitions as usize];
        for lease in listing.records {
            if let Some(entry) = owners.get_mut(lease.key.0 as usize) {
                *entry = owner(&lease.value);
            }
        }
        self.publish(|current| current.reloaded(&owners));
        self.refresh_addresses().await
    }

    /// Reloads the members' addresses. A member record that cannot be read is left out, as
    /// a member without an address is.
    pub(super) async fn refresh_addresses(&self) -> Result<(), StoreError> {
        let members = self.store.list_members(&self.group).await?;
        let addresses: Addresses = members
            .records
            .into_iter()
            .filter_map(|member| Some((member.key, Arc::from(member.value.address?))))
            .collect();
        self.addresses.store(Arc::new(addresses));
        Ok(())
    }

    pub(super) async fn reread(
        &self,
        partition: PartitionId,
    ) -> Result<Option<NodeId>, StoreError> {
        let current = self
            .store
            .get_lease(&self.group, partition)
            .await?
            .and_then(|lease| owner(&lease.value));
        self.correct([(partition, current.clone())]);
        Ok(current)
    }

    /// Sets the owners of partitions the map has; answers about any other are ignored.
    pub(super) fn correct(&self, updates: impl IntoIterator<Item = (PartitionId, Option<NodeId>)>) {
        let partitions = self.partitions;
        let mut updates = updates
            .into_iter()
            .filter(|(partition, _)| partition.0 < partitions)
            .peekable();
        if updates.peek().is_none() {
            return;
        }
        self.publish(|current| current.with(updates));
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use crate::router::*;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    /// A correction changes its one entry and shares every chunk it leaves alone with the map
    /// it replaces, however large the map.
    ///
    /// Fails if `with` copies untouched chunks, misplaces an entry across a chunk boundary,
    /// or adds an entry beyond the map.
    #[test]
    fn a_correction_copies_only_its_chunk() {
        let partitions = CHUNK_LEN * 3 + 5;
        let before = Owners::new(&vec![Some(node("a")); partitions]);
        let last = PartitionId(partitions as u32 - 1);
        let beyond = PartitionId(partitions as u32);
        let after = before.with([
            (PartitionId(CHUNK_LEN as u32), Some(node("b"))),
            (last, None),
            (beyond, Some(node("c"))),
        ]);
        assert_eq!(
            after.get(PartitionId(CHUNK_LEN as u32 - 1)),
            Some(&node("a"))
        );
        assert_eq!(after.get(PartitionId(CHUNK_LEN as u32)), Some(&node("b")));
        assert_eq!(
            after.get(PartitionId(CHUNK_LEN as u32 + 1)),
            Some(&node("a"))
        );
        assert_eq!(after.get(last), None);
        assert_eq!(after.get(beyond), None);
        assert_eq!(before.get(PartitionId(CHUNK_LEN as u32)), Some(&node("a")));
        let shared: Vec<bool> = (before.chunks.iter().zip(&after.chunks))
            .map(|(old, new)| Arc::ptr_eq(old, new))
            .collect();
        assert_eq!(shared, [true, false, true, false]);
    }

    /// A reload that changes one entry shares every other chunk with the map it replaces.
    ///
    /// Fails if a reload copies chunks that did not change.
    #[test]
    fn a_reload_shares_the_chunks_it_leaves_alone() {
        let mut owners = vec![Some(node("a")); CHUNK_LEN * 2 + 3];
        let before = Owners::new(&owners);
        owners[CHUNK_LEN] = Some(node("b"));
        let after = before.reloaded(&owners);
        assert_eq!(after.get(PartitionId(CHUNK_LEN as u32)), Some(&node("b")));
        let shared: Vec<bool> = (before.chunks.iter().zip(&after.chunks))
            .map(|(old, new)| Arc::ptr_eq(old, new))
            .collect();
        assert_eq!(shared, [true, false, true]);
    }
}

/// The maps each thread keeps (see [`RECENT`]): never another router's, never older than a
/// correction that returned before the lookup began.
#[cfg(test)]
mod recent_tests {
    use super::*;
    use crate::router::*;
    use crate::MemoryStore;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    /// A router over a fresh group of `partitions`, every partition vacant.
    async fn router(partitions: u32) -> Router {
        let store = Arc::new(MemoryStore::new());
        let group = GroupName::new("orders").unwrap();
        crate::admin::init(&*store, &group, partitions)
            .await
            .unwrap();
        Router::connect(store, group, partitions).await.unwrap()
    }

    async fn hint(router: &Router, partition: u32, owner: &str) {
        let answer = NotOwner {
            partition: PartitionId(partition),
            owner_hint: Some(node(owner)),
        };
        router.not_owner(&answer).await.unwrap();
    }

    /// Many more routers than a thread keeps maps for (their ids run well past the number of
    /// maps kept), read in turn on one thread: each answers from its own map.
    ///
    /// Fails if a kept map is taken for another router's.
    #[tokio::test]
    async fn routers_on_one_thread_keep_their_own_maps() {
        let mut routers = Vec::new();
        for index in 0..RECENT_MAPS * RECENT_MAPS + 1 {
            let router = router(4).await;
            hint(&router, 1, &format!("n{index}")).await;
            routers.push(router);
        }
        for _ in 0..2 {
            for (index, router) in routers.iter().enumerate() {
                let owner = router.owner_of_partition(PartitionId(1));
                assert_eq!(owner, Some(node(&format!("n{index}"))));
            }
        }
    }

    /// A thread that read the map before a correction reads the corrected map after it.
    ///
    /// Fails if a thread answers from the map it kept after a new one was published.
    #[tokio::test]
    async fn a_correction_shows_on_a_thread_that_kept_the_old_map() {
        let router = router(4).await;
        hint(&router, 2, "a").await;
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (answer, answers) = std::sync::mpsc::channel();
        let reader = router.clone();
        let thread = std::thread::spawn(move || {
            while asked.recv().is_ok() {
                answer
                    .send(reader.owner_of_partition(PartitionId(2)))
                    .unwrap();
            }
        });
        ask.send(()).unwrap();
        assert_eq!(answers.recv().unwrap(), Some(node("a")));
        hint(&router, 2, "b").await;
        ask.send(()).unwrap();
        assert_eq!(answers.recv().unwrap(), Some(node("b")));
        drop(ask);
        thread.join().unwrap();
    }

    /// A lookup made while routing another key, on the same thread, still answers.
    ///
    /// Fails if a nested lookup panics on the thread's busy maps.
    #[tokio::test]
    async fn a_lookup_inside_a_lookup_answers() {
        let router = router(4).await;
        hint(&router, 3, "a").await;
        let key = (0..)
            .map(|k| format!("key-{k}"))
            .find(|key| router.partition_of(key) == PartitionId(3))
            .unwrap();
        let nested = router.with_owner_of_key(&key, |_, outer| {
            (outer.cloned(), router.owner_of_key(&key).1)
        });
        assert_eq!(nested, (Some(node("a")), Some(node("a"))));
    }
}
