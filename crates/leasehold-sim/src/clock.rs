//! A simulated node's clock: drifting, and frozen while the node's process is paused.

use std::time::Duration;

use leasehold::{Clock, DriftClock, Sleep};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Whether a node's process runs. While the gate is closed the node's timers do not fire and
/// its store calls neither leave nor complete, as in a stop-the-world pause; its memory is
/// untouched, and its clock keeps running.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    inner: Arc<GateInner>,
}

#[derive(Debug, Default)]
struct GateInner {
    paused: AtomicBool,
    // Not a `watch` channel: its receivers wait on one of several queues chosen at random,
    // which would make the order in which a resumed node's tasks run differ between runs.
    resumed: Notify,
}

impl Gate {
    /// Freezes (`true`) or resumes (`false`) the process.
    pub fn set_paused(&self, paused: bool) {
        self.inner.paused.store(paused, Ordering::SeqCst);
        if !paused {
            self.inner.resumed.notify_waiters();
        }
    }

    /// Whether the process is frozen now.
    pub fn is_paused(&self) -> bool {
        self.inner.paused.load(Ordering::SeqCst)
    }

    /// Completes at once while the process runs, or when it resumes.
    pub async fn wait_open(&self) {
        loop {
            let resumed = self.inner.resumed.notified();
            tokio::pin!(resumed);
            // Registered before the check, so a resume in between is not missed.
            resumed.as_mut().enable();
            if !self.is_paused() {
                return;
            }
            resumed.await;
        }
    }
}

/// A node's monotonic clock: a [`DriftClock`] whose timers wait for the node's [`Gate`].
#[derive(Debug, Clone)]
pub struct SimClock {
    drift: DriftClock,
    gate: Gate,
}

/// What a simulated node's wall clock reads at the start of a run (2026-01-01T00:00:00Z):
/// every run starts there, so the stamps on records replay too.
const SIMULATED_UNIX_MS: u64 = 1_767_225_600_000;

impl SimClock {
    /// A clock agreeing with true time at `origin` and running at `rate`, gated by `gate`.
    pub fn new(origin: Instant, rate: f64, gate: Gate) -> SimClock {
        SimClock {
            drift: DriftClock::new(origin, rate),
            gate,
        }
    }

    /// The true instant at which this clock reads `local`.
    pub fn to_true(&self, local: Instant) -> Instant {
        self.drift.to_true(local)
    }

    /// This clock's rate relative to true time.
    pub fn rate(&self) -> f64 {
        self.drift.rate()
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.drift.now()
    }

    fn unix_ms(&self) -> u64 {
        let elapsed = self.now().saturating_duration_since(self.drift.origin());
        SIMULATED_UNIX_MS + elapsed.as_millis() as u64
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let clock = self.clone();
        Box::pin(async move {
            tokio::time::sleep_until(clock.drift.to_true(deadline)).await;
            // Converting to true time and back rounds to whole nanoseconds; never wake before
            // this clock reads the deadline, or a caller re-arming for it would spin.
            while clock.now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            clock.gate.wait_open().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails if the stamps a simulated node writes follow the machine's clock: two processes
    /// under one name may then write equal records or not depending on when the run happens,
    /// and a failing seed does not replay.
    #[tokio::test(start_paused = true)]
    async fn a_simulated_wall_clock_starts_at_the_same_instant_every_run_and_keeps_its_rate() {
        let origin = Instant::now();
        let clock = SimClock::new(origin, 1.5, Gate::default());
        assert_eq!(clock.unix_ms(), SIMULATED_UNIX_MS);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(clock.unix_ms(), SIMULATED_UNIX_MS + 15_000);
    }
}
