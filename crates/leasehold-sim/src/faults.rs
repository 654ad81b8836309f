//! What happens to each store request: the store-wide faults in force, the seeded decision
//! of each request's fate, and the held-back writes applied later.

use std::future::Future;
use std::time::Duration;

use leasehold::SeededRng;
use tokio::time::Instant;

use crate::config::FaultConfig;
use crate::figures::FaultCounts;

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fate {
    /// Applied, and the reply arrives.
    Deliver,
    /// Refused: the store is down.
    Unavailable,
    /// Refused: the store asks the caller to slow down.
    Throttled,
    /// Applied, but the reply never arrives; the caller's time limit ends the call.
    LoseReply,
    /// Held back and applied this long from now, after later requests; the caller's time
    /// limit ends the call.
    Delay(Duration),
}

impl Fate {
    /// Counts this fate among the faults injected, and says what it did to the request;
    /// `None` for a request delivered untouched.
    pub fn count(self, counts: &mut FaultCounts) -> Option<String> {
        let what = match self {
            Fate::Deliver => return None,
            Fate::Unavailable => {
                counts.unavailable += 1;
                "refused: store unavailable".to_owned()
            }
            Fate::Throttled => {
                counts.throttled += 1;
                "refused: throttled".to_owned()
            }
            Fate::LoseReply => {
                counts.lost_replies += 1;
                "applied, reply lost".to_owned()
            }
            Fate::Delay(delay) => {
                counts.delayed_writes += 1;
                format!("held back {:.3}s", delay.as_secs_f64())
            }
        };
        Some(what)
    }
}

/// The store-wide faults in force.
#[derive(Debug, Default)]
pub(crate) struct StoreFaults {
    pub outage_until: Option<Instant>,
    /// Per-call faults (throttling, lost replies) are on.
    pub calls: bool,
    /// Writes may still be held back (off early enough that all land before the quiet period).
    pub delays: bool,
}

impl StoreFaults {
    /// Decides what happens to a request reaching the store now, drawing from `rng`. A
    /// held-back write lands after the caller's `store_timeout` has given up on it.
    pub fn decide(
        &self,
        faults: &FaultConfig,
        store_timeout: Duration,
        rng: &mut SeededRng,
        write: bool,
    ) -> Fate {
        if self.outage_until.is_some_and(|end| Instant::now() < end) {
            return Fate::Unavailable;
        }
        if !self.calls {
            return Fate::Deliver;
        }
        let roll = rng.next_f64();
        let mut threshold = faults.throttle_rate;
        if roll < threshold {
            return Fate::Throttled;
        }
        threshold += faults.lost_reply_rate;
        if roll < threshold {
            return Fate::LoseReply;
        }
        threshold += faults.delayed_write_rate;
        if write && self.delays && roll < threshold {
            let fraction = rng.next_f64();
            return Fate::Delay(store_timeout + faults.delayed_write_max.mul_f64(fraction));
        }
        Fate::Deliver
    }
}

/// A held-back write, applied `delay` from now.
pub(crate) async fn apply_later(delay: Duration, write: impl Future<Output = ()>) {
    tokio::time::sleep(delay).await;
    write.await;
}
