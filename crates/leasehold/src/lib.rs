//! leasehold divides N partitions among a changing set of servers so that no partition is
//! ever served by two servers at once.

pub mod admin;
mod clock;
pub mod codec;
mod config;
mod error;
mod memory;
mod participant;
pub mod planner;
mod record;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

pub use clock::{Clock, DriftClock, SeededRng, Sleep, TokioClock};
pub use config::{ConfigError, ParticipantConfig};
pub use error::{BoxError, StoreError};
pub use memory::MemoryStore;
pub use participant::{Callbacks, Environment, LeaseGuard, Loss, LossReason, Participant, Status};
pub use record::{
    unix_ms_now, LeaseRecord, LeaseState, MemberRecord, Stored, StoredLease, StoredMember,
};
pub use store::{
    lease_key, member_key, Change, ChangeFeed, LeaseStore, LeaseWrite, Listing, PutMode,
    TimeoutStore,
};
pub use types::{Epoch, GroupName, InvalidName, NodeId, PartitionId, Version};
