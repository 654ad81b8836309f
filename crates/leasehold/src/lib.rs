//! leasehold divides N partitions of a workload (shards, buckets, queues) among a changing set
//! of servers so that **no partition is ever served by two servers at once**, a dead
//! server's partitions are taken over quickly, and the load stays balanced.
//!
//! Ownership is kept as one lease record per partition in any store with an atomic
//! compare-and-set ([`LeaseStore`]): [`MemoryStore`] here, embedded SQLite, PostgreSQL, etcd,
//! ZooKeeper or Azure Table Storage in the backend crates.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId, Router};
//!
//! let store = Arc::new(MemoryStore::new());
//! let group = leasehold::GroupName::new("orders").unwrap();
//! admin::init(&*store, &group, 16).await.unwrap();
//!
//! // Two servers join the group; each takes its fair share.
//! let start = |name: &str| {
//!     let config = ParticipantConfig::fast(NodeId::new(name).unwrap(), 16).with_group(group.clone());
//!     Participant::start(store.clone(), config, ()).unwrap()
//! };
//! let (a, b) = (start("server-a"), start("server-b"));
//! tokio::time::sleep(Duration::from_secs(3)).await;
//! assert_eq!(a.owned().len() + b.owned().len(), 16);
//!
//! // A client routes a key to its owner.
//! let router = Router::connect(store.clone(), group.clone(), 16).await.unwrap();
//! let (partition, owner) = router.owner_of_key("order-42");
//! let server = if owner.as_ref() == Some(a.node()) { &a } else { &b };
//!
//! // The server checks its lease before every state-changing step, and passes the epoch
//! // along as a fencing token.
//! let lease = server.lease(partition).expect("the owner holds the lease");
//! println!("order-42 -> partition {partition} on {} (token {})", server.node(), lease.epoch());
//!
//! a.shutdown().await; // graceful hand-off: b takes a's partitions at its next scan
//! tokio::time::sleep(Duration::from_secs(1)).await;
//! assert_eq!(b.owned().len(), 16);
//! b.shutdown().await;
//! # });
//! ```
//!
//! # How it stays safe
//!
//! A holder renews each lease with a compare-and-set on the version it last wrote and stops
//! serving `lease_validity` after it *sent* the last successful renewal, by its own monotonic
//! clock, whether or not the store answers. Another node takes a lease only after seeing its
//! record unchanged for `acquire_after`, with `acquire_after × (1 − ρ) > lease_validity ×
//! (1 + ρ)` for a clock-rate drift bound ρ, or at once when the holder released it. Every
//! acquisition issues a higher epoch, a fencing token that lets a resource refuse a holder
//! that was paused past its lease. Because the rule relates two nodes' timings, each group
//! keeps one [`GroupRecord`] that every node must fit before it takes anything, with the
//! record format and the epoch floor that keeps tokens rising when records are deleted and
//! created again.
//!
//! The pieces: [`ParticipantConfig`] (timings, validated), [`Participant`] (the background
//! lease loop), [`group`] (the group record), [`planner`] (the pure decision function it runs), [`Router`] (key → owner for
//! clients), [`admin`] (operator actions), [`store_url`] (what the store crates share to read
//! their URLs) and, with feature `testing`, the store conformance suite.

pub mod admin;
pub mod backoff;
mod clock;
pub mod codec;
mod config;
pub mod duration;
mod error;
pub mod group;
mod memory;
pub mod metrics;
mod participant;
pub mod planner;
mod record;
mod router;
mod store;
pub mod store_url;
pub use store::batch;
pub use store::reads;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

pub use clock::{Clock, DriftClock, SeededRng, Sleep, TokioClock};
#[cfg(feature = "negative-controls")]
pub use config::NegativeControls;
pub use config::{ConfigError, ParticipantConfig};
pub use error::{BoxError, StoreError};
pub use group::{
    GroupMismatch, GroupRecord, GroupTimings, LeaseMode, StoredGroup, FORMAT_VERSION,
    MAX_RESTART_WINDOW_FACTOR,
};
pub use memory::MemoryStore;
pub use participant::{
    Callbacks, Environment, Halt, JoinError, LeaseEvent, LeaseEvents, LeaseGuard, Loss, Missed,
    Participant, Status, WorkPermit,
};
pub use record::{
    replaced_mark, unix_ms_now, IntoHeads, InvalidRecord, LeaseRecord, LeaseState, MemberHead,
    MemberRecord, Stored, StoredLease, StoredMember, StoredMemberHead,
};
pub use router::{fnv1a_32, partition_for_key, NotOwner, Route, Router, ROUTER_STORE_TIMEOUT};
pub use store::{
    check_transaction, Change, ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode, TimeoutStore,
    TxnWrite, MAX_TRANSACTION_WRITES,
};
pub use types::{
    is_valid_load, Epoch, GroupName, InvalidName, LossReason, NodeId, PartitionId, RecordKey,
    Version, MAX_LOAD,
};
