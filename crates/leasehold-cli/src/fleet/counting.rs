//! A store that counts what goes through it: calls, records written and read, and how long
//! each write took, so that a fleet run can say what it cost its store from the clients'
//! side.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use leasehold::{ChangeFeed, GroupRecord};
use leasehold::{
    GroupName, LeaseRecord, LeaseStore, LeaseWrite, Listing, MemberRecord, NodeId, PartitionId,
    PutMode, StoreError, StoredGroup, StoredLease, StoredMember, TxnWrite, Version,
};
use serde::Serialize;

/// The most write latencies kept: enough for percentiles of a long run, bounded in memory.
const MAX_SAMPLES: usize = 1 << 20;

/// Counters, read at any time.
#[derive(Debug, Default)]
pub struct Counters {
    write_calls: AtomicU64,
    records_written: AtomicU64,
    read_calls: AtomicU64,
    records_read: AtomicU64,
    failed_calls: AtomicU64,
    reads_by_kind: [AtomicU64; ReadKind::COUNT],
    writes: Latencies,
    /// Writes of member records alone: by session, the renewals.
    member_writes: Latencies,
    failed_member_writes: AtomicU64,
}

/// Durations of calls, in microseconds, up to [`MAX_SAMPLES`] of them.
#[derive(Debug, Default)]
struct Latencies(Mutex<Vec<u32>>);

impl Latencies {
    fn add(&self, started: Instant) {
        let micros = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
        let mut samples = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() < MAX_SAMPLES {
            samples.push(micros);
        }
    }

    /// The median and the 99th percentile, if there was a call.
    fn percentiles(&self) -> Option<(Duration, Duration)> {
        let mut samples = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let index = ((samples.len() - 1) as f64 * q).round() as usize;
            Duration::from_micros(u64::from(samples[index]))
        };
        Some((at(0.5), at(0.99)))
    }
}

/// What a read call asked for: which reads a fleet makes most tells where its reading cost
/// comes from.
#[derive(Debug, Clone, Copy)]
enum ReadKind {
    LeaseListing,
    LeaseGet,
    LeaseBatch,
    MemberListing,
    MemberGet,
    GroupGet,
}

impl ReadKind {
    const COUNT: usize = 6;
}

/// Read calls by what they asked for.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ReadsByKind {
    /// Listings of the lease table.
    pub lease_listings: u64,
    /// Reads of one lease record.
    pub lease_gets: u64,
    /// Reads of several lease records in one call (up to 32: a starting node's stripe, the
    /// rows a hand-off names, the leases held read back).
    pub lease_batches: u64,
    /// Listings of the member records.
    pub member_listings: u64,
    /// Reads of one member record.
    pub member_gets: u64,
    /// Reads of the group record.
    pub group_gets: u64,
}

impl ReadsByKind {
    fn of(counts: [u64; ReadKind::COUNT]) -> ReadsByKind {
        let [lease_listings, lease_gets, lease_batches, member_listings, member_gets, group_gets] =
            counts;
        ReadsByKind {
            lease_listings,
            lease_gets,
            lease_batches,
            member_listings,
            member_gets,
            group_gets,
        }
    }

    fn counts(self) -> [u64; ReadKind::COUNT] {
        [
            self.lease_listings,
            self.lease_gets,
            self.lease_batches,
            self.member_listings,
            self.member_gets,
            self.group_gets,
        ]
    }

    /// The kinds with their names, for a report.
    pub fn named(self) -> [(&'static str, u64); ReadKind::COUNT] {
        let [a, b, c, d, e, f] = self.counts();
        [
            ("lease listings", a),
            ("lease gets", b),
            ("lease batch reads", c),
            ("member listings", d),
            ("member gets", e),
            ("group gets", f),
        ]
    }
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Snapshot {
    /// Calls that write (puts, batches, transactions, deletes).
    pub write_calls: u64,
    /// Records those calls carried.
    pub records_written: u64,
    /// Calls that read (gets and listings).
    pub read_calls: u64,
    /// Records those calls returned.
    pub records_read: u64,
    /// Calls that failed, of either kind.
    pub failed_calls: u64,
    /// The read calls, by what they asked for.
    pub reads: ReadsByKind,
}

impl Snapshot {
    /// What happened between `earlier` and this snapshot.
    pub fn since(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            write_calls: self.write_calls - earlier.write_calls,
            records_written: self.records_written - earlier.records_written,
            read_calls: self.read_calls - earlier.read_calls,
            records_read: self.records_read - earlier.records_read,
            failed_calls: self.failed_calls - earlier.failed_calls,
            reads: ReadsByKind::of(std::array::from_fn(|i| {
                self.reads.counts()[i] - earlier.reads.counts()[i]
            })),
        }
    }
}

impl Counters {
    /// The counts so far.
    pub fn snapshot(&self) -> Snapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Snapshot {
            write_calls: load(&self.write_calls),
            records_written: load(&self.records_written),
            read_calls: load(&self.read_calls),
            records_read: load(&self.records_read),
            failed_calls: load(&self.failed_calls),
            reads: ReadsByKind::of(std::array::from_fn(|i| load(&self.reads_by_kind[i]))),
        }
    }

    /// The median and 99th percentile of the write calls' durations so far.
    pub fn write_latency(&self) -> Option<(Duration, Duration)> {
        self.writes.percentiles()
    }

    /// The median and 99th percentile of the member record writes' durations so far: with
    /// session leases, how long renewals take.
    pub fn member_write_latency(&self) -> Option<(Duration, Duration)> {
        self.member_writes.percentiles()
    }

    /// Member record writes that failed so far.
    pub fn failed_member_writes(&self) -> u64 {
        self.failed_member_writes.load(Ordering::Relaxed)
    }

    fn wrote<T>(&self, records: usize, started: Instant, result: &Result<T, StoreError>) {
        self.write_calls.fetch_add(1, Ordering::Relaxed);
        self.records_written
            .fetch_add(records as u64, Ordering::Relaxed);
        if result.is_err() {
            self.failed_calls.fetch_add(1, Ordering::Relaxed);
        }
        self.writes.add(started);
    }

    fn wrote_member<T>(&self, started: Instant, result: &Result<T, StoreError>) {
        self.wrote(1, started, result);
        self.member_writes.add(started);
        if result.is_err() {
            self.failed_member_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read<T>(
        &self,
        kind: ReadKind,
        result: &Result<T, StoreError>,
        records: impl FnOnce(&T) -> usize,
    ) {
        self.read_calls.fetch_add(1, Ordering::Relaxed);
        self.reads_by_kind[kind as usize].fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(value) => {
                self.records_read
                    .fetch_add(records(value) as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.failed_calls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A store counting into shared [`Counters`].
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn LeaseStore>,
    counters: Arc<Counters>,
}

impl CountingStore {
    /// Wraps `inner`, counting into `counters`.
    pub fn new(inner: Arc<dyn LeaseStore>, counters: Arc<Counters>) -> CountingStore {
        CountingStore { inner, counters }
    }
}

fn listed<T>(listing: &Listing<T>) -> usize {
    listing.records.len() + listing.corrupt.len()
}

#[async_trait]
impl LeaseStore for CountingStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let result = self.inner.list_leases(group).await;
        self.counters.read(ReadKind::LeaseListing, &result, listed);
        result
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let result = self.inner.get_lease(group, partition).await;
        self.counters.read(ReadKind::LeaseGet, &result, |found| {
            usize::from(found.is_some())
        });
        result
    }

    async fn get_leases(
        &self,
        group: &GroupName,
        partitions: &[PartitionId],
    ) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
        let result = self.inner.get_leases(group, partitions).await;
        self.counters.read(ReadKind::LeaseBatch, &result, |rows| {
            rows.iter().filter(|(_, found)| found.is_some()).count()
        });
        result
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let started = Instant::now();
        let result = self.inner.put_lease(group, partition, record, mode).await;
        self.counters.wrote(1, started, &result);
        result
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        let started = Instant::now();
        let result = self.inner.put_leases(group, writes).await;
        self.counters.wrote(writes.len(), started, &result);
        result
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.inner.delete_lease(group, partition, version).await;
        self.counters.wrote(1, started, &result);
        result
    }

    async fn delete_leases(
        &self,
        group: &GroupName,
        deletes: &[(PartitionId, Version)],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let started = Instant::now();
        let result = self.inner.delete_leases(group, deletes).await;
        self.counters.wrote(deletes.len(), started, &result);
        result
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let started = Instant::now();
        let result = self.inner.transact(group, writes).await;
        self.counters.wrote(writes.len(), started, &result);
        result
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let result = self.inner.list_members(group).await;
        self.counters.read(ReadKind::MemberListing, &result, listed);
        result
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let result = self.inner.get_member(group, node).await;
        self.counters.read(ReadKind::MemberGet, &result, |found| {
            usize::from(found.is_some())
        });
        result
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let started = Instant::now();
        let result = self.inner.put_member(group, node, record, mode).await;
        self.counters.wrote_member(started, &result);
        result
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.inner.delete_member(group, node, version).await;
        self.counters.wrote(1, started, &result);
        result
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let result = self.inner.get_group(group).await;
        self.counters.read(ReadKind::GroupGet, &result, |found| {
            usize::from(found.is_some())
        });
        result
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let started = Instant::now();
        let result = self.inner.put_group(group, record, mode).await;
        self.counters.wrote(1, started, &result);
        result
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        self.inner.watch(group).await
    }
}
