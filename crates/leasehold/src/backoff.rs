//! Capped exponential back-off: the one curve every retry loop of the project follows (scans,
//! joining, routers, store connections and watches, a process waiting for its store), so
//! that a failing store sees the same shape of retries from every caller.
//!
//! After the n-th failure in a row the wait's ceiling is `first × 2ⁿ⁻¹`, capped at `max`; a
//! success starts the count again. [`Jitter`] spreads the waits of a fleet that failed
//! together, drawing from a [`SeededRng`] so that a simulation replays exactly.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::backoff::{Backoff, Jitter};
//! use leasehold::SeededRng;
//!
//! let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
//! let waits: Vec<_> = (0..4).map(|_| backoff.failed()).collect();
//! assert_eq!(waits, [100, 200, 350, 350].map(Duration::from_millis));
//! backoff.succeeded();
//! assert_eq!(backoff.failed(), Duration::from_millis(100));
//!
//! let mut rng = SeededRng::new(7);
//! let mut spread = Backoff::new(Duration::from_secs(1), Duration::from_secs(4)).jitter(Jitter::Equal);
//! let wait = spread.failed_jittered(&mut rng);
//! assert!(wait >= Duration::from_millis(500) && wait <= Duration::from_secs(1));
//! ```

use std::time::Duration;

use crate::clock::SeededRng;

/// The most doublings counted: beyond it every useful cap has long been reached, and the
/// multiplication stays far from overflow.
const MAX_DOUBLINGS: u32 = 16;

/// How a wait is drawn around its ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// Exactly the ceiling: for one caller alone against its store.
    None,
    /// Uniformly in the upper half of the ceiling, in whole milliseconds: a fleet restarted
    /// together spreads its attempts, and no wait collapses to nothing.
    Equal,
    /// The ceiling stretched or shortened by up to this fraction either way
    /// ([`SeededRng::spread`]): the spread of the periodic schedules it backs off from.
    Spread(f64),
}

/// Consecutive failures and the waits they call for.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    jitter: Jitter,
    failures: u32,
}

impl Backoff {
    /// Waits of `first` after the first failure, doubling with each further one up to `max`,
    /// without jitter.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            jitter: Jitter::None,
            failures: 0,
        }
    }

    /// The same curve, its waits drawn with `jitter` by [`Backoff::failed_jittered`].
    pub const fn jitter(mut self, jitter: Jitter) -> Backoff {
        self.jitter = jitter;
        self
    }

    /// The same curve, resuming a count of failures kept elsewhere (by a caller whose curve
    /// follows settings that may change between failures).
    pub const fn after_failures(mut self, failures: u32) -> Backoff {
        self.failures = failures;
        self
    }

    /// The ceiling of the wait after `failures` failures in a row (none after zero).
    pub fn ceiling(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = (failures - 1).min(MAX_DOUBLINGS);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }

    /// The wait the next failure will call for, at its ceiling, without counting it.
    pub fn next(&self) -> Duration {
        self.ceiling(self.failures.saturating_add(1))
    }

    /// Counts a failure and returns the wait before the next try, at its ceiling.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.ceiling(self.failures)
    }

    /// Counts a failure and returns the wait before the next try, drawn from `rng` as the
    /// jitter says (one draw, none for [`Jitter::None`]).
    pub fn failed_jittered(&mut self, rng: &mut SeededRng) -> Duration {
        let ceiling = self.failed();
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Equal => {
                let half = ceiling / 2;
                let wait = half + half.mul_f64(rng.next_f64());
                Duration::from_millis(wait.as_millis() as u64)
            }
            Jitter::Spread(fraction) => rng.spread(ceiling, fraction),
        }
    }

    /// A success: the next failure waits `first` again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The cap on any wait.
    pub fn max(&self) -> Duration {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn ceilings_double_from_the_first_up_to_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(75));
        let ceilings: Vec<_> = (0..6).map(|n| backoff.ceiling(n)).collect();
        assert_eq!(ceilings, [0, 10, 20, 40, 75, 75].map(Duration::from_millis));
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_millis(75));
        let huge = Backoff::new(Duration::MAX / 2, Duration::MAX);
        assert_eq!(huge.ceiling(40), Duration::MAX);
    }

    #[test]
    fn a_success_starts_the_count_again() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(backoff.next(), Duration::from_secs(1));
        backoff.failed();
        backoff.failed();
        assert_eq!(backoff.failures(), 2);
        assert_eq!(
            backoff.next(),
            Duration::from_secs(4),
            "the third, not counted"
        );
        assert_eq!(backoff.failures(), 2);
        backoff.succeeded();
        assert_eq!(backoff.failures(), 0);
        assert_eq!(backoff.failed(), Duration::from_secs(1));
    }

    #[test]
    fn equal_jitter_stays_in_the_upper_half_of_each_ceiling_and_spreads_at_the_cap() {
        for seed in 0..64 {
            let mut rng = SeededRng::new(seed);
            let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
                .jitter(Jitter::Equal);
            for n in 1..=20 {
                let ceiling = backoff.ceiling(n);
                let wait = backoff.failed_jittered(&mut rng);
                assert!(
                    wait >= ceiling / 2 && wait <= ceiling,
                    "seed {seed}, failure {n}: {wait:?} outside [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
                assert_eq!(wait.subsec_nanos() % 1_000_000, 0, "whole milliseconds");
            }
        }
        let mut rng = SeededRng::new(7);
        let mut backoff =
            Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).jitter(Jitter::Equal);
        let at_cap: BTreeSet<Duration> = (0..30)
            .map(|_| backoff.failed_jittered(&mut rng))
            .skip(10)
            .collect();
        assert!(at_cap.len() > 10, "{at_cap:?}");
    }

    #[test]
    fn spread_jitter_draws_as_the_schedule_does_and_no_jitter_draws_nothing() {
        let period = Duration::from_secs(2);
        let mut rng = SeededRng::new(3);
        let mut twin = SeededRng::new(3);
        let mut backoff = Backoff::new(period, period * 4).jitter(Jitter::Spread(0.1));
        assert_eq!(backoff.failed_jittered(&mut rng), twin.spread(period, 0.1));
        let mut plain = Backoff::new(period, period * 4);
        assert_eq!(plain.failed_jittered(&mut rng), period);
        assert_eq!(rng.next_u64(), twin.next_u64(), "no draw without jitter");
    }
}
