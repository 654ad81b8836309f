//! One node's view of the shared in-memory store, through a fault injector: latency, lost
//! replies, held-back writes, outages and throttling, and a frozen process while paused.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    ChangeFeed, GroupName, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord, MemoryStore,
    NodeId, PartitionId, PutMode, StoreError, StoredLease, StoredMember, Version,
};
use tokio::sync::mpsc;

use crate::clock::Gate;
use crate::invariants::Holder;
use crate::world::World;

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fate {
    /// Applied, and the reply arrives.
    Deliver,
    /// Refused: the store is down.
    Unavailable,
    /// Refused: the store asks the caller to slow down.
    Throttled,
    /// Applied, but the reply never arrives; the caller's time limit ends the call.
    LoseReply,
    /// Held back and applied this long from now, after later requests; the caller's time
    /// limit ends the call.
    Delay(Duration),
}

/// A node's connection to the simulated store.
#[derive(Debug)]
pub(crate) struct FaultyStore {
    world: Arc<World>,
    holder: Holder,
    gate: Gate,
}

impl FaultyStore {
    pub(crate) fn new(world: Arc<World>, holder: Holder, gate: Gate) -> FaultyStore {
        FaultyStore {
            world,
            holder,
            gate,
        }
    }

    fn inner(&self) -> &MemoryStore {
        &self.world.store
    }

    /// Everything before a request reaches the store: the node's beliefs are read (a reply
    /// processed since the last look may have moved a deadline), the process must be running
    /// to send, and the request travels. Returns what will happen to it.
    async fn send(&self, write: bool, rows: usize) -> Fate {
        self.world.store_call(self.holder, write, rows);
        self.gate.wait_open().await;
        self.travel().await;
        self.world.fate(self.holder, write)
    }

    /// The reply travels back and is processed only once the process runs.
    async fn receive(&self) {
        self.travel().await;
        self.gate.wait_open().await;
    }

    async fn travel(&self) {
        let half = self.world.latency() / 2;
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
    }

    /// Runs a read under its fate.
    async fn read<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.send(false, 0).await {
            Fate::Deliver | Fate::Delay(_) => {}
            Fate::LoseReply => return std::future::pending().await,
            refused => return self.refuse(refused).await,
        }
        let result = self.timed(call).await;
        self.receive().await;
        result
    }

    async fn timed<T>(&self, call: impl Future<Output = T>) -> T {
        let started = std::time::Instant::now();
        let output = call.await;
        self.world.store_wall(started.elapsed());
        output
    }

    /// Runs a write under its fate; `later` makes the same write on its own, for a held-back
    /// request, and is called only then: copying a batch for every write would cost the
    /// simulation more than the write.
    async fn write<T, F>(
        &self,
        rows: usize,
        call: impl Future<Output = Result<T, StoreError>>,
        later: impl FnOnce() -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.send(true, rows).await {
            Fate::Deliver => {}
            Fate::LoseReply => {
                let _ = call.await;
                return std::future::pending().await;
            }
            Fate::Delay(delay) => {
                self.world.apply_later(delay, later());
                return std::future::pending().await;
            }
            refused => return self.refuse(refused).await,
        }
        let result = self.timed(call).await;
        self.receive().await;
        result
    }

    async fn refuse<T>(&self, fate: Fate) -> Result<T, StoreError> {
        self.receive().await;
        Err(match fate {
            Fate::Throttled => StoreError::Throttled {
                message: "simulated throttling".to_owned(),
            },
            _ => StoreError::Unavailable {
                message: "simulated outage".to_owned(),
                source: None,
            },
        })
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let listing = self.read(self.inner().list_leases(group)).await?;
        self.world.lease_listing(listing.records.len());
        Ok(listing)
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        self.read(self.inner().get_lease(group, partition)).await
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let later = || {
            let (store, g, r, m) = (
                self.inner().clone(),
                group.clone(),
                record.clone(),
                mode.clone(),
            );
            async move {
                let _ = store.put_lease(&g, partition, &r, m).await;
            }
        };
        let call = self
            .inner()
            .put_lease(group, partition, record, mode.clone());
        self.write(1, call, later).await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let later = || {
            let (store, g, batch) = (self.inner().clone(), group.clone(), writes.to_vec());
            async move {
                let _ = store.put_leases(&g, &batch).await;
            }
        };
        let call = self.inner().put_leases(group, writes);
        self.write(writes.len(), call, later).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let later = || {
            let (store, g, v) = (self.inner().clone(), group.clone(), version.clone());
            async move {
                let _ = store.delete_lease(&g, partition, &v).await;
            }
        };
        let call = self.inner().delete_lease(group, partition, version);
        self.write(1, call, later).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let listing = self.read(self.inner().list_members(group)).await?;
        self.world.rows_read(listing.records.len());
        Ok(listing)
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        self.read(self.inner().get_member(group, node)).await
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let later = || {
            let (store, g, n, r, m) = (
                self.inner().clone(),
                group.clone(),
                node.clone(),
                record.clone(),
                mode.clone(),
            );
            async move {
                let _ = store.put_member(&g, &n, &r, m).await;
            }
        };
        let call = self.inner().put_member(group, node, record, mode.clone());
        self.write(1, call, later).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let later = || {
            let (store, g, n, v) = (
                self.inner().clone(),
                group.clone(),
                node.clone(),
                version.clone(),
            );
            async move {
                let _ = store.delete_member(&g, &n, &v).await;
            }
        };
        let call = self.inner().delete_member(group, node, version);
        self.write(1, call, later).await
    }

    /// Change notices pass through the node's gate: a paused process reads none.
    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        if !self.world.config.change_notices {
            return Err(StoreError::NotSupported("change notifications"));
        }
        let mut feed = self.inner().watch(group).await?;
        let (sender, receiver) = mpsc::channel(ChangeFeed::CAPACITY);
        let gate = self.gate.clone();
        let forward = tokio::spawn(async move {
            while let Some(change) = feed.next().await {
                gate.wait_open().await;
                // A full channel already holds a notice, which is all a reader needs.
                if let Err(mpsc::error::TrySendError::Closed(_)) = sender.try_send(change) {
                    return;
                }
            }
        });
        Ok(ChangeFeed::new(receiver, Some(forward.abort_handle())))
    }
}
