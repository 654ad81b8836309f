//! bucket-kv: a key-value service over a bucket map, built on leasehold.
//!
//! The key space is cut into buckets (`bucket = FNV-1a(key) mod B`, leasehold's
//! [`partition_for_key`](leasehold::partition_for_key)), and each bucket is one leasehold
//! partition. A server serves a bucket only under a work permit of its lease, and writes
//! carry the lease's epoch to the data table, which refuses an epoch lower than one it has
//! already accepted for the bucket. Clients find owners with leasehold's
//! [`Router`](leasehold::Router) and correct it on a `not owner` answer.
//!
//! - [`server`]: the HTTP server (`PUT`/`GET`/`DELETE /kv/{key}`, `/healthz`, `/readyz`,
//!   `/stats`).
//! - [`data`]: the fenced data table.
//! - [`client`]: the routing, retrying client.
//! - [`load`]: the load generator.
//! - [`bench`](mod@bench): the scenario runner (rolling restart, crash, join).

pub mod api;
pub mod bench;
pub mod client;
pub mod data;
pub mod load;
pub mod server;
