//! **Exclusions.** A node serves no partition its own exclusion list names
//! ([`leasehold::ParticipantConfig::excluded`]): once the list names it, the node starts no
//! tenure on it and admits no new work on it, not even for a take sent before the list
//! changed whose reply comes after; and a tenure it had ends (handed off, or run out) within
//! [`handed_off`]: no deadline it keeps on the partition lies beyond that.
//!
//! Caught by the negative control that ignores exclusion lists
//! (`SimConfig::unsafe_ignore_exclusions`): the node keeps, and takes, what it excludes.

use std::time::Duration;

use leasehold::PartitionId;
use tokio::time::Instant;

use crate::timings::Timings;

/// How long a node may go on holding a partition after excluding it: the work in flight
/// drains for up to `drain_timeout` under renewals, then the release is written, or the
/// lease, no longer renewed, runs out.
pub fn handed_off(timings: &Timings) -> Duration {
    timings.drain_timeout() + timings.heartbeat + timings.lease_validity + timings.store_timeout
}

/// A node excluding `excluded` since `since` took `partition` at `now`.
pub fn acquired(
    partition: PartitionId,
    excluded: Option<(PartitionId, Instant)>,
    now: Instant,
) -> Result<(), String> {
    match excluded {
        Some((p, since)) if p == partition && now > since => Err(format!(
            "took p{partition} {:?} after excluding it",
            now - since
        )),
        _ => Ok(()),
    }
}

/// A node excluding `partition` since `since` still serves it (its lease would admit new
/// work) at `now`.
pub fn serving(partition: PartitionId, since: Instant, now: Instant) -> Result<(), String> {
    if now > since {
        return Err(format!(
            "still serves p{partition} {:?} after excluding it",
            now - since
        ));
    }
    Ok(())
}

/// A node excluding `excluded` since `since` holds `partition` with a deadline (in true
/// time) of `end`: a tenure it may still serve past the bound.
pub fn holding(
    partition: PartitionId,
    excluded: Option<(PartitionId, Instant)>,
    end: Instant,
    timings: &Timings,
) -> Result<(), String> {
    match excluded {
        Some((p, since)) if p == partition && end > since + handed_off(timings) => Err(format!(
            "holds p{partition} until {:?} after excluding it (bound {:?})",
            end - since,
            handed_off(timings)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_excluded_partition_after_its_bound_is_a_violation() {
        let timings = Timings::default();
        let since = Instant::now();
        let excluded = Some((PartitionId(3), since));
        let late = since + handed_off(&timings) + Duration::from_millis(1);
        assert!(holding(PartitionId(3), excluded, late, &timings).is_err());
        assert!(holding(PartitionId(4), excluded, late, &timings).is_ok());
        assert!(holding(
            PartitionId(3),
            excluded,
            since + handed_off(&timings),
            &timings
        )
        .is_ok());
        assert!(holding(PartitionId(3), None, late, &timings).is_ok());
        // The same instant as the exclusion: the take came first.
        assert!(acquired(PartitionId(3), excluded, since).is_ok());
        let after = since + Duration::from_micros(1);
        assert!(acquired(PartitionId(3), excluded, after).is_err());
        assert!(acquired(PartitionId(4), excluded, after).is_ok());
        assert!(serving(PartitionId(3), since, since).is_ok());
        assert!(serving(PartitionId(3), since, after).is_err());
    }
}
