//! [`EtcdStore`]: the [`LeaseStore`] on an etcd v3 cluster.

use std::fmt;
use std::future::Future;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, KvClient, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use leasehold::batch::{put_in_parts, put_one_by_one};
use leasehold::{
    check_transaction, codec, ChangeFeed, GroupName, GroupRecord, LeaseRecord, LeaseStore,
    LeaseWrite, Listing, MemberRecord, NodeId, PartitionId, PutMode, RecordKey, StoreError, Stored,
    StoredGroup, StoredLease, StoredMember, TxnWrite, Version, MAX_TRANSACTION_WRITES,
};

use crate::error::{is_unreachable, map_error, never_sent};
use crate::keys::{parse_partition, Keys};
use crate::options::EtcdOptions;

/// etcd's default `--max-txn-ops`: a transaction with more compares or operations is refused.
pub const MAX_TXN_OPS: usize = 128;

// A transaction is one etcd transaction: its compares, puts and else-branch gets each fit.
const _: () = assert!(MAX_TRANSACTION_WRITES <= MAX_TXN_OPS);

/// How many endpoints a request tries before it reports the cluster unreachable.
const ATTEMPTS: u32 = 3;
const RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// Keys read per range request when listing, so a large group never needs one huge reply.
const LIST_PAGE: i64 = 1000;

/// A [`LeaseStore`] keeping each record as JSON under its own etcd key.
///
/// The version of a record is its `mod_revision`: etcd revisions are global and only grow, so
/// a key deleted and created again never gets a version it had before. Conditional writes are
/// transactions comparing `mod_revision` (or `create_revision == 0` to create). Cheap to
/// clone; clones share the connections.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    options: EtcdOptions,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EtcdStore").field(&self.options).finish()
    }
}

/// The store's URL, `etcd://HOST:PORT[,…]/PREFIX` or `etcd+https://…`.
impl fmt::Display for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.options.fmt(f)
    }
}

impl EtcdStore {
    /// A store using the cluster `options` name, keeping its records under their prefix.
    /// Connections are opened as needed: an unreachable cluster is reported by the first
    /// call, as [`StoreError::Unavailable`] or [`StoreError::Timeout`].
    pub async fn connect(options: EtcdOptions) -> Result<EtcdStore, StoreError> {
        options.validate()?;
        let limit = options.connect_timeout_limit() + options.request_timeout_limit();
        let connecting = Client::connect(options.endpoints(), Some(options.connect_options()?));
        let client = tokio::time::timeout(limit, connecting)
            .await
            .map_err(|_| StoreError::Timeout(limit))?
            .map_err(|e| map_error("connect to etcd", limit, e))?;
        Ok(EtcdStore {
            client,
            keys: Keys::new(options.key_prefix()),
            options,
        })
    }

    /// A store using the cluster an `etcd://` or `etcd+https://` URL names, with TLS files
    /// from the environment; see [`EtcdOptions::from_url`] and [`EtcdOptions::with_env`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), leasehold::StoreError> {
    /// let store = leasehold_etcd::EtcdStore::from_url("etcd://etcd1:2379,etcd2:2379/apps").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_url(url: &str) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect(EtcdOptions::from_url(url)?.with_env()?).await
    }

    /// The cluster, prefix and settings this store was made with.
    pub fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// Runs one request, bounded by the request timeout even while no endpoint is reachable
    /// (when the client itself would wait for one to come back).
    ///
    /// A request that finds its endpoint unreachable is sent again, to another member if one
    /// is up, within the same time limit: a read whenever the connection failed, a write only
    /// when the connection was refused. A write whose connection broke later may have been
    /// applied, and sending it again would report the writer's own success as a conflict.
    async fn call<T, F>(
        &self,
        action: &str,
        kind: Request,
        mut request: impl FnMut(KvClient) -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let limit = self.options.request_timeout_limit();
        let deadline = tokio::time::Instant::now() + limit;
        let mut attempt = 1;
        loop {
            match tokio::time::timeout_at(deadline, request(self.client.kv_client())).await {
                Err(_) => return Err(StoreError::Timeout(limit)),
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(error)) if attempt < ATTEMPTS && kind.may_resend(&error) => {
                    attempt += 1;
                    tokio::time::sleep(RETRY_DELAY).await;
                }
                Ok(Err(error)) => return Err(map_error(action, limit, error)),
            }
        }
    }

    /// The key and value a lease record is written as, by every path that writes one.
    fn lease_entry(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
    ) -> (String, Vec<u8>) {
        (self.keys.lease(group, partition), codec::encode(record))
    }

    /// The key and value a member record is written as, by every path that writes one.
    fn member_entry(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
    ) -> (String, Vec<u8>) {
        (self.keys.member(group, node), codec::encode(record))
    }

    async fn get_one(&self, key: String) -> Result<Option<KeyValue>, StoreError> {
        let mut response = self
            .call("get", Request::Read, |mut kv| {
                let key = key.clone();
                async move { kv.get(key, None).await }
            })
            .await?;
        Ok(response.take_kvs().into_iter().next())
    }

    /// Every key under `prefix`, in key order, read page by page at one revision so the
    /// listing is a consistent snapshot.
    async fn list_prefix(&self, prefix: String) -> Result<Vec<KeyValue>, StoreError> {
        let end = range_end(&prefix);
        let mut start = prefix.into_bytes();
        let mut revision = 0;
        let mut all = Vec::new();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(LIST_PAGE);
            if revision != 0 {
                options = options.with_revision(revision);
            }
            let mut response = self
                .call("list", Request::Read, |mut kv| {
                    let (key, options) = (start.clone(), options.clone());
                    async move { kv.get(key, Some(options)).await }
                })
                .await?;
            if revision == 0 {
                revision = response.header().map_or(0, |h| h.revision());
            }
            let more = response.more();
            let page = response.take_kvs();
            match page.last() {
                Some(last) if more => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => {
                    all.extend(page);
                    return Ok(all);
                }
            }
            all.extend(page);
        }
    }

    async fn run_txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.call("transaction", Request::Write, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// Writes `value` at `key` under `mode`; `name` is the record errors report.
    async fn put_value(
        &self,
        key: String,
        name: impl FnOnce() -> RecordKey,
        value: Vec<u8>,
        mode: &PutMode,
    ) -> Result<Version, StoreError> {
        let put = TxnOp::put(key.clone(), value, None);
        let txn = Txn::new()
            .when([condition(&key, mode)])
            .and_then([put])
            .or_else([TxnOp::get(key, None)]);
        let response = self.run_txn(txn).await?;
        if response.succeeded() {
            return written_version(&response);
        }
        Err(match mode {
            PutMode::Create => StoreError::AlreadyExists { key: name() },
            PutMode::Update(_) => refusal(&response, name()),
        })
    }

    async fn delete_value(
        &self,
        key: String,
        name: impl FnOnce() -> RecordKey,
        version: &Version,
    ) -> Result<(), StoreError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                expected_revision(version),
            )])
            .and_then([TxnOp::delete(key.clone(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.run_txn(txn).await?;
        if response.succeeded() {
            Ok(())
        } else {
            Err(refusal(&response, name()))
        }
    }

    /// Writes one chunk of a batch (at most [`MAX_TXN_OPS`] writes).
    ///
    /// A transaction either applies all its writes or none, and when one compare fails etcd
    /// does not say which. So the chunk is first tried as one transaction holding every
    /// compare, which is the common case of a node renewing leases nobody else touched: one
    /// round trip for all. Only if that fails is each write tried alone, which gives the
    /// per-write answers the contract asks for.
    async fn put_chunk(
        &self,
        group: &GroupName,
        chunk: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        debug_assert!(chunk.len() <= MAX_TXN_OPS);
        if chunk.len() > 1 && !has_repeated_partition(chunk) {
            let (compares, puts): (Vec<_>, Vec<_>) = chunk
                .iter()
                .map(|write| {
                    let (key, value) = self.lease_entry(group, write.partition, &write.record);
                    let compare = condition(&key, &write.mode);
                    (compare, TxnOp::put(key, value, None))
                })
                .unzip();
            let response = self
                .run_txn(Txn::new().when(compares).and_then(puts))
                .await?;
            if response.succeeded() {
                let version = written_version(&response)?;
                return Ok(chunk.iter().map(|_| Ok(version.clone())).collect());
            }
        }
        put_one_by_one(self, group, chunk).await
    }

    /// Writes every record of a transaction in one etcd transaction, which compares each
    /// record's revision and puts them all, or else reads each record back at the revision the
    /// compares saw, so that the refusal can name a record whose condition failed.
    async fn put_together(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        let mut compares = Vec::with_capacity(writes.len());
        let mut puts = Vec::with_capacity(writes.len());
        let mut gets = Vec::with_capacity(writes.len());
        for write in writes {
            let (key, value) = match write {
                TxnWrite::Lease(lease) => self.lease_entry(group, lease.partition, &lease.record),
                TxnWrite::Member { node, record, .. } => self.member_entry(group, node, record),
            };
            compares.push(condition(&key, write.mode()));
            gets.push(TxnOp::get(key.clone(), None));
            puts.push(TxnOp::put(key, value, None));
        }
        let txn = Txn::new().when(compares).and_then(puts).or_else(gets);
        let response = self.run_txn(txn).await?;
        if response.succeeded() {
            let version = written_version(&response)?;
            return Ok(vec![version; writes.len()]);
        }
        Err(transaction_refusal(writes, &response))
    }

    fn decode_lease(&self, group: &GroupName, kv: &KeyValue) -> Result<StoredLease, StoreError> {
        let leases = self.keys.leases(group);
        let rest = kv.key().strip_prefix(leases.as_bytes()).unwrap_or_default();
        let partition = std::str::from_utf8(rest)
            .ok()
            .and_then(parse_partition)
            .ok_or_else(|| StoreError::Corrupt {
                key: RecordKey::Stored(String::from_utf8_lossy(kv.key()).into_owned()),
                reason: "not a partition number".to_owned(),
            })?;
        let value = codec::decode(partition, kv.value())?;
        Ok(Stored {
            key: partition,
            value,
            version: version_of(kv),
        })
    }

    fn decode_member(&self, group: &GroupName, kv: &KeyValue) -> Result<StoredMember, StoreError> {
        let members = self.keys.members(group);
        let rest = kv
            .key()
            .strip_prefix(members.as_bytes())
            .unwrap_or_default();
        let node = std::str::from_utf8(rest)
            .ok()
            .and_then(|name| NodeId::new(name).ok())
            .ok_or_else(|| StoreError::Corrupt {
                key: RecordKey::Stored(String::from_utf8_lossy(kv.key()).into_owned()),
                reason: "not a node name".to_owned(),
            })?;
        let value = codec::decode(&node, kv.value())?;
        Ok(Stored {
            key: node,
            value,
            version: version_of(kv),
        })
    }
}

/// What a request does, which decides when it may be sent again.
#[derive(Clone, Copy)]
enum Request {
    Read,
    Write,
}

impl Request {
    fn may_resend(self, error: &etcd_client::Error) -> bool {
        match self {
            Request::Read => is_unreachable(error),
            Request::Write => never_sent(error),
        }
    }
}

/// The compare a write under `mode` depends on.
fn condition(key: &str, mode: &PutMode) -> Compare {
    match mode {
        PutMode::Create => Compare::create_revision(key, CompareOp::Equal, 0),
        PutMode::Update(version) => {
            Compare::mod_revision(key, CompareOp::Equal, expected_revision(version))
        }
    }
}

/// The revision to compare against. A missing key compares as revision 0, so a version that
/// is not a revision (0, a tag, or out of range) becomes -1, which matches no key.
fn expected_revision(version: &Version) -> i64 {
    match version.as_number().map(i64::try_from) {
        Some(Ok(revision)) if revision > 0 => revision,
        _ => -1,
    }
}

fn version_of(kv: &KeyValue) -> Version {
    Version::from_number(kv.mod_revision().unsigned_abs())
}

/// The version a successful write got: the revision of its transaction.
fn written_version(response: &TxnResponse) -> Result<Version, StoreError> {
    match response.header().map(|h| h.revision()) {
        Some(revision) if revision > 0 => Ok(Version::from_number(revision.unsigned_abs())),
        _ => Err(StoreError::Unavailable {
            message: "etcd reply carried no revision".to_owned(),
            source: None,
        }),
    }
}

/// Why a conditional update or delete was refused, from the `get` in its else branch.
fn refusal(response: &TxnResponse, key: RecordKey) -> StoreError {
    let exists = response.op_responses().iter().any(|op| match op {
        TxnOpResponse::Get(get) => !get.kvs().is_empty(),
        _ => false,
    });
    if exists {
        StoreError::Conflict { key }
    } else {
        StoreError::NotFound { key }
    }
}

/// Why a transaction was refused: the first write whose record, as the `get`s of the else
/// branch read it at the revision the compares saw, fails its condition.
fn transaction_refusal(writes: &[TxnWrite], response: &TxnResponse) -> StoreError {
    let found = response.op_responses().into_iter().map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().map(KeyValue::mod_revision),
        _ => None,
    });
    for (write, revision) in writes.iter().zip(found) {
        let key = write.key();
        match (write.mode(), revision) {
            (PutMode::Create, Some(_)) => return StoreError::AlreadyExists { key },
            (PutMode::Update(_), None) => return StoreError::NotFound { key },
            (PutMode::Update(version), Some(revision))
                if revision != expected_revision(version) =>
            {
                return StoreError::Conflict { key }
            }
            _ => {}
        }
    }
    // The compares and the gets run at one revision, so one of the writes fails above.
    StoreError::Unavailable {
        message: "etcd refused a transaction whose every condition held".to_owned(),
        source: None,
    }
}

/// The end of the range of keys starting with `prefix`.
fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    // Prefixes here end in '/', never 0xff, so incrementing the last byte cannot overflow.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// etcd refuses a transaction that writes one key twice.
fn has_repeated_partition(writes: &[LeaseWrite]) -> bool {
    let mut partitions: Vec<PartitionId> = writes.iter().map(|w| w.partition).collect();
    partitions.sort_unstable();
    partitions.windows(2).any(|pair| pair[0] == pair[1])
}

#[async_trait]
impl LeaseStore for EtcdStore {
    async fn list_leases(&self, group: &GroupName) -> Result<Listing<StoredLease>, StoreError> {
        let values = self.list_prefix(self.keys.leases(group)).await?;
        Ok(values
            .iter()
            .map(|kv| self.decode_lease(group, kv))
            .collect())
    }

    async fn get_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<Option<StoredLease>, StoreError> {
        let found = self.get_one(self.keys.lease(group, partition)).await?;
        found.map(|kv| self.decode_lease(group, &kv)).transpose()
    }

    async fn put_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let (key, value) = self.lease_entry(group, partition, record);
        self.put_value(key, || RecordKey::Lease(partition), value, &mode)
            .await
    }

    async fn put_leases(
        &self,
        group: &GroupName,
        writes: &[LeaseWrite],
    ) -> Result<Vec<Result<Version, StoreError>>, StoreError> {
        put_in_parts(writes, MAX_TXN_OPS, |chunk| self.put_chunk(group, chunk)).await
    }

    async fn delete_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let key = self.keys.lease(group, partition);
        self.delete_value(key, || RecordKey::Lease(partition), version)
            .await
    }

    async fn transact(
        &self,
        group: &GroupName,
        writes: &[TxnWrite],
    ) -> Result<Vec<Version>, StoreError> {
        check_transaction(writes)?;
        self.put_together(group, writes).await
    }

    async fn list_members(&self, group: &GroupName) -> Result<Listing<StoredMember>, StoreError> {
        let values = self.list_prefix(self.keys.members(group)).await?;
        Ok(values
            .iter()
            .map(|kv| self.decode_member(group, kv))
            .collect())
    }

    async fn get_member(
        &self,
        group: &GroupName,
        node: &NodeId,
    ) -> Result<Option<StoredMember>, StoreError> {
        let found = self.get_one(self.keys.member(group, node)).await?;
        found.map(|kv| self.decode_member(group, &kv)).transpose()
    }

    async fn put_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        record: &MemberRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        record.check(node)?;
        let (key, value) = self.member_entry(group, node, record);
        self.put_value(key, || RecordKey::from(node), value, &mode)
            .await
    }

    async fn delete_member(
        &self,
        group: &GroupName,
        node: &NodeId,
        version: &Version,
    ) -> Result<(), StoreError> {
        let key = self.keys.member(group, node);
        self.delete_value(key, || RecordKey::from(node), version)
            .await
    }

    async fn get_group(&self, group: &GroupName) -> Result<Option<StoredGroup>, StoreError> {
        let found = self.get_one(self.keys.group_record(group)).await?;
        found
            .map(|kv| {
                Ok(Stored {
                    key: group.clone(),
                    value: codec::decode(RecordKey::Group, kv.value())?,
                    version: version_of(&kv),
                })
            })
            .transpose()
    }

    async fn put_group(
        &self,
        group: &GroupName,
        record: &GroupRecord,
        mode: PutMode,
    ) -> Result<Version, StoreError> {
        let key = self.keys.group_record(group);
        self.put_value(key, || RecordKey::Group, codec::encode(record), &mode)
            .await
    }

    async fn watch(&self, group: &GroupName) -> Result<ChangeFeed, StoreError> {
        crate::watch::start(
            self.client.clone(),
            self.keys.group(group),
            self.options.request_timeout_limit(),
        )
        .await
    }
}
