//! Injected time and randomness, so tests and the simulator can drive the lease loop.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

/// A boxed sleep returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A node's monotonic clock.
///
/// Every lease decision reads time through this trait. [`TokioClock`] follows Tokio's clock,
/// which tests pause and advance; [`DriftClock`] runs at a different rate, as a real node's
/// oscillator may.
pub trait Clock: Debug + Send + Sync + 'static {
    /// The current instant on this clock.
    fn now(&self) -> Instant;
    /// Completes once this clock reads `deadline` or later.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// Wall-clock milliseconds since the Unix epoch, as stamped on the records a node writes
    /// ([`crate::LeaseRecord::written_at_unix_ms`]). Never used to judge a lease; the system
    /// clock by default. A simulated node counts them from its own clock, so that a run
    /// replays exactly whatever the machine's time.
    fn unix_ms(&self) -> u64 {
        crate::record::unix_ms_now()
    }
}

/// Tokio's clock: real time, or virtual time under `tokio::time::pause`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// A clock that runs `rate` times as fast as Tokio's clock, from `origin` on.
///
/// `rate = 1.01` gains 1 % (10 ms a second). The simulator gives each node one to check
/// that the safety rule holds within the configured drift bound.
#[derive(Debug, Clone, Copy)]
pub struct DriftClock {
    origin: Instant,
    rate: f64,
}

impl DriftClock {
    /// A clock that agrees with Tokio's at `origin` and then runs at `rate`.
    pub fn new(origin: Instant, rate: f64) -> DriftClock {
        assert!(rate > 0.0, "clock rate must be positive, got {rate}");
        DriftClock { origin, rate }
    }

    /// This clock's rate relative to Tokio's.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The Tokio instant at which this clock started, agreeing with Tokio's.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The Tokio instant at which this clock reads `local`.
    pub fn to_true(&self, local: Instant) -> Instant {
        let elapsed = local.saturating_duration_since(self.origin);
        self.origin + elapsed.div_f64(self.rate)
    }
}

impl Clock for DriftClock {
    fn now(&self) -> Instant {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        self.origin + elapsed.mul_f64(self.rate)
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        // One nanosecond late rather than a rounding error early: waking before `now()`
        // reads the deadline would make a caller that re-checks the clock sleep again at
        // once, forever, under a paused Tokio clock.
        let wake = self.to_true(deadline) + Duration::from_nanos(1);
        Box::pin(tokio::time::sleep_until(wake))
    }
}

/// A small seedable random number generator (SplitMix64): the same seed gives the same
/// jitter and the same choices, so a simulated run can be replayed.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SeededRng {
        SeededRng { state: seed }
    }

    /// A generator seeded from the system's time and process id, for production use.
    pub fn from_entropy() -> SeededRng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        SeededRng::new(nanos ^ (u64::from(std::process::id()) << 32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniformly in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index uniformly in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_f64() * bound as f64) as usize % bound.max(1)
    }

    /// `period` shortened by up to `fraction` of itself, never lengthened: used for renewal
    /// periods, which must never stretch past the configured heartbeat.
    pub fn shorten(&mut self, period: Duration, fraction: f64) -> Duration {
        period.mul_f64(1.0 - fraction * self.next_f64())
    }

    /// `period` scaled by a factor uniformly in `[1 − fraction, 1 + fraction)`.
    pub fn spread(&mut self, period: Duration, fraction: f64) -> Duration {
        period.mul_f64(1.0 + fraction * (2.0 * self.next_f64() - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_rng_is_repeatable_and_in_range() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        for _ in 0..1000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
            let short = a.shorten(Duration::from_secs(10), 0.1);
            b.shorten(Duration::from_secs(10), 0.1);
            assert!(short <= Duration::from_secs(10) && short >= Duration::from_secs(9));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn drift_clock_runs_at_its_rate() {
        let origin = Instant::now();
        let fast = DriftClock::new(origin, 1.5);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(fast.now() - origin, Duration::from_secs(15));
        let target = origin + Duration::from_secs(30);
        fast.sleep_until(target).await;
        assert!(
            fast.now() >= target,
            "woke at or after the deadline on its own clock"
        );
        // Tokio's timer rounds up to the next millisecond.
        assert!(Instant::now() - origin <= Duration::from_secs(20) + Duration::from_millis(1));
        // Odd rates and deadlines never wake early through rounding.
        for rate in [0.99, 1.01, 1.003, 0.9977] {
            let clock = DriftClock::new(origin, rate);
            let deadline = clock.now() + Duration::from_nanos(123_456_789_123);
            clock.sleep_until(deadline).await;
            assert!(clock.now() >= deadline, "rate {rate}");
        }
    }
}
