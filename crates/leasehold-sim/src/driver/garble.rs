//! One node cannot decode another's member record for a while (a bad disk sector, a codec
//! bug on its side): it must count that member present, and take nothing it holds.

use std::sync::Arc;

use tokio::time::Instant;

use super::Director;

impl Director {
    /// Picks a reader and a member among the running nodes, for one to three lease
    /// validities.
    pub(super) fn garble(&mut self) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let running: Vec<(usize, leasehold::NodeId)> = state
            .nodes
            .iter()
            .filter(|(_, slot)| slot.is_active())
            .map(|(index, slot)| (*index, slot.name.clone()))
            .collect();
        if running.len() < 2 {
            return;
        }
        let reader = self.rng.below(running.len());
        let member = (reader + 1 + self.rng.below(running.len() - 1)) % running.len();
        let lasting = world
            .timings
            .lease_validity
            .mul_f64(1.0 + 2.0 * self.rng.next_f64());
        let (reader, member) = (running[reader].clone(), running[member].1.clone());
        let text = format!(
            "n{} cannot read {member}'s member record for {:.1}s",
            reader.0,
            lasting.as_secs_f64()
        );
        let until = Instant::now() + lasting;
        state.garbled = Some((reader.0, member, until));
        // Not settled while it lasts: the reader may count the member dead, and balance
        // on the others alone.
        state.recorder.disturbed(Instant::now());
        state.recorder.changed(until);
        state.counts.garbled_members += 1;
        world.event(&mut state, text);
    }
}
