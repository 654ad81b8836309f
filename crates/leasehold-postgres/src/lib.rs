//! A PostgreSQL backend for [leasehold]: [`PostgresStore`] keeps one row per
//! partition, one per member and one per group in plain, readable tables, and changes a row
//! only with an `UPDATE … WHERE version = $expected`, so every node of a fleet spread over
//! many machines sees one lease table with compare-and-set.
//!
//! The store creates what it needs on first connect (with the default prefix):
//!
//! ```text
//! leasehold_leases   (grp, partition, owner, epoch, state, prohibited text[], load, note,
//!                     written_at_unix_ms, version, previous_owner, handed_to, session)
//! leasehold_members  (grp, node, weight, draining, load, heartbeat, written_at_unix_ms,
//!                     version, lease_validity_ns, acquire_after_ns, capacity, max_load,
//!                     max_partitions, address, metadata,  -- metadata: JSON text or NULL
//!                     session, replaced)
//! leasehold_groups   (grp, record, version)   -- the group record, as its JSON text
//! leasehold_schema   (version)        -- the layout version, checked on every connect
//! leasehold_version                   -- the sequence every write takes its version from
//! ```
//!
//! A store finding an older layout upgrades it in place (columns added since read as NULL in
//! rows written before: no published timings, no previous owner, no node handed to, no
//! capacity, limits, address or metadata, no session), and refuses a newer one. A session
//! is a `u64` kept as the `bigint` of the same 64 bits: sessions above `i64::MAX` show as
//! negative numbers in `psql`, and read back exactly.
//!
//! Operators can read the tables directly (`SELECT * FROM leasehold_leases WHERE grp =
//! 'orders' ORDER BY partition`, `SELECT record::json FROM leasehold_groups`). Triggers send
//! a notification on channel `leasehold_changes` for every change of a lease or member,
//! which [`LeaseStore::watch`](leasehold::LeaseStore::watch) turns into change hints.
//!
//! # Connecting
//!
//! [`PostgresOptions::from_url`] reads `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`
//! (or `postgresql://`, with libpq's settings after `?`), and [`PostgresOptions::with_env`]
//! fills in what the URL leaves out from libpq's variables, the password from `PGPASSWORD`
//! among them. [`PostgresStore::connect`] takes the options, and [`PostgresStore::from_url`]
//! does all three. Neither the options nor the store ever show the password.
//!
//! TLS: `sslmode=require` (or `verify-ca`, `verify-full`) in the URL connects over TLS and
//! verifies the server's certificate and host name against
//! [`PostgresOptions::ca_file`](crate::PostgresOptions::ca_file) (from `PGSSLROOTCERT`), or the
//! Mozilla roots when none is given; a server that fails verification is refused, never used
//! unencrypted. `sslmode=prefer` (the default) and `disable` connect without TLS: `prefer`
//! would let whoever sits on the network path choose plain anyway.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold::StoreError> {
//! use std::time::Duration;
//! use leasehold::{GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode};
//! use leasehold_postgres::{PostgresOptions, PostgresStore};
//!
//! // The password may also come from PGPASSWORD.
//! let options = PostgresOptions::from_url("postgres://leases@db.internal:5432/app")?
//!     .with_env()?
//!     .request_timeout(Duration::from_secs(2));
//! let store = PostgresStore::connect(options).await?;
//! let group = GroupName::new("orders").unwrap();
//! let version = store
//!     .put_lease(&group, PartitionId(0), &LeaseRecord::released(), PutMode::Create)
//!     .await?;
//! println!("partition 0 created with version {version}");
//! # Ok(())
//! # }
//! ```

mod connection;
mod error;
mod options;
mod rows;
mod schema;
mod statements;
mod statistics;
mod store;
mod tls;
mod url;
mod watch;
mod writes;

pub use options::PostgresOptions;
pub use schema::SCHEMA_VERSION;
pub use statistics::TableStatistics;
pub use store::PostgresStore;
