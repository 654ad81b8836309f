//! One node's view of the shared in-memory store, through a fault injector: latency, lost,
//! slow and dropped replies, held-back writes, outages and throttling, a link that degrades
//! and is cut, and a frozen process while paused;
//! and, for negative controls, takes refused and other members hidden.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::{
    ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseState, LeaseStore, LeaseWrite, Listing,
    MemberRecord, MemoryStore, NodeId, PartitionId, PutMode, RecordKey, StoreError, Stored,
    StoredGroup, StoredLease, StoredMember, StoredMemberHead, TxnWrite, Version,
};
use tokio::sync::mpsc;

use crate::clock::Gate;
use crate::faults::Fate;
use crate::invariants::Holder;

/// What a node's connection asks of the world it runs in: the fate of each request, the
/// time it travels, and an account of the traffic, which the world also takes as a moment
/// to look at the node's beliefs.
pub(crate) trait Network: fmt::Debug + Send + Sync + 'static {
    /// The store shared by every node.
    fn store(&self) -> &MemoryStore;
    /// Whether the store pushes change notices.
    fn change_notices(&self) -> bool;
    /// A request of `holder` for `rows` rows enters its connection.
    fn sending(&self, holder: Holder, write: bool, rows: usize);
    /// How long one round trip of `holder`'s takes.
    fn latency(&self, holder: Holder) -> Duration;
    /// What happens to a request of `holder` reaching the store now.
    fn fate(&self, holder: Holder, write: bool) -> Fate;
    /// Applies a held-back write `delay` from now.
    fn apply_later(&self, delay: Duration, write: impl Future<Output = ()> + Send + 'static);
    /// Wall-clock time spent inside the store.
    fn store_wall(&self, spent: Duration);
    /// Rows returned by a read.
    fn rows_read(&self, rows: usize);
    /// A listing of the whole lease table returned `rows` rows.
    fn lease_listing(&self, rows: usize);
    /// Whether `holder`'s takes fail now: the negative control of the liveness check.
    fn stops_taking(&self, holder: Holder) -> bool;
    /// A take of `partition` by `holder` was answered as a lost race.
    fn take_refused(&self, holder: Holder, partition: PartitionId);
    /// Whether `holder` sees no member record but its own: the negative control of the
    /// balance check.
    fn hides_members(&self, holder: Holder) -> bool;
    /// The member whose record `holder` cannot decode now, if any.
    fn garbled_member(&self, holder: Holder) -> Option<NodeId>;
    /// A write of `holder`'s own member record landed, leaving it at `version` (`None`: a
    /// delete); `conditioned` if it was made on the version the process knew (an update or
    /// a delete), not a create, which lands on a record someone may have deleted: the
    /// own-session check's reference.
    fn member_written(&self, holder: Holder, version: Option<Version>, conditioned: bool);
}

/// A node's connection to the simulated store.
#[derive(Debug)]
pub(crate) struct FaultyStore<N> {
    network: Arc<N>,
    holder: Holder,
    node: NodeId,
    gate: Gate,
}

impl<N: Network> FaultyStore<N> {
    pub(crate) fn new(network: Arc<N>, holder: Holder, node: NodeId, gate: Gate) -> FaultyStore<N> {
        FaultyStore {
            network,
            holder,
            node,
            gate,
        }
    }

    fn inner(&self) -> &MemoryStore {
        self.network.store()
    }

    /// Everything before a request reaches the store: the node's beliefs are read (a reply
    /// processed since the last look may have moved a deadline), the process must be running
    /// to send, and the request travels. Returns what will happen to it.
    async fn send(&self, write: bool, rows: usize) -> Fate {
        self.network.sending(self.holder, write, rows);
        self.gate.wait_open().await;
        self.travel().await;
        self.network.fate(self.holder, write)
    }

    /// The reply travels back and is processed only once the process runs.
    async fn receive(&self) {
        self.travel().await;
        self.gate.wait_open().await;
    }

    async fn travel(&self) {
        let half = self.network.latency(self.holder) / 2;
        if !half.is_zero() {
            tokio::time::sleep(half).await;
        }
    }

    /// Runs a read under its fate.
    async fn read<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let slow = match self.send(false, 0).await {
            Fate::Deliver | Fate::Delay(_) => Duration::ZERO,
            Fate::SlowReply(delay) => delay,
            Fate::LoseReply | Fate::Dropped => return std::future::pending().await,
            refused => return self.refuse(refused).await,
        };
        let result = self.timed(call).await;
        Self::linger(slow).await;
        self.receive().await;
        result
    }

    /// Holds a reply back for a slow reply's delay.
    async fn linger(delay: Duration) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }

    async fn timed<T>(&self, call: impl Future<Output = T>) -> T {
        let started = std::time::Instant::now();
        let output = call.await;
        self.network.store_wall(started.elapsed());
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
        let slow = match self.send(true, rows).await {
            Fate::Deliver => Duration::ZERO,
            Fate::SlowReply(delay) => delay,
            Fate::LoseReply => {
                let _ = call.await;
                return std::future::pending().await;
            }
            Fate::Dropped => return std::future::pending().await,
            Fate::Delay(delay) => {
                self.network.apply_later(delay, later());
                return std::future::pending().await;
            }
            refused => return self.refuse(refused).await,
        };
        let result = self.timed(call).await;
        Self::linger(slow).await;
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

impl<N: Network> FaultyStore<N> {
    /// Whether `write` would take a partition: make this node the holder of a record that
    /// names another holder, another epoch or another state (a renewal changes none).
    async fn is_take(&self, group: &GroupName, write: &LeaseWrite) -> bool {
        let record = &write.record;
        if record.owner.as_ref() != Some(&self.node) || record.state != LeaseState::Held {
            return false;
        }
        let stored = self.inner().get_lease(group, write.partition).await;
        !matches!(stored, Ok(Some(stored))
            if stored.value.owner == record.owner
                && stored.value.epoch == record.epoch
                && stored.value.state == LeaseState::Held)
    }

    /// Answers a take as a lost race, as the store would had another node written first.
    fn refuse_take<T>(&self, partition: PartitionId) -> Result<T, StoreError> {
        self.network.take_refused(self.holder, partition);
        Err(StoreError::Conflict {
            key: RecordKey::Lease(partition),
        })
    }

    /// Writes a batch as [`LeaseStore::put_leases`] does, apart from the takes among it,
    /// which are refused.
    async fn put_leases_but_takes(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let mut takes = Vec::with_capacity(writes.len());
        for write in writes {
            takes.push(self.is_take(group, write).await);
        }
        let kept: Vec<LeaseWrite> = writes
            .iter()
            .zip(&takes)
            .filter(|(_, take)| !**take)
            .map(|(write, _)| write.clone())
            .collect();
        let mut written = if kept.is_empty() {
            self.receive().await;
            Vec::new()
        } else {
            self.put_leases_through(group, &kept).await?
        }
        .into_iter();
        let results = writes
            .iter()
            .zip(takes)
            .map(|(write, take)| {
                if take {
                    self.refuse_take(write.partition)
                } else {
                    written.next().expect("one result per write kept")
                }
            })
            .collect();
        Ok(results)
    }

    async fn put_leases_through(
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
}

impl<N: Network> FaultyStore<N> {
    /// A member listing as this node receives it: counted, and with the records its faults
    /// hide or garble taken out.
    fn members_as_seen<V>(
        &self,
        mut listing: Listing<Stored<NodeId, V>>,
    ) -> Listing<Stored<NodeId, V>> {
        self.network.rows_read(listing.records.len());
        if self.network.hides_members(self.holder) {
            listing.records.retain(|member| member.key == self.node);
        }
        if let Some(garbled) = self.network.garbled_member(self.holder) {
            if let Some(at) = listing.records.iter().position(|m| m.key == garbled) {
                listing.records.remove(at);
                listing.corrupt.push(StoreError::Corrupt {
                    key: RecordKey::Member(garbled),
                    reason: "unreadable to this node (injected)".to_owned(),
                });
            }
        }
        listing
    }
}

#[async_trait]
impl<N: Network> LeaseStore for FaultyStore<N> {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let listing = self.read(self.inner().list_leases(group)).await?;
        self.network.lease_listing(listing.records.len());
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
        if self.network.stops_taking(self.holder) {
            let write = LeaseWrite {
                partition,
                record: record.clone(),
                mode: mode.clone(),
            };
            if self.is_take(group, &write).await {
                self.receive().await;
                return self.refuse_take(partition);
            }
        }
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
        if self.network.stops_taking(self.holder) {
            return self.put_leases_but_takes(group, writes).await;
        }
        self.put_leases_through(group, writes).await
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

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        if self.network.stops_taking(self.holder) {
            for write in writes {
                if let TxnWrite::Lease(lease) = write {
                    if self.is_take(group, lease).await {
                        self.receive().await;
                        return self.refuse_take(lease.partition);
                    }
                }
            }
        }
        // Where in the batch this node's own member record is written, if it is.
        let own = writes
            .iter()
            .position(|write| matches!(write, TxnWrite::Member { node, .. } if node == &self.node));
        let conditioned = own.is_some_and(|at| {
            matches!(
                &writes[at],
                TxnWrite::Member {
                    mode: PutMode::Update(_),
                    ..
                }
            )
        });
        let holder = self.holder;
        let later = || {
            let (store, network, g, batch) = (
                self.inner().clone(),
                Arc::clone(&self.network),
                group.clone(),
                writes.to_vec(),
            );
            async move {
                let landed = store.transact(&g, &batch).await;
                if let (Some(at), Ok(versions)) = (own, landed) {
                    network.member_written(holder, versions.get(at).cloned(), conditioned);
                }
            }
        };
        let call = async {
            let landed = self.inner().transact(group, writes).await;
            if let (Some(at), Ok(versions)) = (own, &landed) {
                self.network
                    .member_written(holder, versions.get(at).cloned(), conditioned);
            }
            landed
        };
        self.write(writes.len(), call, later).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let listing = self.read(self.inner().list_members(group)).await?;
        Ok(self.members_as_seen(listing))
    }

    async fn list_member_heads(
        &self,
        group: &GroupName,
    ) -> Result<Listing<StoredMemberHead>, StoreError> {
        let listing = self.read(self.inner().list_member_heads(group)).await?;
        Ok(self.members_as_seen(listing))
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
        let own = (node == &self.node).then_some(self.holder);
        let conditioned = matches!(mode, PutMode::Update(_));
        let later = || {
            let (store, network, g, n, r, m) = (
                self.inner().clone(),
                Arc::clone(&self.network),
                group.clone(),
                node.clone(),
                record.clone(),
                mode.clone(),
            );
            async move {
                let landed = store.put_member(&g, &n, &r, m).await;
                if let (Some(holder), Ok(version)) = (own, landed) {
                    network.member_written(holder, Some(version), conditioned);
                }
            }
        };
        let call = async {
            let landed = self
                .inner()
                .put_member(group, node, record, mode.clone())
                .await;
            if let (Some(holder), Ok(version)) = (own, &landed) {
                self.network
                    .member_written(holder, Some(version.clone()), conditioned);
            }
            landed
        };
        self.write(1, call, later).await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let own = (node == &self.node).then_some(self.holder);
        let later = || {
            let (store, network, g, n, v) = (
                self.inner().clone(),
                Arc::clone(&self.network),
                group.clone(),
                node.clone(),
                version.clone(),
            );
            async move {
                let landed = store.delete_member(&g, &n, &v).await;
                if let (Some(holder), Ok(())) = (own, landed) {
                    network.member_written(holder, None, true);
                }
            }
        };
        let call = async {
            let landed = self.inner().delete_member(group, node, version).await;
            if let (Some(holder), Ok(())) = (own, &landed) {
                self.network.member_written(holder, None, true);
            }
            landed
        };
        self.write(1, call, later).await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        self.read(self.inner().get_group(group)).await
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
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
                let _ = store.put_group(&g, &r, m).await;
            }
        };
        let call = self.inner().put_group(group, record, mode.clone());
        self.write(1, call, later).await
    }

    /// Change notices pass through the node's gate: a paused process reads none.
    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        if !self.network.change_notices() {
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
