//! One node's link to the store goes bad: slow first, its round trips lengthened up to and
//! beyond the store time-out, so that renewals succeed late or not at all; then cut, both
//! ways or for replies only, while the other nodes reach the store; then healed.

use std::sync::Arc;

use tokio::time::Instant;

use super::Director;
use crate::faults::{Cut, Link};

impl Director {
    /// Degrades the link of one running node, healed before the faults stop.
    pub(super) fn degrade_link(&mut self) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let running = state.active_nodes();
        if running.is_empty() {
            return;
        }
        let node = running[self.rng.below(running.len())];
        let timings = &world.timings;
        let latency = timings
            .store_timeout
            .mul_f64(0.2 + 1.0 * self.rng.next_f64());
        let slow_for = timings.heartbeat.mul_f64(1.0 + 2.0 * self.rng.next_f64());
        let cut_for = timings
            .lease_validity
            .mul_f64(0.5 + 2.5 * self.rng.next_f64());
        let cut = if self.rng.below(2) == 0 {
            Cut::BothWays
        } else {
            Cut::RepliesOnly
        };
        let now = Instant::now();
        let slow_until = (now + slow_for).min(self.quiet_at);
        let until = (slow_until + cut_for).min(self.quiet_at);
        state.faults.links.insert(
            node,
            Link {
                latency,
                slow_until,
                cut,
                until,
            },
        );
        let how = match cut {
            Cut::BothWays => "both ways",
            Cut::RepliesOnly => "replies only",
        };
        let text = format!(
            "n{node}'s link slow by {:.3}s for {:.1}s, then cut {how} for {:.1}s",
            latency.as_secs_f64(),
            (slow_until - now).as_secs_f64(),
            (until - slow_until).as_secs_f64()
        );
        state.recorder.disturbed(now);
        state.recorder.changed(until);
        state.counts.link_faults += 1;
        world.event(&mut state, text);
    }
}
