//! The JSON bodies the server answers with, shared by the server and the client.

use serde::{Deserialize, Serialize};

/// The group every bucket-kv server and client uses in the lease store.
pub const GROUP: &str = "bucket-kv";

/// The largest value a `PUT /kv/{key}` accepts.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// The answer to a write (`PUT` or `DELETE`) that was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The key's bucket.
    pub bucket: u32,
    /// The fencing token the write was made under.
    pub epoch: u64,
    /// The server that made it.
    pub server: String,
    /// For a delete, whether the key had a value.
    #[serde(default)]
    pub existed: bool,
}

/// The answer to a `GET`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The key's bucket.
    pub bucket: u32,
    /// The fencing token of the owner that served the read.
    pub epoch: u64,
    /// The server that served it.
    pub server: String,
    /// The value, `None` if the key has none.
    pub value: Option<String>,
}

/// The body of every answer that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong: `not owner`, `stale epoch`, `bad key`, `bad value`,
    /// `data store unavailable`.
    pub error: String,
    /// The bucket asked about, when the key had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<u32>,
    /// For `not owner`: who the answering server believes owns the bucket, if anyone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// For `not owner`: the address that owner advertises, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// What `GET /stats` reports about one server process since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    /// The server's name.
    pub server: String,
    /// Requests served under a lease.
    pub served: u64,
    /// Requests answered `not owner`.
    pub not_owner: u64,
    /// Writes this process had refused by the data table's fence.
    pub stale_writes_refused: u64,
    /// Buckets held now.
    pub buckets_owned: usize,
}
