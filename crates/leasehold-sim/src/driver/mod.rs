//! The director of one run: starts the fleet, injects faults on a seeded schedule, samples
//! the checks, stops the faults for the quiet period and makes the final checks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{admin, SeededRng};
use tokio::time::Instant;

use crate::invariants::Holder;
use crate::lifecycle;
use crate::world::{Life, World};

/// Something the director does at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Sample,
    Crash,
    Pause,
    Outage,
    Churn,
    Operate,
    Rebuild,
    Garble,
    Link,
    Restart(usize),
    Resume(Holder),
    Twin,
    Retire(usize),
    StopDelays,
    Quiet,
    Shift,
    Rolling,
    End,
}

struct Director {
    world: Arc<World>,
    rng: SeededRng,
    agenda: BTreeMap<(Instant, u64), Action>,
    sequence: u64,
    quiet_at: Instant,
    live_from: Instant,
    next_node: usize,
    operator: operator::OperatorChanges,
}

/// Runs one seed to its end or its first violation.
pub(crate) async fn simulate(world: Arc<World>) {
    let config = world.config.clone();
    admin::init(&world.store, &world.group, config.partitions)
        .await
        .expect("the in-memory store accepts the build-out");
    admin::set_lease_mode(&world.store, &world.group, config.lease_mode)
        .await
        .expect("a group without members takes any lease mode");
    let origin = world.origin;
    let quiet_at = origin + config.quiet_at();
    let mut director = Director {
        rng: SeededRng::new(world.seed.rotate_left(17) ^ 0xD1EC_7012),
        agenda: BTreeMap::new(),
        sequence: 0,
        quiet_at,
        live_from: quiet_at + world.timings.liveness_bound(),
        next_node: config.nodes,
        operator: operator::OperatorChanges::default(),
        world: Arc::clone(&world),
    };
    {
        let faults = &config.faults;
        let mut state = world.lock();
        state.faults.calls = faults.throttle_rate + faults.lost_reply_rate > 0.0;
        state.faults.delays = faults.delayed_write_rate > 0.0;
        state.faults.calls |= state.faults.delays;
    }
    // Restarts in place come only with membership churn: without it, no reservation is ever
    // written, and the follower would only read every lease write for nothing.
    if !config.faults.churn_every.is_zero() {
        let follower = Arc::clone(&world).follow_reservations();
        let mut state = world.lock();
        world.spawn(&mut state, follower);
    }
    for index in 0..config.nodes {
        lifecycle::start(&world, index);
    }
    director.plan_start();
    director.run().await;
}

impl Director {
    fn at(&mut self, at: Instant, action: Action) {
        self.sequence += 1;
        self.agenda.insert((at, self.sequence), action);
    }

    /// The next arrival of a fault that comes on average every `mean`, if before the quiet
    /// period.
    fn next_arrival(&mut self, mean: Duration, action: Action) {
        if mean.is_zero() {
            return;
        }
        let wait = mean.mul_f64(-(1.0 - self.rng.next_f64()).ln());
        let at = Instant::now() + wait;
        if at < self.quiet_at {
            self.at(at, action);
        }
    }

    /// The next destroy and build-out, if it ends, and its nodes are back, before the faults
    /// stop: the fleet must recover in the quiet period from the faults, not from a destroy.
    fn next_rebuild(&mut self) {
        let world = Arc::clone(&self.world);
        let mean = world.config.faults.rebuild_every;
        if mean.is_zero() {
            return;
        }
        let wait = mean.mul_f64(-(1.0 - self.rng.next_f64()).ln());
        let at = Instant::now() + wait;
        let margin = world.timings.acquire_after * 2 + world.config.faults.restart_within;
        if at + margin < self.quiet_at {
            self.at(at, Action::Rebuild);
        }
    }

    fn plan_start(&mut self) {
        let world = Arc::clone(&self.world);
        let (config, faults) = (&world.config, &world.config.faults);
        let now = Instant::now();
        self.at(now + config.sample_every, Action::Sample);
        self.next_arrival(faults.crash_every, Action::Crash);
        self.next_arrival(faults.pause_every, Action::Pause);
        self.next_arrival(faults.outage_every, Action::Outage);
        self.next_arrival(faults.churn_every, Action::Churn);
        self.next_arrival(faults.operator_every, Action::Operate);
        self.next_rebuild();
        self.next_arrival(faults.garble_every, Action::Garble);
        self.next_arrival(faults.link_every, Action::Link);
        if config.twins {
            self.next_arrival(world.timings.lease_validity * 6, Action::Twin);
        }
        let drain_delays = world.timings.store_timeout + faults.delayed_write_max;
        self.at(
            self.quiet_at.checked_sub(drain_delays).unwrap_or(now),
            Action::StopDelays,
        );
        self.at(self.quiet_at, Action::Quiet);
        if let Some(model) = &world.load {
            for period in 1..model.periods() {
                let at = world.origin + model.shift_at(period);
                if at < world.origin + config.duration {
                    self.at(at, Action::Shift);
                }
            }
        }
        if config.rolling_restart {
            self.at(world.origin + config.duration / 3, Action::Rolling);
        }
        self.at(world.origin + config.duration, Action::End);
    }

    async fn run(&mut self) {
        while let Some(((at, _), action)) = self.agenda.pop_first() {
            tokio::time::sleep_until(at).await;
            if self.world.lock().violation.is_some() {
                return;
            }
            match action {
                Action::End => {
                    self.finish();
                    return;
                }
                action => self.act(action).await,
            }
            if self.world.lock().violation.is_some() {
                return;
            }
        }
    }

    async fn act(&mut self, action: Action) {
        let faults = self.world.config.faults.clone();
        match action {
            Action::Sample => self.sample(),
            Action::Crash => {
                self.crash();
                self.next_arrival(faults.crash_every, Action::Crash);
            }
            Action::Pause => {
                self.pause();
                self.next_arrival(faults.pause_every, Action::Pause);
            }
            Action::Outage => {
                self.outage();
                self.next_arrival(faults.outage_every, Action::Outage);
            }
            Action::Churn => {
                self.churn().await;
                self.next_arrival(faults.churn_every, Action::Churn);
            }
            Action::Operate => {
                self.operate().await;
                self.next_arrival(faults.operator_every, Action::Operate);
            }
            Action::Rebuild => {
                self.rebuild();
                self.next_rebuild();
            }
            Action::Garble => {
                self.garble();
                self.next_arrival(faults.garble_every, Action::Garble);
            }
            Action::Link => {
                self.degrade_link();
                self.next_arrival(faults.link_every, Action::Link);
            }
            Action::Restart(index) => {
                let faulty = Instant::now() < self.quiet_at;
                lifecycle::restart(&self.world, index, faulty)
            }
            Action::Resume(holder) => self.resume(holder),
            Action::Twin => {
                self.twin();
                let every = self.world.timings.lease_validity * 6;
                self.next_arrival(every, Action::Twin);
            }
            Action::Retire(index) => self.retire(index),
            Action::StopDelays => self.world.lock().faults.delays = false,
            Action::Shift => {
                // The nodes see the new loads only at their next renewals and listings.
                let mut state = self.world.lock();
                state.recorder.changed(Instant::now());
                self.world.event(&mut state, "load shifts".to_owned());
            }
            Action::Rolling => self.rolling_restart(),
            Action::Quiet => {
                self.quiet();
                self.undo_operator_changes().await;
            }
            Action::End => {}
        }
    }

    fn sample(&mut self) {
        self.world.sample_all();
        let now = Instant::now();
        if now >= self.live_from {
            self.check_liveness(now);
        }
        self.check_balance(now, false);
        self.sample_load(now);
        self.world.lock().recorder.settle(now);
        self.at(now + self.world.config.sample_every, Action::Sample);
    }

    fn quiet(&mut self) {
        let world = Arc::clone(&self.world);
        let crashed: Vec<usize> = {
            let mut state = world.lock();
            state.faults.calls = false;
            state.faults.delays = false;
            state.faults.outage_until = None;
            state.faults.links.clear();
            state.garbled = None;
            for slot in state.nodes.values() {
                if let Some(process) = slot.process() {
                    process.gate.set_paused(false);
                }
            }
            world.event(&mut state, "faults stop".to_owned());
            state.recorder.changed(Instant::now());
            let mis_set: Vec<usize> = state
                .nodes
                .iter()
                .filter(|(_, s)| s.misconfigured && s.process().is_some())
                .map(|(index, _)| *index)
                .collect();
            for index in mis_set {
                lifecycle::end_process(&world, &mut state, index, Life::Crashed);
            }
            state
                .nodes
                .iter()
                .filter(|(_, s)| matches!(s.life, Life::Crashed))
                .map(|(index, _)| *index)
                .collect()
        };
        for index in crashed {
            lifecycle::start(&world, index);
        }
    }

    fn finish(&mut self) {
        let world = Arc::clone(&self.world);
        world.sample_all();
        let now = Instant::now();
        self.check_liveness(now);
        self.check_balance(now, true);
        let mut state = world.lock();
        state.recorder.settle(now);
        let running: Vec<usize> = state.nodes.keys().copied().collect();
        for index in running {
            lifecycle::end_process(&world, &mut state, index, Life::Left);
        }
        state.tasks.abort_all();
    }
}

mod blind;
mod checks;
mod churn;
mod disruption;
mod garble;
mod link;
mod load;
mod operator;
mod rebuild;
