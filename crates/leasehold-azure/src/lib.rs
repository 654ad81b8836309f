//! A [`leasehold::LeaseStore`] in Azure Table Storage (or the Azurite emulator), over its REST
//! API with Shared Key authorization.
//!
//! One table holds every group: PartitionKey is the group, RowKey is
//! `lease-<partition, 10 digits>` or `member-<node>`, and each record field is a column. The
//! group record is the entity with RowKey `group`, kept whole as JSON in its `record` column
//! so that fields a newer version added survive.
//! A record's version is its ETag; conditional writes send `If-Match`, creates are inserts
//! that fail if the entity exists. One node's renewals go out as entity-group transactions
//! (`$batch`, up to 100 entities each, all of one group), and so does each
//! [`LeaseStore::transact`](leasehold::LeaseStore::transact) call: a group's leases and members
//! share its PartitionKey, so a lease and its holder's session change in one transaction,
//! whose failed operation the service names by index. Throttling (HTTP 429 and 503)
//! becomes [`StoreError::Throttled`](leasehold::StoreError::Throttled) so that callers back
//! off their scans. The table service has no change notifications: readers poll.
//!
//! The service derives an entity's ETag from the time of its last write, so a key never
//! shows the same ETag twice, even after the entity is deleted and inserted again. Each HTTP
//! request is bounded by [`AzureOptions::call_timeout`]; a listing of many pages makes one
//! request per page of 1,000 entities.
//!
//! The account key is read from the environment, never from a command line, and never
//! appears in `Debug` output or logs. HTTPS endpoints are verified against the built-in
//! roots, or only against the authorities in [`AzureOptions::ca_file`] when it is set (an
//! Azurite started with its own certificate); the conformance suite runs over both HTTP and
//! HTTPS against Azurite.
//!
//! # Connecting
//!
//! [`AzureOptions::from_url`] reads `azure://ACCOUNT/TABLE` for Azure itself, or
//! `azure+http://HOST:PORT/ACCOUNT/TABLE` (`azure+https://…`) for an endpoint with path-style
//! URLs such as Azurite. [`AzureOptions::with_env`] takes the account key from
//! `LEASEHOLD_AZURE_KEY` and, over HTTPS, a private CA from `LEASEHOLD_AZURE_CA`.
//! [`AzureTableStore::connect`] takes the options, and [`AzureTableStore::from_url`] does all
//! three.
//!
//! ```no_run
//! # async fn example() -> Result<(), leasehold::StoreError> {
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
//! use leasehold_azure::{AccountKey, AzureOptions, AzureTableStore};
//!
//! let key = AccountKey::from_env("AZURE_STORAGE_KEY")?;
//! let options = AzureOptions::new("mycompanyleases", "leases").key(key);
//! let store = AzureTableStore::connect(options).await?;
//! let group = GroupName::new("orders").expect("valid group name");
//! store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
//!     .await?;
//! # Ok(())
//! # }
//! ```

mod batch;
mod client;
mod entity;
mod options;
mod signing;
mod store;
mod table;

pub use options::{AccountKey, AzureOptions};
pub use store::AzureTableStore;
