//! A node's life: its process starts (the first time, after a crash, or as a joiner) with its
//! own clock, its store connection through the faults and its callbacks to the checks, works
//! under its leases, and ends by a crash, by leaving gracefully, or by itself when another
//! process took its name over or an operator destroyed its group.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    Callbacks, Environment, GroupMismatch, Halt, LeaseGuard, LeaseStore, Loss, NegativeControls,
    NodeId, Participant, PartitionId, SeededRng,
};
use tokio::time::Instant;

use crate::clock::{Gate, SimClock};
use crate::invariants::Holder;
use crate::store::FaultyStore;
use crate::world::{Life, Process, Slot, State, World};

/// Starts a new process for node `index` (its first, or a restart) with the fleet's timings.
pub(crate) fn start(world: &Arc<World>, index: usize) {
    start_as(world, index, false);
}

/// Starts a new process for node `index`, mis-set (see
/// [`crate::FaultConfig::misconfigured_restart_rate`]) or with the fleet's timings.
fn start_as(world: &Arc<World>, index: usize, misconfigured: bool) {
    let mut state = world.lock();
    let rho = world.timings.max_clock_drift;
    let rate = if world.config.faults.clock_drift && world.config.explore {
        crate::explore::edge_rate(rho, &mut state.rng)
    } else if world.config.faults.clock_drift {
        1.0 + rho * (2.0 * state.rng.next_f64() - 1.0)
    } else {
        1.0
    };
    let slot = state.nodes.entry(index).or_insert_with(|| Slot {
        name: NodeId::new(format!("n{index}")).expect("valid"),
        rate,
        incarnation: 0,
        life: Life::Crashed,
        draining: false,
        leaving: false,
        misconfigured: false,
        excluded: None,
    });
    slot.incarnation += 1;
    slot.misconfigured = misconfigured;
    let holder = slot.holder(index);
    let gate = Gate::default();
    let clock = SimClock::new(world.origin, slot.rate, gate.clone());
    let timings = if misconfigured {
        world.timings.clone().mis_set()
    } else {
        world.timings.clone()
    };
    let mut config = timings
        .participant_config(slot.name.clone(), world.config.partitions)
        .with_group(world.group.clone());
    let controls = config.negative_controls_mut();
    controls.release_ignores_permits = world.config.unsafe_release;
    controls.skip_group_check = misconfigured && world.config.unsafe_mixed_timings;
    controls.reuse_epoch = world.config.unsafe_epoch_reuse;
    controls.ignore_exclusions = world.config.unsafe_ignore_exclusions;
    controls.ignore_reservations = world.config.unsafe_ignore_reservations;
    controls.take_ignores_session = world.config.unsafe_session_take;
    controls.take_ended_sessions = world.config.unsafe_session_identity;
    controls.ignore_listed_changes = world.config.unsafe_unchecked_holdings;
    let any_control = *controls != NegativeControls::default();
    config.excluded = slot.excluded.iter().map(|(p, _)| *p).collect();
    if world.load.is_some() {
        // Weights in proportion to the capacities, as an operator sets them, so that the
        // first placement, made by count before any load is reported, starts close; the
        // capacity for load defaults to the weight.
        config.weight = crate::load::LoadModel::weight(index);
    }
    let unchecked = world.config.unsafe_timings || any_control;
    let store: Arc<dyn LeaseStore> = Arc::new(FaultyStore::new(
        Arc::clone(world),
        holder,
        slot.name.clone(),
        gate.clone(),
    ));
    let callbacks = NodeCallbacks {
        world: Arc::clone(world),
        holder,
    };
    let environment = Environment {
        clock: Arc::new(clock.clone()),
        seed: SeededRng::new(world.seed ^ ((index as u64) << 32) ^ holder.incarnation).next_u64(),
        metrics: None,
        // Replays must be exact; twins are distinct slots, so their seeds differ.
        session_seed: Some(
            SeededRng::new(world.seed ^ ((index as u64) << 40) ^ holder.incarnation).next_u64(),
        ),
    };
    let participant = if unchecked {
        Participant::start_unchecked(store, config, Arc::new(callbacks), environment)
    } else {
        Participant::start_with(store, config, callbacks, environment)
            .expect("the simulated timings are valid")
    };
    let watcher = stops_by_itself(Arc::clone(world), index, holder, participant.clone());
    slot.life = Life::Running(Process {
        participant,
        clock: clock.clone(),
        gate: gate.clone(),
        started: Instant::now(),
        sampled: None,
        sessions_ended: 0,
        scanned: false,
        restarting: false,
    });
    let rate = slot.rate;
    let mis_set = if misconfigured { " mis-set" } else { "" };
    world.event(
        &mut state,
        format!("{holder} started{mis_set} rate={rate:.6}"),
    );
    state.recorder.changed(Instant::now());
    world.spawn(&mut state, watcher);
    if misconfigured {
        state.counts.misconfigured += 1;
    }
    if !world.config.work_every.is_zero() {
        let worker = work(
            Arc::clone(world),
            holder,
            gate.clone(),
            state.rng.next_u64(),
        );
        world.spawn(&mut state, worker);
        let units = units(Arc::clone(world), holder, clock, gate, state.rng.next_u64());
        world.spawn(&mut state, units);
    }
}

/// Waits for the process `holder` of node `index` to stop by itself, and ends it then, as a
/// real process exits on that error:
///
/// - another process took its name over ([`Halt::Replaced`]): the name is the other
///   process's from that moment;
/// - an operator destroyed the group under it ([`GroupMismatch::Destroyed`]): it is started
///   again after a while, as its supervisor would, and joins the group as built again.
///
/// Nothing else ends a process that was replaced or whose group was destroyed.
async fn stops_by_itself(
    world: Arc<World>,
    index: usize,
    holder: Holder,
    participant: Participant,
) {
    let halt = participant.stopped().await;
    let destroyed = matches!(halt, Some(Halt::Refused(GroupMismatch::Destroyed { .. })));
    let Some(halt) = halt.filter(|h| destroyed || matches!(h, Halt::Replaced { .. })) else {
        return;
    };
    let restart_in = {
        let mut state = world.lock();
        if !end_if_current(&world, &mut state, holder) {
            return;
        }
        world.event(&mut state, format!("{holder} stopped by itself: {halt}"));
        if !destroyed {
            return;
        }
        // Down until its supervisor starts it again; the faults' end starts it at the latest.
        if let Some(slot) = state.nodes.get_mut(&index) {
            slot.life = Life::Crashed;
        }
        world
            .config
            .faults
            .restart_within
            .mul_f64(state.rng.next_f64())
    };
    tokio::time::sleep(restart_in).await;
    let faulty = Instant::now() < world.origin + world.config.quiet_at();
    restart(&world, index, faulty);
}

/// Starts node `index` again if it is still down from a crash; while `faulty`, mis-set with
/// the probability the faults give.
pub(crate) fn restart(world: &Arc<World>, index: usize, faulty: bool) {
    let misconfigured = {
        let mut state = world.lock();
        if !matches!(
            state.nodes.get(&index).map(|s| &s.life),
            Some(Life::Crashed)
        ) {
            return;
        }
        let rate = world.config.faults.misconfigured_restart_rate;
        faulty && rate > 0.0 && state.rng.next_f64() < rate
    };
    start_as(world, index, misconfigured);
}

/// Ends node `index`'s process, which is then in `life`. A crash aborts it without writing
/// anything; a node that leaves has been shut down gracefully by the caller.
pub(crate) fn end_process(
    world: &World,
    state: &mut State,
    index: usize,
    life: Life,
) -> Option<Process> {
    let now = Instant::now();
    let slot = state.nodes.get_mut(&index)?;
    let holder = slot.holder(index);
    let Life::Running(process) = std::mem::replace(&mut slot.life, life) else {
        return None;
    };
    process.participant.abort();
    state.work.process_ended(holder, now);
    state.recorder.changed(now);
    let lived = now - process.started;
    state.traffic.node_heartbeats += lived.as_secs_f64() / world.timings.heartbeat.as_secs_f64();
    let held = state.beliefs.held_at(holder, now);
    state.beliefs.end_all(holder, now);
    // A joiner that stops before reaching its share never does; its restart is no join.
    state.recorder.stopped(index);
    if matches!(state.nodes[&index].life, Life::Crashed) {
        state.recorder.crashed(&held, now);
        state.counts.crashes += 1;
        world.event(state, format!("{holder} crashed holding {}", held.len()));
    }
    Some(process)
}

/// Ends `holder`'s process, leaving its slot `Left`, if it is still the node's current one
/// and running; returns whether it did.
fn end_if_current(world: &World, state: &mut State, holder: Holder) -> bool {
    let current = state
        .nodes
        .get(&holder.node)
        .is_some_and(|slot| slot.incarnation == holder.incarnation);
    current && end_process(world, state, holder.node, Life::Left).is_some()
}

/// Shuts node `index` down gracefully in the background: it releases its leases (its
/// callbacks report each), removes its member record, and its process ends.
pub(crate) fn leave(world: &Arc<World>, index: usize) {
    let mut state = world.lock();
    let Some(slot) = state.nodes.get_mut(&index) else {
        return;
    };
    slot.leaving = true;
    let Some(process) = slot.process() else {
        return;
    };
    let (participant, holder) = (process.participant.clone(), slot.holder(index));
    world.event(&mut state, format!("{holder} leaving"));
    state.counts.leaves += 1;
    let task = {
        let world = Arc::clone(world);
        async move {
            participant.shutdown().await;
            let mut state = world.lock();
            end_process(&world, &mut state, index, Life::Left);
            world.event(&mut state, format!("{holder} left"));
        }
    };
    world.spawn(&mut state, task);
}

/// Stops node `index` to restart in place, in the background: its work in flight ends, each
/// lease it holds is written released and reserved for its name, and its process ends. With
/// `back_after`, it is started again that long after (within the restart window, or late);
/// without, it never comes back and the others take its partitions once the window ends.
///
/// With `twin`, a second process under the name starts at the same moment as the node's own,
/// as a duplicated pod would, at that index: both go for the reserved partitions. Per
/// partition, where nothing makes one of two processes under a name give way, the twin is
/// stopped for good `acquire_after` later.
pub(crate) fn restart_in_place(
    world: &Arc<World>,
    index: usize,
    back_after: Option<Duration>,
    twin: Option<usize>,
) {
    let mut state = world.lock();
    let Some(slot) = state.nodes.get_mut(&index) else {
        return;
    };
    let holder = slot.holder(index);
    let Life::Running(process) = &mut slot.life else {
        return;
    };
    process.restarting = true;
    let participant = process.participant.clone();
    slot.leaving = true;
    let when = match back_after {
        Some(delay) => format!("back {:.3}s after it stops", delay.as_secs_f64()),
        None => "not coming back".to_owned(),
    };
    world.event(&mut state, format!("{holder} restarting in place, {when}"));
    state.counts.restarts_in_place += 1;
    let task = {
        let world = Arc::clone(world);
        async move {
            participant.restart().await;
            {
                let mut state = world.lock();
                if !end_if_current(&world, &mut state, holder) {
                    return;
                }
                world.event(&mut state, format!("{holder} stopped to restart in place"));
                if back_after.is_some() {
                    // Down until started again; the faults' end starts it at the latest.
                    if let Some(slot) = state.nodes.get_mut(&index) {
                        slot.life = Life::Crashed;
                        slot.leaving = false;
                    }
                }
            }
            let Some(delay) = back_after else {
                return;
            };
            tokio::time::sleep(delay).await;
            let faulty = Instant::now() < world.origin + world.config.quiet_at();
            restart(&world, index, faulty);
            if let Some(twin) = twin {
                start_twin(&world, index, twin);
                if world.config.lease_mode != leasehold::LeaseMode::Session {
                    tokio::time::sleep(world.timings.acquire_after).await;
                    retire(&world, twin);
                }
            }
        }
    };
    world.spawn(&mut state, task);
}

/// Starts a second process under node `of`'s name, as node `index`.
fn start_twin(world: &Arc<World>, of: usize, index: usize) {
    {
        let mut state = world.lock();
        let Some(slot) = state.nodes.get(&of) else {
            return;
        };
        let twin = slot.twin();
        let name = twin.name.clone();
        state.nodes.insert(index, twin);
        world.event(
            &mut state,
            format!("a second process starts under {name}'s name as n{index}"),
        );
    }
    start(world, index);
}

/// Stops node `index`'s process for good: a twin whose double was meant to stay.
pub(crate) fn retire(world: &World, index: usize) {
    let mut state = world.lock();
    let Some(slot) = state.nodes.get(&index) else {
        return;
    };
    let holder = slot.holder(index);
    if end_process(world, &mut state, index, Life::Left).is_none() {
        if let Some(slot) = state.nodes.get_mut(&index) {
            slot.life = Life::Left;
        }
    }
    world.event(&mut state, format!("{holder} stopped for good"));
}

/// A worker of node `holder`: every `work_every` it checks its leases, and submits the work
/// done under them to the fenced resources when it next wakes, a cycle later. It holds its
/// fencing tokens across the work, as a real writer does across a slow operation, so that a
/// pause striking it at any moment leaves it with tokens others may have outdated meanwhile.
async fn work(world: Arc<World>, holder: Holder, gate: Gate, seed: u64) {
    let mut rng = SeededRng::new(seed);
    let every = world.config.work_every;
    let mut checked: Vec<LeaseGuard> = Vec::new();
    loop {
        tokio::time::sleep(rng.spread(every, 0.5)).await;
        gate.wait_open().await;
        let Some(participant) = world.participant(holder) else {
            return;
        };
        if !checked.is_empty() {
            world.submit(holder, &checked);
        }
        checked = participant
            .owned()
            .into_iter()
            .filter_map(|partition| participant.lease(partition))
            .collect();
    }
}

/// Units of work of node `holder`, each under a permit: about every `work_every / 2` it
/// starts one on a partition it holds that has none running. Most last a few seconds; one in
/// eight lasts up to two leases, outliving the drain timeout of a hand-off now and then.
/// Each unit reports its span to the checks when it ends.
async fn units(world: Arc<World>, holder: Holder, clock: SimClock, gate: Gate, seed: u64) {
    let mut rng = SeededRng::new(seed);
    let every = world.config.work_every / 2;
    let longest = world.timings.lease_validity * 2;
    let quiet = world.origin + world.config.quiet_at();
    let running: Arc<Mutex<BTreeSet<PartitionId>>> = Arc::default();
    loop {
        tokio::time::sleep(rng.spread(every, 0.5)).await;
        gate.wait_open().await;
        let Some(participant) = world.participant(holder) else {
            return;
        };
        let idle: Vec<PartitionId> = {
            let running = running.lock().unwrap_or_else(|e| e.into_inner());
            let owned = participant.owned();
            owned.into_iter().filter(|p| !running.contains(p)).collect()
        };
        if idle.is_empty() {
            continue;
        }
        let partition = idle[rng.below(idle.len())];
        let Some(permit) = participant.permit(partition) else {
            continue;
        };
        // Work that outlives a hand-off's drain timeout is a fault of sorts (the partition
        // then waits for an expiry): long units end before the faults stop.
        let before_quiet = quiet.saturating_duration_since(Instant::now());
        let length = if rng.below(8) == 0 {
            longest.mul_f64(rng.next_f64()).min(before_quiet)
        } else {
            every.mul_f64(4.0 * rng.next_f64())
        };
        running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(partition);
        let start = Instant::now();
        let unit = {
            let (world, clock, gate, running) = (
                Arc::clone(&world),
                clock.clone(),
                gate.clone(),
                Arc::clone(&running),
            );
            async move {
                tokio::time::sleep(length).await;
                gate.wait_open().await;
                world.unit_done(holder, &permit, start, &clock);
                drop(permit);
                running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&partition);
            }
        };
        let mut state = world.lock();
        world.spawn(&mut state, unit);
    }
}

/// A node's callbacks: every notice goes to the checks.
struct NodeCallbacks {
    world: Arc<World>,
    holder: Holder,
}

impl Callbacks for NodeCallbacks {
    fn on_acquired(&self, lease: &LeaseGuard) {
        self.world.acquired(self.holder, lease);
    }

    fn on_lost(&self, loss: &Loss) {
        self.world.lost(self.holder, loss);
    }

    fn load(&self, partition: PartitionId) -> Option<f64> {
        let model = self.world.load.as_ref()?;
        Some(model.load(partition, self.world.elapsed(Instant::now())))
    }
}
