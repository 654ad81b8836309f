//! **Liveness.** Once faults stop at `quiet` (every crashed node restarted, pauses and
//! outages over, held-back writes applied, no more churn), then from `quiet + bound` on,
//! every partition is owned at some instant of every window of length `handoff` — that is,
//! it is owned by `quiet + bound` unless it is in a cooperative hand-off, and a hand-off
//! never leaves it unowned for longer than `handoff`.
//!
//! `bound` is [`crate::Timings::liveness_bound`]: `acquire_after / (1 − ρ)` plus a scan
//! period and a backed-off scan with their jitter, plus one heartbeat and one store timeout
//! for calls in flight when the faults stopped. `handoff` is
//! [`crate::Timings::handoff_bound`]: one scan period with jitter plus one store timeout.

use std::time::Duration;

use leasehold::PartitionId;
use tokio::time::Instant;

use super::single_owner::SingleOwner;

/// Checks the property at `now` over partitions `0..partitions`.
///
/// Fails if some partition was owned by nobody for the whole of the last `handoff`: a fleet
/// that stops taking partitions (`SimConfig::unsafe_stop_acquiring`), or leaves one
/// unowned after a crash, a release or an operator's change.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::Holder;
    use leasehold::Epoch;

    fn holder(node: usize) -> Holder {
        Holder {
            node,
            incarnation: 1,
        }
    }

    #[test]
    fn a_short_hand_off_passes_and_a_partition_left_unowned_is_caught() {
        let origin = Instant::now();
        let s = |secs: u64| origin + Duration::from_secs(secs);
        let handoff = Duration::from_secs(10);
        let mut beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        // p0: held by n1 until 100, then by n2 from 105 after a hand-off of 5 s.
        beliefs
            .believe(holder(1), PartitionId(0), Epoch(1), s(0), s(100))
            .unwrap();
        beliefs.disbelieve(holder(1), PartitionId(0), s(100));
        beliefs
            .believe(holder(2), PartitionId(0), Epoch(2), s(105), s(200))
            .unwrap();
        // p1: held by n1 until 100, then by nobody.
        beliefs
            .believe(holder(1), PartitionId(1), Epoch(1), s(0), s(100))
            .unwrap();
        beliefs.disbelieve(holder(1), PartitionId(1), s(100));
        check(&beliefs, 1, s(108), handoff).unwrap();
        check(&beliefs, 2, s(108), handoff).unwrap();
        let error = check(&beliefs, 2, s(111), handoff).unwrap_err();
        assert!(
            error.starts_with("1 partitions were owned by nobody"),
            "{error}"
        );
        assert!(error.ends_with(": p1"), "{error}");
    }

    #[test]
    fn a_partition_never_taken_is_caught() {
        let origin = Instant::now();
        let beliefs = SingleOwner::new(origin, Duration::from_secs(600));
        let now = origin + Duration::from_secs(60);
        assert!(check(&beliefs, 1, now, Duration::from_secs(10)).is_err());
        check(&beliefs, 0, now, Duration::from_secs(10)).unwrap();
    }
}
