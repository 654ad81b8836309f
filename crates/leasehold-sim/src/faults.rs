//! What happens to each store request: the store-wide faults in force, a node's link to the
//! store degrading and cut, the seeded decision of each request's fate, and the held-back
//! writes applied later.

use std::collections::BTreeMap;
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
    /// Applied at once, and the reply arrives this long after: past the caller's time
    /// limit, the limit ends the call.
    SlowReply(Duration),
    /// Lost on the way: never applied, never answered; the caller's time limit ends the call.
    Dropped,
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
            Fate::SlowReply(delay) => {
                counts.slow_replies += 1;
                format!("applied, reply in {:.3}s", delay.as_secs_f64())
            }
            Fate::Dropped => {
                counts.dropped += 1;
                "dropped".to_owned()
            }
        };
        Some(what)
    }
}

/// How a node's link to the store is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Nothing gets through either way: requests are lost before the store.
    BothWays,
    /// Requests reach the store and are applied; replies are lost.
    RepliesOnly,
}

/// One node's link to the store going bad: slow first, until `slow_until`, then cut until
/// `until`, as a congested path degrades before it fails.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    /// The round trip added while slow.
    pub latency: Duration,
    pub slow_until: Instant,
    pub cut: Cut,
    pub until: Instant,
}

/// The store-wide faults in force.
#[derive(Debug, Default)]
pub(crate) struct StoreFaults {
    pub outage_until: Option<Instant>,
    /// Whether the outage in force loses requests silently (the store cut from every node)
    /// rather than refusing them.
    pub outage_silent: bool,
    /// Nodes whose link to the store is going bad, by node index.
    pub links: BTreeMap<usize, Link>,
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
        node: usize,
        write: bool,
    ) -> Fate {
        let now = Instant::now();
        if self.outage_until.is_some_and(|end| now < end) {
            return if self.outage_silent {
                Fate::Dropped
            } else {
                Fate::Unavailable
            };
        }
        if let Some(link) = self.links.get(&node) {
            if link.slow_until <= now && now < link.until {
                return match link.cut {
                    Cut::BothWays => Fate::Dropped,
                    Cut::RepliesOnly => Fate::LoseReply,
                };
            }
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
        threshold += faults.slow_reply_rate;
        if roll < threshold {
            return Fate::SlowReply(faults.slow_reply_max.mul_f64(rng.next_f64()));
        }
        Fate::Deliver
    }

    /// The round trip `node`'s link adds now, while it is slow.
    pub fn link_latency(&self, node: usize) -> Duration {
        let now = Instant::now();
        self.links
            .get(&node)
            .filter(|link| now < link.slow_until)
            .map_or(Duration::ZERO, |link| link.latency)
    }
}

/// A held-back write, applied `delay` from now.
pub(crate) async fn apply_later(delay: Duration, write: impl Future<Output = ()>) {
    tokio::time::sleep(delay).await;
    write.await;
}
