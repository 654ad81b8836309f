//! The simulated world: the shared store, every node's process, the checks and the figures.
//! Everything runs on one thread; the state sits behind one lock that is never held across
//! an await.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold::{GroupName, MemoryStore, NodeId, Participant, PartitionId, SeededRng, Version};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::{Gate, SimClock};
use crate::config::SimConfig;
use crate::faults::StoreFaults;
use crate::figures::{FaultCounts, Recorder, StoreTraffic};
use crate::invariants::epochs::EpochOrder;
use crate::invariants::fencing::FencingJudge;
use crate::invariants::single_owner::SingleOwner;
use crate::invariants::work::WorkSpans;
use crate::invariants::{Holder, Invariant};
use crate::load::{LoadModel, LoadRecord, LoadShape};
use crate::report::Violation;
use crate::resource::Resources;
use crate::timings::Timings;
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
    /// Its sessions ended so far ([`leasehold::Status::sessions_ended`]), as last sampled.
    pub sessions_ended: u64,
    /// Whether it has completed a scan: joined the group, registered and read the others.
    pub scanned: bool,
    /// Whether it is stopping to restart in place: what it releases is reserved, not handed
    /// off, and is not measured as a hand-off.
    pub restarting: bool,
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
    /// Started with timings unsafe against the fleet's (refused by the group record unless
    /// the negative control skips the check); started again properly when faults stop.
    pub misconfigured: bool,
    /// The partition this node's own exclusion list names, and since when: kept across
    /// restarts, as a node's configuration would be.
    pub excluded: Option<(PartitionId, Instant)>,
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

    /// A slot for a second process under this node's name, not started yet: the same name,
    /// machine (clock rate) and exclusion list.
    pub fn twin(&self) -> Slot {
        Slot {
            name: self.name.clone(),
            rate: self.rate,
            incarnation: 0,
            life: Life::Crashed,
            draining: false,
            leaving: false,
            misconfigured: false,
            excluded: self.excluded,
        }
    }

    /// Running, not draining and not paused: a node that should be serving.
    pub fn is_active(&self) -> bool {
        !self.draining && !self.leaving && self.process().is_some_and(|p| !p.gate.is_paused())
    }
}

/// Everything that changes during a run.
pub(crate) struct State {
    pub trace: Trace,
    pub rng: SeededRng,
    pub nodes: BTreeMap<usize, Slot>,
    pub faults: StoreFaults,
    pub beliefs: SingleOwner,
    pub epochs: EpochOrder,
    pub resources: Resources,
    pub fencing: FencingJudge,
    pub work: WorkSpans,
    pub recorder: Recorder,
    pub traffic: StoreTraffic,
    pub counts: FaultCounts,
    pub violation: Option<Violation>,
    pub tasks: JoinSet<()>,
    /// Load balancing over the run, with a load model.
    pub load: LoadRecord,
    /// Acquisitions so far: a rolling restart counts its moves from them.
    pub acquisitions: u64,
    /// A rolling restart's outcome: partitions back with their holder, partitions
    /// compared, acquisitions meanwhile.
    pub rolling: Option<(u64, u64, u64)>,
    /// A node that cannot decode another's member record: the reader's node index, the
    /// member, and until when.
    pub garbled: Option<(usize, NodeId, Instant)>,
    /// The version each process's own last write of its member record left (`None`: its
    /// delete), for the own-session check; none after a create, which may land on a record
    /// someone else deleted.
    pub own_members: BTreeMap<Holder, Option<Version>>,
    /// The partitions reserved for nodes restarting in place, from the store's writes.
    pub reservations: crate::invariants::reservations::Reservations,
}

impl State {
    /// The indices of the nodes that should be serving ([`Slot::is_active`]), in order.
    pub fn active_nodes(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|(_, slot)| slot.is_active())
            .map(|(index, _)| *index)
            .collect()
    }
}

/// The world of one seed.
pub(crate) struct World {
    pub config: SimConfig,
    pub timings: Timings,
    pub seed: u64,
    pub origin: Instant,
    pub store: MemoryStore,
    pub group: GroupName,
    /// The partitions' load, if the run models it.
    pub load: Option<LoadModel>,
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
            load: config.load.as_ref().map(|shape| {
                // A rolling restart is measured under steady load: a shift meanwhile would
                // move partitions for balance and hide what went back to its holder.
                let shape = LoadShape {
                    shift_every: if config.rolling_restart {
                        Duration::ZERO
                    } else {
                        shape.shift_every
                    },
                    ..shape.clone()
                };
                LoadModel::new(&shape, config.partitions, config.duration, seed)
            }),
            state: Mutex::new(State {
                trace,
                rng: SeededRng::new(seed ^ 0x005E_ED0F_FA17),
                nodes: BTreeMap::new(),
                faults: StoreFaults::default(),
                beliefs: SingleOwner::new(origin, retention),
                epochs: EpochOrder::default(),
                resources: Resources::new(config.unsafe_stale_fencing),
                fencing: FencingJudge::default(),
                work: WorkSpans::new(timings.lease_validity * 20),
                recorder: {
                    let mut recorder = Recorder::new(config.partitions, window);
                    recorder.measure_against(timings.acquire_after);
                    recorder
                },
                traffic: StoreTraffic::default(),
                counts: FaultCounts::default(),
                violation: None,
                tasks: JoinSet::new(),
                load: LoadRecord::default(),
                acquisitions: 0,
                rolling: None,
                garbled: None,
                own_members: BTreeMap::new(),
                reservations: Default::default(),
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
}

mod checks;
mod network;
mod reservations;
