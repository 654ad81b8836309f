//! The simulated world: the shared store, every node's process, the checks and the figures.
//! Everything runs on one thread; the state sits behind one lock that is never held across
//! an await.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold::{
    Callbacks, Environment, GroupName, LeaseGuard, LeaseStore, Loss, LossReason, MemoryStore,
    NodeId, Participant, SeededRng, TimeoutStore,
};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::{Gate, SimClock};
use crate::config::{SimConfig, Timings};
use crate::figures::{FaultCounts, Recorder, StoreTraffic};
use crate::invariants::epochs::EpochOrder;
use crate::invariants::fencing::FencedResources;
use crate::invariants::single_owner::SingleOwner;
use crate::invariants::{Holder, Invariant};
use crate::report::Violation;
use crate::store::{Fate, FaultyStore};
use crate::trace::Trace;

/// A running process of a node.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    pub participant: Participant,
    pub clock: SimClock,
    pub gate: Gate,
    pub started: Instant,
    /// [`Participant::lease_changes`] when its beliefs were last sampled.
    pub sampled: Option<u64>,
}

/// Where a node is in its life.
#[derive(Debug, Clone)]
pub(crate) enum Life {
    Running(Process),
    Crashed,
    Left,
}

/// One node: a name, a clock rate (a property of the machine, kept across restarts) and
/// its current process.
#[derive(Debug)]
pub(crate) struct Slot {
    pub name: NodeId,
    pub rate: f64,
    pub incarnation: u64,
    pub life: Life,
    pub draining: bool,
    /// Shutting down gracefully: no longer a target for faults.
    pub leaving: bool,
}

impl Slot {
    pub fn process(&self) -> Option<&Process> {
        match &self.life {
            Life::Running(process) => Some(process),
            _ => None,
        }
    }

    pub fn holder(&self, index: usize) -> Holder {
        Holder {
            node: index,
            incarnation: self.incarnation,
        }
    }

    /// Running, not draining and not paused: a node that should be serving.
    pub fn is_active(&self) -> bool {
        !self.draining && !self.leaving && self.process().is_some_and(|p| !p.gate.is_paused())
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

/// Everything that changes during a run.
pub(crate) struct State {
    pub trace: Trace,
    pub rng: SeededRng,
    pub nodes: BTreeMap<usize, Slot>,
    pub faults: StoreFaults,
    pub beliefs: SingleOwner,
    pub epochs: EpochOrder,
    pub fenced: FencedResources,
    pub recorder: Recorder,
    pub traffic: StoreTraffic,
    pub counts: FaultCounts,
    pub violation: Option<Violation>,
    pub tasks: JoinSet<()>,
}

/// The world of one seed.
pub(crate) struct World {
    pub config: SimConfig,
    pub timings: Timings,
    pub seed: u64,
    pub origin: Instant,
    pub store: MemoryStore,
    pub group: GroupName,
    state: Mutex<State>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("seed", &self.seed).finish()
    }
}

impl World {
    /// The world of `seed`, recording its events in `trace`.
    pub fn new(config: &SimConfig, seed: u64, trace: Trace) -> Arc<World> {
        let origin = Instant::now();
        let timings = config.effective_timings();
        let retention = timings.lease_validity * 4 + timings.acquire_after * 2;
        let window = timings.acquire_after + timings.scan_interval * 4;
        Arc::new(World {
            config: config.clone(),
            seed,
            origin,
            store: MemoryStore::new(),
            group: GroupName::new("sim").expect("valid"),
            state: Mutex::new(State {
                trace,
                rng: SeededRng::new(seed ^ 0x005E_ED0F_FA17),
                nodes: BTreeMap::new(),
                faults: StoreFaults::default(),
                beliefs: SingleOwner::new(origin, retention),
                epochs: EpochOrder::default(),
                fenced: FencedResources::default(),
                recorder: Recorder::new(config.partitions, window),
                traffic: StoreTraffic::default(),
                counts: FaultCounts::default(),
                violation: None,
                tasks: JoinSet::new(),
            }),
            timings,
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn elapsed(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }

    pub fn event(&self, state: &mut State, text: String) {
        state.trace.record(self.elapsed(Instant::now()), text);
    }

    /// Records the first violation; the run stops at its next step.
    pub fn violate(&self, state: &mut State, invariant: Invariant, details: String) {
        if state.violation.is_some() {
            return;
        }
        let at = self.elapsed(Instant::now());
        // The events worth showing: those of the partition and the processes named.
        let needles: Vec<String> = details
            .split(|c: char| c.is_whitespace() || c == ':' || c == ',')
            .filter(|word| {
                let partition = word
                    .strip_prefix('p')
                    .is_some_and(|n| n.parse::<u32>().is_ok());
                let holder = word.starts_with('n') && word.contains('#');
                partition || holder
            })
            .map(|word| format!(" {word} "))
            .collect();
        let mut recent = state.trace.recent(&needles, 60);
        if recent.is_empty() {
            recent = state.trace.recent(&[], 60);
        }
        self.event(state, format!("VIOLATION {invariant}: {details}"));
        state.violation = Some(Violation {
            invariant,
            seed: self.seed,
            at,
            details,
            replay: self.config.replay_command(self.seed),
            recent_events: recent,
        });
    }

    pub fn spawn(&self, state: &mut State, task: impl Future<Output = ()> + Send + 'static) {
        while state.tasks.try_join_next().is_some() {}
        state.tasks.spawn(task);
    }

    /// The participant of `holder`, if that process still runs.
    pub fn participant(&self, holder: Holder) -> Option<Participant> {
        let state = self.lock();
        let slot = state.nodes.get(&holder.node)?;
        (slot.incarnation == holder.incarnation)
            .then(|| slot.process().map(|p| p.participant.clone()))
            .flatten()
    }

    /// Reads `holder`'s current leases and updates its beliefs. Only when they changed since
    /// the last look: a belief ends at its deadline by itself, so an unchanged set of leases
    /// has nothing new to say.
    pub fn sample(&self, state: &mut State, holder: Holder) {
        let now = Instant::now();
        let Some(slot) = state
            .nodes
            .get_mut(&holder.node)
            .filter(|slot| slot.incarnation == holder.incarnation)
        else {
            return;
        };
        let Life::Running(process) = &mut slot.life else {
            return;
        };
        let changes = process.participant.lease_changes();
        if process.sampled.replace(changes) == Some(changes) {
            return;
        }
        let (leases, clock) = (process.participant.leases(), process.clock.clone());
        let mut gone = state.beliefs.open_partitions(holder);
        gone.retain(|p| {
            leases
                .binary_search_by_key(p, LeaseGuard::partition)
                .is_err()
        });
        for guard in leases {
            let end = clock.to_true(guard.valid_until());
            let (partition, epoch) = (guard.partition(), guard.epoch());
            if let Err(details) = state.beliefs.believe(holder, partition, epoch, now, end) {
                self.violate(state, Invariant::SingleOwner, details);
            }
        }
        for partition in gone {
            state.beliefs.disbelieve(holder, partition, now);
        }
    }

    pub fn sample_all(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        let fair_share = self.fair_share(&state);
        let holders: Vec<(Holder, usize)> = state
            .nodes
            .iter()
            .filter_map(|(index, slot)| {
                let held = slot.process()?.participant.owned().len();
                Some((slot.holder(*index), held))
            })
            .collect();
        for (holder, held) in holders {
            self.sample(&mut state, holder);
            // A joiner may reach its share without acquiring anything, when other nodes
            // join and the share falls to what it holds.
            state.recorder.holds(holder, now, held, fair_share);
        }
        state.beliefs.prune(now);
    }

    /// ⌊P / N⌋ over the nodes currently serving.
    fn fair_share(&self, state: &State) -> usize {
        self.config.partitions as usize / World::active_count(state).max(1)
    }

    fn active_count(state: &State) -> usize {
        state.nodes.values().filter(|s| s.is_active()).count()
    }

    fn acquired(&self, holder: Holder, guard: &LeaseGuard) {
        let now = Instant::now();
        let (partition, epoch) = (guard.partition(), guard.epoch());
        let mut state = self.lock();
        self.event(
            &mut state,
            format!("{holder} acquired p{partition} epoch={epoch}"),
        );
        if let Err(details) = state.epochs.acquired(partition, epoch, holder) {
            self.violate(&mut state, Invariant::EpochOrder, details);
        }
        let Some(process) = state
            .nodes
            .get(&holder.node)
            .and_then(Slot::process)
            .cloned()
        else {
            return;
        };
        let end = process.clock.to_true(guard.valid_until());
        if let Err(details) = state.beliefs.believe(holder, partition, epoch, now, end) {
            self.violate(&mut state, Invariant::SingleOwner, details);
        }
        self.sample(&mut state, holder);
        let held = process.participant.owned().len();
        let fair_share = self.fair_share(&state);
        state.recorder.acquired(holder, partition, now);
        state.recorder.holds(holder, now, held, fair_share);
    }

    fn lost(&self, holder: Holder, loss: &Loss) {
        let mut state = self.lock();
        self.event(
            &mut state,
            format!(
                "{holder} lost p{} epoch={} {}",
                loss.partition,
                loss.epoch,
                loss.reason.as_str()
            ),
        );
        self.sample(&mut state, holder);
        if loss.reason == LossReason::Released {
            state.recorder.released(loss.partition, Instant::now());
        }
    }

    /// Work from `holder` under the leases it checked a moment ago.
    pub fn submit(&self, holder: Holder, guards: &[LeaseGuard]) {
        let mut state = self.lock();
        for guard in guards {
            let state = &mut *state;
            let outcome =
                state
                    .fenced
                    .submit(guard.partition(), guard.epoch(), holder, &state.epochs);
            match outcome {
                Ok(true) => {}
                Ok(false) => self.event(
                    state,
                    format!(
                        "{holder} work on p{} epoch={} rejected as stale",
                        guard.partition(),
                        guard.epoch()
                    ),
                ),
                Err(details) => self.violate(state, Invariant::Fencing, details),
            }
        }
    }

    /// Called as a node's request enters the store wrapper.
    pub fn store_call(&self, holder: Holder, write: bool, rows: usize) {
        let mut state = self.lock();
        if write {
            state.traffic.write_calls += 1;
            state.traffic.rows_written += rows as u64;
        } else {
            state.traffic.read_calls += 1;
        }
        self.sample(&mut state, holder);
    }

    pub fn store_wall(&self, spent: Duration) {
        self.lock().traffic.store_wall_seconds += spent.as_secs_f64();
    }

    pub fn rows_read(&self, rows: usize) {
        self.lock().traffic.rows_read += rows as u64;
    }

    pub fn lease_listing(&self, rows: usize) {
        let mut state = self.lock();
        state.traffic.rows_read += rows as u64;
        state.traffic.lease_listings += 1;
    }

    pub fn latency(&self) -> Duration {
        let max = self.config.faults.max_latency;
        if max.is_zero() {
            return Duration::ZERO;
        }
        max.mul_f64(self.lock().rng.next_f64())
    }

    /// Decides what happens to a request reaching the store now.
    pub fn fate(&self, holder: Holder, write: bool) -> Fate {
        let mut state = self.lock();
        let fate = self.decide(&mut state, write);
        let counts = &mut state.counts;
        let what = match fate {
            Fate::Deliver => return fate,
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
        let kind = if write { "write" } else { "read" };
        self.event(&mut state, format!("{holder} {kind} {what}"));
        fate
    }

    fn decide(&self, state: &mut State, write: bool) -> Fate {
        let faults = &self.config.faults;
        if state
            .faults
            .outage_until
            .is_some_and(|end| Instant::now() < end)
        {
            return Fate::Unavailable;
        }
        if !state.faults.calls {
            return Fate::Deliver;
        }
        let roll = state.rng.next_f64();
        let mut threshold = faults.throttle_rate;
        if roll < threshold {
            return Fate::Throttled;
        }
        threshold += faults.lost_reply_rate;
        if roll < threshold {
            return Fate::LoseReply;
        }
        threshold += faults.delayed_write_rate;
        if write && state.faults.delays && roll < threshold {
            let fraction = state.rng.next_f64();
            let delay = self.timings.store_timeout + faults.delayed_write_max.mul_f64(fraction);
            return Fate::Delay(delay);
        }
        Fate::Deliver
    }

    /// Applies a held-back write `delay` from now.
    pub fn apply_later(&self, delay: Duration, write: impl Future<Output = ()> + Send + 'static) {
        let mut state = self.lock();
        self.spawn(&mut state, async move {
            tokio::time::sleep(delay).await;
            write.await;
        });
    }

    /// Starts a new process for node `index` (its first, or a restart).
    pub fn start_node(self: &Arc<Self>, index: usize) {
        let mut state = self.lock();
        let rho = self.timings.max_clock_drift;
        let rate = if self.config.faults.clock_drift {
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
        });
        slot.incarnation += 1;
        let holder = slot.holder(index);
        let gate = Gate::default();
        let clock = SimClock::new(self.origin, slot.rate, gate.clone());
        let config = self
            .timings
            .participant_config(slot.name.clone(), self.config.partitions)
            .with_group(self.group.clone());
        let store: Arc<dyn LeaseStore> =
            Arc::new(FaultyStore::new(Arc::clone(self), holder, gate.clone()));
        let callbacks = NodeCallbacks {
            world: Arc::clone(self),
            holder,
        };
        let environment = Environment {
            clock: Arc::new(clock.clone()),
            seed: SeededRng::new(self.seed ^ ((index as u64) << 32) ^ holder.incarnation)
                .next_u64(),
        };
        let participant = if self.config.unsafe_timings {
            // Unchecked start skips the time limit the checked one adds; add it here.
            let store = Arc::new(TimeoutStore::new(store, config.store_timeout));
            Participant::start_unchecked(store, config, Arc::new(callbacks), environment)
        } else {
            Participant::start_with(store, config, callbacks, environment)
                .expect("the simulated timings are valid")
        };
        slot.life = Life::Running(Process {
            participant,
            clock,
            gate: gate.clone(),
            started: Instant::now(),
            sampled: None,
        });
        let rate = slot.rate;
        self.event(&mut state, format!("{holder} started rate={rate:.6}"));
        if !self.config.work_every.is_zero() {
            let worker = crate::driver::work(Arc::clone(self), holder, gate, state.rng.next_u64());
            self.spawn(&mut state, worker);
        }
    }

    /// Ends node `index`'s process. `crash` aborts it without writing anything; otherwise the
    /// caller has shut it down gracefully.
    pub fn end_process(&self, state: &mut State, index: usize, life: Life) -> Option<Process> {
        let now = Instant::now();
        let slot = state.nodes.get_mut(&index)?;
        let holder = slot.holder(index);
        let Life::Running(process) = std::mem::replace(&mut slot.life, life) else {
            return None;
        };
        process.participant.abort();
        let lived = now - process.started;
        state.traffic.node_heartbeats += lived.as_secs_f64() / self.timings.heartbeat.as_secs_f64();
        let held = state.beliefs.held_at(holder, now);
        state.beliefs.end_all(holder, now);
        // A joiner that stops before reaching its share never does; its restart is no join.
        state.recorder.stopped(index);
        if matches!(state.nodes[&index].life, Life::Crashed) {
            state.recorder.crashed(&held, now);
            state.counts.crashes += 1;
            self.event(state, format!("{holder} crashed holding {}", held.len()));
        }
        Some(process)
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
}
