//! A seeded, deterministic simulation of a leasehold fleet.
//!
//! Each seed runs the real [`leasehold::Participant`] — its runner and planner, not a model
//! of them — for a fleet of nodes against the in-memory store, on one thread, in virtual
//! time: a current-thread Tokio runtime with a paused clock that jumps to the next timer
//! whenever every task waits, so an hour of simulated time costs only the work done in it.
//! Everything random comes from the seed, so a failing seed replays exactly.
//!
//! Between each node and the store sits a fault injector, and each node's clock is its own:
//!
//! - **crashes** (`abort`, no clean-up) and restarts as a fresh process with the same name;
//! - **process pauses** longer than a lease: the node's timers stop firing and its store
//!   calls neither leave nor complete, while its clock — which `lease(p)` reads — runs on;
//! - **lost replies**: a write is applied but its caller never hears back;
//! - **held-back writes**, applied after later requests, which must then fail their
//!   compare-and-set or do no harm;
//! - **store outages** (every call fails `Unavailable`, or, the store cut from every node,
//!   goes unanswered) and **throttling**;
//! - **slow replies**: a call is applied and answered late, up to beyond the lease validity;
//! - **a link going bad**: one node's round trips lengthen up to and past the store
//!   time-out, then its link is cut, both ways or for replies only, while the others reach
//!   the store;
//! - **clock drift**: each node's clock runs at its own rate within the configured ±ρ, at
//!   either edge a third of the time each;
//! - **membership churn**: joins, graceful leaves, drains and undrains, and restarts in
//!   place (the node's partitions reserved for its name) that come back within the
//!   restart window, late, or never;
//! - **operator commands**: kicks, offline and online, prohibit and allow, made through
//!   [`leasehold::admin`] as the command-line tool makes them;
//! - **mis-set restarts**: a crashed node restarting with timings that break the safety
//!   rule against the fleet's, which the group record must refuse.
//!
//! With the `all` profile each seed also draws its timings in the dangerous region
//! ([`explored_timings`]): `acquire_after` just above `lease_validity × (1 + ρ) / (1 − ρ)`,
//! so that a holder keeping a lease a moment too long shows as two owners rather than
//! hiding in the default timings' fifteen seconds of slack ([`SimConfig::explore`]).
//!
//! At every callback, every store call and frequent sampling points the [`invariants`] are
//! checked: single owner, strictly increasing epochs, fencing, liveness once faults stop,
//! balance whenever the fleet has settled, that no node serves what it excludes, that no
//! node takes a partition reserved for a restarting one before the window, and, with
//! session leases, that no process ends its own session over its own last write of it. A
//! [`Violation`] names the invariant, the seed, the simulated time and the command that
//! replays it.
//!
//! Each check has a negative control, a deliberately broken fleet it must catch within a few
//! seeds, or it would prove nothing: unsafe takeover timings ([`SimConfig::unsafe_timings`])
//! and mis-set restarts that skip the group record's check
//! ([`SimConfig::unsafe_mixed_timings`]) for the single-owner check; releases that do not
//! wait for work ([`SimConfig::unsafe_release`]) for the work-overlap check; acquisitions
//! that reuse their record's epoch ([`SimConfig::unsafe_epoch_reuse`]) for the epoch-order
//! check; resources that accept stale epochs ([`SimConfig::unsafe_stale_fencing`]) for the
//! fencing check; nodes that stop taking partitions once the faults stop
//! ([`SimConfig::unsafe_stop_acquiring`]) for the liveness check; and a node that counts no
//! other member, so never hands off its surplus ([`SimConfig::unsafe_ignore_members`]), for
//! the balance check; nodes that ignore their own exclusion lists
//! ([`SimConfig::unsafe_ignore_exclusions`]) for the exclusion check; nodes that take reserved
//! partitions at once ([`SimConfig::unsafe_ignore_reservations`]) for the reservation check;
//! and, in groups renewing by
//! session ([`SimConfig::lease_mode`]), takes and operator commands that leave the holder's
//! session alone ([`SimConfig::unsafe_session_take`], [`SimConfig::unsafe_session_operator`])
//! for the single-owner check. The own-session check has no switch: its controls are the
//! seeds at which the participant once broke it, pinned in the crate's tests. A run too short to hold its faults and the settling window after them
//! is refused ([`SimConfig::validate`]) rather than passed without faults.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_sim::{run_many, FaultProfile, SimConfig};
//!
//! let config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
//! let summary = run_many(&config, 0..4);
//! assert!(summary.is_clean(), "{:?}", summary.violations);
//! println!("{}", summary.figures);
//! ```
//!
//! The crate prints nothing: a [`SimConfig`] goes in, a [`SeedReport`], [`Summary`] or
//! [`Violation`] comes out, and [`run_seed_traced`] hands each event to the caller. The
//! `leasehold sim` command parses its flags into a configuration and prints the result.
//!
//! Inside, modules depend one way, from the top down: `run` hands each seed to the `driver`,
//! which schedules faults, churn and operator commands and starts and ends nodes through
//! `lifecycle`; `lifecycle` gives each node its `store` connection and its callbacks into the
//! `world`, which holds the shared state and runs the checks; the `world` serves every
//! connection through `store::Network`, decides each request's fate with `faults` and keeps
//! the fenced `resource`s. Under them all are `clock`, `config`, `figures`, `invariants`,
//! `report` and `trace`.

mod clock;
mod config;
mod driver;
mod explore;
mod faults;
mod figures;
pub mod invariants;
mod lifecycle;
pub mod load;
mod report;
mod resource;
mod run;
mod store;
mod timings;
mod trace;
mod world;

pub use clock::{Gate, SimClock};
pub use config::{FaultConfig, FaultProfile, SimConfig, SimConfigError};
pub use explore::explored_timings;
pub use figures::{FaultCounts, LoadSamples, Percentiles, Samples, StoreTraffic};
pub use load::LoadShape;
pub use report::{Figures, Ratios, SeedReport, Summary, Violation};
pub use run::{cores, run_many, run_many_on, run_seed, run_seed_traced};
pub use timings::Timings;
pub use trace::Trace;
