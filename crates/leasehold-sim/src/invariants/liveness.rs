//! **Liveness.** Once faults stop at `quiet` (every crashed node restarted, pauses and
//! outages over, held-back writes applied, no more churn), then from `quiet + bound` on,
//! every partition is owned at some instant of every window of length `handoff` — that is,
//! it is owned by `quiet + bound` unless it is in a cooperative hand-off, and a hand-off
//! never leaves it unowned for longer than `handoff`.
//!
//! `bound` is [`crate::Timings::liveness_bound`]: `acquire_after / (1 − ρ)` plus two scan
//! periods with their jitter, plus one heartbeat and one store timeout for calls in flight
//! when the faults stopped. `handoff` is [`crate::Timings::handoff_bound`]: one scan period
//! with jitter plus one store timeout.

use std::time::Duration;

use leasehold::PartitionId;
use tokio::time::Instant;

use super::single_owner::SingleOwner;

/// Checks the property at `now` over partitions `0..partitions`.
pub fn check(
    beliefs: &SingleOwner,
    partitions: u32,
    now: Instant,
    handoff: Duration,
) -> Result<(), String> {
    let since = now.checked_sub(handoff).unwrap_or(now);
    let unowned: Vec<String> = (0..partitions)
        .map(PartitionId)
        .filter(|p| !beliefs.owned_during(*p, since, now))
        .map(|p| format!("p{p}"))
        .collect();
    if unowned.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = unowned.iter().take(8).map(String::as_str).collect();
    Err(format!(
        "{} partitions were owned by nobody for the last {:.3}s: {}{}",
        unowned.len(),
        handoff.as_secs_f64(),
        shown.join(" "),
        if unowned.len() > shown.len() {
            " …"
        } else {
            ""
        }
    ))
}
