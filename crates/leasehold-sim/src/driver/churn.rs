//! Membership churn: joins, graceful leaves, restarts in place, drains and undrains.

use std::sync::Arc;
use std::time::Duration;

use leasehold::admin;
use tokio::time::Instant;

use super::Director;
use crate::lifecycle;
use crate::world::{Life, Slot};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Join,
    Leave(usize),
    RestartInPlace(usize),
    Drain(usize),
    Undrain(usize),
}

fn running_and_settled(slot: &Slot) -> bool {
    !slot.leaving && slot.process().is_some_and(|p| !p.gate.is_paused())
}

impl Director {
    /// Makes one membership change, chosen so the fleet stays between two serving nodes and
    /// twice its starting size.
    pub(super) async fn churn(&mut self) {
        let Some(change) = self.choose_change() else {
            return;
        };
        let world = Arc::clone(&self.world);
        match change {
            Change::Join => {
                let index = self.next_node;
                self.next_node += 1;
                lifecycle::start(&world, index);
                let mut state = world.lock();
                state.recorder.joined(index, Instant::now());
                state.counts.joins += 1;
            }
            Change::Leave(index) => lifecycle::leave(&world, index),
            Change::RestartInPlace(index) => {
                let back_after = self.restart_delay();
                // With twins, now and then a second process comes back under the name too.
                let twin = (world.config.twins
                    && back_after.is_some()
                    && self.rng.next_f64() < 0.5)
                    .then(|| {
                        self.next_node += 1;
                        self.next_node - 1
                    });
                lifecycle::restart_in_place(&world, index, back_after, twin);
            }
            Change::Drain(index) | Change::Undrain(index) => {
                let draining = matches!(change, Change::Drain(_));
                let name = world.lock().nodes[&index].name.clone();
                let set = admin::set_draining(&world.store, &world.group, &name, draining).await;
                let mut state = world.lock();
                let verb = if draining { "drain" } else { "undrain" };
                if let Err(error) = set {
                    // The node has not written its member record yet (the store was down).
                    world.event(&mut state, format!("n{index} {verb} refused: {error}"));
                    return;
                }
                // The flag is the name's: a second process under it (see `Director::twin`)
                // is drained too, and stays so once the first has stopped, until undrained.
                for slot in state.nodes.values_mut().filter(|slot| slot.name == name) {
                    slot.draining = draining;
                }
                state.counts.drains += 1;
                world.event(&mut state, format!("n{index} {verb}ed"));
            }
        }
        let mut state = world.lock();
        let active = state.nodes.values().filter(|s| s.is_active()).count();
        state.recorder.membership_changed(Instant::now(), active);
    }

    fn choose_change(&mut self) -> Option<Change> {
        let world = Arc::clone(&self.world);
        let state = world.lock();
        let active = state.nodes.values().filter(|s| s.is_active()).count();
        let present = state
            .nodes
            .values()
            .filter(|s| !matches!(s.life, Life::Left))
            .count();
        let drained: Vec<usize> = state
            .nodes
            .iter()
            .filter(|(_, s)| s.draining && running_and_settled(s))
            .map(|(index, _)| *index)
            .collect();
        let serving = state.active_nodes();
        let mut options = Vec::new();
        if present < world.config.nodes * 2 {
            options.push(Change::Join);
        }
        if let Some(index) = self.choose(&drained) {
            options.push(Change::Undrain(index));
        }
        if active < world.config.nodes && !options.is_empty() {
            return Some(options[self.rng.below(options.len())]);
        }
        if active > 2 {
            if let Some(index) = self.choose(&serving) {
                options.push(Change::Leave(index));
                options.push(Change::Drain(index));
                // Only while the restart, late or never coming back, is over before the
                // faults stop: the fleet must recover in the quiet period from the faults.
                let window = world.timings.restart_window();
                let margin =
                    world.timings.drain_timeout() + window * 3 + world.config.faults.restart_within;
                if Instant::now() + margin < self.quiet_at {
                    options.push(Change::RestartInPlace(index));
                }
            }
        }
        (!options.is_empty()).then(|| options[self.rng.below(options.len())])
    }

    /// When a node restarting in place comes back after it stops: within the restart window
    /// mostly, after it now and then, and never in one case of seven.
    fn restart_delay(&mut self) -> Option<Duration> {
        let window = self.world.timings.restart_window();
        let draw = self.rng.next_f64();
        if draw < 0.6 {
            Some(window.mul_f64(self.rng.next_f64() / 2.0))
        } else if draw < 6.0 / 7.0 {
            Some(window.mul_f64(1.0 + self.rng.next_f64()))
        } else {
            None
        }
    }

    fn choose(&mut self, indices: &[usize]) -> Option<usize> {
        (!indices.is_empty()).then(|| indices[self.rng.below(indices.len())])
    }
}
