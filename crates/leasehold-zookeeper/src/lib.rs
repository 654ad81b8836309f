//! A [`leasehold::LeaseStore`] in Apache ZooKeeper (3.6 or later), on the
//! [`zookeeper-client`](https://docs.rs/zookeeper-client) crate.
//!
//! Every record is a persistent znode holding the record as JSON:
//!
//! ```text
//! <prefix>/<group>/lease/0000000007     one per partition, zero-padded to 10 digits
//! <prefix>/<group>/member/<node>        one per live node
//! <prefix>/<group>/group                the group record: timings, format, epoch floor
//! ```
//!
//! A record's version is the znode's `mzxid`, the id of the transaction that last modified
//! it, which the ensemble never reuses, so a record deleted and created again never shows an
//! old version. Conditional writes read the znode's stat, compare its `mzxid`, and write
//! conditioned on the znode `version` read with it, which the server checks atomically.
//! One node's renewals go out as one multi-operation, and so does each
//! [`LeaseStore::transact`](leasehold::LeaseStore::transact), applied whole or not at all.
//! [`LeaseStore::watch`](leasehold::LeaseStore::watch) uses a persistent recursive watch on
//! the group.
//!
//! # Sessions are not leases
//!
//! Leases are never ephemeral znodes and never depend on the ZooKeeper session: a lease is
//! held while its owner keeps renewing the record, timed by the owner's own clock, as with
//! every other store. The session only carries requests. When it expires (for example
//! after the ensemble was unreachable for longer than the session timeout) the next call
//! establishes a new one; calls made while no session can be established fail with
//! [`StoreError::Unavailable`](leasehold::StoreError::Unavailable) within the call timeout.
//!
//! # Connecting
//!
//! [`ZookeeperOptions::from_url`] reads `zk://HOST:PORT[,HOST:PORT…][/PREFIX]` (the prefix
//! defaults to `/leasehold`); [`ZookeeperStore::connect`] takes the options, and
//! [`ZookeeperStore::from_url`] does both. The store reads no environment variables.
//!
//! ```no_run
//! # async fn example() -> Result<(), leasehold::StoreError> {
//! use std::time::Duration;
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
//! use leasehold_zookeeper::{ZookeeperOptions, ZookeeperStore};
//!
//! let options = ZookeeperOptions::from_url("zk://zk1:2181,zk2:2181,zk3:2181/leasehold")?
//!     .call_timeout(Duration::from_secs(3));
//! let store = ZookeeperStore::connect(options).await?;
//! let group = GroupName::new("orders").expect("valid group name");
//! store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
//!     .await?;
//! let listing = store.list_leases(&group).await?;
//! println!("{} leases", listing.records.len());
//! # Ok(())
//! # }
//! ```

mod batch;
mod connection;
mod options;
mod paths;
mod records;
mod shared;
mod store;
mod transaction;
mod watch;

pub use options::ZookeeperOptions;
pub use store::ZookeeperStore;
