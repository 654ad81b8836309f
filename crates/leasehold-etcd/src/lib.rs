//! An etcd v3 backend for [leasehold](leasehold): [`EtcdStore`] keeps each lease and member
//! record as JSON under its own key and changes it only in transactions that compare the
//! key's `mod_revision`, so every node of a fleet spread over many machines sees one lease
//! table with compare-and-set.
//!
//! Layout under the store's prefix:
//!
//! ```text
//! <prefix>/<group>/lease/0000000007     {"owner":"node-1","epoch":3,"state":"held",...}
//! <prefix>/<group>/member/node-1        {"weight":1,"draining":false,...}
//! ```
//!
//! Partition numbers are zero-padded to ten digits so etcd's key order is numeric order.
//! [`LeaseStore::watch`](leasehold::LeaseStore::watch) is an etcd watch on the group's prefix.
//!
//! TLS: `https://` endpoints, or [`EtcdOptions::ca_file`] (with bare `host:port` endpoints),
//! connect over TLS and verify the server's certificate against that CA file or the Mozilla
//! roots; [`EtcdOptions::client_certificate`] adds a client certificate. User and password
//! authentication is supported through [`EtcdOptions::credentials`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold::StoreError> {
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
//! use leasehold_etcd::{EtcdOptions, EtcdStore};
//!
//! let endpoints = vec!["127.0.0.1:2379".to_owned(), "127.0.0.1:22379".to_owned()];
//! let store = EtcdStore::connect(&endpoints, "/leasehold", EtcdOptions::default()).await?;
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

pub use options::{EtcdCredentials, EtcdOptions};
pub use store::{EtcdStore, MAX_TXN_OPS};
