//! Disruptions of running nodes and of the store: crashes, process pauses, twins and
//! outages.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Action, Director};
use crate::invariants::Holder;
use crate::lifecycle;
use crate::world::{Life, Slot, State};

impl Director {
    /// Picks a node uniformly among those that `eligible` accepts; with `keep_two`, a
    /// serving node only while more than two serve.
    fn pick(
        &mut self,
        state: &State,
        eligible: impl Fn(&Slot) -> bool,
        keep_two: bool,
    ) -> Option<usize> {
        let active = state.nodes.values().filter(|s| s.is_active()).count();
        let candidates: Vec<usize> = state
            .nodes
            .iter()
            .filter(|(_, slot)| eligible(slot))
            .filter(|(_, slot)| !keep_two || !slot.is_active() || active > 2)
            .map(|(index, _)| *index)
            .collect();
        (!candidates.is_empty()).then(|| candidates[self.rng.below(candidates.len())])
    }

    pub(super) fn crash(&mut self) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let Some(index) = self.pick(&state, |s| s.process().is_some() && !s.leaving, true) else {
            return;
        };
        lifecycle::end_process(&world, &mut state, index, Life::Crashed);
        let restart_in = world
            .config
            .faults
            .restart_within
            .mul_f64(self.rng.next_f64());
        self.at(Instant::now() + restart_in, Action::Restart(index));
    }

    pub(super) fn pause(&mut self) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let eligible = |s: &Slot| !s.leaving && s.process().is_some_and(|p| !p.gate.is_paused());
        let Some(index) = self.pick(&state, eligible, true) else {
            return;
        };
        let slot = &state.nodes[&index];
        let holder = slot.holder(index);
        if let Some(process) = slot.process() {
            process.gate.set_paused(true);
        }
        let faults = &world.config.faults;
        let multiple = 1.0 + (faults.pause_lease_multiple - 1.0).max(0.0) * self.rng.next_f64();
        let length = world.timings.lease_validity.mul_f64(multiple);
        world.event(
            &mut state,
            format!("{holder} paused for {:.3}s", length.as_secs_f64()),
        );
        state.recorder.disturbed(Instant::now());
        state.counts.pauses += 1;
        self.at(Instant::now() + length, Action::Resume(holder));
    }

    /// Pauses a running node's process and starts a second process under its name at once,
    /// as an orchestrator replacing a process that stopped answering does. The first
    /// resumes within its lease validity, still holding what it held. With session leases
    /// nothing stops it but itself, when it finds its session replaced (or a crash, after
    /// which its restart is the newest process and replaces the second). Renewing per
    /// partition, processes under one name cannot tell each other apart, so the first is
    /// stopped for good `acquire_after` after it resumes. Nothing happens if that would
    /// reach into the quiet period.
    pub(super) fn twin(&mut self) {
        let world = Arc::clone(&self.world);
        let timings = &world.timings;
        let now = Instant::now();
        let pause = timings.lease_validity.mul_f64(self.rng.next_f64());
        let retire = now + pause + timings.acquire_after;
        if retire >= self.quiet_at {
            return;
        }
        let mut state = world.lock();
        // One twin at a time per name: the name's only process, not yet replaced.
        let sharing = |name: &leasehold::NodeId| {
            state
                .nodes
                .values()
                .filter(|s| &s.name == name && !matches!(s.life, Life::Left))
                .count()
        };
        let eligible = |s: &Slot| {
            !s.leaving
                && !s.draining
                && s.process().is_some_and(|p| !p.gate.is_paused())
                && sharing(&s.name) == 1
        };
        let Some(index) = self.pick(&state, eligible, true) else {
            return;
        };
        let slot = &state.nodes[&index];
        let first = slot.holder(index);
        let twin = slot.twin();
        if let Some(process) = slot.process() {
            process.gate.set_paused(true);
        }
        let index_of_twin = self.next_node;
        self.next_node += 1;
        state.nodes.insert(index_of_twin, twin);
        world.event(
            &mut state,
            format!(
                "{first} paused for {:.3}s; a second process starts under its name as n{index_of_twin}",
                pause.as_secs_f64()
            ),
        );
        state.recorder.disturbed(now);
        state.counts.pauses += 1;
        drop(state);
        lifecycle::start(&world, index_of_twin);
        self.at(now + pause, Action::Resume(first));
        if world.config.lease_mode != leasehold::LeaseMode::Session {
            self.at(retire, Action::Retire(index));
        }
    }

    /// Stops the node that a twin replaced for good, whatever became of its process since
    /// (crashed and waiting for a restart, restarted): one process per name is left.
    pub(super) fn retire(&mut self, index: usize) {
        lifecycle::retire(&self.world, index);
    }

    pub(super) fn resume(&mut self, holder: Holder) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let Some(slot) = state.nodes.get(&holder.node) else {
            return;
        };
        if slot.incarnation != holder.incarnation {
            return;
        }
        if let Some(process) = slot.process().filter(|p| p.gate.is_paused()) {
            process.gate.set_paused(false);
            world.event(&mut state, format!("{holder} resumed"));
            state.recorder.changed(Instant::now());
        }
    }

    pub(super) fn outage(&mut self) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let length = world.config.faults.outage_max.mul_f64(self.rng.next_f64());
        let end = (Instant::now() + length).min(self.quiet_at);
        state.faults.outage_until = Some(end);
        // Drawn only where silent outages are on, so that runs without them draw as before.
        state.faults.outage_silent = world.config.faults.silent_outages && self.rng.below(2) == 0;
        let what = if state.faults.outage_silent {
            "store cut from every node"
        } else {
            "store outage"
        };
        world.event(
            &mut state,
            format!("{what} for {:.3}s", (end - Instant::now()).as_secs_f64()),
        );
        state.recorder.disturbed(Instant::now());
        state.recorder.changed(end);
        state.counts.outages += 1;
    }
}
