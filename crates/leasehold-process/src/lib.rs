//! Runs a [`leasehold`] participant as a long-lived process, the way `leasehold node`, the
//! agent and the example applications do: one life cycle, written once.
//!
//! - **Start-up** checks what needs no store (the timings), then reaches the store — by URL,
//!   any scheme this build reads ([`StoreUrl`]), or a store the caller opened — trying again
//!   with jittered back-off while it cannot be reached, each try logged and counted
//!   ([`StoreWait`]). It builds out the group's lease records where asked, starts the
//!   participant and waits until the group record admits it, and starts a router following
//!   the table where asked. What waiting cannot fix (invalid timings, a group that does not
//!   exist or has another partition count, a refusal by the group record) fails at once.
//! - **Running**, it serves metrics where asked (from before the store is reached), and
//!   reloads what the caller says on SIGHUP.
//! - **Stopping**, on SIGTERM or SIGINT (or a future of the caller's), it hands every
//!   partition off once the work in flight under it has ended, bounded by the
//!   configuration's `drain_timeout`, and says why it stopped ([`StopReason`]): a lease loop
//!   that stopped by itself is an error the process should exit with.
//!
//! ```no_run
//! use leasehold::{NodeId, ParticipantConfig};
//! use leasehold_process::Process;
//!
//! # async fn run() -> anyhow::Result<()> {
//! let config = ParticipantConfig::new(NodeId::new("server-1")?, 64);
//! // Until SIGTERM or SIGINT; then hands its partitions off and returns why it stopped.
//! let stopped = Process::new("sqlite:leasehold.db", config)?
//!     .create_records()
//!     .run()
//!     .await?;
//! stopped.into_result()
//! # }
//! ```

mod metrics_http;
mod partitions;
mod process;
mod retry;
mod running;
pub mod serve;
mod shutdown;
pub mod store_url;
mod wait;

pub use metrics_http::{bind, metrics_routes, not_found, scrape, serve_metrics};
pub use partitions::{CountMismatch, PartitionCount};
pub use process::Process;
pub use retry::{is_transient, open_waiting, FIRST_RETRY, MAX_RETRY};
pub use running::{Running, StopReason};
pub use store_url::{InvalidStoreUrl, StoreUrl};
pub use wait::StoreWait;

/// The repository README's examples, compiled as doctests so that they stay true (the
/// quick start also runs, as `examples/quickstart.rs`, in `tests/quickstart.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

/// The guide's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
struct GuideLibrary;

/// The guide's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/load-balancing.md")]
struct GuideLoadBalancing;
