//! The checks the director makes over the whole fleet: liveness once the faults have
//! stopped, and balance whenever the fleet has settled and at the end.

use leasehold::PartitionId;
use tokio::time::Instant;

use super::Director;
use crate::invariants::{balance, liveness, Invariant};
use crate::world::{State, World};

impl Director {
    pub(super) fn check_liveness(&self, now: Instant) {
        let world = &self.world;
        let mut state = world.lock();
        let handoff = world.timings.handoff_bound();
        let checked = liveness::check(&state.beliefs, world.config.partitions, now, handoff);
        if let Err(details) = checked {
            world.violate(&mut state, Invariant::Liveness, details);
        }
    }

    /// Checks balance if the fleet has settled (see [`settled`]); with `always`, whatever
    /// the fleet's state, as at the end of a run.
    pub(super) fn check_balance(&self, now: Instant, always: bool) {
        let world = &self.world;
        let mut state = world.lock();
        // The load form is judged only where the fleet has settled, the end included: a
        // shift of the load late in the quiet period leaves the nodes no time to see it.
        if !always || world.load.is_some() {
            if !settled(world, &state, now, self.operator.offline()) {
                return;
            }
            state.recorder.samples.settled_checks += 1;
        }
        if self.world.load.is_some() {
            if let Err(details) = self.check_load_balance(&state, now) {
                let when = if always { "at the end" } else { "settled" };
                world.violate(&mut state, Invariant::Balance, format!("{when}: {details}"));
            }
            return;
        }
        let holdings: Vec<balance::Holdings> = state
            .nodes
            .values()
            .filter_map(|slot| {
                let process = slot.process()?;
                Some(balance::Holdings {
                    node: slot.name.to_string(),
                    owned: process.participant.owned().len(),
                    draining: slot.draining,
                })
            })
            .collect();
        if let Err(details) = balance::check(&holdings) {
            let when = if always { "at the end" } else { "settled" };
            world.violate(&mut state, Invariant::Balance, format!("{when}: {details}"));
        }
    }
}

/// Whether the fleet has settled at `now`, so that its shares must be even: the recorder saw
/// no failover or hand-off still waiting and no change for [`crate::Timings::settle_delay`]
/// (see `Recorder::settled`), every partition but the one the operator holds `offline` is
/// held, and every node runs joined (past its first scan), unpaused, not leaving, with the
/// fleet's timings, and hands nothing off.
fn settled(world: &World, state: &State, now: Instant, offline: Option<PartitionId>) -> bool {
    if !state.recorder.settled(now, world.timings.settle_delay()) {
        return false;
    }
    let mut held = vec![false; world.config.partitions as usize];
    for slot in state.nodes.values() {
        let Some(process) = slot.process() else {
            continue;
        };
        let serving = process.scanned && !process.gate.is_paused();
        if !serving || slot.leaving || slot.misconfigured {
            return false;
        }
        if !process.participant.handing_off().is_empty() {
            return false;
        }
        for partition in process.participant.owned() {
            if let Some(held) = held.get_mut(partition.0 as usize) {
                *held = true;
            }
        }
    }
    held.iter()
        .enumerate()
        .all(|(partition, held)| *held || offline == Some(PartitionId(partition as u32)))
}
