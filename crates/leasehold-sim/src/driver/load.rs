//! With a load model: sampling the fleet's true load balance, checking its load form where
//! the fleet has settled, and the rolling restart whose figures say how much placement
//! remembers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{NodeId, ParticipantConfig, PartitionId};
use tokio::time::Instant;

use super::Director;
use crate::invariants::balance::{self, LoadHoldings};
use crate::lifecycle;
use crate::load::LoadModel;
use crate::world::{Life, State, World};

/// The band nodes balance to: the participant's default.
pub(super) fn band() -> f64 {
    ParticipantConfig::new(NodeId::new("n").expect("valid"), 1).load_band
}

/// Every serving node's true load, fair share and what it could give, at `now`.
pub(super) fn holdings(
    world: &World,
    model: &LoadModel,
    state: &State,
    now: Instant,
    unmovable: &dyn Fn(PartitionId) -> bool,
) -> Vec<LoadHoldings> {
    let elapsed = world.elapsed(now);
    let total: f64 = (0..world.config.partitions)
        .map(|p| model.load(PartitionId(p), elapsed))
        .sum();
    let serving: Vec<(usize, &crate::world::Slot)> = state
        .nodes
        .iter()
        .filter(|(_, slot)| slot.is_active() && slot.process().is_some_and(|p| p.scanned))
        .map(|(index, slot)| (*index, slot))
        .collect();
    let capacity: f64 = serving
        .iter()
        .map(|(index, _)| LoadModel::capacity(*index))
        .sum();
    let mut out: Vec<LoadHoldings> = state
        .nodes
        .iter()
        .filter_map(|(index, slot)| {
            let process = slot.process()?;
            let owned = process.participant.owned();
            let loads: Vec<f64> = owned.iter().map(|p| model.load(*p, elapsed)).collect();
            let lightest = owned
                .iter()
                .zip(&loads)
                .filter(|(p, _)| !unmovable(**p))
                .map(|(_, load)| *load)
                .fold(None, |min: Option<f64>, l| {
                    Some(min.map_or(l, |m| m.min(l)))
                });
            let active = serving.iter().any(|(i, _)| i == index);
            let status = process.participant.status();
            Some(LoadHoldings {
                node: slot.name.to_string(),
                load: loads.iter().sum(),
                fair: if active && capacity > 0.0 {
                    total * LoadModel::capacity(*index) / capacity
                } else {
                    0.0
                },
                partitions: owned.len(),
                lightest,
                serving: active,
                draining: slot.draining,
                moves_left: status.load_moves_left,
            })
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

impl Director {
    /// Records the fleet's worst ratio of load to fair share at `now`.
    pub(super) fn sample_load(&mut self, now: Instant) {
        let world = Arc::clone(&self.world);
        let Some(model) = &world.load else {
            return;
        };
        let mut state = world.lock();
        let nodes = holdings(&world, model, &state, now, &|_| false);
        let worst = nodes
            .iter()
            .filter(|n| n.serving)
            .map(LoadHoldings::ratio)
            .fold(0.0, f64::max);
        if worst == 0.0 {
            return;
        }
        let elapsed = world.elapsed(now);
        let period = model.period(elapsed);
        // Not converged while partitions wait for a taker: the shares of the rest mean little.
        let held: usize = nodes.iter().map(|n| n.partitions).sum();
        let all_held = held >= world.config.partitions as usize;
        state.load.sample(
            elapsed,
            period,
            model.shift_at(period),
            worst,
            band(),
            all_held,
        );
    }

    /// Partitions the load check must not expect to move: those a node excludes or the
    /// operator prohibited someone from.
    pub(super) fn unmovable(&self, state: &State) -> impl Fn(PartitionId) -> bool {
        let mut pinned: Vec<PartitionId> = state
            .nodes
            .values()
            .filter_map(|s| s.excluded.map(|(p, _)| p))
            .collect();
        pinned.extend(self.operator.prohibited_partition());
        move |p| pinned.contains(&p)
    }

    /// The load form of the balance check, on the true loads.
    pub(super) fn check_load_balance(&self, state: &State, now: Instant) -> Result<(), String> {
        let Some(model) = &self.world.load else {
            return Ok(());
        };
        let unmovable = self.unmovable(state);
        let nodes = holdings(&self.world, model, state, now, &unmovable);
        balance::check_load(&nodes, band())
    }

    /// Restarts every node once, one at a time, and records which partitions went back to
    /// their holders.
    pub(super) fn rolling_restart(&mut self) {
        let world = Arc::clone(&self.world);
        let task = async move {
            let before = holders(&world);
            let (indices, moves_before) = {
                let state = world.lock();
                (state.active_nodes(), state.acquisitions)
            };
            for index in indices {
                let participant = {
                    let mut state = world.lock();
                    let Some(slot) = state.nodes.get_mut(&index) else {
                        continue;
                    };
                    slot.leaving = true;
                    let Some(process) = slot.process() else {
                        continue;
                    };
                    let participant = process.participant.clone();
                    world.event(&mut state, format!("n{index} rolling restart"));
                    participant
                };
                participant.shutdown().await;
                {
                    let mut state = world.lock();
                    lifecycle::end_process(&world, &mut state, index, Life::Left);
                    if let Some(slot) = state.nodes.get_mut(&index) {
                        slot.leaving = false;
                    }
                }
                lifecycle::start(&world, index);
                // As an operator waits (a StatefulSet's minReadySeconds) before the next: the
                // node has joined and the hand-backs are over.
                settle(&world, world.timings.scan_interval * 2).await;
            }
            settle(&world, world.timings.settle_delay()).await;
            let after = holders(&world);
            let mut state = world.lock();
            let returned = before
                .iter()
                .filter(|(p, holder)| after.get(p) == Some(holder))
                .count() as u64;
            let moves = state.acquisitions - moves_before;
            state.rolling = Some((returned, before.len() as u64, moves));
            world.event(
                &mut state,
                format!("rolling restart done: {returned}/{} back", before.len()),
            );
        };
        let mut state = self.world.lock();
        self.world.spawn(&mut state, task);
    }
}

/// Waits (up to ten minutes) until every partition is held and nothing has changed for
/// `quiet`.
async fn settle(world: &World, quiet: Duration) {
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let state = world.lock();
        let held: usize = state
            .nodes
            .values()
            .filter_map(|s| s.process())
            .map(|p| p.participant.owned().len())
            .sum();
        let joined = state
            .nodes
            .values()
            .all(|s| s.process().is_none_or(|p| p.scanned));
        if joined
            && held == world.config.partitions as usize
            && state.recorder.settled(Instant::now(), quiet)
        {
            return;
        }
    }
}

/// Which node holds each partition now.
fn holders(world: &World) -> BTreeMap<PartitionId, usize> {
    let state = world.lock();
    let mut map = BTreeMap::new();
    for (index, slot) in &state.nodes {
        if let Some(process) = slot.process() {
            for p in process.participant.owned() {
                map.insert(p, *index);
            }
        }
    }
    map
}
