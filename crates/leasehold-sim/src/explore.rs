//! The dangerous region: per seed, timings drawn just inside the safety rule and clock
//! rates at its edges, where a rule counted from the wrong instant, or a margin spent twice,
//! shows as two owners instead of hiding in the default timings' fifteen-second slack.

use std::time::Duration;

use leasehold::SeededRng;

use crate::timings::Timings;

/// Mixed into the seed for the timings' own draws, so that drawing them leaves every other
/// random choice of the run as it was.
const TIMINGS_SALT: u64 = 0x7131_4E65_A5B0_0C1D;

/// The smallest drift bound the participant accepts, and the largest drawn: ten percent
/// already makes `acquire_after` a fifth longer than the validity.
const RHO_RANGE: (f64, f64) = (leasehold::ParticipantConfig::MIN_CLOCK_DRIFT, 0.1);

/// How far above the safety bound `acquire_after` is drawn, at most.
const MAX_MARGIN: Duration = Duration::from_millis(250);

/// `base` with, for `seed`, a drift bound ρ drawn log-uniformly over the accepted range, a
/// store time-out anywhere from a twentieth of the heartbeat to the whole heartbeat, and
/// `acquire_after` just above `lease_validity × (1 + ρ) / (1 − ρ)`: by one millisecond to
/// 250 ms. The heartbeat and the validity stay, so that the faults scaled to them
/// keep their meaning.
///
/// ```
/// use leasehold_sim::{explored_timings, Timings};
///
/// let timings = explored_timings(&Timings::default(), 7);
/// let rho = timings.max_clock_drift;
/// let bound = timings.lease_validity.as_secs_f64() * (1.0 + rho) / (1.0 - rho);
/// let margin = timings.acquire_after.as_secs_f64() - bound;
/// assert!(margin > 0.0 && margin <= 0.251, "{margin}");
/// assert_eq!(timings, explored_timings(&Timings::default(), 7));
/// ```
pub fn explored_timings(base: &Timings, seed: u64) -> Timings {
    let mut rng = SeededRng::new(seed ^ TIMINGS_SALT);
    let (low, high) = RHO_RANGE;
    let rho = (low.ln() + (high.ln() - low.ln()) * rng.next_f64()).exp();
    let store_timeout = base.heartbeat.mul_f64(0.05 + 0.95 * rng.next_f64());
    // Rounded up to the nanosecond, so that the margin drawn is all above the bound.
    let validity = base.lease_validity.as_nanos() as f64;
    let bound = Duration::from_nanos((validity * (1.0 + rho) / (1.0 - rho)).ceil() as u64 + 1);
    let margin = Duration::from_millis(1) + MAX_MARGIN.mul_f64(rng.next_f64());
    Timings {
        max_clock_drift: rho,
        store_timeout: store_timeout.max(Duration::from_millis(1)),
        acquire_after: (bound + margin).min(bound + MAX_MARGIN),
        ..base.clone()
    }
}

/// A node's clock rate within `±rho`: at either edge a third of the time each, where the
/// safety rule has no slack left, and anywhere between otherwise.
pub(crate) fn edge_rate(rho: f64, rng: &mut SeededRng) -> f64 {
    match rng.below(3) {
        0 => 1.0 - rho,
        1 => 1.0 + rho,
        _ => 1.0 + rho * (2.0 * rng.next_f64() - 1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::NodeId;

    /// Fails if a drawn set of timings is refused by the participant's own validation, or
    /// strays from the region it is meant to explore.
    #[test]
    fn drawn_timings_pass_validation_just_above_the_bound() {
        let base = Timings::default();
        let (mut smallest, mut largest) = (f64::MAX, 0.0_f64);
        for seed in 0..2_000 {
            let timings = explored_timings(&base, seed);
            let config = timings.participant_config(NodeId::new("n").unwrap(), 8);
            config
                .validate()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let rho = timings.max_clock_drift;
            assert!((RHO_RANGE.0..=RHO_RANGE.1).contains(&rho), "{rho}");
            let bound = timings.lease_validity.as_secs_f64() * (1.0 + rho) / (1.0 - rho);
            let margin = timings.acquire_after.as_secs_f64() - bound;
            assert!(margin > 0.0 && margin <= 0.251, "seed {seed}: {margin}");
            assert!(timings.store_timeout <= timings.heartbeat);
            smallest = smallest.min(rho);
            largest = largest.max(rho);
        }
        assert!(smallest < 0.002 && largest > 0.08, "{smallest} {largest}");
    }

    /// Fails if the edge rates leave the drift bound or never reach its edges.
    #[test]
    fn edge_rates_reach_both_edges_and_stay_within() {
        let mut rng = SeededRng::new(3);
        let rates: Vec<f64> = (0..300).map(|_| edge_rate(0.05, &mut rng)).collect();
        assert!(rates.iter().all(|r| (0.95..=1.05).contains(r)));
        assert!(rates.contains(&0.95) && rates.contains(&1.05));
    }
}
