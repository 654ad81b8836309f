//! An operator destroys the group under the running fleet and builds it out again: the
//! destroy is slow (each store call takes a while), so the nodes scan, renew, register
//! again and take while the records go one by one, and `init` creates them again while
//! nodes restart.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{admin, GroupName, LeaseRecord, LeaseStore, PartitionId, PutMode, StoreError};
use tokio::time::Instant;

use super::blind::OperatorStore;
use super::Director;
use crate::world::World;

impl Director {
    /// Starts a destroy and a build-out in the background, through a connection whose every
    /// call takes up to a thirtieth of a heartbeat (less on a large table, so that the
    /// destroy ends within `acquire_after`).
    pub(super) fn rebuild(&mut self) {
        let world = Arc::clone(&self.world);
        // Done well before the faults stop: a destroy makes about two calls per record.
        let calls = 2 * world.config.partitions + 16;
        let longest = (world.timings.acquire_after / calls).min(world.timings.heartbeat / 30);
        let latency = longest.mul_f64(self.rng.next_f64());
        let task = rebuild(Arc::clone(&world), latency);
        let mut state = world.lock();
        world.event(
            &mut state,
            format!(
                "operator destroys the group (calls of {:.3}s), then builds it out",
                latency.as_secs_f64()
            ),
        );
        state.recorder.changed(Instant::now());
        state.counts.rebuilds += 1;
        world.spawn(&mut state, task);
    }
}

async fn rebuild(world: Arc<World>, latency: Duration) {
    let store = OperatorStore {
        store: world.store.clone(),
        blind: false,
        latency,
    };
    let (group, partitions) = (&world.group, world.config.partitions);
    let outcome = if world.config.unsafe_destroy {
        blind_rebuild(&store, group, partitions).await
    } else {
        match admin::destroy(&store, group, admin::Destroy::Force).await {
            Ok(_) => admin::init(&store, group, partitions).await.map(|_| ()),
            Err(error) => Err(error),
        }
        .map_err(|error| error.to_string())
    };
    // A destroy deletes operators' drains with the member records: what the checks expect
    // of each node is what its record says now.
    let members = world.store.list_members(&world.group).await;
    let mut state = world.lock();
    if let Ok(members) = members {
        for slot in state.nodes.values_mut() {
            slot.draining = members
                .records
                .iter()
                .any(|m| m.key == slot.name && m.value.draining);
        }
    }
    let text = match outcome {
        Ok(()) => "operator: group destroyed and built out again".to_owned(),
        Err(error) => format!("operator: rebuild failed: {error}"),
    };
    world.event(&mut state, text);
    state.recorder.changed(Instant::now());
}

/// The negative control: a destroy that neither stops the running nodes nor ends the
/// sessions of what they hold, and a build-out that creates released records, which any
/// node takes at once.
async fn blind_rebuild(
    store: &dyn LeaseStore,
    group: &GroupName,
    partitions: u32,
) -> Result<(), String> {
    let text = |error: StoreError| error.to_string();
    for member in store.list_members(group).await.map_err(text)?.records {
        let _ = store
            .delete_member(group, &member.key, &member.version)
            .await;
    }
    let leases = store.list_leases(group).await.map_err(text)?;
    let floor = leases.records.iter().map(|r| r.value.epoch).max();
    for lease in leases.records {
        let mut current = Some(lease);
        for _ in 0..8 {
            let Some(record) = current.take() else { break };
            match store.delete_lease(group, record.key, &record.version).await {
                Err(StoreError::Conflict { .. }) => {
                    current = store.get_lease(group, record.key).await.map_err(text)?;
                }
                _ => break,
            }
        }
    }
    let record = LeaseRecord {
        epoch: floor.unwrap_or_default(),
        ..LeaseRecord::released()
    };
    for partition in 0..partitions {
        let created = store
            .put_lease(group, PartitionId(partition), &record, PutMode::Create)
            .await;
        match created {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(error) => return Err(error.to_string()),
        }
    }
    Ok(())
}
