//! An etcd v3 backend for [leasehold]: [`EtcdStore`] keeps each lease, member and
//! group record as JSON under its own key and changes it only in transactions that compare the
//! key's `mod_revision`, so every node of a fleet spread over many machines sees one lease
//! table with compare-and-set.
//!
//! Layout under the store's prefix:
//!
//! ```text
//! <prefix>/<group>/lease/0000000007     {"owner":"node-1","epoch":3,"state":"held",...}
//! <prefix>/<group>/member/node-1        {"weight":1,"draining":false,...}
//! <prefix>/<group>/group                {"format":1,"timings":{...},"epoch_floor":0,...}
//! ```
//!
//! Partition numbers are zero-padded to ten digits so etcd's key order is numeric order.
//! [`LeaseStore::watch`](leasehold::LeaseStore::watch) is an etcd watch on the group's prefix.
//!
//! # Connecting
//!
//! [`EtcdOptions::from_url`] reads `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` (the prefix
//! defaults to `/leasehold`), or `etcd+https://…` to connect over TLS; the scheme alone
//! decides. Over TLS, [`EtcdOptions::with_env`] takes the CA that verifies the servers from
//! `LEASEHOLD_ETCD_CA` (the Mozilla roots when unset) and a client certificate from
//! `LEASEHOLD_ETCD_CERT` and `LEASEHOLD_ETCD_KEY`, for servers started with
//! `--client-cert-auth`. [`EtcdStore::connect`] takes the options, and [`EtcdStore::from_url`]
//! does all three. User and password authentication is set with
//! [`EtcdOptions::credentials`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold::StoreError> {
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
//! use leasehold_etcd::{EtcdOptions, EtcdStore};
//!
//! let options = EtcdOptions::from_url("etcd+https://etcd1:2379,etcd2:2379/leasehold")?
//!     .with_env()?;
//! let store = EtcdStore::connect(options).await?;
//! let group = GroupName::new("orders").unwrap();
//! let version = store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
//!     .await?;
//! println!("partition 0 created at revision {version}");
//! # Ok(())
//! # }
//! ```

mod error;
mod keys;
mod options;
mod store;
mod watch;

pub use options::EtcdOptions;
pub use store::{EtcdStore, MAX_TXN_OPS};
